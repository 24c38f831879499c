// `vkspec serve` in the dialects beside OpenAI's, over loopback: llama.cpp's server utilities (/tokenize,
// /detokenize, /apply-template) and native /completion, Ollama's /api/chat cut to the context, and the official
// `openai` and `ollama` npm clients.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <sstream>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tests/run_command.h"
#include "tests/server_process.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {
using json = nlohmann::json;


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
  // Ollama's /api/chat keeps the system message and the newest whole exchanges, from a user message, whose
  // prompt leaves the reply's reserve (num_predict 8: at most 248 tokens; the windows counted here with
  // /apply-template and /tokenize), and answers what the OpenAI endpoint answers for exactly those messages.
  // The next turns keep that cut while they fit, so the prompt cache serves their earlier messages.
  json convo = json::array({{{"role", "system"}, {"content", "You write short Python."}}});
  for (int i = 0; i < 12; ++i) {
    convo.push_back({{"role", "user"}, {"content", "Write a function that returns " + std::to_string(i) + " squared."}});
    convo.push_back({{"role", "assistant"}, {"content", "def f():\n    return " + std::to_string(i) + " ** 2"}});
  }
  convo.push_back({{"role", "user"}, {"content", "And the cube of 5?"}});
  r = s.post("/v1/chat/completions", {{"messages", convo}, {"max_tokens", 8}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["code"], "context_length_exceeded") << r.dump();
  const auto window = [&](size_t cut) {
    json w = json::array({convo[0]});
    for (size_t i = cut; i < convo.size(); ++i) w.push_back(convo[i]);
    return w;
  };
  const auto tokens = [&](const json& messages) {
    return s.post("/tokenize", {{"content", s.post("/apply-template", {{"messages", messages}})["prompt"]}})["tokens"].size();
  };
  size_t cut = 0, prefilled_before = 0, prompt_before = 0, kept_cut = 0;
  for (int turn = 0; turn < 4; ++turn) {
    if (turn > 0) {
      convo.push_back({{"role", "user"}, {"content", "And of " + std::to_string(turn) + "?"}});
      prefilled_before = size_t(s.metric("prompt_tokens_prefilled_total"));
    }
    const json ollama = s.post("/api/chat", {{"model", "pycode-target-f16.gguf"}, {"messages", convo}, {"stream", false},
                                             {"options", {{"num_predict", 8}, {"temperature", 0}, {"repeat_penalty", 1}}}},
                               &status);
    ASSERT_EQ(status, 200) << ollama.dump();
    const size_t prompt = ollama["prompt_eval_count"];
    EXPECT_LE(prompt, 248u);
    size_t now = 1;   // the window it kept: the user message whose window has its prompt's length
    while (now < convo.size() && !(convo[now]["role"] == "user" && tokens(window(now)) == prompt)) ++now;
    ASSERT_LT(now, convo.size()) << "no window of " << prompt << " tokens, turn " << turn;
    EXPECT_GT(now, 1u);
    if (turn == 0) {
      const json same = s.post("/v1/chat/completions", {{"messages", window(now)}, {"max_tokens", 8}, {"temperature", 0}}, &status);
      ASSERT_EQ(status, 200) << same.dump();
      EXPECT_EQ(ollama["message"]["content"], same["choices"][0]["message"]["content"]);
    } else {
      ASSERT_GE(now, cut) << "turn " << turn << " moved the cut back";
      const size_t prefilled = size_t(s.metric("prompt_tokens_prefilled_total")) - prefilled_before;
      if (now == cut) {   // the turn before's prompt came from the cache (but for a partial block and a reply re-read)
        ++kept_cut;
        EXPECT_LE(prefilled, prompt - prompt_before + 24) << "turn " << turn << ": " << prompt << " tokens after " << prompt_before;
      }
    }
    cut = now;
    prompt_before = prompt;
    convo.push_back({{"role", "assistant"}, {"content", ollama["message"]["content"]}});
  }
  EXPECT_GE(kept_cut, 1u);
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
  // llama-server's fields on the OpenAI endpoint: refused there too, and n_predict is max_tokens
  EXPECT_EQ(s.post("/v1/completions", {{"prompt", prompt}, {"mirostat", 2}}, &status)["error"]["param"], "mirostat");
  EXPECT_EQ(status, 400);
  const json short_one = s.post("/v1/completions", {{"prompt", prompt}, {"n_predict", 3}, {"temperature", 0}}, &status);
  ASSERT_EQ(status, 200) << short_one.dump();
  EXPECT_EQ(short_one["usage"]["completion_tokens"], 3);
  EXPECT_EQ(s.stop(), 0);
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
