// Speculative decoding: bit-identical tokens to plain greedy decoding for the draft model, n-gram and
// lookup-then-model drafters at K = 1, 3, 5, 8 on 8 prompts per pair, and to plain sampled decoding at several
// settings and seeds; the target's paged KV after many rounds equals a fresh prefill of the accepted sequence
// with no leaked blocks; mismatched vocabularies refused. Rejection sampling end to end:
// test_speculative_rejection.
#include "constrain/gbnf.h"
#include "constrain/json_grammar.h"
#include "tests/host_sampler.h"
#include "tests/speculative_helpers.h"

namespace vkspec::test {
namespace {

std::vector<uint32_t> speculative_tokens(LlamaModel& m, Drafter& d, const std::vector<uint32_t>& prompt, size_t n,
                                         uint32_t k, SpeculativeStats* stats = nullptr, bool adaptive = false,
                                         const SamplingParams& p = Session::greedy_params()) {
  const int seq = m.kv().new_sequence();
  Session session(m.hparams().n_vocab, p);
  session.prefill(m, seq, prompt, prompt);
  std::vector<uint32_t> context = prompt, out;
  SpeculativeOptions opts{k, 0};
  opts.policy = adaptive ? vkspec::DraftLengthPolicy::Adaptive : vkspec::DraftLengthPolicy::Fixed;
  auto s = generate_speculative(m, seq, d, session.chooser, session.rec, context, opts, [&](uint32_t t) {
    out.push_back(t);
    return out.size() < n;
  });
  if (stats) *stats = s;
  m.kv().free_sequence(seq);
  return out;
}

struct Pair { std::string target, draft; std::vector<std::string> prompts; size_t n; };


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
        EXPECT_EQ(speculative_tokens(target, md, prompt, p.n, k, &s), want) << p.target << " '" << prompt_text << "' K=" << k;
        accepted += s.accepted;
        EXPECT_EQ(speculative_tokens(target, ng, prompt, p.n, k), want) << "ngram '" << prompt_text << "' K=" << k;
        EXPECT_EQ(speculative_tokens(target, both, prompt, p.n, k), want) << "ngram+model '" << prompt_text << "' K=" << k;
        lookup_rounds += both.lookup_rounds();
        model_rounds += both.model_rounds();
      }
      // adaptive K up to 5 (the CLI default) with --draft-p-min 0.5
      ModelDrafter md(draft, 0.5f);
      NgramDrafter ng;
      LookupThenModelDrafter both(draft, 0.5f);
      EXPECT_EQ(speculative_tokens(target, md, prompt, p.n, 5, nullptr, true), want) << "adaptive '" << prompt_text << "'";
      EXPECT_EQ(speculative_tokens(target, ng, prompt, p.n, 5, nullptr, true), want) << "adaptive ngram '" << prompt_text << "'";
      EXPECT_EQ(speculative_tokens(target, both, prompt, p.n, 5, nullptr, true), want) << "adaptive ngram+model '" << prompt_text << "'";
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
    md.record_steps(context, 1, round);
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
                                                       {5, 0}, [&](uint32_t) { return ++emitted < 20; });
      EXPECT_GT(st.verify_passes, 1u);
      EXPECT_EQ(Recorder::total_submissions() - before, st.verify_passes)
          << drafter_name(d->kind()) << " p_min " << d->p_min() << ", temperature " << p.temperature;
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
    ASSERT_EQ(md.record_steps(context, k, round), k);
    session.rec.submit_and_wait();
    std::vector<uint32_t> drafts;
    for (uint32_t i = 0; i < k; ++i) drafts.push_back(session.chooser.token(i + 1));
    EXPECT_EQ(drafts, want) << "k " << k;
    if (session.rec.can_mark()) {
      EXPECT_EQ(round.catch_up_end >= 0, k == 4u) << "k " << k;
    }
    md.round_done(drafts, {});
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

// Sampled decoding without speculation, as vkspec run does it: every token drawn on the device after a step.
std::vector<uint32_t> plain_sampled(LlamaModel& m, const std::vector<uint32_t>& prompt, size_t n, const SamplingParams& p) {
  const int seq = m.kv().new_sequence();
  Session session(m.hparams().n_vocab, p);
  std::vector<uint32_t> context = prompt, out;
  session.prefill(m, seq, prompt, context);
  while (true) {
    out.push_back(session.chooser.token(0));
    if (out.size() == n) break;
    context.push_back(out.back());
    decode_step(m, seq, session.chooser, session.rec, session.chooser.input(0), 1, context);
  }
  m.kv().free_sequence(seq);
  return out;
}

// Sampled speculation gives the tokens of sampled decoding without it, token for token (the controller's
// Gumbel-max verification: speculative/controller.h), for every drafter, several K and adaptive K with
// --draft-p-min, at settings that take both of sample_rows' paths (top-k 40; top-k off), the penalties and a
// logit bias, over several seeds. The draft model's drafts are accepted and rejected; the target drafting for itself
// (another sequence of the same model) has every draft accepted: the draft steps draw with the noise the
// verify rows draw with, at the same positions and penalty windows. The sampler's own draws are tested
// against the exact distribution and the host Sampler in test_sampler.
TEST_F(SpeculativeTest, SampledTokensAreThoseOfSamplingWithoutSpeculation) {
  StoriesPair pair;
  LlamaModel& target = pair.target;
  struct Setting { float temp; int top_k; float top_p, min_p, penalty, frequency = 0, presence = 0; };
  const std::vector<std::vector<uint32_t>> prompts = {{1, 385, 328, 432, 317},             // "One day, Lily"
                                                      {1, 385, 328, 432, 317, 385, 328}};  // "... One day": lookups
#ifdef VKSPEC_SANITIZED
  const uint64_t n_seeds = 1;
#else
  const uint64_t n_seeds = 4;
#endif
  const size_t n = 24;
  uint64_t accepted = 0, drafted = 0, lookup_rounds = 0, model_rounds = 0, self_drafted = 0;
  const uint32_t free0 = target.kv().free_blocks();
  for (Setting st : {Setting{0.8f, 40, 0.95f, 0.05f, 1.0f}, Setting{1.0f, 0, 0.9f, 0.0f, 1.0f},
                     Setting{0.7f, 40, 1.0f, 0.0f, 1.3f, 0.4f, 0.3f}})
    for (const auto& prompt : prompts)
      for (uint64_t seed = 0; seed < n_seeds; ++seed) {
        SamplingParams p;
        p.temperature = st.temp, p.top_k = st.top_k, p.top_p = st.top_p, p.min_p = st.min_p;
        p.repeat_penalty = st.penalty, p.seed = 100 + seed;
        p.frequency_penalty = st.frequency, p.presence_penalty = st.presence;
        if (st.penalty != 1.0f) p.logit_bias = {{328, 1.5f}, {317, -2.0f}};   // tokens of the prompts
        SCOPED_TRACE("T " + std::to_string(st.temp) + " top-k " + std::to_string(st.top_k) + " penalty " +
                     std::to_string(st.penalty) + " seed " + std::to_string(p.seed) + " prompt of " +
                     std::to_string(prompt.size()));
        const std::vector<uint32_t> want = plain_sampled(target, prompt, n, p);
        for (uint32_t k : {1u, 3u, 5u}) {
          ModelDrafter md(pair.draft, 0.0f);
          NgramDrafter ng;
          LookupThenModelDrafter both(pair.draft, 0.0f);
          SpeculativeStats s;
          EXPECT_EQ(speculative_tokens(target, md, prompt, n, k, &s, false, p), want) << "draft model K=" << k;
          accepted += s.accepted, drafted += s.drafted;
          EXPECT_EQ(speculative_tokens(target, ng, prompt, n, k, nullptr, false, p), want) << "ngram K=" << k;
          EXPECT_EQ(speculative_tokens(target, both, prompt, n, k, nullptr, false, p), want) << "ngram+model K=" << k;
          lookup_rounds += both.lookup_rounds(), model_rounds += both.model_rounds();
        }
        ModelDrafter md(pair.draft, 0.3f);
        EXPECT_EQ(speculative_tokens(target, md, prompt, n, 5, nullptr, true, p), want) << "adaptive, p_min 0.3";
        ModelDrafter self(target, 0.0f);
        SpeculativeStats s;
        EXPECT_EQ(speculative_tokens(target, self, prompt, n, 4, &s, false, p), want) << "the target drafting";
        EXPECT_EQ(s.accepted, s.drafted) << "the target's own drafts rejected";
        self_drafted += s.drafted;
      }
  EXPECT_GT(accepted, 0u);
  EXPECT_LT(accepted, drafted) << "every draft accepted: the rejection path was not exercised";
  EXPECT_GT(self_drafted, 0u);
  EXPECT_GT(lookup_rounds, 0u);
  EXPECT_GT(model_rounds, 0u);
  EXPECT_EQ(target.kv().free_blocks(), free0) << "KV blocks leaked";
}

// Constrained generation speculates with prompt lookup: each verify row is masked after the drafts before it
// and drafts the constraint refuses are dropped, so the tokens are plain constrained decoding's, greedy and
// sampled, in JSON mode and with a GBNF grammar; a draft model's drafts (chosen on the device) are refused.
namespace {
// p's tokens under `constraint` (JSON mode's or a grammar's), plainly or with drafter d.
std::vector<uint32_t> constrained_tokens(LlamaModel& m, const Tokenizer& tok, TokenConstraint& json, Drafter* d,
                                         const std::vector<uint32_t>& prompt, size_t n, const SamplingParams& p,
                                         SpeculativeStats* stats = nullptr) {
  const int seq = m.kv().new_sequence();
  TokenChooser ch(gpu().ctx, gpu().pipelines, m.hparams().n_vocab, 4096);
  Recorder rec(gpu().ctx, false);
  ch.start(p, &json);
  std::vector<uint32_t> context = prompt, out;
  uint32_t t = decode_step(m, seq, ch, rec, m.write_tokens(prompt), uint32_t(prompt.size()), context);
  const auto emit = [&](uint32_t token, bool) {
    json.accept(token);
    out.push_back(token);
    return out.size() < n && !tok.is_eog(token);
  };
  if (d) {
    SpeculativeStats s = generate_speculative(m, seq, *d, ch, rec, context, SpeculativeOptions{5, 0}, emit);
    if (stats) *stats = s;
  } else {
    while (emit(t, false)) {
      context.push_back(t);
      t = decode_step(m, seq, ch, rec, ch.input(0), 1, context);
    }
  }
  m.kv().free_sequence(seq);
  return out;
}
}  // namespace

TEST_F(SpeculativeTest, ConstrainedDecodingWithPromptLookupKeepsItsTokens) {
  GgufFile f(shared_path("models/pycode-target-f16.gguf"));
  const auto tok = Tokenizer::from_gguf(f);
  const auto vocab = std::make_shared<const VocabBytes>(*tok);
  const auto json = std::make_shared<const JsonGrammar>(vocab);
  const auto list = Gbnf::parse("root ::= (\"    \" [a-z_]+ \" = \" [0-9]+ \"\\n\")+\n");
  LlamaModel target(gpu().ctx, gpu().pipelines, f, ModelOptions{});
  const uint32_t free0 = target.kv().free_blocks();
  uint64_t accepted = 0, drafted = 0;
#ifdef VKSPEC_SANITIZED   // (several times slower there)
  const std::vector<const char*> texts = {"CONFIG = "};
#else
  const std::vector<const char*> texts = {"CONFIG = ", "x = [", "class Config:\n"};
#endif
  for (const char* text : texts)
    for (const float temp : {0.0f, 0.8f})
      for (const bool grammar : {false, true}) {
        SCOPED_TRACE(std::string(text) + " T " + std::to_string(temp) + (grammar ? " grammar" : " JSON mode"));
        SamplingParams p;
        p.temperature = temp;
        p.seed = 5;
        p.json_object = !grammar;
        p.grammar = grammar ? "(the list grammar)" : "";
        const auto make = [&]() -> std::unique_ptr<TokenConstraint> {
          if (grammar) return std::make_unique<GbnfConstraint>(list, vocab);
          return std::make_unique<JsonConstraint>(json);
        };
        const std::vector<uint32_t> prompt = tok->encode(text, true);
        const auto plain = make(), spec = make();
        const auto want = constrained_tokens(target, *tok, *plain, nullptr, prompt, 96, p);
        NgramDrafter ng;
        SpeculativeStats s;
        EXPECT_EQ(constrained_tokens(target, *tok, *spec, &ng, prompt, 96, p, &s), want);
        accepted += s.accepted, drafted += s.drafted;
      }
  EXPECT_GT(accepted, 0u);
  EXPECT_EQ(target.kv().free_blocks(), free0) << "KV blocks leaked";
  SamplingParams p;
  p.json_object = true;
  ModelDrafter md(target, 0.0f);
  JsonConstraint c(json);
  EXPECT_THROW(constrained_tokens(target, *tok, c, &md, tok->encode("x = [", true), 8, p), Error);
  printf("constrained decoding with prompt lookup: %llu of %llu drafts accepted\n", (unsigned long long)accepted,
         (unsigned long long)drafted);
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
