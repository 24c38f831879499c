#pragma once
// Goodness of fit for the distribution tests: Pearson's chi-square of observed counts against a distribution
// (cells expected fewer than kMinExpected times pooled into one), its critical value at significance ~1e-6
// (Wilson-Hilferty, z = 4.75), and a binomial z-score.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>

namespace vkspec::test {

struct ChiSquare {
  double stat = 0, critical = 0;
  uint32_t df = 0;
  bool fits() const { return stat < critical; }
};

inline double chi_square_critical(double df) {
  const double z = 4.75;
  return df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
}

// counts: how often each value was seen in n trials; probs: the distribution they should follow. A value seen
// where probs has no mass makes the statistic infinite.
template <class Key>
ChiSquare chi_square(const std::map<Key, uint64_t>& counts, const std::map<Key, double>& probs, uint64_t n) {
  constexpr double kMinExpected = 5;
  ChiSquare c;
  double pooled_e = 0, pooled_o = 0;
  uint32_t cells = 0;
  for (const auto& [key, p] : probs) {
    const auto it = counts.find(key);
    const double e = p * double(n), o = it == counts.end() ? 0.0 : double(it->second);
    if (e < kMinExpected) {
      pooled_e += e, pooled_o += o;
      continue;
    }
    c.stat += (o - e) * (o - e) / e;
    ++cells;
  }
  for (const auto& [key, o] : counts)
    if (!probs.count(key)) pooled_o += double(o);
  if (pooled_e > 0) {
    c.stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    ++cells;
  } else if (pooled_o > 0) {
    c.stat = std::numeric_limits<double>::infinity();
  }
  c.df = cells > 1 ? cells - 1 : 1;
  c.critical = chi_square_critical(c.df);
  return c;
}

// How many standard deviations `hits` of n trials lie from n p (infinite when p is 0 or 1 and they differ).
inline double binomial_z(uint64_t hits, uint64_t n, double p) {
  p = std::clamp(p, 0.0, 1.0);   // (a sum of float probabilities may pass 1)
  const double sd = std::sqrt(double(n) * p * (1 - p)), d = double(hits) - double(n) * p;
  if (sd == 0) return d == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::abs(d) / sd;
}

}  // namespace vkspec::test
