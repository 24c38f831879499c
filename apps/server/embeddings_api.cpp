#include "server/embeddings_api.h"

#include <cstring>

namespace vkspec::cli {

namespace {
using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

// The little-endian float32 bytes of v in base64 (RFC 4648, padded).
std::string base64(const std::vector<float>& v) {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    for (int b = 0; b < 4; ++b) bytes[4 * i + size_t(b)] = char(u >> (8 * b));   // little-endian whatever the host
  }
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t w = 0;
    for (size_t k = 0; k < 3; ++k) w = (w << 8) | (k < n ? uint8_t(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? digits[(w >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

int64_t nanoseconds(double s) { return int64_t(s * 1e9); }
}  // namespace

EmbedSpec parse_embeddings(const ojson& body, EmbedEndpoint ep, const ServerLimits& lim, const PromptEncoder& enc,
                           const std::string& model_id, uint32_t n_embd) {
  EmbedSpec spec;
  spec.endpoint = ep;
  spec.normalize = ep != EmbedEndpoint::OllamaEmbeddings;
  const bool ollama = ep != EmbedEndpoint::OpenAi;
  check_model(body, model_id, ollama);
  if (const ojson* d = field(body, "dimensions"))
    if (!d->is_number_integer() || d->get<int64_t>() != int64_t(n_embd))
      bad("dimensions", "'dimensions' can only be this model's own, " + std::to_string(n_embd));
  if (const ojson* f = field(body, "encoding_format")) {
    if (ollama || !f->is_string() || (*f != "float" && *f != "base64"))
      bad("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    spec.base64 = *f == "base64";
  }
  const bool truncate = ep == EmbedEndpoint::OllamaEmbed && boolean(body, "truncate", true);
  const char* key = ep == EmbedEndpoint::OllamaEmbeddings ? "prompt" : "input";
  const ojson* in = field(body, key);
  if (!in && ep == EmbedEndpoint::OpenAi) bad(key, "'input' is required");
  // Texts and token lists, as given.
  const auto add_tokens = [&](std::vector<int32_t> ids, const std::string& where) {   // (ids of the vocabulary)
    if (ids.empty()) bad(key, where + " is empty");
    if (ids.size() > lim.n_ctx) {
      if (!truncate)
        bad(key, where + " is " + std::to_string(ids.size()) + " tokens, more than the context (" + std::to_string(lim.n_ctx) + ")");
      ids.resize(lim.n_ctx);
    }
    if (spec.inputs.size() == lim.max_embed_inputs) bad(key, "more than " + std::to_string(lim.max_embed_inputs) + " inputs");
    spec.inputs.push_back(std::move(ids));
  };
  const auto add_text = [&](const std::string& text, const std::string& where) {
    if (text.empty()) {
      if (ollama) return;   // (Ollama leaves empty inputs out)
      bad(key, where + " is an empty string");
    }
    std::vector<int32_t> ids;
    try {
      ids = enc.prompt(text);
    } catch (const std::exception& e) {
      bad(key, where + ": " + e.what());
    }
    add_tokens(std::move(ids), where);
  };
  const auto token_list = [&](const ojson& a, const std::string& where) { add_tokens(token_ids(a, lim, key, where), where); };
  const std::string what = std::string("'") + key + "'";
  if (!in) {
    // Ollama without an input: no vectors (its load request)
  } else if (in->is_string()) {
    add_text(in->get<std::string>(), what);
  } else if (in->is_array() && ep != EmbedEndpoint::OllamaEmbeddings) {
    if (in->empty()) {
      if (!ollama) bad(key, what + " is an empty array");
    } else if (!ollama && (*in)[0].is_number()) {
      token_list(*in, what);
    } else {
      for (size_t i = 0; i < in->size(); ++i) {
        const ojson& item = (*in)[i];
        const std::string where = what + "[" + std::to_string(i) + "]";
        if (item.is_string()) add_text(item.get<std::string>(), where);
        else if (!ollama && item.is_array()) token_list(item, where);
        else bad(key, where + (ollama ? " must be a string" : " must be a string or a list of token ids"));
      }
    }
  } else {
    bad(key, what + (ep == EmbedEndpoint::OllamaEmbeddings ? " must be a string"
                     : ollama ? " must be a string or an array of strings"
                              : " must be a string, an array of strings, token ids, or lists of token ids"));
  }
  return spec;
}

json embeddings_response(const EmbedSpec& spec, const std::vector<std::vector<float>>& vectors, const std::string& model_id,
                         double seconds) {
  size_t tokens = 0;
  for (const auto& ids : spec.inputs) tokens += ids.size();
  switch (spec.endpoint) {
    case EmbedEndpoint::OllamaEmbeddings:
      return {{"embedding", vectors.empty() ? json::array() : json(vectors[0])}};
    case EmbedEndpoint::OllamaEmbed:
      return {{"model", model_id}, {"embeddings", vectors}, {"total_duration", nanoseconds(seconds)},
              {"load_duration", 0}, {"prompt_eval_count", tokens}};
    case EmbedEndpoint::OpenAi: break;
  }
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i)
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", spec.base64 ? json(base64(vectors[i])) : json(vectors[i])}});
  return {{"object", "list"}, {"data", data}, {"model", model_id}, {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
}

}  // namespace vkspec::cli
