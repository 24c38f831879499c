// Host sampling transforms against hand-computed distributions, and seeded reproducibility.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "runtime/sampler.h"

namespace vkspec {
namespace {

std::map<uint32_t, double> as_map(const Candidates& c) {
  std::map<uint32_t, double> m;
  for (size_t i = 0; i < c.ids.size(); ++i) m[c.ids[i]] = c.probs[i];
  return m;
}

const std::vector<float> kLogits = {2.0f, 1.0f, 0.0f, -1.0f, 3.0f};   // softmax order: 4, 0, 1, 2, 3

TEST(Sampler, TopKTopPMinPAndTemperature) {
  SamplingParams p;
  p.top_k = 2; p.top_p = 1; p.min_p = 0; p.temperature = 1;
  auto m = as_map(Sampler(p).distribution(kLogits, {}));
  ASSERT_EQ(m.size(), 2u);
  EXPECT_NEAR(m[4], std::exp(3.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);   // probabilities are stored as f32

  // top-p 0.9 over the full softmax: p = .6364 .2341 .0861 .0317 .0117 -> keeps 4, 0, 1 (cum .9566)
  p.top_k = 0; p.top_p = 0.9f;
  m = as_map(Sampler(p).distribution(kLogits, {}));
  EXPECT_EQ(m.size(), 3u);
  EXPECT_TRUE(m.count(1));

  // min-p 0.2: keep tokens with p >= 0.2 * p_max: 4 (1.0), 0 (.368); drop 1 (.135)
  p.top_p = 1; p.min_p = 0.2f;
  m = as_map(Sampler(p).distribution(kLogits, {}));
  EXPECT_EQ(m.size(), 2u);

  // temperature 0.5 sharpens: p(4)/p(0) = e^{(3-2)/0.5}
  p.min_p = 0; p.temperature = 0.5f;
  m = as_map(Sampler(p).distribution(kLogits, {}));
  EXPECT_NEAR(m[4] / m[0], std::exp(2.0), 1e-6);
}

TEST(Sampler, RepetitionPenaltyAsLlamaCpp) {
  SamplingParams p;
  p.top_k = 0; p.top_p = 1; p.min_p = 0; p.temperature = 1; p.repeat_penalty = 2.0f;
  std::vector<uint32_t> history = {4, 3, 4};
  auto m = as_map(Sampler(p).distribution(kLogits, history));
  // logit 3 -> 1.5 (divided), logit -1 -> -2 (multiplied), once per distinct token
  const double z = std::exp(2.0) + std::exp(1.0) + std::exp(0.0) + std::exp(-2.0) + std::exp(1.5);
  EXPECT_NEAR(m[4], std::exp(1.5) / z, 1e-6);   // probabilities are stored as f32
  EXPECT_NEAR(m[3], std::exp(-2.0) / z, 1e-6);   // probabilities are stored as f32
  p.temperature = 0;   // greedy still applies the penalty: token 0 (2.0) now beats token 4 (1.5)
  EXPECT_EQ(Sampler(p).sample(kLogits, history, 0), 0u);
}

TEST(Sampler, SeededDrawsAreReproducibleAndFollowTheDistribution) {
  SamplingParams p;
  p.top_k = 0; p.top_p = 1; p.min_p = 0; p.temperature = 1; p.seed = 42;
  Sampler s(p);
  auto dist = as_map(s.distribution(kLogits, {}));
  std::map<uint32_t, int> counts;
  const int N = 200000;
  for (int i = 0; i < N; ++i) {
    uint32_t t = s.sample(kLogits, {}, uint64_t(i));
    EXPECT_EQ(t, s.sample(kLogits, {}, uint64_t(i)));   // same (seed, position) -> same token
    counts[t]++;
  }
  // chi-square with 4 degrees of freedom; 18.47 is the 0.999 quantile
  double chi2 = 0;
  for (auto& [id, p_id] : dist) chi2 += std::pow(counts[id] - N * p_id, 2) / (N * p_id);
  EXPECT_LT(chi2, 18.47);
}

}  // namespace
}  // namespace vkspec
