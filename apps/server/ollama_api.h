#pragma once
// Ollama's native API (`/api/generate`, `/api/chat`, `/api/tags`, `/api/show`, `/api/version`, `/api/ps`) for
// the clients that speak it, over the OpenAI protocol layer (server_api.h): a request becomes the OpenAI body
// it means (Ollama's option names and defaults, `format`, `raw`, `system`, tools) and goes through the same
// validation; OpenAI responses and stream chunks become Ollama's shapes (NDJSON lines when streaming, which is
// Ollama's default), with its counts and durations in nanoseconds. Errors are {"error": "..."} with the
// status the OpenAI layer gives. What would change the output and vkspec cannot do (images, a Go `template`,
// `context`, mirostat, typical_p, ...) is refused, never ignored; options that only tune Ollama's runner
// (num_ctx, num_thread, num_gpu, ...) are accepted and have no effect.
#include <string>

#include <nlohmann/json.hpp>

#include "server/server_api.h"

namespace vkspec::cli {

enum class OllamaEndpoint { Generate, Chat };

struct OllamaRequest {
  nlohmann::ordered_json openai;   // the body for parse_completion
  bool chat = false;               // ... of a chat completion (else a completion)
  bool stream = true;
  bool load_only = false;          // no prompt or messages: Ollama's "load the model" request, answered at once
  bool fit_messages = false;       // /api/chat: a conversation longer than the context loses its oldest messages,
                                   // at a user message, as Ollama cuts it (parse_completion's fit_messages)
};
// `has_template`: the model has a chat template (generate without `raw` applies it, as Ollama does).
// `model_id`: the server's model; Ollama's ":latest" tag on it is accepted. Throws ApiError.
OllamaRequest ollama_request(const nlohmann::ordered_json& body, OllamaEndpoint ep, bool has_template,
                             const std::string& model_id);

// The OpenAI stream of one request (its SSE payloads: chunks, the usage chunk with its `vkspec` timings, an
// error object, "[DONE]") as Ollama's NDJSON lines.
class OllamaStream {
 public:
  OllamaStream(OllamaEndpoint ep, std::string model) : ep_(ep), model_(std::move(model)) {}
  std::string translate(const std::string& payload);   // zero or more lines, each ending in '\n'

 private:
  OllamaEndpoint ep_;
  std::string model_, done_reason_;
};

// A whole OpenAI response (one choice) as Ollama's.
nlohmann::json ollama_response(const nlohmann::json& openai, OllamaEndpoint ep, const std::string& model);
// The answer to a load-only request: done at once, done_reason "load".
nlohmann::json ollama_loaded(OllamaEndpoint ep, const std::string& model);
inline nlohmann::json ollama_error(const ApiError& e) { return {{"error", e.message}}; }

}  // namespace vkspec::cli
