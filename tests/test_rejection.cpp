// Rejection sampling's verdict kernel (shaders/spec_accept.comp) on constructed p and q rows, against the
// theory (Leviathan et al. 2023, Theorem 1; the design's D10 test): a draft d ~ q is accepted with probability
// min(1, p(d) / q(d)); a rejection draws from norm(max(0, p - q)); so the token at each position follows p.
// Checked with binomial z-scores and chi-square tests (significance ~1e-6), each with its power: the same
// counts refuse the distribution a wrong verdict would give. Also: host drafts (q one-hot), a chain's later
// rows and its bonus row, --draft-p-min's cut, non-finite rows; a token tree's siblings tried in turn. The end-to-end tests (the models' tokens
// against plain sampling's distribution) are in test_speculative.
#include <array>
#include <map>
#include <random>

#include "runtime/rng.h"
#include "runtime/token_tree.h"
#include "tests/stats.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {

constexpr uint32_t V = 12;
constexpr uint32_t kUnwritten = 1000;   // what a verdict slot holds when the kernel leaves it
constexpr uint64_t kSeed = 7;

// p > q at 0, 2, 5, 8; p < q at 1, 3, 6, 7, 9, 11; equal at 4, 10; p(3) = 0 (always rejected), q(8) = 0.
const std::vector<float> kP = {0.20f, 0.05f, 0.15f, 0.00f, 0.10f, 0.25f, 0.05f, 0.02f, 0.08f, 0.05f, 0.05f, 0.00f};
const std::vector<float> kQ = {0.05f, 0.20f, 0.10f, 0.10f, 0.10f, 0.05f, 0.15f, 0.05f, 0.00f, 0.10f, 0.05f, 0.05f};

std::vector<float> rotated(const std::vector<float>& v, uint32_t by) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[(i + by) % v.size()] = v[i];
  return r;
}
std::map<uint32_t, double> as_dist(const std::vector<float>& w) {
  double s = 0;
  for (float x : w) s += x;
  std::map<uint32_t, double> d;
  for (uint32_t i = 0; i < w.size(); ++i)
    if (w[i] > 0) d[i] = w[i] / s;
  return d;
}
std::vector<float> residual(const std::vector<float>& p, const std::vector<float>& q) {
  std::vector<float> r(p.size());
  for (size_t i = 0; i < p.size(); ++i) r[i] = std::max(0.0f, p[i] - q[i]);
  return r;
}

struct Trials {
  std::vector<std::vector<float>> p, q;   // k + 1 rows and k rows (q empty: host drafts, one-hot)
  std::vector<std::vector<uint32_t>> drafts;   // [trial][k]
  float p_min = 0, top_prob = 1;   // every draft's top probability, but draft 2's: low_top_prob
  float low_top_prob = 1;
  uint32_t entering = kUnwritten;  // the verdict slots before the kernel (sample_rows' draws)
  const TokenTree* tree = nullptr; // the drafts are its nodes 1..k (p: a row per node; q: per draft slot)
};

class RejectionTest : public VkTest {
 protected:
  // Each trial's verdict slots (tokens; `nodes`: their aux, the accepted nodes), trial t at positions 32 t ..
  // (independent numbers).
  std::vector<std::vector<uint32_t>> verdicts(const Trials& t, std::vector<std::vector<uint32_t>>* nodes = nullptr) {
    const uint32_t k = uint32_t(t.p.size()) - 1, n = uint32_t(t.drafts.size()), S = k + 1;
    std::vector<float> p, q;
    for (const auto& r : t.p) p.insert(p.end(), r.begin(), r.end());
    for (const auto& r : t.q) q.insert(q.end(), r.begin(), r.end());
    std::vector<uint32_t> slots(size_t(n) * S * 2), entering(size_t(n) * S * 2);
    for (uint32_t i = 0; i < n; ++i)
      for (uint32_t j = 0; j < k; ++j) {
        const float top = j == 1 ? t.low_top_prob : t.top_prob;
        slots[(size_t(i) * S + j + 1) * 2] = t.drafts[i][j];
        std::memcpy(&slots[(size_t(i) * S + j + 1) * 2 + 1], &top, 4);
      }
    for (size_t i = 0; i < entering.size(); i += 2) entering[i] = t.entering;
    const Slice pb = upload(p), qb = q.empty() ? Slice{} : upload(q), sb = upload(slots), vb = upload(entering);
    Kernels kernels(gpu().ctx, gpu().pipelines);
    const VkDeviceSize slot_bytes = 8;
    const std::array<uint32_t, 2> parents = t.tree ? t.tree->parent_nibbles() : std::array<uint32_t, 2>{};
    for (uint32_t first = 0; first < n; first += 2048)
      run([&](Recorder& r) {
        for (uint32_t i = first; i < std::min(n, first + 2048); ++i) {
          const contract::SpecAcceptPC pc{pb.address, qb ? qb.address : 0, sb.sub(i * S * slot_bytes, S * slot_bytes).address,
                                          vb.sub(i * S * slot_bytes, S * slot_bytes).address, kSeed, V, k, 32 * i, t.p_min,
                                          t.tree ? 1u : 0u, parents[0], parents[1]};
          kernels.spec_accept(r, pc);
        }
      });
    const std::vector<uint32_t> out = download<uint32_t>(vb, entering.size());
    std::vector<std::vector<uint32_t>> v(n, std::vector<uint32_t>(S));
    for (uint32_t i = 0; i < n; ++i)
      for (uint32_t j = 0; j < S; ++j) v[i][j] = out[(size_t(i) * S + j) * 2];
    if (nodes) {
      nodes->assign(n, std::vector<uint32_t>(S));
      for (uint32_t i = 0; i < n; ++i)
        for (uint32_t j = 0; j < S; ++j) (*nodes)[i][j] = out[(size_t(i) * S + j) * 2 + 1];
    }
    return v;
  }
};

uint32_t draw_from(const std::vector<float>& w, std::mt19937& rng) {
  std::discrete_distribution<uint32_t> d(w.begin(), w.end());
  return d(rng);
}

// A fixed draft d is accepted with probability min(1, p(d) / q(d)), each d; the tokens drawn at the rejections
// follow the residual norm(max(0, p - q)), and never repeat the rejected draft.
TEST_F(RejectionTest, AcceptsWithProbabilityMinOfPOverQAndDrawsTheResidual) {
  const uint32_t n = 1500;
  std::map<uint32_t, uint64_t> residual_counts;
  uint64_t rejections = 0;
  for (uint32_t d = 0; d < V; ++d) {
    if (kQ[d] == 0) continue;   // never drafted
    Trials t{{kP, kP}, {kQ}, std::vector<std::vector<uint32_t>>(n, {d})};
    uint64_t accepted = 0;
    for (const auto& v : verdicts(t)) {
      if (v[0] == d) {
        ++accepted;
        continue;
      }
      ASSERT_LT(v[0], V) << "draft " << d;
      ++residual_counts[v[0]], ++rejections;
    }
    const double want = std::min(1.0, double(kP[d]) / double(kQ[d]));
    EXPECT_LT(binomial_z(accepted, n, want), 5.0) << "draft " << d << ": accepted " << accepted << " of " << n
                                                  << ", expected min(1, p/q) = " << want;
  }
  const ChiSquare fit = chi_square(residual_counts, as_dist(residual(kP, kQ)), rejections);
  EXPECT_TRUE(fit.fits()) << "rejections' draws against the residual: chi2 " << fit.stat << " >= " << fit.critical;
  const ChiSquare wrong = chi_square(residual_counts, as_dist(kP), rejections);   // power: drawing from p instead
  EXPECT_FALSE(wrong.fits()) << "the rejections' draws do not tell the residual from p: chi2 " << wrong.stat;
}

// With d ~ q the token follows p (and not q); with host drafts (q one-hot at d) too, whatever d is.
TEST_F(RejectionTest, TheTokenFollowsTheTargetsDistribution) {
  std::mt19937 rng(11);
  const uint32_t n = 12000;
  Trials sampled{{kP, kP}, {kQ}, {}};
  for (uint32_t i = 0; i < n; ++i) sampled.drafts.push_back({draw_from(kQ, rng)});
  std::map<uint32_t, uint64_t> counts;
  uint64_t accepted = 0;
  const auto vs = verdicts(sampled);
  for (uint32_t i = 0; i < n; ++i) {
    ++counts[vs[i][0]];
    accepted += vs[i][0] == sampled.drafts[i][0];
  }
  const ChiSquare fit = chi_square(counts, as_dist(kP), n), wrong = chi_square(counts, as_dist(kQ), n);
  EXPECT_TRUE(fit.fits()) << "chi2 " << fit.stat << " >= " << fit.critical;
  EXPECT_FALSE(wrong.fits()) << "power: the counts do not tell p from q (chi2 " << wrong.stat << ")";
  double overlap = 0;   // the acceptance rate: sum of min(p, q)
  for (uint32_t i = 0; i < V; ++i) overlap += std::min(kP[i], kQ[i]);
  EXPECT_LT(binomial_z(accepted, n, overlap), 5.0) << accepted << " of " << n << " accepted, expected " << overlap;

  for (const uint32_t d : {5u, 3u}) {   // p(5) = 0.25; p(3) = 0: always rejected
    const uint32_t m = 6000;
    Trials host{{kP, kP}, {}, std::vector<std::vector<uint32_t>>(m, {d})};
    std::map<uint32_t, uint64_t> c;
    for (const auto& v : verdicts(host)) ++c[v[0]];
    const ChiSquare f = chi_square(c, as_dist(kP), m);
    EXPECT_TRUE(f.fits()) << "host draft " << d << ": chi2 " << f.stat << " >= " << f.critical;
    EXPECT_LT(binomial_z(c[d], m, kP[d]), 5.0) << "host draft " << d << " accepted " << c[d] << " of " << m;
  }
}

// A chain of three drafts: given the drafts before it accepted, the token at each position follows that row's
// p, the bonus row's after all three; --draft-p-min's cut (draft 2's top probability below it) verifies one
// draft only, its bonus drawn from row 1 and row 2's slot left alone.
TEST_F(RejectionTest, AChainsRowsAndItsBonusFollowTheirDistributions) {
  std::mt19937 rng(12);
  const uint32_t n = 16000;
  Trials t;
  for (uint32_t r = 0; r < 4; ++r) t.p.push_back(rotated(kP, 3 * r));
  for (uint32_t r = 0; r < 3; ++r) t.q.push_back(rotated(kQ, 3 * r));
  for (uint32_t i = 0; i < n; ++i)
    t.drafts.push_back({draw_from(t.q[0], rng), draw_from(t.q[1], rng), draw_from(t.q[2], rng)});
  std::vector<std::map<uint32_t, uint64_t>> counts(4);
  std::vector<uint64_t> reached(4, 0);
  const auto vs = verdicts(t);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t j = 0; j < 4; ++j) {
      ++counts[j][vs[i][j]], ++reached[j];
      if (j == 3 || vs[i][j] != t.drafts[i][j]) break;   // the walk ends at the first token that is not the draft
    }
  for (uint32_t j = 0; j < 4; ++j) {
    const ChiSquare fit = chi_square(counts[j], as_dist(t.p[j]), reached[j]);
    EXPECT_TRUE(fit.fits()) << "position " << j << " (" << reached[j] << " trials): chi2 " << fit.stat << " >= " << fit.critical;
    if (j < 3) {
      const ChiSquare wrong = chi_square(counts[j], as_dist(t.q[j]), reached[j]);
      EXPECT_FALSE(wrong.fits()) << "power at position " << j << ": chi2 " << wrong.stat;
    }
  }

  t.p_min = 0.5f, t.low_top_prob = 0.25f;
  std::map<uint32_t, uint64_t> bonus;
  uint64_t first_accepted = 0;
  const auto cut = verdicts(t);
  for (uint32_t i = 0; i < n; ++i) {
    EXPECT_EQ(cut[i][2], kUnwritten) << "a draft past --draft-p-min's cut was verified";
    if (cut[i][0] != t.drafts[i][0]) continue;
    ++first_accepted, ++bonus[cut[i][1]];
    if (cut[i][2] != kUnwritten) break;
  }
  const ChiSquare fit = chi_square(bonus, as_dist(t.p[1]), first_accepted);
  EXPECT_TRUE(fit.fits()) << "the bonus after the cut: chi2 " << fit.stat << " >= " << fit.critical;
}

// A tree (Stratos §2.1): the root's two children are independent draws from q_0 and are tried in turn, the
// second against the residual norm(max(0, p_0 - q_0)); each child has one child of its own. The root is left
// through some child with probability a1 + (1 - a1) a2 (a1 = sum min(p_0, q_0), a2 = sum min(r, q_0)), which a
// verdict that tried the first child only (a1) fails; the token at position 0 follows p_0, and after an
// accepted child the next token follows that child's own row. Host drafts (q one-hot at distinct tokens): child
// j is accepted with probability p_0 of its token.
TEST_F(RejectionTest, ATreesSiblingsAreTriedInTurnAndEachPositionFollowsItsRow) {
  std::mt19937 rng(13);
  TokenTree tree;   // root -> 1, 2; 1 -> 3; 2 -> 4
  tree.add(0), tree.add(0), tree.add(1), tree.add(2);
  const uint32_t n = 16000;
  Trials t;
  for (uint32_t r = 0; r < 5; ++r) t.p.push_back(rotated(kP, 2 * r));
  const std::vector<float> q0 = kQ, q1 = rotated(kQ, 5), q2 = rotated(kQ, 7);
  t.q = {q0, q0, q1, q2};   // by draft slot: what each node was drawn from
  t.tree = &tree;
  for (uint32_t i = 0; i < n; ++i)
    t.drafts.push_back({draw_from(q0, rng), draw_from(q0, rng), draw_from(q1, rng), draw_from(q2, rng)});
  std::vector<std::vector<uint32_t>> nodes;
  const auto vs = verdicts(t, &nodes);
  std::map<uint32_t, uint64_t> first;
  std::vector<std::map<uint32_t, uint64_t>> after(3);   // the token after accepted child 1 or 2
  uint64_t left = 0;
  for (uint32_t i = 0; i < n; ++i) {
    ++first[vs[i][0]];
    const uint32_t c = nodes[i][0];
    if (c == 0) continue;
    ASSERT_TRUE(c == 1 || c == 2) << "the walk left the root through node " << c;
    ASSERT_EQ(vs[i][0], t.drafts[i][c - 1]);
    ++left, ++after[c][vs[i][1]];
  }
  double a1 = 0, a2 = 0, z = 0;
  for (uint32_t v = 0; v < V; ++v) a1 += std::min(t.p[0][v], q0[v]), z += std::max(0.0f, t.p[0][v] - q0[v]);
  for (uint32_t v = 0; v < V; ++v) a2 += std::min(double(std::max(0.0f, t.p[0][v] - q0[v])) / z, double(q0[v]));
  EXPECT_LT(binomial_z(left, n, a1 + (1 - a1) * a2), 5.0) << left << " of " << n << " left the root";
  EXPECT_GT(binomial_z(left, n, a1), 5.0) << "power: the first child alone would leave it as often";
  const ChiSquare fit = chi_square(first, as_dist(t.p[0]), n), wrong = chi_square(first, as_dist(q0), n);
  EXPECT_TRUE(fit.fits()) << "position 0: chi2 " << fit.stat << " >= " << fit.critical;
  EXPECT_FALSE(wrong.fits()) << "power at position 0: chi2 " << wrong.stat;
  for (const uint32_t c : {1u, 2u}) {
    uint64_t m = 0;
    for (const auto& [token, count] : after[c]) m += count;
    const ChiSquare f = chi_square(after[c], as_dist(t.p[c]), m), w = chi_square(after[c], as_dist(t.p[0]), m);
    EXPECT_TRUE(f.fits()) << "after node " << c << " (" << m << " trials): chi2 " << f.stat << " >= " << f.critical;
    EXPECT_FALSE(w.fits()) << "power after node " << c << ": chi2 " << w.stat;
  }

  const uint32_t m = 12000;   // host drafts: tokens 5 (p_0 = 0.25 rotated) and 0 below the root
  Trials host{t.p, {}, std::vector<std::vector<uint32_t>>(m, {5, 0, 1, 2})};
  host.tree = &tree;
  std::vector<std::vector<uint32_t>> host_nodes;
  std::map<uint32_t, uint64_t> c0;
  std::array<uint64_t, 3> through{};
  const auto hv = verdicts(host, &host_nodes);
  for (uint32_t i = 0; i < m; ++i) ++c0[hv[i][0]], ++through[std::min(host_nodes[i][0], 2u)];
  EXPECT_TRUE(chi_square(c0, as_dist(host.p[0]), m).fits()) << "host drafts, position 0";
  EXPECT_LT(binomial_z(through[1], m, host.p[0][5]), 5.0) << "node 1 (token 5) accepted " << through[1] << " of " << m;
  EXPECT_LT(binomial_z(through[2], m, host.p[0][0]), 5.0) << "node 2 (token 0) accepted " << through[2] << " of " << m;

  Trials bad{t.p, t.q, std::vector<std::vector<uint32_t>>(16, t.drafts[0])};   // the root's row non-finite
  bad.tree = &tree;
  bad.entering = contract::NON_FINITE_TOKEN;
  std::vector<std::vector<uint32_t>> bad_nodes;
  const auto bv = verdicts(bad, &bad_nodes);
  for (uint32_t i = 0; i < 16; ++i) EXPECT_TRUE(bv[i][0] == contract::NON_FINITE_TOKEN && bad_nodes[i][0] == 0u);
}

// A verify row whose logits were non-finite (sample_rows drew NON_FINITE_TOKEN into its slot) keeps that
// token and ends the walk; a non-finite probability in the row a rejection draws from gives it too.
TEST_F(RejectionTest, NonFiniteRowsStayNonFinite) {
  Trials entering{{kP, kP}, {kQ}, std::vector<std::vector<uint32_t>>(64, {0})};
  entering.entering = contract::NON_FINITE_TOKEN;
  for (const auto& v : verdicts(entering)) EXPECT_EQ(v[0], contract::NON_FINITE_TOKEN);
  std::vector<float> p = kP;
  p[11] = std::numeric_limits<float>::quiet_NaN();   // draft 11 (q = 0.05): its test fails, the draw sees the NaN
  Trials nan{{p, kP}, {kQ}, std::vector<std::vector<uint32_t>>(64, {11})};
  for (const auto& v : verdicts(nan)) EXPECT_EQ(v[0], contract::NON_FINITE_TOKEN);
}

}  // namespace
}  // namespace vkspec::test
