// `vkspec serve`'s HTTP layer under attack and from browsers, over loopback (the layer alone, in process:
// tests/test_http_server.cpp): slow, flooding and pipelining clients beside a completion that keeps its exact
// tokens; CORS preflights and requests from allowed and refused origins; /health while loading, a model by
// id and the error shapes of each API.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/raw_http.h"
#include "tests/server_process.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {
using json = nlohmann::json;

// The HTTP layer's attacks against the real server (the layer alone: tests/test_http_server.cpp): 200
// connections trickling header lines, 4 floods of 25 MB of headers and 4 chunked bodies of 16 MB (over
// --max-body) at once. A completion beside them gets its exact tokens within seconds, the server's resident
// memory grows by less than 64 MiB, the slow connections are closed at --timeout, and two completions
// pipelined on one connection are both answered, in order.
TEST(Server, AttacksOnTheHttpLayerLeaveOthersTheirTokens) {
  ServerProcess s(model_arg() + " --parallel 2 --prompt-cache 0 --timeout 2 --max-body 65536");
  ASSERT_TRUE(s.up()) << s.log();
  const json request = {{"prompt", "def f(x):\n"}, {"max_tokens", 12}, {"temperature", 0}};
  const json want = s.post("/v1/completions", request);
  ASSERT_TRUE(want.contains("choices")) << want.dump();
  const size_t rss0 = raw_http::resident_bytes_of(s.pid());
  std::vector<int> slow;
  for (int i = 0; i < 200; ++i) {
    slow.push_back(raw_http::connect_to(s.port()));
    raw_http::send_all(slow.back(), "POST /v1/completions HTTP/1.1\r\n");
  }
  std::atomic<bool> attacking{true};
  std::vector<std::string> refused(8);
  std::vector<std::thread> attacks;
  attacks.emplace_back([&] {
    for (int round = 0; attacking && round < 30; ++round) {
      for (const int fd : slow) raw_http::send_all(fd, "X-Slow: " + std::to_string(round) + "\r\n");
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });
  for (int c = 0; c < 8; ++c)
    attacks.emplace_back([&, c] {
      const int fd = raw_http::connect_to(s.port());
      std::string block;
      if (c < 4) {   // headers
        raw_http::send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n");
        for (int i = 0; i < 100; ++i) block += "X-Flood: " + std::string(1000, 'a') + "\r\n";
      } else {       // a chunked body
        raw_http::send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
        block = "10000\r\n" + std::string(0x10000, ' ') + "\r\n";
      }
      for (int i = 0; i < 250 && raw_http::send_all(fd, block); ++i) {
      }
      refused[c] = raw_http::read_until_closed(fd, std::chrono::milliseconds(5000));
      close(fd);
    });
  const auto t0 = std::chrono::steady_clock::now();
  const json beside = s.post("/v1/completions", request);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_EQ(beside["choices"][0]["text"], want["choices"][0]["text"]) << beside.dump();
  for (size_t i = 1; i < attacks.size(); ++i) attacks[i].join();
  for (int c = 0; c < 8; ++c) EXPECT_EQ(refused[c].substr(0, 12), c < 4 ? "HTTP/1.1 431" : "HTTP/1.1 413") << refused[c].substr(0, 300);
  EXPECT_LT(raw_http::resident_bytes_of(s.pid()), rss0 + (64u << 20));
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));   // past --timeout
  attacking = false;
  attacks[0].join();
  int closed = 0;
  for (const int fd : slow) {
    bool timed_out = false;
    raw_http::read_until_closed(fd, std::chrono::milliseconds(100), &timed_out);
    closed += !timed_out;
    close(fd);
  }
  EXPECT_EQ(closed, 200);
  const std::string body = request.dump();
  const std::string one = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n";
  const std::string both = raw_http::exchange(s.port(), one + "\r\n" + body + one + "Connection: close\r\n\r\n" + body, std::chrono::milliseconds(30000));
  const std::string text = json(want["choices"][0]["text"]).dump();
  const size_t first = both.find(text);
  ASSERT_NE(first, std::string::npos) << both;
  EXPECT_NE(both.find(text, first + text.size()), std::string::npos) << both;
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// CORS (apps/server/cors.h): a page on loopback or of a --cors-origin may call the server: its preflight gets a
// 204 with the origin, the methods and the headers it asked for (answered before the API key, which browsers
// do not send with it), and its answers, errors too, name the origin. Any other origin gets a 403, preflight
// or not, and its request does not run; a request without an Origin (curl, the client libraries) is as before.
TEST(Server, CorsAllowsLoopbackPagesAndListedOrigins) {
  ServerProcess s(model_arg() + " --parallel 1 --api-key k3y --cors-origin https://app.example");
  ASSERT_TRUE(s.up()) << s.log();
  s.use_api_key("k3y");
  const auto preflight = [&](const std::string& origin) {
    return raw_http::exchange(s.port(), "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nOrigin: " + origin +
                                            "\r\nAccess-Control-Request-Method: POST\r\n"
                                            "Access-Control-Request-Headers: authorization, content-type\r\n\r\n");
  };
  for (const std::string origin : {"http://localhost:5173", "http://127.0.0.1", "https://[::1]:8443", "https://app.example"}) {
    const std::string r = preflight(origin);
    EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 204") << origin << "\n" << r;
    EXPECT_NE(r.find("Access-Control-Allow-Origin: " + origin + "\r\n"), std::string::npos) << r;
    EXPECT_NE(r.find("Access-Control-Allow-Headers: authorization, content-type\r\n"), std::string::npos) << r;
    EXPECT_NE(r.find("Access-Control-Allow-Methods: GET, POST, OPTIONS\r\n"), std::string::npos) << r;
    EXPECT_EQ(r.find("Access-Control-Allow-Credentials"), std::string::npos) << r;
  }
  const double requests0 = s.metric("requests_total");
  for (const std::string origin : {"https://evil.example", "http://localhost.evil.example", "http://127.0.0.1.evil:80", "null"}) {
    const std::string r = preflight(origin);
    EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 403") << origin << "\n" << r;
    EXPECT_EQ(r.find("Access-Control-Allow-Origin"), std::string::npos) << r;
  }
  const std::string body = R"({"prompt": "def f(x):", "max_tokens": 2, "temperature": 0})";
  const auto post = [&](const std::string& origin, const std::string& key) {
    return raw_http::exchange(s.port(), "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" +
                                            (origin.empty() ? "" : "Origin: " + origin + "\r\n") +
                                            (key.empty() ? "" : "Authorization: Bearer " + key + "\r\n") +
                                            "Content-Type: application/json\r\nContent-Length: " +
                                            std::to_string(body.size()) + "\r\n\r\n" + body,
                              std::chrono::milliseconds(30000));
  };
  const std::string allowed = post("http://localhost:3000", "k3y");
  EXPECT_EQ(allowed.substr(0, 15), "HTTP/1.1 200 OK") << allowed;
  EXPECT_NE(allowed.find("Access-Control-Allow-Origin: http://localhost:3000\r\n"), std::string::npos) << allowed;
  const std::string unauthorized = post("https://app.example", "");
  EXPECT_EQ(unauthorized.substr(0, 12), "HTTP/1.1 401") << unauthorized;
  EXPECT_NE(unauthorized.find("Access-Control-Allow-Origin: https://app.example\r\n"), std::string::npos) << unauthorized;
  const std::string refused = post("https://evil.example", "k3y");
  EXPECT_EQ(refused.substr(0, 12), "HTTP/1.1 403") << refused;
  EXPECT_NE(refused.find("--cors-origin"), std::string::npos) << refused;
  // the server's own page opened by address (a LAN address in Host and Origin) may call it; a domain name
  // in both is what a DNS-rebinding page sends, and is refused
  const auto own_page = [&](const std::string& host) {
    return raw_http::exchange(s.port(), "GET /v1/models HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\nOrigin: http://" +
                                            host + "\r\nAuthorization: Bearer k3y\r\n\r\n");
  };
  EXPECT_EQ(own_page("192.168.1.5:8080").substr(0, 15), "HTTP/1.1 200 OK");
  EXPECT_EQ(own_page("[fd00::5]:8080").substr(0, 15), "HTTP/1.1 200 OK");
  EXPECT_EQ(own_page("rebound.example:8080").substr(0, 12), "HTTP/1.1 403");
  const std::string plain = post("", "k3y");
  EXPECT_EQ(plain.substr(0, 15), "HTTP/1.1 200 OK") << plain;
  EXPECT_EQ(plain.find("Access-Control-Allow-Origin"), std::string::npos) << plain;
  EXPECT_EQ(s.metric("requests_total") - requests0, 2) << "only the allowed page's and the plain request ran";
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// /health says how far the weights are while the model loads (503, then 200); /v1/models/{id} (percent-escapes
// decoded) answers the one model and a model_not_found 404 for others; errors under /api/ come in Ollama's
// shape ({"error": "..."}: its client prints only that), elsewhere in OpenAI's, also for an unknown path.
TEST(Server, LoadProgressModelByIdAndErrorShapes) {
  ServerProcess s(model_arg() + " --parallel 1");
  ASSERT_TRUE(s.up()) << s.log();
  ASSERT_FALSE(s.loading_health().empty()) << "the pipelines' warm-up alone takes longer than one poll";
  double last = 0;
  for (const json& h : s.loading_health()) {
    EXPECT_EQ(h["status"], "loading") << h.dump();
    ASSERT_TRUE(h.contains("progress")) << h.dump();
    const double p = h["progress"].get<double>();
    EXPECT_GE(p, last) << h.dump();
    EXPECT_LE(p, 1.0);
    last = p;
  }
  httplib::Client c = s.client();
  auto model = c.Get("/v1/models/pycode-target-f16.gguf");
  ASSERT_TRUE(model);
  EXPECT_EQ(model->status, 200) << model->body;
  EXPECT_EQ(json::parse(model->body)["id"], "pycode-target-f16.gguf");
  EXPECT_EQ(json::parse(model->body)["object"], "model");
  auto escaped = c.Get("/v1/models/pycode-target-f16%2Egguf");
  ASSERT_TRUE(escaped);
  EXPECT_EQ(escaped->status, 200) << escaped->body;
  auto other = c.Get("/v1/models/gpt-4o");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  EXPECT_EQ(json::parse(other->body)["error"]["code"], "model_not_found") << other->body;
  struct Case {
    const char* method;
    std::string path, body;
    int status;
  };
  const std::vector<Case> cases = {
      {"POST", "/api/generate", R"({"model": 5, "prompt": "x"})", 400},
      {"POST", "/api/chat", "{not json", 400},
      {"POST", "/api/show", R"({"model": "llama3"})", 404},
      {"GET", "/api/pull", "", 404},
      {"GET", "/api/generate", "", 405},
      {"POST", "/v1/completions", R"({"prompt": 5})", 400},
      {"GET", "/v1/nothing", "", 404},
  };
  for (const Case& k : cases) {
    auto r = std::string(k.method) == "GET" ? c.Get(k.path) : c.Post(k.path, k.body, "application/json");
    ASSERT_TRUE(r) << k.path;
    EXPECT_EQ(r->status, k.status) << k.path << ": " << r->body;
    const json body = json::parse(r->body, nullptr, false);
    if (k.path.rfind("/api/", 0) == 0) {
      EXPECT_TRUE(body["error"].is_string()) << k.path << ": " << r->body;
    } else {
      EXPECT_TRUE(body["error"]["message"].is_string()) << k.path << ": " << r->body;
    }
  }
  EXPECT_EQ(s.stop(), 0) << s.log();
}

}  // namespace
}  // namespace vkspec::test
