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

#include "text/prompt.h"
#include "engine/sequence.h"
#include "engine/target_model.h"
#include "runtime/token_choice.h"

namespace vkspec {

// A KV sequence that outlives one completion. Invariant (asserted after every completion): the cache of
// `seq` holds exactly the K/V of `tokens`, in order.
struct Session {
  int seq = -1;
  std::vector<uint32_t> tokens;
};

class Engine {
 public:
  // On a loaded target (shared with other Engines); loads the drafter of `o` and checks that a draft model
  // shares the target's vocabulary.
  Engine(std::shared_ptr<TargetModel> target, const DraftOptions& o);
  ~Engine();

  const Tokenizer& tokenizer() const { return *t_->tok; }
  LlamaModel& model() { return *t_->model; }
  // Set while a completion runs: a cancel request ends it after the current submission, and the prompt is
  // then prefilled in submissions of one forward chunk (LlamaModel::ubatch() tokens) so that this is never long.
  void set_cancel_flag(const std::atomic<bool>* flag) { cancel_ = flag; }
  // With a cancel flag: true prefills the whole prompt in one submission anyway (the flag is then seen after
  // it); for the completions begun from now on.
  void set_prefill_one_submission(bool whole) { prefill_whole_ = whole; }
  // A device-time budget per call (seconds; 0: none), for the completions begun from now on: the prompt goes
  // in chunks (one step each), and each step's recording is released a budget's worth per call (Recorder,
  // ReleasePlan); the steps themselves are what they would be without it (a round's drafts are the cost
  // model's), so it changes no token. Needs timestamps; without them it does nothing.
  void set_device_budget(double seconds) { budget_s_ = seconds; }
  DrafterKind drafter_kind() const { return o_.kind(); }
  Drafter* drafter() { return drafter_.get(); }   // (between completions; null without one)
  double load_s() const { return load_s_; }


  // Generates up to `n` tokens after `prompt` with `sp`, speculatively when `speculate` and a drafter is
  // loaded. `on_token` sees each token as it is accepted and returns false to stop.
  // The token callback: the id and whether it was a verified draft; false stops generation.
  using TokenCallback = std::function<bool(uint32_t token, bool from_draft)>;
  SequenceResult generate(std::span<const uint32_t> prompt, const SamplingParams& sp, int n, bool ignore_eos,
                      bool speculate, const TokenCallback& on_token = {});
  // The same on a session: `context` is the whole conversation so far; the cache keeps its longest common
  // prefix with session.tokens and prefills the rest. Afterwards session.tokens is what the cache holds
  // (the context and the generated tokens, except a last token that was never fed back).
  SequenceResult generate(Session& session, std::span<const uint32_t> context, const SamplingParams& sp, int n,
                      bool ignore_eos, bool speculate, const TokenCallback& on_token = {});
  // The same, a forward pass at a time: begin() sets a completion up (nothing runs), each step() runs one
  // submission (a prompt chunk of ubatch() tokens when cancellable, else the whole prompt; a decoding step;
  // a speculative round) and returns false once the completion has ended; finish() gives its result.
  void begin(Session& session, std::span<const uint32_t> context, const SamplingParams& sp, int n, bool ignore_eos,
             bool speculate, const TokenCallback& on_token = {});
  bool step();
  SequenceResult finish();
  bool running() const { return run_ != nullptr; }
  // step() in two halves, for a frame loop: submit() records the step and submits it without waiting (true),
  // or ends the completion without device work (false: the tokens before were its last); collect() waits up
  // to timeout_ns (0: a look) for the device and commits the step: its tokens reach on_token, and false means
  // it is not done yet. Both on the caller's thread; on_token runs inside either. While a step is in flight
  // the model serves no other completion (TargetModel::in_flight): another Engine's submit() waits for its
  // collection, or with wait_for_model = false throws ModelBusy.
  bool submit(bool wait_for_model = true);
  bool collect(uint64_t timeout_ns);
  bool step_pending() const;

  Session open_session();
  void close_session(Session& s);
  // Empties the session's cache (the next completion prefills its whole context).
  void clear_session(Session& s);
  // The pipelines of every pass width of the model and the draft model, created now (LlamaModel::warm_up
  // over the session's sequence and the drafter's, whose cached tokens stay), not during a completion.
  void warm_up(Session& s);
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
  struct Run;
  std::unique_ptr<Run> run_;   // the completion in progress
  void end_run(size_t fed);
  void abandon_run();

  DraftOptions o_;
  std::shared_ptr<TargetModel> t_;
  std::unique_ptr<DraftModel> draft_model_;
  const std::atomic<bool>* cancel_ = nullptr;
  bool prefill_whole_ = false;
  double budget_s_ = 0;
  std::unique_ptr<Drafter> drafter_;   // kept between completions (a draft model's cache); lent to each Sequence
  std::unique_ptr<Recorder> rec_;                 // every decoding step and speculative round
  std::unique_ptr<TokenChooser> chooser_;
  double load_s_ = 0;
};

}  // namespace vkspec
