#include "gguf/model_file.h"

#include <cmath>

#include "core/quant.h"

namespace vkspec {
namespace {

uint32_t u32(const GgufFile& f, const std::string& key, uint64_t max = 1u << 24) {
  uint64_t v = f.get_uint(key);
  if (v == 0 || v > max) throw Error("GGUF key '" + key + "' has implausible value " + std::to_string(v));
  return uint32_t(v);
}

const GgufTensor* require(const GgufFile& f, const std::string& name, std::vector<uint64_t> shape) {
  const GgufTensor* t = f.tensor(name);
  if (!t) throw Error("'" + f.path() + "': missing tensor '" + name + "'");
  // trailing 1-sized dims are equivalent
  std::vector<uint64_t> dims = t->dims;
  while (dims.size() > shape.size() && dims.back() == 1) dims.pop_back();
  if (dims != shape) {
    auto str = [](const std::vector<uint64_t>& d) {
      std::string s = "[";
      for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
      return s + "]";
    };
    throw Error("tensor '" + name + "' has shape " + str(t->dims) + ", expected " + str(shape) +
                " from the model's hyperparameters");
  }
  return t;
}

// Llama 3 RoPE frequency scaling (as in Meta's reference and llama.cpp's converter): long wavelengths are
// divided by `factor`, short ones kept, the band between smoothly interpolated.
double llama3_factor(double inv_freq, double factor, double low, double high, double orig_ctx) {
  const double wavelen = 2 * M_PI / inv_freq;
  const double low_wavelen = orig_ctx / low, high_wavelen = orig_ctx / high;
  if (wavelen < high_wavelen) return 1.0;
  if (wavelen > low_wavelen) return factor;
  const double smooth = (orig_ctx / wavelen - low) / (high - low);
  return 1.0 / ((1 - smooth) / factor + smooth);
}

}  // namespace

DType weight_dtype(const GgufTensor& t) {
  if (block_layout(t.type).elems == 0)   // the GGUF reader refuses these already
    throw Error("tensor '" + t.name + "' has unsupported type " + ggml_type_name(t.type));
  return DType(t.type);
}

LlamaHParams read_llama_hparams(const GgufFile& f) {
  std::string arch = f.get_string("general.architecture");
  if (arch != "llama")
    throw Error("'" + f.path() + "': architecture '" + arch + "' is not supported (vkspec runs 'llama' models)");
  LlamaHParams hp;
  hp.dim = u32(f, "llama.embedding_length");
  hp.n_layers = u32(f, "llama.block_count", 1024);
  hp.n_heads = u32(f, "llama.attention.head_count", 1024);
  hp.n_kv_heads = f.opt_uint("llama.attention.head_count_kv") ? u32(f, "llama.attention.head_count_kv", 1024) : hp.n_heads;
  hp.ffn_dim = u32(f, "llama.feed_forward_length");
  hp.n_ctx_train = u32(f, "llama.context_length", 1u << 24);
  if (hp.n_heads % hp.n_kv_heads)
    throw Error("head_count " + std::to_string(hp.n_heads) + " is not a multiple of head_count_kv " + std::to_string(hp.n_kv_heads));
  if (hp.dim % hp.n_heads) throw Error("embedding_length is not a multiple of head_count");
  hp.head_dim = hp.dim / hp.n_heads;
  if (auto kd = f.opt_uint("llama.attention.key_length"); kd && *kd != hp.head_dim)
    throw Error("llama.attention.key_length != embedding_length / head_count is not supported");
  if (hp.head_dim > 256) throw Error("head dimension " + std::to_string(hp.head_dim) + " > 256 is not supported");
  // the KV cache stores a head's elements as f16 pairs (shaders/paged_kv.glsl)
  if (hp.head_dim % 2) throw Error("head dimension " + std::to_string(hp.head_dim) + " is odd (not supported)");
  hp.n_rot = f.opt_uint("llama.rope.dimension_count") ? u32(f, "llama.rope.dimension_count", 1024) : hp.head_dim;
  if (hp.n_rot % 2 || hp.n_rot > hp.head_dim) throw Error("llama.rope.dimension_count must be even and <= head dim");
  hp.rms_eps = float(f.opt_number("llama.attention.layer_norm_rms_epsilon").value_or(1e-5));
  if (!(hp.rms_eps > 0 && hp.rms_eps < 1)) throw Error("implausible llama.attention.layer_norm_rms_epsilon");
  hp.rope_base = f.opt_number("llama.rope.freq_base").value_or(10000.0);
  if (!(hp.rope_base > 1 && std::isfinite(hp.rope_base))) throw Error("implausible llama.rope.freq_base");

  const GgufTensor* embd = f.tensor("token_embd.weight");
  if (!embd) throw Error("'" + f.path() + "': missing tensor 'token_embd.weight'");
  if (embd->dims.size() < 2)
    throw Error("tensor 'token_embd.weight' has " + std::to_string(embd->dims.size()) +
                " dimension; expected 2 ([embedding_length, vocabulary size])");
  hp.n_vocab = uint32_t(embd->dims[1]);
  if (auto tokens = f.opt_strings("tokenizer.ggml.tokens"); tokens && tokens->size() != hp.n_vocab)
    throw Error("vocabulary has " + std::to_string(tokens->size()) + " tokens but token_embd.weight has " +
                std::to_string(hp.n_vocab) + " rows");
  hp.tied_embeddings = f.tensor("output.weight") == nullptr;

  // RoPE inverse frequencies with scaling folded in.
  const uint32_t half = hp.n_rot / 2;
  hp.rope_inv_freq.resize(half);
  for (uint32_t i = 0; i < half; ++i) hp.rope_inv_freq[i] = std::pow(hp.rope_base, -2.0 * i / hp.n_rot);
  std::string scaling = f.opt_string("llama.rope.scaling.type").value_or("none");
  double factor = f.opt_number("llama.rope.scaling.factor").value_or(1.0);
  if (const GgufTensor* rf = f.tensor("rope_freqs.weight")) {   // Llama 3: factors precomputed by the converter
    if (rf->type != 0 || rf->elements() != half) throw Error("tensor 'rope_freqs.weight' must be f32 [n_rot/2]");
    const float* fac = reinterpret_cast<const float*>(rf->data);
    for (uint32_t i = 0; i < half; ++i) {
      if (!(fac[i] > 0 && std::isfinite(fac[i]))) throw Error("tensor 'rope_freqs.weight' has a non-positive or non-finite factor");
      hp.rope_inv_freq[i] /= fac[i];
    }
  } else if (scaling == "llama3") {
    double low = f.opt_number("llama.rope.scaling.low_freq_factor").value_or(1.0);
    double high = f.opt_number("llama.rope.scaling.high_freq_factor").value_or(4.0);
    double orig = f.opt_number("llama.rope.scaling.original_context_length").value_or(8192.0);
    if (!(factor >= 1 && high > low && orig > 0 && std::isfinite(factor) && std::isfinite(high) && std::isfinite(orig)))
      throw Error("implausible llama.rope.scaling.* values");
    for (auto& w : hp.rope_inv_freq) w /= llama3_factor(w, factor, low, high, orig);
  } else if (scaling == "linear") {
    if (!(factor > 0 && std::isfinite(factor))) throw Error("implausible llama.rope.scaling.factor");
    for (auto& w : hp.rope_inv_freq) w /= factor;
  } else if (scaling != "none") {
    throw Error("RoPE scaling type '" + scaling + "' is not supported (none, linear, llama3)");
  }
  return hp;
}

LlamaTensors find_llama_tensors(const GgufFile& f, const LlamaHParams& hp) {
  LlamaTensors t;
  const uint64_t q_dim = hp.q_dim(), kv_dim = hp.kv_dim();
  t.token_embd = require(f, "token_embd.weight", {hp.dim, hp.n_vocab});
  t.output_norm = require(f, "output_norm.weight", {hp.dim});
  t.output = hp.tied_embeddings ? t.token_embd : require(f, "output.weight", {hp.dim, hp.n_vocab});
  for (uint32_t l = 0; l < hp.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LlamaLayerTensors L{
        require(f, p + "attn_norm.weight", {hp.dim}),        require(f, p + "attn_q.weight", {hp.dim, q_dim}),
        require(f, p + "attn_k.weight", {hp.dim, kv_dim}),   require(f, p + "attn_v.weight", {hp.dim, kv_dim}),
        require(f, p + "attn_output.weight", {q_dim, hp.dim}), require(f, p + "ffn_norm.weight", {hp.dim}),
        require(f, p + "ffn_gate.weight", {hp.dim, hp.ffn_dim}), require(f, p + "ffn_up.weight", {hp.dim, hp.ffn_dim}),
        require(f, p + "ffn_down.weight", {hp.ffn_dim, hp.dim})};
    for (const GgufTensor* n : {L.attn_norm, L.ffn_norm})
      if (n->type != 0) throw Error("tensor '" + n->name + "': norm weights must be f32");
    for (const GgufTensor* w : {L.wq, L.wk, L.wv, L.wo, L.w_gate, L.w_up, L.w_down}) weight_dtype(*w);
    if (L.w_gate->type != L.w_up->type && !(is_quantized(DType(L.w_gate->type)) && is_quantized(DType(L.w_up->type))))
      throw Error("ffn_gate and ffn_up of layer " + std::to_string(l) + " differ in type");   // one kernel reads both
    t.layers.push_back(L);
  }
  if (t.output_norm->type != 0) throw Error("tensor 'output_norm.weight' must be f32");
  weight_dtype(*t.token_embd);
  weight_dtype(*t.output);
  return t;
}

}  // namespace vkspec
