#pragma once
// Continuous batching for the server (`vkspec serve`) and `run --samples`: many requests on one target
// model, each a Sequence (engine/sequence.h) in its own KV sequence, advanced together one step at a time.
// A step is the loop admit -> plan -> record -> submit -> commit:
//   admit    queued requests, in arrival order, while KvAdmission (engine/kv_admission.h) grants them a
//            sequence and KV blocks (prefix sharing and the prompt cache live there);
//   plan     speculative sequences draft (a draft model's steps batched across them: record_batched_drafts),
//            then build_plan (engine/step_plan.h) lays out the pass: verify rows, decode rows, prefill;
//   record   the one batched target pass (LlamaModel::record_batch) and every sequence's token choice;
//   submit   one submission, one wait;
//   commit   each sequence takes its tokens (or its verdict) and may end.
// Every kernel is batch-invariant, so a request's tokens do not depend on what else is in the batch.
//
// Embedding requests (BatchRequest::embed) are admitted as the others (a sequence, their prompt's blocks) and
// run at the start of each step, before its pass, in parts of at most a step's rows (LlamaModel::embed_part),
// so that a long text does not stall the streams beside it.
//
// Threads: submit() and metrics() from any thread; step()/run() on one engine thread, which is where the
// requests' callbacks run.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "engine/kv_admission.h"
#include "engine/sequence.h"
#include "engine/step_plan.h"
#include "engine/target_model.h"

namespace vkspec {

struct BatchRequest {
  std::vector<uint32_t> prompt;   // 1 .. n_ctx - 1 tokens
  SamplingParams sp;              // seed included
  uint32_t max_tokens = 16;
  bool ignore_eos = false;
  bool speculate = true;          // when the engine has a drafter
  std::optional<DraftTree> draft_tree;   // token trees (SpeculativeOptions::tree); none: the engine's
  bool logits = false;            // keep each generated token's logits row (logits_row) for logprobs; no speculation
  // On the engine thread, for each accepted token in order: its id, whether it was a verified draft, and
  // (with `logits`) the row it was chosen from. False ends the request (Stopped).
  TokenSink on_token;
  std::function<void(const SequenceResult&)> on_done;   // once, on the engine thread
  std::atomic<bool> cancelled{false};                // any thread: ends the request at the next step
  std::unique_ptr<TokenConstraint> constraint;       // made by submit() from sp (JSON mode, a grammar), then the engine's
  // An embedding instead of a generation: LlamaModel::embed of the prompt (1..n_ctx tokens), run in parts on
  // the engine thread between steps, on a sequence of its own (no prefix shared: every row is computed);
  // on_embedding gets the vector, then on_done (Embedded). sp, max_tokens and the generation fields are unused.
  std::optional<LlamaModel::Pooling> embed;
  bool normalize = false;                            // the embedding scaled to unit length
  std::function<void(std::vector<float>)> on_embedding;
};

struct BatchMetrics {
  uint64_t requests = 0, requests_done = 0, prompt_tokens = 0, prefilled_tokens = 0, shared_tokens = 0;
  uint64_t generated_tokens = 0, drafted = 0, accepted = 0, steps = 0, step_rows = 0;
  uint64_t kv_blocks_allocated = 0;   // ever taken from the pool (copies on write included)
  uint32_t active = 0, queued = 0, kv_blocks_in_use = 0, kv_blocks_total = 0, parallel = 0;
  uint32_t cached_sequences = 0;      // finished sequences kept for their prefix (prompt cache)
  uint64_t cache_evictions = 0;
  uint32_t draft_kv_blocks_in_use = 0, draft_kv_blocks_total = 0;   // the draft model's pool (0 without one)
  uint64_t draft_kv_blocks_allocated = 0;
};

class BatchEngine {
 public:
  struct Options {
    uint32_t parallel = 4;     // sequences decoded together
    uint32_t step_rows = 64;   // rows per step (decode/verify rows first, then prefill)
    uint32_t cached_sequences = 0;   // finished sequences kept as a prompt cache (0: none)
  };
  // `target` must have been loaded with max_sequences >= parallel + cached_sequences; loads the drafter of
  // `o` (-md with `parallel` sequences, or --draft ngram).
  BatchEngine(std::shared_ptr<TargetModel> target, const DraftOptions& o, const Options& opts);
  ~BatchEngine();

  const Tokenizer& tokenizer() const { return *t_->tok; }
  bool has_drafter() const { return o_.kind() != DrafterKind::None; }

  void submit(std::shared_ptr<BatchRequest> r);   // throws Error for a prompt that can never run
  // Before the first request, on the engine thread: creates the pipelines of the target's and the draft
  // model's passes of every width (LlamaModel::warm_up) and of the sampling kernel, so that no step of a
  // request waits for one.
  void warm_up();
  // One step when there is work (false: idle). Engine thread only.
  bool step();
  // step() in two halves, for a frame loop (vkspec_batch_step_submit): submit_step() admits, plans, records
  // and submits the step's pass without waiting (Pass; Worked: only embedding parts ran, or a recording
  // failed and ended its sequences; Idle: nothing to do); collect_step() waits up to timeout_ns (0: a look)
  // and commits the pass (false: not done yet). Embedding parts run and are waited for inside submit_step.
  enum class Submitted { Idle, Worked, Pass };
  Submitted submit_step();
  bool collect_step(uint64_t timeout_ns);
  bool step_in_flight() const;
  // Steps until `stop` is set, sleeping while idle.
  void run(const std::atomic<bool>& stop);
  void wake();   // makes run() look at `stop` now
  // Once the engine thread has stopped: every running and queued request ends (Cancelled), and submit()
  // refuses new ones.
  void shutdown();
  BatchMetrics metrics() const;

 private:
  // One sequence slot: its token chooser (allocated once) and the request it serves.
  struct RequestSlot {
    uint32_t index = 0;                  // in slots_ (its row of logits_host_)
    std::shared_ptr<BatchRequest> req;   // null: free
    int seq = -1;                        // its KV sequence
    std::unique_ptr<TokenChooser> chooser;
    std::unique_ptr<Sequence> sequence;  // the request's tokens, constraint, drafter, stop rule and result
    KvAdmission::Reservation reserved;
    bool decoding = false;               // its prompt is in the cache
    std::chrono::steady_clock::time_point admitted, first_token;
    LlamaModel::EmbeddingPart embedding; // an embedding request's progress (run_embedding)
  };
  // The batched draft steps of a step: how many, their rows in all (the draft model's catch-ups included: a
  // line over rows that left them out priced a draft step at up to 5x its cost), the recorder's marks.
  struct DraftSteps {
    uint32_t steps = 0, rows = 0, begin = 0, end = 0;
  };
  // A step submitted and not yet collected: its plan and the recorder's marks around its passes.
  struct PendingStep {
    StepPlan plan;
    DraftSteps drafts;
    uint32_t pass_begin = 0, pass_end = 0;
  };
  std::optional<PendingStep> pending_;
  void admit();
  bool admit_one(const std::shared_ptr<BatchRequest>& r);
  // An admitted embedding request's next part (at most max_tokens), ended when it was the last; returns the
  // tokens it ran.
  uint32_t run_embedding(RequestSlot& s, uint32_t max_tokens);
  // plan: what each sequence asks of this step (speculative ones draft first), then the pass's rows
  void draft_and_demand(std::vector<StepDemand>& demand, DraftSteps& drafts);
  std::vector<SeqRows> pass_rows(const StepPlan& plan);
  void record_choices(const StepPlan& plan);   // record: each sequence's choice or verification
  void commit(RequestSlot& s, StepPart part, uint32_t rows);   // commit: what the pass gave it (may end it)
  void end(RequestSlot& s, StopReason reason, const std::string& error = {});
  void update_kv_metrics();   // (mu_ held)

  std::shared_ptr<TargetModel> t_;
  DraftOptions o_;
  Options opts_;
  std::unique_ptr<DraftModel> draft_model_;
  std::unique_ptr<Recorder> rec_;
  std::unique_ptr<Arena> logits_arena_, logits_readback_arena_, draft_logits_arena_;
  Slice logits_, logits_host_;   // [parallel * (K + 1)][n_vocab]: the step's logits rows; [parallel] rows read back
  Slice draft_logits_;           // [parallel][draft n_vocab]: a batched draft step's rows
  std::unique_ptr<BatchedChoices> choices_;   // a step's token choices, and a batched draft step's
  std::vector<std::unique_ptr<RequestSlot>> slots_;
  std::unique_ptr<KvAdmission> admission_;    // (before the draft model goes: cached drafters hold its sequences)
  // What this engine's target passes and batched draft steps cost (device time per step, by rows): the
  // measured costs a greedy sequence's drafts are priced with (DraftPolicy::share_passes). Steps with a
  // prompt chunk are left out (a chunk's rows cost more than decode rows).
  PassCostLine pass_costs_, draft_step_costs_;

  mutable std::mutex mu_;   // guards queue_, metrics_, wake_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<BatchRequest>> queue_;
  std::deque<std::chrono::steady_clock::time_point> queued_at_;
  BatchMetrics metrics_;
  bool wake_ = false, closed_ = false;
};

}  // namespace vkspec
