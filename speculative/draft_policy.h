#pragma once
// How many tokens to draft next round (--draft-policy adaptive), from what earlier rounds measured, so
// that speculation does not fall behind plain decoding when the drafter keeps missing.
// Model: each draft is accepted with probability alpha independently, so a round of K drafts yields
// E(K) = (1 - alpha^(K+1)) / (1 - alpha) tokens and costs K * t_draft + t_pass(K + 1); the next K
// maximizes E(K) / cost(K) over 0..draft_max, K = 0 being a plain decoding pass.
// Costs: t_pass(n) = t_plain + slope * (n - 1), one line for every pass size, so that a size seen once long
// ago is priced from what recent passes of any size cost (a table per size goes stale). Each input is the
// median of its recent samples, not a moving average: a pipeline created at its first dispatch or a stall of
// a shared machine gives one outlier, which must not steer many rounds. t_plain is measured by a plain round
// before any choice and again when the last one is kRefreshEvery rounds old.
// The first kWarmUp drafting rounds are priced by the timing-free model below (their K is at least 1), and
// the first round of each verify size gives no timings (only its acceptance): their timings include cold
// caches and first dispatches, and one such round deciding alone sends the policy to plain rounds that it
// leaves only at the next probe.
// After plain rounds a draft model must first catch up on the tokens it has not seen (a pass of its own):
// the first drafting round after plain ones is charged that measured cost, so the policy does not flip
// between plain and drafting near break-even, paying a catch-up at each flip. After probe_every_ plain rounds
// one draft is tried anyway, so that a drafter that starts agreeing again is noticed; a probe followed by a
// plain round doubles the wait before the next (kProbeEvery up to kProbeMax), bounding what probes cost
// where drafts keep missing.
// Without timestamps, or where a sequence's own costs cannot be measured (a batch's shared passes), the
// costs are fixed instead (timing_free): a draft costs `draft_cost` target steps (weight bytes, decoding
// being memory-bound) and a verify pass of n tokens 1 + kVerifyGrowth * (n - 1) steps. Drafts that cost no
// draft step (prompt lookups: next_k(true)) are priced by their verify pass alone, with no catch-up.
// In a batch (engine/batch_step.cpp) `sequences` share each pass and each batched draft step: the
// timing-free model prices a round at the sequence's share of the plain pass, (1 + g (b - 1)) / b for b
// sequences and g = kVerifyGrowth, plus g for each of its own drafts' rows, and a draft step at that share of
// its cost, since with more sequences drafts pay less. Only for greedy sequences (share_passes): a sampled
// one's K must not depend on what else is in the batch, or its tokens would. A greedy sequence's tokens do
// not depend on K at all, so once the engine has measured its passes (PassCostLine, SharedCosts: device time
// by rows, at the batch's own size) it is priced with those costs instead of the constants. A draft step is
// priced at what it adds to the batch's step: a whole draft step of one row where no other sequence's drafts
// run that step, a row where they do (a 1/b share would make drafts look cheap to sequences that then draft
// alone, each growing the step by a whole draft step). After plain rounds the draft model's catch-up is
// priced per plain round at the draft line's slope, the batch's form of the switching cost above. A greedy
// batch sequence is not probed where these costs say drafting would lose even if every draft were accepted.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace vkspec {

// --draft-policy: always K drafts (Fixed), or K in 0..K from measured acceptance and costs (Adaptive).
enum class DraftLengthPolicy : uint8_t { Fixed, Adaptive };

// The middle of v[0..n) (n > 0), the lower one of an even count: slow outliers (a cold first run, a stalled
// machine) are the high values. Reorders v.
inline double lower_median(double* v, size_t n) {
  std::nth_element(v, v + (n - 1) / 2, v + n);
  return v[(n - 1) / 2];
}

// The median of the last N values added (N odd; lower_median while fewer). Invariant: size() <= N.
template <size_t N>
class RecentMedian {
  static_assert(N % 2 == 1, "an odd window has one middle value");

 public:
  void add(double x) { v_[added_++ % N] = x; }
  size_t size() const { return added_ < N ? size_t(added_) : N; }
  double median() const {   // of the values held; -1 when none
    const size_t n = size();
    if (n == 0) return -1.0;
    std::array<double, N> v = v_;
    return lower_median(v.data(), n);
  }
 private:
  std::array<double, N> v_{};
  uint64_t added_ = 0;
};

// A pass's cost as a line over its rows, t(n) = a + g n (seconds), fitted to the last kWindow samples by
// Theil-Sen: the slope is the median of the pairwise slopes, the intercept the median of t - g n, so that a
// few stalled or cold passes move neither. Invariant: size() <= kWindow.
// A batch's steps are mostly of one row count (its decoding sequences), so the slope comes from the few
// others (sequences that start, end or draft): a short window lets one of them set it alone, so the window
// holds enough samples (31) to hold several. When the window
// holds one row count only (a steady batch), the last slope fitted stands: unknown, a batch's greedy
// sequences fall back to the constants, which say drafting pays.
class PassCostLine {
 public:
  static constexpr size_t kWindow = 31, kMinSamples = 5;
  void add(double rows, double seconds);
  size_t size() const { return added_ < kWindow ? size_t(added_) : kWindow; }
  struct Fit {
    double a = 0, g = 0;        // t(n) = a + g n
    bool slope_known = false;   // false: every sample ever of one row count, `rows` (g = 0, a their median)
    double rows = 0;
    // The line at n rows, or -1 where unknown: all samples of one row count and n another (a line needs
    // two counts; the one count's median is known).
    double at(double n) const { return slope_known || n == rows ? a + g * n : -1.0; }
    double slope() const { return slope_known ? g : -1.0; }   // seconds per row, >= 0; -1: unknown
  };
  std::optional<Fit> fit() const;   // nullopt: fewer than kMinSamples samples
  double at(double rows) const {   // -1 while unknown
    const std::optional<Fit> f = fit();
    return f ? f->at(rows) : -1.0;
  }
 private:
  std::array<double, kWindow> rows_{}, s_{};
  uint64_t added_ = 0;
  double slope_ = -1.0;   // the last slope fitted (< 0: never two row counts in kMinSamples samples or more)
};

// A batched pass's measured costs for pricing one greedy sequence's round among b sequences (share_passes),
// in seconds, at the batch's own size (a line fitted over passes of b rows and more is not extrapolated to
// one row): `plain_share`, its share of a pass of b rows, t(b) / b; `row`, each of its own draft rows, the
// line's slope. A draft step costs the whole batch what it adds to the step: `draft_step`, a step of one row
// (the draft line at one row: its fixed part and the row), when this sequence's drafts run more steps than
// the other sequences' drafts of this step (`joined_steps`, set by the engine per sequence); `draft_row`, the
// line's slope, for each step it joins, and for each token its draft model catches up on after plain rounds.
// Both < 0 while unknown (no draft step measured, as in a batch whose drafts are all host lookups: then the
// constant draft cost times plain_share; draft_row alone unknown: every step at draft_step).
struct SharedCosts {
  double plain_share = 0.0, row = 0.0, draft_step = -1.0, draft_row = -1.0;
  uint32_t joined_steps = 0;
  // From lines fitted to a batch's target passes and draft steps; nullopt while the target's line has no
  // slope (a row's cost not seen yet).
  static std::optional<SharedCosts> measured(const PassCostLine& target, const PassCostLine& draft, uint32_t sequences);
};

class DraftPolicy {
 public:
  static constexpr uint32_t kMaxPass = 16;     // the largest verify pass (LlamaModel::kMaxBatch)
  static constexpr uint32_t kProbeEvery = 8, kProbeMax = 64;
  static constexpr uint32_t kRefreshEvery = 32;
  static constexpr uint32_t kWarmUp = 3;   // drafting rounds priced by the model before timings are trusted

  static constexpr double kVerifyGrowth = 0.1;

  DraftPolicy(uint32_t draft_max, bool adaptive, bool timing_free = false, double draft_cost = 0.0)
      : max_(draft_max), adaptive_(adaptive), timing_free_(timing_free), draft_cost_(draft_cost) {}
  // free_drafts: the next round's drafts cost no draft steps (host lookups), so only the verify pass prices K
  uint32_t next_k(bool free_drafts = false) const;
  // The number of sequences whose rows share the next passes (>= 1) and, when measured, what those passes
  // cost (else the timing-free constants; see the top).
  void share_passes(uint32_t sequences, const std::optional<SharedCosts>& costs = std::nullopt) {
    sharing_ = std::max(1u, sequences);
    costs_ = costs;
  }
  // One round: `drafted` tokens proposed in draft_s seconds, `accepted` of them kept, and the target's
  // pass over drafted + 1 tokens (verify and accept) took pass_s seconds; the drafter's catch-up on unseen
  // context before its steps took catch_up_s (-1: none, or not timed). Times < 0 are not measurements.
  // verify_rows: the pass's rows, where they are not drafted + 1 (a tree's nodes, priced as the chain of its
  // depth, `drafted`).
  void observe(uint32_t drafted, uint32_t accepted, double draft_s, double pass_s, double catch_up_s = -1,
               uint32_t verify_rows = 0);
  double alpha() const { return accepted_ / (accepted_ + rejected_); }
  // A draft model's tree: whether a runner-up was the target's choice where its draw was not, and how often
  // that is (decayed counts as alpha's; prior 0.5).
  void observe_runner_up(bool accepted) {
    runner_up_accepted_ = kRankDecay * runner_up_accepted_ + accepted;
    runner_up_rejected_ = kRankDecay * runner_up_rejected_ + !accepted;
  }
  double runner_up_rate() const { return runner_up_accepted_ / (runner_up_accepted_ + runner_up_rejected_); }
  // The least probability of being reached that pays for a tree node's verify row: the row's cost (the
  // measured passes' slope, else kVerifyGrowth steps) in the time a round of k drafts takes to yield a token.
  double node_value_min(uint32_t k) const;
  // The measured cost model (seconds; -1 while unmeasured): a target pass over n tokens, a draft step.
  double pass_cost(uint32_t n) const;
  double draft_cost() const { return t_draft_.median(); }

 private:
  struct Pass {
    uint32_t n;
    double s;
  };
  uint32_t choose(bool free_drafts) const;   // the K with the best expected rate (no probe, no refresh)
  // acceptance: the alpha to price with (< 0: the measured one)
  // drafts(k): what k draft steps cost; pass(n): a pass over n rows of this sequence
  using Cost = double (DraftPolicy::*)(uint32_t) const;
  uint32_t best_k(Cost drafts, Cost pass, double switch_s, double acceptance = -1.0) const;
  double no_drafts(uint32_t) const { return 0.0; }   // host lookups
  double measured_drafts(uint32_t k) const { return k * draft_cost(); }
  // The timing-free model (see the top), with measured costs in seconds, else in plain decoding steps (only
  // their ratios matter)
  double shared_plain() const {
    return costs_ ? costs_->plain_share : (1.0 + kVerifyGrowth * (sharing_ - 1)) / sharing_;
  }
  double modeled_pass(uint32_t n) const { return shared_plain() + (costs_ ? costs_->row : kVerifyGrowth) * (n - 1); }
  double modeled_drafts(uint32_t k) const;
  double catch_up_cost(bool free_drafts) const;   // a draft model's catch-up after plain rounds (seconds)

  uint32_t max_;
  bool adaptive_, timing_free_;
  double draft_cost_;                        // timing_free and warm-up: a draft in target decoding steps
  uint32_t sharing_ = 1;                     // sequences sharing the passes (share_passes)
  std::optional<SharedCosts> costs_;         // their measured costs (share_passes)
  double accepted_ = 3.0, rejected_ = 1.0;   // decayed counts of accepted drafts and rejections (prior 0.75)
  static constexpr double kRankDecay = 0.95;
  double runner_up_accepted_ = 1.0, runner_up_rejected_ = 1.0;   // observe_runner_up's
  RecentMedian<9> t_plain_;                  // seconds per one-token pass
  RecentMedian<15> t_draft_;                 // seconds per drafted token
  RecentMedian<9> t_catch_up_;               // seconds per catch-up pass
  static constexpr size_t kVerifyWindow = 15;
  std::array<Pass, kVerifyWindow> verify_{};  // the last verify passes (n > 1), for the slope
  uint32_t verify_seen_ = 0;
  std::array<bool, kMaxPass + 1> size_seen_{};   // verify sizes observed (their first round is not timed)
  uint32_t plain_rounds_ = 0;                // consecutive plain rounds (probe after probe_every_)
  uint32_t probe_every_ = kProbeEvery;
  bool after_probe_ = false;                 // the last round was a probe
  uint32_t since_plain_ = 0;                 // rounds since the last plain one (refresh after kRefreshEvery)
};

}  // namespace vkspec
