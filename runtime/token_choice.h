#pragma once
// How the next token is chosen after a logits row, decided in one place (choice_mode) for plain decoding
// (engine/engine.cpp) and speculation (speculative/), and where chosen tokens go: token slots, a small
// host-visible buffer of {token, aux} pairs that the next forward pass's embedding reads directly
// (TokenInput stride 2). A decode step is therefore forward -> choice -> slot, one submission, and the host
// only reads the slot back; a speculative round chains draft steps through slots 1..K the same way.
//
// Slots [0, kSlots): step inputs (slot 0: the last accepted token g; slots 1..K: drafts).
// Slots [kSlots, 2 kSlots): the target's own choices after each row of a verify pass.
#include <memory>
#include <span>

#include "constrain/token_constraint.h"
#include "runtime/device_sampler.h"
#include "runtime/model.h"
#include "runtime/token_tree.h"

namespace vkspec {

enum class ChoiceMode {
  Argmax,   // greedy without a repetition penalty: argmax.comp
  Device,   // sampling (any top-k/top-p/min-p/temperature/penalty), or greedy with a penalty (top-k 1):
            // sample_rows.comp. The host Sampler is only the tests' reference.
};
ChoiceMode choice_mode(const SamplingParams& p, uint32_t n_vocab);

class TokenChooser {
 public:
  static constexpr uint32_t kSlots = LlamaModel::kMaxBatch + 1;
  static constexpr uint32_t kVerifySlot = kSlots;   // first of the verify choices
  static constexpr uint32_t kSlotBytes = contract::TOKEN_SLOT_UINTS * 4;

  // max_history: the longest context (plus drafts) the penalty will see.
  TokenChooser(VulkanDevice& ctx, Pipelines& pipelines, uint32_t n_vocab, uint32_t max_history);

  // A new request: decides the mode. Constrained generation (p.constrained()) needs the request's
  // constraint, whose mask set_history writes before each choice (it must outlive the request).
  void start(const SamplingParams& p, const TokenConstraint* constraint = nullptr);
  ChoiceMode mode() const { return mode_; }
  bool greedy() const { return p_.greedy(); }
  const SamplingParams& params() const { return p_; }
  // What the device kernels run with: greedy with a penalty becomes top-k 1 at temperature 1.
  const SamplingParams& device_params() const { return device_p_; }

  const Slice& slots() const { return slots_; }
  Slice slot_range(uint32_t first, uint32_t n) const {   // slots first .. first + n - 1
    return slots_.sub(VkDeviceSize(first) * kSlotBytes, VkDeviceSize(n) * kSlotBytes);
  }
  TokenInput input(uint32_t first) const { return {slot_range(first, 2 * kSlots - first), contract::TOKEN_SLOT_UINTS}; }
  // The token chosen into `slot`; throws a clear error when it is not a token of the vocabulary, which is
  // how non-finite logits surface (argmax writes contract::NON_FINITE_TOKEN for a row holding NaN or Inf).
  uint32_t token(uint32_t slot) const {
    const uint32_t id = slots_.host<uint32_t>()[contract::TOKEN_SLOT_UINTS * slot];
    if (id >= n_vocab_) throw_non_finite(id);
    return id;
  }
  [[noreturn]] static void throw_non_finite(uint32_t id);
  float top_prob(uint32_t slot) const;
  // A rejection verdict's slot: the tree node its token was accepted at (0: the draw that ends the walk).
  uint32_t verdict_node(uint32_t slot) const { return slots_.host<uint32_t>()[contract::TOKEN_SLOT_UINTS * slot + 1]; }
  void set_token(uint32_t slot, uint32_t token);   // host-written, before the submission that reads it

  // The penalty history of this submission's choices: the context, written by the host (Device mode).
  // Returns the history length of a choice made right after the context.
  // Constrained: and the constraint's mask, for one choice after the tokens it has accepted.
  uint32_t set_history(std::span<const uint32_t> context) {
    if (constraint_) {
      constraint_->allowed(sampler_->mask_words());
      if (mask_allows_none(sampler_->mask_words()))
        throw Error("the grammar allows no token here: no token of the vocabulary continues the text it accepted");
    }
    return sampler_->set_history(device_p_, context);
  }
  // Constrained, with host-written drafts in slots 1..n: the masks of the verify rows after them (row 0's is
  // set_history's); returns how many leading drafts the constraint allows (all of them when unconstrained).
  uint32_t set_draft_masks(uint32_t n);
  // Appends the tokens of slots [first, first + n) to the history at `at`, on the device (Device mode with
  // a penalty: drafts chosen earlier in the same submission).
  void record_append_history(Recorder& r, uint32_t first, uint32_t n, uint32_t at);
  bool penalized() const { return p_.penalized(); }

  // Records the choice after each of `rows` logits rows into slots out_slot, out_slot + 1, ... Row r's penalty sees history_len + r tokens; its draw uses
  // counter position + r. top_prob: argmax also computes the top probability (for --draft-p-min).
  void record_choice(Recorder& r, Kernels& k, const Slice& logits, uint32_t rows, uint32_t out_slot,
                     uint32_t history_len, uint64_t position, bool top_prob = false);
  // The choice after each node of a token tree (logits row i: node i) into slots out_slot + i, node i's draw
  // at counter position + its depth; one history for every row (no penalty or mask: can_draft_tree).
  void record_tree_choices(Recorder& r, Kernels& k, const Slice& logits, const TokenTree& tree, uint32_t out_slot,
                           uint32_t history_len, uint64_t position);
  // The best token of one logits row but the one in slot `of_slot` (a draft's runner-up) into slot out_slot.
  void record_runner_up(Recorder& r, Kernels& k, const Slice& logits_row, uint32_t of_slot, uint32_t out_slot);
  // Device mode: the choice after one logits row into slot out_slot as a row of a batched record
  // (DeviceSampler::record_rows, with rows of other sequences), at history_len history tokens and counter
  // `position`: what record_choice(..., 1 row, ...) records alone.
  DeviceSampler::BatchRow batch_row(const Slice& logits, uint32_t out_slot, uint32_t history_len, uint64_t position);
  DeviceSampler& device_sampler() { return *sampler_; }

  // Rejection sampling (SamplingParams::spec_sampling; sampled requests): a draft's draw into slot 1..K
  // (record_choice, batch_row) takes noise of its own (position + contract::DRAFT_STREAM) and keeps its
  // probability row q; record_rejection_verify records the target's probability rows p after the verify pass's
  // `drafts` + 1 logits rows (with sample_rows' draws into the verify slots), then spec_accept.comp's verdict
  // over them: the verify slots hold the accepted drafts and the token after them (a residual or bonus draw,
  // never the rejected draft), which SpeculativeDecoder::finish walks as in the coupled mode. model_drafts:
  // the drafts are a draft model's (q rows), else host-written (q one-hot). p_min: keep_drafts' cut. tree:
  // the drafts are its nodes 1..drafts (siblings tried in turn), each verdict slot's node in its aux
  // (verdict_node); a draft model's j-th child of a node is its j-th independent draw there (its position +
  // j contract::DRAW_INDEX_STRIDE).
  bool rejection() const { return rejection_; }
  void record_rejection_verify(Recorder& r, Kernels& k, const Slice& logits, uint32_t drafts, uint32_t history_len,
                               uint64_t position, bool model_drafts, float p_min, const TokenTree* tree = nullptr);

 private:
  uint32_t n_vocab_;
  SamplingParams p_, device_p_;
  ChoiceMode mode_ = ChoiceMode::Argmax;
  const TokenConstraint* constraint_ = nullptr;
  std::vector<uint32_t> drafts_;   // set_draft_masks' copy of the slots
  std::unique_ptr<Arena> slots_arena_;
  std::unique_ptr<DeviceSampler> sampler_;
  Slice slots_;
  VulkanDevice& ctx_;
  bool rejection_ = false;
  // Rejection sampling's probability rows, allocated at its first use: q [kSlots - 1][V] (a draft per
  // slot 1..K), p [kSlots][V] (a verify pass's rows).
  std::unique_ptr<Arena> prob_arena_;
  Slice q_rows_, p_rows_;
  bool draws_draft(uint32_t slot) const { return rejection_ && slot >= 1 && slot < kSlots; }
  std::vector<DeviceSampler::BatchRow> tree_rows_;   // record_tree_choices' rows (kept: no allocation per round)
  Slice q_rows(uint32_t first_slot, uint32_t n);   // the q rows of draft slots first_slot ..
};

// The token choices after the logits rows of several sequences in one pass (a batched step, a batched draft
// step), recorded together: argmax rows in one argmax dispatch per run of consecutive logits rows (into
// scratch slots, then copied to each sequence's slot), sampled rows in one sample_rows dispatch, each with
// its own settings (DeviceSampler::record_rows). Each choice is what TokenChooser::record_choice gives for
// its row alone. Invariant: between two record()s, at most max_rows add()s, each argmax row taking its own
// scratch slot (runs never reuse one within a recording, so no copy races the next run's argmax).
class BatchedChoices {
 public:
  BatchedChoices(VulkanDevice& ctx, Pipelines& pipelines, uint32_t n_vocab, uint32_t max_rows);
  // record_choice(r, k, logits, 1, out_slot, history_len, position, top_prob) of `ch`, for
  // one [n_vocab] logits row; may record the argmax of the run before it.
  void add(Recorder& r, Kernels& k, TokenChooser& ch, const Slice& logits, uint32_t out_slot, uint32_t history_len,
           uint64_t position, bool top_prob = false);
  // Records the choices added since the last record(), then a barrier.
  void record(Recorder& r, Kernels& k);

 private:
  void record_argmax_run(Recorder& r, Kernels& k);

  uint32_t n_vocab_, max_rows_;
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<DeviceSampler> sampler_;   // records the sampled rows (each reads its own chooser's history)
  Slice scratch_slots_;                      // [max_rows] argmax token slots
  uint32_t added_ = 0;                       // rows since the last record()
  Slice run_logits_;                         // the pending argmax run: its consecutive logits rows,
  std::vector<Slice> run_out_;               // each row's destination slot
  uint32_t run_first_ = 0;                   // its first scratch slot
  bool run_top_prob_ = false;
  std::vector<DeviceSampler::BatchRow> sampled_;
};

// One decoding step in one submission: the forward pass over `in` (n tokens at the end of `seq`), then the
// choice of the token after them into slot 0, which the next step embeds (chooser.input(0)). `context`
// is everything before the chosen token (the penalty's history; its size is the draw's counter position).
// Returns the chosen token.
// gpu_s, when given, accumulates the step's device time (timestamps; nothing without them).
uint32_t decode_step(LlamaModel& m, int seq, TokenChooser& chooser, Recorder& rec, const TokenInput& in, uint32_t n,
                     std::span<const uint32_t> context, double* gpu_s = nullptr);
// The same, split: recorded and submitted without waiting; once rec.wait() says it is done, the choice is
// chooser.token(0) and rec.seconds_between(begin, end) its device time.
struct StepMarks {
  uint32_t begin, end;
};
StepMarks submit_decode_step(LlamaModel& m, int seq, TokenChooser& chooser, Recorder& rec, const TokenInput& in,
                             uint32_t n, std::span<const uint32_t> context);

}  // namespace vkspec
