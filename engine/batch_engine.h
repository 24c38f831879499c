#pragma once
// Continuous batching for the server (`vkspec serve`) and `run --samples`: many requests on one target
// model, each in its own KV sequence, advanced together one step at a time. A step is one submission:
// every decoding sequence's row (or its speculative round: its drafts, a draft model's steps batched across
// the sequences (record_batched_drafts), and the rows [g, d1..dK] to verify) and as much prefill as the step's row budget allows, in one batched target pass
// (LlamaModel::record_batch), then every sequence's token choice or verification. Every kernel is
// batch-invariant, so a request's tokens do not depend on what else is in the batch.
//
// Admission (in arrival order) needs a free sequence and KV blocks: a request reserves the blocks of its
// longest possible length (prompt + max_tokens + a round's drafts, at most the context) in the target's pool
// and, with a draft model, in the draft's; a request that does not fit waits in the queue, and a running one
// never runs out. A new prompt that shares a prefix with a sequence already running takes that prefix's
// blocks by reference (PagedKvCache::share_prefix) and prefills only the rest; when that prefix is still
// being prefilled by another sequence (n completions of one prompt), the request waits for it.
//
// Prompt cache: a finished sequence's KV is kept (up to Options::cached_sequences of them, least recently
// used evicted first), so that the next request that starts with its tokens — the next turn of a chat, which
// resends the whole conversation, or a repeated system prompt — shares those blocks instead of prefilling
// them again. Cached sequences give way: admission evicts them (least recently used first) whenever a new
// request's reservation needs their blocks, so the cache never makes a request wait; the one the request
// shares a prefix with goes last, and then is taken over (the request keeps the shared blocks, the rest is
// freed), so that a conversation near the context still reuses its turn before. Block accounting:
// every block in use is covered by a running request's reservation or counted by a cached sequence's length,
// so reserved + cached + a new reservation <= pool keeps "a running request never runs out". With a draft
// model a cached sequence keeps its request's drafter too, and the draft sequence it holds (the draft pool is
// accounted the same way): a request that takes a cached sequence's prefix takes its drafter, trimmed to what
// the new prompt still agrees with, so that the draft model catches up only on the rest (a chat's next turn
// no longer runs the whole conversation through the draft model).
//
// Embedding requests (BatchRequest::embed) are admitted as the others (a sequence, their prompt's blocks) and
// run at the start of each step, before its pass, in parts of at most a step's rows (LlamaModel::embed_part),
// so that a long text does not stall the streams beside it.
//
// Threads: submit() and metrics() from any thread; step()/run() on one engine thread, which is where the
// requests' callbacks run.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

#include "engine/engine.h"

namespace vkspec {

struct BatchResult {
  // "eos", "length" (max_tokens), "context" (the context is full), "stopped" (on_token said stop),
  // "cancelled", "error" (message in `error`)
  std::string stop_reason, error;
  uint32_t prompt_tokens = 0, prefilled = 0, shared = 0;   // shared: prompt tokens taken from another sequence
  uint32_t completion_tokens = 0;
  bool speculative = false;
  SpeculativeStats spec;
  double queued_s = 0, prefill_s = 0, decode_s = 0;   // admission wait, first token, the rest
};

struct BatchRequest {
  std::vector<uint32_t> prompt;   // 1 .. n_ctx - 1 tokens
  SamplingParams sp;              // seed included
  uint32_t max_tokens = 16;
  bool ignore_eos = false;
  bool speculate = true;          // when the engine has a drafter
  bool logits = false;            // keep each generated token's logits row (logits_row) for logprobs; no speculation
  // On the engine thread, for each accepted token in order: its id, whether it was a verified draft, and
  // (with `logits`) the row it was chosen from. False ends the request ("stopped").
  std::function<bool(uint32_t token, bool from_draft, const float* logits_row)> on_token;
  std::function<void(const BatchResult&)> on_done;   // once, on the engine thread
  std::atomic<bool> cancelled{false};                // any thread: ends the request at the next step
  std::unique_ptr<TokenConstraint> constraint;       // made by submit() from sp (JSON mode, a grammar), then the engine's
  // An embedding instead of a generation: LlamaModel::embed of the prompt (1..n_ctx tokens), run in parts on
  // the engine thread between steps, on a sequence of its own (no prefix shared: every row is computed);
  // on_embedding gets the vector, then on_done ("embedded"). sp, max_tokens and the generation fields are unused.
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
  BatchEngine(std::shared_ptr<TargetModel> target, const EngineOptions& o, const Options& opts);
  ~BatchEngine();

  const Tokenizer& tokenizer() const { return *t_->tok; }
  bool has_drafter() const { return !draft_kind_.empty(); }

  void submit(std::shared_ptr<BatchRequest> r);   // throws Error for a prompt that can never run
  // Before the first request, on the engine thread: creates the pipelines of the target's and the draft
  // model's passes of every width (LlamaModel::warm_up) and of the sampling kernel, so that no step of a
  // request waits for one.
  void warm_up();
  // One step when there is work (false: idle). Engine thread only.
  bool step();
  // Steps until `stop` is set, sleeping while idle.
  void run(const std::atomic<bool>& stop);
  void wake();   // makes run() look at `stop` now
  // Once the engine thread has stopped: every running and queued request ends ("cancelled"), and submit()
  // refuses new ones.
  void shutdown();
  BatchMetrics metrics() const;

 private:
  struct Slot;
  struct StepRows {                  // what one step's pass holds
    std::vector<SeqRows> rows;       // per sequence in the pass
    std::vector<Slot*> in_step;      // the sequences of `rows`, in order
    std::vector<Slot*> drafted;      // speculative sequences whose drafts were recorded
    std::vector<Slot*> plain_rounds; // greedy speculative sequences drafting nothing this step (decode rows)
    uint32_t n_rows = 0;
    uint32_t prefill_rows = 0;       // of n_rows
    // the batched draft steps: how many, their rows in all (the draft model's catch-ups included: a line
    // over rows that left them out priced a draft step at up to 5x its cost), and the recorder's marks
    // around them (when any)
    uint32_t draft_steps = 0, draft_rows = 0, draft_begin = 0, draft_end = 0;
  };
  void plan_speculative_rows(StepRows& plan);   // drafts recorded, then the verify rows
  void plan_decode_rows(StepRows& plan);        // plain sequences and plain_rounds
  void plan_prefill_rows(StepRows& plan);       // the rest of the row budget
  void record_choices(const StepRows& plan);
  // An admitted embedding request's next part (at most max_tokens), ended when it was the last; returns the
  // tokens it ran.
  uint32_t run_embedding(Slot& s, uint32_t max_tokens);
  void take_result(Slot& s);
  void admit();
  bool admit_one(const std::shared_ptr<BatchRequest>& r);
  void end(Slot& s, const std::string& reason, const std::string& error = {});
  bool emit(Slot& s, uint32_t t, bool from_draft, const float* row);
  uint32_t reservation(const BatchRequest& r, uint32_t block_size) const;
  // Prompt cache: keeps a finished sequence whose cache holds `tokens`, with its drafter (or frees them),
  // evicts one entry.
  void retire(int seq, std::vector<uint32_t> tokens, std::unique_ptr<Drafter> drafter);
  void evict(size_t i);
  uint32_t cached_blocks() const;
  uint32_t cached_draft_blocks() const;   // held by the cached sequences' drafters in the draft pool
  void update_kv_metrics();               // (mu_ held)

  std::shared_ptr<TargetModel> t_;
  EngineOptions o_;
  Options opts_;
  std::string draft_kind_;
  std::unique_ptr<GgufFile> draft_file_;
  std::unique_ptr<LlamaModel> draft_model_;
  std::unique_ptr<Recorder> rec_;
  std::unique_ptr<Arena> logits_arena_, logits_readback_arena_, draft_logits_arena_;
  Slice logits_, logits_host_;   // [parallel * (K + 1)][n_vocab]: the step's logits rows; [parallel] rows read back
  Slice draft_logits_;           // [parallel][draft n_vocab]: a batched draft step's rows
  std::unique_ptr<BatchedChoices> choices_;   // a step's token choices, and a batched draft step's
  std::vector<std::unique_ptr<Slot>> slots_;
  uint32_t reserved_ = 0, draft_reserved_ = 0;   // KV blocks reserved by the running requests
  // What this engine's target passes and batched draft steps cost (device time per step, by rows): the
  // measured costs a greedy sequence's drafts are priced with (DraftPolicy::share_passes). Steps with a
  // prompt chunk are left out (a chunk's rows cost more than decode rows).
  PassCostLine pass_costs_, draft_step_costs_;
  struct CachedSequence {
    int seq;
    std::vector<uint32_t> tokens;   // what its KV holds, in order
    uint64_t last_used;
    std::unique_ptr<Drafter> drafter;   // its request's, with a draft model's sequence (null: none, or taken)
  };
  std::vector<CachedSequence> cache_;
  uint64_t cache_clock_ = 0;

  mutable std::mutex mu_;   // guards queue_, metrics_, wake_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<BatchRequest>> queue_;
  std::deque<std::chrono::steady_clock::time_point> queued_at_;
  BatchMetrics metrics_;
  bool wake_ = false, closed_ = false;
};

}  // namespace vkspec
