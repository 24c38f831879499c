#include "speculative/draft_policy.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace vkspec {

namespace {
constexpr double kDecay = 0.9;   // weight of the past in the acceptance counts (~10 rounds of memory)
}  // namespace

void PassCostLine::add(double rows, double seconds) {
  const size_t i = added_++ % kWindow;
  rows_[i] = rows;
  s_[i] = seconds;
  const size_t n = size();
  if (n < kMinSamples) return;
  std::array<double, kWindow * (kWindow - 1) / 2> slopes;
  size_t m = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j)
      if (rows_[i] != rows_[j]) slopes[m++] = (s_[j] - s_[i]) / (rows_[j] - rows_[i]);
  if (m) slope_ = std::max(0.0, lower_median(slopes.data(), m));   // a row never makes a pass cheaper
}

std::optional<PassCostLine::Fit> PassCostLine::fit() const {
  const size_t n = size();
  if (n < kMinSamples) return std::nullopt;
  Fit f;
  f.slope_known = slope_ >= 0;
  f.rows = rows_[0];
  f.g = f.slope_known ? slope_ : 0.0;
  std::array<double, kWindow> a;
  for (size_t i = 0; i < n; ++i) a[i] = s_[i] - f.g * rows_[i];
  f.a = lower_median(a.data(), n);
  return f;
}

std::optional<SharedCosts> SharedCosts::measured(const PassCostLine& target, const PassCostLine& draft,
                                                 uint32_t sequences) {
  const double b = std::max(1u, sequences);
  const std::optional<PassCostLine::Fit> t = target.fit(), d = draft.fit();
  // a row's cost not seen yet: the constants decide
  if (!t || !t->slope_known || !(t->at(b) > 0)) return std::nullopt;
  return SharedCosts{t->at(b) / b, t->g, d ? d->at(1) : -1.0, d ? d->slope() : -1.0};
}

double DraftPolicy::modeled_drafts(uint32_t k) const {
  if (!costs_ || costs_->draft_step < 0) return k * draft_cost_ * shared_plain();
  const double row = costs_->draft_row >= 0 ? costs_->draft_row : costs_->draft_step;
  const uint32_t joined = std::min(k, costs_->joined_steps);
  return joined * row + (k - joined) * costs_->draft_step;
}

double DraftPolicy::catch_up_cost(bool free_drafts) const {
  if (free_drafts || plain_rounds_ == 0) return 0.0;
  if (!timing_free_) return std::max(0.0, t_catch_up_.median());
  return costs_ && costs_->draft_row > 0 ? plain_rounds_ * costs_->draft_row : 0.0;   // a row per plain round
}

double DraftPolicy::pass_cost(uint32_t n) const {
  const double plain = t_plain_.median();
  if (plain < 0 || n <= 1) return plain;
  const size_t m = std::min<size_t>(verify_seen_, kVerifyWindow);
  if (m == 0) return plain;   // nothing wider seen yet: priced as a plain pass (never cheaper)
  // slope: the median over recent verify passes of their cost above a plain pass, per extra token
  std::array<double, kVerifyWindow> slopes;
  for (size_t i = 0; i < m; ++i) slopes[i] = (verify_[i].s - plain) / double(verify_[i].n - 1);
  return plain + std::max(0.0, lower_median(slopes.data(), m)) * double(n - 1);
}

// switch_s: a one-time cost of drafting this round (the draft model's catch-up after plain rounds)
uint32_t DraftPolicy::best_k(Cost drafts, Cost pass, double switch_s, double acceptance) const {
  const double a = std::min(acceptance >= 0 ? acceptance : alpha(), 0.999);
  uint32_t best = 0;
  double best_rate = 1.0 / (this->*pass)(1);
  for (uint32_t k = 1; k <= max_ && k + 1 <= kMaxPass; ++k) {
    const double tokens = (1 - std::pow(a, k + 1)) / (1 - a);
    const double rate = tokens / (switch_s + (this->*drafts)(k) + (this->*pass)(k + 1));
    if (rate > best_rate) best = k, best_rate = rate;
  }
  return best;
}

uint32_t DraftPolicy::choose(bool free_drafts) const {
  if (timing_free_)
    return best_k(free_drafts ? &DraftPolicy::no_drafts : &DraftPolicy::modeled_drafts, &DraftPolicy::modeled_pass,
                  catch_up_cost(free_drafts));
  return best_k(free_drafts ? &DraftPolicy::no_drafts : &DraftPolicy::measured_drafts, &DraftPolicy::pass_cost,
                catch_up_cost(free_drafts));
}

uint32_t DraftPolicy::next_k(bool free_drafts) const {
  if (!adaptive_) return max_;
  // A probe finds out whether the drafter agrees again; pointless where the batch's measured costs say
  // drafting would not pay even if every draft were accepted, its catch-up included (there the costs, not
  // the drafter, decide, and they are measured anew at every step; the catch-up grows with the plain
  // rounds, so a sequence whose drafting cannot pay stops probing: on lavapipe the probes of a 4-stream
  // batch caught up on ~100 tokens each near the end of their requests).
  const Cost modeled = free_drafts ? &DraftPolicy::no_drafts : &DraftPolicy::modeled_drafts;
  if (plain_rounds_ >= probe_every_ &&
      !(costs_ && best_k(modeled, &DraftPolicy::modeled_pass, catch_up_cost(free_drafts), 1.0) == 0))
    return 1;
  if (timing_free_) return choose(free_drafts);
  // A plain pass before choosing, and again once the last is old: a verify pass of K+1 tokens priced as a
  // plain step would make speculating always look worth it, and a plain cost measured while the machine
  // was busy would do the same.
  if (t_plain_.size() == 0 || since_plain_ >= kRefreshEvery) return 0;
  // Warm-up: K from the model and the acceptance seen so far, so that the timings that decide later rounds
  // are medians of several drafting rounds, not one cold one.
  if (t_draft_.size() < kWarmUp)
    return std::min(max_, std::max(1u, best_k(modeled, &DraftPolicy::modeled_pass, 0.0)));
  return choose(free_drafts);
}

double DraftPolicy::node_value_min(uint32_t k) const {
  const double a = std::min(alpha(), 0.999);
  const double tokens = (1 - std::pow(a, k + 1)) / (1 - a);
  if (timing_free_ || t_plain_.size() == 0 || t_draft_.size() == 0)
    return (modeled_pass(k + 2) - modeled_pass(k + 1)) * tokens / (modeled_drafts(k) + modeled_pass(k + 1));
  return (pass_cost(k + 2) - pass_cost(k + 1)) * tokens / (measured_drafts(k) + pass_cost(k + 1));
}

void DraftPolicy::observe(uint32_t drafted, uint32_t accepted, double draft_s, double pass_s, double catch_up_s,
                          uint32_t verify_rows) {
  if (drafted == 0) {
    if (pass_s >= 0) t_plain_.add(pass_s);
    // A probe that the next round's choice, plain, says did not pay: wait twice as long for the next. (Its
    // own choice, not a hypothetical one here: in a batch it is priced with the next step's costs.)
    if (std::exchange(after_probe_, false)) probe_every_ = std::min(2 * probe_every_, kProbeMax);
    plain_rounds_++;
    since_plain_ = 0;
    return;
  }
  const bool probe = plain_rounds_ >= probe_every_;
  plain_rounds_ = 0;
  since_plain_++;
  // The first round of each verify size is not timed: it runs pipeline variants for the first time (on
  // lavapipe they are compiled then) and its draft steps follow the drafter's catch-up cold.
  const uint32_t rows = verify_rows ? verify_rows : drafted + 1;   // the verify pass
  if (rows <= kMaxPass && !std::exchange(size_seen_[rows], true)) draft_s = pass_s = catch_up_s = -1;
  if (pass_s >= 0 && rows <= kMaxPass) verify_[verify_seen_++ % kVerifyWindow] = {rows, pass_s};
  if (draft_s >= 0) t_draft_.add(draft_s / drafted);
  if (catch_up_s >= 0) t_catch_up_.add(catch_up_s);
  accepted_ = kDecay * accepted_ + accepted;
  rejected_ = kDecay * rejected_ + (accepted < drafted ? 1.0 : 0.0);
  // Drafting by choice: probe soon again once it stops.
  after_probe_ = probe;
  if (!probe) probe_every_ = kProbeEvery;
}

}  // namespace vkspec
