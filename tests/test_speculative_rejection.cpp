// Rejection sampling (SpecSampling::Rejection) end to end on the stories pair.
#include "tests/host_sampler.h"
#include "tests/speculative_helpers.h"
#include "tests/stats.h"

namespace vkspec::test {
namespace {

// Rejection sampling (SpecSampling::Rejection) end to end, on the stories pair: the two tokens after a fixed
// first one follow the target's own distribution (their joint, from its logits and the host Sampler), with the
// draft model's drafts (q rows) and with prompt lookup's (q one-hot), chains of 3, and trees: the draft model's
// (two independent draws below each node, tried in turn) and the lookup's (two earlier continuations); the
// first position is a draft's at the rate the theory gives (a chain: sum of min(p, q), the most any
// verification of one draft can accept; two draws: a1 + (1 - a1) sum min(r, q), r the residual; the lookup's
// two: p of either). Power: the same counts refuse the joint at temperature 1.2 instead of 0.8. The kernel's
// own tests are in test_rejection.
using Pair2 = std::pair<uint32_t, uint32_t>;

std::map<uint32_t, double> next_distribution(LlamaModel& m, const std::vector<uint32_t>& context, const SamplingParams& p) {
  const int seq = m.kv().new_sequence();
  m.forward(seq, context, Logits::Last);
  const Candidates c = Sampler(p).distribution(std::span<const float>(m.logits(0), m.hparams().n_vocab), context);
  m.kv().free_sequence(seq);
  std::map<uint32_t, double> d;
  for (size_t i = 0; i < c.ids.size(); ++i) d[c.ids[i]] = c.probs[i];
  return d;
}

// The joint distribution of the two tokens after `context` (second tokens after rare first ones pooled).
std::map<Pair2, double> joint_distribution(LlamaModel& m, std::vector<uint32_t> context, const SamplingParams& p,
                                           uint64_t n) {
  std::map<Pair2, double> joint;
  for (const auto& [x, px] : next_distribution(m, context, p)) {
    if (px * double(n) < 5) {
      joint[{x, UINT32_MAX}] = px;   // a cell of its own, pooled by chi_square
      continue;
    }
    context.push_back(x);
    for (const auto& [y, py] : next_distribution(m, context, p)) joint[{x, y}] = px * py;
    context.pop_back();
  }
  return joint;
}

TEST_F(SpeculativeTest, RejectionSamplingFollowsTheTargetsDistribution) {
  StoriesPair pair;
  LlamaModel& target = pair.target;
  SamplingParams p;   // T 0.8, top-k 40, top-p 0.95, min-p 0.05
  p.spec_sampling = SpecSampling::Rejection;
  SamplingParams hot = p;   // the power checks' wrong distribution
  hot.temperature = 1.2f;
#ifdef VKSPEC_SANITIZED
  const uint64_t n_model = 300, n_lookup = 300;
#else
  const uint64_t n_model = 2000, n_lookup = 1600;
#endif
  struct Case {
    std::string name;
    std::vector<uint32_t> prompt;
    uint32_t g;
    LlamaModel* draft;
    uint64_t n;
    uint32_t k;   // K, the largest tree's nodes but its root
    bool tree;
  };
  // "One day, Lily" and its greedy continuation, then "One day," + " Lily": the lookup drafts the continuation
  const std::vector<uint32_t> story = {1, 385, 328, 432, 317}, more = plain_greedy(target, story, 8);
  std::vector<uint32_t> repeated = story;
  repeated.insert(repeated.end(), more.begin(), more.end());
  repeated.insert(repeated.end(), {385, 328, 432});
  // "One day, Lily" and a token of its continuation, "Lily" + 300, "One day," + " Lily": the lookup's tree has
  // the continuation and 300 below the root
  std::vector<uint32_t> forked = story;
  forked.insert(forked.end(), {more[0], 317, 300, 385, 328, 432});
  const std::vector<Case> cases = {{"draft model", story, 0, &pair.draft, n_model, 3, false},
                                   {"prompt lookup", repeated, 317, nullptr, n_lookup, 3, false},
                                   {"the target drafting", story, 0, &target, n_lookup / 8, 3, false},   // q = p
                                   {"draft model trees", story, 0, &pair.draft, n_model, 6, true},
                                   {"prompt lookup trees", forked, 317, nullptr, n_lookup, 10, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<uint32_t> context = c.prompt;
    const uint32_t g = c.g ? c.g : plain_greedy(target, c.prompt, 1)[0];
    context.push_back(g);
    const std::map<Pair2, double> want = joint_distribution(target, context, p, c.n);
    const std::map<Pair2, double> wrong = joint_distribution(target, context, hot, c.n);
    const std::map<uint32_t, double> p2 = next_distribution(target, context, p);
    // the first draft's acceptance: sum of min(p, q) for the draft model, p(d) for the lookup's one draft
    const auto p_of = [&](uint32_t x) { return p2.count(x) ? p2.at(x) : 0.0; };
    double expected_acceptance = 0;
    if (c.draft) {
      const std::map<uint32_t, double> q = next_distribution(*c.draft, context, p);
      for (const auto& [x, qx] : q) expected_acceptance += std::min(qx, p_of(x));
      if (c.tree) {   // a second draw against the residual r = norm(max(0, p - q))
        double z = 0, second = 0;
        for (const auto& [x, px] : p2) z += std::max(0.0, px - (q.count(x) ? q.at(x) : 0.0));
        for (const auto& [x, qx] : q) second += std::min(qx, std::max(0.0, p_of(x) - qx) / z);
        expected_acceptance += (1 - expected_acceptance) * second;
      }
    } else if (c.tree) {
      const std::optional<NgramDrafter::TreeProposal> t = NgramDrafter().propose_tree(context, c.k);
      ASSERT_TRUE(t.has_value());
      uint32_t children = 0;
      for (uint32_t i = 1; i < t->tree.n; ++i)
        if (t->tree.parent[i] == 0) expected_acceptance += p_of(t->tokens[i]), ++children;
      EXPECT_EQ(children, 2u);
    } else {
      const std::vector<uint32_t> lookup = NgramDrafter().propose(context, 3);
      ASSERT_EQ(lookup.size(), 3u);
      expected_acceptance = p2.count(lookup[0]) ? p2.at(lookup[0]) : 0.0;
    }

    const int seq = target.kv().new_sequence();
    Session session(target.hparams().n_vocab, p);
    session.prefill(target, seq, c.prompt, c.prompt);
    std::unique_ptr<Drafter> drafter = c.draft ? std::unique_ptr<Drafter>(new ModelDrafter(*c.draft, 0.0f))
                                               : std::unique_ptr<Drafter>(new NgramDrafter());
    std::map<Pair2, uint64_t> counts;
    uint64_t first_accepted = 0;
    for (uint64_t trial = 0; trial < c.n; ++trial) {
      target.kv().truncate(seq, uint32_t(c.prompt.size()));
      SamplingParams ps = p;
      ps.seed = 1000 + trial;
      session.chooser.start(ps);
      session.chooser.set_token(0, g);   // the first token fixed: the prefill's own draw replaced
      std::vector<uint32_t> ctx = c.prompt, out;
      std::vector<bool> from_draft;
      SpeculativeOptions o{c.k, 0};
      o.tree = c.tree ? DraftTree::Wide : DraftTree::Off;
      const SpeculativeStats st = generate_speculative(target, seq, *drafter, session.chooser, session.rec, ctx, o,
                                                       [&](uint32_t t, bool d) {
                             out.push_back(t), from_draft.push_back(d);
                             return out.size() < 3;
                           });
      ASSERT_EQ(out.size(), 3u);
      ASSERT_EQ(out[0], g);
      ASSERT_EQ(st.tree_rounds > 0, c.tree);
      ++counts[{out[1], out[2]}];
      first_accepted += from_draft[1];
    }
    target.kv().free_sequence(seq);
    // rare first tokens' cells: (x, any)
    std::map<Pair2, uint64_t> observed;
    for (const auto& [xy, n] : counts) observed[want.count({xy.first, UINT32_MAX}) ? Pair2{xy.first, UINT32_MAX} : xy] += n;
    const ChiSquare fit = chi_square(observed, want, c.n);
    EXPECT_TRUE(fit.fits()) << "chi2 " << fit.stat << " >= " << fit.critical << " (df " << fit.df << ")";
#ifndef VKSPEC_SANITIZED
    if (c.n >= n_lookup) {
      const ChiSquare power = chi_square(observed, wrong, c.n);
      EXPECT_FALSE(power.fits()) << "the counts do not tell T 0.8 from T 1.2: chi2 " << power.stat;
    }
#endif
    EXPECT_LT(binomial_z(first_accepted, c.n, expected_acceptance), 5.0)
        << first_accepted << " of " << c.n << " first drafts accepted, expected " << expected_acceptance;
    printf("rejection sampling, %s: first draft accepted %.3f (theory %.3f), chi2 %.1f (critical %.1f, df %u; "
           "against T 1.2: %.1f)\n", c.name.c_str(),
           double(first_accepted) / double(c.n), expected_acceptance, fit.stat, fit.critical, fit.df,
           chi_square(observed, wrong, c.n).stat);
  }
}

}  // namespace
}  // namespace vkspec::test
