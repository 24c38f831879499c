#pragma once
// The engine under the C API (include/vkspec.h; engine/c_api.cpp): a target model, its tokenizer and an
// optional drafter loaded once, and one completion at a time, on a fresh KV sequence or on a Session whose
// cache is kept between completions (a chat: only what is new is prefilled). The server's continuous
// batching is engine/batch_engine.h. Applications (the CLI in apps/) use the C API, not this header.
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/prompt.h"
#include "loader/gbnf.h"
#include "loader/json_grammar.h"
#include "loader/tokenizer.h"
#include "runtime/model.h"
#include "runtime/sampler.h"
#include "runtime/token_choice.h"
#include "speculative/controller.h"

namespace vkspec {

struct Completion {
  std::vector<uint32_t> ids;   // generated tokens (EOG excluded)
  // "eos" (end of generation), "length" (-n reached), "context" (the context is full), "stopped" (the
  // token callback asked to stop), "cancelled" (the cancel flag was set)
  std::string stop_reason;
  uint32_t reused = 0;         // leading context tokens whose K/V the session's cache already held
  uint32_t prefilled = 0;      // context tokens this completion prefilled
  double prefill_s = 0, decode_s = 0;
  bool speculative = false;
  SpeculativeStats spec;
  // Submissions (host waits) and dispatches after the first token, which the prefill's submission chooses.
  uint64_t decode_submissions = 0, decode_parts = 0, decode_dispatches = 0;   // waits, command buffers
  double decode_gpu_s = 0;   // device time of those submissions (timestamps)
  // Decode tokens/s: every token after the first costs one forward pass (or a share of a verify pass).
  double decode_tok_s() const { return ids.size() > 1 && decode_s > 0 ? double(ids.size() - 1) / decode_s : 0.0; }
};

// How an Engine or BatchEngine drafts (the C API's context parameters; the CLI's -md/--draft flags).
struct EngineOptions {
  std::string draft_model;   // a draft GGUF sharing the target's vocabulary, or empty
  std::string draft;         // "ngram": prompt-lookup drafts instead
  int draft_max = 5, draft_min = 0;
  float draft_p_min = 0.0f;
  std::string draft_policy = "adaptive";   // fixed (always K) | adaptive (speculative/draft_policy.h)
};

// Sampling settings checked (values the device sampler would turn into NaN or infinite probabilities are
// refused, naming the CLI's flags); the seed is left to the caller.
SamplingParams checked_sampling(const SamplingParams& sp);
// Throws a clear error for drafting options out of range.
void check_engine_options(const EngineOptions& o);


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
    uint32_t ubatch = 0;          // tokens per forward chunk (ModelOptions::ubatch; 0: the device's)
    std::function<void(uint64_t done, uint64_t total)> progress;
    std::optional<ExternalDevice> external;   // the application's device (C API external device mode)
    bool vocab_only = false;      // the file and tokenizer only: no device, no model (ctx, pipelines, model null)
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
  // The constraint of a request's settings (JSON mode, a grammar; null: none). The vocabulary's views they
  // need are made at the first request that asks (any thread); the last kGrammarsKept grammars are kept
  // parsed with their masks (GbnfMaskCache), for the requests that repeat them.
  std::unique_ptr<TokenConstraint> constraint(const SamplingParams& sp);
  static constexpr size_t kGrammarsKept = 8;

 private:
  struct KeptGrammar {
    std::string text;
    std::shared_ptr<const Gbnf> grammar;
    std::shared_ptr<GbnfMaskCache> masks;
  };
  std::mutex constraint_mu_;
  std::shared_ptr<const VocabBytes> vocab_bytes_;
  std::shared_ptr<const JsonGrammar> json_grammar_;
  std::vector<KeptGrammar> grammars_;   // most recently used last
};

class Engine {
 public:
  // On a loaded target (shared with other Engines); loads the drafter of `o` and checks that a draft model
  // shares the target's vocabulary.
  Engine(std::shared_ptr<TargetModel> target, const EngineOptions& o);
  ~Engine();

  const Tokenizer& tokenizer() const { return *t_->tok; }
  LlamaModel& model() { return *t_->model; }
  // Set while a completion runs: a cancel request ends it after the current submission, and the prompt is
  // then prefilled in submissions of one forward chunk (LlamaModel::ubatch() tokens) so that this is never long.
  void set_cancel_flag(const std::atomic<bool>* flag) { cancel_ = flag; }
  // With a cancel flag: true prefills the whole prompt in one submission anyway (the flag is then seen after
  // it); for the completions begun from now on.
  void set_prefill_one_submission(bool whole) { prefill_whole_ = whole; }
  Drafter* drafter() { return drafter_.get(); }
  bool adaptive_k() const;   // --draft-policy adaptive
  double load_s() const { return load_s_; }


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
  // submission (a prompt chunk of ubatch() tokens when cancellable, else the whole prompt; a decoding step;
  // a speculative round) and returns false once the completion has ended; finish() gives its result.
  void begin(Session& session, std::span<const uint32_t> context, const SamplingParams& sp, int n, bool ignore_eos,
             bool speculate, const TokenCallback& on_token = {});
  bool step();
  Completion finish();
  bool running() const { return run_ != nullptr; }

  Session open_session();
  void close_session(Session& s);
  // Empties the session's cache (the next completion prefills its whole context).
  void clear_session(Session& s);
  // The session's tokens and KV to a file and back (engine/session_file.h), not during a completion: a
  // loaded session's next completion prefills only what its context adds to the file's tokens.
  void save_session(const Session& s, const std::string& path);
  void load_session(Session& s, const std::string& path);

  // log p(tokens[i] | tokens[0..i-1]) for i = first .. tokens.size()-1, from an empty cache on `session`
  // (afterwards it holds tokens[0..n-2]); 1 <= first < tokens.size() <= n_ctx. Perplexity's core. Returns
  // nullopt when the cancel flag stopped it between passes.
  std::optional<std::vector<double>> score(Session& session, std::span<const uint32_t> tokens, size_t first);
  // The embedding of `tokens` (LlamaModel::embed), from an empty cache on `session` (afterwards it holds
  // them); 1 <= tokens.size() <= n_ctx. `normalize`: scaled to unit Euclidean length.
  std::vector<float> embed(Session& session, std::span<const uint32_t> tokens, LlamaModel::Pooling pooling, bool normalize);
  static void normalize_embedding(std::span<float> v);   // to unit Euclidean length (a zero vector stays)

 private:
  void load_drafter();
  bool accept_token(uint32_t t, bool from_draft);
  struct Run;
  std::unique_ptr<Run> run_;   // the completion in progress

  EngineOptions o_;
  std::shared_ptr<TargetModel> t_;
  std::unique_ptr<GgufFile> draft_file_;
  std::unique_ptr<LlamaModel> draft_model_;
  const std::atomic<bool>* cancel_ = nullptr;
  bool prefill_whole_ = false;
  std::unique_ptr<Drafter> drafter_;
  std::unique_ptr<Recorder> rec_;                 // every decoding step and speculative round
  std::unique_ptr<TokenChooser> chooser_;
  double load_s_ = 0;
};

}  // namespace vkspec
