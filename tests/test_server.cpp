// `vkspec serve` over loopback: the protocol layer (stop strings across token boundaries, request
// validation, logprobs) against direct references; the running server with 32 concurrent streams whose
// tokens must equal each prompt's run alone (plain, n-gram and draft-model speculation); a burst of
// malformed requests and abrupt disconnects after which the server is healthy, correct and holds no KV
// block; n = 4 prefilling its prompt once; the API key; tool calls (their schemas, the lazy trigger, the
// conversation); Ollama's API (its requests, NDJSON lines); the official `openai` and `ollama` npm clients.
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

#include "apps/ollama_api.h"
#include "apps/server_api.h"
#include "engine/prompt.h"
#include "loader/gbnf.h"
#include "loader/gguf.h"
#include "tests/run_command.h"
#include "tests/schema_check.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {
using json = nlohmann::json;

// ---- the protocol layer ----

// TextStream against the obvious reference: the whole text cut at the first stop string, for every way of
// splitting it into tokens.
TEST(ServerApi, StopStringsAreFoundAcrossTokenBoundaries) {
  const std::string text = "def f(x):\n    return x + 1\n\nprint(f(2))\n";
  const std::vector<std::vector<std::string>> stop_sets = {{"\n\n"}, {"return"}, {"x + 1", "zzz"}, {"nothing"}, {"(2)", "f("}};
  for (const auto& stops : stop_sets) {
    size_t cut = std::string::npos;
    for (const auto& s : stops) cut = std::min(cut, text.find(s));
    const std::string want = text.substr(0, cut);
    for (size_t piece = 1; piece <= 5; ++piece) {
      cli::TextStream ts(stops);
      std::string got;
      for (size_t i = 0; i < text.size() && !ts.stopped(); i += piece) got += ts.push(text.substr(i, piece));
      got += ts.finish();
      EXPECT_EQ(got, want) << stops[0] << " piece " << piece;
      EXPECT_EQ(ts.stopped(), cut != std::string::npos);
    }
  }
  // A stop string made of a multi-byte character (pieces are whole characters: the library holds back an
  // incomplete one).
  cli::TextStream ts({"é!"});
  EXPECT_EQ(ts.push("a\xC3\xA9"), "a");   // "é" could start the stop string
  EXPECT_EQ(ts.push("?"), "\xC3\xA9?");
  EXPECT_EQ(ts.push("\xC3\xA9!"), "");
  EXPECT_TRUE(ts.stopped());
}

class ServerApiParse : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = std::make_unique<GgufFile>(shared_path("models/pycode-target-f16.gguf"));
    tok_ = Tokenizer::from_gguf(*file_);
    lim_.n_ctx = 512;
    lim_.n_vocab = tok_->n_vocab();
    // the server's encodings, on the tokenizer directly (no template: chat requests are refused)
    enc_.prompt = [this](const std::string& text) { return ids(tokenize(*tok_, text, AddBos::IfWanted, true)); };
    enc_.chat = [this](const std::string& text) { return ids(tokenize(*tok_, text, AddBos::IfWantedUnlessPresent, true)); };
  }
  static std::vector<int32_t> ids(const std::vector<uint32_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); }
  int status_of(const std::string& body, bool chat = false, std::string* param = nullptr) {
    try {
      cli::parse_completion(cli::parse_body(body, lim_), chat, lim_, enc_, "m");
      return 200;
    } catch (const cli::ApiError& e) {
      if (param) *param = e.param;
      EXPECT_FALSE(e.message.empty());
      EXPECT_EQ(e.body()["error"]["message"], e.message);
      return e.status;
    }
  }
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tok_;
  cli::ServerLimits lim_;
  cli::PromptEncoder enc_;
};

TEST_F(ServerApiParse, EveryFieldIsTypeAndRangeChecked) {
  const std::pair<const char*, const char*> bad[] = {
      {R"({"prompt": 5})", "prompt"}, {R"({"prompt": []})", "prompt"}, {R"({"prompt": ["a", "b"]})", "prompt"},
      {R"({"prompt": [1, 99999]})", "prompt"}, {R"({"prompt": [-1]})", "prompt"},
      {R"({"prompt": "x", "max_tokens": "9"})", "max_tokens"}, {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1e12})", "max_tokens"}, {R"({"prompt": "x", "max_tokens": 2.5})", "max_tokens"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"}, {R"({"prompt": "x", "temperature": -1})", "temperature"},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p"}, {R"({"prompt": "x", "top_k": -3})", "top_k"},
      {R"({"prompt": "x", "min_p": 2})", "min_p"}, {R"({"prompt": "x", "n": 0})", "n"}, {R"({"prompt": "x", "n": 1000})", "n"},
      {R"({"prompt": "x", "seed": "a"})", "seed"}, {R"({"prompt": "x", "seed": 1.5})", "seed"},
      {R"({"prompt": "x", "stream": 1})", "stream"}, {R"({"prompt": "x", "stop": 3})", "stop"},
      {R"({"prompt": "x", "stop": [1]})", "stop"}, {R"({"prompt": "x", "stop": ["a","b","c","d","e"]})", "stop"},
      {R"({"prompt": "x", "stop": [""]})", "stop"}, {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "x", "tools": [{"type": "function"}]})", "tools"}, {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
      {R"({"prompt": "x", "frequency_penalty": -2.5})", "frequency_penalty"}, {R"({"prompt": "x", "frequency_penalty": "1"})", "frequency_penalty"},
      {R"({"prompt": "x", "logit_bias": [1]})", "logit_bias"}, {R"({"prompt": "x", "logit_bias": {"x": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"-1": 1}})", "logit_bias"}, {R"({"prompt": "x", "logit_bias": {"99999999": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"5": 101}})", "logit_bias"}, {R"({"prompt": "x", "logit_bias": {"5": "1"}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"7 ": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logprobs": "2"})", "logprobs"}, {R"({"prompt": "x", "logprobs": 21})", "logprobs"}, {R"({"prompt": "x", "model": 3})", "model"},
      {R"({"prompt": "x", "repeat_penalty": 0})", "repeat_penalty"}, {R"({"max_tokens": 3})", "prompt"},
      {R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})", "response_format"},
      {R"({"prompt": "x", "json_schema": {}, "response_format": {"type": "json_object"}})", "json_schema"},
      {R"({"prompt": "x", "response_format": {"type": 5}})", "response_format"},
      {R"({"prompt": "x", "response_format": "json_object"})", "response_format"},
      {R"({"prompt": "x", "grammar": 5})", "grammar"}, {R"({"prompt": "x", "grammar": "root ::= \"a\"\n\u0000 junk"})", "grammar"},
      {R"({"prompt": "x", "grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}})", "grammar"},
  };
  for (const auto& [body, param] : bad) {
    std::string got;
    EXPECT_EQ(status_of(body, false, &got), 400) << body;
    EXPECT_EQ(got, param) << body;
  }
  EXPECT_EQ(status_of(R"({"prompt": "x", "model": "gpt-4"})"), 404);
  EXPECT_EQ(status_of("{bad json"), 400);
  EXPECT_EQ(status_of("[1, 2]"), 400);
  EXPECT_EQ(status_of(std::string(200, '[') + std::string(200, ']')), 400);   // nesting limit
  EXPECT_EQ(status_of("{\"prompt\": [" + [] { std::string s = "1"; for (int i = 0; i < 600; ++i) s += ",1"; return s; }() + "]}"), 400);
  EXPECT_EQ(status_of(R"({"messages": [{"role": "user", "content": "hi"}]})", true), 400);   // no template
  // Accepted: every field at its bounds, nulls as absent, OpenAI's top_p 0.
  EXPECT_EQ(status_of(R"({"prompt": [1, 5, 7], "max_tokens": 511, "temperature": 2, "top_p": 0, "top_k": 0, "min_p": 1,
                         "n": 8, "seed": 18446744073709551615, "stop": ["a", "b", "c", "d"], "stream": true,
                         "stream_options": {"include_usage": true}, "user": "u", "logprobs": null, "model": "m",
                         "presence_penalty": -2, "frequency_penalty": 2})"), 200);
  const cli::CompletionSpec s = cli::parse_completion(cli::parse_body(R"({"prompt": "def f():", "seed": 3})", lim_), false,
                                                      lim_, enc_, "m");
  EXPECT_EQ(s.sp.presence_penalty, 0.0f);   // OpenAI's defaults: no penalty
  EXPECT_EQ(s.sp.frequency_penalty, 0.0f);
  const cli::CompletionSpec pen = cli::parse_completion(
      cli::parse_body(R"({"prompt": "def f():", "presence_penalty": 0.5, "frequency_penalty": -1.25})", lim_), false, lim_,
      enc_, "m");
  EXPECT_EQ(pen.sp.presence_penalty, 0.5f);
  EXPECT_EQ(pen.sp.frequency_penalty, -1.25f);
  const cli::CompletionSpec lb = cli::parse_completion(
      cli::parse_body(R"({"prompt": "def f():", "logit_bias": {"7": -100, "5": 2.5}})", lim_), false, lim_, enc_, "m");
  EXPECT_EQ(lb.bias_tokens, (std::vector<int32_t>{7, 5}));   // the request's order
  EXPECT_EQ(lb.bias_values, (std::vector<float>{-100.0f, 2.5f}));
  EXPECT_EQ(s.sp.json_object, 0);
  for (const char* rf : {R"({"type": "text"})", "{}", "null"})
    EXPECT_EQ(cli::parse_completion(cli::parse_body(std::string(R"({"prompt": "x", "response_format": )") + rf + "}", lim_),
                                    false, lim_, enc_, "m").sp.json_object, 0) << rf;
  EXPECT_EQ(cli::parse_completion(cli::parse_body(R"({"prompt": "x", "response_format": {"type": "json_object"}})", lim_),
                                  false, lim_, enc_, "m").sp.json_object, 1);
  EXPECT_EQ(s.prompt, ids(tok_->encode("def f():", true, true)));
  EXPECT_EQ(s.max_tokens, 512 - s.prompt.size());   // default: up to the context
  EXPECT_EQ(s.sp.seed, 3u);
  EXPECT_EQ(s.sp.temperature, 1.0f);
}

bool schema_takes(const std::string& schema, const std::string& text) { return schema_accepts(schema, text) == 1; }

TEST(ServerApi, ToolCallsAreReadFromRepliesAndTheirSchemaHoldsThem) {
  using cli::parse_tool_call;
  const auto tools = cli::parse_tools(nlohmann::ordered_json::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
          "properties": {"where": {"$ref": "#/$defs/loc"}}, "required": ["where"],
          "$defs": {"loc": {"type": "string", "maxLength": 5}}}}},
      {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
          "properties": {"where": {"$ref": "#/definitions/loc"}}, "required": ["where"],
          "definitions": {"loc": {"enum": ["UTC", "CET"]}}}}},
      {"type": "function", "function": {"name": "ping"}}])"));
  ASSERT_EQ(tools.size(), 3u);
  // a reply is a call when it is one JSON object naming a tool, with object parameters (or arguments)
  auto call = parse_tool_call(" {\"name\": \"get_weather\", \"parameters\": {\"where\": \"Paris\"}}\n", tools);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->name, "get_weather");
  EXPECT_EQ(call->arguments, "{\"where\":\"Paris\"}");
  call = parse_tool_call(R"({"arguments": {}, "name": "ping"})", tools);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->arguments, "{}");
  for (const char* text : {"Paris is sunny.", "", R"({"name": "get_weather", "parameters": {"where": "Paris"}} and more)",
                           R"({"name": "get_weather", "parameters": {"where": "Par)", R"({"name": "nope", "parameters": {}})",
                           R"({"name": "ping", "parameters": "x"})", R"({"name": 3, "parameters": {}})", "[1]", "{}"})
    EXPECT_FALSE(parse_tool_call(text, tools)) << text;
  // the schema of a call: each tool's name with its own arguments (its $defs kept apart from the other's)
  const std::string all = cli::tool_call_schema(tools).dump();
  EXPECT_TRUE(schema_takes(all, R"({"name": "get_weather", "parameters": {"where": "Paris"}})"));
  EXPECT_TRUE(schema_takes(all, R"({"name": "get_time", "parameters": {"where": "CET"}})"));
  EXPECT_TRUE(schema_takes(all, R"({"name": "ping", "parameters": {}})"));
  EXPECT_FALSE(schema_takes(all, R"({"name": "get_time", "parameters": {"where": "Paris"}})"));   // the enum
  EXPECT_FALSE(schema_takes(all, R"({"name": "get_weather", "parameters": {"where": "Londres"}})"));   // maxLength
  EXPECT_FALSE(schema_takes(all, R"({"name": "nope", "parameters": {}})"));
  EXPECT_FALSE(schema_takes(all, R"({"parameters": {}, "name": "ping"})"));   // the name first, as the templates show
  const std::string one = cli::tool_call_schema({tools[1]}).dump();
  EXPECT_TRUE(schema_takes(one, R"({"name": "get_time", "parameters": {"where": "UTC"}})"));
  EXPECT_FALSE(schema_takes(one, R"({"name": "ping", "parameters": {}})"));
  // the lazy trigger matches the beginning of every call the schema takes, and of nothing else
  const auto trigger = Gbnf::parse(cli::kToolCallTrigger);
  for (const auto& [text, matches] : std::vector<std::pair<std::string, bool>>{
           {"{\"name\": \"", true}, {"{\"name\":\"", true}, {"{\n  \"name\" : \"", true}, {"{\"nam", false}, {"[", false}}) {
    const GbnfConstraint g(trigger, std::make_shared<const VocabBytes>(std::vector<std::string>{""}, std::vector<uint32_t>{0}));
    GbnfState st = g.state();
    EXPECT_EQ(g.feed_bytes(st, text) && GbnfConstraint::may_end(st), matches) << text;
  }
  EXPECT_TRUE(cli::may_become_tool_call(""));
  EXPECT_TRUE(cli::may_become_tool_call(" \n{\"na"));
  EXPECT_FALSE(cli::may_become_tool_call("  The"));
}

TEST_F(ServerApiParse, ToolsReachTheTemplateAndTheGrammar) {
  nlohmann::ordered_json seen_messages, seen_tools;
  enc_.render_chat = [&](const nlohmann::ordered_json& m, const nlohmann::ordered_json& t) {
    seen_messages = m;
    seen_tools = t;
    return std::string("<s>hi");
  };
  const std::string tools = R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
      {"type": "function", "function": {"name": "get_time"}}])";
  const std::string convo = R"([{"role": "developer", "content": "Use tools."}, {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "21 C"}]}])";
  auto parse = [&](const std::string& extra) {
    return cli::parse_completion(cli::parse_body(R"({"messages": )" + convo + R"(, "tools": )" + tools + extra + "}", lim_),
                                 true, lim_, enc_, "m");
  };
  cli::CompletionSpec s = parse("");   // tool_choice auto by default
  ASSERT_EQ(s.tools.size(), 2u);
  EXPECT_EQ(seen_tools, nlohmann::ordered_json::parse(tools));   // as given, for the template to list
  EXPECT_EQ(s.grammar_trigger, cli::kToolCallTrigger);
  EXPECT_TRUE(schema_takes(s.json_schema, R"({"name": "get_time", "parameters": {}})"));
  EXPECT_TRUE(schema_takes(s.json_schema, R"({"name": "get_weather", "parameters": {"city": "Rome"}})"));
  // the conversation as the templates read it: arguments as an object, the tool message's id kept
  const auto want = nlohmann::ordered_json::parse(R"([{"role": "system", "content": "Use tools."},
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
          "function": {"name": "get_weather", "arguments": {"city": "Paris"}}, "id": "call_1"}]},
      {"role": "tool", "content": "21 C", "tool_call_id": "call_1"}])");
  EXPECT_EQ(seen_messages, want) << seen_messages.dump();
  s = parse(R"(, "tool_choice": "required", "parallel_tool_calls": false)");
  EXPECT_TRUE(s.grammar_trigger.empty());
  EXPECT_FALSE(s.json_schema.empty());
  s = parse(R"(, "tool_choice": {"type": "function", "function": {"name": "get_time"}})");
  EXPECT_TRUE(s.grammar_trigger.empty());
  EXPECT_TRUE(schema_takes(s.json_schema, R"({"name": "get_time", "parameters": {}})"));
  EXPECT_FALSE(schema_takes(s.json_schema, R"({"name": "get_weather", "parameters": {"city": "Rome"}})"));
  s = parse(R"(, "tool_choice": "none")");
  EXPECT_TRUE(s.tools.empty() && s.json_schema.empty() && s.grammar_trigger.empty());
  EXPECT_TRUE(seen_tools.is_null());   // not listed: the model is not to call them
  const std::pair<std::string, const char*> bad[] = {
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": 5})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "a b"}}]})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "retrieval", "function": {"name": "a"}}]})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"function": {"name": "a"}}, {"function": {"name": "a"}}]})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"function": {"name": "a", "parameters": 5}}]})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"function": {"name": "a"}}], "tool_choice": "sometimes"})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"function": {"name": "a"}}], "tool_choice": {"type": "function", "function": {"name": "b"}}})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"function": {"name": "a"}}], "response_format": {"type": "json_object"}})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "parallel_tool_calls": "yes"})", "parallel_tool_calls"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "y", "tool_calls": []}]})", "messages[1].tool_calls"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": 5}]})", "messages[1].tool_calls"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"function": {"name": "a", "arguments": "{bad"}}]}]})", "messages[1].tool_calls[0]"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]})", "messages[1].tool_calls[0]"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "y", "tool_call_id": 7}]})", "messages[1].tool_call_id"},
      {R"({"messages": [{"role": "function", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "assistant", "content": "x", "function_call": {}}]})", "messages[0]"},
  };
  for (const auto& [body, param] : bad) {
    std::string got;
    EXPECT_EQ(status_of(body, true, &got), 400) << body;
    EXPECT_EQ(got, param) << body;
  }
  std::string got;
  EXPECT_EQ(status_of(R"({"prompt": "x", "tool_choice": "auto"})", false, &got), 400);   // chat only
  EXPECT_EQ(got, "tool_choice");
  EXPECT_EQ(status_of(R"({"messages": [{"role": "user", "content": "x"}], "tools": [], "tool_choice": "auto"})", true), 200);
}

// Ollama's requests as the OpenAI bodies they mean: its option names and defaults, format, raw and system,
// the template applied by generate, load-only requests, and refusals of what would change the output.
TEST(ServerApi, OllamaRequestsBecomeTheOpenAiBodiesTheyMean) {
  using cli::OllamaEndpoint;
  auto req = [](const char* body, OllamaEndpoint ep = OllamaEndpoint::Generate, bool tmpl = true) {
    return cli::ollama_request(nlohmann::ordered_json::parse(body), ep, tmpl, "m");
  };
  cli::OllamaRequest r = req(R"({"model": "m:latest", "prompt": "hi", "raw": true})");
  EXPECT_FALSE(r.chat);
  EXPECT_TRUE(r.stream);   // Ollama's default
  EXPECT_EQ(r.openai["model"], "m");
  EXPECT_EQ(r.openai["prompt"], "hi");
  EXPECT_EQ(r.openai["stream_options"]["include_usage"], true);   // the last line's counts
  EXPECT_EQ(r.openai["temperature"], 0.8);   // Ollama's defaults, not OpenAI's
  EXPECT_EQ(r.openai["top_k"], 40);
  EXPECT_EQ(r.openai["top_p"], 0.9);
  EXPECT_EQ(r.openai["repeat_penalty"], 1.1);
  r = req(R"({"model": "m", "prompt": "hi", "system": "Be brief.", "stream": false, "format": "json",
              "options": {"temperature": 0, "num_predict": 7, "stop": ["\n"], "seed": 3, "num_ctx": 8192, "num_thread": 2,
                          "top_k": 5, "min_p": 0.1, "repeat_last_n": 16, "presence_penalty": 0.5, "mirostat": 0}})");
  EXPECT_TRUE(r.chat);   // generate applies the model's template
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.openai.contains("stream_options"));
  EXPECT_EQ(r.openai["messages"], nlohmann::ordered_json::parse(R"([{"role": "system", "content": "Be brief."},
                                                                   {"role": "user", "content": "hi"}])"));
  EXPECT_EQ(r.openai["max_tokens"], 7);
  EXPECT_EQ(r.openai["stop"], nlohmann::ordered_json::array({"\n"}));
  EXPECT_EQ(r.openai["temperature"], 0);
  EXPECT_EQ(r.openai["top_k"], 5);
  EXPECT_FALSE(r.openai.contains("num_ctx"));   // the runner's options: no effect
  EXPECT_EQ(r.openai["response_format"]["type"], "json_object");
  r = req(R"({"model": "m", "prompt": "hi", "system": "S"})", OllamaEndpoint::Generate, false);   // no template
  EXPECT_EQ(r.openai["prompt"], "S\n\nhi");
  EXPECT_TRUE(req(R"({"model": "m"})").load_only);
  EXPECT_TRUE(req(R"({"model": "m", "messages": []})", OllamaEndpoint::Chat).load_only);
  r = req(R"({"model": "m", "format": {"type": "object"}, "options": {"num_predict": -1},
              "messages": [{"role": "user", "content": "x"},
                           {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
                           {"role": "tool", "content": "2", "tool_name": "f"}],
              "tools": [{"type": "function", "function": {"name": "f"}}]})", OllamaEndpoint::Chat);
  EXPECT_TRUE(r.chat);
  EXPECT_FALSE(r.openai.contains("max_tokens"));   // -1: up to the context
  EXPECT_EQ(r.openai["response_format"]["json_schema"]["schema"]["type"], "object");
  EXPECT_EQ(r.openai["messages"][1]["tool_calls"][0]["function"]["arguments"]["a"], 1);
  EXPECT_EQ(r.openai["messages"][2]["name"], "f");
  EXPECT_EQ(r.openai["tools"][0]["function"]["name"], "f");
  const std::pair<const char*, const char*> bad[] = {
      {R"({"model": "m", "prompt": "x", "options": {"mirostat": 2}})", "options.mirostat"},
      {R"({"model": "m", "prompt": "x", "options": {"typical_p": 0.5}})", "options.typical_p"},
      {R"({"model": "m", "prompt": "x", "options": {"warp": 1}})", "options.warp"},
      {R"({"model": "m", "prompt": "x", "options": {"num_predict": 0}})", "options.num_predict"},
      {R"({"model": "m", "prompt": "x", "options": 5})", "options"},
      {R"({"model": "m", "prompt": "x", "format": "yaml"})", "format"},
      {R"({"model": "m", "prompt": "x", "template": "{{ .Prompt }}"})", "template"},
      {R"({"model": "m", "prompt": "x", "context": [1, 2]})", "context"},
      {R"({"model": "m", "prompt": "x", "images": ["AAAA"]})", "images"},
      {R"({"model": "m", "prompt": "x", "think": true})", "think"},
      {R"({"model": "m", "prompt": 5})", "prompt"},
      {R"({"model": "m", "prompt": "x", "stream": "yes"})", "stream"},
      {R"({"model": 5, "prompt": "x"})", "model"},
  };
  for (const auto& [body, param] : bad) {
    try {
      req(body);
      ADD_FAILURE() << "accepted " << body;
    } catch (const cli::ApiError& e) {
      EXPECT_EQ(e.status, 400) << body;
      EXPECT_EQ(e.param, param) << body;
      EXPECT_EQ(cli::ollama_error(e), json({{"error", e.message}}));
    }
  }
  try {
    req(R"({"model": "m", "messages": [{"role": "user", "content": "x", "images": ["AAAA"]}]})", OllamaEndpoint::Chat);
    ADD_FAILURE() << "images accepted";
  } catch (const cli::ApiError& e) {
    EXPECT_EQ(e.param, "messages[0].images");
  }
}

// OpenAI stream payloads as Ollama's NDJSON lines: text, a tool call (arguments as an object), the last line
// with done_reason, counts and durations in ns from the usage chunk; an error.
TEST(ServerApi, OllamaStreamsAreNdjsonLines) {
  auto lines = [](const std::string& text) {
    std::vector<json> out;
    for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) out.push_back(json::parse(text.substr(at, nl - at)));
    return out;
  };
  cli::OllamaStream chat(cli::OllamaEndpoint::Chat, "m");
  EXPECT_TRUE(chat.translate(R"({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]})").empty());
  auto l = lines(chat.translate(R"({"choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": null}]})"));
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0]["message"], json({{"role", "assistant"}, {"content", "Hel"}}));
  EXPECT_EQ(l[0]["done"], false);
  EXPECT_EQ(l[0]["model"], "m");
  l = lines(chat.translate(R"({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
      "function": {"name": "f", "arguments": "{\"a\":1}"}}]}, "finish_reason": null}]})"));
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0]["message"]["tool_calls"], json::parse(R"([{"function": {"name": "f", "arguments": {"a": 1}}}])"));
  EXPECT_TRUE(chat.translate(R"({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})").empty());
  l = lines(chat.translate(R"({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4},
      "vkspec": {"choices": [{"queued_s": 0.5, "prefill_s": 0.25, "decode_s": 1.0}]}})"));
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0]["done"], true);
  EXPECT_EQ(l[0]["done_reason"], "stop");
  EXPECT_EQ(l[0]["prompt_eval_count"], 9);
  EXPECT_EQ(l[0]["eval_count"], 4);
  EXPECT_EQ(l[0]["prompt_eval_duration"], 250000000);
  EXPECT_EQ(l[0]["eval_duration"], 1000000000);
  EXPECT_EQ(l[0]["total_duration"], 1750000000);
  EXPECT_TRUE(chat.translate("[DONE]").empty());
  cli::OllamaStream gen(cli::OllamaEndpoint::Generate, "m");
  l = lines(gen.translate(R"({"choices": [{"index": 0, "text": "x = 1", "finish_reason": "length"}]})"));
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0]["response"], "x = 1");
  l = lines(gen.translate(R"({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})"));
  EXPECT_EQ(l[0]["done_reason"], "length");
  EXPECT_EQ(l[0]["response"], "");
  l = lines(gen.translate(R"({"error": {"message": "generation failed: x", "type": "server_error"}})"));
  EXPECT_EQ(l[0], json({{"error", "generation failed: x"}}));
  // a whole response
  const json full = cli::ollama_response(json::parse(R"({"choices": [{"index": 0, "message": {"role": "assistant",
      "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
      "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}})"), cli::OllamaEndpoint::Chat, "m");
  EXPECT_EQ(full["message"]["content"], "");
  EXPECT_EQ(full["message"]["tool_calls"][0]["function"]["arguments"], json::object());
  EXPECT_EQ(full["done"], true);
  EXPECT_EQ(full["eval_count"], 2);
}

// /tokenize's pieces: text when valid UTF-8, else the bytes (a token that is part of a character).
TEST(ServerApi, TokenPiecesAreTextOrBytes) {
  EXPECT_EQ(cli::token_piece(" d\xC3\xA9" "f"), json(" d\xC3\xA9" "f"));
  EXPECT_EQ(cli::token_piece("\xE2\x80"), json::array({0xE2, 0x80}));
  EXPECT_EQ(cli::token_piece(""), json(""));
}

TEST(ServerApi, TokenLogprobsAreTheLogSoftmax) {
  GgufFile f(shared_path("models/pycode-target-f16.gguf"));
  auto tok = Tokenizer::from_gguf(f);
  std::vector<float> logits(tok->n_vocab());
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(std::sin(double(i) * 0.37) * 6.0);
  double z = 0;
  for (float l : logits) z += std::exp(double(l));
  const json e = cli::token_logprob([&](int32_t id) { return tok->piece(uint32_t(id)); }, 100, logits.data(),
                                    tok->n_vocab(), 5);
  EXPECT_NEAR(e["logprob"].get<double>(), double(logits[100]) - std::log(z), 1e-9);
  ASSERT_EQ(e["top_logprobs"].size(), 5u);
  const uint32_t best = uint32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  EXPECT_EQ(e["top_logprobs"][0]["token"], tok->piece(best));
  for (size_t i = 1; i < 5; ++i) EXPECT_LE(e["top_logprobs"][i]["logprob"].get<double>(), e["top_logprobs"][i - 1]["logprob"].get<double>());
}

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
    js["response_format"]["json_schema"]["schema"]["properties"]["id"]["format"] = "int32";
    const json bad_schema = s.post("/v1/completions", js, &status);
    EXPECT_EQ(status, 400);
    EXPECT_NE(bad_schema.dump().find("'format' is not supported"), std::string::npos) << bad_schema.dump();
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
  unsupported[1]["function"]["parameters"]["properties"]["zone"] = {{"type", "string"}, {"pattern", "^[A-Z]+$"}};
  const json u = s.post("/v1/chat/completions", {{"messages", ask}, {"tools", unsupported}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(u["error"]["message"].get<std::string>().find("'pattern' is not supported"), std::string::npos) << u.dump();
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
  EXPECT_EQ(j["unknown_model"]["status"], 404) << j["unknown_model"];
  EXPECT_EQ(s.stop(), 0);
}

}  // namespace
}  // namespace vkspec::test
