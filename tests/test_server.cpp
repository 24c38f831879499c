// `vkspec serve` over loopback (its protocol layers alone: tests/test_server_api.cpp): 32 concurrent streams
// whose tokens must equal each prompt's run alone (plain, n-gram and draft-model speculation); a burst of
// malformed requests and abrupt disconnects after which the server is healthy, correct and holds no KV
// block; n = 4 prefilling its prompt once; the API key; tool calls; llama-server's utilities; the official
// `openai` and `ollama` npm clients.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tests/run_command.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {
using json = nlohmann::json;

// ---- the running server ----

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
  int port() const { return port_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(300, 0);
    return c;
  }
  json post(const std::string& path, const json& body, int* status = nullptr) const {
    auto r = client().Post(path.c_str(), body.dump(), "application/json");
    if (!r) return json{{"transport_error", int(r.error())}};
    if (status) *status = r->status;
    return json::parse(r->body, nullptr, false);
  }
  // A streamed completion's text (a chat's: its content deltas), its finish reason and the number of data events.
  struct Streamed {
    std::string text, finish, error;
    int events = 0;
    bool done = false;
    json logprobs = json::array();     // the chunks' logprobs objects (completions)
    json tool_calls = json::array();   // the chunks' tool-call deltas (chat)
  };
  Streamed stream(const json& body, const char* path = "/v1/completions") const {
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
                               const json j = json::parse(payload, nullptr, false);
                               if (!j.contains("choices") || j["choices"].empty()) continue;
                               const json& c = j["choices"][0];
                               s.text += c.contains("delta") ? c["delta"].value("content", "") : c.value("text", "");
                               if (c.contains("delta") && c["delta"].contains("tool_calls"))
                                 for (const json& t : c["delta"]["tool_calls"]) s.tool_calls.push_back(t);
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
  static inline int counter_ = 0;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_;
};

std::string model_arg() { return "-m " + shared_path("models/pycode-target-f16.gguf") + " --ctx 256"; }

std::vector<std::string> load_prompts() {
  const char* stems[] = {"def ", "class ", "import ", "for ", "with ", "    return ", "if __name__", "# "};
  std::vector<std::string> p;
  for (int i = 0; i < 32; ++i) p.push_back(std::string(stems[i % 8]) + "item_" + std::to_string(i) + (i % 3 ? "(x):\n" : " = "));
  return p;
}

// Each prompt alone (one request at a time): the reference the batched runs must equal.
std::vector<std::string> solo_texts(const ServerProcess& s, const std::vector<std::string>& prompts) {
  std::vector<std::string> out;
  for (const auto& p : prompts) {
    const json r = s.post("/v1/completions", {{"prompt", p}, {"max_tokens", 12}, {"temperature", 0}});
    out.push_back(r["choices"][0]["text"]);
  }
  return out;
}

void expect_concurrent_streams_equal(const ServerProcess& s, const std::vector<std::string>& prompts,
                                     const std::vector<std::string>& want, const char* what) {
  std::vector<ServerProcess::Streamed> got(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i)
    threads.emplace_back([&, i] {
      got[i] = s.stream({{"prompt", prompts[i]}, {"max_tokens", 12}, {"temperature", 0}, {"stream", true}});
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_TRUE(got[i].done) << what << " " << i << ": " << got[i].error;
    EXPECT_EQ(got[i].text, want[i]) << what << " prompt " << i;
    EXPECT_FALSE(got[i].finish.empty()) << what << " " << i;
  }
}

// Idle with every KV block back in the pool (servers started with --prompt-cache 0: a cache keeps blocks).
bool wait_idle(const ServerProcess& s) {
  for (int i = 0; i < 300; ++i) {
    if (s.metric("requests_active") == 0 && s.metric("requests_queued") == 0 && s.metric("kv_blocks_in_use") == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// Opens a raw connection and sends a streamed completion request on it; returns the socket, unread.
int raw_stream_request(int port, const std::string& body) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    (void)!write(fd, req.data(), req.size());
  }
  return fd;
}

// A client that never reads its stream.
int stalled_stream(int port, int max_tokens) {
  return raw_stream_request(port, R"({"prompt": "import os\n", "stream": true, "max_tokens": )" + std::to_string(max_tokens) + "}");
}

// A client that reads a little of its stream and leaves.
void disconnect_mid_stream(int port) {
  const int fd = raw_stream_request(port, R"({"prompt": "def f(x):\n", "max_tokens": 200, "stream": true, "temperature": 0})");
  char buf[300];
  (void)!read(fd, buf, sizeof buf);
  close(fd);
}

TEST(Server, ConcurrentStreamsGetTheirSoloTokensAndSurviveHostileClients) {
  const std::vector<std::string> prompts = load_prompts();
  ServerProcess plain(model_arg() + " --parallel 8 --max-body 65536 --prompt-cache 0");
  ASSERT_TRUE(plain.up()) << plain.log();
  const std::vector<std::string> want = solo_texts(plain, prompts);
  for (const auto& w : want) ASSERT_FALSE(w.empty());
  expect_concurrent_streams_equal(plain, prompts, want, "plain");

  // Hostile: malformed JSON, a body over --max-body, wrong types, unknown model, abrupt disconnects.
  httplib::Client c = plain.client();
  for (const char* body : {"{", "nul", "{\"prompt\": }", "[]", "{\"prompt\": \"x\", \"n\": \"two\"}", "\xff\xfe"}) {
    auto r = c.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << body;
    EXPECT_TRUE(json::parse(r->body, nullptr, false).contains("error")) << r->body;
  }
  auto big = c.Post("/v1/completions", "{\"prompt\": \"" + std::string(100000, 'a') + "\"}", "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  EXPECT_TRUE(json::parse(big->body, nullptr, false).contains("error"));
  int status = 0;
  plain.post("/v1/completions", {{"prompt", "x"}, {"model", "gpt-4"}}, &status);
  EXPECT_EQ(status, 404);
  plain.post("/v1/chat/completions", {{"messages", "hi"}}, &status);
  EXPECT_EQ(status, 400);
  auto unknown = c.Get("/v2/nothing");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  // A client that never reads its stream does not hold up anyone else.
  const int stalled = stalled_stream(plain.port(), 200);
  const json beside = plain.post("/v1/completions", {{"prompt", prompts[2]}, {"max_tokens", 12}, {"temperature", 0}});
  EXPECT_EQ(beside["choices"][0]["text"], want[2]);
  close(stalled);
  EXPECT_TRUE(wait_idle(plain));
  const double generated0 = plain.metric("generated_tokens_total");
  std::vector<std::thread> leavers;
  for (int i = 0; i < 6; ++i) leavers.emplace_back([&] { disconnect_mid_stream(plain.port()); });
  for (auto& t : leavers) t.join();
  EXPECT_TRUE(wait_idle(plain)) << "sequences or KV blocks left behind after disconnects";
  // Each left after its first event: its sequence was cancelled long before its 200 tokens.
  EXPECT_LT(plain.metric("generated_tokens_total") - generated0, 6 * 100);
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const json again = plain.post("/v1/completions", {{"prompt", prompts[0]}, {"max_tokens", 12}, {"temperature", 0}});
  EXPECT_EQ(again["choices"][0]["text"], want[0]);
  EXPECT_GE(plain.metric("http_client_errors_total"), 10);

  // Stop strings cut the text (also inside a token) and finish with "stop".
  const std::string stop = want[1].substr(want[1].size() / 2, 3);
  const json stopped = plain.post("/v1/completions", {{"prompt", prompts[1]}, {"max_tokens", 12}, {"temperature", 0}, {"stop", stop}});
  EXPECT_EQ(stopped["choices"][0]["text"], want[1].substr(0, want[1].find(stop)));
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");

  // n = 4 on a long prompt: the prompt is prefilled once, the others share its blocks.
  std::string long_prompt;
  for (int i = 0; i < 20; ++i) long_prompt += "    total_" + std::to_string(i) + " += values[" + std::to_string(i) + "]\n";
  const double prefilled0 = plain.metric("prompt_tokens_prefilled_total"), alloc0 = plain.metric("kv_blocks_allocated_total");
  const json four = plain.post("/v1/completions", {{"prompt", long_prompt}, {"max_tokens", 4}, {"n", 4}, {"seed", 1}});
  ASSERT_EQ(four["choices"].size(), 4u) << four.dump();
  const double L = four["usage"]["prompt_tokens"].get<double>();
  ASSERT_GT(L, 150);
  EXPECT_EQ(plain.metric("prompt_tokens_prefilled_total") - prefilled0, L + 3);
  EXPECT_LE(plain.metric("kv_blocks_allocated_total") - alloc0, std::ceil(L / 16) + 3 * 2 + 1);
  EXPECT_EQ(four["vkspec"]["choices"][3]["shared_prompt_tokens"], L - 1);
  EXPECT_TRUE(wait_idle(plain));
  EXPECT_EQ(plain.stop(), 0) << plain.log();

  // Speculation per sequence: the same 32 streams, the same tokens. (Under the sanitizer job, whose binary is
  // several times slower, the n-gram server only: the batch engine's speculation runs under ASan in
  // test_batch_engine.)
#ifdef VKSPEC_SANITIZED
  const std::vector<std::string> drafts = {"--draft ngram"};
#else
  const std::vector<std::string> drafts = {"--draft ngram", "-md " + shared_path("models/pycode-draft-f16.gguf")};
#endif
  for (const std::string& draft : drafts) {
    ServerProcess spec(model_arg() + " --parallel 8 --prompt-cache 0 " + draft);
    ASSERT_TRUE(spec.up()) << spec.log();
    expect_concurrent_streams_equal(spec, prompts, want, draft.c_str());
    EXPECT_GT(spec.metric("draft_tokens_total"), 0) << draft;
    EXPECT_TRUE(wait_idle(spec));
    if (draft.rfind("-md", 0) == 0) {   // the draft model's pool: used, and every block back once idle
      EXPECT_GT(spec.metric("draft_kv_blocks_total"), 0);
      EXPECT_GT(spec.metric("draft_kv_blocks_allocated_total"), 0);
      EXPECT_EQ(spec.metric("draft_kv_blocks_in_use"), 0);
    } else {
      EXPECT_EQ(spec.metric("draft_kv_blocks_total"), 0) << draft;
    }
  }
}

// JSON mode (response_format json_object): every choice is a JSON object for nlohmann's parser when it ends
// by itself, a prefix of one when max_tokens cuts it; greedy requests sent together (one batched step) give
// the texts they give alone; with prompt lookup (which JSON mode speculates with) and with a draft model (which
// it does not) the same texts again. A GBNF grammar (llama.cpp's `grammar` field) gives a sentence of it; one
// that does not parse is a 400 naming the problem; a JSON schema (response_format json_schema) a value of it,
// an unsupported keyword a 400 naming it.
namespace {
void expect_json_object_or_prefix(const std::string& text, const std::string& finish) {
  if (finish == "stop") {
    json doc;
    ASSERT_NO_THROW(doc = json::parse(text)) << text;
    EXPECT_TRUE(doc.is_object()) << text;
    return;
  }
  EXPECT_EQ(finish, "length");
  try {
    const json whole = json::parse(text);
    ADD_FAILURE() << "a cut-off text parses whole: " << whole.dump();
  } catch (const json::parse_error& e) {
    EXPECT_EQ(e.byte, text.size() + 1) << "not a prefix of a JSON document: " << e.what() << "\n" << text;
  }
}
}  // namespace

TEST(Server, JsonModeAndGrammarsConstrainCompletions) {
  const std::vector<std::string> prompts = {"CONFIG = ", "def get_config():\n    return ", "x = [", "data = json.loads("};
  const auto body = [](const std::string& p) {
    return json{{"prompt", p}, {"max_tokens", 48}, {"temperature", 0}, {"response_format", {{"type", "json_object"}}}};
  };
  std::vector<std::string> solo;
  {
    ServerProcess s(model_arg() + " --parallel 4 --prompt-cache 0");
    ASSERT_TRUE(s.up()) << s.log();
    int stopped = 0;
    for (const std::string& p : prompts) {
      const json r = s.post("/v1/completions", body(p));
      ASSERT_TRUE(r.contains("choices")) << r.dump();
      const std::string text = r["choices"][0]["text"], finish = r["choices"][0]["finish_reason"];
      expect_json_object_or_prefix(text, finish);
      stopped += finish == "stop";
      solo.push_back(text);
    }
    EXPECT_GE(stopped, 1);
    // a GBNF grammar (llama.cpp's `grammar`): the text is a sentence of it; one that does not parse is a 400
    json g = body(prompts[0]);
    g.erase("response_format");
    g["grammar"] = "root ::= (\"- \" [a-z ]+ \"\\n\"){2}\n";
    const json gr = s.post("/v1/completions", g);
    ASSERT_TRUE(gr.contains("choices")) << gr.dump();
    const std::string gtext = gr["choices"][0]["text"];
    EXPECT_EQ(gr["choices"][0]["finish_reason"], "stop") << gtext;
    EXPECT_EQ(std::count(gtext.begin(), gtext.end(), '\n'), 2) << gtext;
    EXPECT_EQ(gtext.rfind("- ", 0), 0u) << gtext;
    g["grammar"] = "root ::= item\n";
    int status = 0;
    const json bad_grammar = s.post("/v1/completions", g, &status);
    EXPECT_EQ(status, 400);
    EXPECT_NE(bad_grammar.dump().find("'item' is used but not defined"), std::string::npos) << bad_grammar.dump();
    // a JSON schema (response_format json_schema): a value of it; an unsupported keyword is a 400 naming it
    json js = body(prompts[0]);
    js["response_format"] = {{"type", "json_schema"},
                             {"json_schema", {{"name", "cfg"}, {"strict", true},
                                              {"schema", {{"type", "object"},
                                                          {"properties", {{"id", {{"type", "integer"}}},
                                                                          {"ok", {{"type", "boolean"}}}}},
                                                          {"required", {"id", "ok"}}}}}}};
    const json jr = s.post("/v1/completions", js);
    ASSERT_TRUE(jr.contains("choices")) << jr.dump();
    if (jr["choices"][0]["finish_reason"] == "stop") {
      const json v = json::parse(jr["choices"][0]["text"].get<std::string>());
      EXPECT_TRUE(v["id"].is_number_integer() && v["ok"].is_boolean() && v.size() == 2) << v.dump();
    }
    js["response_format"]["json_schema"]["schema"]["properties"]["id"]["multipleOf"] = 2;
    const json bad_schema = s.post("/v1/completions", js, &status);
    EXPECT_EQ(status, 400);
    EXPECT_NE(bad_schema.dump().find("'multipleOf' is not supported"), std::string::npos) << bad_schema.dump();
    // together, in one batch
    std::vector<std::string> together(prompts.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < prompts.size(); ++i)
      threads.emplace_back([&, i] { together[i] = s.post("/v1/completions", body(prompts[i]))["choices"][0]["text"]; });
    for (auto& t : threads) t.join();
    EXPECT_EQ(together, solo);
    // sampled choices (n = 3; each choice its own seed)
    json sampled = body(prompts[0]);
    sampled["temperature"] = 0.9;
    sampled["seed"] = 11;
    sampled["n"] = 3;
    const json r = s.post("/v1/completions", sampled);
    ASSERT_EQ(r["choices"].size(), 3u) << r.dump();
    for (const json& c : r["choices"]) expect_json_object_or_prefix(c["text"], c["finish_reason"]);
  }
  for (const std::string& draft : {std::string("--draft ngram"), "-md " + shared_path("models/pycode-draft-f16.gguf")}) {
    ServerProcess spec(model_arg() + " --parallel 4 --prompt-cache 0 " + draft);
    ASSERT_TRUE(spec.up()) << spec.log();
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(spec.post("/v1/completions", body(prompts[i]))["choices"][0]["text"], solo[i]) << prompts[i] << draft;
    if (draft == "--draft ngram") EXPECT_GT(spec.metric("draft_tokens_accepted_total"), 0);
    else EXPECT_EQ(spec.metric("draft_tokens_total"), 0);
  }
}

// Completions' legacy logprobs: a token list whose texts make the completion, the chosen token's
// log-probability, the alternatives (the chosen one among them: the most likely when greedy), byte offsets;
// streamed, the chunks' pieces make the same lists.
TEST(Server, CompletionLogprobsInTheLegacyFormat) {
  ServerProcess s(model_arg() + " --parallel 1");
  ASSERT_TRUE(s.up()) << s.log();
  const json body = {{"prompt", "def f(x):"}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 2}, {"ignore_eos", true}};
  auto r = s.client().Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json c = json::parse(r->body)["choices"][0];
  const json& lp = c["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 6u) << r->body;
  std::string joined;
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(lp["text_offset"][i].get<size_t>(), joined.size());
    const std::string tok = lp["tokens"][i];
    joined += tok;
    const double chosen = lp["token_logprobs"][i];
    EXPECT_LE(chosen, 0.0);
    const json& top = lp["top_logprobs"][i];
    EXPECT_GE(top.size(), 1u);
    EXPECT_LE(top.size(), 3u);   // two alternatives and the chosen token (which is one of them here)
    ASSERT_TRUE(top.contains(tok)) << top.dump();
    for (const auto& [text, v] : top.items()) EXPECT_LE(v.get<double>(), chosen) << text;   // greedy: the likeliest
  }
  EXPECT_EQ(joined, c["text"]);
  json streamed_body = body;
  streamed_body["stream"] = true;
  const ServerProcess::Streamed st = s.stream(streamed_body);
  ASSERT_TRUE(st.error.empty()) << st.error;
  EXPECT_EQ(st.text, c["text"]);
  json tokens = json::array(), offsets = json::array();
  for (const json& chunk : st.logprobs) {
    for (const json& t : chunk["tokens"]) tokens.push_back(t);
    for (const json& o : chunk["text_offset"]) offsets.push_back(o);
  }
  EXPECT_EQ(tokens, lp["tokens"]);
  EXPECT_EQ(offsets, lp["text_offset"]);
}

TEST(Server, ApiKeyChatTemplateAndLogprobs) {
  ServerProcess s(model_arg() + " --parallel 2 --api-key s3cret --chat-template " +
                  shared_path("chat-templates/meta-llama-Llama-3.2-3B-Instruct.jinja"));
  ASSERT_TRUE(s.up()) << s.log();
  httplib::Client c = s.client();
  auto r = c.Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "invalid_api_key");
  r = c.Get("/v1/models", {{"Authorization", "Bearer s3cre"}});
  EXPECT_EQ(r->status, 401);
  c.set_bearer_token_auth("s3cret");
  r = c.Get("/v1/models");
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["data"][0]["id"], "pycode-target-f16.gguf");
  const json body = {{"messages", {{{"role", "user"}, {"content", "Write a loop."}}}}, {"max_tokens", 6}, {"temperature", 0},
                     {"logprobs", true}, {"top_logprobs", 3}};
  r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  const json& entries = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(entries.size(), 6u) << r->body;
  std::string joined;
  for (const json& e : entries) {
    joined += e["token"].get<std::string>();
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);   // greedy: the chosen token is the most likely
    EXPECT_EQ(e["top_logprobs"][0]["logprob"], e["logprob"]);
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
  }
  EXPECT_EQ(joined, j["choices"][0]["message"]["content"]);
  // logit_bias reaches the sampler: +100 on one token makes a greedy completion that token four times
  const json biased = {{"prompt", "def f():"}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true},
                       {"logit_bias", {{"100", 100}}}};
  r = c.Post("/v1/completions", biased.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string text = json::parse(r->body)["choices"][0]["text"];
  ASSERT_EQ(text.size() % 4, 0u) << text;
  const std::string piece = text.substr(0, text.size() / 4);
  EXPECT_FALSE(piece.empty());
  EXPECT_EQ(text, piece + piece + piece + piece);
  // The next turn of the conversation (the whole of it resent, as clients do) shares the first turn's KV
  // from the prompt cache: at least that turn's prompt tokens are not prefilled again.
  const std::string reply = j["choices"][0]["message"]["content"];
  const json turn2 = {{"messages", {{{"role", "user"}, {"content", "Write a loop."}},
                                    {{"role", "assistant"}, {"content", reply}},
                                    {{"role", "user"}, {"content", "Now in reverse."}}}},
                      {"max_tokens", 4}, {"temperature", 0}};
  r = c.Post("/v1/chat/completions", turn2.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j2 = json::parse(r->body);
  EXPECT_GE(j2["vkspec"]["choices"][0]["shared_prompt_tokens"].get<int>(), j["usage"]["prompt_tokens"].get<int>())
      << j2.dump();
  r = c.Get("/metrics");   // (behind the API key too)
  ASSERT_TRUE(r);
  EXPECT_NE(r->body.find("\nvkspec_prompt_cache_sequences "), std::string::npos);
  EXPECT_EQ(r->body.find("\nvkspec_prompt_cache_sequences 0\n"), std::string::npos) << "nothing cached";
  // A second server on the same port is refused before it loads anything.
  const Result twice = run_vkspec(VKSPEC_BIN, "serve " + model_arg() + " --port " + std::to_string(s.port()));
  EXPECT_NE(twice.code, 0);
  EXPECT_NE(twice.err.find("cannot listen on 127.0.0.1:" + std::to_string(s.port())), std::string::npos) << twice.err;
  EXPECT_EQ(s.stop(), 0);
}

// Tool calls with the Llama 3.2 template: every sampled call with tool_choice "required" names a tool and
// carries arguments its schema accepts (checked here by hand); "auto" with this code model (which does not
// begin a reply like a call) answers text, the same streamed (held back while it may become a call) and not;
// a tool's result continues the conversation.
TEST(Server, ToolCallsFollowTheirSchemas) {
  ServerProcess s("-m " + shared_path("models/pycode-target-f16.gguf") + " --ctx 640 --parallel 3 --prompt-cache 0 " +
                  "--chat-template " + shared_path("chat-templates/meta-llama-Llama-3.2-3B-Instruct.jinja"));
  ASSERT_TRUE(s.up()) << s.log();
  const json tools = json::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
          "type": "object", "properties": {"city": {"type": "string", "maxLength": 10}, "days": {"type": "integer"}},
          "required": ["city", "days"]}}},
      {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
          "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}])");
  const json ask = {{{"role", "user"}, {"content", "What is the weather in Paris?"}}};
  int status = 0;
  const json r = s.post("/v1/chat/completions", {{"messages", ask}, {"tools", tools}, {"tool_choice", "required"},
                                                 {"n", 3}, {"temperature", 1.0}, {"seed", 5}, {"max_tokens", 250}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["choices"].size(), 3u);
  for (const json& c : r["choices"]) {
    if (c["finish_reason"] == "length") continue;   // (a call cut short is text)
    EXPECT_EQ(c["finish_reason"], "tool_calls") << c.dump();
    ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << c.dump();
    EXPECT_TRUE(c["message"]["content"].is_null());
    const json& f = c["message"]["tool_calls"][0]["function"];
    const json args = json::parse(f["arguments"].get<std::string>());
    if (f["name"] == "get_weather") {
      EXPECT_TRUE(args.size() == 2 && args["city"].is_string() && args["city"].get<std::string>().size() <= 10 &&
                  args["days"].is_number_integer()) << args.dump();
    } else {
      EXPECT_EQ(f["name"], "get_time");
      EXPECT_TRUE(args.size() == 1 && (args["zone"] == "UTC" || args["zone"] == "CET")) << args.dump();
    }
  }
  EXPECT_GE(std::count_if(r["choices"].begin(), r["choices"].end(), [](const json& c) { return c["finish_reason"] == "tool_calls"; }), 2)
      << r.dump();
  // auto: text here, streamed or not
  const json auto_body = {{"messages", ask}, {"tools", tools}, {"max_tokens", 24}, {"temperature", 0}};
  const json a = s.post("/v1/chat/completions", auto_body, &status);
  ASSERT_EQ(status, 200) << a.dump();
  json streamed_body = auto_body;
  streamed_body["stream"] = true;
  const ServerProcess::Streamed as = s.stream(streamed_body, "/v1/chat/completions");
  ASSERT_TRUE(as.error.empty()) << as.error;
  if (a["choices"][0]["finish_reason"] == "tool_calls") {   // (not this model's way, but allowed)
    EXPECT_EQ(as.tool_calls[0]["function"], a["choices"][0]["message"]["tool_calls"][0]["function"]);
  } else {
    EXPECT_EQ(as.text, a["choices"][0]["message"]["content"]);
    EXPECT_TRUE(as.tool_calls.empty());
  }
  EXPECT_EQ(as.finish, a["choices"][0]["finish_reason"]);
  // a forced call of one tool, streamed: one delta with the whole call, then finish_reason tool_calls
  json forced = {{"messages", ask}, {"tools", tools}, {"max_tokens", 250}, {"temperature", 0}, {"stream", true},
                 {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}};
  const ServerProcess::Streamed fs = s.stream(forced, "/v1/chat/completions");
  EXPECT_EQ(fs.finish, "tool_calls");
  ASSERT_EQ(fs.tool_calls.size(), 1u);
  EXPECT_EQ(fs.tool_calls[0]["index"], 0);
  EXPECT_EQ(fs.tool_calls[0]["function"]["name"], "get_time");
  EXPECT_TRUE(fs.text.empty()) << fs.text;
  forced["stream"] = false;
  const json fr = s.post("/v1/chat/completions", forced, &status);
  EXPECT_EQ(fr["choices"][0]["message"]["tool_calls"][0]["function"], fs.tool_calls[0]["function"]);
  // the call and its result in the conversation
  const json turn = {{"messages", {ask[0], fr["choices"][0]["message"],
                                   {{"role", "tool"}, {"tool_call_id", fs.tool_calls[0]["id"]}, {"content", "12:00"}}}},
                     {"tools", tools}, {"tool_choice", "none"}, {"max_tokens", 4}, {"temperature", 0}};
  const json t = s.post("/v1/chat/completions", turn, &status);
  EXPECT_EQ(status, 200) << t.dump();
  EXPECT_TRUE(t["choices"][0]["message"]["content"].is_string());
  // a parameters schema the grammar cannot honour, and tools on the completions endpoint: 400s
  json unsupported = tools;
  unsupported[1]["function"]["parameters"]["properties"]["zone"] = {{"type", "string"}, {"pattern", "^(?=[A-Z])"}};
  const json u = s.post("/v1/chat/completions", {{"messages", ask}, {"tools", unsupported}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(u["error"]["message"].get<std::string>().find("lookaround, named groups and inline flags"), std::string::npos)
      << u.dump();
  s.post("/v1/completions", {{"prompt", "x"}, {"tools", tools}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_TRUE(wait_idle(s)) << "blocks leaked";
  EXPECT_EQ(s.stop(), 0);
}

// llama.cpp's server utilities against the CLI: /tokenize gives `vkspec tokenize`'s ids (with BOS when
// add_special), pieces that join into the text; /detokenize gives the pieces' text; /apply-template gives
// `vkspec apply-template`'s prompt; bad ids and types are 400s.
TEST(Server, TokenizeDetokenizeAndApplyTemplateAgreeWithTheCli) {
  const std::string tmpl = shared_path("chat-templates/meta-llama-Llama-3.2-3B-Instruct.jinja");
  ServerProcess s(model_arg() + " --parallel 1 --chat-template " + tmpl);
  ASSERT_TRUE(s.up()) << s.log();
  const std::string text = "def f(x):\n    return x + 'é' # 42";
  const std::string m = shared_path("models/pycode-target-f16.gguf");
  std::ofstream(testing::TempDir() + "/utext.txt") << text;
  const Result plain = run_vkspec(VKSPEC_BIN, "tokenize -m " + m + " -f " + testing::TempDir() + "/utext.txt --json --no-bos");
  const Result bos = run_vkspec(VKSPEC_BIN, "tokenize -m " + m + " -f " + testing::TempDir() + "/utext.txt --json");
  ASSERT_EQ(plain.code, 0) << plain.err;
  int status = 0;
  json r = s.post("/tokenize", {{"content", text}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["tokens"], json::parse(plain.out));
  EXPECT_EQ(s.post("/tokenize", {{"content", text}, {"add_special", true}})["tokens"], json::parse(bos.out));
  r = s.post("/tokenize", {{"content", text}, {"with_pieces", true}});
  std::string joined;
  std::vector<int32_t> ids;
  for (const json& t : r["tokens"]) {
    ids.push_back(t["id"].get<int32_t>());
    if (t["piece"].is_string()) joined += t["piece"].get<std::string>();
    else for (const json& b : t["piece"]) joined += char(b.get<int>());
  }
  EXPECT_EQ(json(ids), json::parse(plain.out));
  // (SentencePiece's space prefix stays on the first piece, as llama-server's pieces and /detokenize keep it)
  EXPECT_EQ(joined, " " + text);
  EXPECT_EQ(s.post("/detokenize", {{"tokens", ids}})["content"], " " + text);
  const json messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}};
  std::ofstream(testing::TempDir() + "/umsgs.json") << messages.dump();
  const Result applied = run_vkspec(VKSPEC_BIN, "apply-template -m " + m + " --chat-template " + tmpl + " --messages " +
                                                    testing::TempDir() + "/umsgs.json --json");
  ASSERT_EQ(applied.code, 0) << applied.err;
  EXPECT_EQ(s.post("/apply-template", {{"messages", messages}})["prompt"], json::parse(applied.out)["prompt"]);
  for (const auto& [path, body] : std::vector<std::pair<std::string, json>>{
           {"/tokenize", {{"content", 5}}}, {"/tokenize", {{"content", "x"}, {"with_pieces", "yes"}}},
           {"/detokenize", {{"tokens", {1, 99999}}}}, {"/detokenize", {{"tokens", "1 2"}}},
           {"/apply-template", {{"messages", 3}}}}) {
    s.post(path, body, &status);
    EXPECT_EQ(status, 400) << path << " " << body.dump();
  }

  // A conversation longer than the context (256): OpenAI's endpoint refuses it (context_length_exceeded);
  // Ollama's /api/chat keeps the system message and the newest whole exchanges whose prompt leaves the
  // reply's reserve (num_predict 8: at most 248 tokens; counted here with /apply-template and /tokenize), and
  // answers what the OpenAI endpoint answers for exactly those messages.
  json convo = json::array({{{"role", "system"}, {"content", "You write short Python."}}});
  for (int i = 0; i < 12; ++i) {
    convo.push_back({{"role", "user"}, {"content", "Write a function that returns " + std::to_string(i) + " squared."}});
    convo.push_back({{"role", "assistant"}, {"content", "def f():\n    return " + std::to_string(i) + " ** 2"}});
  }
  convo.push_back({{"role", "user"}, {"content", "And the cube of 5?"}});
  r = s.post("/v1/chat/completions", {{"messages", convo}, {"max_tokens", 8}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["code"], "context_length_exceeded") << r.dump();
  json kept;
  size_t kept_tokens = 0;
  for (size_t cut = 1; cut < convo.size(); cut += 2) {   // the first window, from a user message, that fits
    kept = json::array({convo[0]});
    for (size_t i = cut; i < convo.size(); ++i) kept.push_back(convo[i]);
    const json prompt = s.post("/apply-template", {{"messages", kept}})["prompt"];
    kept_tokens = s.post("/tokenize", {{"content", prompt}})["tokens"].size();
    if (kept_tokens <= 248) break;
  }
  ASSERT_LT(kept.size(), convo.size());
  const json ollama = s.post("/api/chat", {{"model", "pycode-target-f16.gguf"}, {"messages", convo}, {"stream", false},
                                           {"options", {{"num_predict", 8}, {"temperature", 0}, {"repeat_penalty", 1}}}},
                             &status);
  ASSERT_EQ(status, 200) << ollama.dump();
  EXPECT_EQ(ollama["prompt_eval_count"], kept_tokens);
  const json same = s.post("/v1/chat/completions", {{"messages", kept}, {"max_tokens", 8}, {"temperature", 0}}, &status);
  ASSERT_EQ(status, 200) << same.dump();
  EXPECT_EQ(ollama["message"]["content"], same["choices"][0]["message"]["content"]);
  EXPECT_EQ(s.stop(), 0);
}

// llama-server's native /completion (its clients: llama.cpp's scripts, SillyTavern, Continue): greedy, it gives
// /v1/completions' text; streamed, events whose contents join into it and a last event with stop, counts and
// timings (no [DONE]); a stop string is reported as llama-server reports it; a sampler vkspec does not run is a
// 400 in llama-server's error shape.
TEST(Server, LlamaServerNativeCompletion) {
  ServerProcess s(model_arg() + " --parallel 2");
  ASSERT_TRUE(s.up()) << s.log();
  const std::string prompt = "def fibonacci(n):\n";
  int status = 0;
  const json openai = s.post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}}, &status);
  ASSERT_EQ(status, 200) << openai.dump();
  const std::string text = openai["choices"][0]["text"];
  const json native = s.post("/completion", {{"prompt", prompt}, {"n_predict", 12}, {"temperature", 0}}, &status);
  ASSERT_EQ(status, 200) << native.dump();
  EXPECT_EQ(native["content"], text);
  EXPECT_EQ(native["stop"], true);
  EXPECT_EQ(native["stop_type"], "limit");
  EXPECT_EQ(native["tokens_predicted"], 12);
  EXPECT_EQ(native["tokens_evaluated"], openai["usage"]["prompt_tokens"]);
  EXPECT_EQ(native["timings"]["predicted_n"], 12);
  EXPECT_EQ(native["generation_settings"]["n_predict"], 12);
  auto r = s.client().Post("/completions", json{{"prompt", prompt}, {"n_predict", 12}, {"temperature", 0}, {"stream", true}}.dump(),
                           "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->body.find("[DONE]"), std::string::npos);
  std::string joined;
  json last;
  int events = 0;
  std::istringstream lines(r->body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: ", 0) != 0) continue;
    last = json::parse(line.substr(6));
    joined += last["content"].get<std::string>();
    ++events;
  }
  EXPECT_EQ(joined, text);
  EXPECT_GT(events, 2);
  EXPECT_EQ(last["stop"], true);
  EXPECT_EQ(last["tokens_predicted"], 12);
  // a stop string inside the greedy text: cut before it, reported as llama-server does
  ASSERT_GT(text.size(), 6u);
  const std::string stop = text.substr(text.size() / 2, 3);
  const json cut = s.post("/completion", {{"prompt", prompt}, {"n_predict", 12}, {"temperature", 0}, {"stop", {stop}}}, &status);
  ASSERT_EQ(status, 200) << cut.dump();
  EXPECT_EQ(cut["content"], text.substr(0, text.find(stop)));
  EXPECT_EQ(cut["stop_type"], "word");
  EXPECT_EQ(cut["stopping_word"], stop);
  auto props = s.client().Get("/props");   // what llama.cpp's web UI reads first
  ASSERT_TRUE(props);
  ASSERT_EQ(props->status, 200);
  const json p = json::parse(props->body);
  EXPECT_EQ(p["default_generation_settings"]["n_ctx"], 256);
  EXPECT_EQ(p["default_generation_settings"]["params"]["temperature"], 0.8);
  EXPECT_EQ(p["total_slots"], 2);
  EXPECT_EQ(p["chat_template"], "");   // (the pycode model has none)
  const json refused = s.post("/completion", {{"prompt", prompt}, {"mirostat", 2}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(refused["error"]["code"], 400) << refused.dump();
  EXPECT_NE(refused["error"]["message"].get<std::string>().find("mirostat"), std::string::npos);
  EXPECT_EQ(s.stop(), 0);
}

// Embeddings on the batch: /v1/embeddings gives the CLI's normalized vector (`vkspec embed`, a context of its
// own) for a text and for its token ids, also while a streamed generation runs beside them, whose text is its
// solo one (an embedding runs between the generation's steps); --pooling mean gives the CLI's mean.
TEST(Server, EmbeddingsEqualTheClisBesideAGeneration) {
  const std::string m = shared_path("models/pycode-target-f16.gguf"), text = "def add(a, b): return a + b";
  const auto cli = [&](const std::string& flags) {
    const Result r = run_vkspec(VKSPEC_BIN, "embed -m " + m + " -p '" + text + "' --normalize --json " + flags);
    EXPECT_EQ(r.code, 0) << r.err;
    return json::parse(r.out, nullptr, false)["embedding"];
  };
  const json last = cli(""), mean = cli("--pooling mean");
  const Result ids = run_vkspec(VKSPEC_BIN, "tokenize -m " + m + " -p '" + text + "' --json");
  ServerProcess s(model_arg() + " --parallel 2");
  ASSERT_TRUE(s.up()) << s.log();
  const json gen = {{"prompt", "def fibonacci(n):\n"}, {"max_tokens", 48}, {"temperature", 0}, {"stream", true}};
  const std::string solo = s.stream(gen).text;
  std::thread generation([&] { EXPECT_EQ(s.stream(gen).text, solo); });
  for (int k = 0; k < 3; ++k) {
    const json r = s.post("/v1/embeddings", {{"input", json::array({text, json::parse(ids.out)})}, {"model", "pycode-target-f16.gguf"}});
    ASSERT_EQ(r["data"].size(), 2u) << r.dump().substr(0, 300);
    EXPECT_EQ(r["data"][0]["embedding"], last);
    EXPECT_EQ(r["data"][1]["embedding"], last);
  }
  generation.join();
  int status = 0;
  const json too_long = s.post("/v1/embeddings", {{"input", std::vector<int>(300, 7)}}, &status);
  EXPECT_EQ(status, 400) << too_long.dump();
  EXPECT_EQ(s.stop(), 0);
  ServerProcess pooled(model_arg() + " --pooling mean");
  ASSERT_TRUE(pooled.up()) << pooled.log();
  EXPECT_EQ(pooled.post("/v1/embeddings", {{"input", text}})["data"][0]["embedding"], mean);
}

// For the official npm clients: installs `package` (name@version) into `dir` unless it is there; empty, or why
// the test is skipped (no npm, or npm could not install it).
std::string npm_package(const std::string& dir, const std::string& package) {
  if (run_command("command -v npm && command -v node").code != 0) return "npm or node is missing: the client test is skipped";
  if (run_command("test -d " + dir + "/node_modules/" + package.substr(0, package.find('@'))).code == 0) return {};
  const Result inst = run_command("npm install --prefix " + dir + " " + package + " --no-audit --no-fund --loglevel=error");
  return inst.code == 0 ? std::string() : "npm could not install " + package + " (offline?): " + inst.err;
}
// The server they talk to: the pycode target with Llama 3.2's template (a context of 640: its tool prompt is
// ~310 tokens of this vocabulary).
std::string client_server_args(int parallel) {
  return "-m " + shared_path("models/pycode-target-f16.gguf") + " --ctx 640 --parallel " + std::to_string(parallel) +
         " --chat-template " + shared_path("chat-templates/meta-llama-Llama-3.2-3B-Instruct.jinja");
}
// `node tests/SCRIPT DIR URL pycode-target-f16.gguf`
Result run_client(const std::string& script, const std::string& dir, const std::string& url) {
  return run_command("node " + std::string(VKSPEC_SOURCE_DIR) + "/tests/" + script + " " + dir + " " + url +
                     " pycode-target-f16.gguf");
}

TEST(Server, OfficialOpenAiClient) {
  if (const std::string skip = npm_package(VKSPEC_NPM_DIR, "openai@5"); !skip.empty()) GTEST_SKIP() << skip;
  ServerProcess s(client_server_args(4));
  ASSERT_TRUE(s.up()) << s.log();
  const Result r = run_client("openai_client.mjs", VKSPEC_NPM_DIR, "http://127.0.0.1:" + std::to_string(s.port()) + "/v1");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const json j = json::parse(r.out);
  const json direct = s.post("/v1/completions", {{"prompt", "def fibonacci(n):\n"}, {"max_tokens", 12}, {"temperature", 0}});
  EXPECT_EQ(j["completion"]["text"], direct["choices"][0]["text"]);
  EXPECT_EQ(j["completion"]["usage"]["completion_tokens"], direct["usage"]["completion_tokens"]);
  EXPECT_EQ(j["chat"]["role"], "assistant");
  EXPECT_FALSE(j["chat"]["content"].get<std::string>().empty());
  EXPECT_EQ(j["stream"]["content"], j["chat"]["content"]);   // greedy: streamed == not streamed
  EXPECT_EQ(j["stream"]["finish_reason"], j["chat"]["finish_reason"]);
  EXPECT_EQ(j["stream"]["usage"]["completion_tokens"].get<int>() > 0, true);
  EXPECT_EQ(j["n3"]["count"], 3);
  EXPECT_EQ(j["n3"]["indexes"], json::array({0, 1, 2}));
  // tool calls: a forced call of the one tool, whose arguments its schema accepts; the SDK's stream helper
  // assembles the same call from the deltas; the conversation goes on with the call and its result
  EXPECT_EQ(j["tool"]["finish_reason"], "tool_calls") << j["tool"].dump();
  EXPECT_TRUE(j["tool"]["message"]["content"].is_null());
  ASSERT_EQ(j["tool"]["message"]["tool_calls"].size(), 1u) << j["tool"].dump();
  const json& tc = j["tool"]["message"]["tool_calls"][0];
  EXPECT_EQ(tc["type"], "function");
  EXPECT_EQ(tc["function"]["name"], "get_weather");
  EXPECT_EQ(tc["id"].get<std::string>().rfind("call_", 0), 0u);
  const json args = json::parse(tc["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(args.is_object() && args.size() == 1 && args["city"].is_string() && args["city"].get<std::string>().size() <= 12)
      << args.dump();
  EXPECT_EQ(j["tool_stream"]["finish_reason"], "tool_calls");
  ASSERT_EQ(j["tool_stream"]["tool_calls"].size(), 1u) << j["tool_stream"].dump();
  EXPECT_EQ(j["tool_stream"]["tool_calls"][0]["function"], tc["function"]);   // greedy: streamed == not streamed
  EXPECT_TRUE(j["tool_turn"]["content"].is_string()) << j.dump();
  EXPECT_EQ(j["models"], json::array({"pycode-target-f16.gguf"}));
  EXPECT_EQ(j["unknown_model"]["status"], 404);
  // embeddings, base64 as the SDK asks for them: the floats the server gives when asked for floats
  const json floats = s.post("/v1/embeddings", {{"input", "def add(a, b): return a + b"}});
  EXPECT_EQ(j["embeddings"]["count"], 2);
  EXPECT_EQ(j["embeddings"]["indexes"], json::array({0, 1}));
  EXPECT_EQ(j["embeddings"]["first"], floats["data"][0]["embedding"]);
  EXPECT_GT(j["embeddings"]["usage"]["prompt_tokens"].get<int>(), 10);
  EXPECT_EQ(s.stop(), 0);
}

// The official `ollama` npm client: version, list, show, generate (raw: the completions endpoint's greedy text)
// and chat, streamed or not (the same text), JSON format, a conversation with a tool call, an unknown model.
TEST(Server, OfficialOllamaClient) {
  if (const std::string skip = npm_package(VKSPEC_NPM_OLLAMA_DIR, "ollama@0.6"); !skip.empty()) GTEST_SKIP() << skip;
  ServerProcess s(client_server_args(2));
  ASSERT_TRUE(s.up()) << s.log();
  const Result r = run_client("ollama_client.mjs", VKSPEC_NPM_OLLAMA_DIR, "http://127.0.0.1:" + std::to_string(s.port()));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["version"], "0.6.0");
  EXPECT_EQ(j["tags"], json::array({"pycode-target-f16.gguf"}));
  EXPECT_EQ(j["show"]["has_template"], true);
  EXPECT_EQ(j["show"]["capabilities"], json::array({"completion", "tools"}));
  const json direct = s.post("/v1/completions", {{"prompt", "def fibonacci(n):\n"}, {"max_tokens", 12}, {"temperature", 0}});
  EXPECT_EQ(j["generate_raw"]["response"], direct["choices"][0]["text"]);   // greedy, no penalty: the same ids
  EXPECT_EQ(j["generate_raw"]["done"], true);
  EXPECT_EQ(j["generate_raw"]["done_reason"], "length");
  EXPECT_EQ(j["generate_raw"]["eval_count"], 12);
  EXPECT_EQ(j["generate_raw"]["prompt_eval_count"], direct["usage"]["prompt_tokens"]);
  EXPECT_EQ(j["generate_stream"]["response"], j["generate_raw"]["response"]);
  EXPECT_GT(j["generate_stream"]["parts"].get<int>(), 2);
  EXPECT_EQ(j["generate_stream"]["done"], true);
  const json chat = s.post("/v1/chat/completions", {{"messages", {{{"role", "system"}, {"content", "You write Python."}},
                                                                  {{"role", "user"}, {"content", "Sort a list."}}}},
                                                    {"max_tokens", 12}, {"temperature", 0}});
  EXPECT_EQ(j["chat"]["content"], chat["choices"][0]["message"]["content"]);
  EXPECT_EQ(j["chat"]["role"], "assistant");
  EXPECT_EQ(j["chat_stream"]["content"], j["chat"]["content"]);
  if (j["json"]["done_reason"] == "stop") {
    EXPECT_TRUE(json::parse(j["json"]["content"].get<std::string>()).is_object()) << j["json"];
  }
  EXPECT_EQ(j["json"]["content"].get<std::string>().substr(0, 1), "{");
  EXPECT_EQ(j["tool_turn"]["done"], true);
  // /api/embed: unit vectors, OpenAI's; /api/embeddings: the same direction, not normalized
  const json openai = s.post("/v1/embeddings", {{"input", "def add(a, b): return a + b"}});
  EXPECT_EQ(j["embed"]["count"], 2);
  EXPECT_EQ(j["embed"]["first"], openai["data"][0]["embedding"]);
  const std::vector<double> unit = j["embed"]["first"], plain = j["embeddings"]["first"];
  double norm = 0;
  for (const double v : plain) norm += v * v;
  ASSERT_EQ(plain.size(), unit.size());
  EXPECT_GT(norm, 1.5) << "not normalized";
  for (size_t i = 0; i < unit.size(); ++i) EXPECT_NEAR(plain[i] / std::sqrt(norm), unit[i], 1e-6) << i;
  EXPECT_EQ(s.stop(), 0);
}

}  // namespace
}  // namespace vkspec::test
