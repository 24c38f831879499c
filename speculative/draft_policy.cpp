#include "speculative/draft_policy.h"

#include <algorithm>
#include <cmath>

namespace vkspec {

namespace {
constexpr double kDecay = 0.9;   // weight of the past in every moving average (~10 rounds of memory)
double ema(double old, double x) { return old < 0 ? x : kDecay * old + (1 - kDecay) * x; }
}  // namespace

double DraftPolicy::pass_cost(uint32_t n) const {
  uint32_t lo = n, hi = n;
  while (lo > 0 && t_pass_[lo] < 0) --lo;
  while (hi <= kMaxPass && t_pass_[hi] < 0) ++hi;
  const bool has_lo = lo > 0, has_hi = hi <= kMaxPass;
  if (has_lo && has_hi && lo != hi)
    return t_pass_[lo] + (t_pass_[hi] - t_pass_[lo]) * double(n - lo) / double(hi - lo);
  return has_lo ? t_pass_[lo] : has_hi ? t_pass_[hi] : -1.0;
}

uint32_t DraftPolicy::best_k(double t_draft, double (DraftPolicy::*pass)(uint32_t) const) const {
  if (plain_rounds_ >= kProbeEvery) return 1;
  const double a = std::min(alpha(), 0.999);
  uint32_t best = 0;
  double best_rate = 1.0 / (this->*pass)(1);
  for (uint32_t k = 1; k <= max_ && k + 1 <= kMaxPass; ++k) {
    const double tokens = (1 - std::pow(a, k + 1)) / (1 - a);
    const double rate = tokens / (k * t_draft + (this->*pass)(k + 1));
    if (rate > best_rate) best = k, best_rate = rate;
  }
  return best;
}

uint32_t DraftPolicy::next_k() const {
  if (!adaptive_) return max_;
  if (timing_free_) return best_k(draft_cost_, &DraftPolicy::modeled_pass);
  if (t_draft_ < 0) return max_;   // nothing measured yet
  // One plain pass before choosing: until then the nearest measured pass would stand in for its cost, and
  // a verify pass of K+1 tokens priced as a plain step makes speculating always look worth it.
  if (t_pass_[1] < 0) return 0;
  return best_k(t_draft_, &DraftPolicy::pass_cost);
}

void DraftPolicy::observe(uint32_t drafted, uint32_t accepted, double draft_s, double pass_s) {
  if (drafted + 1 <= kMaxPass) t_pass_[drafted + 1] = ema(t_pass_[drafted + 1], pass_s);
  plain_rounds_ = drafted == 0 ? plain_rounds_ + 1 : 0;
  if (drafted == 0) return;
  t_draft_ = ema(t_draft_, draft_s / drafted);
  accepted_ = kDecay * accepted_ + accepted;
  rejected_ = kDecay * rejected_ + (accepted < drafted ? 1.0 : 0.0);
}

}  // namespace vkspec
