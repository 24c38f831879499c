// `vkspec serve`'s protocol layers without HTTP, against direct references: stop strings across token
// boundaries, request validation; tool calls (their schemas, replies read as calls, the tools and messages
// the template receives); embeddings inputs; conversations cut to the context. The other dialects:
// test_server_api_dialects.cpp.
#include <cmath>

#include "apps/server/embeddings_api.h"
#include "apps/server/llamacpp_api.h"
#include "apps/common/message_window.h"
#include "apps/server/ollama_api.h"
#include "apps/server/server_api.h"
#include "text/prompt.h"
#include "constrain/gbnf.h"
#include "gguf/gguf.h"
#include "tests/schema_check.h"
#include "tests/vk_test_env.h"

#include "tests/server_api_fixture.h"

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
      {R"({"prompt": "x", "spec_sampling": "typical"})", "spec_sampling"}, {R"({"prompt": "x", "spec_sampling": 1})", "spec_sampling"},
      {R"({"prompt": "x", "draft_tree": "broad"})", "draft_tree"}, {R"({"prompt": "x", "draft_tree": true})", "draft_tree"},
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
  EXPECT_EQ(s.sp.spec_sampling, VKSPEC_SPEC_SAMPLING_COUPLED);   // the server's default (--spec-sampling)
  EXPECT_EQ(s.draft_tree, -1);                                   // the server's (--draft-tree)
  EXPECT_EQ(cli::parse_completion(cli::parse_body(R"({"prompt": "x", "draft_tree": "off"})", lim_), false, lim_, enc_, "m")
                .draft_tree, 0);
  EXPECT_EQ(cli::parse_completion(cli::parse_body(R"({"prompt": "x", "spec_sampling": "rejection"})", lim_), false, lim_,
                                  enc_, "m").sp.spec_sampling, VKSPEC_SPEC_SAMPLING_REJECTION);
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

// Every JSON text the CLI and the server read is held to VKSPEC_MAX_JSON_DEPTH: at the limit it parses, one
// level deeper (or 200,000 deeper) it is refused and said to be too deep, not malformed.
TEST(ServerApi, JsonTextNestsAtMostTheLimit) {
  const auto nested = [](int n) { return std::string(size_t(n), '[') + std::string(size_t(n), ']'); };
  bool deep = true;
  EXPECT_TRUE(cli::parse_json_text(nested(VKSPEC_MAX_JSON_DEPTH), VKSPEC_MAX_JSON_DEPTH, &deep).has_value());
  EXPECT_FALSE(deep);
  EXPECT_FALSE(cli::parse_json_text(nested(VKSPEC_MAX_JSON_DEPTH + 1), VKSPEC_MAX_JSON_DEPTH, &deep).has_value());
  EXPECT_TRUE(deep);
  EXPECT_FALSE(cli::parse_json_text(nested(200000), VKSPEC_MAX_JSON_DEPTH, &deep).has_value());
  EXPECT_TRUE(deep);
  EXPECT_FALSE(cli::parse_json_text("[1,", VKSPEC_MAX_JSON_DEPTH, &deep).has_value());
  EXPECT_FALSE(deep);
  // a model's reply that nests deep is text, not a call (and no crash)
  const auto tools = cli::parse_tools(nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])"));
  EXPECT_FALSE(cli::parse_tool_call(R"({"name": "f", "parameters": )" + nested(100000) + "}", tools).has_value());
}

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
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"function": {"name": "a", "parameters": {"type": "object", "$defs": 5}}}]})", "tools"},
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
  // JSON text inside a body (a call's arguments) nests no deeper than the body may: 100,000 levels would
  // overflow the stack in the copy, the dump or the destructor of the value
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string deep_args = R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": )"
                                R"([{"function": {"name": "a", "arguments": ")" + deep + R"("}}]}]})";
  std::string deep_param;
  EXPECT_EQ(status_of(deep_args, true, &deep_param), 400);
  EXPECT_EQ(deep_param, "messages[1].tool_calls[0]");
  std::string got;
  EXPECT_EQ(status_of(R"({"prompt": "x", "tool_choice": "auto"})", false, &got), 400);   // chat only
  EXPECT_EQ(got, "tool_choice");
  EXPECT_EQ(status_of(R"({"messages": [{"role": "user", "content": "x"}], "tools": [], "tool_choice": "auto"})", true), 200);
}

// Ollama's requests as the OpenAI bodies they mean: its option names and defaults, format, raw and system,
// the template applied by generate, load-only requests, and refusals of what would change the output.
// Embeddings requests in both dialects: every input form becomes the token ids the completion prompt
// encoding gives (BOS first), in order; what is not a valid input is a 400 naming the field (a wrong model a
// 404); Ollama's truncate cuts a long input to the context, OpenAI's refuses it. Responses: OpenAI's list
// (base64: the float32 bytes, checked on a value whose bytes are known), Ollama's two shapes.
TEST_F(ServerApiParse, EmbeddingsInputsBecomeTokenLists) {
  using cli::EmbedEndpoint;
  const auto parse = [&](const std::string& body, EmbedEndpoint ep) {
    return cli::parse_embeddings(cli::parse_body(body, lim_), ep, lim_, enc_, "m", 384);
  };
  const std::vector<int32_t> def = enc_.prompt("def f():"), hi = enc_.prompt("hi");
  ASSERT_EQ(def[0], int32_t(tok_->bos()));
  auto s = parse(R"({"input": "def f():", "model": "m"})", EmbedEndpoint::OpenAi);
  EXPECT_EQ(s.inputs, std::vector<std::vector<int32_t>>({def}));
  EXPECT_TRUE(s.normalize);
  EXPECT_FALSE(s.base64);
  s = parse(R"({"input": ["def f():", "hi"], "encoding_format": "base64", "dimensions": 384})", EmbedEndpoint::OpenAi);
  EXPECT_EQ(s.inputs, std::vector<std::vector<int32_t>>({def, hi}));
  EXPECT_TRUE(s.base64);
  EXPECT_EQ(parse(R"({"input": [1, 5, 9]})", EmbedEndpoint::OpenAi).inputs, std::vector<std::vector<int32_t>>({{1, 5, 9}}));
  EXPECT_EQ(parse(R"({"input": [[1, 5], "hi"]})", EmbedEndpoint::OpenAi).inputs, std::vector<std::vector<int32_t>>({{1, 5}, hi}));
  s = parse(R"({"input": ["hi", ""], "model": "m:latest"})", EmbedEndpoint::OllamaEmbed);
  EXPECT_EQ(s.inputs, std::vector<std::vector<int32_t>>({hi}));   // Ollama leaves empty inputs out
  s = parse(R"({"prompt": "hi"})", EmbedEndpoint::OllamaEmbeddings);
  EXPECT_EQ(s.inputs, std::vector<std::vector<int32_t>>({hi}));
  EXPECT_FALSE(s.normalize);
  std::string long_text;
  for (int i = 0; i < 600; ++i) long_text += std::string(" w") + std::to_string(i);
  const size_t long_tokens = enc_.prompt(long_text).size();
  ASSERT_GT(long_tokens, lim_.n_ctx);
  EXPECT_EQ(parse(json{{"input", long_text}}.dump(), EmbedEndpoint::OllamaEmbed).inputs[0].size(), lim_.n_ctx);
  const std::pair<std::string, EmbedEndpoint> bad[] = {
      {R"({})", EmbedEndpoint::OpenAi}, {R"({"input": ""})", EmbedEndpoint::OpenAi}, {R"({"input": []})", EmbedEndpoint::OpenAi},
      {R"({"input": 5})", EmbedEndpoint::OpenAi}, {R"({"input": [1, "a"]})", EmbedEndpoint::OpenAi},
      {R"({"input": [1, 999999]})", EmbedEndpoint::OpenAi}, {R"({"input": [-1]})", EmbedEndpoint::OpenAi},
      {R"({"input": [[]]})", EmbedEndpoint::OpenAi}, {R"({"input": [{"a": 1}]})", EmbedEndpoint::OpenAi},
      {R"({"input": "a", "encoding_format": "int8"})", EmbedEndpoint::OpenAi}, {R"({"input": "a", "dimensions": 16})", EmbedEndpoint::OpenAi},
      {R"({"input": "a", "model": 3})", EmbedEndpoint::OpenAi}, {json{{"input", long_text}}.dump(), EmbedEndpoint::OpenAi},
      {json{{"input", long_text}, {"truncate", false}}.dump(), EmbedEndpoint::OllamaEmbed},
      {R"({"input": "a", "truncate": "yes"})", EmbedEndpoint::OllamaEmbed}, {R"({"input": [[1, 2]]})", EmbedEndpoint::OllamaEmbed},
      {R"({"input": "a", "encoding_format": "float"})", EmbedEndpoint::OllamaEmbed}, {R"({"prompt": ["a"]})", EmbedEndpoint::OllamaEmbeddings},
      {R"([1])", EmbedEndpoint::OpenAi}, {json{{"input", json::array()}}.dump(), EmbedEndpoint::OpenAi}};
  for (const auto& [body, ep] : bad) {
    SCOPED_TRACE(body.substr(0, 80));
    try {
      parse(body, ep);
      ADD_FAILURE() << "accepted";
    } catch (const cli::ApiError& e) {
      EXPECT_EQ(e.status, 400) << e.message;
    }
  }
  std::string many = "[";
  for (uint32_t i = 0; i <= lim_.max_embed_inputs; ++i) many += i ? ",\"a\"" : "\"a\"";
  EXPECT_THROW(parse(R"({"input": )" + many + "]}", EmbedEndpoint::OpenAi), cli::ApiError);
  try {
    parse(R"({"input": "a", "model": "other"})", EmbedEndpoint::OllamaEmbed);
    ADD_FAILURE() << "accepted another model";
  } catch (const cli::ApiError& e) {
    EXPECT_EQ(e.status, 404);
  }

  cli::EmbedSpec spec = parse(R"({"input": ["a", "b"], "encoding_format": "base64"})", EmbedEndpoint::OpenAi);
  const std::vector<std::vector<float>> vectors = {{1.0f, -2.0f}, {0.5f, 0.0f}};   // 1.0f: 00 00 80 3F, -2.0f: 00 00 00 C0
  json r = cli::embeddings_response(spec, vectors, "m", 0.25);
  EXPECT_EQ(r["object"], "list");
  EXPECT_EQ(r["data"][0]["embedding"], "AACAPwAAAMA=");
  EXPECT_EQ(r["data"][1]["index"], 1);
  EXPECT_EQ(r["usage"]["prompt_tokens"], spec.inputs[0].size() + spec.inputs[1].size());
  spec.base64 = false;
  EXPECT_EQ(cli::embeddings_response(spec, vectors, "m", 0.25)["data"][1]["embedding"], json({0.5, 0.0}));
  spec.endpoint = EmbedEndpoint::OllamaEmbed;
  r = cli::embeddings_response(spec, vectors, "m", 0.25);
  EXPECT_EQ(r["embeddings"], json(vectors));
  EXPECT_EQ(r["total_duration"], 250000000);
  EXPECT_EQ(r["prompt_eval_count"], spec.inputs[0].size() + spec.inputs[1].size());
  spec.endpoint = EmbedEndpoint::OllamaEmbeddings;
  EXPECT_EQ(cli::embeddings_response(spec, vectors, "m", 0.25), json({{"embedding", {1.0, -2.0}}}));
}

// fit_messages against a linear scan over the cut points (Ollama's loop, restricted to user messages): for
// every budget the same window; system messages before the cut stay, in order; a hostile conversation of
// 10,001 messages costs about log2(n) countings.
TEST(ServerApi, ConversationsAreCutAtUserMessagesToFitTheBudget) {
  using ojson = nlohmann::ordered_json;
  const ojson conv = ojson::parse(R"([{"role": "system", "content": "sys"}, {"role": "user", "content": "u1 long"},
      {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"},
      {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]},
      {"role": "tool", "content": "result"}, {"role": "assistant", "content": "a2 longer"},
      {"role": "system", "content": "mid"}, {"role": "user", "content": "u3"}, {"role": "assistant", "content": "a3"},
      {"role": "user", "content": "u4 the latest"}])");
  size_t calls = 0;
  auto cost = [&](const ojson& m) {   // 3 per message plus its content's bytes
    ++calls;
    size_t n = 0;
    for (const ojson& x : m) n += 3 + x["content"].get<std::string>().size();
    return n;
  };
  const size_t total = cost(conv);
  for (size_t budget = 0; budget <= total + 1; ++budget) {
    // the reference: the first cut point (0 or a user message) whose window fits, else the last one
    ojson want;
    for (size_t cut = 0; cut < conv.size(); ++cut) {
      if (cut > 0 && conv[cut]["role"] != "user") continue;
      want = ojson::array();
      for (size_t i = 0; i < conv.size(); ++i)
        if (i >= cut || conv[i]["role"] == "system") want.push_back(conv[i]);
      if (cost(want) <= budget) break;
    }
    const cli::MessageWindow w = cli::fit_messages(conv, budget, cost);
    EXPECT_EQ(w.messages, want) << budget;
    EXPECT_EQ(w.dropped, conv.size() - want.size());
    EXPECT_EQ(w.messages.back()["content"], "u4 the latest");
  }
  ojson many = ojson::array({{{"role", "system"}, {"content", "s"}}});
  for (int i = 0; i < 5000; ++i) {
    many.push_back({{"role", "user"}, {"content", "question"}});
    many.push_back({{"role", "assistant"}, {"content", "answer"}});
  }
  calls = 0;
  const cli::MessageWindow w = cli::fit_messages(many, 1000, cost);
  EXPECT_LE(calls, 16u);
  EXPECT_LE(cost(w.messages), 1000u);
  EXPECT_EQ(w.messages[0]["content"], "s");
  EXPECT_EQ(w.messages[1]["role"], "user");
  // the reply's reserve: its limit, else a quarter of the context, at most half
  EXPECT_EQ(cli::reply_reserve(4096, -1), 1024u);
  EXPECT_EQ(cli::reply_reserve(4096, 100), 100u);
  EXPECT_EQ(cli::reply_reserve(4096, 4000), 2048u);
  EXPECT_EQ(cli::reply_reserve(4096, 4096), 1024u);   // (chat's default -n, 2^30: no limit)
  EXPECT_EQ(cli::reply_reserve(4096, int64_t(1) << 30), 1024u);
}

// fit_messages_chained over a conversation that grows a turn at a time, as a server sees it (the whole of it
// every turn): every window fits, ends with the newest message and begins at a user message; the cut never
// moves back, and when it moves it moves at least half the budget, so that most turns' prompts extend the
// turn before's (the prompt cache serves them) where fit_messages' longest window moves almost every turn;
// only windows estimated to fit are counted, so a hostile conversation of 10,001 messages costs one counting.
TEST(ServerApi, ChainedCutsStayPutAsAConversationGrows) {
  using ojson = nlohmann::ordered_json;
  const auto own = [](const ojson& m) { return 3 + m["content"].get<std::string>().size(); };
  size_t counted = 0;
  const auto cost = [&](const ojson& w) {   // the messages' own tokens and a template's 7 of its own
    ++counted;
    size_t n = 7;
    for (const ojson& m : w) n += own(m);
    return n;
  };
  const size_t budget = 600;   // ~11 turns of ~56 tokens
  ojson conv = ojson::array({{{"role", "system"}, {"content", "sys prompt"}}});
  uint32_t lcg = 12345;
  const auto text = [&]() {
    lcg = lcg * 1664525u + 1013904223u;
    return std::string(5 + (lcg >> 24) % 40, 'x');
  };
  size_t cut = 1, moves = 0, longest_moves = 0, longest_dropped = 0, turns_cut = 0;
  for (int turn = 0; turn < 120; ++turn) {
    conv.push_back({{"role", "user"}, {"content", text()}});
    if (turn % 9 == 4) conv.push_back({{"role", "system"}, {"content", "a note"}});   // kept whatever the cut
    counted = 0;
    const cli::MessageWindow w = cli::fit_messages_chained(conv, budget, 0, own, cost);
    EXPECT_LE(counted, 2u) << turn;
    ASSERT_LE(cost(w.messages), budget) << turn;
    EXPECT_EQ(w.messages.back(), conv.back());
    // the cut: the first message not left out (dropped counts the non-system ones before it)
    size_t first = 0;
    for (size_t skipped = 0; conv[first]["role"] == "system" || skipped < w.dropped; ++first)
      skipped += conv[first]["role"] != "system";
    ojson want = ojson::array();
    for (size_t i = 0; i < conv.size(); ++i)
      if (i >= first || conv[i]["role"] == "system") want.push_back(conv[i]);
    EXPECT_EQ(w.messages, want) << turn;
    EXPECT_EQ(conv[first]["role"], "user") << turn;
    if (w.dropped > 0) ++turns_cut;
    ASSERT_GE(first, cut) << "the cut moved back at turn " << turn;
    if (first != cut) {
      ++moves;
      size_t moved = 0;
      for (size_t i = cut; i < first; ++i)
        if (conv[i]["role"] != "system") moved += own(conv[i]);
      EXPECT_GE(moved, budget / 2) << turn;
      cut = first;
    }
    const size_t longest = cli::fit_messages(conv, budget, cost).dropped;
    longest_moves += longest != longest_dropped;
    longest_dropped = longest;
    conv.push_back({{"role", "assistant"}, {"content", text()}});
  }
  EXPECT_GT(turns_cut, 100u);
  EXPECT_GE(moves, 3u);
  EXPECT_LE(moves * 3, longest_moves) << moves << " moves against fit_messages' " << longest_moves;
  // a hostile conversation: one counting, of a window that fits
  ojson many = ojson::array({{{"role", "system"}, {"content", "s"}}});
  for (int i = 0; i < 5000; ++i) {
    many.push_back({{"role", "user"}, {"content", "question"}});
    many.push_back({{"role", "assistant"}, {"content", "answer"}});
  }
  counted = 0;
  const cli::MessageWindow w = cli::fit_messages_chained(many, 1000, 7, own, cost);
  EXPECT_EQ(counted, 1u);
  EXPECT_LE(cost(w.messages), 1000u);
  EXPECT_GE(cost(w.messages), 500u - 20u);   // the cut drops about half a budget at a time, not more
  EXPECT_EQ(w.messages[0]["content"], "s");
  EXPECT_EQ(w.messages[1]["role"], "user");
}


}  // namespace
}  // namespace vkspec::test
