// The adaptive draft policy (speculative/draft_policy.h), host-side only: the K it picks against the model
// written again here, its probes after plain rounds, the medians and lines it prices rounds with, and the
// measured costs a batch's greedy sequences share (SharedCosts).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "speculative/draft_policy.h"
#include "speculative/draft_tree.h"

namespace vkspec::test {
namespace {

// DraftPolicy's model written again as the tests' reference: the K in 0..k_max with the most expected tokens
// per second, E(K) = (1 - a^(K+1)) / (1 - a) over switch_s + K * draft + plain + slope * K (K = 0: a plain
// pass, 1 / plain).
uint32_t model_best_k(double a, double draft, double plain, double slope, uint32_t k_max, double switch_s = 0.0) {
  uint32_t best = 0;
  double best_rate = 1.0 / plain;
  for (uint32_t k = 1; k <= k_max; ++k) {
    const double rate = (1 - std::pow(a, k + 1)) / (1 - a) / (switch_s + k * draft + plain + slope * k);
    if (rate > best_rate) best_rate = rate, best = k;
  }
  return best;
}

// Greedy sequences of a batch: the timing-free model prices a round at the sequence's share of the pass,
// (1 + g (b - 1)) / b of a plain step for b sequences, plus g per own draft row, and a draft step at that share
// of its cost (DraftPolicy::share_passes): the reference model with those inputs, for 1 to 8 sequences; at
// acceptance ~0.5 drafting pays alone and not among 8.
TEST(DraftPolicy, SharedPassesPriceDraftsAtTheirShare) {
  const double g = DraftPolicy::kVerifyGrowth, draft = 0.19;
  for (const uint32_t accepted_of_4 : {1u, 3u, 4u}) {
    DraftPolicy p(8, true, /*timing_free=*/true, draft);
    for (int i = 0; i < 60; ++i) p.observe(4, accepted_of_4, -1, -1);
    const double a = std::min(p.alpha(), 0.999);
    std::vector<uint32_t> ks;
    for (const uint32_t b : {1u, 2u, 4u, 8u}) {
      p.share_passes(b);
      const double share = (1 + g * (b - 1)) / b;
      ks.push_back(p.next_k());
      EXPECT_EQ(ks.back(), model_best_k(a, draft * share, share, g, 8)) << "alpha " << a << ", " << b << " sequences";
    }
    EXPECT_TRUE(std::is_sorted(ks.rbegin(), ks.rend())) << "drafts never grow with the sequences sharing a pass (alpha " << a << ")";
    if (accepted_of_4 == 1) {
      EXPECT_GT(ks.front(), 0u) << "alone, drafts at alpha " << a << " pay";
      EXPECT_EQ(ks.back(), 0u) << "among 8 sequences, drafts at alpha " << a << " do not";
    }
  }
}

// A batch's pass costs as a line over rows (PassCostLine: Theil-Sen): a line sampled exactly is recovered, a
// stalled pass and a cold one among the samples move it by nothing; unknown before kMinSamples samples, and
// with one row count known only there (its median: a lone sequence's draft steps are all one row).
// A draft model's tree takes the nodes whose chance of being reached pays for their verify row: the row's cost
// in the time a round of k drafts takes to yield a token (the reference written again here, timing-free: at the
// sequence's share of the pass). Among 8 sequences a row costs more of a sequence's round than alone, so the
// least value rises; with a GPU's measured costs (a row ~1% of a pass) the tree fills its 16 nodes, with a CPU's
// (a row ~60% of a plain pass) it stays a chain. The runner-up rate starts at 0.5 and follows what is observed.
TEST(DraftPolicy, TreeNodesPayForTheirVerifyRowsAtTheSequencesShare) {
  const double g = DraftPolicy::kVerifyGrowth, draft = 0.2;
  DraftPolicy p(5, true, /*timing_free=*/true, draft);
  EXPECT_DOUBLE_EQ(p.runner_up_rate(), 0.5);
  for (int i = 0; i < 60; ++i) p.observe(4, 3, -1, -1), p.observe_runner_up(i % 4 != 0);
  EXPECT_NEAR(p.runner_up_rate(), 0.75, 0.06);
  const double a = std::min(p.alpha(), 0.999), tokens = (1 - std::pow(a, 6)) / (1 - a);
  std::vector<double> v;
  for (const uint32_t b : {1u, 8u}) {
    p.share_passes(b);
    const double plain = (1 + g * (b - 1)) / b;   // its share of a plain pass, in plain steps
    v.push_back(p.node_value_min(5));
    EXPECT_NEAR(v.back(), g * tokens / (5 * draft * plain + plain + g * 5), 1e-12) << b << " sequences";
  }
  EXPECT_GT(v[1], v[0]);
  const double a1 = (1 - a) * p.runner_up_rate();
  p.share_passes(1, SharedCosts{1.0, 0.01, 0.2, 0.01});   // a GPU's: rows nearly free
  EXPECT_EQ(shape_draft_tree(5, 16, a, a1, p.node_value_min(5)).tree.n, 16u);
  p.share_passes(1, SharedCosts{1.0, 0.6, 0.2, 0.1});     // a CPU's: a row costs most of a plain pass
  EXPECT_TRUE(shape_draft_tree(5, 16, a, a1, p.node_value_min(5)).tree.chain());
}

TEST(DraftPolicy, PassCostLineFitsALineThroughOutliers) {
  const auto t = [](double n) { return 0.006 + 0.0009 * n; };
  PassCostLine line;
  for (uint32_t i = 0; i < PassCostLine::kMinSamples - 1; ++i) line.add(1 + i % 3, t(1 + i % 3));
  EXPECT_EQ(line.at(1), -1.0);
  PassCostLine same;
  for (int i = 0; i < 10; ++i) same.add(4, i == 3 ? 5 * t(4) : t(4));
  EXPECT_DOUBLE_EQ(same.at(4), t(4)) << "one row count: its median";
  EXPECT_EQ(same.at(5), -1.0) << "one row count: no slope";
  EXPECT_FALSE(SharedCosts::measured(same, same, 4).has_value()) << "a row's cost unknown";
  for (int i = 0; i < 40; ++i) line.add(1 + i % 7, t(1 + i % 7));
  line.add(3, 10 * t(3));    // a stalled pass
  line.add(2, 0.5 * t(2));   // an impossible fast one
  for (const double n : {1.0, 2.0, 8.0})
    EXPECT_NEAR(line.at(n), t(n), 1e-12) << n << " rows";
  PassCostLine steady;   // a window of one row count after two: the last slope stands
  for (int i = 0; i < 10; ++i) steady.add(1 + i % 2, t(1 + i % 2));
  for (size_t i = 0; i < PassCostLine::kWindow; ++i) steady.add(4, t(4));
  EXPECT_NEAR(steady.at(4), t(4), 1e-12);
  EXPECT_NEAR(steady.at(6), t(6), 1e-12) << "a row count the window no longer holds";
  EXPECT_TRUE(SharedCosts::measured(steady, steady, 4).has_value());
  PassCostLine falling;   // rows never make a pass cheaper: a falling line is flat
  for (int i = 0; i < 10; ++i) falling.add(1 + i % 4, 0.01 - 0.001 * (i % 4));
  EXPECT_NEAR(falling.at(4) - falling.at(1), 0.0, 1e-15);
}

// Greedy sequences of a batch priced with the costs the engine measured (SharedCosts from its fitted passes
// and draft steps, at the batch's size) instead of the constants: the reference model with the measured
// inputs. With lavapipe's costs for the pycode pair (a row 0.14 of a one-row pass, a draft step 0.34 of a
// target step) four sequences at acceptance 2/3 stop drafting where the constants keep drafting, and with
// cheap measured costs they draft more.
TEST(DraftPolicy, SharedPassesPricedWithMeasuredCosts) {
  for (const auto& [growth, draft_ratio] : {std::pair{0.14, 0.34}, std::pair{0.02, 0.05}}) {
    PassCostLine target, draft;
    const double step = 0.0086, g = growth * step, a = step - g;   // a one-row pass: a + g = step
    for (uint32_t n = 1; n <= 8; ++n) {
      target.add(n, a + g * n);
      draft.add(n, draft_ratio * (a + g * n));   // the draft's passes scale alike
    }
    DraftPolicy p(8, true, /*timing_free=*/true, 0.19);
    for (int i = 0; i < 60; ++i) p.observe(3, 2, -1, -1);   // acceptance 2 of 3
    const double alpha = std::min(p.alpha(), 0.999);
    for (const uint32_t b : {1u, 4u}) {
      const std::optional<SharedCosts> c = SharedCosts::measured(target, draft, b);
      ASSERT_TRUE(c.has_value());
      EXPECT_NEAR(c->plain_share, (a + g * b) / b, 1e-12);
      EXPECT_NEAR(c->row, g, 1e-12);
      EXPECT_NEAR(c->draft_step, draft_ratio * (a + g), 1e-12) << "a draft step of one row";
      EXPECT_NEAR(c->draft_row, draft_ratio * g, 1e-12);
      p.share_passes(b, c);
      EXPECT_EQ(p.next_k(), model_best_k(alpha, c->draft_step, c->plain_share, g, 8)) << b << " sequences, growth " << growth;
    }
    p.share_passes(4, SharedCosts::measured(target, draft, 4));
    const uint32_t measured_k = p.next_k();
    p.share_passes(4);
    const uint32_t constant_k = p.next_k();
    if (growth > 0.1) {
      EXPECT_EQ(measured_k, 0u) << "lavapipe's costs: drafting does not pay among 4 sequences";
      EXPECT_GT(constant_k, 0u) << "the constants say it does";
    } else {
      EXPECT_GT(measured_k, constant_k) << "cheap measured costs draft more";
    }
  }
  EXPECT_FALSE(SharedCosts::measured(PassCostLine{}, PassCostLine{}, 4).has_value());
  PassCostLine passes;   // no draft step measured (host lookups only): the pass is, the draft is not
  for (uint32_t n = 1; n <= 8; ++n) passes.add(n, 0.006 + 0.001 * n);
  const std::optional<SharedCosts> lookups = SharedCosts::measured(passes, PassCostLine{}, 4);
  ASSERT_TRUE(lookups.has_value());
  EXPECT_NEAR(lookups->plain_share, 0.010 / 4, 1e-12);
  EXPECT_LT(lookups->draft_step, 0.0);
  DraftPolicy p(8, true, /*timing_free=*/true, 0.19);
  for (int i = 0; i < 60; ++i) p.observe(3, 2, -1, -1);
  p.share_passes(4, lookups);
  EXPECT_EQ(p.next_k(), model_best_k(std::min(p.alpha(), 0.999), 0.19 * lookups->plain_share, lookups->plain_share,
                                     lookups->row, 8))
      << "a draft step priced by the constant, at the measured share";
  PassCostLine lone_steps;   // one sequence: its draft steps are all of one row
  for (int i = 0; i < 9; ++i) lone_steps.add(1, 0.002);
  const std::optional<SharedCosts> lone = SharedCosts::measured(passes, lone_steps, 1);
  ASSERT_TRUE(lone.has_value());
  EXPECT_NEAR(lone->draft_step, 0.002, 1e-15) << "measured at its one row count";
  EXPECT_LT(lone->draft_row, 0.0) << "one row count: a draft row's cost unknown";
  PassCostLine four_steps;   // four sequences drafting together, every step of four rows: a step of one unknown
  for (int i = 0; i < 9; ++i) four_steps.add(4, 0.004);
  EXPECT_LT(SharedCosts::measured(passes, four_steps, 4)->draft_step, 0.0);
}

// After plain rounds a greedy sequence's draft model catches up on a token per plain round in its next draft
// step: priced at the measured draft row (SharedCosts::draft_row) as a switching cost, so that near
// break-even the sequence stays plain rather than flipping, and not at all where no draft step runs (host
// lookups) or while a draft row's cost is unknown.
TEST(DraftPolicy, CatchUpAfterPlainRoundsPricedAtTheMeasuredDraftRow) {
  const SharedCosts c{0.003, 0.0003, 0.0006, 0.0004};   // seconds: share, row, draft step, draft row
  DraftPolicy p(5, true, /*timing_free=*/true, 0.19);
  for (int i = 0; i < 60; ++i) p.observe(3, 2, -1, -1);   // acceptance 2 of 3
  const double alpha = std::min(p.alpha(), 0.999);
  SharedCosts unknown = c;
  unknown.draft_row = -1.0;
  std::vector<uint32_t> ks;
  for (uint32_t plain = 0; plain < DraftPolicy::kProbeEvery; ++plain) {   // (no probe before kProbeEvery)
    p.share_passes(4, c);
    ks.push_back(p.next_k());
    EXPECT_EQ(ks.back(), model_best_k(alpha, c.draft_step, c.plain_share, c.row, 5, plain * c.draft_row))
        << plain << " plain rounds";
    EXPECT_EQ(p.next_k(/*free_drafts=*/true), model_best_k(alpha, 0.0, c.plain_share, c.row, 5))
        << "lookups catch up on nothing";
    p.share_passes(4, unknown);
    EXPECT_EQ(p.next_k(), model_best_k(alpha, c.draft_step, c.plain_share, c.row, 5)) << "a draft row not measured";
    p.observe(0, 0, -1, -1);
  }
  EXPECT_GT(ks.front(), 0u) << "drafting pays without a catch-up";
  EXPECT_EQ(ks.back(), 0u) << "and not with seven tokens to catch up on";
  EXPECT_TRUE(std::is_sorted(ks.rbegin(), ks.rend())) << "a longer catch-up never drafts more";
}

// A draft step costs the batch a whole step where this sequence's drafts run it alone and a row where other
// sequences' drafts run it already (SharedCosts::joined_steps): with lavapipe-like costs a sequence does not
// start draft steps among four, and joins those that run anyway. The reference prices each K's steps so.
TEST(DraftPolicy, DraftStepsPricedAtWhatTheyAddToTheBatchStep) {
  const double share = 0.0027, row = 0.0015, step = 0.0018, draft_row = 0.0002;   // 4 streams, pycode pair
  DraftPolicy p(5, true, /*timing_free=*/true, 0.19);
  for (int i = 0; i < 60; ++i) p.observe(3, 3, -1, -1);   // every draft accepted
  const double a = std::min(p.alpha(), 0.999);
  const auto reference = [&](uint32_t joined) {
    uint32_t best = 0;
    double best_rate = 1.0 / share;
    for (uint32_t k = 1; k <= 5; ++k) {
      const uint32_t j = std::min(k, joined);
      const double rate = (1 - std::pow(a, k + 1)) / (1 - a) / (share + row * k + j * draft_row + (k - j) * step);
      if (rate > best_rate) best_rate = rate, best = k;
    }
    return best;
  };
  std::vector<uint32_t> ks;
  for (const uint32_t joined : {0u, 1u, 2u, 5u}) {
    p.share_passes(4, SharedCosts{share, row, step, draft_row, joined});
    ks.push_back(p.next_k());
    EXPECT_EQ(ks.back(), reference(joined)) << joined << " steps joined";
  }
  EXPECT_EQ(ks.front(), 0u) << "starting draft steps among four sequences does not pay here";
  EXPECT_GT(ks.back(), 0u) << "joining steps that run anyway does";
}

// A probe followed by a plain round doubles the wait before the next, however the probe's own step priced
// drafting: in a batch, a sequence that probes in a step where another sequence's drafts run prices drafting
// as cheap then (joined steps) and plain in the next; judged in the probe's step, the wait did not grow for
// the sequences that joined another's probe (a 4-stream trace on lavapipe: all four probed together every
// 16 steps, each with a catch-up).
TEST(DraftPolicy, ProbeWaitDoublesWhenTheNextRoundIsPlain) {
  const SharedCosts alone{0.0027, 0.0003, 0.0012, 0.00002, 0}, joined{0.0027, 0.0003, 0.0012, 0.00002, 1};
  DraftPolicy p(4, true, /*timing_free=*/true, 0.19);
  for (int i = 0; i < 60; ++i) p.observe(2, 1, -1, -1);   // acceptance 1/2
  p.share_passes(4, alone);
  ASSERT_EQ(p.next_k(), 0u) << "the case needs drafting that does not pay alone";
  std::vector<uint32_t> waits;
  uint32_t plain = 0;
  for (int round = 0; round < 200 && waits.size() < 4; ++round) {
    p.share_passes(4, alone);
    const uint32_t k = p.next_k();
    if (k == 0) {
      ++plain;
      p.observe(0, 0, -1, -1);
      continue;
    }
    waits.push_back(plain);
    plain = 0;
    p.share_passes(4, joined);   // the step the probe ran in: another sequence drafts too (pays at alpha 1/2)
    p.observe(k, 0, -1, -1);
  }
  EXPECT_EQ(waits, (std::vector<uint32_t>{8, 16, 32, 64}));
}

// Plain rounds are followed by a one-draft probe (the drafter may agree again), except where the batch's
// measured costs say drafting would lose even if every draft were accepted, the draft model's catch-up on
// the plain rounds' tokens included: there the probe's draft steps are pure loss. With costs under which
// perfect drafts would pay, the probe comes as before.
TEST(DraftPolicy, NoProbeWhereMeasuredCostsRuleDraftingOut) {
  // seconds: share, row, draft step, draft row
  const SharedCosts dear{0.003, 0.0015, 0.004}, cheap{0.003, 0.0002, 0.0005}, dear_catch_up{0.003, 0.0002, 0.0005, 0.002};
  for (const SharedCosts* c : {&dear, &cheap, &dear_catch_up}) {
    DraftPolicy p(4, true, /*timing_free=*/true, 0.19);
    p.share_passes(4, *c);
    for (int i = 0; i < 20; ++i) p.observe(2, 0, -1, -1);   // drafts rejected: plain rounds follow
    uint32_t probes = 0;
    for (uint32_t i = 0; i < 3 * DraftPolicy::kProbeEvery; ++i) {
      const uint32_t k = p.next_k();
      probes += k > 0;
      p.observe(k, 0, -1, -1);
    }
    if (c == &cheap) EXPECT_GT(probes, 0u) << "perfect drafts would pay: probe";
    else EXPECT_EQ(probes, 0u) << "no acceptance makes these costs pay" << (c == &dear ? "" : ", catch-up included");
  }
}

// The adaptive policy against its model: E(K) / (K t_draft + t_verify(K+1)) with measured inputs.
TEST(DraftPolicy, DraftPolicyPicksTheFastestKAndProbesAfterPlainRounds) {
  DraftPolicy fixed(5, false);
  fixed.observe(5, 0, 0.01, 0.01);
  EXPECT_EQ(fixed.next_k(), 5u);

  DraftPolicy none(0, true);   // --draft-max 0: no draft ever, warm-up rounds included
  none.observe(0, 0, 0.0, 0.010);
  EXPECT_EQ(none.next_k(), 0u);

  DraftPolicy good(5, true);
  EXPECT_EQ(good.next_k(), 0u);   // nothing measured yet: a plain pass first
  for (int i = 0; i < 30; ++i) {
    good.observe(0, 0, 0.0, 0.010);                          // a plain pass: 10 ms
    good.observe(5, 5, 5 * 0.001, 0.012 + (i % 2) * 1e-9);   // drafts 1 ms each, all accepted; 6-token pass 12 ms
  }
  EXPECT_GT(good.alpha(), 0.9);
  EXPECT_EQ(good.next_k(), 5u);

  // Drafts as costly as target passes and rarely accepted: plain decoding wins, then a probe every
  // kProbeEvery plain rounds.
  DraftPolicy bad(5, true);
  for (int i = 0; i < 30; ++i) bad.observe(2, 0, 2 * 0.010, 0.011);
  bad.observe(0, 0, 0.0, 0.010);
  EXPECT_LT(bad.alpha(), 0.2);
  EXPECT_EQ(bad.next_k(), 0u);
  for (uint32_t i = 1; i < DraftPolicy::kProbeEvery; ++i) bad.observe(0, 0, 0.0, 0.010);
  EXPECT_EQ(bad.next_k(), 1u);
  bad.observe(1, 0, 0.010, 0.0105);
  EXPECT_EQ(bad.next_k(), 0u);
  // plain still wins after the probe: the next one comes after twice as many plain rounds
  for (uint32_t i = 1; i < 2 * DraftPolicy::kProbeEvery; ++i) {
    bad.observe(0, 0, 0.0, 0.010);
    EXPECT_EQ(bad.next_k(), 0u) << "plain round " << i;
  }
  bad.observe(0, 0, 0.0, 0.010);
  EXPECT_EQ(bad.next_k(), 1u);

  // Only speculative rounds seen: one plain pass is measured first (pricing a plain step as the 6-token
  // verify's 20 ms would make K = 1 look 1.3x faster than plain). Until kWarmUp drafting rounds are timed,
  // the model prices K (drafts free here: draft_cost 0) and at least one draft is tried; then the medians
  // decide, and plain wins: drafts 5 ms, alpha ~0.5, K = 1 gives 1.5 tokens per 17 ms against 1 per 10 ms.
  DraftPolicy unseen(5, true);
  unseen.observe(5, 1, 5 * 0.005, 0.020);
  EXPECT_EQ(unseen.next_k(), 0u);
  unseen.observe(0, 0, 0.0, 0.010);
  for (uint32_t i = 0; i < DraftPolicy::kWarmUp; ++i) {   // the first round of its size gave no timings
    EXPECT_GE(unseen.next_k(), 1u) << "warm-up round " << i;
    unseen.observe(5, 1, 5 * 0.005, 0.020);
  }
  EXPECT_EQ(unseen.next_k(), 0u) << "alpha " << unseen.alpha();

  // Middle ground, checked against the formula: alpha 0.6, drafts 2 ms, pass 10 ms + 1 ms per extra token.
  DraftPolicy mid(8, true);
  for (uint32_t n = 1; n <= 9; ++n)   // each size twice: the first round of a size is not timed
    for (int i = 0; i < 2; ++i) mid.observe(n - 1, 0, 0.002 * (n - 1), 0.010 + 0.001 * (n - 1));
  EXPECT_EQ(mid.next_k(), model_best_k(mid.alpha(), 0.002, 0.010, 0.001, 8)) << "alpha " << mid.alpha();

  // timing-free (sampled runs): modeled costs, whatever the timings say. A draft at 0.3 of a step with
  // acceptance ~0.5: one draft a round (E = 1.5 tokens for 1.4 steps; K = 2: 1.75 for 1.8); nearly always
  // accepted: K = 6.
  DraftPolicy tf(6, true, true, 0.3);
  for (int i = 0; i < 20; ++i) tf.observe(1, i % 2, 100.0, 1e-6);   // absurd timings are ignored
  EXPECT_EQ(tf.next_k(), 1u) << "alpha " << tf.alpha();
  for (int i = 0; i < 40; ++i) tf.observe(6, 6, 100.0, 1e-6);
  EXPECT_EQ(tf.next_k(), 6u) << "alpha " << tf.alpha();
  DraftPolicy free_drafts(5, true, true, 0.0);   // n-gram: drafts cost nothing, only the verify grows
  EXPECT_EQ(free_drafts.next_k(), 5u);
}

// Lookup drafts cost no draft step: where a model's costly drafts lose to plain decoding, drafts that are
// free (next_k(true)) are priced by the verify pass alone, as the model says for a zero draft cost.
TEST(DraftPolicy, DraftPolicyPricesFreeDraftsByTheirVerifyPassAlone) {
  DraftPolicy p(5, true);
  for (int i = 0; i < 30; ++i) {
    p.observe(0, 0, 0.0, 0.010);                  // a plain pass: 10 ms
    p.observe(3, i % 4 ? 3 : 0, 3 * 0.008, 0.013);   // drafts 8 ms each, 3 of 4 rounds all accepted; 4-token pass 13 ms
  }
  const double a = p.alpha(), slope = (0.013 - 0.010) / 3;
  ASSERT_EQ(model_best_k(a, 0.008, 0.010, slope, 5), 0u) << "the case needs model drafts that do not pay";
  EXPECT_EQ(p.next_k(false), 0u);
  const uint32_t want = model_best_k(a, 0.0, 0.010, slope, 5);
  ASSERT_GT(want, 0u);
  EXPECT_EQ(p.next_k(true), want);
}

TEST(DraftPolicy, RecentMedianKeepsTheLastValues) {
  RecentMedian<3> m;
  EXPECT_EQ(m.median(), -1.0);
  m.add(5.0);
  EXPECT_EQ(m.median(), 5.0);
  m.add(100.0);
  EXPECT_EQ(m.median(), 5.0);   // two values: the lower one (slow outliers are the high ones)
  m.add(1.0);
  EXPECT_EQ(m.median(), 5.0);
  m.add(2.0);   // 5 leaves the window: {100, 1, 2}
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(m.median(), 2.0);
}

// Measured on lavapipe (code4 prompt): the first 2-token pass took 7.3 ms (a pipeline variant compiled at
// its first dispatch), later ones 5.1-5.3 ms, plain passes 4.6 ms, draft steps 1.3 ms. One slow sample must
// not price every later 2-token pass: with the true costs K = 1 beats plain at this acceptance.
TEST(DraftPolicy, DraftPolicyPricesPassesFromRecentMediansNotOneSlowSample) {
  const double plain = 0.0046, slope = 0.0006, draft = 0.0013;
  DraftPolicy p(5, true);
  p.observe(1, 1, 0.050, 0.100);   // first use of every variant: 50 ms of drafting, a 100 ms verify
  for (int i = 0; i < 5; ++i) p.observe(0, 0, 0.0, plain);
  for (int i = 0; i < 12; ++i) p.observe(1, i % 3 != 0, draft, plain + slope);
  EXPECT_NEAR(p.pass_cost(1), plain, 1e-9);
  EXPECT_NEAR(p.pass_cost(2), plain + slope, 1e-9);
  EXPECT_NEAR(p.pass_cost(4), plain + 3 * slope, 1e-9);   // sizes never seen: the same line
  EXPECT_NEAR(p.draft_cost(), draft, 1e-9);
  const double a = p.alpha();
  const uint32_t want = model_best_k(a, draft, plain, slope, 5);
  EXPECT_GE(want, 1u) << "alpha " << a;
  EXPECT_EQ(p.next_k(), want) << "alpha " << a;

  // Drafting every round, the plain cost is measured again once it is kRefreshEvery rounds old.
  for (uint32_t i = 12; i < DraftPolicy::kRefreshEvery; ++i) {
    EXPECT_GE(p.next_k(), 1u) << "round " << i;
    p.observe(1, i % 3 != 0, draft, plain + slope);
  }
  EXPECT_EQ(p.next_k(), 0u);
  p.observe(0, 0, 0.0, plain);
  EXPECT_GE(p.next_k(), 1u);
}

// Measured on lavapipe (pycode pair, prose prompt, 92% of drafts accepted): the first drafting round of a
// run took ~2x the draft time of later ones. Decided by that round alone the policy went plain, and learned
// otherwise only from probes 8 and 16 rounds apart; the warm-up rounds keep one cold round from deciding.
TEST(DraftPolicy, DraftPolicyDoesNotLetOneColdRoundChoosePlain) {
  const double plain = 0.0075, slope = 0.0015, draft = 0.002;
  DraftPolicy p(5, true, false, 0.2);
  EXPECT_EQ(p.next_k(), 0u);
  p.observe(0, 0, 0.0, plain);
  uint32_t k = p.next_k();
  ASSERT_GE(k, 1u);
  p.observe(k, k, k * 2.5 * draft, plain + 3 * slope * k);   // cold: drafts 2.5x, the verify 3x its slope
  // What the cold round alone would choose: plain (this is what the test guards against).
  ASSERT_EQ(model_best_k(p.alpha(), 2.5 * draft, plain, 3 * slope, 5), 0u)
      << "the cold round's costs must favour plain, or this tests nothing";
  for (int round = 0; round < 40; ++round) {
    k = p.next_k();
    if (round % DraftPolicy::kRefreshEvery == DraftPolicy::kRefreshEvery - 1 && k == 0) {   // the refresh
      p.observe(0, 0, 0.0, plain);
      continue;
    }
    ASSERT_GE(k, 1u) << "round " << round << ", alpha " << p.alpha();
    p.observe(k, k, k * draft, plain + slope * k);
  }
  EXPECT_EQ(p.next_k(), model_best_k(p.alpha(), draft, plain, slope, 5));
  EXPECT_GE(p.next_k(), 4u);
}

// A process's first run: every verify size is slow the first time it is dispatched (lavapipe compiles its
// pipeline variants then), so the warm-up rounds, each of a size not seen before, are all slow. Measured on
// lavapipe (pycode pair, default prompt): warm-up rounds of K = 2, 1, 1 then ~60 plain rounds.
TEST(DraftPolicy, DraftPolicyDoesNotTimeTheFirstRoundOfEachSize) {
  const double plain = 0.0075, slope = 0.0015, draft = 0.002, cold = 4.0;   // a first dispatch: 4x its cost
  DraftPolicy p(5, true, false, 0.2);
  p.observe(0, 0, 0.0, plain);
  p.observe(2, 1, cold * 2 * draft, cold * (plain + 2 * slope));   // the first 3-token pass
  p.observe(1, 1, cold * draft, cold * (plain + slope));           // the first 2-token pass
  p.observe(1, 1, draft, plain + slope);
  EXPECT_NEAR(p.draft_cost(), draft, 1e-12);   // the cold rounds priced nothing
  EXPECT_NEAR(p.pass_cost(3), plain + 2 * slope, 1e-12);
  for (int i = 0; i < 2; ++i) {
    EXPECT_GE(p.next_k(), 1u) << "warm-up: two of three timed rounds still to come";
    p.observe(1, 1, draft, plain + slope);
  }
  const uint32_t want = model_best_k(p.alpha(), draft, plain, slope, 5);
  ASSERT_GE(want, 1u) << "alpha " << p.alpha() << ": drafting must win, or this tests nothing";
  EXPECT_EQ(p.next_k(), want);
}

// After plain rounds a draft model catches up on what it has not seen before drafting (5 ms here): the
// first drafting round pays it, so near break-even the policy stays plain instead of flipping back and forth.
TEST(DraftPolicy, DraftPolicyChargesTheCatchUpToLeavingPlainDecoding) {
  const double plain = 0.010, slope = 0.001, draft = 0.002, catch_up = 0.005;
  DraftPolicy p(5, true);
  for (int i = 0; i < 9; ++i) p.observe(0, 0, 0.0, plain);
  for (int i = 0; i < 9; ++i) p.observe(2, 1, 2 * draft, plain + 2 * slope, catch_up);
  const double a = p.alpha();
  auto want = [&](double switch_s) { return model_best_k(a, draft, plain, slope, 5, switch_s); };
  ASSERT_GE(want(0.0), 1u) << "alpha " << a << ": drafting must win once caught up, or this tests nothing";
  ASSERT_EQ(want(catch_up), 0u) << "alpha " << a;
  EXPECT_EQ(p.next_k(), want(0.0));   // caught up: keep drafting
  p.observe(0, 0, 0.0, plain);
  EXPECT_EQ(p.next_k(), 0u);          // behind: the catch-up makes plain the better round
}

}  // namespace
}  // namespace vkspec::test
