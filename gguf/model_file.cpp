#include "gguf/model_file.h"

#include <algorithm>
#include <cmath>
#include <set>

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

// The keys vkspec reads under the architecture's prefix (read_llama_hparams) and those it checks to be
// neutral (below).
const std::set<std::string> kReadKeys = {
    "embedding_length", "block_count", "attention.head_count", "attention.head_count_kv", "feed_forward_length",
    "context_length", "attention.key_length", "attention.value_length", "rope.dimension_count",
    "attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.scaling.type", "rope.scaling.factor",
    "rope.scaling.low_freq_factor", "rope.scaling.high_freq_factor", "rope.scaling.original_context_length",
    "rope.scaling.finetuned", "rope.scaling.attn_factor", "vocab_size", "expert_count", "expert_used_count"};
bool gemma(Architecture a) { return a == Architecture::Gemma2 || a == Architecture::Gemma3; }

// Keys only some architectures read, or neutral at some values: a sliding window of 0 is none (phi3's is
// refused beyond the context, LlamaModel); Gemma's window, its pattern and RoPE base, and soft-capping
// (Gemma 3 has no attention soft-capping).
bool read_by(Architecture a, const std::string& key, const GgufValue& value) {
  const bool zero = value.type != GgufType::STRING && value.type != GgufType::ARRAY && value.number == 0;
  if (key == "attention.sliding_window") return a == Architecture::Phi3 || gemma(a) || zero;
  if (key == "attention.sliding_window_pattern" || key == "rope.freq_base_swa" || key == "final_logit_softcapping")
    return gemma(a);
  if (key == "attn_logit_softcapping") return a == Architecture::Gemma2 || zero;
  return false;
}

const std::pair<Architecture, const char*> kArchitectures[] = {
    {Architecture::Llama, "llama"}, {Architecture::Qwen2, "qwen2"},   {Architecture::Qwen3, "qwen3"},
    {Architecture::Phi3, "phi3"},   {Architecture::Gemma2, "gemma2"}, {Architecture::Gemma3, "gemma3"}};

// What the families people ask for are, for the refusal (issue: other model families).
std::string family_of(const std::string& arch) {
  static const std::pair<const char*, const char*> kFamilies[] = {
      {"gemma", "Gemma"}, {"gemma3n", "Gemma 3n"}, {"gemma4", "Gemma 4"}, {"phi2", "Phi-2"}, {"mistral3", "Mistral 3"}};
  for (const auto& [a, name] : kFamilies)
    if (arch == a) return std::string(" (") + name + ")";
  return "";
}

// What a tensor that the llama forward pass does not read carries, for the refusal.
std::string unread_tensor(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("_exps") || has("ffn_gate_inp") || has("_shexp")) return "mixture-of-experts ('" + name + "') is not supported";
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) return "biases ('" + name + "') are not supported yet";
  if (has("attn_q_norm") || has("attn_k_norm")) return "per-head query/key norms ('" + name + "') are not supported yet";
  if (has("attn_qkv")) return "fused q/k/v weights ('" + name + "') are not supported yet";
  return "tensor '" + name + "' is not one the llama forward pass reads";
}

// Gemma 2 and 3 as llama.cpp reads them (src/models/gemma2.cpp, gemma3.cpp): the differences from Llama's pass.
void read_gemma_hparams(const GgufFile& f, const std::string& a, LlamaHParams& hp) {
  const bool g2 = hp.arch == Architecture::Gemma2;
  hp.embed_scale = std::sqrt(float(hp.dim));
  hp.post_norms = true;
  hp.gelu_gate = true;
  // Gemma's query_pre_attn_scalar: the head's width, but dim / heads for the 27B models (known by their depth)
  const bool big = hp.n_layers == (g2 ? 46u : 62u);
  hp.attn_scale = float(1.0 / std::sqrt(double(big ? hp.dim / hp.n_heads : hp.head_dim)));
  auto positive = [&](const char* key, double fallback) {
    const double v = f.opt_number(a + key).value_or(fallback);
    if (!(v >= 0 && std::isfinite(v))) throw Error("implausible " + a + key);
    return float(v);
  };
  hp.final_softcap = positive("final_logit_softcapping", g2 ? 30.0 : 0.0);
  hp.attn_softcap = g2 ? positive("attn_logit_softcapping", 50.0) : 0.0f;
  if (g2 && (hp.final_softcap == 0 || hp.attn_softcap == 0)) throw Error("implausible " + a + "*_logit_softcapping (0)");
  // Sliding-window layers: Gemma 2's window defaults to 4096 (every other layer), Gemma 3's is none without the key.
  hp.sliding_window = uint32_t(std::min<uint64_t>(f.opt_uint(a + "attention.sliding_window").value_or(g2 ? 4096 : 0), UINT32_MAX));
  if (hp.sliding_window == 0) {
    if (g2) throw Error("implausible " + a + "attention.sliding_window (0)");
    return;
  }
  hp.swa_layers.assign(hp.n_layers, false);
  const std::string pattern_key = a + "attention.sliding_window_pattern";
  const auto it = f.metadata().find(pattern_key);
  if (it != f.metadata().end() && it->second.type == GgufType::ARRAY) {   // one flag per layer
    const std::vector<double> flags = it->second.numbers(pattern_key);
    if (flags.size() != hp.n_layers) throw Error(pattern_key + " has " + std::to_string(flags.size()) + " entries for " +
                                                 std::to_string(hp.n_layers) + " layers");
    for (uint32_t l = 0; l < hp.n_layers; ++l) hp.swa_layers[l] = flags[l] != 0;
  } else {   // a period: the last layer of each n is global (0: every layer windowed)
    const uint64_t n = f.opt_uint(pattern_key).value_or(g2 ? 2 : 6);
    for (uint32_t l = 0; l < hp.n_layers; ++l) hp.swa_layers[l] = n == 0 || l % n < n - 1;
  }
  // Their RoPE: base rope.freq_base_swa (default: Gemma 2 the global base with its scaling, Gemma 3 10000 unscaled)
  const double base_swa = f.opt_number(a + "rope.freq_base_swa").value_or(g2 ? hp.rope_base : 10000.0);
  if (!(base_swa > 1 && std::isfinite(base_swa))) throw Error("implausible " + a + "rope.freq_base_swa");
  hp.rope_inv_freq_swa.resize(hp.n_rot / 2);
  for (uint32_t i = 0; i < hp.n_rot / 2; ++i) {
    const double exponent = -2.0 * i / hp.n_rot;
    hp.rope_inv_freq_swa[i] = std::pow(base_swa, exponent) * (g2 ? hp.rope_inv_freq[i] / std::pow(hp.rope_base, exponent) : 1.0);
  }
}

}  // namespace

const char* architecture_name(Architecture a) {
  for (const auto& [arch, name] : kArchitectures)
    if (arch == a) return name;
  return "?";
}

Architecture check_supported_model(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  const std::string where = "'" + f.path() + "': ";
  if (const auto experts = f.opt_uint(arch + ".expert_count"); experts && *experts > 0)
    throw Error(where + "mixture-of-experts ('" + arch + "', " + std::to_string(*experts) + " experts) is not supported");
  const auto known = std::find_if(std::begin(kArchitectures), std::end(kArchitectures), [&](const auto& a) { return arch == a.second; });
  if (known == std::end(kArchitectures))
    throw Error(where + "architecture '" + arch + "'" + family_of(arch) + " is not supported (vkspec runs 'llama', 'qwen2', 'qwen3', 'phi3', 'gemma2' and 'gemma3' models)");
  const std::string prefix = arch + ".";
  for (const auto& [key, value] : f.metadata()) {
    if (key.rfind(prefix, 0) != 0 || kReadKeys.count(key.substr(prefix.size())) || read_by(known->first, key.substr(prefix.size()), value))
      continue;
    throw Error(where + "metadata '" + key + "' changes how the model computes in a way vkspec does not implement "
                "(refused rather than ignored)");
  }
  return known->first;
}

DType weight_dtype(const GgufTensor& t) {
  if (block_layout(t.type).elems == 0)   // the GGUF reader refuses these already
    throw Error("tensor '" + t.name + "' has unsupported type " + ggml_type_name(t.type));
  return DType(t.type);
}

LlamaHParams read_llama_hparams(const GgufFile& f) {
  LlamaHParams hp;
  hp.arch = check_supported_model(f);
  hp.rope_neox = hp.arch != Architecture::Llama;
  const std::string a = std::string(architecture_name(hp.arch)) + ".";
  hp.dim = u32(f, a + "embedding_length");
  hp.n_layers = u32(f, a + "block_count", 1024);
  hp.n_heads = u32(f, a + "attention.head_count", 1024);
  hp.n_kv_heads = f.opt_uint(a + "attention.head_count_kv") ? u32(f, a + "attention.head_count_kv", 1024) : hp.n_heads;
  hp.ffn_dim = u32(f, a + "feed_forward_length");
  hp.n_ctx_train = u32(f, a + "context_length", 1u << 24);
  if (hp.n_heads % hp.n_kv_heads)
    throw Error("head_count " + std::to_string(hp.n_heads) + " is not a multiple of head_count_kv " + std::to_string(hp.n_kv_heads));
  // A head's width: key_length where the file gives it (Qwen3's and Mistral Nemo's differ from
  // embedding_length / head_count: q_dim = head_count * key_length), else embedding_length / head_count.
  if (f.opt_uint(a + "attention.key_length")) {
    hp.head_dim = u32(f, a + "attention.key_length", 1024);
  } else {
    if (hp.dim % hp.n_heads) throw Error("embedding_length is not a multiple of head_count");
    hp.head_dim = hp.dim / hp.n_heads;
  }
  if (auto d = f.opt_uint(a + "attention.value_length"); d && *d != hp.head_dim)
    throw Error(a + "attention.value_length != key_length (a head's width) is not supported");
  if (hp.head_dim > 256) throw Error("head dimension " + std::to_string(hp.head_dim) + " > 256 is not supported");
  // the KV cache stores a head's elements as f16 pairs (shaders/paged_kv.glsl)
  if (hp.head_dim % 2) throw Error("head dimension " + std::to_string(hp.head_dim) + " is odd (not supported)");
  hp.n_rot = f.opt_uint(a + "rope.dimension_count") ? u32(f, a + "rope.dimension_count", 1024) : hp.head_dim;
  if (hp.n_rot % 2 || hp.n_rot > hp.head_dim) throw Error(a + "rope.dimension_count must be even and <= head dim");
  hp.rms_eps = float(f.opt_number(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  if (!(hp.rms_eps > 0 && hp.rms_eps < 1)) throw Error("implausible " + a + "attention.layer_norm_rms_epsilon");
  hp.rope_base = f.opt_number(a + "rope.freq_base").value_or(10000.0);
  if (!(hp.rope_base > 1 && std::isfinite(hp.rope_base))) throw Error("implausible " + a + "rope.freq_base");

  const GgufTensor* embd = f.tensor("token_embd.weight");
  if (!embd) throw Error("'" + f.path() + "': missing tensor 'token_embd.weight'");
  if (embd->dims.size() < 2)
    throw Error("tensor 'token_embd.weight' has " + std::to_string(embd->dims.size()) +
                " dimension; expected 2 ([embedding_length, vocabulary size])");
  hp.n_vocab = uint32_t(embd->dims[1]);
  if (auto tokens = f.opt_strings("tokenizer.ggml.tokens"); tokens && tokens->size() != hp.n_vocab)
    throw Error("vocabulary has " + std::to_string(tokens->size()) + " tokens but token_embd.weight has " +
                std::to_string(hp.n_vocab) + " rows");
  if (auto v = f.opt_uint(a + "vocab_size"); v && *v != hp.n_vocab)
    throw Error(a + "vocab_size is " + std::to_string(*v) + " but token_embd.weight has " + std::to_string(hp.n_vocab) + " rows");
  hp.tied_embeddings = f.tensor("output.weight") == nullptr || hp.arch == Architecture::Gemma2;   // (Gemma 2's
  // logits always read token_embd, as llama.cpp's do: an output.weight there is refused as unread)

  // RoPE inverse frequencies with scaling folded in.
  const uint32_t half = hp.n_rot / 2;
  hp.rope_inv_freq.resize(half);
  for (uint32_t i = 0; i < half; ++i) hp.rope_inv_freq[i] = std::pow(hp.rope_base, -2.0 * i / hp.n_rot);
  std::string scaling = f.opt_string(a + "rope.scaling.type").value_or("none");
  double factor = f.opt_number(a + "rope.scaling.factor").value_or(1.0);
  hp.rope_attn_factor = f.opt_number(a + "rope.scaling.attn_factor").value_or(1.0);
  if (!(hp.rope_attn_factor > 0 && std::isfinite(hp.rope_attn_factor))) throw Error("implausible " + a + "rope.scaling.attn_factor");
  if (auto w = f.opt_uint(a + "attention.sliding_window")) hp.sliding_window = uint32_t(std::min<uint64_t>(*w, UINT32_MAX));
  // LongRoPE's two sets of divisors (llama.cpp's rope_factors_short/long), kept apart: the context decides
  auto factors = [&](const char* name) {
    std::vector<double> out;
    const GgufTensor* t = f.tensor(name);
    if (!t) return out;
    if (t->type != 0 || t->elements() != half) throw Error(std::string("tensor '") + name + "' must be f32 [n_rot/2]");
    const float* v = reinterpret_cast<const float*>(t->data);
    for (uint32_t i = 0; i < half; ++i) {
      if (!(v[i] > 0 && std::isfinite(v[i]))) throw Error(std::string("tensor '") + name + "' has a non-positive or non-finite factor");
      out.push_back(v[i]);
    }
    return out;
  };
  hp.rope_short_factors = factors("rope_factors_short.weight");
  hp.rope_long_factors = factors("rope_factors_long.weight");
  if (hp.rope_short_factors.empty() != hp.rope_long_factors.empty())
    throw Error("LongRoPE needs both rope_factors_short.weight and rope_factors_long.weight");
  if (!hp.rope_short_factors.empty()) {
    hp.rope_original_ctx = u32(f, a + "rope.scaling.original_context_length", 1u << 24);
    if (scaling == "longrope") scaling = "none";   // (the factors are the scaling)
  }
  if (const GgufTensor* rf = f.tensor("rope_freqs.weight")) {   // Llama 3: factors precomputed by the converter
    if (rf->type != 0 || rf->elements() != half) throw Error("tensor 'rope_freqs.weight' must be f32 [n_rot/2]");
    const float* fac = reinterpret_cast<const float*>(rf->data);
    for (uint32_t i = 0; i < half; ++i) {
      if (!(fac[i] > 0 && std::isfinite(fac[i]))) throw Error("tensor 'rope_freqs.weight' has a non-positive or non-finite factor");
      hp.rope_inv_freq[i] /= fac[i];
    }
  } else if (scaling == "llama3") {
    double low = f.opt_number(a + "rope.scaling.low_freq_factor").value_or(1.0);
    double high = f.opt_number(a + "rope.scaling.high_freq_factor").value_or(4.0);
    double orig = f.opt_number(a + "rope.scaling.original_context_length").value_or(8192.0);
    if (!(factor >= 1 && high > low && orig > 0 && std::isfinite(factor) && std::isfinite(high) && std::isfinite(orig)))
      throw Error("implausible " + a + "rope.scaling.* values");
    for (auto& w : hp.rope_inv_freq) w /= llama3_factor(w, factor, low, high, orig);
  } else if (scaling == "linear") {
    if (!(factor > 0 && std::isfinite(factor))) throw Error("implausible " + a + "rope.scaling.factor");
    for (auto& w : hp.rope_inv_freq) w /= factor;
  } else if (scaling != "none") {
    throw Error("RoPE scaling type '" + scaling + "' is not supported (none, linear, llama3)");
  }
  if (gemma(hp.arch)) read_gemma_hparams(f, a, hp);
  return hp;
}

std::vector<double> LlamaHParams::inv_freq(uint32_t n_ctx) const {
  std::vector<double> w = rope_inv_freq;
  const std::vector<double>& factors = n_ctx > rope_original_ctx ? rope_long_factors : rope_short_factors;
  for (size_t i = 0; i < factors.size() && i < w.size(); ++i) w[i] /= factors[i];
  return w;
}

LlamaTensors find_llama_tensors(const GgufFile& f, const LlamaHParams& hp) {
  LlamaTensors t;
  const uint64_t q_dim = hp.q_dim(), kv_dim = hp.kv_dim();
  t.token_embd = require(f, "token_embd.weight", {hp.dim, hp.n_vocab});
  t.output_norm = require(f, "output_norm.weight", {hp.dim});
  t.output = hp.tied_embeddings ? t.token_embd : require(f, "output.weight", {hp.dim, hp.n_vocab});
  for (uint32_t l = 0; l < hp.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LlamaLayerTensors L{};
    L.attn_norm = require(f, p + "attn_norm.weight", {hp.dim});
    if (hp.arch == Architecture::Phi3 && f.tensor(p + "attn_qkv.weight")) {
      L.wqkv = require(f, p + "attn_qkv.weight", {hp.dim, q_dim + 2 * kv_dim});
    } else {
      L.wq = require(f, p + "attn_q.weight", {hp.dim, q_dim});
      L.wk = require(f, p + "attn_k.weight", {hp.dim, kv_dim});
      L.wv = require(f, p + "attn_v.weight", {hp.dim, kv_dim});
    }
    L.wo = require(f, p + "attn_output.weight", {q_dim, hp.dim});
    L.ffn_norm = require(f, p + "ffn_norm.weight", {hp.dim});
    if (hp.arch == Architecture::Phi3) {
      L.w_gate_up = require(f, p + "ffn_up.weight", {hp.dim, 2ull * hp.ffn_dim});
    } else {
      L.w_gate = require(f, p + "ffn_gate.weight", {hp.dim, hp.ffn_dim});
      L.w_up = require(f, p + "ffn_up.weight", {hp.dim, hp.ffn_dim});
    }
    L.w_down = require(f, p + "ffn_down.weight", {hp.ffn_dim, hp.dim});
    // q/k/v biases: Qwen2's always, a Llama file's where it has them (llama.cpp applies them too)
    if (hp.arch == Architecture::Qwen2 || f.tensor(p + "attn_q.bias") || f.tensor(p + "attn_k.bias") || f.tensor(p + "attn_v.bias")) {
      L.bq = require(f, p + "attn_q.bias", {q_dim});
      L.bk = require(f, p + "attn_k.bias", {kv_dim});
      L.bv = require(f, p + "attn_v.bias", {kv_dim});
    }
    if (hp.arch == Architecture::Qwen3 || hp.arch == Architecture::Gemma3) {   // per-head RMSNorm of q and k, before RoPE
      L.q_norm = require(f, p + "attn_q_norm.weight", {hp.head_dim});
      L.k_norm = require(f, p + "attn_k_norm.weight", {hp.head_dim});
    }
    if (hp.arch == Architecture::Llama) {   // optional biases of the output and FFN projections
      auto optional = [&](const std::string& name, uint64_t width) { return f.tensor(name) ? require(f, name, {width}) : nullptr; };
      L.bo = optional(p + "attn_output.bias", hp.dim);
      L.b_gate = optional(p + "ffn_gate.bias", hp.ffn_dim);
      L.b_up = optional(p + "ffn_up.bias", hp.ffn_dim);
      L.b_down = optional(p + "ffn_down.bias", hp.dim);
    }
    if (hp.post_norms) {
      L.attn_post_norm = require(f, p + "post_attention_norm.weight", {hp.dim});
      L.ffn_post_norm = require(f, p + "post_ffw_norm.weight", {hp.dim});
    }
    for (const GgufTensor* n : {L.attn_norm, L.ffn_norm, L.bq, L.bk, L.bv, L.q_norm, L.k_norm, L.attn_post_norm, L.ffn_post_norm,
                                L.bo, L.b_gate, L.b_up, L.b_down})
      if (n && n->type != 0) throw Error("tensor '" + n->name + "': norm weights and biases must be f32");
    for (const GgufTensor* w : {L.wq, L.wk, L.wv, L.wqkv, L.wo, L.w_gate, L.w_up, L.w_gate_up, L.w_down})
      if (w) weight_dtype(*w);
    if (L.w_gate && L.w_gate->type != L.w_up->type && !(is_quantized(DType(L.w_gate->type)) && is_quantized(DType(L.w_up->type))))
      throw Error("ffn_gate and ffn_up of layer " + std::to_string(l) + " differ in type");   // one kernel reads both
    t.layers.push_back(L);
  }
  if (t.output_norm->type != 0) throw Error("tensor 'output_norm.weight' must be f32");
  weight_dtype(*t.token_embd);
  weight_dtype(*t.output);
  std::set<const GgufTensor*> read = {t.token_embd, t.output_norm, t.output, f.tensor("rope_freqs.weight"),
                                      f.tensor("rope_factors_short.weight"), f.tensor("rope_factors_long.weight")};
  for (const LlamaLayerTensors& L : t.layers)
    read.insert({L.attn_norm, L.wq, L.wk, L.wv, L.wqkv, L.bq, L.bk, L.bv, L.q_norm, L.k_norm, L.wo, L.ffn_norm,
                 L.w_gate, L.w_up, L.w_gate_up, L.w_down, L.attn_post_norm, L.ffn_post_norm, L.bo, L.b_gate, L.b_up,
                 L.b_down});
  for (const GgufTensor& x : f.tensors())
    if (!read.count(&x)) throw Error("'" + f.path() + "': " + unread_tensor(x.name) + " (refused rather than ignored)");
  return t;
}

}  // namespace vkspec
