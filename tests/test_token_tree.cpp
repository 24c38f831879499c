// Token trees (runtime/token_tree.h): one verify pass over a tree of drafts gives each node the logits of its
// root-to-node path run alone, bit for bit (both kernel families, the tree's rows split across chunks or
// not, beside another sequence's rows); the accepted path's K/V moved into place (PagedKvCache::queue_move)
// leaves the cache a fresh prefill of that path would: the next token's logits are equal bit for bit.
// Prompt lookup's trees (NgramDrafter::propose_tree) and a draft model's trees (speculative/draft_tree.h:
// their shape, the draft's passes over each depth, the accepted path moved into the draft's cache) give the
// tokens of decoding without speculation, greedy and sampled, alone and in a batch, in no more passes than
// chains (lookup's trees hold their chains) and, for the draft model's, fewer over the prompts together.
#include <bit>
#include <cmath>
#include <cstring>
#include <tuple>

#include "runtime/model.h"
#include "speculative/draft_tree.h"
#include "tests/batch_engine_test_env.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {

class TokenTreeTest : public VkTest, public ::testing::WithParamInterface<KernelFamily> {};
INSTANTIATE_TEST_SUITE_P(Families, TokenTreeTest, ::testing::Values(KernelFamily::RowPerLane, KernelFamily::Subgroup),
                         [](const auto& info) { return std::string(info.param == KernelFamily::Subgroup ? "Subgroup" : "RowPerLane"); });

// The logits rows of `rows` run as one pass (readback of n rows).
std::vector<float> pass_logits(LlamaModel& m, std::span<const SeqRows> rows, uint32_t n) {
  Recorder rec(gpu().ctx, false);
  rec.begin();
  m.record_batch(rec, rows, m.logits_rows());
  m.record_logits_readback(rec, n);
  rec.submit_and_wait();
  const uint32_t V = m.hparams().n_vocab;
  return std::vector<float>(m.logits(0), m.logits(0) + size_t(n) * V);
}

// The last row's logits after running `tokens` on a fresh sequence.
std::vector<float> alone(LlamaModel& m, const std::vector<uint32_t>& tokens) {
  const int seq = m.kv().new_sequence();
  m.forward(seq, tokens, Logits::Last);
  const uint32_t V = m.hparams().n_vocab;
  std::vector<float> out(m.logits(0), m.logits(0) + V);
  m.kv().free_sequence(seq);
  return out;
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

TEST_P(TokenTreeTest, ATreePassGivesEveryNodeItsPathsLogitsAndTheAcceptedPathMovesIntoPlace) {
  GgufFile f(shared_path("models/stories260K.gguf"));
  const std::vector<uint32_t> prompt = {1, 385, 328, 432, 317, 11, 263};
  // root g; g -> a, b; a -> c, d; b -> e; c -> f; d -> h; f -> i (depth 4); node order: parents first
  TokenTree tree;
  const uint32_t a = tree.add(0), b = tree.add(0), c = tree.add(a), d = tree.add(a), e = tree.add(b), ff = tree.add(c),
                 h = tree.add(d), i = tree.add(ff);
  const std::vector<uint32_t> tokens = {31, 285, 300, 263, 11, 347, 302, 407, 320};   // node i's token
  ASSERT_EQ(tokens.size(), tree.n);
  (void)e, (void)h, (void)i;
  for (const uint32_t ubatch : {16u, 3u}) {   // the tree in one chunk, and split across chunks
    SCOPED_TRACE("ubatch " + std::to_string(ubatch));
    ModelOptions mo;
    mo.max_sequences = 4;
    mo.kernels = GetParam();
    mo.ubatch = ubatch;
    LlamaModel m(gpu().ctx, gpu().pipelines, f, mo);
    const uint32_t V = m.hparams().n_vocab;
    const int seq = m.kv().new_sequence(), other = m.kv().new_sequence();
    m.forward(seq, prompt, Logits::None);
    m.forward(other, std::vector<uint32_t>(prompt.begin(), prompt.begin() + 3), Logits::None);
    const uint32_t base = m.kv().length(seq);
    // another sequence's two rows first, then the tree's nodes
    const std::vector<uint32_t> other_tokens = {400, 401};
    const SeqRows rows[] = {{other, m.write_tokens(other_tokens), 2, Logits::All, nullptr},
                            {seq, m.write_tokens(tokens), tree.n, Logits::All, &tree}};
    const std::vector<float> got = pass_logits(m, rows, 2 + tree.n);
    EXPECT_EQ(m.kv().length(seq), base + tree.n);
    for (uint32_t node = 0; node < tree.n; ++node) {
      std::vector<uint32_t> path;
      for (uint32_t x = node;; x = tree.parent[x]) {
        path.insert(path.begin(), tokens[x]);
        if (x == 0) break;
      }
      std::vector<uint32_t> context = prompt;
      context.insert(context.end(), path.begin(), path.end());
      EXPECT_TRUE(same_bits(got.data() + size_t(2 + node) * V, alone(m, context).data(), V)) << "node " << node;
    }
    std::vector<uint32_t> other_context(prompt.begin(), prompt.begin() + 3);
    other_context.insert(other_context.end(), other_tokens.begin(), other_tokens.end());
    EXPECT_TRUE(same_bits(got.data() + V, alone(m, other_context).data(), V)) << "the other sequence's row";

    // accept the path g, a, d, h (slots base+0, +1, +4, +7): d and h move to base+2 and base+3
    const std::vector<uint32_t> accepted = {0, a, d, h};
    for (uint32_t depth = 0; depth < accepted.size(); ++depth)
      if (accepted[depth] != depth) m.kv().queue_move(seq, base + accepted[depth], base + depth);
    m.kv().truncate(seq, base + uint32_t(accepted.size()));
    const std::vector<uint32_t> next = {500};
    const SeqRows after[] = {{seq, m.write_tokens(next), 1, Logits::Last, nullptr}};
    const std::vector<float> continued = pass_logits(m, after, 1);
    std::vector<uint32_t> context = prompt;
    for (uint32_t x : accepted) context.push_back(tokens[x]);
    context.push_back(next[0]);
    EXPECT_TRUE(same_bits(continued.data(), alone(m, context).data(), V)) << "after the accepted path moved into place";
    m.kv().free_sequence(seq);
    m.kv().free_sequence(other);
  }
}

// A draft model's tree shape (speculative/draft_tree.h) takes the most valuable nodes: its nodes' values
// (products of a0 per rank-0 step and a1 per rank-1 step along their paths) are the largest among every node
// a tree of that depth could hold, and the invariants hold (running nodes first within a depth, at most
// kMaxRunning of them, a runner-up beside its draw).
TEST(DraftTreeShape, TakesTheMostValuableNodes) {
  for (const auto& [depth, nodes, a0, a1] : {std::tuple{5u, 16u, 0.75, 0.2}, {3u, 9u, 0.6, 0.35}, {7u, 12u, 0.9, 0.05},
                                             {2u, 7u, 0.5, 0.5}}) {
    SCOPED_TRACE("depth " + std::to_string(depth) + " nodes " + std::to_string(nodes));
    const DraftTreeShape s = shape_draft_tree(depth, nodes, a0, a1, 0.0);
    s.check();
    // every rank sequence up to `depth` (a rank-1 node beside its rank-0 sibling, whose value is no smaller)
    std::vector<double> all;
    for (uint32_t d = 1; d <= depth; ++d)
      for (uint32_t bits = 0; bits < (1u << d); ++bits) all.push_back(std::pow(a1, std::popcount(bits)) * std::pow(a0, d - std::popcount(bits)));
    std::sort(all.rbegin(), all.rend());
    all.resize(std::min<size_t>(all.size(), nodes - 1));
    std::vector<double> got;
    for (uint32_t i = 1; i < s.tree.n; ++i) {
      double v = 1;
      for (uint32_t x = i; x != 0; x = s.tree.parent[x]) v *= s.rank[x] ? a1 : a0;
      EXPECT_LE(s.tree.depth[i], depth);
      got.push_back(v);
    }
    std::sort(got.rbegin(), got.rend());
    ASSERT_EQ(got.size(), all.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], all[i], 1e-12) << "node " << i;
  }
  // no runner-up worth a node: the chain; a value floor cuts it
  EXPECT_TRUE(shape_draft_tree(5, 16, 0.8, 0.0, 1e-9).tree.chain());
  EXPECT_EQ(shape_draft_tree(5, 16, 0.8, 0.0, 1e-9).tree.n, 6u);
  EXPECT_EQ(shape_draft_tree(5, 16, 0.8, 0.1, 0.5).tree.n, 4u);   // 0.8, 0.64, 0.512
  // depth 1 only: the root's draw and runner-up, the root the one running node
  const DraftTreeShape wide = shape_draft_tree(1, 16, 0.8, 0.1, 0.0);
  EXPECT_EQ(wide.tree.n, 3u);
  EXPECT_EQ(wide.steps, 1u);
}

// A draft model's tree round: each running node's children are the draft's best and second-best tokens after
// its path (the draft's tree rows attend along their ancestors), and once an accepted path through a runner-up
// moves into place in the draft's cache, its next drafts are its greedy continuation of the accepted context
// (what a fresh drafter gives).
TEST_P(TokenTreeTest, ADraftModelsTreeExpandsEachPathAndItsAcceptedPathMovesIntoItsCache) {
  GgufFile f(shared_path("models/stories260K.gguf"));
  ModelOptions mo;
  mo.max_sequences = 4;
  mo.kernels = GetParam();
  LlamaModel m(gpu().ctx, gpu().pipelines, f, mo);
  const uint32_t V = m.hparams().n_vocab;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  TokenChooser ch(gpu().ctx, gpu().pipelines, V, 4096);
  ch.start(greedy);
  Recorder rec(gpu().ctx, false);
  ModelDrafter md(m, 0.0f);
  std::vector<uint32_t> context = {1, 385, 328, 432, 317, 11, 263};
  DraftRound round{rec, ch};
  round.tree_allowed = true;
  round.model_tree = {TokenTree::kMaxNodes, 0.75, 0.2, 0.0};
  rec.begin();
  const uint32_t k = md.record_steps(context, 5, round);
  rec.submit_and_wait();
  const DraftTreeShape& s = round.shape;
  ASSERT_EQ(k + 1, s.tree.n);
  ASSERT_GT(s.steps, 2u);
  std::vector<uint32_t> drafts(k);
  for (uint32_t i = 0; i < k; ++i) drafts[i] = ch.token(i + 1);
  const auto path_of = [&](uint32_t node) {
    std::vector<uint32_t> p;
    for (uint32_t x = node; x != 0; x = s.tree.parent[x]) p.insert(p.begin(), drafts[x - 1]);
    return p;
  };
  uint32_t through_runner_up = 0;   // a running rank-1 node
  for (uint32_t u = 0; u < s.tree.n; ++u) {
    if (!s.runs(u)) continue;
    std::vector<uint32_t> ctx = context;
    const std::vector<uint32_t> p = path_of(u);
    ctx.insert(ctx.end(), p.begin(), p.end());
    const std::vector<float> logits = alone(m, ctx);
    const uint32_t best = uint32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    std::vector<float> rest = logits;
    rest[best] = -INFINITY;
    const uint32_t second = uint32_t(std::max_element(rest.begin(), rest.end()) - rest.begin());
    for (uint32_t c = u + 1; c < s.tree.n; ++c)
      if (s.tree.parent[c] == u) {
        EXPECT_EQ(drafts[c - 1], s.rank[c] ? second : best) << "node " << c << " of " << u;
      }
    if (u && s.rank[u] == 1 && !through_runner_up) through_runner_up = u;
  }
  ASSERT_NE(through_runner_up, 0u) << "no runner-up ran";
  // accept the path to the runner-up and its draws below it, to a leaf
  uint32_t leaf = through_runner_up;
  for (bool deeper = true; deeper;) {
    deeper = false;
    for (uint32_t c = leaf + 1; c < s.tree.n && !deeper; ++c)
      if (s.tree.parent[c] == leaf && s.rank[c] == 0) leaf = c, deeper = true;
  }
  std::vector<uint8_t> path(s.tree.depth[leaf] + 1);
  for (uint32_t x = leaf;; x = s.tree.parent[x]) {
    path[s.tree.depth[x]] = uint8_t(x);
    if (x == 0) break;
  }
  ASSERT_GT(path.size(), 2u);
  md.round_done(drafts, path);
  const std::vector<uint32_t> accepted = path_of(leaf);
  context.insert(context.end(), accepted.begin(), accepted.end());
  context.push_back(300);   // the target's next choice (any token)
  DraftRound chain{rec, ch};
  rec.begin();
  ASSERT_EQ(md.record_steps(context, 4, chain), 4u);
  rec.submit_and_wait();
  std::vector<uint32_t> want, ctx = context;
  for (uint32_t i = 0; i < 4; ++i) {
    const std::vector<float> logits = alone(m, ctx);
    want.push_back(uint32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    ctx.push_back(want.back());
  }
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(ch.token(i + 1), want[i]) << "draft " << i + 1 << " after the tree round";
}

// Code whose lines repeat with variations (the lookup finds several earlier matches that continue differently).
const char* kRepetitiveCode =
    "def read_config(path):\n    config = {}\n    with open(path) as f:\n        for line in f:\n"
    "            line = line.strip()\n            if not line or line.startswith(\"#\"):\n                continue\n"
    "            key, value = line.split(\"=\", 1)\n            config[key.strip()] = value.strip()\n    return config\n\n"
    "def read_list(path):\n    items = []\n    with open(path) as f:\n        for line in f:\n";

// The pycode target with room for the repetitive code and its continuation, for a context and a 2-wide batch.
std::shared_ptr<TargetModel> pycode_target() {
  TargetModel::Options to;
  to.path = shared_path("models/pycode-target-f16.gguf");
  to.n_ctx = 512;
  to.max_sequences = 3;
  return std::make_shared<TargetModel>(to);
}

TEST_F(BatchEngineTest, PromptLookupTreesGiveTheTokensOfDecodingWithoutThem) {
  auto t = pycode_target();
  const std::vector<uint32_t> prompt = encode(*t, kRepetitiveCode);
  DraftOptions o;
  o.ngram = true;
  o.max = 6;
  o.policy = DraftLengthPolicy::Fixed;
  DraftOptions chains = o;
  chains.tree = DraftTree::Off;
  Engine with_trees(t, o), with_chains(t, chains);
  const int n = 96;
  uint64_t tree_rounds = 0, sampled_tree_rounds = 0;
  for (const auto& [temp, seed] : {std::pair{0.0f, 3u}, {0.5f, 3u}, {0.5f, 4u}, {0.8f, 5u}}) {
    SCOPED_TRACE("T " + std::to_string(temp) + " seed " + std::to_string(seed));
    SamplingParams sp;
    sp.temperature = temp;
    sp.seed = seed;
    const SequenceResult plain = with_trees.generate(prompt, sp, n, true, false);
    const SequenceResult tree = with_trees.generate(prompt, sp, n, true, true);
    const SequenceResult chain = with_chains.generate(prompt, sp, n, true, true);
    EXPECT_EQ(tree.ids, plain.ids);
    EXPECT_EQ(chain.ids, plain.ids);
    EXPECT_EQ(chain.spec.tree_rounds, 0u);
    tree_rounds += tree.spec.tree_rounds;
    if (temp > 0) sampled_tree_rounds += tree.spec.tree_rounds;
    // the same tokens in fewer or as many passes: a tree holds its chain, the walk follows it where it matches
    EXPECT_LE(tree.spec.verify_passes, chain.spec.verify_passes);
    printf("T %.1f: %llu of %llu verify passes over trees, %.3f tokens per pass (chains: %.3f)\n", temp,
           (unsigned long long)tree.spec.tree_rounds, (unsigned long long)tree.spec.verify_passes,
           tree.spec.tokens_per_verify(), chain.spec.tokens_per_verify());

    BatchEngine batch(t, o, {2, 64});   // beside another request's rows
    Outcome a, b;
    batch.submit(request(prompt, sp, n, a));
    batch.submit(request(encode(*t, kPrompts[2]), sp, 24, b));
    drain(batch);
    ASSERT_TRUE(a.done && b.done);
    EXPECT_EQ(a.ids, plain.ids) << "in a batch";
    tree_rounds += a.result.spec.tree_rounds;
    t->model->kv().check_invariants();
  }
  EXPECT_GT(tree_rounds, 0u) << "no round drafted a tree";
  EXPECT_GT(sampled_tree_rounds, 0u) << "no sampled round drafted a tree";
}

// The draft model's trees (DraftTree::Wide here: Auto drafts them on GPUs only): each node's draw and
// runner-up, the 15 most likely to be reached by the measured acceptance, verified in the same pass; greedy,
// they take fewer verify passes than chains over the prompts together (a shape need not hold the whole
// chain, so not necessarily on each).
TEST_F(BatchEngineTest, DraftModelTreesGiveTheTokensOfDecodingWithoutThem) {
  auto t = pycode_target();
  DraftOptions o;
  o.model_path = shared_path("models/pycode-draft-f16.gguf");
  o.max = 5;
  o.policy = DraftLengthPolicy::Fixed;
  o.tree = DraftTree::Wide;
  DraftOptions chains = o;
  chains.tree = DraftTree::Off;
  Engine with_trees(t, o), with_chains(t, chains);
  const int n = 64;
  uint64_t tree_rounds = 0, greedy_tree_passes = 0, greedy_chain_passes = 0;
  for (const auto& [temp, prompt_text] : {std::pair{0.0f, kPrompts[0]}, {0.0f, kPrompts[3]}, {0.8f, kPrompts[0]}}) {
    SCOPED_TRACE("T " + std::to_string(temp) + " " + prompt_text);
    const std::vector<uint32_t> prompt = encode(*t, prompt_text);
    SamplingParams sp;
    sp.temperature = temp;
    sp.seed = 9;
    const SequenceResult plain = with_trees.generate(prompt, sp, n, true, false);
    const SequenceResult tree = with_trees.generate(prompt, sp, n, true, true);
    const SequenceResult chain = with_chains.generate(prompt, sp, n, true, true);
    EXPECT_EQ(tree.ids, plain.ids);
    EXPECT_EQ(chain.ids, plain.ids);
    EXPECT_EQ(tree.spec.tree_rounds, tree.spec.verify_passes) << "every round of the draft model is a tree";
    tree_rounds += tree.spec.tree_rounds;
    if (temp == 0.0f) greedy_tree_passes += tree.spec.verify_passes, greedy_chain_passes += chain.spec.verify_passes;
    printf("T %.1f: %.3f tokens per pass with trees, %.3f with chains\n", temp, tree.spec.tokens_per_verify(),
           chain.spec.tokens_per_verify());

    BatchEngine batch(t, o, {2, 64});   // the draft steps batched with another request's
    Outcome a, b;
    batch.submit(request(prompt, sp, n, a));
    batch.submit(request(encode(*t, kPrompts[2]), sp, 24, b));
    drain(batch);
    ASSERT_TRUE(a.done && b.done);
    EXPECT_EQ(a.ids, plain.ids) << "in a batch: " << a.result.error;
    EXPECT_GT(a.result.spec.tree_rounds, 0u);
    t->model->kv().check_invariants();
  }
  EXPECT_GT(tree_rounds, 0u);
  EXPECT_LT(greedy_tree_passes, greedy_chain_passes);

  // other budgets, and prompt lookup before the draft model (trees from both sources)
  const std::vector<uint32_t> code = encode(*t, kRepetitiveCode);
  for (const auto& [k, ngram] : {std::pair{3u, false}, {7u, true}}) {
    DraftOptions other = o;
    other.max = k;
    other.ngram = ngram;
    Engine e(t, other);
    for (const float temp : {0.0f, 0.8f}) {
      SCOPED_TRACE("K " + std::to_string(k) + (ngram ? ", lookup then model" : "") + ", T " + std::to_string(temp));
      SamplingParams sp;
      sp.temperature = temp;
      sp.seed = 5;
      const SequenceResult plain = e.generate(code, sp, 48, true, false);
      const SequenceResult tree = e.generate(code, sp, 48, true, true);
      EXPECT_EQ(tree.ids, plain.ids);
      EXPECT_GT(tree.spec.tree_rounds, 0u);
    }
  }
}

// Near the end of the context a draft model's tree has no more nodes than the room left for the verify pass's
// rows: generating past the context's end gives plain decoding's tokens, greedy and sampled.
TEST_F(BatchEngineTest, DraftModelTreesFitTheRoomLeftAtTheContextsEnd) {
  TargetModel::Options to;
  to.path = shared_path("models/pycode-target-f16.gguf");
  to.n_ctx = 40;
  to.max_sequences = 2;
  auto t = std::make_shared<TargetModel>(to);
  DraftOptions o;
  o.model_path = shared_path("models/pycode-draft-f16.gguf");
  o.max = 5;
  o.policy = DraftLengthPolicy::Fixed;
  o.tree = DraftTree::Wide;
  Engine e(t, o);
  const std::vector<uint32_t> prompt = encode(*t, kPrompts[0]);
  for (const float temp : {0.0f, 0.8f}) {
    SCOPED_TRACE("T " + std::to_string(temp));
    SamplingParams sp;
    sp.temperature = temp;
    sp.seed = 2;
    const SequenceResult plain = e.generate(prompt, sp, 64, true, false);
    const SequenceResult tree = e.generate(prompt, sp, 64, true, true);
    EXPECT_EQ(prompt.size() + plain.ids.size(), 40u) << "the context filled";
    EXPECT_EQ(tree.ids, plain.ids) << tree.error;
    EXPECT_GT(tree.spec.tree_rounds, 0u);
  }
}

}  // namespace
}  // namespace vkspec::test
