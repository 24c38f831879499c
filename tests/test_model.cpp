// The device forward pass: llama.cpp's greedy continuations reproduced exactly, logits against the CPU
// reference on a synthetic GQA / tied-embedding / Llama-3-RoPE model written by the test, prefill ==
// token-by-token decode bit for bit, and the paged KV cache's truncate.
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"
#include "platform/platform.h"
#include "runtime/model.h"
#include "core/quant.h"
#include "tests/cpu_reference.h"
#include "tests/gguf_writer.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {

// A small Llama with the features the shared models lack: GQA 4:1, tied embeddings, rope base 500000
// with Llama 3 frequency factors (rope_freqs.weight), rope dim < head dim, odd vocabulary.
// type: ggml type of the matrices; kMixed = f32 with f16 attn_v (q/k/v of different types are not stacked).
// arch "qwen2": q/k/v biases, NeoX RoPE pairs; "qwen3": per-head q/k norms, NeoX RoPE pairs and heads twice
// as wide as dim / heads (key_length); "phi3": q|k|v and gate|up stored fused, NeoX RoPE pairs, LongRoPE
// (short and long factors, the long ones taken for a context past 128) scaled by an attn_factor, and a
// sliding window (4096) wider than the context; "gemma2": embeddings scaled, post-attention and post-FFN
// norms, GeGLU, attention and logits soft-capped (caps small enough to bend these scores), layer 0 on a window
// of 6 positions (the default period of 2); "gemma3": the same with per-head q/k norms, no attention cap,
// the window's layers given by a flag array and RoPE bases of their own (10000; global: 500000, linearly
// scaled); "llama-biases": a llama file with every optional bias llama.cpp reads (q/k/v, output, FFN gate and
// down; no up); none with Llama 3's frequency factors.
constexpr uint32_t kMixed = 1000;
std::string write_synthetic_model(uint32_t type = 0, bool llama3_keys = false, const std::string& arch = "llama") {
  const bool qwen2 = arch == "qwen2", qwen3 = arch == "qwen3", phi3 = arch == "phi3", biases = arch == "llama-biases";
  const bool gemma2 = arch == "gemma2", gemma3 = arch == "gemma3", gemma = gemma2 || gemma3;
  const std::string file_arch = biases ? "llama" : arch;
  const uint32_t dim = 128, heads = 8, kv = 2, hd = qwen3 ? 32 : 16, ffn = 96, vocab = 97, layers = 2, n_rot = 12;
  const std::string a = file_arch + ".";
  GgufWriter w;
  w.str("general.architecture", file_arch);
  if (qwen3) w.u32(a + "attention.key_length", hd);
  w.u32(a + "embedding_length", dim);
  w.u32(a + "block_count", layers);
  w.u32(a + "attention.head_count", heads);
  w.u32(a + "attention.head_count_kv", kv);
  w.u32(a + "feed_forward_length", ffn);
  w.u32(a + "context_length", 256);
  w.u32(a + "rope.dimension_count", n_rot);
  w.f32(a + "rope.freq_base", 500000.f);
  w.f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  if (phi3) {
    w.u32(a + "rope.scaling.original_context_length", 128);
    w.f32(a + "rope.scaling.attn_factor", 1.19f);
    w.u32(a + "attention.sliding_window", 4096);
  }
  if (gemma) {
    w.u32(a + "attention.sliding_window", 6);
    w.f32(a + "final_logit_softcapping", 3.f);
  }
  if (gemma2) w.f32(a + "attn_logit_softcapping", 0.5f);
  if (gemma3) {
    w.bools(a + "attention.sliding_window_pattern", {false, true});
    w.f32(a + "rope.freq_base_swa", 10000.f);
    w.str(a + "rope.scaling.type", "linear");
    w.f32(a + "rope.scaling.factor", 8.f);
  }
  if (llama3_keys) {
    w.str("llama.rope.scaling.type", "llama3");
    w.f32("llama.rope.scaling.factor", 8.f);
    w.u32("llama.rope.scaling.original_context_length", 64);
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 0.5f);
  auto add = [&](const std::string& name, uint32_t rows, uint32_t cols, bool norm = false) {
    const uint32_t type_here = type != kMixed ? type : name.find("attn_v") != std::string::npos ? 1 : 0;
    std::vector<float> v(size_t(rows) * cols);
    for (auto& x : v) x = norm ? 1.f + 0.1f * nd(rng) : nd(rng) / std::sqrt(float(cols));
    if (norm || type_here == 0) return w.tensor(name, rows == 1 ? std::vector<uint64_t>{cols} : std::vector<uint64_t>{cols, rows}, 0, v.data(), v.size() * 4);
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = type_here == 1 ? float_to_half(v[i]) : float_to_bf16(v[i]);
    w.tensor(name, {cols, rows}, type_here, h.data(), h.size() * 2);
  };
  add("token_embd.weight", vocab, dim);
  add("output_norm.weight", 1, dim, true);
  if (phi3)
    for (const char* name : {"rope_factors_short.weight", "rope_factors_long.weight"}) {
      std::vector<float> factors(n_rot / 2);
      for (uint32_t i = 0; i < n_rot / 2; ++i) factors[i] = 1.f + float(i) * (name[13] == 's' ? 0.5f : 3.f);
      w.tensor(name, {n_rot / 2}, 0, factors.data(), factors.size() * 4);
    }
  if (!llama3_keys && arch == "llama") {
    std::vector<float> factors(n_rot / 2);
    for (uint32_t i = 0; i < n_rot / 2; ++i) factors[i] = 1.f + float(i);   // distinct per frequency
    w.tensor("rope_freqs.weight", {n_rot / 2}, 0, factors.data(), factors.size() * 4);
  }
  for (uint32_t l = 0; l < layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", 1, dim, true);
    if (phi3) {
      add(p + "attn_qkv.weight", (heads + 2 * kv) * hd, dim);
    } else {
      add(p + "attn_q.weight", heads * hd, dim);
      add(p + "attn_k.weight", kv * hd, dim);
      add(p + "attn_v.weight", kv * hd, dim);
    }
    if (qwen2 || biases)   // (f32 vectors of O(1) values: as large as the products they are added to)
      for (const auto& [name, width] : {std::pair{"attn_q.bias", heads * hd}, {"attn_k.bias", kv * hd}, {"attn_v.bias", kv * hd}}) {
        std::vector<float> b(width);
        for (auto& x : b) x = nd(rng);
        w.tensor(p + name, {width}, 0, b.data(), b.size() * 4);
      }
    if (qwen3 || gemma3) {
      add(p + "attn_q_norm.weight", 1, hd, true);
      add(p + "attn_k_norm.weight", 1, hd, true);
    }
    add(p + "attn_output.weight", dim, heads * hd);
    add(p + "ffn_norm.weight", 1, dim, true);
    if (!phi3) add(p + "ffn_gate.weight", ffn, dim);
    add(p + "ffn_up.weight", phi3 ? 2 * ffn : ffn, dim);
    add(p + "ffn_down.weight", dim, ffn);
    if (biases)   // Llama's optional ones (no ffn_up.bias: one of the gate's pair alone)
      for (const auto& [name, width] : {std::pair{"attn_output.bias", dim}, {"ffn_gate.bias", ffn}, {"ffn_down.bias", dim}}) {
        std::vector<float> b(width);
        for (auto& x : b) x = nd(rng);
        w.tensor(p + name, {width}, 0, b.data(), b.size() * 4);
      }
    if (gemma) {
      add(p + "post_attention_norm.weight", 1, dim, true);
      add(p + "post_ffw_norm.weight", 1, dim, true);
    }
  }
  std::string path = ::testing::TempDir() + "/vkspec-synthetic-" + std::to_string(type) + (llama3_keys ? "-keys" : "") +
                     "-" + arch + ".gguf";
  w.write(path);
  return path;
}

class ModelTest : public VkTest {};

// Phi-3's sliding window is not implemented: a context within it (where attending to the window is attending
// to everything) runs, a longer one is refused naming the window and the context that fits.
TEST_F(ModelTest, SlidingWindowBeyondTheContextIsRefused) {
  GgufFile f(write_synthetic_model(0, false, "phi3"));   // window 4096
  ModelOptions within, beyond;
  within.n_ctx = 4096;
  beyond.n_ctx = 4097;
  EXPECT_NO_THROW(LlamaModel(gpu().ctx, gpu().pipelines, f, within));
  try {
    LlamaModel model(gpu().ctx, gpu().pipelines, f, beyond);
    FAIL() << "a context past the sliding window was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sliding window of 4096 positions"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--ctx 4096"), std::string::npos) << e.what();
  }
}

TEST_F(ModelTest, RopeScalingFromTensorAndFromLlama3Keys) {
  GgufFile f(write_synthetic_model());
  LlamaHParams hp = read_llama_hparams(f);
  ASSERT_EQ(hp.rope_inv_freq.size(), 6u);
  for (uint32_t i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(hp.rope_inv_freq[i], std::pow(500000.0, -2.0 * i / 12) / (1.0 + i));
  EXPECT_TRUE(hp.tied_embeddings);
  EXPECT_EQ(hp.n_kv_heads, 2u);

  // Meta's reference apply_scaling (factor 8, low 1, high 4, original context 64), written out independently.
  GgufFile k(write_synthetic_model(0, true));
  LlamaHParams hk = read_llama_hparams(k);
  for (uint32_t i = 0; i < 6; ++i) {
    const double freq = std::pow(500000.0, -2.0 * i / 12), wavelen = 2 * M_PI / freq;
    double want;
    if (wavelen < 64.0 / 4) want = freq;
    else if (wavelen > 64.0 / 1) want = freq / 8;
    else {
      const double smooth = (64.0 / wavelen - 1) / (4 - 1);
      want = (1 - smooth) * freq / 8 + smooth * freq;
    }
    EXPECT_NEAR(hk.rope_inv_freq[i], want, 1e-12 * want) << i;
  }
}

// ... and the `qwen2`, `qwen3`, `phi3`, `gemma2` and `gemma3` architectures' (biases, per-head norms, NeoX
// RoPE pairs, wider heads, stored-fused matrices, LongRoPE, Gemma's norms, GeGLU, soft-capping and sliding
// windows: 20 tokens cross the window of 6), q/k/v fused (f16) or not (mixed).
TEST_F(ModelTest, LogitsMatchCpuReferenceOnSyntheticModel) {
  for (const auto& [type, arch] : {std::pair{0u, "llama"}, {1u, "llama"}, {30u, "llama"}, {kMixed, "llama"}, {1u, "qwen2"},
                                   {kMixed, "qwen2"}, {1u, "qwen3"}, {kMixed, "qwen3"}, {0u, "phi3"}, {1u, "phi3"},
                                   {1u, "gemma2"}, {kMixed, "gemma2"}, {1u, "gemma3"}, {0u, "gemma3"}, {1u, "llama-biases"}}) {
    SCOPED_TRACE("weight type " + std::to_string(type) + ", " + arch);
    GgufFile f(write_synthetic_model(type, false, arch));
    LlamaModel model(gpu().ctx, gpu().pipelines, f);
    CpuLlama ref(f, model.n_ctx());
    const std::vector<uint32_t> tokens = {1, 5, 96, 42, 42, 7, 0, 13, 77, 3, 64, 21, 9, 88, 2, 50, 51, 52, 11, 90};
    const int seq = model.kv().new_sequence();
    for (uint32_t t : tokens) {
      model.forward(seq, std::span<const uint32_t>(&t, 1), Logits::Last);
      auto want = ref.step(t);
      for (uint32_t v = 0; v < model.hparams().n_vocab; ++v)
        ASSERT_NEAR(model.logits(0)[v], want[v], 2e-4 * (1 + std::fabs(want[v]))) << "vocab " << v;
    }
  }
}

// A sliding window past attention's 256-key split (the subgroup family splits; its combine starts at the
// split that holds the window's first key) against the CPU reference: 250 positions as a prompt, then 12 rows
// from 250 to 261 with their logits, in both kernel families.
TEST_F(ModelTest, SlidingWindowAcrossAttentionSplitsMatchesCpuReference) {
  GgufFile f(write_synthetic_model(1, false, "gemma2"));
  for (KernelFamily fam : {KernelFamily::RowPerLane, KernelFamily::Subgroup}) {
    SCOPED_TRACE(fam == KernelFamily::RowPerLane ? "row-per-lane" : "subgroup");
    ModelOptions mo;
    mo.kernels = fam;
    mo.n_ctx = 512;
    LlamaModel model(gpu().ctx, gpu().pipelines, f, mo);
    CpuLlama ref(f, model.n_ctx());
    std::vector<uint32_t> tokens;
    for (uint32_t i = 0; i < 262; ++i) tokens.push_back((i * 37 + 11) % model.hparams().n_vocab);
    std::vector<std::vector<double>> want;
    for (uint32_t t : tokens) want.push_back(ref.step(t));
    const int seq = model.kv().new_sequence();
    model.forward(seq, std::span<const uint32_t>(tokens.data(), 250), Logits::None);
    model.forward(seq, std::span<const uint32_t>(tokens.data() + 250, 12), Logits::All);
    for (uint32_t r = 0; r < 12; ++r)
      for (uint32_t v = 0; v < model.hparams().n_vocab; ++v)
        ASSERT_NEAR(model.logits(r)[v], want[250 + r][v], 2e-4 * (1 + std::fabs(want[250 + r][v]))) << "row " << r << " vocab " << v;
  }
}

// Batch invariance end to end: the logits of a token are bit-identical whether it was decoded alone or
// computed as a row of a prefill/verify batch.
// ...and whatever the chunk size (--ubatch): the device's, 5 (chunks that end inside the prompt and inside
// the 16 logits rows) and 64 (one chunk larger than a verify pass, as GPUs run by default).
TEST_F(ModelTest, PrefillEqualsTokenByTokenBitForBit) {
  for (const char* name : {"models/stories260K.gguf", "models/pycode-target-f16.gguf"}) {
    GgufFile f(shared_path(name));
    std::vector<std::vector<float>> single;
    std::vector<uint32_t> tokens;
    for (uint32_t ubatch : {0u, 5u, 64u}) {
      SCOPED_TRACE(std::string(name) + " ubatch " + std::to_string(ubatch));
      ModelOptions mo;
      mo.ubatch = ubatch;
      LlamaModel model(gpu().ctx, gpu().pipelines, f, mo);
      ASSERT_EQ(model.ubatch(), ubatch ? ubatch : gpu().ctx.facts().default_ubatch());
      const uint32_t V = model.hparams().n_vocab;
      if (single.empty()) {   // one token at a time, on the first model
        for (uint32_t i = 0; i < 37; ++i) tokens.push_back((i * 131 + 7) % V);
        const int a = model.kv().new_sequence();
        for (uint32_t t : tokens) {
          model.forward(a, std::span<const uint32_t>(&t, 1), Logits::Last);
          single.emplace_back(model.logits(0), model.logits(0) + V);
        }
      }
      // batch: 21 tokens as a prefill, then a 16-token verify-style pass with every row's logits
      const int b = model.kv().new_sequence();
      model.forward(b, std::span<const uint32_t>(tokens.data(), 21), Logits::Last);
      for (uint32_t v = 0; v < V; ++v) ASSERT_EQ(model.logits(0)[v], single[20][v]);
      model.forward(b, std::span<const uint32_t>(tokens.data() + 21, 16), Logits::All);
      for (uint32_t r = 0; r < 16; ++r)
        for (uint32_t v = 0; v < V; ++v) ASSERT_EQ(model.logits(r)[v], single[21 + r][v]) << "row " << r;
    }
  }
}

// Continuous batching: rows of several sequences (prefill chunks, verify rows, decode rows, at different
// positions, one past the 256-key attention split) in one pass give every row bit-identically the logits of
// its sequence run alone, in both kernel families; prefix sharing with copy-on-write (the source and the
// sharer both writing into the shared partial block) changes nothing either.
// The same with Gemma 2's sliding window (6 positions on layer 0): rows whose window starts in the split
// before theirs, or past the split that holds their first keys.
TEST_F(ModelTest, BatchOfSequencesEqualsEachSequenceAloneBitForBit) {
  // small models: the subgroup family is slow on lavapipe
  for (const std::string& path : {shared_path("models/stories260K.gguf"), write_synthetic_model(1, false, "gemma2")})
  for (KernelFamily fam : {KernelFamily::RowPerLane, KernelFamily::Subgroup}) {
    SCOPED_TRACE(path + (fam == KernelFamily::RowPerLane ? " row-per-lane" : " subgroup"));
    GgufFile f(path);
    ModelOptions mo;
    mo.n_ctx = 512;
    mo.max_sequences = 8;
    mo.kernels = fam;
    LlamaModel model(gpu().ctx, gpu().pipelines, f, mo);
    PagedKvCache& kv = model.kv();
    const uint32_t V = model.hparams().n_vocab;
    auto tokens = [&](uint32_t n, uint32_t salt) {
      std::vector<uint32_t> t;
      for (uint32_t i = 0; i < n; ++i) t.push_back((i * 131 + salt * 977 + 7) % V);
      return t;
    };
    // (prefix length, rows after it, logits wanted for those rows)
    struct Case { uint32_t prefill, rows; Logits want; std::vector<uint32_t> t; };
    std::vector<Case> cases = {{270, 5, Logits::All}, {33, 1, Logits::Last}, {7, 16, Logits::All}, {0, 3, Logits::Last},
                               {254, 6, Logits::All}};
    for (size_t i = 0; i < cases.size(); ++i) cases[i].t = tokens(cases[i].prefill + cases[i].rows, uint32_t(i));
    // Alone: the prefix, then the rows, logits read back.
    std::vector<std::vector<float>> alone;
    for (const Case& c : cases) {
      const int s = kv.new_sequence();
      if (c.prefill) model.forward(s, std::span<const uint32_t>(c.t.data(), c.prefill), Logits::None);
      model.forward(s, std::span<const uint32_t>(c.t.data() + c.prefill, c.rows), c.want);
      const uint32_t rows = c.want == Logits::All ? c.rows : 1;
      alone.emplace_back(model.logits(0), model.logits(0) + size_t(rows) * V);
      kv.free_sequence(s);
    }
    // Batched: every prefix in one pass, then every sequence's rows in one pass.
    Arena readback(gpu().ctx, MemoryKind::Readback);
    const Slice logits = readback.alloc(VkDeviceSize(64) * V * 4, "test logits");
    Recorder r(gpu().ctx, false);
    std::vector<SeqRows> prefix, rows;
    for (const Case& c : cases) {
      const int s = kv.new_sequence();
      if (c.prefill) prefix.push_back({s, model.write_tokens(std::span<const uint32_t>(c.t.data(), c.prefill)), c.prefill, Logits::None});
      rows.push_back({s, {}, c.rows, c.want});
    }
    r.begin();
    EXPECT_EQ(model.record_batch(r, prefix, logits), 0u);
    r.submit_and_wait();
    for (size_t i = 0; i < cases.size(); ++i)
      rows[i].in = model.write_tokens(std::span<const uint32_t>(cases[i].t.data() + cases[i].prefill, cases[i].rows));
    r.begin();
    const uint32_t n_logits = model.record_batch(r, rows, logits);
    r.submit_and_wait();
    uint32_t at = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const size_t n = alone[i].size();
      const float* got = logits.host<float>() + size_t(at) * V;
      for (size_t j = 0; j < n; ++j) ASSERT_EQ(got[j], alone[i][j]) << "sequence " << i << " value " << j;
      at += uint32_t(n / V);
    }
    EXPECT_EQ(n_logits, at);
    for (const SeqRows& s : rows) kv.free_sequence(s.seq);

    // Prefix sharing: b takes a's first 37 positions (2 full blocks + a partial one), then a and b each
    // write into the partial block (two copies on write) in one batch, with different continuations.
    const std::vector<uint32_t> base = tokens(37, 9), cont_a = tokens(6, 10), cont_b = tokens(6, 11);
    std::vector<std::vector<float>> want;
    for (const auto* cont : {&cont_a, &cont_b}) {
      std::vector<uint32_t> all = base;
      all.insert(all.end(), cont->begin(), cont->end());
      const int s = kv.new_sequence();
      model.forward(s, std::span<const uint32_t>(all.data(), 37), Logits::None);
      model.forward(s, std::span<const uint32_t>(all.data() + 37, 6), Logits::All);
      want.emplace_back(model.logits(0), model.logits(0) + size_t(6) * V);
      kv.free_sequence(s);
    }
    const uint32_t free0 = kv.free_blocks();
    const uint64_t copied0 = kv.blocks_copied();
    const int a = kv.new_sequence(), b = kv.new_sequence();
    model.forward(a, base, Logits::None);
    EXPECT_EQ(kv.share_prefix(b, a, 37), 3u);
    EXPECT_EQ(kv.free_blocks(), free0 - 3);   // nothing allocated for b yet
    kv.check_invariants();
    const SeqRows both[2] = {{a, model.write_tokens(cont_a), 6, Logits::All}, {b, model.write_tokens(cont_b), 6, Logits::All}};
    r.begin();
    model.record_batch(r, both, logits);
    r.submit_and_wait();
    EXPECT_EQ(kv.blocks_copied() - copied0, 1u);   // the first writer copies; the last holder keeps it
    kv.check_invariants();
    for (size_t j = 0; j < 6 * size_t(V); ++j) {
      ASSERT_EQ(logits.host<float>()[j], want[0][j]) << "shared source, value " << j;
      ASSERT_EQ(logits.host<float>()[6 * size_t(V) + j], want[1][j]) << "sharer, value " << j;
    }
    kv.free_sequence(a);
    kv.free_sequence(b);
    kv.check_invariants();
    EXPECT_EQ(kv.free_blocks(), kv.total_blocks());
  }
}

// Several devices in one process (two models, an application's device beside vkspec's): one created and
// destroyed while another lives leaves the other working. (The device-level function pointers were once
// vkGetDeviceProcAddr's of the latest device: the first device crashed in its next vkDestroyQueryPool.)
TEST_F(ModelTest, ADeviceComingAndGoingLeavesTheOtherWorking) {
  GgufFile f(shared_path("models/stories260K.gguf"));
  LlamaModel model(gpu().ctx, gpu().pipelines, f);
  const std::vector<uint32_t> tokens = {1, 403, 261, 17, 300};
  const int s0 = model.kv().new_sequence();
  model.forward(s0, std::vector<uint32_t>(tokens.begin(), tokens.begin() + 1), Logits::Last);
  {
    VulkanDevice second(VulkanDeviceOptions{});
    Pipelines pipelines(second);
    LlamaModel other(second, pipelines, f);
    other.forward(other.kv().new_sequence(), tokens, Logits::Last);
  }
  model.forward(s0, std::vector<uint32_t>(tokens.begin() + 1, tokens.end()), Logits::Last);
  const std::vector<float> after(model.logits(0), model.logits(0) + model.hparams().n_vocab);
  const int s1 = model.kv().new_sequence();
  model.forward(s1, tokens, Logits::Last);
  for (uint32_t v = 0; v < model.hparams().n_vocab; ++v) ASSERT_EQ(model.logits(0)[v], after[v]);
}

// A recording submitted in parts (GPUs by default: the device runs the first parts while the host records
// the rest; here a part at every barrier) gives the bits of one submission, prefill and decode; and a
// recording abandoned after parts of it were submitted (an error mid-step) leaves the recorder usable: its
// next begin() waits for those parts before reusing their command buffers.
TEST_F(ModelTest, ARecordingInPartsGivesTheBitsOfOneSubmission) {
  GgufFile f(shared_path("models/pycode-target-f16.gguf"));
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < 17; ++i) tokens.push_back((i * 131 + 7) % 8000);
  uint64_t parts = 0, waits = 0;   // of the forward passes
  auto run = [&](VulkanDevice& ctx, Pipelines& pipelines) {   // the logits of a 9-token prefill and 8 decode steps
    LlamaModel model(ctx, pipelines, f);
    const uint32_t V = model.hparams().n_vocab;
    const int seq = model.kv().new_sequence();
    std::vector<std::vector<float>> out;
    parts = Recorder::total_parts();
    waits = Recorder::total_submissions();
    model.forward(seq, std::span(tokens).first(9), Logits::Last);
    out.emplace_back(model.logits(0), model.logits(0) + V);
    for (uint32_t i = 9; i < tokens.size(); ++i) {
      model.forward(seq, std::span(tokens).subspan(i, 1), Logits::Last);
      out.emplace_back(model.logits(0), model.logits(0) + V);
    }
    parts = Recorder::total_parts() - parts;
    waits = Recorder::total_submissions() - waits;
    // abandoned: a prefill recorded (its parts submitted) and never submitted whole
    Recorder rec(ctx, false);
    const int other = model.kv().new_sequence();
    rec.begin();
    model.record_forward(rec, other, model.write_tokens(std::span(tokens).first(9)), 9, Logits::None);
    model.kv().free_sequence(other);
    rec.begin();   // waits for the abandoned parts
    rec.submit_and_wait();
    return out;
  };
  using Split = DeviceFacts::SubmitSplit;
  const auto reference = run(gpu().ctx, gpu().pipelines);
  const char* before = getenv("VKSPEC_SUBMIT");
  const std::string saved = before ? before : "";
  platform::set_env("VKSPEC_SUBMIT", "barriers");
  VulkanDeviceOptions co;
  co.validation = gpu().ctx.validation_enabled();
  VulkanDevice parted(co);
  if (before) platform::set_env("VKSPEC_SUBMIT", saved.c_str());
  else platform::unset_env("VKSPEC_SUBMIT");
  ASSERT_EQ(parted.facts().submit_split, Split::EveryBarrier);
  Pipelines pipelines(parted);
  const auto in_parts = run(parted, pipelines);
  EXPECT_EQ(waits, 9u);
  EXPECT_GT(parts, 20 * waits) << "parts per recording";
  ASSERT_EQ(in_parts.size(), reference.size());
  for (size_t i = 0; i < reference.size(); ++i)
    for (size_t v = 0; v < reference[i].size(); ++v) ASSERT_EQ(in_parts[i][v], reference[i][v]) << "step " << i;
  EXPECT_EQ(parted.validation_messages(), 0u) << parted.last_validation_message();
}

TEST_F(ModelTest, ReproducesLlamaCppGreedyContinuations) {
  for (const char* name : {"stories260K", "pycode-target", "pycode-draft"}) {
    std::ifstream in(shared_path(std::string("models/reference/") + name + "-greedy.jsonl"));
    std::string line;
    std::getline(in, line);
    auto first = nlohmann::json::parse(line);
    GgufFile f(shared_path("models/" + first["model"].get<std::string>()));
    auto tok = Tokenizer::from_gguf(f);
    LlamaModel model(gpu().ctx, gpu().pipelines, f);
    int cases = 0;
    do {
      auto j = nlohmann::json::parse(line);
      auto prompt = tok->encode(j["prompt"].get<std::string>(), true);
      ASSERT_EQ(prompt, j["prompt_ids"].get<std::vector<uint32_t>>());
      const auto want = j["ids"].get<std::vector<uint32_t>>();
      const int seq = model.kv().new_sequence();
      model.forward(seq, prompt, Logits::Last);
      std::vector<uint32_t> got;
      while (got.size() < want.size()) {
        uint32_t next = model.argmax_id(0);
        got.push_back(next);
        model.forward(seq, std::span<const uint32_t>(&next, 1), Logits::Last);
      }
      model.kv().free_sequence(seq);
      EXPECT_EQ(got, want) << name << ": " << j["prompt"];
      ++cases;
    } while (std::getline(in, line));
    EXPECT_GE(cases, 5);
  }
}

TEST_F(ModelTest, PagedKvTruncateFreesBlocksAndRewriteEqualsFresh) {
  GgufFile f(shared_path("models/stories260K.gguf"));
  ModelOptions mo;
  mo.kv_block_size = 4;
  mo.max_sequences = 3;
  LlamaModel model(gpu().ctx, gpu().pipelines, f, mo);
  PagedKvCache& kv = model.kv();
  const uint32_t V = model.hparams().n_vocab, free0 = kv.free_blocks();
  std::vector<uint32_t> toks;
  for (uint32_t i = 0; i < 30; ++i) toks.push_back((i * 37 + 3) % V);

  const int s = kv.new_sequence();
  model.forward(s, std::span<const uint32_t>(toks.data(), 18), Logits::Last);
  EXPECT_EQ(kv.length(s), 18u);
  EXPECT_EQ(kv.block_table(s).size(), 5u);          // ceil(18/4)
  EXPECT_EQ(kv.free_blocks(), free0 - 5);
  kv.truncate(s, 9);                                  // keeps blocks 0..2 (positions 0..11)
  EXPECT_EQ(kv.length(s), 9u);
  EXPECT_EQ(kv.block_table(s).size(), 3u);
  EXPECT_EQ(kv.free_blocks(), free0 - 3);
  kv.truncate(s, 8);                                  // block 2 starts at 8: freed
  EXPECT_EQ(kv.block_table(s).size(), 2u);

  // A second sequence takes the freed blocks (LIFO reuse) and overwrites them.
  const int other = kv.new_sequence();
  model.forward(other, std::span<const uint32_t>(toks.data() + 10, 12), Logits::Last);
  // Rewrite s with different tokens from position 8, then continue: logits must equal a fresh run.
  std::vector<uint32_t> rewritten(toks.begin(), toks.begin() + 8);
  for (uint32_t i = 0; i < 14; ++i) rewritten.push_back((i * 11 + 5) % V);
  model.forward(s, std::span<const uint32_t>(rewritten.data() + 8, 14), Logits::Last);
  std::vector<float> after(model.logits(0), model.logits(0) + V);
  const int fresh = kv.new_sequence();
  model.forward(fresh, rewritten, Logits::Last);
  for (uint32_t v = 0; v < V; ++v) ASSERT_EQ(model.logits(0)[v], after[v]);
  kv.free_sequence(s);
  kv.free_sequence(other);
  kv.free_sequence(fresh);
  EXPECT_EQ(kv.free_blocks(), free0);                // no block leaks
  const int t = kv.new_sequence();
  EXPECT_THROW(kv.grow(t, model.n_ctx() + 1), Error);   // context overflow is an error, not a crash
  kv.free_sequence(t);
}

}  // namespace
}  // namespace vkspec::test
