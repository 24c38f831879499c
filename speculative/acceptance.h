#pragma once
// Host side of the fused accept/reject kernel (shaders/spec_accept.comp): dense p and q rows in
// host-visible device memory, one dispatch, and two integers read back per trial.
// Invariant: rows written through p_row()/q_row() are probability vectors over the whole vocabulary.
#include <memory>
#include <span>
#include <vector>

#include "runtime/kernels.h"
#include "runtime/sampler.h"

namespace vkspec {

class SpecAcceptor {
 public:
  SpecAcceptor(Context& ctx, Pipelines& pipelines, uint32_t n_vocab, uint32_t max_k, uint32_t max_trials = 1);
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

 private:
  Context& ctx_;
  Pipelines& pipelines_;
  uint32_t n_vocab_, max_k_, max_trials_;
  std::unique_ptr<Arena> upload_, readback_;
  std::unique_ptr<Recorder> rec_;
  Slice p_, q_, tokens_, result_;
};

}  // namespace vkspec
