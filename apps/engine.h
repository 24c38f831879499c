#pragma once
// What `run`, `bench` and `chat` (and later the server) share: a target model, its tokenizer and an optional
// drafter loaded once, and one completion at a time, on a fresh KV sequence or on a Session whose cache is
// kept between completions (a chat: only what is new is prefilled).
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/cli_common.h"
#include "apps/prompt.h"
#include "loader/tokenizer.h"
#include "runtime/model.h"
#include "runtime/sampler.h"
#include "runtime/token_choice.h"
#include "speculative/controller.h"

namespace vkspec::cli {

struct Completion {
  std::vector<uint32_t> ids;   // generated tokens (EOG excluded)
  // "eos" (end of generation), "length" (-n reached), "context" (the context is full), "interrupted" (the
  // token callback asked to stop), "cancelled" (the cancel flag was set)
  std::string stop_reason;
  uint32_t reused = 0;         // leading context tokens whose K/V the session's cache already held
  uint32_t prefilled = 0;      // context tokens this completion prefilled
  double prefill_s = 0, decode_s = 0;
  bool speculative = false;
  SpeculativeStats spec;
  // Submissions (host waits) and dispatches after the first token, which the prefill's submission chooses.
  uint64_t decode_submissions = 0, decode_dispatches = 0;
  double decode_gpu_s = 0;   // device time of those submissions (timestamps)
  // Decode tokens/s: every token after the first costs one forward pass (or a share of a verify pass).
  double decode_tok_s() const { return ids.size() > 1 && decode_s > 0 ? double(ids.size() - 1) / decode_s : 0.0; }
};

// The sampling flags of `o` (the seed is left to the caller).
SamplingParams sampling_params(const RunOptions& o);

// The loading progress bar on stderr (TargetModel::Options::progress).
void progress_bar(uint64_t done, uint64_t total);
// Checks the engine flags of `o` (drafter choice, --draft-max/min, --draft-p-min, --ctx, --device).
void check_engine_options(const RunOptions& o);
// "speculative":{"drafter", "draft_max", ..., "drafted", "accepted", "acceptance_rate", "tokens_per_verify"}
nlohmann::json speculative_json(const RunOptions& o, const std::string& drafter, const SpeculativeStats& s);


// A KV sequence that outlives one completion. Invariant (asserted after every completion): the cache of
// `seq` holds exactly the K/V of `tokens`, in order.
struct Session {
  int seq = -1;
  std::vector<uint32_t> tokens;
};

// A target model loaded once and shared by the Engines (contexts) on it: file, tokenizer, Vulkan device,
// pipelines and the model with its paged KV pool (one sequence per Session).
struct TargetModel {
  struct Options {
    std::string path;
    int device = -1;
    uint32_t n_ctx = 0;           // 0: the model's, capped at 4096
    uint32_t max_sequences = 1;   // Sessions that may be open at once (each needs KV for n_ctx)
    uint32_t kv_blocks = 0;       // KV pool blocks (0: n_ctx for each of kv_pool_sequences)
    uint32_t kv_pool_sequences = 0;   // 0: max_sequences
    std::function<void(uint64_t done, uint64_t total)> progress;
    std::optional<ExternalDevice> external;   // the application's device (C API external device mode)
  };
  explicit TargetModel(const Options& o);
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Pipelines> pipelines;
  std::unique_ptr<LlamaModel> model;
  double load_s = 0;
  // Held for a whole completion: the model's activations and the device queue serve one at a time.
  std::mutex busy;
};

class Engine {
 public:
  // Loads -m (and -md or --draft ngram) from `o`; checks the draft shares the target's vocabulary.
  explicit Engine(const RunOptions& o, bool show_progress = false);
  // On an already loaded target (shared with other Engines); loads the drafter of `o` (o.model is unused).
  Engine(std::shared_ptr<TargetModel> target, const RunOptions& o);
  ~Engine();

  const Tokenizer& tokenizer() const { return *t_->tok; }
  const GgufFile& file() const { return *t_->file; }
  LlamaModel& model() { return *t_->model; }
  // Set while a completion runs: a cancel request ends it after the current submission, and the prompt is
  // then prefilled in submissions of one forward pass (kMaxBatch tokens) so that this is never long.
  void set_cancel_flag(const std::atomic<bool>* flag) { cancel_ = flag; }
  Drafter* drafter() { return drafter_.get(); }
  bool adaptive_k() const;   // --draft-policy adaptive
  // "speculative":{"drafter", "draft_max", ..., "drafted", "accepted", "acceptance_rate", "tokens_per_verify"}
  nlohmann::json speculative_json(const SpeculativeStats& s) const;
  const DeviceFacts& facts() const { return t_->ctx->facts(); }
  double load_s() const { return load_s_; }

  // The prompt's token ids (BOS added when the model wants it); throws when it is empty.
  std::vector<uint32_t> encode_prompt(const std::string& text) const;
  // A prompt rendered by a chat template: special tokens parsed, BOS added only when the model wants one
  // and the template did not write it.
  std::vector<uint32_t> encode_chat(const std::string& text) const;

  // Generates up to `n` tokens after `prompt` with `sp`, speculatively when `speculate` and a drafter is
  // loaded. `on_token` sees each token as it is accepted and returns false to stop.
  // The token callback: the id and whether it was a verified draft; false stops generation.
  using TokenCallback = std::function<bool(uint32_t token, bool from_draft)>;
  Completion generate(std::span<const uint32_t> prompt, const SamplingParams& sp, int n, bool ignore_eos,
                      bool speculate, const TokenCallback& on_token = {});
  // The same on a session: `context` is the whole conversation so far; the cache keeps its longest common
  // prefix with session.tokens and prefills the rest. Afterwards session.tokens is what the cache holds
  // (the context and the generated tokens, except a last token that was never fed back).
  Completion generate(Session& session, std::span<const uint32_t> context, const SamplingParams& sp, int n,
                      bool ignore_eos, bool speculate, const TokenCallback& on_token = {});
  // The same, a forward pass at a time: begin() sets a completion up (nothing runs), each step() runs one
  // submission (a prompt pass of kMaxBatch tokens when cancellable, else the whole prompt; a decoding step;
  // a speculative round) and returns false once the completion has ended; finish() gives its result.
  void begin(Session& session, std::span<const uint32_t> context, const SamplingParams& sp, int n, bool ignore_eos,
             bool speculate, const TokenCallback& on_token = {});
  bool step();
  Completion finish();
  bool running() const { return run_ != nullptr; }

  Session open_session();
  void close_session(Session& s);

 private:
  void load_drafter();
  bool accept_token(uint32_t t, bool from_draft);
  struct Run;
  std::unique_ptr<Run> run_;   // the completion in progress

  RunOptions o_;
  std::shared_ptr<TargetModel> t_;
  std::unique_ptr<GgufFile> draft_file_;
  std::unique_ptr<LlamaModel> draft_model_;
  const std::atomic<bool>* cancel_ = nullptr;
  std::unique_ptr<Drafter> drafter_;
  std::unique_ptr<Recorder> rec_;                 // every decoding step and speculative round
  std::unique_ptr<TokenChooser> chooser_;
  std::unique_ptr<SpecAcceptor> acceptor_;        // created on the first sampled speculative completion
  double load_s_ = 0;
};

}  // namespace vkspec::cli
