#include "server/ollama_api.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <set>

#include "platform/platform.h"

namespace vkspec::cli {
namespace {
using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

// Options that only tune Ollama's runner (context size, threads, GPU layers, batching, memory mapping):
// accepted, no effect here (the server's --ctx and device settings hold).
const std::set<std::string> kRunnerOptions = {"num_ctx", "num_batch", "num_gpu", "main_gpu", "num_thread", "use_mmap",
                                              "use_mlock", "low_vram", "f16_kv", "vocab_only", "num_keep", "numa",
                                              "logits_all", "embedding_only", "penalize_newline"};
// Options with the same meaning under the OpenAI layer's (and llama.cpp's) names.
const std::set<std::string> kSamplingOptions = {"temperature", "top_k", "top_p", "min_p", "seed", "repeat_penalty",
                                                "repeat_last_n", "presence_penalty", "frequency_penalty", "stop",
                                                "spec_sampling", "draft_tree"};

// Ollama's defaults where a request leaves them out (its Modelfile defaults; OpenAI's differ).
const std::pair<const char*, double> kOllamaDefaults[] = {
    {"temperature", 0.8}, {"top_k", 40}, {"top_p", 0.9}, {"repeat_penalty", 1.1}, {"repeat_last_n", 64}};

void options(const ojson& body, ojson& out) {
  for (const auto& [key, value] : kOllamaDefaults) out[key] = value;
  const auto it = body.find("options");
  if (it == body.end() || it->is_null()) return;
  if (!it->is_object()) bad("options", "'options' must be an object");
  for (const auto& [key, v] : it->items()) {
    if (kRunnerOptions.count(key)) continue;
    if (kSamplingOptions.count(key)) {
      out[key] = v;   // type- and range-checked by parse_completion under this name
    } else if (key == "num_predict") {
      if (!v.is_number_integer()) bad("options.num_predict", "'options.num_predict' must be an integer");
      const int64_t n = v.get<int64_t>();
      if (n == 0 || n < -2) bad("options.num_predict", "'options.num_predict' must be positive, -1 or -2 (no limit)");
      if (n > 0) out["max_tokens"] = n;   // -1, -2: up to the context
    } else if ((key == "mirostat" && v != 0) || (key == "typical_p" && v != 1 && v != 1.0) ||
               (key == "tfs_z" && v != 1 && v != 1.0)) {
      bad("options." + key, "'options." + key + "' is not supported (only its neutral value)");
    } else if (key != "mirostat" && key != "typical_p" && key != "tfs_z" && key != "mirostat_tau" && key != "mirostat_eta") {
      bad("options." + key, "unknown option '" + key + "'");
    }
  }
}

// `format`: "json" (JSON mode) or a JSON schema.
void format(const ojson& body, ojson& out) {
  const auto it = body.find("format");
  if (it == body.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty())) return;
  if (*it == "json") out["response_format"] = {{"type", "json_object"}};
  else if (it->is_object()) out["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"schema", *it}}}};
  else bad("format", "'format' must be \"json\" or a JSON schema object");
}

// Chat messages: content strings; an assistant's tool_calls with arguments as objects (the OpenAI layer
// takes them so too); a tool message's tool_name kept as its name.
ojson messages(const ojson& in) {
  if (!in.is_array()) bad("messages", "'messages' must be an array");
  ojson out = ojson::array();
  for (size_t i = 0; i < in.size(); ++i) {
    const ojson& m = in[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(p, "'" + p + "' must be an object");
    if (m.contains("images") && !m["images"].is_null() && !(m["images"].is_array() && m["images"].empty()))
      bad(p + ".images", "images are not supported (vkspec runs text models)");
    ojson o = ojson::object();
    for (const char* key : {"role", "content", "tool_calls"})
      if (m.contains(key)) o[key] = m[key];
    if (m.contains("tool_name")) o["name"] = m["tool_name"];
    out.push_back(std::move(o));
  }
  return out;
}

std::string created_at() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const long long ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count() % 1000000000LL;
  const std::tm tm = platform::utc_time(t);
  char buf[64];
  snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%09lldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
           tm.tm_hour, tm.tm_min, tm.tm_sec, ns);
  return buf;
}

json line(OllamaEndpoint ep, const std::string& model, const std::string& text, bool done) {
  json j = {{"model", model}, {"created_at", created_at()}};
  if (ep == OllamaEndpoint::Chat) j["message"] = {{"role", "assistant"}, {"content", text}};
  else j["response"] = text;
  j["done"] = done;
  return j;
}

// OpenAI's tool_calls (arguments as JSON text) as Ollama's (arguments as an object).
json tool_calls(const json& calls) {
  json out = json::array();
  for (const json& c : calls)
    out.push_back({{"function", {{"name", c["function"]["name"]},
                                 {"arguments", json::parse(c["function"]["arguments"].get<std::string>())}}}});
  return out;
}

std::string done_reason(const json& finish) {
  return finish.is_string() && finish == "length" ? "length" : "stop";   // (tool_calls: stop, as Ollama says)
}

// The final line's counts and durations (ns) from the usage object and the vkspec timings of the one choice.
void finish(json& j, const std::string& reason, const json& usage, const json& vk) {
  const json c = vk.is_object() && vk.contains("choices") && !vk["choices"].empty() ? vk["choices"][0] : json::object();
  auto ns = [&](const char* k) { return int64_t(c.value(k, 0.0) * 1e9); };
  j["done_reason"] = reason;
  j["total_duration"] = ns("queued_s") + ns("prefill_s") + ns("decode_s");
  j["load_duration"] = 0;
  j["prompt_eval_count"] = usage.value("prompt_tokens", 0);
  j["prompt_eval_duration"] = ns("prefill_s");
  j["eval_count"] = usage.value("completion_tokens", 0);
  j["eval_duration"] = ns("decode_s");
}
}  // namespace

OllamaRequest ollama_request(const ojson& body, OllamaEndpoint ep, bool has_template, const std::string& model_id) {
  OllamaRequest r;
  ojson& o = r.openai;
  if (const auto m = body.find("model"); m != body.end() && !m->is_null()) {
    if (!m->is_string()) bad("model", "'model' must be a string");
    const std::string name = m->get<std::string>();
    o["model"] = name == model_id + ":latest" ? model_id : name;   // (a wrong name: parse_completion's 404)
  }
  if (const auto s = body.find("stream"); s != body.end() && !s->is_null()) {
    if (!s->is_boolean()) bad("stream", "'stream' must be a boolean");
    r.stream = s->get<bool>();
  }
  o["stream"] = r.stream;
  if (r.stream) o["stream_options"] = {{"include_usage", true}};   // the final line's counts
  for (const char* f : {"template", "context", "suffix", "images"})
    if (const auto v = body.find(f); v != body.end() && !v->is_null() && !(v->is_array() && v->empty()) &&
                                      !(v->is_string() && v->get<std::string>().empty()))
      bad(f, std::string("'") + f + "' is not supported by this server");
  if (const auto t = body.find("think"); t != body.end() && !t->is_null() && *t != false)
    bad("think", "this model does not think ('think' is for reasoning models)");
  options(body, o);
  format(body, o);
  if (ep == OllamaEndpoint::Chat) {
    const auto m = body.find("messages");
    if (m == body.end() || m->is_null() || (m->is_array() && m->empty())) {
      r.load_only = true;
      return r;
    }
    o["messages"] = messages(*m);
    if (const auto t = body.find("tools"); t != body.end()) o["tools"] = *t;
    r.chat = true;
    r.fit_messages = true;
    return r;
  }
  const auto p = body.find("prompt");
  if (p != body.end() && !p->is_null() && !p->is_string()) bad("prompt", "'prompt' must be a string");
  const std::string prompt = p == body.end() || p->is_null() ? "" : p->get<std::string>();
  std::string system;
  if (const auto s = body.find("system"); s != body.end() && !s->is_null()) {
    if (!s->is_string()) bad("system", "'system' must be a string");
    system = s->get<std::string>();
  }
  bool raw = false;
  if (const auto v = body.find("raw"); v != body.end() && !v->is_null()) {
    if (!v->is_boolean()) bad("raw", "'raw' must be a boolean");
    raw = v->get<bool>();
  }
  if (prompt.empty()) {
    r.load_only = true;
    return r;
  }
  if (!raw && has_template) {   // the model's chat template around the prompt, as Ollama's generate does
    o["messages"] = ojson::array();
    if (!system.empty()) o["messages"].push_back({{"role", "system"}, {"content", system}});
    o["messages"].push_back({{"role", "user"}, {"content", prompt}});
    r.chat = true;
  } else {
    o["prompt"] = system.empty() ? prompt : system + "\n\n" + prompt;
  }
  return r;
}

std::string OllamaStream::translate(const std::string& payload) {
  if (payload == "[DONE]") return {};
  const json j = json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return {};
  if (j.contains("error")) return json{{"error", j["error"].value("message", "generation failed")}}.dump() + "\n";
  if (j.contains("usage") && j.contains("choices") && j["choices"].empty()) {   // the last: counts and timings
    json last = line(ep_, model_, "", true);
    finish(last, done_reason_.empty() ? "stop" : done_reason_, j["usage"], j.value("vkspec", json::object()));
    return dump(last) + "\n";
  }
  if (!j.contains("choices") || j["choices"].empty()) return {};
  const json& c = j["choices"][0];
  std::string out;
  // (generate runs as a chat when it applies the template: read whichever shape came)
  const std::string text = c.contains("delta") ? c["delta"].value("content", "") : c.value("text", "");
  if (!text.empty()) out += dump(line(ep_, model_, text, false)) + "\n";
  if (ep_ == OllamaEndpoint::Chat && c.contains("delta") && c["delta"].contains("tool_calls")) {
    json l = line(ep_, model_, "", false);
    l["message"]["tool_calls"] = tool_calls(c["delta"]["tool_calls"]);
    out += dump(l) + "\n";
  }
  if (!c["finish_reason"].is_null()) done_reason_ = done_reason(c["finish_reason"]);
  return out;
}

json ollama_response(const json& openai, OllamaEndpoint ep, const std::string& model) {
  const json& c = openai["choices"][0];
  std::string text;   // (generate runs as a chat when it applies the template: read whichever shape came)
  if (c.contains("message")) text = c["message"]["content"].is_string() ? c["message"]["content"].get<std::string>() : "";
  else text = c.value("text", "");
  json j = line(ep, model, text, true);
  if (ep == OllamaEndpoint::Chat && c.contains("message") && c["message"].contains("tool_calls"))
    j["message"]["tool_calls"] = tool_calls(c["message"]["tool_calls"]);
  finish(j, done_reason(c["finish_reason"]), openai["usage"], openai.value("vkspec", json::object()));
  return j;
}

json ollama_loaded(OllamaEndpoint ep, const std::string& model) {
  json j = line(ep, model, "", true);
  j["done_reason"] = "load";
  return j;
}

}  // namespace vkspec::cli
