// The C API's model-level calls through libvkspec.so only: embeddings (vkspec_embed), scoring
// (vkspec_score), vocab-only models, the BOS rules of vkspec_tokenize and vkspec_context_clear, and sessions
// saved to files and loaded (vkspec_context_save, vkspec_context_load).
// References: prefixes of the same text (a causal model's rows are its prefixes' last rows), the exact
// distribution (the log-probabilities of every possible next token sum to one; the greedy token is the most
// likely), and a context's own generation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gguf/gguf.h"   // (the test edits a model file; the library is used through vkspec.h)
#include "platform/platform.h"
#include "tests/c_api_batch_helpers.h"
#include "vkspec.h"

namespace {

// vkspec_embed over passes of 13 tokens (n_ubatch): the mean over a text's tokens equals the mean of the
// last-token embeddings of its prefixes (the model is causal and every kernel batch-invariant, so row i of a
// long pass is the last row of a pass over the first i + 1 tokens); the text has more tokens than the
// readback buffer holds rows of this model (16 x 512 logits = 128 rows of 64), so the mean is read in two
// submissions. The normalized vector is the unit vector of the plain one; bad arguments are refused and the
// context still generates what it generated before.
TEST(CApiEmbed, MeanIsTheMeanOfItsPrefixesAndBadArgumentsAreRefused) {
  vkspec_model_params mp = vkspec_model_default_params();
  mp.n_ctx = 256;
  mp.n_ubatch = 13;
  vkspec_model* m = nullptr;
  ASSERT_EQ(vkspec_model_load(kStories.c_str(), &mp, &m), VKSPEC_OK) << vkspec_last_error();
  vkspec_context_params cp = vkspec_context_default_params();
  cp.sampling.temperature = 0.0f;
  vkspec_context* c = nullptr;
  ASSERT_EQ(vkspec_context_create(m, &cp, &c), VKSPEC_OK) << vkspec_last_error();
  const std::string story = "Once upon a time there was a little dog. The dog liked to run in the park with his friend the "
                            "cat. One day they found a big red ball under a tree and played with it all day until the sun "
                            "went down and they went home to sleep. ";
  const std::vector<int32_t> tokens = tokenize(m, story + story);
  ASSERT_GT(tokens.size(), 128u);
  const std::vector<int32_t> before = solo(c, tokens, 6);
  const uint32_t n_embd = vkspec_model_n_embd(m);
  ASSERT_GT(n_embd, 0u);
  std::vector<float> mean(n_embd), last(n_embd), unit(n_embd), prefix(n_embd);
  ASSERT_EQ(vkspec_embed(c, tokens.data(), tokens.size(), VKSPEC_POOLING_MEAN, 0, mean.data(), mean.size()), VKSPEC_OK)
      << vkspec_last_error();
  std::vector<double> sum(n_embd, 0.0);
  for (size_t n = 1; n <= tokens.size(); ++n) {
    ASSERT_EQ(vkspec_embed(c, tokens.data(), n, VKSPEC_POOLING_LAST, 0, prefix.data(), prefix.size()), VKSPEC_OK);
    for (uint32_t i = 0; i < n_embd; ++i) sum[i] += prefix[i];
  }
  last = prefix;
  for (uint32_t i = 0; i < n_embd; ++i) EXPECT_NEAR(mean[i], sum[i] / double(tokens.size()), 1e-5 * (1 + std::fabs(mean[i]))) << i;
  ASSERT_EQ(vkspec_embed(c, tokens.data(), tokens.size(), VKSPEC_POOLING_LAST, 1, unit.data(), unit.size()), VKSPEC_OK);
  double norm = 0;
  for (const float v : last) norm += double(v) * v;
  for (uint32_t i = 0; i < n_embd; ++i) EXPECT_NEAR(unit[i], last[i] / std::sqrt(norm), 1e-6) << i;

  const int32_t bad_id[] = {1, int32_t(vkspec_model_n_vocab(m))};
  EXPECT_EQ(vkspec_embed(c, tokens.data(), tokens.size(), VKSPEC_POOLING_LAST, 0, prefix.data(), n_embd - 1), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_embed(c, tokens.data(), tokens.size(), 7, 0, prefix.data(), n_embd), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_embed(c, tokens.data(), tokens.size(), VKSPEC_POOLING_LAST, 2, prefix.data(), n_embd), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_embed(c, tokens.data(), 0, VKSPEC_POOLING_LAST, 0, prefix.data(), n_embd), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_embed(c, bad_id, 2, VKSPEC_POOLING_LAST, 0, prefix.data(), n_embd), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_embed(c, nullptr, 2, VKSPEC_POOLING_LAST, 0, prefix.data(), n_embd), VKSPEC_ERROR_INVALID_ARGUMENT);
  std::vector<int32_t> too_long(257, tokens[0]);
  EXPECT_EQ(vkspec_embed(c, too_long.data(), too_long.size(), VKSPEC_POOLING_LAST, 0, prefix.data(), n_embd), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(solo(c, tokens, 6), before);
  EXPECT_EQ(vkspec_context_free(c), VKSPEC_OK);
  EXPECT_EQ(vkspec_model_free(m), VKSPEC_OK);
}

// vkspec_score against the exact distribution: at the last position, the probabilities of every possible
// token (scored one by one) sum to one and the greedy token is the most likely; each position's figure is
// the same whether it is scored alone or among others (batch invariance).
TEST(CApiScore, IsTheModelsNextTokenDistribution) {
  vkspec_model* m = load(kStories, 1, 64);
  vkspec_context_params cp = vkspec_context_default_params();
  cp.sampling.temperature = 0.0f;
  vkspec_context* c = nullptr;
  ASSERT_EQ(vkspec_context_create(m, &cp, &c), VKSPEC_OK) << vkspec_last_error();
  std::vector<int32_t> tokens = tokenize(m, "Once upon a time");
  const size_t first = tokens.size();
  const std::vector<int32_t> greedy = solo(c, tokens, 5);
  ASSERT_EQ(greedy.size(), 5u);
  tokens.insert(tokens.end(), greedy.begin(), greedy.end());

  std::vector<double> lp(tokens.size() - first);
  ASSERT_EQ(vkspec_score(c, tokens.data(), tokens.size(), first, lp.data()), VKSPEC_OK) << vkspec_last_error();
  for (size_t k = 0; k < lp.size(); ++k) {
    EXPECT_LE(lp[k], 0.0);
    double alone = 0;
    ASSERT_EQ(vkspec_score(c, tokens.data(), first + k + 1, first + k, &alone), VKSPEC_OK);
    EXPECT_EQ(alone, lp[k]) << "position " << first + k;
  }
  const uint32_t n_vocab = vkspec_model_n_vocab(m);
  std::vector<int32_t> probe(tokens.begin(), tokens.end());
  double total = 0, best = -INFINITY;
  for (uint32_t x = 0; x < n_vocab; ++x) {
    probe.back() = int32_t(x);
    double v = 0;
    ASSERT_EQ(vkspec_score(c, probe.data(), probe.size(), probe.size() - 1, &v), VKSPEC_OK);
    total += std::exp(v);
    best = std::max(best, v);
  }
  EXPECT_NEAR(total, 1.0, 1e-4);
  EXPECT_EQ(best, lp.back()) << "the greedy token is the most likely one";

  double out = 0;
  EXPECT_EQ(vkspec_score(c, tokens.data(), tokens.size(), 0, &out), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_score(c, tokens.data(), tokens.size(), tokens.size(), &out), VKSPEC_ERROR_INVALID_ARGUMENT);
  const std::vector<int32_t> too_long(65, tokens[1]);
  EXPECT_EQ(vkspec_score(c, too_long.data(), too_long.size(), 1, &out), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_context_free(c), VKSPEC_OK);
  EXPECT_EQ(vkspec_model_free(m), VKSPEC_OK);
}

// A vocab-only model tokenizes like the full one and has no contexts; the BOS rules of vkspec_tokenize;
// vkspec_context_clear empties the cache that the next generation would reuse.
TEST(CApi, VocabOnlyBosRulesAndClear) {
  vkspec_model* vocab = load(kStories, 1, 0, 1);
  vkspec_model* full = load(kStories, 1);
  vkspec_model_info vi, fi;
  ASSERT_EQ(vkspec_model_get_info(vocab, &vi), VKSPEC_OK);
  ASSERT_EQ(vkspec_model_get_info(full, &fi), VKSPEC_OK);
  EXPECT_EQ(vi.n_ctx, 0u);
  EXPECT_STREQ(vi.device, "");
  EXPECT_EQ(fi.n_ctx, 256u);
  EXPECT_NE(std::string(fi.device), "");
  EXPECT_EQ(vi.n_vocab, fi.n_vocab);
  EXPECT_EQ(vi.bos, fi.bos);
  EXPECT_EQ(tokenize(vocab, "Once upon a time"), tokenize(full, "Once upon a time"));
  vkspec_context_params cp = vkspec_context_default_params();
  vkspec_context* none = nullptr;
  EXPECT_EQ(vkspec_context_create(vocab, &cp, &none), VKSPEC_ERROR_NOT_SUPPORTED);
  vkspec_batch_params bp = vkspec_batch_default_params();
  bp.parallel = 1;
  vkspec_batch* nob = nullptr;
  EXPECT_EQ(vkspec_batch_create(vocab, &bp, &nob), VKSPEC_ERROR_NOT_SUPPORTED);

  ASSERT_TRUE(fi.add_bos);
  const std::string with_bos = "<s>Hello";   // stories260K's BOS text
  const std::vector<int32_t> doubled = tokenize(full, with_bos, VKSPEC_ADD_BOS);
  const std::vector<int32_t> once = tokenize(full, with_bos, VKSPEC_ADD_BOS_UNLESS_PRESENT);
  ASSERT_GE(doubled.size(), 2u);
  EXPECT_EQ(doubled[0], fi.bos);
  EXPECT_EQ(doubled[1], fi.bos);
  EXPECT_EQ(std::vector<int32_t>(doubled.begin() + 1, doubled.end()), once);
  EXPECT_EQ(tokenize(full, "Hello", VKSPEC_ADD_BOS_UNLESS_PRESENT), tokenize(full, "Hello", VKSPEC_ADD_BOS));
  size_t n = 0;
  EXPECT_EQ(vkspec_tokenize(full, "x", 1, 3, 1, nullptr, 0, &n), VKSPEC_ERROR_INVALID_ARGUMENT);

  cp.sampling.temperature = 0.0f;
  vkspec_context* c = nullptr;
  ASSERT_EQ(vkspec_context_create(full, &cp, &c), VKSPEC_OK);
  const std::vector<int32_t> prompt = tokenize(full, "Once upon a time");
  std::vector<int32_t> ids;
  vkspec_generate_params g = vkspec_generate_default_params();
  g.n_predict = 6;
  g.ignore_eos = 1;
  g.on_token = append_token;
  g.user = &ids;
  ASSERT_EQ(vkspec_generate(c, prompt.data(), prompt.size(), &g), VKSPEC_OK);
  vkspec_context_info info;
  ASSERT_EQ(vkspec_context_get_info(c, &info), VKSPEC_OK);
  EXPECT_EQ(info.cached_tokens, prompt.size() + 5) << "the prompt and every generated token but the last";
  EXPECT_STREQ(info.drafter, "");
  ASSERT_EQ(vkspec_generate(c, prompt.data(), prompt.size(), &g), VKSPEC_OK);
  vkspec_metrics mt;
  ASSERT_EQ(vkspec_get_metrics(c, &mt), VKSPEC_OK);
  EXPECT_EQ(mt.reused_tokens, prompt.size() - 1);
  ASSERT_EQ(vkspec_context_clear(c), VKSPEC_OK);
  ASSERT_EQ(vkspec_context_get_info(c, &info), VKSPEC_OK);
  EXPECT_EQ(info.cached_tokens, 0u);
  ASSERT_EQ(vkspec_generate(c, prompt.data(), prompt.size(), &g), VKSPEC_OK);
  ASSERT_EQ(vkspec_get_metrics(c, &mt), VKSPEC_OK);
  EXPECT_EQ(mt.reused_tokens, 0u);
  EXPECT_EQ(mt.prefilled_tokens, prompt.size());
  EXPECT_EQ(vkspec_context_free(c), VKSPEC_OK);
  EXPECT_EQ(vkspec_model_free(full), VKSPEC_OK);
  EXPECT_EQ(vkspec_model_free(vocab), VKSPEC_OK);
}

// A context saved to a file (vkspec_context_save) and loaded into a context of another handle of the same
// model file, as a later process would: its next generation gives the tokens of a context that never saw the
// file, prefilling only what the prompt adds to the file's tokens. Files of another shape or another model,
// truncated, damaged, longer than the context or not session files are refused with the reason and leave the
// context as it was. (CI runs this under VKSPEC_MEMORY=discrete too: the KV through staging copies.)
TEST(CApiSession, ASavedContextGoesOnInAnotherProcessesContext) {
  const std::string target = shared("models/pycode-target-f16.gguf"), draft = shared("models/pycode-draft-f16.gguf");
  const std::string file = testing::TempDir() + "/vkspec-session-" + std::to_string(vkspec::platform::process_id()) + ".kv";
  vkspec_context_params cp = vkspec_context_default_params();
  cp.sampling.temperature = 0.0f;
  const auto context = [&](vkspec_model* m) {
    vkspec_context* c = nullptr;
    EXPECT_EQ(vkspec_context_create(m, &cp, &c), VKSPEC_OK) << vkspec_last_error();
    return c;
  };
  const auto cached = [](vkspec_context* c) {
    vkspec_context_info i{};
    EXPECT_EQ(vkspec_context_get_info(c, &i), VKSPEC_OK);
    return i.cached_tokens;
  };
  vkspec_model* first = load(target, 1);
  vkspec_context* a = context(first);
  const std::vector<int32_t> p1 = tokenize(first, "def fibonacci(n):\n");
  const std::vector<int32_t> ids1 = generate_ids(a, p1, 24);
  ASSERT_EQ(vkspec_context_save(a, file.c_str()), VKSPEC_OK) << vkspec_last_error();
  std::vector<int32_t> p2 = p1;
  p2.insert(p2.end(), ids1.begin(), ids1.end());
  const std::vector<int32_t> more = tokenize(first, "\nprint(", 0);
  p2.insert(p2.end(), more.begin(), more.end());
  const std::vector<int32_t> want = solo(a, p2, 16);   // (an empty cache)
  EXPECT_EQ(vkspec_context_free(a), VKSPEC_OK);
  EXPECT_EQ(vkspec_model_free(first), VKSPEC_OK);

  vkspec_model* second = load(target, 1);
  vkspec_context* b = context(second);
  ASSERT_EQ(vkspec_context_load(b, file.c_str()), VKSPEC_OK) << vkspec_last_error();
  EXPECT_EQ(cached(b), p1.size() + 23) << "the prompt and every generated token but the last";
  vkspec_metrics m{};
  EXPECT_EQ(generate_ids(b, p2, 16, &m), want);
  EXPECT_EQ(m.reused_tokens, p1.size() + 23);
  EXPECT_EQ(m.prefilled_tokens, p2.size() - m.reused_tokens);

  // bad files: refused with the reason, the context as it was
  const uint32_t held = cached(b);
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 100u);
  const auto write = [](const std::string& path, const std::string& data) { std::ofstream(path, std::ios::binary) << data; };
  std::string damaged = bytes, other_model = bytes;
  damaged[bytes.size() / 2] ^= 1;
  other_model[24] ^= 1;   // the fingerprint of the weights
  vkspec_model* small_draft = load(draft, 1);
  vkspec_context* d = context(small_draft);
  generate_ids(d, p1, 4);
  ASSERT_EQ(vkspec_context_save(d, (file + ".draft").c_str()), VKSPEC_OK) << vkspec_last_error();
  for (const auto& [content, why] : std::vector<std::pair<std::string, std::string>>{
           {"", "cannot open"}, {"hello, not a session\n", "is not a vkspec session file"},
           {bytes.substr(0, bytes.size() - 100), "truncated"}, {damaged, "damaged"},
           {other_model, "another model"}, {"draft", "another shape"}}) {
    std::string path = file + ".bad";
    std::filesystem::remove(path);
    if (content == "draft") path = file + ".draft";
    else if (!content.empty()) write(path, content);
    EXPECT_EQ(vkspec_context_load(b, path.c_str()), VKSPEC_ERROR_INVALID_ARGUMENT) << why;
    EXPECT_NE(std::string(vkspec_last_error()).find(why), std::string::npos) << vkspec_last_error();
    EXPECT_EQ(cached(b), held) << why;
  }
  // Another model of the same shape whose matrices differ and norms do not (as a fine-tune or a merge that
  // froze the norms): every f16 weight of every matrix nudged by its last mantissa bit.
  {
    std::ifstream in(target, std::ios::binary);
    std::string model_bytes((std::istreambuf_iterator<char>(in)), {});
    const vkspec::GgufFile parsed(reinterpret_cast<const uint8_t*>(model_bytes.data()), model_bytes.size(), "copy");
    size_t nudged = 0;
    for (const vkspec::GgufTensor& t : parsed.tensors()) {
      if (t.type != 1 || t.name.find("norm") != std::string::npos) continue;   // f16 matrices only
      const size_t at = size_t(t.data - reinterpret_cast<const uint8_t*>(model_bytes.data()));
      for (size_t i = 0; i < t.bytes; i += 2) model_bytes[at + i] ^= 1, ++nudged;
    }
    ASSERT_GT(nudged, 1000000u);
    write(file + ".other.gguf", model_bytes);
  }
  vkspec_model* tuned = load(file + ".other.gguf", 1);
  vkspec_context* tc = context(tuned);
  EXPECT_EQ(vkspec_context_load(tc, file.c_str()), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("another model"), std::string::npos) << vkspec_last_error();
  vkspec_context_free(tc);
  vkspec_model_free(tuned);
  std::filesystem::remove(file + ".other.gguf");
  // a file of the format before this one
  std::string old_format = bytes;
  old_format[7] = '1';
  write(file + ".old", old_format);
  EXPECT_EQ(vkspec_context_load(b, (file + ".old").c_str()), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("another version of vkspec's session format"), std::string::npos)
      << vkspec_last_error();
  vkspec_model* short_ctx = load(target, 1, 32);
  vkspec_context* s = context(short_ctx);
  EXPECT_EQ(vkspec_context_load(s, file.c_str()), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("do not fit the context of 32"), std::string::npos) << vkspec_last_error();
  EXPECT_EQ(vkspec_context_save(b, nullptr), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(vkspec_context_save(b, "/nonexistent-dir/x.kv"), VKSPEC_OK);
  for (vkspec_context* c : {b, d, s}) EXPECT_EQ(vkspec_context_free(c), VKSPEC_OK);
  for (vkspec_model* mm : {second, small_draft, short_ctx}) EXPECT_EQ(vkspec_model_free(mm), VKSPEC_OK);
  for (const std::string& f : {file, file + ".draft", file + ".bad"}) std::filesystem::remove(f);
}

}  // namespace
