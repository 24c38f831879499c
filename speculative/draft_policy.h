#pragma once
// How many tokens to draft next round (--draft-policy adaptive), from what earlier rounds measured, so
// that speculation does not fall behind plain decoding when the drafter keeps missing.
// Model: each draft is accepted with probability alpha independently, so a round of K drafts yields
// E(K) = (1 - alpha^(K+1)) / (1 - alpha) tokens and costs K * t_draft + t_verify(K + 1); the next K
// maximizes E(K) / cost(K) over 0..draft_max, K = 0 being a plain decoding pass.
// Estimates are exponential moving averages over rounds; verify costs for pass sizes not yet seen are
// interpolated between seen ones, and the plain pass is measured (one round of K = 0) before any choice.
// After kProbeEvery plain rounds one draft is tried again, so a drafter that starts agreeing again is noticed.
// Sampled runs must not depend on timings: where a verify round ends decides which counter-based random
// numbers are used, so a seed reproduces its output only if the K sequence is a function of the seed.
// There (timing_free) the costs are fixed instead of measured: a draft costs `draft_cost` target steps
// (weight bytes, decoding being memory-bound) and a verify pass of n tokens 1 + kVerifyGrowth * (n - 1)
// steps (lavapipe measured 0.07-0.1 for the pycode target).
#include <array>
#include <cstdint>

namespace vkspec {

class DraftPolicy {
 public:
  static constexpr uint32_t kMaxPass = 16;     // the largest verify pass (LlamaModel::kMaxBatch)
  static constexpr uint32_t kProbeEvery = 8;

  static constexpr double kVerifyGrowth = 0.1;

  DraftPolicy(uint32_t draft_max, bool adaptive, bool timing_free = false, double draft_cost = 0.0)
      : max_(draft_max), adaptive_(adaptive), timing_free_(timing_free), draft_cost_(draft_cost) {
    t_pass_.fill(-1.0);
  }
  uint32_t next_k() const;
  // One round: `drafted` tokens proposed in draft_s seconds, `accepted` of them kept, and the target's
  // pass over drafted + 1 tokens (verify and accept) took pass_s seconds.
  void observe(uint32_t drafted, uint32_t accepted, double draft_s, double pass_s);
  double alpha() const { return accepted_ / (accepted_ + rejected_); }

 private:
  double pass_cost(uint32_t n) const;   // seconds for a target pass over n tokens (-1: nothing measured)
  uint32_t best_k(double t_draft, double (DraftPolicy::*pass)(uint32_t) const) const;
  double modeled_pass(uint32_t n) const { return 1.0 + kVerifyGrowth * (n - 1); }

  uint32_t max_;
  bool adaptive_, timing_free_;
  double draft_cost_;                        // timing_free: a draft in target decoding steps
  double accepted_ = 3.0, rejected_ = 1.0;   // decayed counts of accepted drafts and rejections (prior 0.75)
  double t_draft_ = -1.0;                    // seconds per drafted token
  std::array<double, kMaxPass + 1> t_pass_;  // seconds per target pass of n tokens
  uint32_t plain_rounds_ = 0;
};

}  // namespace vkspec
