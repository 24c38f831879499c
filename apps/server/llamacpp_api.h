#pragma once
// llama-server's native completion endpoint (`POST /completion`, also `/completions`) for the clients that
// speak it, over the OpenAI protocol layer (server_api.h) as ollama_api is: a request becomes the OpenAI
// completion body it means (llama-server's field names and defaults: temperature 0.8, top_k 40, top_p 0.95,
// min_p 0.05), and OpenAI responses and stream chunks become llama-server's shapes (`content`, `stop`,
// `stop_type`, `timings`; Server-Sent Events `data:` lines, the last with "stop": true, no [DONE]). Errors are
// llama-server's {"error": {"code", "message", "type"}}. What would change the output and vkspec cannot do
// (mirostat, typical_p, tfs_z, XTC, DRY, dynamic temperature, a sampler order other than llama.cpp's default,
// n_probs, images, LoRA, time limits) is refused, never ignored; fields that only steer llama-server's slots and cache
// (cache_prompt, id_slot, n_keep, ...) are accepted and change nothing.
#include <string>

#include <nlohmann/json.hpp>

#include "server/server_api.h"

namespace vkspec::cli {

struct LlamaCppRequest {
  nlohmann::ordered_json openai;     // the body for parse_completion (a completion)
  nlohmann::json settings;           // llama-server's generation_settings echo: the sampling fields as used
  bool stream = false;
};
// `n_ctx`: an n_predict beyond the context is cut to it, as llama-server stops there (OpenAI's max_tokens
// would be a 400). Throws ApiError.
LlamaCppRequest llamacpp_request(const nlohmann::ordered_json& body, uint32_t n_ctx);

// llama-server's fields on OpenAI's endpoints (/v1/completions, /v1/chat/completions), where its clients send
// them beside OpenAI's (llama.cpp's web UI sends its whole sampler setup): the samplers vkspec does not run
// are refused unless neutral, `samplers` is taken as /completion takes it (the ones left out turned off),
// `n_predict` stands for max_tokens when that is absent. Returns the body parse_completion should read
// (those fields consumed); fields whose meaning is OpenAI's (top_k, min_p, repeat_penalty, grammar, ...)
// pass as they are. Throws ApiError.
nlohmann::ordered_json llamacpp_openai_extensions(const nlohmann::ordered_json& body, uint32_t n_ctx);

// The OpenAI stream of one request (its SSE payloads: chunks, the usage chunk with its `vkspec` figures, an
// error object, "[DONE]") as llama-server's events ("data: {...}\n\n" frames).
class LlamaCppStream {
 public:
  LlamaCppStream(std::string model, nlohmann::json settings) : model_(std::move(model)), settings_(std::move(settings)) {}
  std::string translate(const std::string& payload);

 private:
  std::string model_, finish_;
  nlohmann::json settings_;
  bool new_line_ = false;   // the content so far has a newline (has_new_line)
};

// A whole OpenAI completion response (one choice) as llama-server's.
nlohmann::json llamacpp_response(const nlohmann::json& openai, const std::string& model, const nlohmann::json& settings);
// GET /props (what llama.cpp's web UI and other clients read first): the context, the slots, the sampling
// defaults of /completion, the model's path and its chat template ("" without one).
nlohmann::json llamacpp_props(uint32_t n_ctx, uint32_t slots, const std::string& model_path, const std::string& chat_template,
                              bool speculative);
inline nlohmann::json llamacpp_error(const ApiError& e) {
  return {{"error", {{"code", e.status}, {"message", e.message}, {"type", e.type}}}};
}

}  // namespace vkspec::cli
