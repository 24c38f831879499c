#include "server/server_api.h"

#include "common/message_window.h"
#include "common/option_names.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

namespace vkspec::cli {
using ojson = nlohmann::ordered_json;

namespace {
std::string type_name(const ojson& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}
}  // namespace

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

// Typed, range-checked readers of optional fields (absent or null: the default).
const ojson* field(const ojson& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

bool boolean(const ojson& body, const char* name, bool def) {
  const ojson* v = field(body, name);
  if (!v) return def;
  if (!v->is_boolean()) bad(name, std::string("'") + name + "' must be a boolean, not " + type_name(*v));
  return v->get<bool>();
}

std::vector<int32_t> token_ids(const ojson& a, const ServerLimits& lim, const std::string& param, const std::string& what) {
  std::vector<int32_t> ids;
  for (const ojson& v : a) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= int64_t(lim.n_vocab))
      bad(param, what + " must hold token ids of this model (0.." + std::to_string(lim.n_vocab - 1) + "), not " + v.dump());
    ids.push_back(int32_t(v.get<int64_t>()));
  }
  return ids;
}

void check_model(const ojson& body, const std::string& model_id, bool ollama) {
  const ojson* m = field(body, "model");
  if (!m) return;
  if (!m->is_string()) bad("model", "'model' must be a string");
  const std::string name = m->get<std::string>();
  if (name != model_id && !(ollama && name == model_id + ":latest"))
    throw ApiError(404, "the model '" + name + "' does not exist (this server has '" + model_id + "')", "model", "model_not_found");
}

namespace {
double number(const ojson& body, const char* name, double def, double lo, double hi) {
  const ojson* v = field(body, name);
  if (!v) return def;
  if (!v->is_number()) bad(name, std::string("'") + name + "' must be a number, not " + type_name(*v));
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    bad(name, std::string("'") + name + "' must be between " + nlohmann::json(lo).dump() + " and " +
                  nlohmann::json(hi).dump());
  return d;
}

int64_t integer(const ojson& body, const char* name, int64_t def, int64_t lo, int64_t hi) {
  const ojson* v = field(body, name);
  if (!v) return def;
  if (!v->is_number_integer() && !(v->is_number_float() && std::floor(v->get<double>()) == v->get<double>()))
    bad(name, std::string("'") + name + "' must be an integer, not " + type_name(*v));
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)) bad(name, std::string("'") + name + "' is too large");
  const double d = v->get<double>();
  if (d < double(lo) || d > double(hi))
    bad(name, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return v->is_number_float() ? int64_t(d) : v->get<int64_t>();
}

// Message content: a string, or an array of {"type": "text", "text": ...} parts (joined).
std::string message_text(const ojson& content, size_t i) {
  const std::string param = "messages[" + std::to_string(i) + "].content";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(param, "'" + param + "' must be a string or an array of text parts");
  std::string text;
  for (const ojson& part : content) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string())
      bad(param, "'" + param + "': only parts of type 'text' with a string 'text' are supported");
    text += part["text"].get<std::string>();
  }
  return text;
}

// An assistant message's tool_calls (OpenAI's: arguments as JSON text) as the chat templates read them:
// {"id", "type": "function", "function": {"name", "arguments": an object}} (Llama 3's writes arguments|tojson).
ojson template_tool_calls(const ojson& calls, const std::string& p) {
  if (!calls.is_array() || calls.empty()) bad(p, "'" + p + "' must be a non-empty array of tool calls");
  ojson out = ojson::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    const ojson& c = calls[k];
    const std::string q = p + "[" + std::to_string(k) + "]";
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
      bad(q, "'" + q + "' must be an object {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
    const ojson& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string()) bad(q, "'" + q + ".function.name' must be a string");
    ojson args = f.contains("arguments") ? f["arguments"] : ojson::object();
    if (args.is_string()) {
      bool deep = false;
      std::optional<ojson> parsed = parse_json_text(args.get<std::string>(), VKSPEC_MAX_JSON_DEPTH, &deep);
      if (!parsed)
        bad(q, "'" + q + ".function.arguments' " +
                   (deep ? "nests deeper than " + std::to_string(VKSPEC_MAX_JSON_DEPTH) + " levels" : "is not JSON text"));
      args = std::move(*parsed);
    }
    if (!args.is_object()) bad(q, "'" + q + ".function.arguments' must be a JSON object (as text)");
    ojson t = {{"type", "function"}, {"function", {{"name", f["name"]}, {"arguments", args}}}};
    if (c.contains("id")) {
      if (!c["id"].is_string()) bad(q, "'" + q + ".id' must be a string");
      t["id"] = c["id"];
    }
    out.push_back(std::move(t));
  }
  return out;
}

ojson chat_messages(const ojson& body) {
  const ojson* m = field(body, "messages");
  if (!m) bad("messages", "'messages' is required");
  if (!m->is_array() || m->empty()) bad("messages", "'messages' must be a non-empty array");
  ojson out = ojson::array();
  for (size_t i = 0; i < m->size(); ++i) {
    const ojson& msg = (*m)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) bad(p, "'" + p + "' must be an object");
    if (!msg.contains("role") || !msg["role"].is_string()) bad(p + ".role", "'" + p + ".role' must be a string");
    const std::string role = msg["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "developer" && role != "tool")
      bad(p + ".role", "'" + p + ".role' must be system, developer, user, assistant or tool, not '" + role + "'");
    if (msg.contains("function_call")) bad(p, "'function_call' (the deprecated form) is not supported: use tool_calls");
    ojson o = {{"role", role == "developer" ? "system" : role}};
    o["content"] = msg.contains("content") && !msg["content"].is_null() ? message_text(msg["content"], i) : "";
    if (const ojson* calls = field(msg, "tool_calls")) {
      if (role != "assistant") bad(p + ".tool_calls", "only an assistant message has 'tool_calls'");
      o["tool_calls"] = template_tool_calls(*calls, p + ".tool_calls");
    }
    if (role == "tool")
      for (const char* key : {"tool_call_id", "name"})
        if (const ojson* v = field(msg, key)) {
          if (!v->is_string()) bad(p + "." + key, "'" + p + "." + key + "' must be a string");
          o[key] = *v;
        }
    out.push_back(std::move(o));
  }
  return out;
}

// `tools` and `tool_choice` -> the tools a reply may call (set in s) and the tools the prompt lists (null:
// none). A call is held to the grammar of the chosen tools: from the first token with "required" or a named
// function, lazily with "auto" (apps/server/tool_calls.h).
ojson chat_tools(const ojson& body, bool chat, CompletionSpec& s) {
  const ojson* tools = field(body, "tools");
  if (tools && tools->is_array() && tools->empty()) tools = nullptr;
  const ojson* choice = field(body, "tool_choice");
  if (!chat && (tools || choice)) bad(tools ? "tools" : "tool_choice", "tools are for /v1/chat/completions");
  if (const ojson* ptc = field(body, "parallel_tool_calls"); ptc && !ptc->is_boolean())
    bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");   // (a reply makes at most one call)
  std::string mode = tools ? "auto" : "none", forced;
  if (choice) {
    if (choice->is_string()) {
      mode = choice->get<std::string>();
      if (mode != "none" && mode != "auto" && mode != "required")
        bad("tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else if (choice->is_object() && choice->contains("function") && (*choice)["function"].is_object() &&
               (*choice)["function"].contains("name") && (*choice)["function"]["name"].is_string()) {
      mode = "function";
      forced = (*choice)["function"]["name"].get<std::string>();
    } else {
      bad("tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (!tools && mode != "none" && mode != "auto") bad("tool_choice", "'tool_choice' needs 'tools'");
  }
  if (!tools || mode == "none") return nullptr;
  try {
    s.tools = parse_tools(*tools);
  } catch (const std::invalid_argument& e) {
    bad("tools", e.what());
  }
  if (s.sp.json_object || !s.json_schema.empty() || !s.grammar.empty())
    bad("tools", "'tools' and a JSON response_format, schema or grammar exclude each other");
  std::vector<ToolFunction> callable = s.tools;
  if (mode == "function") {
    std::erase_if(callable, [&](const ToolFunction& t) { return t.name != forced; });
    if (callable.empty()) bad("tool_choice", "'tool_choice' names '" + forced + "', which is not among the tools");
  }
  try {
    s.json_schema = tool_call_schema(callable).dump();   // converted (and checked) at submission
  } catch (const std::invalid_argument& e) {   // a tool's schema that cannot be combined ('$defs' not an object)
    bad("tools", e.what());
  }
  if (mode == "auto") s.grammar_trigger = kToolCallTrigger;
  return *tools;
}

// The chat template's prompt of the messages (chat_messages') and `tools` (400s: no template, a template that
// refuses them).
std::string rendered_chat(const ojson& messages, const ojson& tools, const PromptEncoder& enc) {
  if (!enc.render_chat)
    throw ApiError(400, "the model has no chat template: use /v1/completions, or start the server with --chat-template FILE");
  try {
    return enc.render_chat(messages, tools);
  } catch (const std::exception& e) {
    throw ApiError(400, std::string("the chat template refused the messages: ") + e.what(), "messages");
  }
}

// max_tokens (or max_completion_tokens) as asked; -1: up to the context.
int64_t requested_max_tokens(const ojson& body, const ServerLimits& lim) {
  const int64_t max_tokens = integer(body, "max_tokens", -1, 1, lim.n_ctx);
  return integer(body, "max_completion_tokens", max_tokens, 1, lim.n_ctx);
}

std::vector<int32_t> completion_prompt(const ojson& body, const ServerLimits& lim, const PromptEncoder& enc) {
  const ojson* p = field(body, "prompt");
  if (!p) bad("prompt", "'prompt' is required");
  if (p->is_string()) return enc.prompt(p->get<std::string>());
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) return enc.prompt((*p)[0].get<std::string>());
  if (p->is_array() && !p->empty() && std::all_of(p->begin(), p->end(), [](const ojson& v) { return v.is_number_integer(); }))
    return token_ids(*p, lim, "prompt", "'prompt'");
  bad("prompt", "'prompt' must be a string or an array of token ids (one prompt per request)");
}

}  // namespace

nlohmann::json ApiError::body() const {
  nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return {{"error", e}};
}

ojson parse_body(const std::string& text, const ServerLimits& lim) {
  if (text.size() > lim.max_body) throw ApiError(413, "the request body is larger than " + std::to_string(lim.max_body) + " bytes");
  bool deep = false;
  std::optional<ojson> body = parse_json_text(text, lim.max_json_depth, &deep);
  if (deep) throw ApiError(400, "the request body nests deeper than " + std::to_string(lim.max_json_depth) + " levels");
  if (!body) throw ApiError(400, "the request body is not valid JSON");
  if (!body->is_object()) throw ApiError(400, "the request body must be a JSON object");
  return *body;
}

CompletionSpec parse_completion(const ojson& body, bool chat, const ServerLimits& lim, const PromptEncoder& enc,
                                const std::string& model_id, bool fit_messages) {
  CompletionSpec s;
  s.chat = chat;
  check_model(body, model_id);
  // Fields that would change the output and that vkspec does not implement are refused, not ignored.
  for (const char* f : {"functions", "function_call", "suffix", "audio", "prediction"}) {
    const ojson* v = field(body, f);
    if (v && !(v->is_array() && v->empty()) && !(v->is_object() && v->empty()))
      bad(f, std::string("'") + f + "' is not supported by this server");
  }
  // response_format: text, JSON mode (json_object), or a schema (json_schema's, or llama.cpp's json_object
  // with a schema); the schema is converted and checked at submission (a 400 naming what is unsupported)
  if (const ojson* rf = field(body, "response_format"); rf && !(rf->is_object() && rf->empty())) {
    const ojson* type = rf->is_object() ? field(*rf, "type") : nullptr;
    if (!type || !type->is_string()) bad("response_format", "'response_format' must be an object with a 'type'");
    const std::string t = type->get<std::string>();
    if (t == "json_object") {
      if (const ojson* schema = field(*rf, "schema")) s.json_schema = schema->dump();
      else s.sp.json_object = 1;
    } else if (t == "json_schema") {
      const ojson* js = field(*rf, "json_schema");
      const ojson* schema = js && js->is_object() ? field(*js, "schema") : nullptr;
      if (!schema) bad("response_format", "'response_format' json_schema needs {\"json_schema\": {\"schema\": ...}}");
      s.json_schema = schema->dump();
    } else if (t != "text") {
      bad("response_format", "'response_format' type '" + t + "' is not supported (text, json_object, json_schema are)");
    }
  }
  if (const ojson* js = field(body, "json_schema")) {   // llama.cpp's
    if (!s.json_schema.empty() || s.sp.json_object) bad("json_schema", "'json_schema' and a response_format exclude each other");
    s.json_schema = js->dump();
  }
  if (const ojson* g = field(body, "grammar")) {   // llama.cpp's: a GBNF grammar (checked at submission)
    if (!g->is_string()) bad("grammar", "'grammar' must be a string (a GBNF grammar)");
    s.grammar = g->get<std::string>();
    if (s.grammar.find('\0') != std::string::npos) bad("grammar", "'grammar' holds a NUL character");   // (the C API takes C strings)
    if (!s.grammar.empty() && (s.sp.json_object || !s.json_schema.empty()))
      bad("grammar", "'grammar' and a JSON response_format or schema exclude each other");
  }
  if (boolean(body, "echo", false)) bad("echo", "'echo' is not supported");
  if (integer(body, "best_of", 1, 1, 1) != 1) bad("best_of", "'best_of' must be 1");

  const ojson tools = chat_tools(body, chat, s);
  if (chat) {
    const auto tokens_of = [&](const std::string& text) {
      try {
        return enc.chat(text);
      } catch (const std::exception& e) {
        throw ApiError(400, e.what(), "messages");
      }
    };
    const auto chat_prompt = [&](const ojson& messages) { return tokens_of(rendered_chat(messages, tools, enc)); };
    const ojson messages = chat_messages(body);
    s.prompt = chat_prompt(messages);
    const uint32_t budget = lim.n_ctx - reply_reserve(lim.n_ctx, requested_max_tokens(body, lim));
    if (fit_messages && s.prompt.size() > budget) {
      // Estimates for the cut points: a message's own tokens (its content's, its other fields' such as tool
      // calls as JSON) and the template's around each message and once per prompt, measured on fixed probes
      // so that they are the same for every request of a conversation.
      const auto own_tokens = [&](const ojson& m) {
        std::string text;
        for (const auto& [key, value] : m.items())
          if (key != "role") text += value.is_string() ? value.get<std::string>() : value.dump();
        return tokens_of(text).size();
      };
      size_t per_message = 4, per_prompt = 0;
      try {
        const auto probe = [&](int n) {
          ojson m = ojson::array();
          for (int i = 0; i < n; ++i) m.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "x"}});
          return chat_prompt(m).size();
        };
        const size_t one = probe(1), three = probe(3), x = tokens_of("x").size();
        per_message = three > one ? (three - one) / 2 - std::min((three - one) / 2, x) : 0;
        per_prompt = one - std::min(one, x + per_message);
      } catch (const std::exception&) {   // (a template that refuses the probes: the default guess)
      }
      const MessageWindow w = cli::fit_messages_chained(
          messages, budget, per_prompt, [&](const ojson& m) { return own_tokens(m) + per_message; },
          [&](const ojson& m) { return chat_prompt(m).size(); });
      if (w.dropped > 0) {
        s.prompt = chat_prompt(w.messages);
        s.dropped_messages = w.dropped;
      }
    }
  } else {
    try {
      s.prompt = completion_prompt(body, lim, enc);
    } catch (const ApiError&) {
      throw;
    } catch (const std::exception& e) {   // an empty prompt on a model without BOS
      throw ApiError(400, e.what(), "prompt");
    }
  }
  if (s.prompt.size() >= lim.n_ctx)
    throw ApiError(400, "the prompt is " + std::to_string(s.prompt.size()) + " tokens; this server's context holds " +
                            std::to_string(lim.n_ctx) + " (prompt and completion)",
                   chat ? "messages" : "prompt", "context_length_exceeded");

  const uint32_t room = lim.n_ctx - uint32_t(s.prompt.size());
  const int64_t max_tokens = requested_max_tokens(body, lim);
  s.max_tokens = max_tokens < 0 ? room : uint32_t(max_tokens);
  s.sp.temperature = float(number(body, "temperature", 1.0, 0, 2));
  s.sp.top_p = float(number(body, "top_p", 1.0, 0, 1));
  if (s.sp.top_p == 0.0f) s.sp.top_p = 1e-6f;   // OpenAI allows 0: the single most likely token
  s.sp.top_k = int(integer(body, "top_k", 0, 0, int64_t(lim.n_vocab)));
  s.sp.min_p = float(number(body, "min_p", 0.0, 0, 1));
  s.sp.repeat_penalty = float(number(body, "repeat_penalty", 1.0, 0.01, 100));
  s.sp.frequency_penalty = float(number(body, "frequency_penalty", 0.0, -2, 2));
  s.sp.presence_penalty = float(number(body, "presence_penalty", 0.0, -2, 2));
  if (const ojson* lb = field(body, "logit_bias")) {   // {"token id": bias in [-100, 100], ...}
    if (!lb->is_object()) bad("logit_bias", "'logit_bias' must be an object mapping token ids to biases");
    if (lb->size() > VKSPEC_MAX_LOGIT_BIAS)
      bad("logit_bias", "'logit_bias' holds at most " + std::to_string(VKSPEC_MAX_LOGIT_BIAS) + " tokens");
    for (const auto& [key, value] : lb->items()) {
      const bool digits = !key.empty() && key.size() <= 10 &&
                          std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
      const uint64_t id = digits ? std::stoull(key) : UINT64_MAX;
      if (id >= lim.n_vocab) bad("logit_bias", "'logit_bias' key '" + key + "' is not a token id of this model");
      if (!value.is_number() || !(std::fabs(value.get<double>()) <= VKSPEC_LOGIT_BIAS_BOUND))
        bad("logit_bias", "'logit_bias' values must be numbers in [-100, 100]");
      s.bias_tokens.push_back(int32_t(id));
      s.bias_values.push_back(float(value.get<double>()));
    }
  }
  s.sp.repeat_last_n = int(integer(body, "repeat_last_n", 64, -1, lim.n_ctx));
  if (s.sp.repeat_last_n == -1) s.sp.repeat_last_n = int(lim.n_ctx);
  if (field(body, "seed")) {
    const ojson& v = body["seed"];
    if (!v.is_number_integer()) bad("seed", "'seed' must be an integer");
    s.sp.seed = v.is_number_unsigned() ? v.get<uint64_t>() : uint64_t(v.get<int64_t>());
  } else {
    std::random_device rd;
    s.sp.seed = (uint64_t(rd()) << 32) | rd();
  }
  s.sp.spec_sampling = lim.spec_sampling;
  if (const ojson* ss = field(body, "spec_sampling")) {   // vkspec's: how sampled drafts are verified
    s.sp.spec_sampling = ss->is_string() ? cli::spec_sampling_value(ss->get<std::string>()) : -1;
    if (s.sp.spec_sampling < 0) bad("spec_sampling", "'spec_sampling' must be \"coupled\" or \"rejection\"");
  }
  if (const ojson* dt = field(body, "draft_tree")) {   // vkspec's: prompt lookup's token trees
    s.draft_tree = dt->is_string() ? cli::draft_tree_value(dt->get<std::string>()) : -1;
    if (s.draft_tree < 0) bad("draft_tree", "'draft_tree' must be \"auto\", \"wide\" or \"off\"");
  }
  s.ignore_eos = boolean(body, "ignore_eos", false);
  s.n = uint32_t(integer(body, "n", 1, 1, lim.max_n));
  s.stream = boolean(body, "stream", false);
  if (const ojson* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!s.stream) bad("stream_options", "'stream_options' is only allowed with stream: true");
    s.include_usage = boolean(*so, "include_usage", false);
  }
  if (const ojson* st = field(body, "stop")) {
    std::vector<ojson> items;
    if (st->is_string()) items.push_back(*st);
    else if (st->is_array()) items.assign(st->begin(), st->end());
    else bad("stop", "'stop' must be a string or an array of strings");
    if (items.size() > lim.max_stop) bad("stop", "at most " + std::to_string(lim.max_stop) + " stop strings");
    for (const ojson& v : items) {
      if (!v.is_string()) bad("stop", "'stop' must be a string or an array of strings");
      const std::string str = v.get<std::string>();
      if (str.empty() || str.size() > lim.max_stop_bytes)
        bad("stop", "each stop string must be 1.." + std::to_string(lim.max_stop_bytes) + " bytes");
      s.stop.push_back(str);
    }
  }
  if (chat) {
    s.logprobs = boolean(body, "logprobs", false);
    s.top_logprobs = uint32_t(integer(body, "top_logprobs", 0, 0, lim.max_top_logprobs));
    if (s.top_logprobs && !s.logprobs) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  } else if (field(body, "logprobs")) {   // the legacy completions field: how many alternatives per token
    s.logprobs = true;
    s.top_logprobs = uint32_t(integer(body, "logprobs", 0, 0, lim.max_top_logprobs));
  }
  return s;
}

TokenizeSpec parse_tokenize(const ojson& body) {
  TokenizeSpec t;
  const ojson* c = field(body, "content");
  if (!c || !c->is_string()) bad("content", "'content' must be a string");
  t.content = c->get<std::string>();
  t.add_special = boolean(body, "add_special", false);
  t.parse_special = boolean(body, "parse_special", true);
  t.with_pieces = boolean(body, "with_pieces", false);
  return t;
}

std::vector<int32_t> parse_detokenize(const ojson& body, const ServerLimits& lim) {
  const ojson* t = field(body, "tokens");
  if (!t || !t->is_array()) bad("tokens", "'tokens' must be an array of token ids");
  return token_ids(*t, lim, "tokens", "'tokens'");
}

std::string apply_template(const ojson& body, const PromptEncoder& enc) {
  CompletionSpec unused;   // (the tools' grammar is not needed here)
  return rendered_chat(chat_messages(body), chat_tools(body, true, unused), enc);
}

nlohmann::json token_piece(const std::string& piece) {
  try {
    (void)nlohmann::json(piece).dump();   // (strict: throws on invalid UTF-8)
    return piece;
  } catch (const nlohmann::json::type_error&) {
  }
  nlohmann::json bytes = nlohmann::json::array();
  for (const unsigned char b : piece) bytes.push_back(int(b));
  return bytes;
}

std::string TextStream::push(const std::string& piece) {
  if (stopped_) return {};
  held_ += piece;
  size_t first = std::string::npos;
  for (const std::string& s : stops_)
    if (const size_t at = held_.find(s); at < first) first = at, matched_ = s;
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest tail that is the start of a stop string.
  size_t keep = 0;
  for (const std::string& s : stops_)
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string TextStream::finish() {
  if (stopped_) return {};
  std::string out = push("");
  if (stopped_) return out;
  out += held_;
  held_.clear();
  return out;
}

nlohmann::json token_logprob(const std::function<std::string(int32_t)>& piece_of, int32_t token, const float* logits,
                             uint32_t n_vocab, uint32_t top) {
  const uint32_t V = n_vocab;
  float mx = -INFINITY;
  for (uint32_t i = 0; i < V; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (uint32_t i = 0; i < V; ++i) sum += std::exp(double(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  auto entry = [&](uint32_t id) {
    const std::string piece = piece_of(int32_t(id));
    nlohmann::json bytes = nlohmann::json::array();
    for (unsigned char c : piece) bytes.push_back(int(c));
    return nlohmann::json{{"token", piece}, {"logprob", double(logits[id]) - lse}, {"bytes", bytes}};
  };
  nlohmann::json e = entry(uint32_t(token));
  std::vector<uint32_t> ids(V);
  for (uint32_t i = 0; i < V; ++i) ids[i] = i;
  top = std::min(top, V);
  std::partial_sort(ids.begin(), ids.begin() + top, ids.end(),
                    [&](uint32_t a, uint32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  e["top_logprobs"] = nlohmann::json::array();
  for (uint32_t i = 0; i < top; ++i) e["top_logprobs"].push_back(entry(ids[i]));
  return e;
}

nlohmann::json completion_logprobs(const nlohmann::json& entries, size_t text_offset) {
  nlohmann::json tokens = nlohmann::json::array(), lps = nlohmann::json::array(), tops = nlohmann::json::array(),
                 offsets = nlohmann::json::array();
  for (const nlohmann::json& e : entries) {
    const std::string piece = e["token"].get<std::string>();
    tokens.push_back(piece);
    lps.push_back(e["logprob"]);
    nlohmann::json top = nlohmann::json::object();
    for (const nlohmann::json& t : e["top_logprobs"]) {
      const std::string alt = t["token"].get<std::string>();
      if (!top.contains(alt)) top[alt] = t["logprob"];   // two tokens of one text: the likelier
    }
    if (!top.contains(piece)) top[piece] = e["logprob"];   // OpenAI's: the chosen token among them too
    tops.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += piece.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

nlohmann::json tool_call_json(const ToolCall& call, const std::string& id) {
  return {{"id", id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

bool may_become_tool_call(const std::string& text) {
  const size_t b = text.find_first_not_of(" \t\r\n");
  return b == std::string::npos || text[b] == '{';
}

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace vkspec::cli
