#pragma once
// Host side of the fused accept/reject kernel (shaders/spec_accept.comp): dense p and q rows in
// device memory, one dispatch, and two integers read back per trial.
// Two ways to fill the rows:
//   generation: the rows live in device memory; the draft's steps write q_i into q_rows() row i as they
//     draw (TokenChooser::record_choice; deterministic drafts have no rows: q is one-hot at the draft);
//     record_verify() is one fused dispatch in the round's command buffer: p_0..p_k from the target's
//     verify logits, then the accept/resample chain in the last workgroup. Only the drafts (token slots) and
//     {accepted, next} come back.
//   the statistical tests: set_row() writes rows the host computed, then run() (many trials at once).
// Invariant: rows are probability vectors over the whole vocabulary.
#include <memory>
#include <span>
#include <vector>

#include "runtime/device_sampler.h"
#include "runtime/kernels.h"
#include "runtime/sampler.h"

namespace vkspec {

class SpecAcceptor {
 public:
  // max_history: the longest context (plus drafts) the device transforms will see.
  SpecAcceptor(Context& ctx, Pipelines& pipelines, uint32_t n_vocab, uint32_t max_k, uint32_t max_trials = 1,
               uint32_t max_history = 8192);
  ~SpecAcceptor();

  uint32_t n_vocab() const { return n_vocab_; }
  float* p_row(uint32_t i);                 // target distribution after draft i-1 (i <= k)
  float* q_row(uint32_t i);                 // draft distribution that t_i was drawn from (i < k)
  uint32_t* tokens(uint32_t trial = 0);     // t_0 .. t_{k-1} of a trial
  // Writes a sparse distribution (or a one-hot at `token` when c is empty) as a dense row.
  void set_row(float* row, const Candidates& c, uint32_t token = 0);

  struct Outcome { uint32_t accepted, next; };
  // Runs the kernel for `trials` independent trials (seed + j for trial j) sharing the same p and q.
  std::vector<Outcome> run(uint32_t k, uint64_t seed, uint32_t position, uint32_t trials = 1);

  // Device-memory q rows [max_k][n_vocab], which the draft's steps fill.
  Slice q_rows() const { return q_dev_; }
  // Records the fused verify: p_0..p_k from the target's logits rows after `context` and each draft, then
  // accept/reject with the q rows in place; the drafts are token slots ({token, top probability} pairs, as
  // the draft steps wrote them) and their penalty history is copied from there on the device. Drafts after
  // the first i >= 1 whose top probability is below draft_p_min are not verified. Position = context.size().
  // one_hot_q: deterministic drafts (q one-hot at each draft, no rows); else q_rows().
  void record_verify(Recorder& r, const SamplingParams& p, const Slice& target_logits, std::span<const uint32_t> context,
                     const Slice& draft_slots, uint32_t k, float draft_p_min, bool one_hot_q);
  Outcome result() const;   // of the last record_verify, after its submission
  // Self-contained form with host drafts and the host-written q rows (set_row), leaving p in p_row(): one
  // submission (tests compare it with run() on the rows it left behind).
  Outcome verify(const SamplingParams& p, const Slice& target_logits, std::span<const uint32_t> context,
                 std::span<const uint32_t> drafts);
  DeviceSampler& device_sampler() { return *sampler_; }

 private:
  Context& ctx_;
  Pipelines& pipelines_;
  uint32_t n_vocab_, max_k_, max_trials_;
  std::unique_ptr<Arena> upload_, readback_;
  std::unique_ptr<Recorder> rec_;
  std::unique_ptr<DeviceSampler> sampler_;
  Slice p_, q_, tokens_, result_, counter_, draft_slots_;   // host-visible (set_row, run, verify)
  std::unique_ptr<Arena> device_;
  Slice p_dev_, q_dev_;                                      // generation's rows

  void record_fused(Recorder& r, const SamplingParams& p, const Slice& target_logits, std::span<const uint32_t> context,
                    const Slice& draft_slots, uint32_t k, float draft_p_min, const Slice& q, const Slice& p_out);

  void record_accept(uint32_t k, uint64_t seed, uint32_t position, uint32_t trials);
};

}  // namespace vkspec
