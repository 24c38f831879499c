#include "server/cors.h"

#include <algorithm>
#include <cctype>

namespace vkspec::cli {
namespace {

bool any_origin(const std::vector<std::string>& listed) { return std::find(listed.begin(), listed.end(), "*") != listed.end(); }

// scheme://host[:port] with host a loopback name, the port digits only.
bool loopback_origin(std::string_view origin) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (origin.substr(0, scheme.size()) != scheme) continue;
    std::string_view rest = origin.substr(scheme.size());
    for (std::string_view host : {"localhost", "127.0.0.1", "[::1]"}) {
      if (rest.substr(0, host.size()) != host) continue;
      const std::string_view port = rest.substr(host.size());
      if (port.empty()) return true;
      return port.size() >= 2 && port.size() <= 6 && port[0] == ':' &&
             std::all_of(port.begin() + 1, port.end(), [](char c) { return c >= '0' && c <= '9'; });
    }
  }
  return false;
}

// host[:port] whose host is an IPv4 or a bracketed IPv6 literal or localhost.
bool address_host(std::string_view host) {
  const size_t colon = host.rfind(':');
  const bool bracketed = !host.empty() && host[0] == '[';
  std::string_view name = host;
  if (bracketed) name = host.substr(0, host.find(']') == std::string_view::npos ? 0 : host.find(']') + 1);
  else if (colon != std::string_view::npos) name = host.substr(0, colon);
  if (name.empty()) return false;
  if (bracketed) return name.back() == ']' && name.find_first_not_of("[]0123456789abcdefABCDEF:.") == std::string_view::npos;
  if (name == "localhost") return true;
  int dots = 0;
  for (const char c : name) {
    if (c == '.') ++dots;
    else if (c < '0' || c > '9') return false;
  }
  return dots == 3;
}

}  // namespace

bool same_origin_by_address(std::string_view origin, std::string_view host) {
  if (host.empty() || !address_host(host)) return false;
  for (std::string_view scheme : {"http://", "https://"})
    if (origin.substr(0, scheme.size()) == scheme && origin.substr(scheme.size()) == host) return true;
  return false;
}

bool cors_origin_allowed(std::string_view origin, const std::vector<std::string>& listed) {
  if (loopback_origin(origin) || any_origin(listed)) return true;
  return std::find(listed.begin(), listed.end(), origin) != listed.end();
}

std::vector<std::pair<std::string, std::string>> cors_answer_headers(std::string_view origin,
                                                                     const std::vector<std::string>& listed) {
  const bool any = any_origin(listed) && !loopback_origin(origin) &&
                   std::find(listed.begin(), listed.end(), origin) == listed.end();
  return {{"Access-Control-Allow-Origin", any ? "*" : std::string(origin)}, {"Vary", "Origin"}};
}

std::vector<std::pair<std::string, std::string>> cors_preflight_headers(std::string_view origin,
                                                                        std::string_view requested_headers,
                                                                        const std::vector<std::string>& listed) {
  std::string headers;   // the requested ones, as a list of header names (anything else is dropped)
  for (const char c : requested_headers.substr(0, 1024))
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == ',' || c == ' ' || c == '_') headers += c;
  if (headers.find_first_not_of(" ,") == std::string::npos) headers = "Authorization, Content-Type";
  auto h = cors_answer_headers(origin, listed);
  h.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  h.emplace_back("Access-Control-Allow-Headers", headers);
  h.emplace_back("Access-Control-Max-Age", "600");
  return h;
}

}  // namespace vkspec::cli
