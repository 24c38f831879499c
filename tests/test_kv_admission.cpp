// The batch engine's admission, KV accounting and prompt cache (engine/kv_admission.h) and its step plan
// (engine/step_plan.h), on host block tables alone: no device.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/kv_admission.h"
#include "engine/step_plan.h"
#include "core/core.h"
#include "runtime/model.h"

namespace vkspec::test {
namespace {

constexpr uint32_t kBlock = 16, kCtx = 256;

std::vector<uint32_t> tokens(uint32_t n, uint32_t first = 1) {
  std::vector<uint32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// A pool of n_blocks and 6 sequences; `prompt_cache` cached sequences at most.
struct Pool {
  KvBlockPool kv;
  KvAdmission admission;
  Pool(uint32_t n_blocks, uint32_t prompt_cache) : kv(kBlock, n_blocks, kCtx, 6), admission(kv, nullptr, kCtx, prompt_cache) {}
  // a running request's sequence grows as its passes would
  void run_to(int seq, uint32_t len) {
    kv.grow(seq, len);
    admission.check();
    kv.check_invariants();
  }
};

TEST(KvAdmission, ReservesTheLongestLengthAndWaitsWhenThePoolIsReserved) {
  Pool p(20, 0);
  // prompt 20 + max_tokens 30 + a round's drafts (kMaxBatch), within the context
  const auto r = p.admission.reservation(20, 30, false);
  EXPECT_EQ(r.target, (20 + 30 + LlamaModel::kMaxBatch + kBlock - 1) / kBlock);
  EXPECT_EQ(p.admission.reservation(20, 100000, false).target, kCtx / kBlock);   // capped at the context
  EXPECT_EQ(p.admission.reservation(20, 100000, true).target, 2u);               // an embedding: its prompt
  const auto a = p.admission.admit(tokens(20), 30, false, {}, false);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->reused, 0u);
  EXPECT_EQ(p.admission.reserved().target, r.target);
  // a prompt of the blocks left, and one token more to generate, needs more than is left: it waits
  const uint32_t left = 20 - r.target;
  const auto long_prompt = tokens(left * kBlock, 500);
  ASSERT_GT(p.admission.reservation(left * kBlock, 1, false).target, left);
  EXPECT_FALSE(p.admission.admit(long_prompt, 1, false, {}, false));
  p.run_to(a->seq, 20);
  p.admission.release(a->seq, a->reserved, {}, nullptr);   // ended, not cached
  EXPECT_EQ(p.admission.reserved().target, 0u);
  EXPECT_EQ(p.kv.blocks_in_use(), 0u);
  EXPECT_TRUE(p.admission.admit(long_prompt, 1, false, {}, false));
  EXPECT_FALSE(p.admission.could_ever_fit({21, 0}));
  EXPECT_THROW(p.admission.release(0, {1000, 0}, {}, nullptr), Error);   // more than is reserved
}

TEST(KvAdmission, SharesTheLongestHeldPrefixAndWaitsForOneBeingPrefilled) {
  Pool p(64, 0);
  const auto prompt = tokens(40);
  const auto a = p.admission.admit(prompt, 8, false, {}, false);
  ASSERT_TRUE(a);
  // a's prompt is not in its cache yet: a request starting with it waits rather than prefilling it twice
  std::vector<KvAdmission::Held> held{{a->seq, prompt, true}};
  auto same = prompt;
  same.push_back(999);
  EXPECT_FALSE(p.admission.admit(same, 8, false, held, false));
  // ...but a prefix shorter than a block is not worth waiting for
  EXPECT_TRUE(p.admission.admit(std::vector<uint32_t>{1, 2, 3, 77}, 8, false, held, false));
  p.run_to(a->seq, 40);
  held = {{a->seq, prompt, false}};
  const auto b = p.admission.admit(same, 8, false, held, false);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->reused, 40u);
  EXPECT_EQ(p.kv.block_table(b->seq), p.kv.block_table(a->seq));   // by reference: no block taken
  // the same prompt again leaves its last token to run (its logits choose the first token)
  const auto c = p.admission.admit(prompt, 8, false, held, false);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->reused, 39u);
  // an embedding computes every row: it shares nothing
  const auto e = p.admission.admit(prompt, 1, true, held, false);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->reused, 0u);
  p.admission.check();
  p.kv.check_invariants();
}

TEST(KvAdmission, ThePromptCacheGivesWayLeastRecentlyUsedFirstAndIsTakenOverLast) {
  Pool p(20, 3);
  const auto finish = [&](const std::vector<uint32_t>& prompt, uint32_t max_tokens, uint32_t generated,
                          std::span<const KvAdmission::Held> held = {}) {
    auto g = p.admission.admit(prompt, max_tokens, false, held, false);
    EXPECT_TRUE(g);
    const uint32_t reused = g->reused;
    p.run_to(g->seq, uint32_t(prompt.size()) + generated);
    auto all = prompt;
    for (uint32_t i = 0; i < generated; ++i) all.push_back(5000 + i);
    p.admission.release(g->seq, g->reserved, all, nullptr);
    return reused;
  };
  const auto chat = tokens(60, 1000), other = tokens(30, 2000), third = tokens(20, 3000);
  finish(chat, 4, 4);    // cached: 64 tokens (4 blocks)
  finish(other, 4, 4);   // 34 (3 blocks)
  finish(third, 4, 4);   // 24 (2 blocks)
  EXPECT_EQ(p.admission.cached(), 3u);
  // the next turn of the chat shares all of its turn before, and its entry is replaced by the longer one
  auto turn2 = chat;
  for (uint32_t i = 0; i < 4; ++i) turn2.push_back(5000 + i);
  turn2.push_back(7);
  EXPECT_EQ(finish(turn2, 4, 4), 64u);
  EXPECT_EQ(p.admission.cached(), 3u);
  EXPECT_EQ(p.admission.evictions(), 1u);
  // a request whose reservation (16 blocks: the context) needs the cache's blocks evicts the least recently
  // used (`other`, then `third`), never waits for them; the chat's entry, which it shares, goes last and is
  // taken over
  auto turn3 = turn2;
  for (uint32_t i = 0; i < 4; ++i) turn3.push_back(5000 + i);
  turn3.push_back(8);
  const auto g = p.admission.admit(turn3, 200, false, {}, false);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->reused, 69u);
  EXPECT_EQ(p.admission.cached(), 0u);
  EXPECT_EQ(p.admission.evictions(), 4u);
  EXPECT_EQ(p.kv.length(g->seq), 69u);
  p.admission.check();
  p.kv.check_invariants();
}

TEST(KvAdmission, CheckFindsBlocksNoReservationCovers) {
  Pool p(16, 0);
  const auto a = p.admission.admit(tokens(10), 1, false, {}, false);
  ASSERT_TRUE(a);
  const int rogue = p.kv.new_sequence();   // blocks taken outside admission
  p.kv.grow(rogue, 15 * kBlock);
  EXPECT_THROW(p.admission.check(), Error);
  p.kv.free_sequence(rogue);
  EXPECT_NO_THROW(p.admission.check());
}

TEST(StepPlan, DecodingRowsFirstThenPromptsFillTheBudget) {
  // sequences: 0 prefilling 100 tokens, 1 verifying 5 rows, 2 decoding, 3 idle, 4 a plain round,
  // 5 prefilling 10 tokens
  const std::vector<StepDemand> demand{{StepPart::Prefill, 100}, {StepPart::Verify, 5}, {StepPart::Decode, 1},
                                       {StepPart::None, 0},       {StepPart::PlainRound, 1}, {StepPart::Prefill, 10}};
  const auto expect = [](const StepPlan& plan, const std::vector<PlannedRows>& want) {
    ASSERT_EQ(plan.rows.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(plan.rows[i].sequence, want[i].sequence) << i;
      EXPECT_EQ(plan.rows[i].part, want[i].part) << i;
      EXPECT_EQ(plan.rows[i].rows, want[i].rows) << i;
    }
  };
  // a budget of 64 rows: 7 decoding rows, then 57 of the first prompt; the second waits
  StepPlan plan = build_plan(demand, 64, 32);
  expect(plan, {{1, StepPart::Verify, 5}, {2, StepPart::Decode, 1}, {4, StepPart::PlainRound, 1}, {0, StepPart::Prefill, 57}});
  EXPECT_EQ(plan.n_rows, 64u);
  EXPECT_EQ(plan.prefill_rows, 57u);
  // a budget of 8 still gives prompts a chunk (32 rows) beyond the decoding rows
  plan = build_plan(demand, 8, 32);
  expect(plan, {{1, StepPart::Verify, 5}, {2, StepPart::Decode, 1}, {4, StepPart::PlainRound, 1}, {0, StepPart::Prefill, 32}});
  // room for both prompts: each runs to its end, and its last row gives logits
  plan = build_plan(demand, 200, 32);
  expect(plan, {{1, StepPart::Verify, 5}, {2, StepPart::Decode, 1}, {4, StepPart::PlainRound, 1},
                {0, StepPart::PrefillLast, 100}, {5, StepPart::PrefillLast, 10}});
  EXPECT_EQ(plan.n_rows, 117u);
  EXPECT_TRUE(build_plan(std::vector<StepDemand>(3), 64, 32).empty());
}

}  // namespace
}  // namespace vkspec::test
