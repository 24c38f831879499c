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
}

std::optional<PassCostLine::Fit> PassCostLine::fit() const {
  const size_t n = size();
  if (n < kMinSamples) return std::nullopt;
  std::array<double, kWindow * (kWindow - 1) / 2> slopes;
  size_t m = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j)
      if (rows_[i] != rows_[j]) slopes[m++] = (s_[j] - s_[i]) / (rows_[j] - rows_[i]);
  Fit f;
  f.slope_known = m > 0;
  f.rows = rows_[0];
  f.g = m ? std::max(0.0, lower_median(slopes.data(), m)) : 0.0;   // a row never makes a pass cheaper
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
  const double step = d ? d->at(b) : -1.0;
  return SharedCosts{t->at(b) / b, t->g, step >= 0 ? step / b : -1.0, d ? d->slope() : -1.0};
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
uint32_t DraftPolicy::best_k(double t_draft, double (DraftPolicy::*pass)(uint32_t) const, double switch_s,
                             double acceptance) const {
  const double a = std::min(acceptance >= 0 ? acceptance : alpha(), 0.999);
  uint32_t best = 0;
  double best_rate = 1.0 / (this->*pass)(1);
  for (uint32_t k = 1; k <= max_ && k + 1 <= kMaxPass; ++k) {
    const double tokens = (1 - std::pow(a, k + 1)) / (1 - a);
    const double rate = tokens / (switch_s + k * t_draft + (this->*pass)(k + 1));
    if (rate > best_rate) best = k, best_rate = rate;
  }
  return best;
}

uint32_t DraftPolicy::choose(bool free_drafts) const {
  if (timing_free_) {   // measured costs: a draft model's catch-up, a row per plain round (see the header)
    const double catch_up = costs_ && costs_->draft_row > 0 && !free_drafts ? plain_rounds_ * costs_->draft_row : 0.0;
    return best_k(free_drafts ? 0.0 : modeled_draft(), &DraftPolicy::modeled_pass, catch_up);
  }
  const double catch_up = plain_rounds_ > 0 && !free_drafts ? std::max(0.0, t_catch_up_.median()) : 0.0;
  return best_k(free_drafts ? 0.0 : draft_cost(), &DraftPolicy::pass_cost, catch_up);
}

uint32_t DraftPolicy::next_k(bool free_drafts) const {
  if (!adaptive_) return max_;
  // A probe finds out whether the drafter agrees again; pointless where the batch's measured costs say
  // drafting would not pay even if every draft were accepted (there the costs, not the drafter, decide,
  // and they are measured anew at every step).
  if (plain_rounds_ >= probe_every_ &&
      !(costs_ && best_k(free_drafts ? 0.0 : modeled_draft(), &DraftPolicy::modeled_pass, 0.0, 1.0) == 0))
    return 1;
  if (timing_free_) return choose(free_drafts);
  // A plain pass before choosing, and again once the last is old: a verify pass of K+1 tokens priced as a
  // plain step would make speculating always look worth it, and a plain cost measured while the machine
  // was busy would do the same.
  if (t_plain_.size() == 0 || since_plain_ >= kRefreshEvery) return 0;
  // Warm-up: K from the model and the acceptance seen so far, so that the timings that decide later rounds
  // are medians of several drafting rounds, not one cold one.
  if (t_draft_.size() < kWarmUp)
    return std::min(max_, std::max(1u, best_k(free_drafts ? 0.0 : modeled_draft(), &DraftPolicy::modeled_pass, 0.0)));
  return choose(free_drafts);
}

void DraftPolicy::observe(uint32_t drafted, uint32_t accepted, double draft_s, double pass_s, double catch_up_s) {
  if (drafted == 0) {
    if (pass_s >= 0) t_plain_.add(pass_s);
    plain_rounds_++;
    since_plain_ = 0;
    return;
  }
  const bool probe = plain_rounds_ >= probe_every_;
  plain_rounds_ = 0;
  since_plain_++;
  // The first round of each verify size is not timed: it runs pipeline variants for the first time (on
  // lavapipe they are compiled then) and its draft steps follow the drafter's catch-up cold.
  const uint32_t rows = drafted + 1;   // the verify pass
  if (rows <= kMaxPass && !std::exchange(size_seen_[rows], true)) draft_s = pass_s = catch_up_s = -1;
  if (pass_s >= 0 && rows <= kMaxPass) verify_[verify_seen_++ % kVerifyWindow] = {rows, pass_s};
  if (draft_s >= 0) t_draft_.add(draft_s / drafted);
  if (catch_up_s >= 0) t_catch_up_.add(catch_up_s);
  accepted_ = kDecay * accepted_ + accepted;
  rejected_ = kDecay * rejected_ + (accepted < drafted ? 1.0 : 0.0);
  // A probe that plain still beats: wait twice as long for the next. Drafting by choice: probe soon again
  // once it stops.
  probe_every_ = probe && choose(false) == 0 ? std::min(2 * probe_every_, kProbeMax) : kProbeEvery;
}

}  // namespace vkspec
