// Host sampling transforms against hand-computed distributions, and seeded reproducibility; the device
// transforms (DeviceSampler) against the host ones.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "runtime/rng.h"
#include "tests/host_sampler.h"
#include "tests/stats.h"

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

// llama.cpp's llama_sampler_penalties: per distinct token of the window with count c, the repetition
// penalty first, then c * frequency + presence subtracted.
TEST(Sampler, FrequencyAndPresencePenaltiesAsLlamaCpp) {
  SamplingParams p;
  p.top_k = 0; p.top_p = 1; p.min_p = 0; p.temperature = 1;
  p.repeat_penalty = 2.0f; p.frequency_penalty = 0.5f; p.presence_penalty = 0.25f;
  const std::vector<uint32_t> history = {4, 3, 4};
  auto m = as_map(Sampler(p).distribution(kLogits, history));
  // token 4 (c = 2): 3 / 2 - (2 * 0.5 + 0.25) = 0.25; token 3 (c = 1): -1 * 2 - (0.5 + 0.25) = -2.75
  double z = std::exp(2.0) + std::exp(1.0) + std::exp(0.0) + std::exp(-2.75) + std::exp(0.25);
  EXPECT_NEAR(m[4], std::exp(0.25) / z, 1e-6);
  EXPECT_NEAR(m[3], std::exp(-2.75) / z, 1e-6);
  EXPECT_NEAR(m[0], std::exp(2.0) / z, 1e-6);
  // presence alone, greedy: token 4 (3 - 1.25 = 1.75) falls below token 0 (2.0)
  p.repeat_penalty = 1.0f; p.frequency_penalty = 0.0f; p.presence_penalty = 1.25f;
  p.temperature = 0;
  EXPECT_TRUE(p.penalized());
  EXPECT_EQ(Sampler(p).sample(kLogits, history, 0), 0u);
  p.presence_penalty = 0.5f;   // 2.5 > 2.0: token 4 again
  EXPECT_EQ(Sampler(p).sample(kLogits, history, 0), 4u);
  // a negative frequency penalty favours what was said, per occurrence
  p.presence_penalty = 0.0f; p.frequency_penalty = -1.5f;
  const std::vector<uint32_t> threes_and_four = {3, 3, 3, 4}, threes = {3, 3, 3};
  EXPECT_EQ(Sampler(p).sample(kLogits, threes_and_four, 0), 4u);   // token 4: 4.5, token 3: 3.5
  EXPECT_EQ(Sampler(p).sample(kLogits, threes, 0), 3u);            // token 3: 3.5 beats token 4's 3.0
  p.repeat_last_n = 0;   // no window: nothing applies
  EXPECT_FALSE(p.penalized());
  EXPECT_EQ(Sampler(p).sample(kLogits, threes, 0), 4u);
}

// llama.cpp's logit bias comes first: added before the penalties (so a biased token's logit is then divided
// by the repetition penalty), duplicates adding up; a bias alone makes greedy use the device sampler.
TEST(Sampler, LogitBiasComesBeforeThePenalties) {
  SamplingParams p;
  p.top_k = 0; p.top_p = 1; p.min_p = 0; p.temperature = 1;
  p.logit_bias = {{2, 1.0f}, {2, 1.0f}, {4, -4.0f}};
  auto m = as_map(Sampler(p).distribution(kLogits, {}));
  // logits 2, 1, 0 + 2 = 2, -1, 3 - 4 = -1
  double z = std::exp(2.0) + std::exp(1.0) + std::exp(2.0) + std::exp(-1.0) + std::exp(-1.0);
  EXPECT_NEAR(m[2], std::exp(2.0) / z, 1e-6);
  EXPECT_NEAR(m[4], std::exp(-1.0) / z, 1e-6);
  p.repeat_penalty = 2.0f;   // token 4: (3 - 4) * 2 = -2 (bias first), not 3 / 2 - 4 = -2.5
  const std::vector<uint32_t> history = {4};
  m = as_map(Sampler(p).distribution(kLogits, history));
  z = std::exp(2.0) + std::exp(1.0) + std::exp(2.0) + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_NEAR(m[4], std::exp(-2.0) / z, 1e-6);
  p.temperature = 0;   // greedy: token 0 and token 2 tie at 2.0, the lower id wins
  EXPECT_EQ(Sampler(p).sample(kLogits, history, 0), 0u);
  SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_FALSE(greedy.adjusts_logits());
  greedy.logit_bias = {{3, 0.5f}};
  EXPECT_TRUE(greedy.adjusts_logits());
  EXPECT_FALSE(greedy.penalized());
}

// The exponential variate under the Gumbel noise (shaders/rng.h) to float precision over all 2^24 inputs,
// against double precision: relative error below 1e-6 (the series branch, u >= 0.5, included: its smallest
// values decide draws).
TEST(Sampler, ExponentialVariateIsAccurateEverywhere) {
  double worst = 0;
  for (uint32_t k = 0; k < (1u << 24); ++k) {
    const double want = -std::log((double(k) + 0.5) / 16777216.0);
    worst = std::max(worst, std::fabs(double(rng::exponential24(k)) - want) / want);
  }
  EXPECT_LT(worst, 1e-6);
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

// ---- the device transforms (shaders/sample_rows.comp) against the host Sampler as reference ----

#include <algorithm>
#include <cstring>
#include <random>

#include "runtime/device_sampler.h"
#include "runtime/token_choice.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {

class DeviceSamplerTest : public VkTest {};

// Rows of random logits with deliberate ties (values on a coarse grid), penalty windows with repeated
// tokens, and every transform: the kept set must be the host's exactly and the probabilities agree to
// float precision. With each lane count the device fits (GPUs run 256 or 512); the top-k <= kMaxTopK path
// must give bit-identical rows and the same draws for all of them.
class DeviceSamplerLanesTest : public VkTest, public ::testing::WithParamInterface<uint32_t> {};
INSTANTIATE_TEST_SUITE_P(Lanes, DeviceSamplerLanesTest, ::testing::Values(64u, 256u, 512u));

TEST_P(DeviceSamplerLanesTest, MatchesHostSamplerRowByRow) {
  const uint32_t lanes = GetParam();
  if (!DeviceSampler::lanes_fit(gpu().ctx.facts(), lanes))
    GTEST_SKIP() << lanes << " lanes do not fit this device's shared memory";
  const uint32_t rows = 4;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 2.f);
  std::uniform_int_distribution<uint32_t> tok(0, 999);
  // grid: values on a coarse grid (many exact ties, -0 and +0 among them); flat: one value everywhere (every logit ties: more than
  // the top-k path's candidate list holds, which then selects over the whole row)
  struct Case {
    int top_k; float top_p, min_p, temp, penalty; int last_n; bool grid, flat = false; float freq = 0, presence = 0;
    bool bias = false;   // a logit bias: 12 tokens, one banned (-100), the first listed twice (adds again)
    bool mask = false;   // a constraint's mask (a random third of the tokens allowed, per row): the host sees -inf
  };
  const Case cases[] = {{40, 0.95f, 0.05f, 0.8f, 1.0f, 64, false}, {1, 1.0f, 0.0f, 1.0f, 1.0f, 64, false},
                        {40, 1.0f, 0.0f, 0.9f, 1.0f, 64, true, true}, {3, 1.0f, 0.0f, 1.0f, 1.1f, 8, true, true},
                        {256, 0.9f, 0.0f, 1.5f, 1.1f, 16, false}, {40, 1.0f, 0.0f, 1.0f, 1.3f, -1, true},
                        {7, 0.5f, 0.2f, 0.5f, 1.0f, 0, true}, {100, 0.99f, 0.01f, 1.0f, 0.9f, 8, true},
                        // the general path: top-k off, above the shared-memory cap, the full vocabulary
                        {0, 0.9f, 0.0f, 0.8f, 1.0f, 64, false}, {0, 0.95f, 0.02f, 1.2f, 1.2f, 32, true},
                        {300, 1.0f, 0.05f, 0.7f, 1.0f, 64, false}, {1000, 1.0f, 0.0f, 1.0f, 1.0f, 64, false},
                        {0, 0.5f, 0.0f, 1.0f, 1.0f, 64, true}, {999, 0.97f, 0.01f, 2.0f, 1.05f, -1, false},
                        // frequency and presence penalties, alone and after the repetition penalty, both paths
                        {40, 0.95f, 0.05f, 0.8f, 1.0f, 64, false, false, 0.3f, 0.2f},
                        {1, 1.0f, 0.0f, 1.0f, 1.0f, 16, true, false, 0.5f, 0.0f},
                        {0, 0.9f, 0.0f, 0.8f, 1.2f, 32, true, false, 0.25f, 0.5f},
                        {7, 1.0f, 0.0f, 1.0f, 1.0f, -1, false, false, -0.5f, -0.3f},
                        // a logit bias, alone (greedy-like top-k 1, the general path) and before penalties
                        {1, 1.0f, 0.0f, 1.0f, 1.0f, 64, true, false, 0.0f, 0.0f, true},
                        {0, 0.9f, 0.0f, 0.8f, 1.0f, 64, false, false, 0.0f, 0.0f, true},
                        {40, 0.95f, 0.05f, 0.8f, 1.3f, 16, true, false, 0.2f, 0.1f, true},
                        // a mask, alone (sampled, greedy's top-k 1, the general path) and after a bias and penalties
                        {40, 0.95f, 0.05f, 0.8f, 1.0f, 64, false, false, 0.0f, 0.0f, false, true},
                        {1, 1.0f, 0.0f, 1.0f, 1.0f, 64, true, false, 0.0f, 0.0f, false, true},
                        {0, 0.9f, 0.0f, 0.8f, 1.0f, 64, false, false, 0.0f, 0.0f, false, true},
                        {40, 0.95f, 0.05f, 0.8f, 1.3f, 16, true, false, 0.2f, 0.1f, true, true}};
  int exact_draws = 0;
  // V = 301: the last lanes' ranges are empty and start past the last whole group of 4 ids
  for (const uint32_t V : {1000u, 301u}) {
  DeviceSampler ds(gpu().ctx, gpu().pipelines, V, rows, 4096, lanes);
  DeviceSampler ds64(gpu().ctx, gpu().pipelines, V, rows, 4096, 64);
  for (const Case& c : cases) {
    SCOPED_TRACE("V " + std::to_string(V) + " top_k " + std::to_string(c.top_k) + " top_p " + std::to_string(c.top_p) +
                 " frequency " + std::to_string(c.freq) + " presence " + std::to_string(c.presence) +
                 (c.mask ? " mask" : ""));
    SamplingParams p;
    p.top_k = c.top_k; p.top_p = c.top_p; p.min_p = c.min_p; p.temperature = c.temp;
    p.repeat_penalty = c.penalty; p.repeat_last_n = c.last_n; p.seed = 9;
    p.frequency_penalty = c.freq; p.presence_penalty = c.presence;
    if (c.bias) {   // biases on the 0.5 grid keep its ties
      for (uint32_t i = 0; i < 12; ++i)
        p.logit_bias.push_back({(i * 83 + 7) % V, i == 3 ? -100.0f : 0.5f * float(i % 5) + 1.0f});
      p.logit_bias.push_back(p.logit_bias[0]);
    }
    std::vector<float> logits(size_t(rows) * V);
    for (auto& x : logits) x = c.flat ? 0.5f : c.grid ? std::round(nd(rng)) * 0.5f : nd(rng);
    std::vector<float> host_logits = logits;   // the mask as the host reference sees it: -inf
    if (c.mask) {   // each row its own (a verify pass's rows follow the drafts before them)
      p.json_object = true;
      for (uint32_t row = 0; row < rows; ++row) {
        std::vector<uint32_t> words((V + 31) / 32, 0u);
        for (uint32_t v = 0; v < V; ++v)
          if (tok(rng) % 3 == 0) words[v / 32] |= 1u << (v % 32);
        for (DeviceSampler* d : {&ds, &ds64}) std::copy(words.begin(), words.end(), d->mask_words(row).begin());
        for (uint32_t v = 0; v < V; ++v)
          if (!((words[v / 32] >> (v % 32)) & 1)) host_logits[size_t(row) * V + v] = -INFINITY;
      }
    }
    std::vector<uint32_t> context(30), extra(rows - 1);
    for (auto& t : context) t = tok(rng) % 50;   // repeats inside the window
    for (auto& t : extra) t = tok(rng) % 50;
    Slice l = upload(logits), probs = zeros<float>(size_t(rows) * V);
    run([&](Recorder& r) { ds.record(r, p, l, probs, rows, context, extra, 100, true); });
    const auto got = download<float>(probs, size_t(rows) * V);
    {   // without probability rows (as generation records them): the same draws
      std::vector<uint32_t> drawn(rows);
      for (uint32_t row = 0; row < rows; ++row) drawn[row] = ds.drawn(row).token;
      Slice l2 = upload(logits);
      run([&](Recorder& r) { ds.record(r, p, l2, Slice{}, rows, context, extra, 100, true); });
      for (uint32_t row = 0; row < rows; ++row) ASSERT_EQ(ds.drawn(row).token, drawn[row]) << "row " << row << " without probs";
    }
    if (c.top_k >= 1 && c.top_k <= int(DeviceSampler::kMaxTopK) && lanes != 64) {
      Slice l64 = upload(logits), probs64 = zeros<float>(size_t(rows) * V);
      run([&](Recorder& r) { ds64.record(r, p, l64, probs64, rows, context, extra, 100, true); });
      ASSERT_EQ(download<float>(probs64, size_t(rows) * V), got) << "rows differ from 64 lanes'";
      for (uint32_t row = 0; row < rows; ++row) EXPECT_EQ(ds64.drawn(row).token, ds.drawn(row).token) << "row " << row;
    }
    for (uint32_t row = 0; row < rows; ++row) {
      std::vector<uint32_t> history = context;
      history.insert(history.end(), extra.begin(), extra.begin() + row);
      const Candidates want = Sampler(p).distribution({host_logits.data() + size_t(row) * V, V}, history);
      std::vector<float> dense(V, 0.f);
      for (size_t i = 0; i < want.ids.size(); ++i) dense[want.ids[i]] = want.probs[i];
      for (uint32_t v = 0; v < V; ++v) {
        ASSERT_EQ(got[size_t(row) * V + v] > 0.f, dense[v] > 0.f) << "row " << row << " token " << v;
        ASSERT_NEAR(got[size_t(row) * V + v], dense[v], 2e-6 + 1e-5 * dense[v]) << "row " << row << " token " << v;
      }
      const auto d = ds.drawn(row);
      EXPECT_GT(dense[d.token], 0.f) << "drawn token outside the kept set";
      EXPECT_NEAR(d.top_prob, want.probs.front(), 1e-5);
      // the draw itself: the host's Gumbel-max with the mirrored noise (unless the best two scores are
      // within the rounding of the device's log)
      const Sampler host(p);
      const std::vector<float> scores = host.draw_scores({host_logits.data() + size_t(row) * V, V}, history, want, 100 + row);
      std::vector<float> sorted = scores;
      std::sort(sorted.rbegin(), sorted.rend());
      if (sorted.size() < 2 || sorted[0] - sorted[1] > 1e-4f * std::max(1.0f, std::fabs(sorted[0]))) {
        EXPECT_EQ(d.token, host.sample({host_logits.data() + size_t(row) * V, V}, history, 100 + row)) << "row " << row;
        ++exact_draws;
      }
    }
  }
  }
  EXPECT_GT(exact_draws, 80) << "too few draws compared";
}

// On CPU devices sample_rows reads rows of whole texels through a texel buffer (sample_rows_texels); the
// device-address variant gives the same probability rows and draws bit for bit (both walk each lane's ids in
// the same order), on both paths of the kernel, with exact ties, and with a NaN row (NON_FINITE_TOKEN in both).
TEST_F(DeviceSamplerTest, TexelReadsEqualAddressReads) {
  const DeviceFacts& f = gpu().ctx.facts();
  if (!f.prefers_row_per_lane() || !f.texel_reads()) GTEST_SKIP() << "the texel variant is for CPU devices";
  const uint32_t V = 1024, rows = 3;
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.f, 2.f);
  for (uint32_t lanes : {64u, 256u}) {
    if (!DeviceSampler::lanes_fit(f, lanes)) continue;
    DeviceSampler texels(gpu().ctx, gpu().pipelines, V, rows, 64, lanes),
        address(gpu().ctx, gpu().pipelines, V, rows, 64, lanes, /*texel_reads=*/false);
    struct Case { int top_k; float top_p, min_p, temp; bool grid, nan; };
    for (const Case& c : {Case{40, 0.95f, 0.05f, 0.8f, false, false}, Case{40, 0.9f, 0.0f, 1.0f, true, false},
                          Case{1, 1.0f, 0.0f, 1.0f, true, false}, Case{0, 0.9f, 0.0f, 0.8f, false, false},
                          Case{0, 0.95f, 0.02f, 1.2f, true, false}, Case{300, 1.0f, 0.05f, 0.7f, true, false},
                          Case{40, 0.95f, 0.05f, 0.8f, false, true}, Case{0, 0.9f, 0.0f, 0.8f, false, true}}) {
      SCOPED_TRACE("lanes " + std::to_string(lanes) + " top_k " + std::to_string(c.top_k) + (c.nan ? " NaN" : ""));
      SamplingParams p;
      p.top_k = c.top_k; p.top_p = c.top_p; p.min_p = c.min_p; p.temperature = c.temp; p.seed = 21;
      std::vector<float> logits(size_t(rows) * V);
      for (auto& x : logits) x = c.grid ? std::round(nd(rng)) * 0.5f : nd(rng);
      if (c.nan) logits[V + 517] = std::numeric_limits<float>::quiet_NaN();   // row 1
      Slice lt = upload(logits), la = upload(logits);
      ASSERT_TRUE(texels.texel_logits(false, lt));
      ASSERT_FALSE(address.texel_logits(false, la));
      Slice pt = zeros<float>(size_t(rows) * V), pa = zeros<float>(size_t(rows) * V);
      const std::vector<uint32_t> context = {1, 2}, extra = {3, 4};   // drafts before rows 1 and 2
      run([&](Recorder& r) { texels.record(r, p, lt, pt, rows, context, extra, 7, true); });
      run([&](Recorder& r) { address.record(r, p, la, pa, rows, context, extra, 7, true); });
      ASSERT_EQ(download<uint32_t>(pt, size_t(rows) * V), download<uint32_t>(pa, size_t(rows) * V))
          << "probability rows differ";
      for (uint32_t row = 0; row < rows; ++row) {
        const auto a = texels.drawn(row), b = address.drawn(row);
        EXPECT_EQ(a.token, b.token) << "row " << row;
        if (!c.nan || row != 1) { EXPECT_EQ(a.top_prob, b.top_prob) << "row " << row; }
        EXPECT_EQ(a.token == contract::NON_FINITE_TOKEN, c.nan && row == 1) << "row " << row;
      }
    }
  }
}

// A batched record (one dispatch over rows of several sequences, each with its own settings, history,
// counter and slot: a batched decoding step) gives each row exactly what recording it alone gives: the same
// probability row bit for bit and the same draw. Sequences mix top-k <= MAX_TOP_K, top-k off (the general
// path), top-p, min-p, temperatures, greedy-with-penalty's top-k 1 and penalties over their own histories;
// V = 1024 reads through texels on CPU devices unless a row has a penalty (then the whole batch reads by
// address), V = 301 always by address.
TEST_F(DeviceSamplerTest, BatchedRowsEqualOneRecordEach) {
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.f, 2.f);
  struct Seq { int top_k; float top_p, min_p, temp, penalty; uint64_t seed; uint32_t position; };
  const std::vector<Seq> seqs = {{40, 0.95f, 0.05f, 0.8f, 1.0f, 5, 9},     {0, 0.9f, 0.0f, 1.0f, 1.0f, 6, 3},
                                 {1, 1.0f, 0.0f, 1.0f, 1.0f, 7, 40},       {300, 0.8f, 0.1f, 1.5f, 1.0f, 8, 11},
                                 {40, 1.0f, 0.0f, 0.7f, 1.0f, 5, 9},       {0, 0.97f, 0.02f, 1.2f, 1.0f, 9, 100}};
  for (const uint32_t V : {1024u, 301u}) {
    for (const bool penalties : {false, true}) {
      SCOPED_TRACE("V " + std::to_string(V) + (penalties ? " with penalties" : ""));
      const uint32_t n = uint32_t(seqs.size());
      std::vector<std::unique_ptr<DeviceSampler>> own;   // each sequence's sampler (its history)
      DeviceSampler batch(gpu().ctx, gpu().pipelines, V, n, 0);
      std::vector<SamplingParams> ps(n);
      std::vector<std::vector<uint32_t>> contexts(n);
      std::vector<std::vector<float>> logits(n);
      for (uint32_t i = 0; i < n; ++i) {
        own.push_back(std::make_unique<DeviceSampler>(gpu().ctx, gpu().pipelines, V, 1, 64));
        SamplingParams& p = ps[i];
        p.top_k = seqs[i].top_k; p.top_p = seqs[i].top_p; p.min_p = seqs[i].min_p; p.temperature = seqs[i].temp;
        p.seed = seqs[i].seed;
        if (penalties && i % 2 == 1) { p.repeat_penalty = 1.3f + 0.2f * float(i); p.repeat_last_n = int(8 + i); }
        if (penalties && i == 4) { p.frequency_penalty = 0.5f; p.presence_penalty = 0.25f; p.repeat_last_n = 16; }
        if (penalties && i == 2) p.logit_bias = {{(i * 101 + 3) % V, 2.5f}, {5, -100.0f}};   // greedy (top-k 1)
        for (uint32_t t = 0; t < 20; ++t) contexts[i].push_back((t * 37 + i * 11) % V);
        logits[i].resize(V);
        for (auto& x : logits[i]) x = i == 4 ? std::round(nd(rng)) * 0.5f : nd(rng);   // row 4: ties
        for (uint32_t t : contexts[i]) logits[i][t] += 1.0f;   // the penalty moves the rows' leaders
      }
      // alone: one record per sequence
      std::vector<std::vector<uint32_t>> alone_probs(n);
      std::vector<DeviceSampler::Draw> alone(n);
      for (uint32_t i = 0; i < n; ++i) {
        Slice l = upload(logits[i]), pr = zeros<float>(V);
        run([&](Recorder& r) {
          own[i]->record(r, ps[i], l, pr, 1, contexts[i], {}, seqs[i].position, true);
        });
        alone_probs[i] = download<uint32_t>(pr, V);
        alone[i] = own[i]->drawn(0);
      }
      // batched: every row in one dispatch, each with its own sampler's history, into its own slot
      std::vector<float> all;
      for (const auto& row : logits) all.insert(all.end(), row.begin(), row.end());
      Slice l = upload(all), pr = zeros<float>(size_t(n) * V), slots = zeros<uint32_t>(size_t(n) * 2);
      const VkDeviceSize row_bytes = VkDeviceSize(V) * 4, slot_bytes = 8;
      std::vector<DeviceSampler::BatchRow> rows;
      for (uint32_t i = 0; i < n; ++i) {
        const uint32_t window = own[i]->set_history(ps[i], contexts[i]);
        rows.push_back(own[i]->row(ps[i], l.sub(i * row_bytes, row_bytes), pr.sub(i * row_bytes, row_bytes),
                                   slots.sub(i * slot_bytes, slot_bytes), window, seqs[i].position));
      }
      const bool texels = std::all_of(rows.begin(), rows.end(), [](const auto& b) { return b.texels != VK_NULL_HANDLE; });
      const DeviceFacts& f = gpu().ctx.facts();
      EXPECT_EQ(texels, f.prefers_row_per_lane() && f.texel_reads() && V % 4 == 0 && !penalties);
      run([&](Recorder& r) { batch.record_rows(r, rows); });
      const std::vector<uint32_t> probs = download<uint32_t>(pr, size_t(n) * V), drawn = download<uint32_t>(slots, size_t(n) * 2);
      for (uint32_t i = 0; i < n; ++i) {
        EXPECT_TRUE(std::equal(alone_probs[i].begin(), alone_probs[i].end(), probs.begin() + long(i) * V))
            << "sequence " << i << ": probability row differs";
        EXPECT_EQ(drawn[2 * i], alone[i].token) << "sequence " << i;
        float top;
        std::memcpy(&top, &drawn[2 * i + 1], 4);
        EXPECT_EQ(top, alone[i].top_prob) << "sequence " << i;
      }
    }
  }
}

// BatchedChoices (a batched step's choices recorded together) puts into each sequence's slot what
// TokenChooser::record_choice gives for its row alone: argmax rows in runs of consecutive logits rows (here
// two runs, split by a sampled row and by a change of top_prob), sampled rows in one dispatch, out slots
// other than 0, a caller's probability rows.
TEST_F(DeviceSamplerTest, BatchedChoicesEqualOneChoiceEach) {
  const uint32_t V = 1024, n = 6;
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.f, 2.f);
  Kernels k(gpu().ctx, gpu().pipelines);
  std::vector<float> all(size_t(n) * V);
  for (auto& x : all) x = nd(rng);
  const std::vector<uint32_t> context = {5, 6, 7, 5};
  std::vector<std::unique_ptr<TokenChooser>> alone, batched;
  for (uint32_t i = 0; i < n; ++i) {
    SamplingParams p;
    p.seed = 40 + i;
    p.temperature = i == 0 || i == 1 || i == 3 || i == 4 ? 0.0f : 0.9f;   // rows 0-1, 3-4 greedy; 2, 5 sampled
    if (i == 5) { p.repeat_penalty = 1.4f; p.repeat_last_n = 8; }
    for (auto* set : {&alone, &batched}) {
      set->push_back(std::make_unique<TokenChooser>(gpu().ctx, gpu().pipelines, V, 64));
      set->back()->start(p);
    }
  }
  const VkDeviceSize row = VkDeviceSize(V) * 4;
  const uint32_t out_slot = 2;
  auto top_prob = [](uint32_t i) { return i == 4; };   // row 4 wants the top probability: a run of its own
  {
    Slice logits = upload(all);
    run([&](Recorder& r) {
      for (uint32_t i = 0; i < n; ++i) {
        TokenChooser& ch = *alone[i];
        const uint32_t h = ch.mode() == ChoiceMode::Device ? ch.set_history(context) : 0;
        ch.record_choice(r, k, logits.sub(i * row, row), 1, out_slot, h, 9, top_prob(i));
      }
    });
  }
  BatchedChoices choices(gpu().ctx, gpu().pipelines, V, n);
  Slice logits = upload(all);
  run([&](Recorder& r) {
    for (uint32_t i = 0; i < n; ++i) {
      TokenChooser& ch = *batched[i];
      const uint32_t h = ch.mode() == ChoiceMode::Device ? ch.set_history(context) : 0;
      choices.add(r, k, ch, logits.sub(i * row, row), out_slot, h, 9, top_prob(i));
    }
    choices.record(r, k);
  });
  for (uint32_t i = 0; i < n; ++i) {
    EXPECT_EQ(batched[i]->token(out_slot), alone[i]->token(out_slot)) << "row " << i;
    EXPECT_EQ(batched[i]->top_prob(out_slot), alone[i]->top_prob(out_slot)) << "row " << i;
  }
  EXPECT_GT(alone[4]->top_prob(out_slot), 0.0f);   // argmax computed it where asked
}

// Non-finite logits never become a token: a row holding a NaN anywhere (where no draw would read it too:
// NaN keys rank arbitrarily) or an infinity draws NON_FINITE_TOKEN (which the host turns into "the model
// produced non-finite logits"), with top-k on and off, its logits read through a texel buffer (CPU devices,
// V = 300) and by address (V = 301); its finite neighbour rows in the same dispatch draw real tokens.
TEST_F(DeviceSamplerTest, NonFiniteRowsNeverBecomeAToken) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.5f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const uint32_t rows = 3;
  for (const uint32_t V : {300u, 301u}) {
    DeviceSampler ds(gpu().ctx, gpu().pipelines, V, rows, 16);
    for (int top_k : {40, 0})
      for (const float bad : {nan, inf, -inf}) {
        SamplingParams p;
        p.top_k = top_k; p.top_p = 0.95f; p.min_p = 0.0f; p.temperature = 1.0f; p.seed = 4;
        std::vector<float> logits(size_t(rows) * V);
        for (auto& x : logits) x = nd(rng);
        logits[V + 123] = bad;   // row 1
        Slice l = upload(logits), probs = zeros<float>(size_t(rows) * V);
        const std::vector<uint32_t> context, extra = {1, 2};
        run([&](Recorder& r) { ds.record(r, p, l, probs, rows, context, extra, 7, true); });
        SCOPED_TRACE("V " + std::to_string(V) + " top-k " + std::to_string(top_k) + " value " + std::to_string(bad));
        EXPECT_LT(ds.drawn(0).token, V);
        EXPECT_EQ(ds.drawn(1).token, contract::NON_FINITE_TOKEN);
        EXPECT_LT(ds.drawn(2).token, V);
      }
  }
}

// Draws over many positions follow the row's distribution (chi-square, significance ~1e-6), on both paths
// of sample_rows.comp (top-k 12: shared-memory ranking; top-k off: the general path).
TEST_F(DeviceSamplerTest, DrawsFollowTheDistribution) {
  const uint32_t V = 64;
  std::vector<float> logits(V);
  for (uint32_t v = 0; v < V; ++v) logits[v] = 0.1f * float(v % 9) - 0.02f * float(v);
  DeviceSampler ds(gpu().ctx, gpu().pipelines, V, 1, 16);
  Slice l = upload(logits), probs = zeros<float>(V);
  for (int top_k : {12, 0}) {
    SamplingParams p;
    p.top_k = top_k; p.top_p = 0.97f; p.min_p = 0.0f; p.temperature = 0.9f; p.seed = 3;
    const Candidates want = Sampler(p).distribution(logits, {});
    std::map<uint32_t, uint64_t> counts;
    const uint32_t draws = 20000;
    for (uint32_t i = 0; i < draws; ++i) {
      run([&](Recorder& r) { ds.record(r, p, l, probs, 1, {}, {}, i, true); });
      counts[ds.drawn(0).token]++;
    }
    std::map<uint32_t, double> dist;
    for (size_t i = 0; i < want.ids.size(); ++i) dist[want.ids[i]] = want.probs[i];
    for (const auto& [id, n] : counts) EXPECT_TRUE(dist.count(id)) << "drew " << id << " outside the kept set, top-k " << top_k;
    const test::ChiSquare fit = test::chi_square(counts, dist, draws);
    EXPECT_TRUE(fit.fits()) << "top-k " << top_k << ": chi2 " << fit.stat << " >= " << fit.critical;
  }
}

}  // namespace
}  // namespace vkspec::test
