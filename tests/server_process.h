// A `vkspec serve` child process on a loopback port for the server tests (tests/test_server.cpp,
// tests/test_server_dialects.cpp), with the client calls they share: a JSON post, a streamed completion read
// event by event, a Prometheus metric, the server's log. Needs VKSPEC_BIN (the vkspec binary) defined.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tests/vk_test_env.h"

namespace vkspec::test {

class ServerProcess {
 public:
  explicit ServerProcess(const std::string& args) {
    log_ = ::testing::TempDir() + "/vkspec-serve-" + std::to_string(getpid()) + "-" + std::to_string(counter_++) + ".log";
    pid_ = fork();
    if (pid_ == 0) {
      // (under the sanitizer job: leak checking off in the child, as run_vkspec does)
      const std::string cmd = std::string("ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0\" exec ") +
                              VKSPEC_BIN + " serve --port 0 " + args + " 2>" + log_;
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    const std::string listening = "listening on http://127.0.0.1:";
    for (int i = 0; i < 600 && port_ == 0; ++i) {   // up to 60 s
      std::ifstream in(log_);
      const std::string text((std::istreambuf_iterator<char>(in)), {});
      const size_t at = text.find(listening);
      if (at != std::string::npos && text.find('\n', at) != std::string::npos) port_ = std::atoi(text.c_str() + at + listening.size());
      else std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (port_ == 0) return;
    for (int i = 0; i < 600; ++i) {
      auto r = client().Get("/health");
      if (r && r->status == 200) return;
      if (r) loading_health_.push_back(nlohmann::json::parse(r->body, nullptr, false));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    port_ = 0;
  }
  ~ServerProcess() { stop(); }
  int stop() {   // SIGTERM; the exit status
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  }
  bool up() const { return port_ != 0; }
  // What /health answered while the model loaded (every 100 ms from the moment the server listened).
  const std::vector<nlohmann::json>& loading_health() const { return loading_health_; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }   // the server's own (the shell execs it)
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(300, 0);
    if (!api_key_.empty()) c.set_bearer_token_auth(api_key_.c_str());
    return c;
  }
  void use_api_key(const std::string& key) { api_key_ = key; }   // for the calls below
  nlohmann::json post(const std::string& path, const nlohmann::json& body, int* status = nullptr) const {
    auto r = client().Post(path.c_str(), body.dump(), "application/json");
    if (!r) return nlohmann::json{{"transport_error", int(r.error())}};
    if (status) *status = r->status;
    return nlohmann::json::parse(r->body, nullptr, false);
  }
  // A streamed completion's text (a chat's: its content deltas), its finish reason and the number of data events.
  struct Streamed {
    std::string text, finish, error;
    int events = 0;
    bool done = false;
    nlohmann::json logprobs = nlohmann::json::array();     // the chunks' logprobs objects (completions)
    nlohmann::json tool_calls = nlohmann::json::array();   // the chunks' tool-call deltas (chat)
  };
  Streamed stream(const nlohmann::json& body, const char* path = "/v1/completions") const {
    Streamed s;
    std::string buf;
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
                             buf.append(data, n);
                             for (size_t at; (at = buf.find("\n\n")) != std::string::npos; buf.erase(0, at + 2)) {
                               const std::string ev = buf.substr(0, at);
                               if (ev.rfind("data: ", 0) != 0) continue;
                               const std::string payload = ev.substr(6);
                               s.events++;
                               if (payload == "[DONE]") { s.done = true; continue; }
                               const nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
                               if (!j.contains("choices") || j["choices"].empty()) continue;
                               const nlohmann::json& c = j["choices"][0];
                               s.text += c.contains("delta") ? c["delta"].value("content", "") : c.value("text", "");
                               if (c.contains("delta") && c["delta"].contains("tool_calls"))
                                 for (const nlohmann::json& t : c["delta"]["tool_calls"]) s.tool_calls.push_back(t);
                               if (j["choices"][0].contains("logprobs") && j["choices"][0]["logprobs"].is_object())
                                 s.logprobs.push_back(j["choices"][0]["logprobs"]);
                               if (!j["choices"][0]["finish_reason"].is_null()) s.finish = j["choices"][0]["finish_reason"];
                             }
                             return true;
                           };
    auto r = client().send(req);
    if (!r) s.error = "transport error " + std::to_string(int(r.error()));
    else if (r->status != 200) s.error = "HTTP " + std::to_string(r->status) + " " + buf;
    return s;
  }
  double metric(const std::string& name) const {
    auto r = client().Get("/metrics");
    if (!r) return -1;
    const std::string key = "\nvkspec_" + name + " ";
    const size_t at = r->body.find(key);
    return at == std::string::npos ? -1 : std::strtod(r->body.c_str() + at + key.size(), nullptr);
  }
  std::string log() const {
    std::ifstream in(log_);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }

 private:
  std::vector<nlohmann::json> loading_health_;
  static inline int counter_ = 0;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_, api_key_;
};

// The pycode target at a context of 256.
inline std::string model_arg() { return "-m " + shared_path("models/pycode-target-f16.gguf") + " --ctx 256"; }

}  // namespace vkspec::test
