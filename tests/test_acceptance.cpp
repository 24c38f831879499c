// The fused accept/reject kernel (shaders/spec_accept.comp) on constructed p and q over a small vocabulary:
// over 200,000 trials per case the emitted tokens follow the target's distributions exactly (chi-square),
// and the acceptance rate is sum_v min(p, q). Drafts t_i are drawn from q_i on the host, as a drafter would.
#include <cmath>
#include <random>

#include "speculative/acceptance.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {

constexpr uint32_t kVocab = 24, kTrials = 200000, kMaxK = 8;

using Dist = std::vector<double>;

Dist normalized(Dist d) {
  double s = 0;
  for (double x : d) s += x;
  for (double& x : d) x /= s;
  return d;
}

Dist random_dist(std::mt19937& rng, uint32_t lo, uint32_t hi) {   // support [lo, hi)
  Dist d(kVocab, 0.0);
  std::uniform_real_distribution<double> u(0.05, 1.0);
  for (uint32_t v = lo; v < hi; ++v) d[v] = std::pow(u(rng), 3.0);   // uneven masses
  return normalized(d);
}

// Upper critical value of chi-square with `df` degrees of freedom at significance ~1e-6
// (Wilson-Hilferty, z = 4.75). Every case runs with a fixed seed, so a pass or failure is reproducible.
double chi2_critical(int df) {
  const double z = 4.75, a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Pearson chi-square of observed counts against `expected` (probabilities); categories with expected count
// below 5 are pooled. Returns {statistic, degrees of freedom}.
std::pair<double, int> chi2(const std::vector<uint64_t>& counts, const Dist& expected) {
  uint64_t n = 0;
  for (auto c : counts) n += c;
  double stat = 0, pool_e = 0, pool_o = 0;
  int cats = 0;
  for (size_t v = 0; v < counts.size(); ++v) {
    const double e = expected[v] * double(n);
    if (e < 5) {
      pool_e += e;
      pool_o += double(counts[v]);
      continue;
    }
    stat += (counts[v] - e) * (counts[v] - e) / e;
    ++cats;
  }
  if (pool_e > 0) {
    if (pool_e >= 1e-9) stat += (pool_o - pool_e) * (pool_o - pool_e) / std::max(pool_e, 1e-9);
    else if (pool_o > 0) stat = INFINITY;   // mass where the target has none
    ++cats;
  }
  return {stat, std::max(cats - 1, 1)};
}

struct Case {
  std::string name;
  std::vector<Dist> p, q;   // p: K+1 rows, q: K rows
};

class AcceptanceTest : public VkTest {};

void run_case(const Case& c, uint64_t seed) {
  const uint32_t K = uint32_t(c.q.size());
  SCOPED_TRACE(c.name + " K=" + std::to_string(K));
  SpecAcceptor acc(gpu().ctx, gpu().pipelines, kVocab, kMaxK, kTrials);
  for (uint32_t i = 0; i <= K; ++i)
    for (uint32_t v = 0; v < kVocab; ++v) acc.p_row(i)[v] = float(c.p[i][v]);
  for (uint32_t i = 0; i < K; ++i)
    for (uint32_t v = 0; v < kVocab; ++v) acc.q_row(i)[v] = float(c.q[i][v]);
  std::mt19937 rng{uint32_t(seed)};
  std::vector<std::discrete_distribution<uint32_t>> draft;
  for (uint32_t i = 0; i < K; ++i) draft.emplace_back(c.q[i].begin(), c.q[i].end());
  for (uint32_t j = 0; j < kTrials; ++j)
    for (uint32_t i = 0; i < K; ++i) acc.tokens(j)[i] = draft[i](rng);
  const auto out = acc.run(K, seed, 100, kTrials);

  // emitted[j] counts the token emitted at offset j among trials that got that far.
  std::vector<std::vector<uint64_t>> emitted(K + 1, std::vector<uint64_t>(kVocab, 0));
  uint64_t first_accepted = 0;
  for (uint32_t j = 0; j < kTrials; ++j) {
    ASSERT_LE(out[j].accepted, K);
    ASSERT_LT(out[j].next, kVocab);
    for (uint32_t i = 0; i < out[j].accepted; ++i) emitted[i][acc.tokens(j)[i]]++;
    emitted[out[j].accepted][out[j].next]++;
    first_accepted += out[j].accepted > 0;
  }
  for (uint32_t i = 0; i <= K; ++i) {
    uint64_t n = 0;
    for (auto x : emitted[i]) n += x;
    if (n < 2000) continue;   // too few trials reach this offset for a meaningful test
    auto [stat, df] = chi2(emitted[i], c.p[i]);
    EXPECT_LT(stat, chi2_critical(df)) << "offset " << i << ": emitted tokens do not follow p_" << i << " (n=" << n
                                       << ", df=" << df << ")";
  }
  // P(t_0 accepted) = sum_v min(p_0, q_0): binomial, 5 sigma.
  double beta = 0;
  for (uint32_t v = 0; v < kVocab; ++v) beta += std::min(c.p[0][v], c.q[0][v]);
  beta = std::min(beta, 1.0);
  const double rate = double(first_accepted) / kTrials, sigma = std::sqrt(beta * (1 - beta) / kTrials);
  EXPECT_NEAR(rate, beta, 5 * sigma + 1e-6) << "acceptance rate of the first draft";
}

TEST_F(AcceptanceTest, EqualDistributionsAreAlwaysAccepted) {
  std::mt19937 rng(1);
  for (uint32_t K : {1u, 4u, 8u}) {
    Case c{"q == p", {}, {}};
    for (uint32_t i = 0; i <= K; ++i) c.p.push_back(random_dist(rng, 0, kVocab));
    c.q.assign(c.p.begin(), c.p.begin() + K);
    run_case(c, 10 + K);
  }
}

TEST_F(AcceptanceTest, DisjointSupportsAlwaysResampleFromP) {
  std::mt19937 rng(2);
  for (uint32_t K : {1u, 3u}) {
    Case c{"disjoint", {}, {}};
    for (uint32_t i = 0; i <= K; ++i) c.p.push_back(random_dist(rng, 0, kVocab / 2));
    for (uint32_t i = 0; i < K; ++i) c.q.push_back(random_dist(rng, kVocab / 2, kVocab));
    run_case(c, 20 + K);
  }
}

TEST_F(AcceptanceTest, DraftMassWhereTargetHasNone) {
  std::mt19937 rng(3);
  for (uint32_t K : {2u, 5u}) {
    Case c{"q covers more than p", {}, {}};
    for (uint32_t i = 0; i <= K; ++i) c.p.push_back(random_dist(rng, 4, 16));
    for (uint32_t i = 0; i < K; ++i) c.q.push_back(random_dist(rng, 0, kVocab));
    run_case(c, 30 + K);
  }
}

TEST_F(AcceptanceTest, RandomOverlappingDistributionsForEveryK) {
  std::mt19937 rng(4);
  for (uint32_t K = 1; K <= kMaxK; ++K) {
    Case c{"random overlap", {}, {}};
    for (uint32_t i = 0; i <= K; ++i) c.p.push_back(random_dist(rng, 0, kVocab));
    for (uint32_t i = 0; i < K; ++i) {
      // a draft close to the target (high acceptance, so late offsets get tested) mixed with noise
      Dist q = random_dist(rng, 0, kVocab);
      for (uint32_t v = 0; v < kVocab; ++v) q[v] = 0.8 * c.p[i][v] + 0.2 * q[v];
      c.q.push_back(normalized(q));
    }
    run_case(c, 40 + K);
  }
}

// The test has power: the emitted tokens of a disjoint case are nothing like q, and the statistic says so.
TEST(AcceptanceStatistics, ChiSquareRejectsAWrongDistribution) {
  std::mt19937 rng(5);
  Dist p = random_dist(rng, 0, kVocab), q = random_dist(rng, 0, kVocab);
  std::discrete_distribution<uint32_t> draw(q.begin(), q.end());
  std::vector<uint64_t> counts(kVocab, 0);
  for (int i = 0; i < 20000; ++i) counts[draw(rng)]++;
  auto [stat, df] = chi2(counts, p);
  EXPECT_GT(stat, chi2_critical(df));
  auto [stat_ok, df_ok] = chi2(counts, q);
  EXPECT_LT(stat_ok, chi2_critical(df_ok));
}

}  // namespace
}  // namespace vkspec::test
