#include "runtime/token_choice.h"

#include <algorithm>
#include <cstring>

namespace vkspec {

namespace {
// Greedy with a logit bias or penalties is the argmax of the adjusted row: the sampling kernel at top-k 1
// (ties by lower id, as argmax), whose draw is then certain.
SamplingParams device_form(const SamplingParams& p) {
  if (!p.greedy()) return p;
  SamplingParams d = p;
  d.temperature = 1.0f;
  d.top_k = 1;
  d.top_p = 1.0f;
  d.min_p = 0.0f;
  return d;
}
}  // namespace

ChoiceMode choice_mode(const SamplingParams& p, uint32_t n_vocab) {
  if (p.greedy() && !p.adjusts_logits()) return ChoiceMode::Argmax;
  if (!DeviceSampler::supports(device_form(p), n_vocab)) throw Error("internal: sampling parameters the device cannot run");
  return ChoiceMode::Device;
}

TokenChooser::TokenChooser(VulkanDevice& ctx, Pipelines& pipelines, uint32_t n_vocab, uint32_t max_history)
    : n_vocab_(n_vocab), ctx_(ctx) {
  slots_arena_ = std::make_unique<Arena>(ctx, MemoryKind::Readback, 4096);
  slots_ = slots_arena_->alloc(2 * kSlots * kSlotBytes, "token slots");
  if (!slots_.mapped) throw Error("internal: token slots are not host-visible");
  std::memset(slots_.mapped, 0, slots_.size);
  sampler_ = std::make_unique<DeviceSampler>(ctx, pipelines, n_vocab, kSlots, max_history + kSlots);
}

void TokenChooser::start(const SamplingParams& p, const TokenConstraint* constraint) {
  if (p.constrained() != (constraint != nullptr))
    throw Error("internal: constrained sampling without its constraint, or a constraint without it");
  constraint_ = constraint;
  p_ = p;
  device_p_ = device_form(p);
  mode_ = choice_mode(p, n_vocab_);
  rejection_ = mode_ == ChoiceMode::Device && !p.greedy() && p.spec_sampling == SpecSampling::Rejection;
}

Slice TokenChooser::q_rows(uint32_t first_slot, uint32_t n) {
  const VkDeviceSize row = VkDeviceSize(n_vocab_) * 4;
  if (!prob_arena_) {
    prob_arena_ = std::make_unique<Arena>(ctx_, MemoryKind::Device, (2 * kSlots - 1) * row + 4096);
    q_rows_ = prob_arena_->alloc((kSlots - 1) * row, "rejection sampling's draft probability rows");
    p_rows_ = prob_arena_->alloc(kSlots * row, "rejection sampling's target probability rows");
  }
  if (first_slot < 1 || first_slot + n > kSlots) throw Error("internal: q rows out of range");
  return q_rows_.sub((first_slot - 1) * row, n * row);
}

DeviceSampler::BatchRow TokenChooser::batch_row(const Slice& logits, uint32_t out_slot, uint32_t history_len,
                                                uint64_t position) {
  if (mode_ != ChoiceMode::Device) throw Error("internal: batch_row outside Device mode");
  const bool draft = draws_draft(out_slot);
  return sampler_->row(device_p_, logits, draft ? q_rows(out_slot, 1) : Slice{}, slot_range(out_slot, 1), history_len,
                       draft ? position + contract::DRAFT_STREAM : position);
}

void TokenChooser::record_rejection_verify(Recorder& r, Kernels& k, const Slice& logits, uint32_t drafts,
                                           uint32_t history_len, uint64_t position, bool model_drafts, float p_min,
                                           const TokenTree* tree) {
  if (!rejection_ || drafts == 0 || drafts >= kSlots) throw Error("internal: record_rejection_verify out of range");
  const uint32_t rows = drafts + 1;
  const VkDeviceSize row = VkDeviceSize(n_vocab_) * 4;
  const Slice q = q_rows(1, drafts), out = slot_range(kVerifySlot, rows);
  DeviceSampler::Rows j{logits.sub(0, rows * row), p_rows_.sub(0, rows * row), rows, history_len, position, &out};
  sampler_->record(r, device_p_, j);
  r.barrier();
  if (tree && tree->n != rows) throw Error("internal: a rejection tree's nodes are not its drafts");
  const std::array<uint32_t, 2> parents = tree ? tree->parent_nibbles() : std::array<uint32_t, 2>{};
  const contract::SpecAcceptPC pc{p_rows_.address, model_drafts ? q.address : 0, slots_.address, out.address,
                                  device_p_.seed, n_vocab_, drafts, uint32_t(position), tree ? 0.0f : p_min,
                                  tree ? 1u : 0u, parents[0], parents[1]};
  k.spec_accept(r, pc);
  r.barrier();
}

uint32_t TokenChooser::set_draft_masks(uint32_t n) {
  if (!constraint_ || n == 0) return n;
  drafts_.resize(n);
  for (uint32_t i = 0; i < n; ++i) drafts_[i] = token(i + 1);
  return constraint_->draft_masks(drafts_, [this](uint32_t row) { return sampler_->mask_words(row); });
}

float TokenChooser::top_prob(uint32_t slot) const {
  float f;
  std::memcpy(&f, slots_.host<uint32_t>() + contract::TOKEN_SLOT_UINTS * slot + 1, 4);
  return f;
}

void TokenChooser::set_token(uint32_t slot, uint32_t token) {
  if (token >= n_vocab_) throw Error("internal: token outside the vocabulary");
  slots_.host<uint32_t>()[contract::TOKEN_SLOT_UINTS * slot] = token;
  slots_.host<uint32_t>()[contract::TOKEN_SLOT_UINTS * slot + 1] = 0;
}

void TokenChooser::record_append_history(Recorder& r, uint32_t first, uint32_t n, uint32_t at) {
  if (mode_ != ChoiceMode::Device || !penalized() || n == 0) return;
  sampler_->record_append_history(r, slots_, first, n, at);
  r.barrier();
}

void TokenChooser::record_choice(Recorder& r, Kernels& k, const Slice& logits, uint32_t rows, uint32_t out_slot,
                                 uint32_t history_len, uint64_t position, bool top_prob) {
  if (out_slot + rows > 2 * kSlots || rows > kSlots) throw Error("internal: record_choice out of range");
  const Slice out = slot_range(out_slot, rows);
  const Slice rows_logits = logits.sub(0, VkDeviceSize(rows) * n_vocab_ * 4);
  if (mode_ == ChoiceMode::Argmax) {
    k.argmax(r, rows_logits, out, rows, n_vocab_, top_prob);
  } else {
    const bool draft = draws_draft(out_slot);   // rejection sampling: q rows, a draft's own noise
    DeviceSampler::Rows j{rows_logits, draft ? q_rows(out_slot, rows) : Slice{}, rows, history_len,
                          draft ? position + contract::DRAFT_STREAM : position, &out};
    sampler_->record(r, device_p_, j);
  }
  r.barrier();
}

void TokenChooser::record_tree_choices(Recorder& r, Kernels& k, const Slice& logits, const TokenTree& tree,
                                       uint32_t out_slot, uint32_t history_len, uint64_t position) {
  if (mode_ == ChoiceMode::Argmax) {   // the argmax of a row does not depend on its position
    record_choice(r, k, logits, tree.n, out_slot, history_len, position);
    return;
  }
  if (out_slot + tree.n > 2 * kSlots || draws_draft(out_slot)) throw Error("internal: record_tree_choices out of range");
  const VkDeviceSize row = VkDeviceSize(n_vocab_) * 4;
  std::vector<DeviceSampler::BatchRow>& rows = tree_rows_;
  rows.clear();
  for (uint32_t i = 0; i < tree.n; ++i)
    rows.push_back(sampler_->row(device_p_, logits.sub(i * row, row), Slice{}, slot_range(out_slot + i, 1), history_len,
                                 position + tree.depth[i]));
  sampler_->record_rows(r, rows);
  r.barrier();
}

void TokenChooser::record_runner_up(Recorder& r, Kernels& k, const Slice& logits_row, uint32_t of_slot,
                                    uint32_t out_slot) {
  k.argmax(r, logits_row.sub(0, VkDeviceSize(n_vocab_) * 4), slot_range(out_slot, 1), 1, n_vocab_, false,
           slot_range(of_slot, 1));
  r.barrier();
}

BatchedChoices::BatchedChoices(VulkanDevice& ctx, Pipelines& pipelines, uint32_t n_vocab, uint32_t max_rows)
    : n_vocab_(n_vocab), max_rows_(max_rows) {
  arena_ = std::make_unique<Arena>(ctx, MemoryKind::Device, VkDeviceSize(max_rows) * TokenChooser::kSlotBytes + 4096);
  scratch_slots_ = arena_->alloc(VkDeviceSize(max_rows) * TokenChooser::kSlotBytes, "batched argmax token slots");
  // a submission records a step's choices and a round's draft steps: up to kMaxBatch + 1 record()s
  sampler_ = std::make_unique<DeviceSampler>(ctx, pipelines, n_vocab, max_rows, 0, 0, true,
                                             (LlamaModel::kMaxBatch + 1) * max_rows);
  run_out_.reserve(max_rows);
  sampled_.reserve(max_rows);
}

void BatchedChoices::add(Recorder& r, Kernels& k, TokenChooser& ch, const Slice& logits, uint32_t out_slot,
                         uint32_t history_len, uint64_t position, bool top_prob) {
  const VkDeviceSize row = VkDeviceSize(n_vocab_) * 4;
  if (added_ == max_rows_ || logits.size < row) throw Error("internal: BatchedChoices::add out of range");
  ++added_;
  if (ch.mode() == ChoiceMode::Device) {
    sampled_.push_back(ch.batch_row(logits.sub(0, row), out_slot, history_len, position));
    return;
  }
  // a run is one slice of consecutive rows, widened row by row: the next row must start where the run ends,
  // in the same buffer and texel view (a row past its block's texel range has none, and the widened slice
  // would otherwise claim a view that does not reach it)
  const bool follows = !run_out_.empty() && logits.buffer == run_logits_.buffer &&
                       logits.texels == run_logits_.texels &&
                       logits.offset == run_logits_.offset + run_logits_.size && top_prob == run_top_prob_;
  if (!follows) {
    record_argmax_run(r, k);
    run_logits_ = logits.sub(0, 0);
    run_top_prob_ = top_prob;
  }
  run_logits_.size += row;
  run_out_.push_back(ch.slot_range(out_slot, 1));
}

void BatchedChoices::record_argmax_run(Recorder& r, Kernels& k) {
  if (run_out_.empty()) return;
  const uint32_t n = uint32_t(run_out_.size());
  const Slice slots = scratch_slots_.sub(VkDeviceSize(run_first_) * TokenChooser::kSlotBytes,
                                         VkDeviceSize(n) * TokenChooser::kSlotBytes);
  k.argmax(r, run_logits_, slots, n, n_vocab_, run_top_prob_);
  r.barrier();
  for (uint32_t i = 0; i < n; ++i)
    r.copy(slots.sub(VkDeviceSize(i) * TokenChooser::kSlotBytes, TokenChooser::kSlotBytes), run_out_[i]);
  run_first_ += n;
  run_out_.clear();
}

void BatchedChoices::record(Recorder& r, Kernels& k) {
  record_argmax_run(r, k);
  if (!sampled_.empty()) {
    r.barrier();   // what the rows' sampling rewrites in place (penalized logits) may have been copied out
    sampler_->record_rows(r, sampled_);
    sampled_.clear();
  }
  r.barrier();
  added_ = 0;
  run_first_ = 0;
}

void TokenChooser::throw_non_finite(uint32_t id) {
  throw Error(id == contract::NON_FINITE_TOKEN
                  ? "the model produced non-finite logits (NaN or infinity): its weights or the input are broken"
                  : "no valid token was chosen (id " + std::to_string(id) +
                        " is outside the vocabulary): the model produced non-finite logits or probabilities");
}

StepMarks submit_decode_step(LlamaModel& m, int seq, TokenChooser& chooser, Recorder& rec, const TokenInput& in,
                             uint32_t n, std::span<const uint32_t> context) {
  rec.begin();
  const uint32_t m0 = rec.mark();
  m.record_forward(rec, seq, in, n, Logits::Last);
  const uint32_t history_len = chooser.mode() == ChoiceMode::Device ? chooser.set_history(context) : 0;
  chooser.record_choice(rec, m.kernels(), m.logits_rows(), 1, 0, history_len, context.size());
  const uint32_t m1 = rec.mark();
  rec.submit();
  return {m0, m1};
}

uint32_t decode_step(LlamaModel& m, int seq, TokenChooser& chooser, Recorder& rec, const TokenInput& in, uint32_t n,
                     std::span<const uint32_t> context, double* gpu_s) {
  const StepMarks marks = submit_decode_step(m, seq, chooser, rec, in, n, context);
  rec.wait(UINT64_MAX);
  if (gpu_s) *gpu_s += std::max(0.0, rec.seconds_between(marks.begin, marks.end));
  return chooser.token(0);
}

}  // namespace vkspec
