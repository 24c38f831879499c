// Speculative decoding (greedy verification): bit-identical tokens to plain greedy decoding for the draft
// model and n-gram drafters at K = 1, 3, 5, 8 on 8 prompts per pair; the target's paged KV after many
// rounds equals a fresh prefill of the accepted sequence with no leaked blocks; mismatched vocabularies refused.
#include <nlohmann/json.hpp>

#include "speculative/controller.h"
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

std::vector<uint32_t> speculative_greedy(LlamaModel& m, Drafter& d, const std::vector<uint32_t>& prompt, size_t n,
                                         uint32_t k, SpeculativeStats* stats = nullptr) {
  const int seq = m.kv().new_sequence();
  m.forward(seq, prompt, Logits::Last);
  std::vector<uint32_t> context = prompt, out;
  auto s = generate_speculative(m, seq, d, context, {k, 0}, [&](uint32_t t) {
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

class SpeculativeTest : public VkTest {};

TEST_F(SpeculativeTest, GreedyParityBitForBitForEveryDrafterAndK) {
  std::vector<Pair> pairs = {
      {shared_path("models/stories260K.gguf"), write_truncated_stories(),
       {"Once upon a time", "Lily wanted to", "The little dog was", "One day, a boy", "Tom and Sue", "The sun",
        "She saw a big", "\"Hello,\" said"}, 40},
      {shared_path("models/pycode-target-f16.gguf"), shared_path("models/pycode-draft-f16.gguf"),
       {"def fibonacci(n):", "import os", "class Stack:", "for i in range(", "    def __init__(self", "# Copyright",
        "if __name__ == '__main__':", "return self."}, 20}};
  for (auto& p : pairs) {
    GgufFile tf(p.target), df(p.draft);
    auto tok = Tokenizer::from_gguf(tf);
    check_same_vocabulary(*tok, *Tokenizer::from_gguf(df));
    ModelOptions mo;
    LlamaModel target(gpu().ctx, gpu().pipelines, tf, mo), draft(gpu().ctx, gpu().pipelines, df, mo);
    uint64_t accepted = 0;
    const uint32_t free0 = target.kv().free_blocks();
    for (auto& prompt_text : p.prompts) {
      auto prompt = tok->encode(prompt_text, true);
      auto want = plain_greedy(target, prompt, p.n);
      for (uint32_t k : {1u, 3u, 5u, 8u}) {
        ModelDrafter md(draft, 0.0f);
        NgramDrafter ng;
        SpeculativeStats s;
        EXPECT_EQ(speculative_greedy(target, md, prompt, p.n, k, &s), want) << p.target << " '" << prompt_text << "' K=" << k;
        accepted += s.accepted;
        EXPECT_EQ(speculative_greedy(target, ng, prompt, p.n, k), want) << "ngram '" << prompt_text << "' K=" << k;
      }
    }
    EXPECT_GT(accepted, 0u) << "the draft never agreed: the verify path was not exercised";
    EXPECT_EQ(target.kv().free_blocks(), free0) << "KV blocks leaked";
  }
}

// After many verify rounds with drafts accepted and rejected, the target's cache holds exactly what a
// fresh prefill of the accepted sequence writes: next-token logits from both are bit-identical.
TEST_F(SpeculativeTest, KvAfterRoundsEqualsFreshPrefill) {
  GgufFile tf(shared_path("models/stories260K.gguf")), df(write_truncated_stories());
  ModelOptions mo;
  mo.kv_block_size = 4;   // many block boundaries crossed by truncation
  mo.max_sequences = 3;
  LlamaModel target(gpu().ctx, gpu().pipelines, tf, mo), draft(gpu().ctx, gpu().pipelines, df, mo);
  const uint32_t free_t = target.kv().free_blocks(), free_d = draft.kv().free_blocks();
  std::vector<uint32_t> prompt = {1, 403, 407, 261, 378};
  const int seq = target.kv().new_sequence();
  target.forward(seq, prompt, Logits::Last);
  std::vector<uint32_t> context = prompt;
  size_t emitted = 0;
  {
    ModelDrafter md(draft, 0.0f);
    auto s = generate_speculative(target, seq, md, context, {5, 0}, [&](uint32_t) { return ++emitted < 57; });
    EXPECT_GT(s.verify_passes, 5u);
    EXPECT_LT(s.accepted, s.drafted);   // some rejections happened
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

TEST(Speculative, NgramDrafterProposesWhatFollowedTheLongestMatch) {
  NgramDrafter ng;
  std::vector<uint32_t> ctx = {5, 6, 7, 8, 9, 1, 2, 5, 6, 7};
  EXPECT_EQ(ng.draft(ctx, 3), (std::vector<uint32_t>{8, 9, 1}));
  std::vector<uint32_t> none = {1, 2, 3, 4};
  EXPECT_TRUE(ng.draft(none, 3).empty());
}

TEST(Speculative, RefusesDraftWithAnotherVocabulary) {
  GgufFile a(shared_path("models/stories260K.gguf")), b(shared_path("models/pycode-draft-f16.gguf"));
  EXPECT_THROW(check_same_vocabulary(*Tokenizer::from_gguf(a), *Tokenizer::from_gguf(b)), Error);
}

}  // namespace
}  // namespace vkspec::test
