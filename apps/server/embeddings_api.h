#pragma once
// The embeddings endpoints of `vkspec serve`, without HTTP (the server runs each input on its batch with
// vkspec_batch_embed). An input's vector is the final hidden state after the output norm of its last token
// (llama.cpp's and Ollama's pooling for a Llama model) or the mean over its tokens (the server's --pooling),
// the text tokenized as a completion prompt (BOS as the model wants).
//  - OpenAI's /v1/embeddings: "input" a string, strings, token ids or lists of token ids; "encoding_format"
//    "float" (default) or "base64" (the vector's little-endian float32 bytes, what OpenAI's SDKs ask for);
//    "dimensions" only the model's own; "model" (this server's), "user". Unit vectors, as OpenAI's.
//  - Ollama's /api/embed: "input" a string or strings (empty ones left out, as Ollama does); "truncate"
//    (default true: a longer input is cut to the context); "model" (":latest" accepted), "options",
//    "keep_alive", "dimensions". Unit vectors, with Ollama's counts and durations.
//  - Ollama's older /api/embeddings: "prompt"; the vector as the model gives it.
// An empty OpenAI input, an input longer than the context (unless truncated), more than max_embed_inputs
// inputs, a token id outside the vocabulary, a wrong type: ApiError 400 (a wrong model: 404).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/server_api.h"

namespace vkspec::cli {

enum class EmbedEndpoint { OpenAi, OllamaEmbed, OllamaEmbeddings };

struct EmbedSpec {
  EmbedEndpoint endpoint = EmbedEndpoint::OpenAi;
  std::vector<std::vector<int32_t>> inputs;   // token ids, each 1..n_ctx of them
  bool normalize = true;                      // unit length (all but /api/embeddings)
  bool base64 = false;                        // OpenAI's encoding_format "base64"
};

EmbedSpec parse_embeddings(const nlohmann::ordered_json& body, EmbedEndpoint ep, const ServerLimits& lim,
                           const PromptEncoder& enc, const std::string& model_id, uint32_t n_embd);
// The response to `spec` with one vector per input, in order; `seconds` the time they took.
nlohmann::json embeddings_response(const EmbedSpec& spec, const std::vector<std::vector<float>>& vectors,
                                   const std::string& model_id, double seconds);

}  // namespace vkspec::cli
