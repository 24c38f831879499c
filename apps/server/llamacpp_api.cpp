#include "server/llamacpp_api.h"

#include <algorithm>
#include <vector>

namespace vkspec::cli {
namespace {
using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

// llama-server's defaults where a request leaves them out (common_params_sampling's; OpenAI's differ).
const std::pair<const char*, double> kDefaults[] = {{"temperature", 0.8}, {"top_k", 40},          {"top_p", 0.95},
                                                   {"min_p", 0.05},       {"repeat_penalty", 1.0}, {"repeat_last_n", 64}};
// Fields with the OpenAI layer's meaning under the same name (type- and range-checked there).
const char* const kSame[] = {"temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n",
                             "presence_penalty", "frequency_penalty", "stop", "grammar", "json_schema", "ignore_eos",
                             "spec_sampling", "draft_tree"};
// Samplers vkspec does not run: accepted only at the value that turns them off.
const std::pair<const char*, double> kNeutral[] = {{"mirostat", 0},   {"typical_p", 1},      {"tfs_z", 1},
                                                   {"dynatemp_range", 0}, {"xtc_probability", 0}, {"dry_multiplier", 0},
                                                   {"top_n_sigma", -1},   {"n_indent", 0},        {"n_probs", 0},
                                                   {"t_max_predict_ms", 0}};
// Fields that would change what comes back and have no counterpart here: refused unless empty or false.
const char* const kRefused[] = {"lora", "image_data", "multimodal_data", "return_tokens", "post_sampling_probs",
                                "response_fields", "return_progress"};

bool empty_or_off(const ojson& v) {
  return v.is_null() || v == false || (v.is_array() && v.empty()) || (v.is_object() && v.empty()) ||
         (v.is_string() && v.get<std::string>().empty());
}

// llama-server's `samplers` (names, or its one-letter string): the chain vkspec runs is llama.cpp's default
// order (penalties, top_k, top_p, min_p, temperature; sampler.h), so a list is taken when the samplers vkspec
// runs come in that order; one left out of the list is turned off (its neutral value, as llama.cpp would not
// run it); samplers vkspec does not run may be listed (their parameters are held to neutral values above).
void samplers(const ojson& v, ojson& o) {
  static const std::pair<char, const char*> kLetters[] = {{'e', "penalties"}, {'d', "dry"},   {'s', "top_n_sigma"},
                                                         {'k', "top_k"},     {'y', "typ_p"}, {'p', "top_p"},
                                                         {'m', "min_p"},     {'x', "xtc"},   {'t', "temperature"},
                                                         {'i', "infill"},    {'f', "tfs_z"}};
  std::vector<std::string> names;
  if (v.is_string()) {
    for (const char c : v.get<std::string>()) {
      const auto it = std::find_if(std::begin(kLetters), std::end(kLetters), [c](const auto& l) { return l.first == c; });
      if (it == std::end(kLetters)) bad("samplers", std::string("unknown sampler letter '") + c + "'");
      names.push_back(it->second);
    }
  } else if (v.is_array()) {
    for (const ojson& n : v) {
      if (!n.is_string()) bad("samplers", "'samplers' must be an array of sampler names or a string of their letters");
      names.push_back(n.get<std::string>() == "typical_p" ? "typ_p" : n.get<std::string>());
    }
  } else {
    bad("samplers", "'samplers' must be an array of sampler names or a string of their letters");
  }
  const char* const kOrder[] = {"penalties", "top_k", "top_p", "min_p", "temperature"};   // the ones vkspec runs
  size_t at = 0;
  for (const std::string& n : names) {
    const auto known = std::find_if(std::begin(kLetters), std::end(kLetters), [&](const auto& l) { return n == l.second; });
    if (known == std::end(kLetters)) bad("samplers", "unknown sampler '" + n + "'");
    if (n == "infill") bad("samplers", "the 'infill' sampler is not supported by this server");
    const auto ours = std::find(std::begin(kOrder), std::end(kOrder), n);
    if (ours == std::end(kOrder)) continue;
    if (size_t(ours - std::begin(kOrder)) < at)
      bad("samplers", "this server runs penalties, top_k, top_p, min_p and temperature in that order (llama.cpp's default)");
    at = size_t(ours - std::begin(kOrder)) + 1;
  }
  const auto listed = [&](const char* n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  if (!listed("penalties")) o["repeat_penalty"] = 1.0, o["presence_penalty"] = 0.0, o["frequency_penalty"] = 0.0;
  if (!listed("top_k")) o["top_k"] = 0;
  if (!listed("top_p")) o["top_p"] = 1.0;
  if (!listed("min_p")) o["min_p"] = 0.0;
  if (!listed("temperature") && o.contains("temperature") && o["temperature"] != 1 && o["temperature"] != 1.0)
    bad("samplers", "'samplers' without temperature needs \"temperature\": 1 here");
}

// The fields llama-server reads on every completion endpoint: samplers vkspec does not run only at their
// neutral values, fields without a counterpart only when empty, and `samplers`.
void extensions(const ojson& body, ojson& o) {
  for (const auto& [key, off] : kNeutral)
    if (const ojson* v = field(body, key); v && !(v->is_number() && v->get<double>() == off))
      bad(key, std::string("'") + key + "' is not supported by this server (only its neutral value)");
  for (const char* f : kRefused)
    if (const ojson* v = field(body, f); v && !empty_or_off(*v)) bad(f, std::string("'") + f + "' is not supported by this server");
  if (const ojson* sm = field(body, "samplers")) samplers(*sm, o);
}

// n_predict (llama-server's max_tokens): -1 or -2 for none; beyond the context it is cut to it.
void n_predict(const ojson& n, uint32_t n_ctx, ojson& o) {
  if (!n.is_number_integer()) bad("n_predict", "'n_predict' must be an integer");
  const int64_t v = n.get<int64_t>();
  if (v == 0 || v < -2) bad("n_predict", "'n_predict' must be positive, or -1 (up to the context)");
  if (v > 0) o["max_tokens"] = std::min<int64_t>(v, n_ctx);
}

// llama-server's logit_bias: [[token, bias or false], ...] or {"token": bias}; false bans the token (-100 here,
// OpenAI's ban). Token texts instead of ids are refused.
json logit_bias(const ojson& v) {
  json out = json::object();
  auto add = [&](const ojson& token, const ojson& bias) {
    if (!token.is_number_integer()) bad("logit_bias", "'logit_bias' takes token ids (token texts are not supported)");
    if (bias == false) out[std::to_string(token.get<int64_t>())] = -100;
    else if (bias.is_number()) out[std::to_string(token.get<int64_t>())] = bias;
    else bad("logit_bias", "a 'logit_bias' entry's bias must be a number or false");
  };
  if (v.is_array()) {
    for (const ojson& e : v) {
      if (!e.is_array() || e.size() != 2) bad("logit_bias", "'logit_bias' must be an array of [token id, bias] pairs");
      add(e[0], e[1]);
    }
  } else if (v.is_object()) {
    for (const auto& [k, b] : v.items()) {
      const std::optional<ojson> id = parse_json_text(k);   // (a key is text from the client, nested as it likes)
      if (!id) bad("logit_bias", "'logit_bias' keys must be token ids");
      add(*id, b);
    }
  } else {
    bad("logit_bias", "'logit_bias' must be an array of [token id, bias] pairs or an object");
  }
  return out;
}

// The final event's fields from the usage chunk (or a whole response): counts, timings, why it stopped.
void finish(json& j, const json& usage, const json& vk, const std::string& finish_reason, const json& settings) {
  const json c = vk.is_object() && vk.contains("choices") && !vk["choices"].empty() ? vk["choices"][0] : json::object();
  const int64_t prompt = usage.value("prompt_tokens", 0), predicted = usage.value("completion_tokens", 0);
  const int64_t prefilled = c.value("prefilled_tokens", prompt);
  const double prompt_ms = c.value("prefill_s", 0.0) * 1e3, predicted_ms = c.value("decode_s", 0.0) * 1e3;
  const std::string reason = c.value("stop_reason", "");
  j["stop"] = true;
  j["tokens_predicted"] = predicted;
  j["tokens_evaluated"] = prompt;
  j["tokens_cached"] = c.value("shared_prompt_tokens", 0);
  j["truncated"] = false;
  j["stop_type"] = finish_reason == "length" ? "limit" : c.contains("stop_string") ? "word" : "eos";
  j["stopping_word"] = c.value("stop_string", "");
  j["generation_settings"] = settings;
  j["timings"] = {{"prompt_n", prefilled}, {"prompt_ms", prompt_ms},
                  {"prompt_per_token_ms", prefilled ? prompt_ms / double(prefilled) : 0.0},
                  {"prompt_per_second", prompt_ms > 0 ? 1e3 * double(prefilled) / prompt_ms : 0.0},
                  {"predicted_n", predicted}, {"predicted_ms", predicted_ms},
                  {"predicted_per_token_ms", predicted ? predicted_ms / double(predicted) : 0.0},
                  {"predicted_per_second", predicted_ms > 0 ? 1e3 * double(predicted) / predicted_ms : 0.0}};
  if (reason == "cancelled") j["stop_type"] = "none";
}

json event(const std::string& model, const std::string& content) {
  return {{"index", 0}, {"content", content}, {"tokens", json::array()}, {"stop", false}, {"id_slot", -1},
          {"model", model}};
}
}  // namespace

json llamacpp_props(uint32_t n_ctx, uint32_t slots, const std::string& model_path, const std::string& chat_template,
                    bool speculative) {
  json params = {{"n_predict", -1}, {"seed", -1}, {"presence_penalty", 0.0}, {"frequency_penalty", 0.0}};
  for (const auto& [key, value] : kDefaults) params[key] = value;
  return {{"default_generation_settings", {{"n_ctx", n_ctx}, {"speculative", speculative}, {"params", params}}},
          {"total_slots", slots}, {"model_path", model_path}, {"chat_template", chat_template},
          {"modalities", {{"vision", false}, {"audio", false}}}, {"build_info", "vkspec"}};
}

LlamaCppRequest llamacpp_request(const ojson& body, uint32_t n_ctx) {
  LlamaCppRequest r;
  ojson& o = r.openai;
  for (const auto& [key, value] : kDefaults) o[key] = value;
  for (const char* f : kSame)
    if (const ojson* v = field(body, f)) o[f] = *v;
  const ojson* prompt = field(body, "prompt");
  if (!prompt) bad("prompt", "'prompt' is required");
  o["prompt"] = *prompt;   // a string, [a string] or token ids: checked as /v1/completions checks it
  const ojson* n = field(body, "n_predict");
  if (!n) n = field(body, "max_tokens");
  if (n) n_predict(*n, n_ctx, o);
  if (const ojson* seed = field(body, "seed")) {   // -1 (llama.cpp's LLAMA_DEFAULT_SEED as 32 bits too): random
    if (!seed->is_number_integer()) bad("seed", "'seed' must be an integer");
    if (*seed != -1 && *seed != 0xFFFFFFFFu) o["seed"] = *seed;
  }
  if (const ojson* lb = field(body, "logit_bias")) o["logit_bias"] = logit_bias(*lb);
  extensions(body, o);
  if (const ojson* s = field(body, "stream")) {
    if (!s->is_boolean()) bad("stream", "'stream' must be a boolean");
    r.stream = s->get<bool>();
  }
  o["stream"] = r.stream;
  if (r.stream) o["stream_options"] = {{"include_usage", true}};   // the last event's counts and timings
  r.settings = json::parse(o.dump());
  r.settings.erase("prompt");
  r.settings["n_predict"] = o.contains("max_tokens") ? o["max_tokens"].get<int64_t>() : -1;
  r.settings.erase("max_tokens");
  r.settings.erase("stream_options");
  return r;
}

ojson llamacpp_openai_extensions(const ojson& body, uint32_t n_ctx) {
  if (!body.is_object()) return body;   // (parse_completion says what is wrong with it)
  ojson o = body;
  extensions(body, o);
  for (const auto& [key, off] : kNeutral) o.erase(key);
  for (const char* f : kRefused) o.erase(f);
  o.erase("samplers");
  if (const ojson* n = field(body, "n_predict")) {
    if (!field(body, "max_tokens") && !field(body, "max_completion_tokens")) n_predict(*n, n_ctx, o);
    o.erase("n_predict");
  }
  return o;
}

std::string LlamaCppStream::translate(const std::string& payload) {
  if (payload == "[DONE]") return {};
  const json j = json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return {};
  const auto frame = [](const json& e) { return "data: " + dump(e) + "\n\n"; };
  if (j.contains("error")) {
    json e = j["error"];
    if (e.is_object()) e = {{"code", 500}, {"message", e.value("message", "generation failed")}, {"type", e.value("type", "server_error")}};
    return "error: " + dump(json{{"error", e}}) + "\n\n";
  }
  if (j.contains("usage") && j.contains("choices") && j["choices"].empty()) {   // the last: counts and timings
    json last = event(model_, "");
    last["has_new_line"] = new_line_;
    finish(last, j["usage"], j.value("vkspec", json::object()), finish_, settings_);
    return frame(last);
  }
  if (!j.contains("choices") || j["choices"].empty()) return {};
  const json& c = j["choices"][0];
  if (c.contains("finish_reason") && c["finish_reason"].is_string()) finish_ = c["finish_reason"];
  const std::string text = c.value("text", "");
  if (text.empty()) return {};
  if (text.find('\n') != std::string::npos) new_line_ = true;
  return frame(event(model_, text));
}

json llamacpp_response(const json& openai, const std::string& model, const json& settings) {
  const json& c = openai["choices"][0];
  const std::string text = c.value("text", "");
  json j = event(model, text);
  j["has_new_line"] = text.find('\n') != std::string::npos;
  const std::string reason = c.contains("finish_reason") && c["finish_reason"].is_string() ? c["finish_reason"].get<std::string>() : "";
  finish(j, openai.value("usage", json::object()), openai.value("vkspec", json::object()), reason, settings);
  return j;
}

}  // namespace vkspec::cli
