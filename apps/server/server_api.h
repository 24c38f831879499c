#pragma once
// The OpenAI protocol of `vkspec serve`, without HTTP: a request body becomes a validated CompletionSpec
// (every field type- and range-checked; what vkspec cannot honour is refused, never ignored), generated
// tokens become the text a client sees (TextStream: stop strings, also across token boundaries), and
// responses and stream chunks are built in OpenAI's shapes. Errors are ApiError: an HTTP status and
// OpenAI's error object.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/json_text.h"
#include "server/tool_calls.h"
#include "vkspec.h"

namespace vkspec::cli {

struct ApiError : std::exception {
  ApiError(int status_, std::string message_, std::string param_ = {}, std::string code_ = {},
           std::string type_ = "invalid_request_error")
      : status(status_), message(std::move(message_)), param(std::move(param_)), code(std::move(code_)),
        type(std::move(type_)) {}
  const char* what() const noexcept override { return message.c_str(); }
  nlohmann::json body() const;   // {"error": {"message", "type", "param", "code"}}
  int status;
  std::string message, param, code, type;
};

struct ServerLimits {
  size_t max_body = 4u << 20;     // bytes of a request body
  uint32_t n_ctx = 0;             // a prompt is at most n_ctx - 1 tokens; max_tokens at most n_ctx
  uint32_t n_vocab = 0;           // token ids (prompts, top_k) are below it
  uint32_t max_n = 8;             // choices per request
  uint32_t max_stop = 4;          // stop strings (OpenAI's limit)
  uint32_t max_stop_bytes = 256;  // per stop string
  uint32_t max_top_logprobs = 20;
  uint32_t max_json_depth = VKSPEC_MAX_JSON_DEPTH;
  uint32_t max_embed_inputs = 256;  // inputs of one embeddings request
  int32_t spec_sampling = VKSPEC_SPEC_SAMPLING_COUPLED;   // a request's spec_sampling when it gives none (--spec-sampling)
};

// A validated request.
struct CompletionSpec {
  bool chat = false;
  std::vector<int32_t> prompt;
  vkspec_sampling_params sp{};     // seed: the request's, or random; logit bias arrays: set at submission
  std::vector<int32_t> bias_tokens;   // logit_bias, in the request's order
  std::vector<float> bias_values;
  std::string grammar;             // llama.cpp's `grammar` (GBNF); set as sp.grammar at submission
  std::string json_schema;         // response_format json_schema's schema (or llama.cpp's json_schema), as JSON
  std::string grammar_trigger;     // tool_choice "auto": the lazy grammar's trigger (apps/server/tool_calls.h)
  std::vector<ToolFunction> tools; // chat `tools` the reply may call (empty: none, or tool_choice "none")
  uint32_t max_tokens = 0;
  bool ignore_eos = false;         // llama.cpp's extension: generate max_tokens whatever the model says
  int32_t draft_tree = -1;         // vkspec's draft_tree: vkspec_request_params.draft_tree (-1: the server's)
  uint32_t n = 1;
  bool stream = false, include_usage = false;
  std::vector<std::string> stop;
  bool logprobs = false;           // chat: logprobs; completions: logprobs given (the legacy format)
  uint32_t top_logprobs = 0;       // chat: top_logprobs; completions: the logprobs number
  size_t dropped_messages = 0;     // the oldest messages left out to fit the context (fit_messages_chained)
};

// Field readers the protocol layers share (this one, ollama_api, embeddings_api): an optional field (absent or
// null: nullptr), a boolean one, a 400 naming the field, an array of token ids of the vocabulary (`what` names
// it in the 400), and the request's "model" against the server's (a 404; `ollama`: with Ollama's ":latest"
// tag accepted).
const nlohmann::ordered_json* field(const nlohmann::ordered_json& body, const char* name);
bool boolean(const nlohmann::ordered_json& body, const char* name, bool def);
[[noreturn]] void bad(const std::string& param, const std::string& message);
std::vector<int32_t> token_ids(const nlohmann::ordered_json& a, const ServerLimits& lim, const std::string& param,
                               const std::string& what);
void check_model(const nlohmann::ordered_json& body, const std::string& model_id, bool ollama = false);

// JSON text -> object, with a depth limit; malformed or deep JSON is a 400.
nlohmann::ordered_json parse_body(const std::string& text, const ServerLimits& lim);
// What parsing needs of the model: its prompt encodings (the server's go through the C API; the fuzzer's
// use the tokenizer directly). Each throws std::exception with a message for text it cannot encode.
struct PromptEncoder {
  std::function<std::vector<int32_t>(const std::string& text)> prompt;   // a completion prompt, BOS as the model wants
  // The chat template's text of `messages` (JSON array of {role, content, ...}) and `tools` (OpenAI's array;
  // null: none); empty function: the model has no chat template (chat requests are a 400 saying so).
  std::function<std::string(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools)> render_chat;
  std::function<std::vector<int32_t>(const std::string& text)> chat;     // a rendered chat's tokens
};
// `fit_messages`: a chat that would leave less than reply_reserve() for the reply loses its oldest messages
// where the turns before lost them (fit_messages_chained in apps/common/message_window.h; Ollama's /api/chat)
// instead of a context_length_exceeded 400 (OpenAI's endpoints).
CompletionSpec parse_completion(const nlohmann::ordered_json& body, bool chat, const ServerLimits& lim,
                                const PromptEncoder& enc, const std::string& model_id, bool fit_messages = false);

// llama.cpp's server utilities. /tokenize: {"content", "add_special" (false), "parse_special" (true),
// "with_pieces" (false)}; /detokenize: {"tokens": ids of the vocabulary}; /apply-template: a chat request's
// messages (and tools), rendered by the chat template as /v1/chat/completions renders them.
struct TokenizeSpec {
  std::string content;
  bool add_special = false, parse_special = true, with_pieces = false;
};
TokenizeSpec parse_tokenize(const nlohmann::ordered_json& body);
std::vector<int32_t> parse_detokenize(const nlohmann::ordered_json& body, const ServerLimits& lim);
std::string apply_template(const nlohmann::ordered_json& body, const PromptEncoder& enc);
// A token's piece for with_pieces: its text when it is valid UTF-8, else its bytes (llama.cpp's rule).
nlohmann::json token_piece(const std::string& piece);

// Generated text (valid UTF-8 pieces, as the library delivers them) -> text to send: the first stop string
// ends the text (it and what follows are dropped); a tail that could still begin a stop string is held back
// until it cannot.
class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  std::string push(const std::string& piece);   // the text now safe to send
  std::string finish();                         // at the end: whatever was held back
  bool stopped() const { return stopped_; }
  const std::string& stop_string() const { return matched_; }   // the stop string that ended the text

 private:
  std::string held_;
  std::vector<std::string> stops_;
  bool stopped_ = false;
  std::string matched_;
};

// One generated token's log-probability entry for chat logprobs: {token, logprob, bytes, top_logprobs};
// `piece` gives a token's text.
nlohmann::json token_logprob(const std::function<std::string(int32_t)>& piece, int32_t token, const float* logits,
                             uint32_t n_vocab, uint32_t top);

// The legacy completions format of token_logprob entries: {tokens, token_logprobs, top_logprobs (per token
// an object of texts to log-probabilities: the alternatives and the chosen token, as OpenAI's), text_offset
// (UTF-8 bytes into the completion, the first token at text_offset)}.
nlohmann::json completion_logprobs(const nlohmann::json& entries, size_t text_offset);

// A tool call as OpenAI's message and delta carry it: {"id": "call_...", "type": "function", "function":
// {"name", "arguments"}} (with "index" in a stream's delta).
nlohmann::json tool_call_json(const ToolCall& call, const std::string& id);
// A reply that may still become a tool call (held back from a stream): nothing but whitespace yet, or text
// that begins with '{'.
bool may_become_tool_call(const std::string& text);

// JSON text of a response or chunk: invalid UTF-8 (a token that is part of a character) is replaced, never
// an exception.
std::string dump(const nlohmann::json& j);

}  // namespace vkspec::cli
