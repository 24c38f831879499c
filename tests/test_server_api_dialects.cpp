// `vkspec serve`'s other dialects without HTTP: Ollama's requests, cuts and NDJSON lines, llama-server's
// fields and native completions, /tokenize's pieces, logprobs.
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

// Ollama's /api/chat cuts a conversation longer than the context (the kept window's prompt, as Ollama renders
// it); OpenAI's chat endpoint answers context_length_exceeded for the same messages, as OpenAI does.
TEST_F(ServerApiParse, OllamaChatIsCutToTheContextWhereOpenAiRefusesIt) {
  using ojson = nlohmann::ordered_json;
  enc_.render_chat = [](const ojson& messages, const ojson&) {
    std::string text = "<s>";
    for (const ojson& m : messages) text += m["role"].get<std::string>() + ": " + m["content"].get<std::string>() + "\n";
    return text + "assistant:";
  };
  ojson messages = ojson::array({{{"role", "system"}, {"content", "You answer in one line."}}});
  for (int i = 0; i < 40; ++i) {
    messages.push_back({{"role", "user"}, {"content", "Question " + std::to_string(i) + ": what is the value of x * " + std::to_string(i) + " here?"}});
    messages.push_back({{"role", "assistant"}, {"content", "It is " + std::to_string(7 * i) + ", as the text above says."}});
  }
  messages.push_back({{"role", "user"}, {"content", "And the last one?"}});
  const ojson body = {{"model", "m"}, {"messages", messages}, {"stream", false}};
  std::string param;
  try {
    cli::parse_completion(body, true, lim_, enc_, "m");
    ADD_FAILURE() << "a prompt longer than the context was accepted";
  } catch (const cli::ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "context_length_exceeded");
  }
  const cli::OllamaRequest o = cli::ollama_request(body, cli::OllamaEndpoint::Chat, true, "m");
  ASSERT_TRUE(o.fit_messages);
  for (const int64_t num_predict : {int64_t(-1), int64_t(300)}) {
    ojson ob = body;
    if (num_predict > 0) ob["options"] = {{"num_predict", num_predict}};
    const cli::OllamaRequest req = cli::ollama_request(ob, cli::OllamaEndpoint::Chat, true, "m");
    const cli::CompletionSpec s = cli::parse_completion(req.openai, true, lim_, enc_, "m", req.fit_messages);
    const size_t budget = lim_.n_ctx - (num_predict > 0 ? 256 : 128);   // min(num_predict, ctx / 2), else ctx / 4
    EXPECT_LE(s.prompt.size(), budget);
    ASSERT_GT(s.dropped_messages, 0u);
    EXPECT_EQ(s.dropped_messages % 2, 0u);
    // the prompt is the rendering of the system message and the newest messages
    ojson kept = ojson::array({messages[0]});
    for (size_t i = 1 + s.dropped_messages; i < messages.size(); ++i) kept.push_back(messages[i]);
    EXPECT_EQ(s.prompt, enc_.chat(enc_.render_chat(kept, nullptr)));
  }
  // the next turns (an answer and a question each) keep the cut while they fit: their prompts extend the one
  // before (the prompt cache serves it); a cut that moves moves several exchanges at once
  ojson conv = messages;
  size_t dropped = 0, moves = 0;
  std::string before;
  for (int turn = 0; turn < 9; ++turn) {
    if (turn > 0) {
      conv.push_back({{"role", "assistant"}, {"content", "It is " + std::to_string(turn) + "."}});
      conv.push_back({{"role", "user"}, {"content", "Next " + std::to_string(turn) + "?"}});
    }
    const cli::CompletionSpec s = cli::parse_completion({{"messages", conv}}, true, lim_, enc_, "m", true);
    ojson kept = ojson::array({messages[0]});
    for (size_t i = 1 + s.dropped_messages; i < conv.size(); ++i) kept.push_back(conv[i]);
    const std::string now = enc_.render_chat(kept, nullptr);
    if (turn == 0) dropped = s.dropped_messages, before = now;
    EXPECT_EQ(s.prompt, enc_.chat(now));
    if (s.dropped_messages == dropped) {
      EXPECT_EQ(now.substr(0, before.size()), before) << turn;
    } else {
      EXPECT_GE(s.dropped_messages, dropped + 6) << turn;
      ++moves;
    }
    dropped = s.dropped_messages;
    before = now;
  }
  EXPECT_LE(moves, 2u);
  EXPECT_FALSE(cli::ollama_request({{"prompt", "hi"}}, cli::OllamaEndpoint::Generate, true, "m").fit_messages);
}

// llama-server's fields on OpenAI's endpoints (llama.cpp's web UI sends its whole sampler setup there): neutral
// values of samplers vkspec does not run pass, `samplers` turns off the ones it leaves out, n_predict stands for
// max_tokens; a sampler that would change the output is a 400 naming it, never ignored.
TEST_F(ServerApiParse, LlamaServerFieldsOnOpenAiEndpoints) {
  using ojson = nlohmann::ordered_json;
  const auto spec = [this](const char* body) {
    return cli::parse_completion(cli::llamacpp_openai_extensions(ojson::parse(body), lim_.n_ctx), false, lim_, enc_, "m");
  };
  // the web UI's defaults (its request, with a prompt for a chat's messages)
  cli::CompletionSpec s = spec(R"({"prompt": "x", "stream": false, "reasoning_format": "auto", "temperature": 0.8,
      "dynatemp_range": 0, "dynatemp_exponent": 1, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "xtc_probability": 0,
      "xtc_threshold": 0.1, "typical_p": 1, "repeat_last_n": 64, "repeat_penalty": 1, "presence_penalty": 0,
      "frequency_penalty": 0, "dry_multiplier": 0, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": -1,
      "samplers": ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"],
      "timings_per_token": false, "cache_prompt": true, "max_tokens": 8})");
  EXPECT_FLOAT_EQ(s.sp.temperature, 0.8f);
  EXPECT_EQ(s.sp.top_k, 40);
  EXPECT_FLOAT_EQ(s.sp.top_p, 0.95f);
  EXPECT_FLOAT_EQ(s.sp.min_p, 0.05f);
  EXPECT_EQ(s.max_tokens, 8u);
  s = spec(R"({"prompt": "x", "samplers": ["top_k", "temperature"], "top_k": 5, "top_p": 0.5, "min_p": 0.1})");
  EXPECT_EQ(s.sp.top_k, 5);
  EXPECT_FLOAT_EQ(s.sp.top_p, 1.0f);   // left out of the chain: off, as llama.cpp would not run them
  EXPECT_FLOAT_EQ(s.sp.min_p, 0.0f);
  EXPECT_EQ(spec(R"({"prompt": "x", "n_predict": 7})").max_tokens, 7u);
  EXPECT_EQ(spec(R"({"prompt": "x", "n_predict": 7, "max_tokens": 5})").max_tokens, 5u);   // OpenAI's field first
  EXPECT_EQ(spec(R"({"prompt": "x", "n_predict": 100000})").max_tokens, lim_.n_ctx);
  for (const auto& [body, param] : std::vector<std::pair<const char*, const char*>>{
           {R"({"prompt": "x", "dry_multiplier": 0.8})", "dry_multiplier"}, {R"({"prompt": "x", "mirostat": 2})", "mirostat"},
           {R"({"prompt": "x", "xtc_probability": 0.5})", "xtc_probability"}, {R"({"prompt": "x", "typical_p": 0.5})", "typical_p"},
           {R"({"prompt": "x", "n_probs": 3})", "n_probs"}, {R"({"prompt": "x", "return_tokens": true})", "return_tokens"},
           {R"({"prompt": "x", "samplers": ["temperature", "top_k"]})", "samplers"},
           {R"({"prompt": "x", "n_predict": "many"})", "n_predict"}}) {
    try {
      spec(body);
      ADD_FAILURE() << "accepted " << body;
    } catch (const cli::ApiError& e) {
      EXPECT_EQ(e.status, 400) << body;
      EXPECT_EQ(e.param, param) << body;
    }
  }
}

// llama-server's /completion: its names and defaults become the OpenAI completion body, which parse_completion
// checks as any other; samplers vkspec does not run are refused unless neutral; its logit_bias forms.
TEST_F(ServerApiParse, LlamaCppCompletionsBecomeTheOpenAiBodiesTheyMean) {
  using ojson = nlohmann::ordered_json;
  auto req = [this](const char* body) { return cli::llamacpp_request(ojson::parse(body), lim_.n_ctx); };
  cli::LlamaCppRequest r = req(R"({"prompt": "def f(x):"})");
  EXPECT_FALSE(r.stream);   // llama-server's default
  EXPECT_EQ(r.openai["temperature"], 0.8);   // its defaults, not OpenAI's
  EXPECT_EQ(r.openai["top_k"], 40);
  EXPECT_EQ(r.openai["top_p"], 0.95);
  EXPECT_EQ(r.openai["min_p"], 0.05);
  EXPECT_FALSE(r.openai.contains("max_tokens"));   // n_predict -1: up to the context
  EXPECT_FALSE(r.openai.contains("seed"));         // random
  EXPECT_EQ(r.settings["n_predict"], -1);
  r = req(R"({"prompt": [1, 2, 3], "n_predict": 9, "temperature": 0, "seed": 7, "stop": ["\n"], "stream": true,
              "cache_prompt": true, "id_slot": 1, "n_keep": 4, "mirostat": 0, "typical_p": 1.0,
              "samplers": ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "tfs_z", "top_p", "min_p", "xtc", "temperature"],
              "logit_bias": [[5, false], [7, 1.5]], "ignore_eos": true, "grammar": "root ::= [a]"})");
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.openai["stream_options"]["include_usage"], true);   // the last event's counts and timings
  EXPECT_EQ(r.openai["max_tokens"], 9);
  EXPECT_EQ(r.openai["seed"], 7);
  EXPECT_EQ(r.openai["logit_bias"], ojson::parse(R"({"5": -100, "7": 1.5})"));
  EXPECT_EQ(r.settings["n_predict"], 9);
  EXPECT_EQ(r.settings["temperature"], 0);
  const cli::CompletionSpec spec = cli::parse_completion(r.openai, false, lim_, enc_, "m");
  EXPECT_EQ(spec.prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(spec.max_tokens, 9u);
  EXPECT_EQ(spec.sp.seed, 7u);
  EXPECT_EQ(spec.bias_tokens, (std::vector<int32_t>{5, 7}));
  EXPECT_TRUE(spec.ignore_eos);
  EXPECT_FALSE(spec.grammar.empty());
  EXPECT_EQ(req(R"({"prompt": "x", "logit_bias": {"3": 2}})").openai["logit_bias"], ojson::parse(R"({"3": 2})"));
  // a key is JSON text of its own: one nested 100,000 deep is refused, not parsed into a value that overflows
  // the stack (the body's depth limit never saw it)
  ojson deep_key = ojson::parse(R"({"prompt": "x", "logit_bias": {}})");
  deep_key["logit_bias"][std::string(100000, '[') + std::string(100000, ']')] = 1;
  try {
    cli::llamacpp_request(deep_key, lim_.n_ctx);
    ADD_FAILURE() << "a 100,000-deep logit_bias key was taken";
  } catch (const cli::ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("logit_bias"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(req(R"({"prompt": "x", "seed": 4294967295})").openai.contains("seed"));
  EXPECT_EQ(req(R"({"prompt": "x", "n_predict": 100000})").openai["max_tokens"], lim_.n_ctx);   // cut to the context
  // samplers: SillyTavern's list above keeps the defaults; a sampler left out of the list is off; the letters
  EXPECT_EQ(r.openai["top_k"], 40);
  EXPECT_EQ(r.openai["min_p"], 0.05);
  r = req(R"({"prompt": "x", "samplers": ["top_k", "temperature"], "top_p": 0.5, "repeat_penalty": 1.3})");
  EXPECT_EQ(r.openai["top_k"], 40);
  EXPECT_EQ(r.openai["top_p"], 1.0);
  EXPECT_EQ(r.openai["min_p"], 0.0);
  EXPECT_EQ(r.openai["repeat_penalty"], 1.0);
  r = req(R"({"prompt": "x", "samplers": "kpmt"})");
  EXPECT_EQ(r.openai["top_p"], 0.95);
  EXPECT_EQ(r.openai["repeat_penalty"], 1.0);
  for (const char* bad : {R"({})", R"({"prompt": "x", "n_predict": 0})", R"({"prompt": "x", "n_predict": "5"})",
                          R"({"prompt": "x", "mirostat": 2})", R"({"prompt": "x", "typical_p": 0.5})",
                          R"({"prompt": "x", "n_probs": 3})", R"({"prompt": "x", "samplers": ["temperature", "top_k"]})",
                          R"({"prompt": "x", "samplers": ["top_k"]})", R"({"prompt": "x", "samplers": ["top_k", "magic"]})",
                          R"({"prompt": "x", "samplers": "kpz"})", R"({"prompt": "x", "samplers": ["infill", "temperature"]})",
                          R"({"prompt": "x", "samplers": 3})",
                          R"({"prompt": "x", "dry_multiplier": 0.8})", R"({"prompt": "x", "logit_bias": [["hello", 1]]})",
                          R"({"prompt": "x", "logit_bias": [[1, "x"]]})", R"({"prompt": "x", "logit_bias": 5})",
                          R"({"prompt": "x", "image_data": [{"data": "AA=="}]})", R"({"prompt": "x", "stream": 1})"}) {
    try {
      req(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const cli::ApiError& e) {
      EXPECT_EQ(e.status, 400) << bad;
      const nlohmann::json err = cli::llamacpp_error(e);   // llama-server's error shape
      EXPECT_EQ(err["error"]["code"], 400);
      EXPECT_EQ(err["error"]["message"], e.message);
    }
  }
}

// OpenAI events and responses in llama-server's shapes: content events, the last with stop, counts, timings,
// why it stopped (a stop string: "word" and the string; max tokens: "limit"; else "eos").
TEST(ServerApi, LlamaCppStreamsAndResponses) {
  const nlohmann::json settings = {{"n_predict", 4}};
  cli::LlamaCppStream st("m", settings);
  const auto chunk = [](const std::string& text, const nlohmann::json& finish) {
    return nlohmann::json{{"choices", {{{"index", 0}, {"text", text}, {"finish_reason", finish}}}}}.dump();
  };
  const nlohmann::json vk = {{"choices", {{{"prefilled_tokens", 3}, {"shared_prompt_tokens", 2}, {"prefill_s", 0.5},
                                           {"decode_s", 2.0}, {"stop_reason", "stopped"}, {"stop_string", "\n\n"}}}}};
  std::string out = st.translate(chunk("def", nullptr)) + st.translate(chunk(" f():\n", nullptr)) + st.translate(chunk("", "stop"));
  out += st.translate(nlohmann::json{{"choices", nlohmann::json::array()},
                                     {"usage", {{"prompt_tokens", 5}, {"completion_tokens", 4}}}, {"vkspec", vk}}.dump());
  EXPECT_EQ(st.translate("[DONE]"), "");
  std::vector<nlohmann::json> events;
  for (size_t at = 0; at < out.size();) {
    ASSERT_EQ(out.compare(at, 6, "data: "), 0) << out;
    const size_t end = out.find("\n\n", at);
    events.push_back(nlohmann::json::parse(out.substr(at + 6, end - at - 6)));
    at = end + 2;
  }
  ASSERT_EQ(events.size(), 3u) << out;
  EXPECT_EQ(events[0]["content"], "def");
  EXPECT_EQ(events[0]["stop"], false);
  EXPECT_EQ(events[1]["content"], " f():\n");
  const nlohmann::json& last = events[2];
  EXPECT_EQ(last["content"], "");
  EXPECT_EQ(last["stop"], true);
  EXPECT_EQ(last["stop_type"], "word");
  EXPECT_EQ(last["stopping_word"], "\n\n");
  EXPECT_EQ(last["has_new_line"], true);
  EXPECT_EQ(last["tokens_predicted"], 4);
  EXPECT_EQ(last["tokens_evaluated"], 5);
  EXPECT_EQ(last["tokens_cached"], 2);
  EXPECT_EQ(last["generation_settings"], settings);
  EXPECT_EQ(last["timings"]["prompt_n"], 3);
  EXPECT_DOUBLE_EQ(last["timings"]["prompt_ms"].get<double>(), 500.0);
  EXPECT_DOUBLE_EQ(last["timings"]["predicted_per_second"].get<double>(), 2.0);
  // a whole response; max tokens reached
  const nlohmann::json whole = cli::llamacpp_response(
      {{"choices", {{{"index", 0}, {"text", "abc"}, {"finish_reason", "length"}}}}, {"usage", {{"prompt_tokens", 5}, {"completion_tokens", 4}}},
       {"vkspec", {{"choices", {{{"stop_reason", "length"}}}}}}},
      "m", settings);
  EXPECT_EQ(whole["content"], "abc");
  EXPECT_EQ(whole["stop"], true);
  EXPECT_EQ(whole["stop_type"], "limit");
  EXPECT_EQ(whole["has_new_line"], false);
  EXPECT_EQ(whole["model"], "m");
}

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


}  // namespace
}  // namespace vkspec::test
