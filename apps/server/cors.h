#pragma once
// Which browser pages may call `vkspec serve` (CORS): as Ollama, pages served from this machine's loopback
// (http or https on localhost, 127.0.0.1 or [::1], any port) and the origins --cors-origin lists ("*": any).
// A request that carries another Origin is refused (403) before it runs: a page cannot make the server
// generate for it even where the browser would hide the answer. No credentials mode is ever allowed, so "*"
// is sent only as "*".
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vkspec::cli {

bool cors_origin_allowed(std::string_view origin, const std::vector<std::string>& listed);

// The server's own page calling it (the chat page at /, opened as http://192.168.1.5:8080/): the Origin is
// the request's Host, and that host is an address or localhost. A domain name is not enough: a page of
// evil.example whose name was rebound to this machine's address would pass that test (DNS rebinding).
bool same_origin_by_address(std::string_view origin, std::string_view host);

// The headers of a preflight's answer (OPTIONS with Origin and Access-Control-Request-*), for an allowed origin:
// the methods the API has, the headers the page asked for (token characters only), a 10-minute cache.
std::vector<std::pair<std::string, std::string>> cors_preflight_headers(std::string_view origin,
                                                                        std::string_view requested_headers,
                                                                        const std::vector<std::string>& listed);
// Access-Control-Allow-Origin for an allowed origin's answer ("*" when any origin is listed), and Vary.
std::vector<std::pair<std::string, std::string>> cors_answer_headers(std::string_view origin,
                                                                     const std::vector<std::string>& listed);

}  // namespace vkspec::cli
