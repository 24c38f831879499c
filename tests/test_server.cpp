// `vkspec serve` over loopback (its protocol layers alone: tests/test_server_api.cpp; the other dialects and the
// official npm clients: tests/test_server_dialects.cpp): 32 concurrent streams whose tokens must equal each
// prompt's run alone (plain, n-gram and draft-model speculation); a burst of malformed requests and abrupt
// disconnects after which the server is healthy, correct and holds no KV block; n = 4 prefilling its prompt
// once; JSON mode, grammars and schemas; logprobs; the API key; tool calls; embeddings beside a generation.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <sstream>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tests/raw_http.h"
#include "tests/run_command.h"
#include "tests/server_process.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {
using json = nlohmann::json;

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
  const int fd = raw_http::connect_to(port);
  raw_http::send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\n\r\n" + body);
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
  ServerProcess plain(model_arg() + " --parallel 8 --max-body 65536 --prompt-cache 0 --report-cache");
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

// Prefix sharing is not an oracle: by default no response tells a client how many of its prompt tokens came
// from other requests' KV (OpenAI's vkspec fields, llama-server's tokens_cached and prompt_n), though the
// sharing happens (the /metrics totals, which an operator reads); --report-cache turns the counts on (above).
TEST(Server, ResponsesDoNotRevealSharedPrefixesByDefault) {
  ServerProcess s(model_arg() + " --parallel 2");
  std::string secret;
  for (int i = 0; i < 12; ++i) secret += "    secret_" + std::to_string(i) + " = load(" + std::to_string(i) + ")\n";
  int status = 0;
  const json first = s.post("/v1/completions", {{"prompt", secret + "a"}, {"max_tokens", 2}, {"temperature", 0}}, &status);
  ASSERT_EQ(status, 200) << first.dump();
  // a second client's prompt that starts with the first one's: its KV comes from the prompt cache
  const json second = s.post("/v1/completions", {{"prompt", secret + "b"}, {"max_tokens", 2}, {"temperature", 0}}, &status);
  ASSERT_EQ(status, 200) << second.dump();
  for (const json& r : {first, second}) {
    const json& vk = r["vkspec"]["choices"][0];
    EXPECT_FALSE(vk.contains("shared_prompt_tokens")) << vk.dump();
    EXPECT_FALSE(vk.contains("prefilled_tokens")) << vk.dump();
  }
  const json native = s.post("/completion", {{"prompt", secret + "c"}, {"n_predict", 2}, {"temperature", 0}}, &status);
  ASSERT_EQ(status, 200) << native.dump();
  EXPECT_EQ(native["tokens_cached"], 0);
  EXPECT_EQ(native["timings"]["prompt_n"], native["tokens_evaluated"]);
  EXPECT_GT(s.metric("prompt_tokens_shared_total"), 100) << "the prefix was shared all the same";
  EXPECT_EQ(s.stop(), 0) << s.log();
}

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
    // a grammar no token can start is the client's error too (a 400 saying so), not the model's (a 500)
    g["grammar"] = "root ::= [^\\x00-\\U0010FFFF]\n";
    const json dead_grammar = s.post("/v1/completions", g, &status);
    EXPECT_EQ(status, 400) << dead_grammar.dump();
    EXPECT_NE(dead_grammar.dump().find("allows no token at its start"), std::string::npos) << dead_grammar.dump();
    // and so is one whose nested repetitions would stall every stream: refused at submission, at once
    g["grammar"] = "root ::= (((( \"a\" \"b\"?){0,5} \"c\"?){0,5} \"d\"?){0,5} \"e\"?){0,5}\n";
    const auto t0 = std::chrono::steady_clock::now();
    const json costly = s.post("/v1/completions", g, &status);
    EXPECT_EQ(status, 400) << costly.dump();
    EXPECT_NE(costly.dump().find("too costly"), std::string::npos) << costly.dump();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
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
  ServerProcess s(model_arg() + " --parallel 2 --report-cache --api-key s3cret --chat-template " +
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
  // A client that leaves a long embeddings request (60 inputs of 250 tokens) has its inputs cancelled, as a
  // completion's are: the engine does not run them all for nobody.
  const double prefilled0 = s.metric("prompt_tokens_prefilled_total");
  std::vector<json> inputs(60);
  for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = std::vector<int>(250, int(7 + i));
  const std::string body = json{{"input", inputs}}.dump();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(s.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string req = "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(write(fd, req.data(), req.size()), ssize_t(req.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  close(fd);
  bool idle = false;   // (not wait_idle: this server's prompt cache keeps blocks)
  for (int i = 0; i < 300 && !idle; ++i) {
    idle = s.metric("requests_active") == 0 && s.metric("requests_queued") == 0;
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(idle) << "embeddings left running after their client left";
  EXPECT_LT(s.metric("prompt_tokens_prefilled_total") - prefilled0, 60 * 250) << "every input ran";
  EXPECT_EQ(s.stop(), 0);
  ServerProcess pooled(model_arg() + " --pooling mean");
  ASSERT_TRUE(pooled.up()) << pooled.log();
  EXPECT_EQ(pooled.post("/v1/embeddings", {{"input", text}})["data"][0]["embedding"], mean);
}

}  // namespace
}  // namespace vkspec::test
