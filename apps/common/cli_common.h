#pragma once
// Pieces shared by the vkspec subcommands, which reach the library only through its C API (apps/common/api.h).
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/api.h"
#include "common/option_names.h"

namespace vkspec::cli {

// A CLI failure: main prints it on one line ("vkspec: error: ...") and exits 1.
struct Error : std::runtime_error {
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};
// Control characters shown as \xNN, so that an error quoting a file's text is one printable line. (The
// library escapes its own messages the same way; this covers the CLI's, which quote paths and flags.)
std::string escape_controls(const std::string& s);

struct RunOptions {
  std::string model;
  std::string prompt, prompt_file;
  bool escape = false;      // --escape: also in a prompt file
  bool no_escape = false;   // --no-escape: -p taken as given (escapes in -p are processed by default, as llama.cpp)
  int n_predict = 128;
  float temp = 0.8f, top_p = 0.95f, min_p = 0.05f, repeat_penalty = 1.0f, frequency_penalty = 0.0f,
        presence_penalty = 0.0f;
  int top_k = 40, repeat_last_n = 64;
  std::vector<int32_t> bias_tokens;   // --logit-bias TOKEN+BIAS / TOKEN-BIAS (llama.cpp's -l), in order
  std::vector<float> bias_values;
  bool json_object = false;   // --json-object: JSON mode
  std::string grammar, grammar_file;   // --grammar GBNF / --grammar-file FILE (llama.cpp's flags)
  std::string json_schema, json_schema_file;   // -j SCHEMA / -jf FILE (llama.cpp's flags)
  std::optional<uint64_t> seed;   // --seed S (0 .. 2^64-1); none or -1: random
  int samples = 1;     // independent completions, seeds seed, seed+1, ...
  std::string prompt_cache;   // --prompt-cache FILE: the context's KV from and to a session file (engine/session_file.h)
  int ctx = 0;
  int device = -1;
  int ubatch = 0;          // --ubatch: tokens per forward chunk (0: the device's)
  bool ignore_eos = false;
  bool json = false;
  bool no_bos = false;   // tokenize only
  // speculative decoding
  std::string draft_model;   // -md FILE
  std::string draft;         // "ngram" for prompt-lookup drafting
  int draft_max = 5, draft_min = 0;
  float draft_p_min = 0.0f;
  std::string draft_policy = "adaptive";   // fixed (always K) | adaptive (speculative/draft_policy.h)
  std::string spec_sampling = "coupled";   // coupled | rejection (vkspec_sampling_params.spec_sampling)
  std::string draft_tree = "auto";         // auto | off (vkspec_draft_params.tree)
  bool speculative() const { return !draft_model.empty() || !draft.empty(); }
};

struct BenchOptions {
  int prompt_tokens = 128;   // -p
  int reps = 3;
  std::string peer_dir;                // --peer: ../shared/tools/peer with node_modules installed
  std::string peer_backend = "false";  // peer.mjs --gpu: false (CPU, one thread) or vulkan
};

struct ChatOptions {
  bool chat = false;              // run --chat: the prompt is one user message in the model's chat template
  std::string system;             // -sys / --system: a system message first
  std::string template_file;      // --chat-template FILE instead of the GGUF's template
  std::string messages_file;      // apply-template --messages FILE.json
  bool no_generation_prompt = false;
};

struct ServeOptions {
  std::string host = "127.0.0.1";   // loopback unless asked
  bool no_webui = false;            // no chat page at /
  int port = 8080;                  // 0: any free port (printed)
  uint32_t parallel = 4;            // sequences decoded together (--parallel)
  uint32_t prompt_cache = 4;        // finished sequences kept for their prefix (--prompt-cache; 0: off)
  std::string api_key;              // --api-key: required as "Authorization: Bearer KEY" when set
  std::string alias;                // the model's id in the API (default: the file's name)
  std::string chat_template;        // --chat-template FILE instead of the model's
  size_t max_body = 4u << 20;       // request body bytes
  int timeout_s = 30;               // socket read/write timeout: a stalled client is dropped
  uint32_t http_threads = 64;       // connections served at once
  std::string pooling = "last";     // embeddings: last | mean (--pooling)
  // --report-cache: responses say how many of their prompt tokens came from the KV of other requests (prefix
  // sharing, the prompt cache). Off by default: on a shared server those counts tell a client how much of its
  // prompt matches another client's, an oracle for their prompts; /metrics keeps the totals either way.
  bool report_cache = false;
  // --cors-origin: browser origins allowed besides loopback pages ("*": any)
  std::vector<std::string> cors_origins;
};

struct EmbedOptions {
  std::string pooling = "last";   // --pooling: last | mean
  bool normalize = false;         // --normalize: unit length
};

struct PerplexityOptions {
  int ctx = 512;      // --ctx: tokens per chunk (llama-perplexity's -c)
  int chunks = -1;    // --chunks: at most this many (-1: all)
};

// ---- the library through the C API ----
// Checks --ctx and --device, then loads -m for `max_contexts` contexts at once (a progress bar on stderr
// when it is a terminal and the output is not JSON).
api::Model load_model(const RunOptions& o, uint32_t max_contexts = 1);
// -md/--draft of `o` (the library checks the values), and its name as the library reports it.
vkspec_draft_params draft_params(const RunOptions& o);
std::string drafter_name(const RunOptions& o);
// The sampling flags of `o` with `seed`, and both as a context's parameters.
vkspec_sampling_params sampling_params(const RunOptions& o, uint64_t seed);

vkspec_context_params context_params(const RunOptions& o, uint64_t seed);
// The warning llama.cpp prints when a text that begins with BOS's text gets the model's BOS too.
void warn_if_double_bos(const api::Model& m, const std::vector<int32_t>& ids);
// The prompt's ids (BOS when the model wants one; a doubled BOS is warned about); throws when it is empty.
std::vector<int32_t> encode_prompt(const api::Model& m, const std::string& text);
// A prompt rendered by a chat template: special tokens parsed, BOS unless the template wrote it.
std::vector<int32_t> encode_chat(const api::Model& m, const std::string& text);
// The chat template: --chat-template FILE's source, or nullopt for the model's own (a clear error when the
// model has none).
std::optional<std::string> chat_template_source(const api::Model& m, const std::string& template_file);

// Speculation totals over one or more generations (vkspec_metrics).
struct SpecTotals {
  uint64_t drafted = 0, accepted = 0, verify_passes = 0, round_tokens = 0, tree_rounds = 0;
  uint64_t drafted_at[16] = {}, accepted_at[16] = {};   // per draft depth (vkspec_metrics.drafted_at_depth)
  SpecTotals& operator+=(const vkspec_metrics& m);
  double acceptance_rate() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
  double tokens_per_verify() const { return verify_passes ? double(round_tokens) / double(verify_passes) : 0.0; }
};
// "speculative":{"drafter", "draft_max", ..., "drafted", "accepted", "acceptance_rate", "acceptance_by_depth",
// "tokens_per_verify", "tree_rounds"}
nlohmann::json speculative_json(const RunOptions& o, const std::string& drafter, const SpecTotals& s);
// The CLI's name for the library's stop reason ("interrupted" where it says "stopped": a callback ended it).
std::string cli_stop_reason(const char* library_reason);

int cmd_devices(bool json);
int cmd_version();   // vkspec's version, the C API's and the Vulkan devices, one line each
int cmd_perplexity(const RunOptions& o, const PerplexityOptions& p);
int cmd_embed(const RunOptions& o, const EmbedOptions& e);
int cmd_run(const RunOptions& o, const ChatOptions& chat = {});
int cmd_chat(const RunOptions& o, const ChatOptions& chat);
int cmd_apply_template(const RunOptions& o, const ChatOptions& chat);
int cmd_bench(const RunOptions& o, const BenchOptions& b);
int cmd_tokenize(const RunOptions& o);
int cmd_serve(const RunOptions& o, const ServeOptions& s);

// Text files are read whole up to this size (perplexity texts, tokenize); a prompt for generation up to what
// its context can hold.
constexpr uint64_t kMaxTextBytes = 256ull << 20;
// A regular file's contents, refusing FIFOs, devices, directories and files over max_bytes (naming `what`).
std::string read_text_file(const std::string& path, uint64_t max_bytes, const char* what);
// The prompt text exactly as given (-p or -f), with C escapes processed only when --escape is set.
std::string read_prompt(const RunOptions& o, uint64_t max_bytes);
// --seed's text: -1 (random) or 0 .. 2^64-1; anything else is an error naming the flag.
std::optional<uint64_t> parse_seed(const std::string& text);
// llama.cpp's --logit-bias syntax: a token id, then + or -, then the bias ("15043+1", "2-100"); none when malformed.
std::optional<std::pair<int32_t, float>> parse_logit_bias(const std::string& text);
// Writes and flushes; throws Error when standard output fails (closed, full disk, broken pipe).
void write_stdout(const std::string& s);
std::string process_escapes(const std::string& s);

}  // namespace vkspec::cli
