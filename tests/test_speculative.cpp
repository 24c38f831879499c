// Speculative decoding (greedy verification): bit-identical tokens to plain greedy decoding for the draft
// model, n-gram and lookup-then-model drafters at K = 1, 3, 5, 8 on 8 prompts per pair; the target's paged KV after many
// rounds equals a fresh prefill of the accepted sequence with no leaked blocks; mismatched vocabularies refused.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "speculative/controller.h"
#include "speculative/draft_policy.h"
#include "tests/gguf_writer.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {

std::vector<uint32_t> plain_greedy(LlamaModel& m, const std::vector<uint32_t>& prompt, size_t n) {
  const int seq = m.kv().new_sequence();
  m.forward(seq, prompt, Logits::Last);
  std::vector<uint32_t> out;
  while (out.size() < n) {
    uint32_t t = m.argmax_id(0);
    out.push_back(t);
    if (out.size() < n) m.forward(seq, std::span<const uint32_t>(&t, 1), Logits::Last);
  }
  m.kv().free_sequence(seq);
  return out;
}

// What a decoding request holds besides the models: the token chooser and the recorder of its steps.
struct Session {
  TokenChooser chooser;
  Recorder rec;
  Session(uint32_t n_vocab, const SamplingParams& p = greedy_params())
      : chooser(gpu().ctx, gpu().pipelines, n_vocab, 4096), rec(gpu().ctx, false) {
    chooser.start(p);
  }
  static SamplingParams greedy_params() {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
  }
  // The prompt in one submission, its next token chosen into slot 0 (what generate_speculative expects).
  void prefill(LlamaModel& m, int seq, std::span<const uint32_t> tokens, std::span<const uint32_t> context) {
    decode_step(m, seq, chooser, rec, m.write_tokens(tokens), uint32_t(tokens.size()), context);
  }
};

std::vector<uint32_t> speculative_greedy(LlamaModel& m, Drafter& d, const std::vector<uint32_t>& prompt, size_t n,
                                         uint32_t k, SpeculativeStats* stats = nullptr, bool adaptive = false,
                                         const SamplingParams& p = Session::greedy_params()) {
  const int seq = m.kv().new_sequence();
  Session session(m.hparams().n_vocab, p);
  session.prefill(m, seq, prompt, prompt);
  std::vector<uint32_t> context = prompt, out;
  SpeculativeOptions opts{k, 0};
  opts.adaptive = adaptive;
  auto s = generate_speculative(m, seq, d, session.chooser, session.rec, context, opts, [&](uint32_t t) {
    out.push_back(t);
    return out.size() < n;
  });
  if (stats) *stats = s;
  m.kv().free_sequence(seq);
  return out;
}

// stories260K with only its first two layers: a real (weak) draft sharing the vocabulary.
std::string write_truncated_stories() {
  GgufFile f(shared_path("models/stories260K.gguf"));
  GgufWriter w;
  w.copy_metadata(f, [](const std::string& k) { return k == "llama.block_count"; });
  w.u32("llama.block_count", 2);
  for (auto& t : f.tensors())
    if (t.name.rfind("blk.", 0) != 0 || t.name.rfind("blk.0.", 0) == 0 || t.name.rfind("blk.1.", 0) == 0)
      w.tensor(t.name, t.dims, t.type, t.data, t.bytes);
  std::string path = ::testing::TempDir() + "/stories260K-2layers.gguf";
  w.write(path);
  return path;
}

struct Pair { std::string target, draft; std::vector<std::string> prompts; size_t n; };

// stories260K as the target and its first two layers as the draft, three sequences each.
struct StoriesPair {
  GgufFile tf{shared_path("models/stories260K.gguf")}, df{write_truncated_stories()};
  ModelOptions mo = [] {
    ModelOptions o;
    o.max_sequences = 3;
    return o;
  }();
  LlamaModel target{gpu().ctx, gpu().pipelines, tf, mo}, draft{gpu().ctx, gpu().pipelines, df, mo};
};

class SpeculativeTest : public VkTest {};

TEST_F(SpeculativeTest, GreedyParityBitForBitForEveryDrafterAndK) {
  std::vector<Pair> pairs = {
      {shared_path("models/stories260K.gguf"), write_truncated_stories(),
       {"Once upon a time", "Lily wanted to", "The little dog was", "One day, a boy", "Tom and Sue", "The sun",
        "She saw a big", "\"Hello,\" said"}, 40},
      {shared_path("models/pycode-target-f16.gguf"), shared_path("models/pycode-draft-f16.gguf"),
       {"def fibonacci(n):", "import os", "class Stack:", "for i in range(", "    def __init__(self", "# Copyright",
        "if __name__ == '__main__':", "return self."}, 20}};
#ifdef VKSPEC_SANITIZED   // the sanitizer job: three prompts of each pair reach every drafter, K and rejection path
  for (auto& p : pairs) p.prompts.resize(3);
#endif
  for (auto& p : pairs) {
    GgufFile tf(p.target), df(p.draft);
    auto tok = Tokenizer::from_gguf(tf);
    check_same_vocabulary(*tok, *Tokenizer::from_gguf(df));
    ModelOptions mo;
    LlamaModel target(gpu().ctx, gpu().pipelines, tf, mo), draft(gpu().ctx, gpu().pipelines, df, mo);
    uint64_t accepted = 0, lookup_rounds = 0, model_rounds = 0;
    const uint32_t free0 = target.kv().free_blocks();
    for (auto& prompt_text : p.prompts) {
      auto prompt = tok->encode(prompt_text, true);
      auto want = plain_greedy(target, prompt, p.n);
      for (uint32_t k : {1u, 3u, 5u, 8u}) {
        ModelDrafter md(draft, 0.0f);
        NgramDrafter ng;
        LookupThenModelDrafter both(draft, 0.0f);
        SpeculativeStats s;
        EXPECT_EQ(speculative_greedy(target, md, prompt, p.n, k, &s), want) << p.target << " '" << prompt_text << "' K=" << k;
        accepted += s.accepted;
        EXPECT_EQ(speculative_greedy(target, ng, prompt, p.n, k), want) << "ngram '" << prompt_text << "' K=" << k;
        EXPECT_EQ(speculative_greedy(target, both, prompt, p.n, k), want) << "ngram+model '" << prompt_text << "' K=" << k;
        lookup_rounds += both.lookup_rounds();
        model_rounds += both.model_rounds();
      }
      // adaptive K up to 5 (the CLI default) with --draft-p-min 0.5
      ModelDrafter md(draft, 0.5f);
      NgramDrafter ng;
      LookupThenModelDrafter both(draft, 0.5f);
      EXPECT_EQ(speculative_greedy(target, md, prompt, p.n, 5, nullptr, true), want) << "adaptive '" << prompt_text << "'";
      EXPECT_EQ(speculative_greedy(target, ng, prompt, p.n, 5, nullptr, true), want) << "adaptive ngram '" << prompt_text << "'";
      EXPECT_EQ(speculative_greedy(target, both, prompt, p.n, 5, nullptr, true), want) << "adaptive ngram+model '" << prompt_text << "'";
    }
    EXPECT_GT(accepted, 0u) << "the draft never agreed: the verify path was not exercised";
    // the small models repeat themselves: both of the combined drafter's sources must have drafted
    EXPECT_GT(lookup_rounds, 0u) << p.target;
    EXPECT_GT(model_rounds, 0u) << p.target;
    EXPECT_EQ(target.kv().free_blocks(), free0) << "KV blocks leaked";
  }
}

// After many verify rounds with drafts accepted and rejected, both caches hold exactly what a fresh prefill
// of the accepted sequence writes (next-token logits from both are bit-identical), and no block leaks.
TEST_F(SpeculativeTest, KvAfterRoundsEqualsFreshPrefill) {
  GgufFile tf(shared_path("models/stories260K.gguf")), df(write_truncated_stories());
  ModelOptions mo;
  mo.kv_block_size = 4;   // many block boundaries crossed by truncation
  mo.max_sequences = 3;
  LlamaModel target(gpu().ctx, gpu().pipelines, tf, mo), draft(gpu().ctx, gpu().pipelines, df, mo);
  const uint32_t free_t = target.kv().free_blocks(), free_d = draft.kv().free_blocks();
  std::vector<uint32_t> prompt = {1, 403, 407, 261, 378};
  const int seq = target.kv().new_sequence();
  Session session(target.hparams().n_vocab);
  session.prefill(target, seq, prompt, prompt);
  std::vector<uint32_t> context = prompt;
  size_t emitted = 0;
  {
    ModelDrafter md(draft, 0.0f);
    auto s = generate_speculative(target, seq, md, session.chooser, session.rec, context, {5, 0},
                                  [&](uint32_t) { return ++emitted < 57; });
    EXPECT_GT(s.verify_passes, 5u);
    EXPECT_LT(s.accepted, s.drafted);   // some rejections happened
    // The draft's cache after as many truncations: its logits after the accepted sequence (the drafter
    // keeps the cached prefix and runs the rest) equal a fresh prefill's, bit for bit.
    session.rec.begin();
    DraftRound round{session.rec, session.chooser};
    md.draft(context, 1, round);
    draft.record_logits_readback(session.rec, 1);
    session.rec.submit_and_wait();
    const uint32_t Vd = draft.hparams().n_vocab;
    std::vector<float> d(draft.logits(0), draft.logits(0) + Vd);
    const int fresh_d = draft.kv().new_sequence();
    draft.forward(fresh_d, context, Logits::Last);
    for (uint32_t v = 0; v < Vd; ++v) ASSERT_EQ(draft.logits(0)[v], d[v]) << "draft KV differs from a fresh prefill";
    draft.kv().free_sequence(fresh_d);
  }
  EXPECT_EQ(draft.kv().free_blocks(), free_d);   // the drafter released its sequence
  ASSERT_EQ(target.kv().length(seq), context.size() - 1);   // the last emitted token is not in the cache yet
  const uint32_t last = context.back(), V = target.hparams().n_vocab;
  target.forward(seq, std::span<const uint32_t>(&last, 1), Logits::Last);
  std::vector<float> a(target.logits(0), target.logits(0) + V);
  const int fresh = target.kv().new_sequence();
  target.forward(fresh, context, Logits::Last);
  for (uint32_t v = 0; v < V; ++v) ASSERT_EQ(target.logits(0)[v], a[v]);
  target.kv().free_sequence(seq);
  target.kv().free_sequence(fresh);
  EXPECT_EQ(target.kv().free_blocks(), free_t);
}

// The shape of a step: a plain decoding step is one submission (one host wait), and so is a speculative
// round with a draft model or n-gram drafts, for greedy, penalized greedy and sampling (top-k 40 and off),
// with and without --draft-p-min. Counted process-wide, so a stray submission by any component would show.
TEST_F(SpeculativeTest, OneSubmissionPerStepAndPerRound) {
  StoriesPair pair;
  LlamaModel &target = pair.target, &draft = pair.draft;
  const uint32_t V = target.hparams().n_vocab;
  SpecAcceptor acceptor(gpu().ctx, gpu().pipelines, V, LlamaModel::kMaxBatch - 1);
  const std::vector<uint32_t> prompt = {1, 403, 407, 261, 378};
  SamplingParams greedy = Session::greedy_params(), penalized = greedy, sampled, top_k_off;
  penalized.repeat_penalty = 1.3f;
  sampled.seed = 5;
  top_k_off.seed = 6;
  top_k_off.top_k = 0;
  for (const SamplingParams& p : {greedy, penalized, sampled, top_k_off}) {
    Session session(V, p);
    const int seq = target.kv().new_sequence();
    std::vector<uint32_t> context = prompt;
    uint64_t before = Recorder::total_submissions();
    session.prefill(target, seq, prompt, context);
    EXPECT_EQ(Recorder::total_submissions() - before, 1u) << "prefill and the first choice";
    before = Recorder::total_submissions();
    for (int i = 0; i < 10; ++i) {
      context.push_back(session.chooser.token(0));
      decode_step(target, seq, session.chooser, session.rec, session.chooser.input(0), 1, context);
    }
    EXPECT_EQ(Recorder::total_submissions() - before, 10u) << "plain steps, temperature " << p.temperature;
    ModelDrafter md(draft, 0.0f), md_pmin(draft, 0.5f);
    NgramDrafter ng;
    for (Drafter* d : std::initializer_list<Drafter*>{&md, &md_pmin, &ng}) {
      size_t emitted = 0;
      before = Recorder::total_submissions();
      const SpeculativeStats st = generate_speculative(target, seq, *d, session.chooser, session.rec, context,
                                                       {5, 0, &acceptor}, [&](uint32_t) { return ++emitted < 20; });
      EXPECT_GT(st.verify_passes, 1u);
      EXPECT_EQ(Recorder::total_submissions() - before, st.verify_passes)
          << d->name() << " p_min " << d->p_min() << ", temperature " << p.temperature;
      // the last emitted token is not in the cache yet: run it, its successor chosen into slot 0
      const uint32_t last = context.back();
      session.prefill(target, seq, std::span<const uint32_t>(&last, 1), context);
    }
    target.kv().free_sequence(seq);
  }
}

// A draft model that has not seen part of the context (the prompt, tokens decoded plainly) catches up on it
// in a pass of its own, timed apart: the adaptive policy prices drafts per step, and a first round that
// priced the prompt's catch-up as drafting stopped speculation for the rest of a completion. Its drafts are
// still its own greedy continuation, split or not (batch invariance).
TEST_F(SpeculativeTest, DraftCatchUpIsTimedApartAndDraftsStayTheDraftsGreedyContinuation) {
  StoriesPair pair;
  std::vector<uint32_t> context = {1, 403, 407, 261, 378, 300, 270};
  ModelDrafter md(pair.draft, 0.0f);
  Session session(pair.draft.hparams().n_vocab);
  for (const uint32_t k : {4u, 3u}) {
    // round 1: 7 unseen tokens; round 2: the last draft and one new token (2 unseen: no separate pass)
    const std::vector<uint32_t> want = plain_greedy(pair.draft, context, k);
    DraftRound round{session.rec, session.chooser};
    session.rec.begin();
    ASSERT_EQ(md.draft(context, k, round), k);
    session.rec.submit_and_wait();
    std::vector<uint32_t> drafts;
    for (uint32_t i = 0; i < k; ++i) drafts.push_back(session.chooser.token(i + 1));
    EXPECT_EQ(drafts, want) << "k " << k;
    if (session.rec.can_mark()) {
      EXPECT_EQ(round.catch_up_end >= 0, k == 4u) << "k " << k;
    }
    md.round_done(drafts);
    context.insert(context.end(), drafts.begin(), drafts.end());
    context.push_back(want.front());   // the target's next choice (any token)
  }
}

// Two sequences' drafts recorded together (record_batched_drafts, as the batch engine does): each gets its
// draft model's greedy continuation, and the rows counted are every step's, the first step's catch-ups
// included (the batch's draft-step cost line is fitted over them).
TEST_F(SpeculativeTest, BatchedDraftsCountTheirCatchUpRows) {
  StoriesPair pair;
  const std::vector<uint32_t> a = {1, 403, 407, 261, 378, 300, 270}, b = {1, 300, 270};
  const uint32_t V = pair.draft.hparams().n_vocab;
  ModelDrafter da(pair.draft, 0.0f), db(pair.draft, 0.0f);
  Session sa(V), sb(V);
  Arena arena(gpu().ctx, MemoryKind::Device, 2 * VkDeviceSize(V) * 4 + 4096);
  const Slice logits = arena.alloc(2 * VkDeviceSize(V) * 4, "two draft rows");
  BatchedChoices choices(gpu().ctx, gpu().pipelines, V, 2);
  DraftRound ra{sa.rec, sa.chooser}, rb{sa.rec, sb.chooser};   // one recorder: one submission
  std::vector<BatchedDraft> jobs = {{&da, a, 3, &ra}, {&db, b, 2, &rb}};
  sa.rec.begin();
  const uint32_t rows = record_batched_drafts(pair.draft, jobs, logits, choices);
  sa.rec.submit_and_wait();
  EXPECT_EQ(rows, (7u + 3u) + 2u + 1u) << "step 0: both contexts; step 1: a draft each; step 2: a's";
  EXPECT_EQ(jobs[0].k, 3u);
  EXPECT_EQ(jobs[1].k, 2u);
  const std::vector<uint32_t> want_a = plain_greedy(pair.draft, a, 3), want_b = plain_greedy(pair.draft, b, 2);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(sa.chooser.token(i + 1), want_a[i]) << "draft " << i << " of a";
  for (uint32_t i = 0; i < 2; ++i) EXPECT_EQ(sb.chooser.token(i + 1), want_b[i]) << "draft " << i << " of b";
}

// Two-sample chi-square (homogeneity) of token counts from two samplers; categories whose combined count is
// below 10 are pooled. Critical value at significance ~1e-6 (Wilson-Hilferty, z = 4.75); seeds are fixed.
// Returns the number of categories compared.
int expect_same_distribution(const std::map<uint32_t, int>& a, const std::map<uint32_t, int>& b, int n,
                             const std::string& what) {
  std::map<uint32_t, std::pair<int, int>> both;
  for (auto [t, c] : a) both[t].first += c;
  for (auto [t, c] : b) both[t].second += c;
  double stat = 0;
  int cats = 0, pool_a = 0, pool_b = 0;
  auto add = [&](int ca, int cb) {
    const double e = (ca + cb) / 2.0;   // equal sample sizes
    stat += (ca - e) * (ca - e) / e + (cb - e) * (cb - e) / e;
    ++cats;
  };
  for (auto [t, c] : both) {
    if (c.first + c.second < 10) { pool_a += c.first; pool_b += c.second; continue; }
    add(c.first, c.second);
  }
  if (pool_a + pool_b > 0) add(pool_a, pool_b);
  const int df = std::max(cats - 1, 1);
  const double z = 4.75, k = 2.0 / (9.0 * df), crit = df * std::pow(1 - k + z * std::sqrt(k), 3);
  EXPECT_LT(stat, crit) << what << ": chi2=" << stat << " df=" << df << " over " << n << " seeds";
  return cats;
}

// A drafter whose sampled tokens are compared with plain sampling; `every_setting`: at every setting, else
// at T = 0.8 only.
struct SampledDrafter {
  const char* name;
  Drafter* drafter;
  bool every_setting;
};

// The first three tokens after `prompt` sampled with speculation (K = 2) are distributed as without it, over
// 2000 seeds, at T = 0.8 (top-k 40, top-p 0.95) and T = 1.0 (top-p 0.9). The plain side is the host Sampler,
// an independent reference; speculation runs the device transforms (top-k 40: the shared-memory path; top-k
// off: the general path). Returns the most categories any compared position had.
int expect_sampled_like_plain(LlamaModel& target, const std::vector<uint32_t>& prompt,
                              std::span<const SampledDrafter> drafters) {
  const uint32_t V = target.hparams().n_vocab;
  SpecAcceptor acceptor(gpu().ctx, gpu().pipelines, V, 8);
  TokenChooser chooser(gpu().ctx, gpu().pipelines, V, 4096);
  Recorder rec(gpu().ctx, false);
  const int seq = target.kv().new_sequence();
  target.forward(seq, prompt, Logits::Last);
  const uint32_t last = prompt.back();
  const std::vector<float> prompt_logits(target.logits(0), target.logits(0) + V);
#ifdef VKSPEC_SANITIZED   // the sanitizer job looks for memory errors on the same paths, not for statistical power
  const int n_seeds = 300, n_tokens = 3;
#else
  const int n_seeds = 2000, n_tokens = 3;
#endif
  int widest = 0;
  struct Setting { float temp; int top_k; float top_p; };
  for (Setting st : {Setting{0.8f, 40, 0.95f}, Setting{1.0f, 0, 0.9f}}) {
    if (st.temp != 0.8f && std::none_of(drafters.begin(), drafters.end(), [](auto& d) { return d.every_setting; }))
      continue;
    std::vector<std::map<uint32_t, int>> plain(n_tokens);
    std::vector<std::vector<std::map<uint32_t, int>>> spec(drafters.size(), plain);
    for (int s = 0; s < n_seeds; ++s) {
      SamplingParams sp;
      sp.temperature = st.temp;
      sp.top_k = st.top_k;
      sp.top_p = st.top_p;
      sp.min_p = 0.0f;
      sp.seed = 1000 + uint64_t(s);
      Sampler sampler(sp);
      chooser.start(sp);
      auto restart = [&] {   // back to the prompt: re-run its last token, choosing the first token as run does
        target.kv().truncate(seq, uint32_t(prompt.size() - 1));
        decode_step(target, seq, chooser, rec, target.write_tokens(std::span<const uint32_t>(&last, 1)), 1, prompt);
      };
      target.kv().truncate(seq, uint32_t(prompt.size()));
      std::vector<uint32_t> ctx = prompt;
      for (int i = 0; i < n_tokens; ++i) {
        const uint32_t t = sampler.sample({i == 0 ? prompt_logits.data() : target.logits(0), V}, ctx, ctx.size());
        plain[i][t]++;
        ctx.push_back(t);
        if (i + 1 < n_tokens) target.forward(seq, std::span<const uint32_t>(&t, 1), Logits::Last);
      }
      for (size_t d = 0; d < drafters.size(); ++d) {
        if (!drafters[d].every_setting && st.temp != 0.8f) continue;
        restart();
        std::vector<uint32_t> context = prompt;
        int i = 0;
        generate_speculative(target, seq, *drafters[d].drafter, chooser, rec, context, {2, 0, &acceptor}, [&](uint32_t t) {
          spec[d][i][t]++;
          return ++i < n_tokens;
        });
      }
    }
    for (size_t d = 0; d < drafters.size(); ++d) {
      if (!drafters[d].every_setting && st.temp != 0.8f) continue;
      for (int i = 0; i < n_tokens; ++i)
        widest = std::max(widest, expect_same_distribution(plain[i], spec[d][i], n_seeds,
                                                           "T=" + std::to_string(st.temp) + " token " +
                                                               std::to_string(i + 1) + " " + drafters[d].name));
    }
  }
  target.kv().free_sequence(seq);
  return widest;
}

// The draft model at both settings and n-gram drafts (one-hot proposals) at T = 0.8 after an open prompt;
// the lookup-then-model drafter after a prompt ending in a bigram it holds earlier, so that its rounds come
// from both sources. About 3 minutes on lavapipe: every pass is dispatch-bound.
TEST_F(SpeculativeTest, SampledTokensHaveTheTargetsDistribution) {
  StoriesPair pair;
  ModelDrafter md(pair.draft, 0.0f);
  NgramDrafter ng;
  const SampledDrafter open[] = {{"draft model", &md, true}, {"ngram", &ng, false}};
  // "One day, Lily": an open continuation
  EXPECT_GE(expect_sampled_like_plain(pair.target, {1, 385, 328, 432, 317}, open), 5)
      << "every compared position was (nearly) deterministic: the test would have no power";
  LookupThenModelDrafter both(pair.draft, 0.0f);
  const SampledDrafter mixed[] = {{"ngram+model", &both, false}};
  expect_sampled_like_plain(pair.target, {1, 385, 328, 432, 317, 385, 328}, mixed);   // "One day, Lily One day"
  EXPECT_GT(both.lookup_rounds(), 0u);
  EXPECT_GT(both.model_rounds(), 0u);
}

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
TEST(Speculative, SharedPassesPriceDraftsAtTheirShare) {
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
TEST(Speculative, PassCostLineFitsALineThroughOutliers) {
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
TEST(Speculative, SharedPassesPricedWithMeasuredCosts) {
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
TEST(Speculative, CatchUpAfterPlainRoundsPricedAtTheMeasuredDraftRow) {
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
TEST(Speculative, DraftStepsPricedAtWhatTheyAddToTheBatchStep) {
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
TEST(Speculative, ProbeWaitDoublesWhenTheNextRoundIsPlain) {
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
TEST(Speculative, NoProbeWhereMeasuredCostsRuleDraftingOut) {
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
TEST(Speculative, DraftPolicyPicksTheFastestKAndProbesAfterPlainRounds) {
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
TEST(Speculative, DraftPolicyPricesFreeDraftsByTheirVerifyPassAlone) {
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

TEST(Speculative, RecentMedianKeepsTheLastValues) {
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
TEST(Speculative, DraftPolicyPricesPassesFromRecentMediansNotOneSlowSample) {
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
TEST(Speculative, DraftPolicyDoesNotLetOneColdRoundChoosePlain) {
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
TEST(Speculative, DraftPolicyDoesNotTimeTheFirstRoundOfEachSize) {
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
TEST(Speculative, DraftPolicyChargesTheCatchUpToLeavingPlainDecoding) {
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

TEST(Speculative, NgramDrafterProposesWhatFollowedTheLongestMatch) {
  NgramDrafter ng;
  std::vector<uint32_t> ctx = {5, 6, 7, 8, 9, 1, 2, 5, 6, 7};
  EXPECT_EQ(ng.propose(ctx, 3), (std::vector<uint32_t>{8, 9, 1}));
  std::vector<uint32_t> none = {1, 2, 3, 4};
  EXPECT_TRUE(ng.propose(none, 3).empty());
}

TEST(Speculative, RefusesDraftWithAnotherVocabulary) {
  GgufFile a(shared_path("models/stories260K.gguf")), b(shared_path("models/pycode-draft-f16.gguf"));
  EXPECT_THROW(check_same_vocabulary(*Tokenizer::from_gguf(a), *Tokenizer::from_gguf(b)), Error);
}

}  // namespace
}  // namespace vkspec::test
