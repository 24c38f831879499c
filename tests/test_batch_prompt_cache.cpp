// The batch engine's prompt cache against each request run alone: a finished sequence's KV serves the next
// turn of a chat and gives way to reservations, a turn near the context takes its cached turn over, and
// cached drafters give way in the draft model's pool.
#include "tests/batch_engine_test_env.h"

namespace vkspec::test {
namespace {

// The prompt cache: a finished request's KV stays (Options::cached_sequences), so the next turn of a
// conversation (the previous prompt, its reply and a new message) prefills only what is new, and gets
// exactly the tokens of its run alone; the cache never makes a request wait (its sequences are evicted,
// least recently used first, when a reservation needs their blocks) and holds at most its size.
TEST_F(BatchEngineTest, PromptCacheServesTheNextTurnAndGivesWayToReservations) {
  auto t = target(4 + 3, 22);   // 2 running + 3 cached (+ 2 for the solo runs); a pool of 22 blocks (352 positions)
  Engine solo(t, {});
  BatchEngine batch(t, {}, {2, 64, 3});
  const auto& tok = batch.tokenizer();
  for (const float temp : {0.0f, 0.9f}) {
    SCOPED_TRACE(temp);
    SamplingParams sp;
    sp.temperature = temp;
    sp.seed = 7;
    const std::vector<uint32_t> p1 = encode(*t, "class Parser:\n    def __init__(self, text):\n");
    Outcome turn1;
    batch.submit(request(p1, sp, 24, turn1));
    drain(batch);
    ASSERT_EQ(turn1.ids.size(), 24u);
    std::vector<uint32_t> p2 = p1;
    p2.insert(p2.end(), turn1.ids.begin(), turn1.ids.end());
    const auto more = tok.encode("\n    def parse(self):\n", false, true);
    p2.insert(p2.end(), more.begin(), more.end());
    const BatchMetrics before = batch.metrics();
    Outcome turn2;
    batch.submit(request(p2, sp, 16, turn2));
    drain(batch);
    // the cache held p1 and the first 23 generated tokens (the last one was never fed back)
    EXPECT_EQ(turn2.result.reused, p1.size() + 23);
    EXPECT_EQ(batch.metrics().prefilled_tokens - before.prefilled_tokens, p2.size() - (p1.size() + 23));
    EXPECT_EQ(turn2.ids, solo.generate(p2, sp, 16, true, false).ids) << "the cached prefix changes nothing";
    EXPECT_EQ(turn1.ids, solo.generate(p1, sp, 24, true, false).ids);
    t->model->kv().check_invariants();
  }
  BatchMetrics m = batch.metrics();
  EXPECT_LE(m.cached_sequences, 3u);
  EXPECT_GT(m.kv_blocks_in_use, 0u);   // the cache holds blocks while nothing runs

  // A request that needs most of the pool (16 of 22 blocks) is admitted at once: cached sequences go.
  SamplingParams greedy;
  greedy.temperature = 0;
  Outcome big;
  auto rbig = request(std::vector<uint32_t>(200, 5), greedy, 1000, big);
  batch.submit(rbig);
  batch.step();
  EXPECT_EQ(batch.metrics().active, 1u) << "the cache made a request wait";
  EXPECT_GT(batch.metrics().cache_evictions, m.cache_evictions);
  drain(batch);
  EXPECT_EQ(big.result.stop, StopReason::Context);
  t->model->kv().check_invariants();

  // At most 3 cached sequences whatever the number of distinct prompts; each is shared when asked again.
  for (size_t i = 0; i < std::size(kPrompts); ++i) {
    Outcome o;
    batch.submit(request(encode(*t, kPrompts[i]), greedy, 4, o));
    drain(batch);
  }
  m = batch.metrics();
  EXPECT_EQ(m.cached_sequences, 3u);
  const auto last = encode(*t, kPrompts[std::size(kPrompts) - 1]);
  Outcome again;
  batch.submit(request(last, greedy, 4, again));
  drain(batch);
  EXPECT_EQ(again.result.reused, last.size() - 1);
  batch.shutdown();
  EXPECT_EQ(t->model->kv().blocks_in_use(), 0u) << "shutdown frees the cache";
  t->model->kv().check_invariants();

  // With a draft model: the target's prefix comes from the cache and so does the draft model's (the cached
  // sequence's drafter, with its draft sequence, goes to the next turn); greedy speculation gives exactly the
  // plain greedy tokens, greedy and with sampled turns beside it.
  DraftOptions o;
  o.model_path = shared_path("models/pycode-draft-f16.gguf");
  o.max = 4;
  o.policy = vkspec::DraftLengthPolicy::Fixed;   // drafts in every round: the draft model sees every turn
  BatchEngine spec(t, o, {2, 64, 3});
  EXPECT_GT(spec.metrics().draft_kv_blocks_total, 0u) << "the draft pool's size, known before any step";
  const std::vector<uint32_t> p1 = encode(*t, "def tokenize(text):\n");
  Outcome s1, s2;
  spec.submit(request(p1, greedy, 20, s1));
  drain(spec);
  EXPECT_GT(spec.metrics().draft_kv_blocks_in_use, 0u) << "the cached sequence keeps its draft sequence";
  std::vector<uint32_t> p2 = p1;
  p2.insert(p2.end(), s1.ids.begin(), s1.ids.end());
  p2.push_back(p1.back());
  const BatchMetrics before_s2 = spec.metrics();
  spec.submit(request(p2, greedy, 12, s2));
  drain(spec);
  EXPECT_GE(s2.result.reused, p1.size() + 15) << "speculative rounds leave the cache holding what was accepted";
  const uint32_t bs = t->model->kv().block_size();
  const uint64_t draft_blocks = spec.metrics().draft_kv_blocks_allocated - before_s2.draft_kv_blocks_allocated;
  EXPECT_LT(draft_blocks, (p2.size() + 12 + bs - 1) / bs) << "the draft model did not run the whole context again";
  EXPECT_EQ(s1.ids, solo.generate(p1, greedy, 20, true, false).ids);
  EXPECT_EQ(s2.ids, solo.generate(p2, greedy, 12, true, false).ids);
  EXPECT_GT(spec.metrics().drafted, 0u);
  // More turns than the cache holds, sampled and greedy, two at a time: each its solo run's tokens.
  SamplingParams warm;
  warm.temperature = 0.8f;
  warm.seed = 3;
  std::vector<std::vector<uint32_t>> prompts;
  std::vector<Outcome> outs(2 * std::size(kPrompts));
  for (size_t i = 0; i < outs.size(); ++i) {
    prompts.push_back(encode(*t, kPrompts[i % std::size(kPrompts)]));
    if (i >= std::size(kPrompts)) {   // the next turn of turn i - 6
      const auto& prev = outs[i - std::size(kPrompts)].ids;
      prompts.back().insert(prompts.back().end(), prev.begin(), prev.end());
    }
    spec.submit(request(prompts.back(), i % 2 ? warm : greedy, 10, outs[i]));
    if (i % 2) drain(spec);
  }
  Engine solo_spec(t, o);   // sampled speculation draws as the run alone with the same drafter does
  for (size_t i = 0; i < outs.size(); ++i)
    EXPECT_EQ(outs[i].ids, i % 2 ? solo_spec.generate(prompts[i], warm, 10, true, true).ids
                                 : solo.generate(prompts[i], greedy, 10, true, false).ids)
        << "turn " << i;
  spec.shutdown();
  EXPECT_EQ(spec.metrics().draft_kv_blocks_in_use, 0u) << "shutdown frees the drafters' sequences";
  t->model->kv().check_invariants();
}

// A conversation near the context with one sequence running and one cached (a pool of n_ctx positions, as
// `vkspec serve --parallel 1` sizes it): the next turn's reservation is the whole pool, so the turn before
// cannot stay cached beside it; the next turn takes it over (shares its prefix, then evicts it) instead of
// evicting it first and prefilling everything again, and gets its solo run's tokens. Also with a draft model,
// whose pool is as tight and whose cached drafter the next turn takes.
TEST_F(BatchEngineTest, TheNextTurnTakesOverItsCachedTurnBeforeWhenThePoolIsFull) {
  auto t = target(1 + 1 + 1, 16);   // running, cached, the solo runs; 16 blocks of 16 positions = n_ctx
  SamplingParams greedy;
  greedy.temperature = 0;
  for (const bool draft : {false, true}) {
    SCOPED_TRACE(draft);
    DraftOptions o;
    if (draft) {
      o.model_path = shared_path("models/pycode-draft-f16.gguf");
      o.max = 3;
      o.policy = vkspec::DraftLengthPolicy::Fixed;
    }
    BatchEngine batch(t, o, {1, 64, 1});
    const std::vector<uint32_t> p1 = encode(*t, "class Parser:\n    def __init__(self, text):\n");
    Outcome turn1, turn2;
    batch.submit(request(p1, greedy, 40, turn1));
    drain(batch);
    ASSERT_EQ(turn1.ids.size(), 40u);
    std::vector<uint32_t> p2 = p1;
    p2.insert(p2.end(), turn1.ids.begin(), turn1.ids.end());
    const auto more = batch.tokenizer().encode("\n    def parse(self):\n", false, true);
    p2.insert(p2.end(), more.begin(), more.end());
    const BatchMetrics before = batch.metrics();
    ASSERT_EQ(before.cached_sequences, 1u);
    batch.submit(request(p2, greedy, 1000, turn2));   // (reserves the whole context)
    drain(batch);
    EXPECT_GE(turn2.result.reused, p1.size() + 30) << "the turn before was evicted instead of shared";
    EXPECT_EQ(batch.metrics().prefilled_tokens - before.prefilled_tokens, p2.size() - turn2.result.reused);
    EXPECT_EQ(batch.metrics().cache_evictions, before.cache_evictions + 1);
    EXPECT_EQ(turn2.result.stop, StopReason::Context);
    t->model->kv().check_invariants();
    batch.shutdown();
    EXPECT_EQ(t->model->kv().blocks_in_use(), 0u);
    EXPECT_EQ(batch.metrics().draft_kv_blocks_in_use, 0u);
    Engine solo(t, {});
    EXPECT_EQ(turn1.ids, solo.generate(p1, greedy, 40, true, false).ids);
    EXPECT_EQ(turn2.ids, solo.generate(p2, greedy, uint32_t(turn2.ids.size()), true, false).ids);
  }
}

// With a draft model the cached sequences hold draft-pool blocks too (their drafters' sequences): they give
// way there as well. The target's pool is roomy here and the draft pool (2 sequences of 256 positions, 32
// blocks) is not: two requests of 16 blocks each run at once only if the cached drafters are evicted, and
// both finish without running out of draft blocks.
TEST_F(BatchEngineTest, CachedDraftersGiveWayInTheDraftPool) {
  auto t = target(2 + 3 + 1);   // 2 running + 3 cached + the solo runs; n_ctx blocks for each
  Engine solo(t, {});
  DraftOptions o;
  o.model_path = shared_path("models/pycode-draft-f16.gguf");
  o.max = 3;
  o.policy = vkspec::DraftLengthPolicy::Fixed;
  BatchEngine spec(t, o, {2, 64, 3});
  SamplingParams greedy;
  greedy.temperature = 0;
  for (size_t i = 0; i < 3; ++i) {
    Outcome turn;
    spec.submit(request(encode(*t, kPrompts[i]), greedy, 24, turn));
    drain(spec);
  }
  const BatchMetrics cached = spec.metrics();
  ASSERT_EQ(cached.cached_sequences, 3u);
  ASSERT_GT(cached.draft_kv_blocks_in_use, 0u);
  std::vector<uint32_t> long_prompts[2] = {std::vector<uint32_t>(200, 5), std::vector<uint32_t>(200, 7)};
  Outcome big[2];
  for (int i = 0; i < 2; ++i) spec.submit(request(long_prompts[i], greedy, 40, big[i]));
  spec.step();
  EXPECT_EQ(spec.metrics().active, 2u) << "the cached drafters made a request wait";
  EXPECT_GT(spec.metrics().cache_evictions, cached.cache_evictions);
  drain(spec);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(big[i].result.stop, StopReason::Length) << big[i].result.error;
    EXPECT_EQ(big[i].ids, solo.generate(long_prompts[i], greedy, 40, true, false).ids);
  }
  spec.shutdown();
  EXPECT_EQ(spec.metrics().draft_kv_blocks_in_use, 0u);
  t->model->kv().check_invariants();
}

}  // namespace
}  // namespace vkspec::test
