// vkspec-shape: writes a random-weight Llama at a real shape with a real vocabulary, for benchmarks and
// parity runs where no checkpoint can be downloaded.
//   vkspec-shape OUT.gguf VOCAB.gguf 1b|3b|tiny|tiny-biases|qwen2-*|qwen3-*|phi3-tiny|gemma2-tiny|gemma2-2b|gemma3-tiny|gemma3-1b f32|f16|q8_0 [SEED]
// VOCAB.gguf supplies the tokenizer metadata (e.g. ../shared/tokenizer-tests/ggml-vocab-llama-bpe.gguf, the
// Llama 3 vocabulary); the hyperparameters are Llama-3.2-1B's / 3B's (tied embeddings, rope theta 500000 with
// Llama 3 scaling); `tiny` is the same architecture and vocabulary at dim 256, 2 layers (tests: 65 MB in
// f16, rows a multiple of 256 so that llama.cpp's k-quant presets apply), `tiny-biases` with every optional
// bias of the llama architecture (q/k/v, output, FFN gate, up and down). qwen2-0.5b is Qwen2.5-0.5B's shape
// in the `qwen2` architecture (q/k/v biases, rope theta 1000000, tied embeddings; ../shared's models or
// llama.cpp's ggml-vocab-qwen2.gguf for the vocabulary), qwen2-tiny the same at dim 256, 2 layers; qwen3-0.6b
// is Qwen3-0.6B's (`qwen3`: per-head q/k norms, 128-wide heads over a 1024 embedding), qwen3-tiny at dim 256;
// phi3-tiny is Phi-4-mini's layout at dim 256 (`phi3`: q|k|v and gate|up stored fused, 3/4 of each head
// rotated, LongRoPE short/long factors past an original context of 4096, attn_factor 1.19); gemma2-tiny and
// gemma3-tiny are Gemma 2's and Gemma 3's passes at dim 256 (`gemma2`: post norms, GeGLU, soft-capped scores
// (cap 2) and logits (cap 5), layer 0 on a window of 8 positions; `gemma3`: q/k norms, layer 0 windowed with
// RoPE base 10000, layer 1 global with base 1000000 scaled linearly by 8), gemma3-1b and gemma2-2b the real
// shapes (their windows, Gemma 2's caps of 50 and 30).
// Weights ~ N(0, 1/cols) so activations stay O(1) through the layers; norms ~ 1, biases ~ N(0, 0.25).
// Tensor data is streamed to the file (a 3B f16 model is 6 GB), never held whole in memory.
#include <cmath>
#include <fstream>
#include <iterator>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "core/quant.h"
#include "tests/gguf_writer.h"

using namespace vkspec;

namespace {

struct Shape { uint32_t dim, layers, heads, kv_heads, ffn, head_dim = 0; };   // head_dim 0: dim / heads
struct Planned { std::string name; uint32_t rows, cols; bool norm, bias = false; };

uint32_t type_code(const std::string& t) {
  if (t == "f32") return 0;
  if (t == "f16") return 1;
  if (t == "q8_0") return 8;
  throw std::runtime_error("type must be f32, f16 or q8_0");
}

std::vector<uint8_t> encode(const std::vector<float>& v, uint32_t type) {
  std::vector<uint8_t> out(gguf_tensor_bytes(type, v.size()));
  if (type == 0) memcpy(out.data(), v.data(), out.size());
  else if (type == 1) for (size_t i = 0; i < v.size(); ++i) reinterpret_cast<uint16_t*>(out.data())[i] = float_to_half(v[i]);
  else quantize_q8_0(v.data(), v.size(), out.data());
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 5) {
    fprintf(stderr, "usage: vkspec-shape OUT.gguf VOCAB.gguf 1b|3b|tiny|tiny-biases|qwen2-0.5b|qwen2-tiny|qwen3-0.6b|qwen3-tiny|phi3-tiny|gemma2-tiny|gemma2-2b|gemma3-tiny|gemma3-1b f32|f16|q8_0 [SEED [CHAT_TEMPLATE.jinja]]\n");
    return 2;
  }
  const std::string shape_name = argv[3];
  const bool qwen3 = shape_name.rfind("qwen3-", 0) == 0, qwen2 = shape_name.rfind("qwen2-", 0) == 0 || qwen3;
  const Shape s = shape_name == "1b"           ? Shape{2048, 16, 32, 8, 8192}
                  : shape_name == "3b"         ? Shape{3072, 28, 24, 8, 8192}
                  : shape_name == "tiny"       ? Shape{256, 2, 4, 2, 512}
                  : shape_name == "tiny-biases" ? Shape{256, 2, 4, 2, 512}
                  : shape_name == "qwen2-0.5b" ? Shape{896, 24, 14, 2, 4864}
                  : shape_name == "qwen2-tiny" ? Shape{256, 2, 4, 2, 512}
                  : shape_name == "qwen3-0.6b" ? Shape{1024, 28, 16, 8, 3072, 128}
                  : shape_name == "qwen3-tiny" ? Shape{256, 2, 4, 2, 512, 128}
                  : shape_name == "phi3-tiny"  ? Shape{256, 2, 4, 2, 512}
                  : shape_name == "gemma2-tiny" ? Shape{256, 2, 4, 2, 512}
                  : shape_name == "gemma3-tiny" ? Shape{256, 2, 4, 2, 512, 128}
                  : shape_name == "gemma3-1b"  ? Shape{1152, 26, 4, 1, 6912, 256}
                  : shape_name == "gemma2-2b"  ? Shape{2304, 26, 8, 4, 9216, 256}
                                               : throw std::runtime_error("unknown shape " + shape_name);
  const bool phi3 = shape_name == "phi3-tiny", biases = shape_name == "tiny-biases";
  const bool gemma2 = shape_name.rfind("gemma2-", 0) == 0, gemma3 = shape_name.rfind("gemma3-", 0) == 0, gemma = gemma2 || gemma3;
  const std::string arch = phi3 ? "phi3" : gemma2 ? "gemma2" : gemma3 ? "gemma3" : qwen3 ? "qwen3" : qwen2 ? "qwen2" : "llama";
  const std::string a = arch + ".";
  const uint32_t type = type_code(argv[4]);
  const uint32_t seed = argc > 5 ? uint32_t(std::stoul(argv[5])) : 1;
  GgufFile vocab(argv[2]);
  const uint32_t n_vocab = uint32_t(vocab.metadata().at("tokenizer.ggml.tokens").strings.size());
  const uint32_t hd = s.head_dim ? s.head_dim : s.dim / s.heads;

  test::GgufWriter w;
  w.copy_metadata(vocab, [](const std::string& k) { return k.rfind("tokenizer.", 0) != 0; });
  w.str("general.architecture", arch);
  w.str("general.name", "random " + shape_name + " shape");
  if (s.head_dim) w.u32(a + "attention.key_length", s.head_dim), w.u32(a + "attention.value_length", s.head_dim);
  w.u32(a + "embedding_length", s.dim);
  w.u32(a + "block_count", s.layers);
  w.u32(a + "attention.head_count", s.heads);
  w.u32(a + "attention.head_count_kv", s.kv_heads);
  w.u32(a + "feed_forward_length", s.ffn);
  w.u32(a + "context_length", qwen2 || gemma3 ? 32768 : gemma2 ? 8192 : 131072);
  const uint32_t n_rot = phi3 ? hd * 3 / 4 : hd;
  w.u32(a + "rope.dimension_count", n_rot);
  if (phi3) {
    w.u32(a + "rope.scaling.original_context_length", 4096);
    w.f32(a + "rope.scaling.attn_factor", 1.19f);
  }
  if (gemma) {
    const bool tiny = shape_name.find("tiny") != std::string::npos;
    w.u32(a + "attention.sliding_window", tiny ? 8 : gemma2 ? 4096 : 512);
    if (gemma2) w.f32(a + "attn_logit_softcapping", tiny ? 2.f : 50.f), w.f32(a + "final_logit_softcapping", tiny ? 5.f : 30.f);
    if (gemma3 && tiny) w.bools(a + "attention.sliding_window_pattern", {true, false});
    if (gemma3) w.f32(a + "rope.freq_base_swa", 10000.f);
    if (gemma3 && tiny) w.str(a + "rope.scaling.type", "linear"), w.f32(a + "rope.scaling.factor", 8.f);
  }
  w.f32(a + "rope.freq_base", qwen2 || gemma3 ? 1000000.f : gemma2 ? 10000.f : 500000.f);
  w.f32(a + "attention.layer_norm_rms_epsilon", qwen2 || gemma ? 1e-6f : 1e-5f);
  w.u32("general.file_type", type == 0 ? 0 : type == 1 ? 1 : 7);
  if (argc > 6) {   // an Instruct model's template (tokenizer.chat_template), e.g. ../shared/chat-templates/
    std::ifstream in(argv[6], std::ios::binary);
    if (!in) throw std::runtime_error(std::string("cannot read ") + argv[6]);
    w.str("tokenizer.chat_template", std::string(std::istreambuf_iterator<char>(in), {}));
  }

  // Llama 3 RoPE scaling as Meta's checkpoints converted by llama.cpp carry it: a rope_freqs.weight tensor of
  // per-frequency divisors (factor 32, low/high frequency factors 1/4, original context 8192).
  std::vector<float> rope_factors(hd / 2);
  for (uint32_t i = 0; i < hd / 2; ++i) {
    const double freq = std::pow(500000.0, -2.0 * i / hd), wavelen = 2 * M_PI / freq;
    const double factor = 32, low = 1, high = 4, orig = 8192;
    if (wavelen < orig / high) rope_factors[i] = 1.f;
    else if (wavelen > orig / low) rope_factors[i] = float(factor);
    else {
      const double smooth = (orig / wavelen - low) / (high - low);
      rope_factors[i] = float(1 / ((1 - smooth) / factor + smooth));
    }
  }
  if (phi3) {
    for (const auto& [name, step] : {std::pair{"rope_factors_short.weight", 0.05f}, {"rope_factors_long.weight", 0.5f}}) {
      std::vector<float> f(n_rot / 2);
      for (uint32_t i = 0; i < n_rot / 2; ++i) f[i] = 1.f + step * float(i);
      w.tensor(name, {n_rot / 2}, 0, f.data(), f.size() * 4);
    }
  } else if (!qwen2 && !gemma) {
    w.tensor("rope_freqs.weight", {hd / 2}, 0, rope_factors.data(), rope_factors.size() * 4);
  }
  std::vector<Planned> plan = {{"token_embd.weight", n_vocab, s.dim, false}, {"output_norm.weight", 1, s.dim, true}};
  for (uint32_t l = 0; l < s.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    plan.push_back({p + "attn_norm.weight", 1, s.dim, true});
    if (phi3) {
      plan.push_back({p + "attn_qkv.weight", (s.heads + 2 * s.kv_heads) * hd, s.dim, false});
    } else {
      plan.push_back({p + "attn_q.weight", s.heads * hd, s.dim, false});
      plan.push_back({p + "attn_k.weight", s.kv_heads * hd, s.dim, false});
      plan.push_back({p + "attn_v.weight", s.kv_heads * hd, s.dim, false});
    }
    if (qwen3 || gemma3) {
      plan.push_back({p + "attn_q_norm.weight", 1, hd, true});
      plan.push_back({p + "attn_k_norm.weight", 1, hd, true});
    } else if (qwen2 || biases) {
      plan.push_back({p + "attn_q.bias", 1, s.heads * hd, false, true});
      plan.push_back({p + "attn_k.bias", 1, s.kv_heads * hd, false, true});
      plan.push_back({p + "attn_v.bias", 1, s.kv_heads * hd, false, true});
    }
    plan.push_back({p + "attn_output.weight", s.dim, s.heads * hd, false});
    plan.push_back({p + "ffn_norm.weight", 1, s.dim, true});
    if (!phi3) plan.push_back({p + "ffn_gate.weight", s.ffn, s.dim, false});
    plan.push_back({p + "ffn_up.weight", phi3 ? 2 * s.ffn : s.ffn, s.dim, false});
    plan.push_back({p + "ffn_down.weight", s.dim, s.ffn, false});
    if (biases)   // every optional bias llama.cpp reads in the llama architecture
      for (const auto& [name, width] : {std::pair{"attn_output.bias", s.dim}, {"ffn_gate.bias", s.ffn}, {"ffn_up.bias", s.ffn},
                                        {"ffn_down.bias", s.dim}})
        plan.push_back({p + name, 1, width, false, true});
    if (gemma) {
      plan.push_back({p + "post_attention_norm.weight", 1, s.dim, true});
      plan.push_back({p + "post_ffw_norm.weight", 1, s.dim, true});
    }
  }
  // Header with every tensor's offset first (the writer lays tensors out in order, 32-byte aligned), then
  // the data, one tensor at a time.
  for (const Planned& t : plan)
    w.tensor_header(t.name, t.rows == 1 ? std::vector<uint64_t>{t.cols} : std::vector<uint64_t>{t.cols, t.rows},
                    t.norm || t.bias ? 0 : type, gguf_tensor_bytes(t.norm || t.bias ? 0 : type, uint64_t(t.rows) * t.cols));
  FILE* out = fopen(argv[1], "wb");
  if (!out) throw std::runtime_error(std::string("cannot create ") + argv[1]);
  std::vector<uint8_t> head = w.bytes();
  fwrite(head.data(), 1, head.size(), out);
  std::mt19937 rng(seed);
  for (const Planned& t : plan) {
    // Gemma's post norms ~ 6: the sublayers' outputs outweigh the scaled embedding in x, which would
    // otherwise make the tied logits repeat the input token
    const float norm_mean = t.name.find(".post_") != std::string::npos ? 6.f : 1.f;
    std::normal_distribution<float> nd(t.norm ? norm_mean : 0.f, t.norm ? 0.1f : t.bias ? 0.25f : 1.f / std::sqrt(float(t.cols)));
    std::vector<float> v(size_t(t.rows) * t.cols);
    for (auto& x : v) x = nd(rng);
    std::vector<uint8_t> bytes = encode(v, t.norm || t.bias ? 0 : type);
    bytes.resize((bytes.size() + 31) / 32 * 32, 0);
    if (fwrite(bytes.data(), 1, bytes.size(), out) != bytes.size()) throw std::runtime_error("write failed");
  }
  if (fclose(out) != 0) throw std::runtime_error("write failed");
  return 0;
} catch (const std::exception& e) {
  fprintf(stderr, "vkspec-shape: %s\n", e.what());
  return 1;
}
