// The GGUF parser: real files parse; malformed, truncated and hostile files give a clear Error naming
// what is wrong, never a crash or an absurd allocation.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "gguf/gguf.h"
#include "gguf/model_file.h"
#include "tests/gguf_writer.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    GgufFile f(bytes.data(), bytes.size(), "test.gguf");
    read_llama_hparams(f);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

GgufWriter tiny_valid() {
  GgufWriter w;
  w.str("general.architecture", "llama");
  w.u32("llama.embedding_length", 8);
  w.strs("tokenizer.ggml.tokens", {"a", "b"});
  std::vector<float> emb(16, 0.5f);
  w.tensor("token_embd.weight", {8, 2}, 0, emb.data(), emb.size() * 4);
  return w;
}

TEST(Gguf, ParsesSharedModels) {
  GgufFile f(shared_path("models/stories260K.gguf"));
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  LlamaHParams hp = read_llama_hparams(f);
  EXPECT_EQ(hp.dim, 64u);
  EXPECT_EQ(hp.n_layers, 5u);
  EXPECT_EQ(hp.n_heads, 8u);
  EXPECT_EQ(hp.n_kv_heads, 4u);
  EXPECT_EQ(hp.ffn_dim, 172u);
  EXPECT_EQ(hp.n_vocab, 512u);
  EXPECT_FALSE(hp.tied_embeddings);
  GgufFile t(shared_path("models/pycode-target-f16.gguf"));
  LlamaHParams th = read_llama_hparams(t);
  EXPECT_TRUE(th.tied_embeddings);
  EXPECT_EQ(th.n_kv_heads, 2u);
  EXPECT_EQ(th.head_dim, 64u);
  find_llama_tensors(t, th);   // shapes consistent
}

TEST(Gguf, RejectsMalformedFiles) {
  auto valid = tiny_valid().bytes();
  // the well-formed file parses and only fails later, on its missing hyperparameters
  EXPECT_NE(error_of(valid).find("missing GGUF key 'llama.block_count'"), std::string::npos);

  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -3.0f, 2.5f, 1e30f}) {   // a float where an integer belongs
    GgufWriter w = tiny_valid();
    w.f32("llama.block_count", bad);
    EXPECT_NE(error_of(w.bytes()).find("'llama.block_count' should be a non-negative integer"), std::string::npos)
        << bad << ": " << error_of(w.bytes());
  }

  // a file cut inside its tensor table says so (it was reported as an "implausible tensor count")
  auto cut = valid;
  cut.resize(40);
  EXPECT_NE(error_of(cut).find("truncated or corrupt"), std::string::npos) << error_of(cut);

  auto llama_keys = [](uint32_t dim) {   // one layer, 2 heads
    GgufWriter w;
    w.str("general.architecture", "llama");
    w.u32("llama.embedding_length", dim);
    w.u32("llama.block_count", 1);
    w.u32("llama.attention.head_count", 2);
    w.u32("llama.feed_forward_length", 16);
    w.u32("llama.context_length", 64);
    return w;
  };
  GgufWriter flat = llama_keys(8);   // a 1-D token embedding is named as such, not as a missing tensor
  std::vector<float> emb(16, 0.5f);
  flat.tensor("token_embd.weight", {16}, 0, emb.data(), emb.size() * 4);
  EXPECT_NE(error_of(flat.bytes()).find("'token_embd.weight' has 1 dimension"), std::string::npos) << error_of(flat.bytes());

  GgufWriter odd_head = llama_keys(18);   // the f16 KV cache stores head dims in pairs: head dim 9 is refused
  odd_head.u32("llama.rope.dimension_count", 8);
  std::vector<float> emb18(18 * 4, 0.5f);
  odd_head.tensor("token_embd.weight", {18, 4}, 0, emb18.data(), emb18.size() * 4);
  EXPECT_NE(error_of(odd_head.bytes()).find("head dimension 9 is odd"), std::string::npos) << error_of(odd_head.bytes());

  auto bad_magic = valid;
  bad_magic[0] = 'X';
  EXPECT_NE(error_of(bad_magic).find("not a GGUF file"), std::string::npos);

  auto bad_version = valid;
  bad_version[4] = 9;
  EXPECT_NE(error_of(bad_version).find("unsupported GGUF version 9"), std::string::npos);

  for (size_t cut : {size_t{3}, size_t{10}, size_t{30}, size_t{60}, valid.size() / 2, valid.size() - 8}) {   // every truncation is an error
    std::vector<uint8_t> t(valid.begin(), valid.begin() + long(cut));
    EXPECT_FALSE(error_of(t).empty()) << "cut at " << cut;
  }

  auto huge_count = valid;
  uint64_t n = 1ull << 60;
  memcpy(&huge_count[16], &n, 8);   // metadata count
  EXPECT_NE(error_of(huge_count).find("implausible metadata count"), std::string::npos);

  auto huge_string = valid;
  uint64_t len = 1ull << 62;
  memcpy(&huge_string[24], &len, 8);   // length of the first key
  EXPECT_NE(error_of(huge_string).find("truncated"), std::string::npos);

  GgufWriter arch;
  arch.str("general.architecture", "gpt2");
  EXPECT_NE(error_of(arch.bytes()).find("architecture 'gpt2' is not supported"), std::string::npos);

  GgufWriter iq;   // a type vkspec does not read (iq2_xxs) is named
  iq.str("general.architecture", "llama");
  std::vector<uint8_t> junk(256 * 4);
  iq.tensor("token_embd.weight", {256, 4}, 16, junk.data(), 66 * 4);
  EXPECT_NE(error_of(iq.bytes()).find("iq2_xxs"), std::string::npos);

  GgufWriter partial;   // a q4_K row of 32 weights is not a whole 256-weight block: the tensor is named
  partial.str("general.architecture", "llama");
  partial.tensor("blk.0.attn_q.weight", {32, 4}, 12, junk.data(), 144);
  const std::string e = error_of(partial.bytes());
  EXPECT_NE(e.find("blk.0.attn_q.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("not a multiple of its block size 256"), std::string::npos) << e;

  GgufWriter outside;
  outside.str("general.architecture", "llama");
  std::vector<float> small(4);
  outside.tensor("token_embd.weight", {8, 2}, 0, small.data(), small.size() * 4);   // claims 64 bytes, has 16 (+pad)
  EXPECT_NE(error_of(outside.bytes()).find("outside the file"), std::string::npos);
}

TEST(Gguf, RejectsShapeInconsistentWithHyperparameters) {
  GgufFile good(shared_path("models/stories260K.gguf"));
  // Rebuild stories260K's metadata with a wrong FFN length: the tensor check must name the tensor.
  GgufWriter w;
  w.copy_metadata(good, [](const std::string& k) { return k == "llama.feed_forward_length"; });
  w.u32("llama.feed_forward_length", 100);
  for (auto& t : good.tensors()) w.tensor(t.name, t.dims, t.type, t.data, t.bytes);
  auto bytes = w.bytes();
  GgufFile f(bytes.data(), bytes.size(), "bad-ffn.gguf");
  LlamaHParams hp = read_llama_hparams(f);
  try {
    find_llama_tensors(f, hp);
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ffn_gate.weight"), std::string::npos) << e.what();
  }
}


// Nothing in a file is ignored silently (issue: model families): a tensor the forward pass would not read
// (a norm's bias, a per-head norm, experts; q/k/v biases come in threes), metadata under the
// architecture's prefix that changes the computation (a sliding window), experts and other architectures are
// refused by name, the real reason first.
TEST(Gguf, RefusesWhatItWouldOtherwiseIgnore) {
  GgufFile good(shared_path("models/stories260K.gguf"));
  const LlamaHParams hp = read_llama_hparams(good);
  // stories260K with extra metadata (`key` = 8; "" for none), an extra f32 tensor, another architecture.
  auto refusal = [&](const std::string& key, const std::string& extra, std::vector<uint64_t> dims,
                     const std::string& arch = "llama", uint32_t value = 8) {
    GgufWriter w;
    w.copy_metadata(good, [&](const std::string& k) { return k == "general.architecture" || (arch != "llama" && k.rfind("llama.", 0) == 0); });
    w.str("general.architecture", arch);
    for (auto& [k, v] : good.metadata())   // the hyperparameters under the other architecture's name
      if (arch != "llama" && k.rfind("llama.", 0) == 0 && v.type == GgufType::U32) w.u32(arch + k.substr(5), uint32_t(v.number));
    if (!key.empty()) w.u32(key, value);
    for (auto& t : good.tensors()) w.tensor(t.name, t.dims, t.type, t.data, t.bytes);
    uint64_t n = 1;
    for (uint64_t d : dims) n *= d;
    std::vector<float> zeros(n, 0.0f);
    if (!extra.empty()) w.tensor(extra, dims, 0, zeros.data(), zeros.size() * 4);
    auto bytes = w.bytes();
    try {
      GgufFile f(bytes.data(), bytes.size(), "case.gguf");
      find_llama_tensors(f, read_llama_hparams(f));
      return std::string();
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(refusal("", "", {}), "");   // the file as it is
  EXPECT_NE(refusal("", "blk.0.attn_q.bias", {hp.q_dim()}).find("missing tensor 'blk.0.attn_k.bias'"), std::string::npos);
  // the llama architecture's optional output and FFN biases are read (llama.cpp's too), at their shapes only
  EXPECT_EQ(refusal("", "blk.1.attn_output.bias", {hp.dim}), "");
  EXPECT_NE(refusal("", "blk.0.ffn_down.bias", {hp.dim + 1}).find("tensor 'blk.0.ffn_down.bias' has shape"), std::string::npos);
  EXPECT_NE(refusal("", "blk.0.ffn_norm.bias", {hp.dim}).find("biases ('blk.0.ffn_norm.bias') are not supported"), std::string::npos);
  EXPECT_NE(refusal("", "blk.0.attn_k_norm.weight", {hp.head_dim}).find("per-head query/key norms"), std::string::npos);
  EXPECT_NE(refusal("", "blk.0.ffn_gate_inp.weight", {hp.dim, 8}).find("mixture-of-experts"), std::string::npos);
  EXPECT_NE(refusal("", "blk.0.post_attention_norm.weight", {hp.dim}).find("is not one the llama forward pass reads"), std::string::npos);
  EXPECT_NE(refusal("llama.attention.sliding_window", "", {}).find("metadata 'llama.attention.sliding_window'"), std::string::npos);
  EXPECT_EQ(refusal("llama.attention.sliding_window", "", {}, "llama", 0), "");   // (a window of 0 is none)
  EXPECT_NE(refusal("llama.expert_count", "", {}).find("mixture-of-experts ('llama', 8 experts)"), std::string::npos);
  EXPECT_NE(refusal("", "", {}, "gemma4").find("architecture 'gemma4' (Gemma 4) is not supported"), std::string::npos);
  EXPECT_NE(refusal("", "", {}, "gemma2").find("missing tensor 'blk.0.post_attention_norm.weight'"), std::string::npos);
  // Gemma 3 has no attention soft-capping: a cap in its file is not ignored
  EXPECT_NE(refusal("gemma3.attn_logit_softcapping", "", {}, "gemma3", 50).find("metadata 'gemma3.attn_logit_softcapping'"),
            std::string::npos);
  EXPECT_NE(refusal("", "", {}, "qwen2").find("missing tensor 'blk.0.attn_q.bias'"), std::string::npos);   // (Qwen2's are not optional)
  EXPECT_NE(refusal("qwen3moe.expert_count", "", {}, "qwen3moe").find("mixture-of-experts ('qwen3moe', 8 experts)"), std::string::npos);
}

// Loading reads tensors with positioned reads: a file truncated after it was opened gives an Error naming the
// tensor, not SIGBUS from a page of the mapping past the new end. (Windows refuses to truncate a mapped file.)
TEST(Gguf, TensorReadAfterTruncationIsAnError) {
  const std::string copy = ::testing::TempDir() + "/vkspec-truncated.gguf";
  {
    std::ifstream in(shared_path("models/stories260K.gguf"), std::ios::binary);
    std::ofstream out(copy, std::ios::binary);
    out << in.rdbuf();
  }
  GgufFile f(copy);
  const GgufTensor& last = f.tensors().back();
  std::vector<uint8_t> bytes;
  f.read_tensor(last, bytes);   // intact: fine
  ASSERT_EQ(bytes.size(), last.bytes);
  std::error_code ec;
  std::filesystem::resize_file(copy, uint64_t(last.data - f.tensors().front().data) / 2, ec);
  if (ec) GTEST_SKIP() << "this system does not truncate a mapped file: " << ec.message();
  try {
    f.read_tensor(last, bytes);
    FAIL() << "read past the truncated end";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(last.name), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("truncated while loading"), std::string::npos) << e.what();
  }
}
}  // namespace
}  // namespace vkspec::test
