#pragma once
// The single source of truth for a Llama model's hyperparameters, read from GGUF metadata and checked
// against the tensor shapes, plus the named tensors of the `llama` architecture.
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "core/core.h"   // DType

namespace vkspec {

// The architectures vkspec runs, as the ways they differ from Llama's forward pass (everything else is
// Llama's: RMSNorm, SwiGLU, RoPE, GQA).
enum class Architecture {
  Llama,   // `llama`: Llama 2/3, Mistral 7B, SmolLM2, ...; optional q/k/v biases
  Qwen2,   // `qwen2`: q/k/v biases, NeoX RoPE (Qwen2, Qwen2.5, DeepSeek-R1's Qwen distills)
  Qwen3,   // `qwen3`: per-head RMSNorm of q and k before RoPE, NeoX RoPE, heads wider than dim / heads
  Phi3,    // `phi3`: q|k|v and gate|up stored fused, NeoX RoPE, LongRoPE (Phi-3, Phi-3.5-mini, Phi-4-mini)
  Gemma2,  // `gemma2`: embeddings scaled by sqrt(dim), norms after attention and FFN too, GeGLU, NeoX RoPE,
           // attention and final logits soft-capped, every other layer on a sliding window
  Gemma3,  // `gemma3`: Gemma 2's pass with per-head q/k norms instead of attention soft-capping, five of six
           // layers on a sliding window with RoPE of their own base
};
const char* architecture_name(Architecture a);   // the GGUF general.architecture value

struct LlamaHParams {
  Architecture arch = Architecture::Llama;
  bool rope_neox = false;    // RoPE pairs (i, i + n_rot/2) of a head (NeoX, GPT-J style) instead of (2i, 2i+1)
  uint32_t n_vocab = 0;
  uint32_t dim = 0;          // embedding width
  uint32_t n_layers = 0;
  uint32_t n_heads = 0, n_kv_heads = 0, head_dim = 0;   // GQA: n_heads % n_kv_heads == 0; head_dim: key_length
  uint32_t ffn_dim = 0;
  uint32_t n_rot = 0;        // rotated dims per head (rope.dimension_count), even, <= head_dim
  uint32_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  double rope_base = 10000.0;
  std::vector<double> rope_inv_freq;   // [n_rot/2]: base^(-2i/n_rot) with linear / Llama 3 scaling folded in
  // LongRoPE (Phi-3.5, Phi-4-mini): per-frequency divisors for contexts up to rope_original_ctx (short) and
  // beyond it (long), chosen by the context the model is created with (as llama.cpp does); empty: none.
  std::vector<double> rope_short_factors, rope_long_factors;
  uint32_t rope_original_ctx = 0;
  double rope_attn_factor = 1.0;       // rope.scaling.attn_factor: cos and sin scaled by it
  // attention.sliding_window (0: none): the layers whose swa_layers entry is set attend to the last
  // sliding_window positions only (Gemma); Phi-3's window is not applied (llama.cpp disables it too), so
  // there a context longer than it is refused (LlamaModel).
  uint32_t sliding_window = 0;
  std::vector<bool> swa_layers;        // [n_layers], or empty: no layer is windowed
  std::vector<double> rope_inv_freq_swa;   // [n_rot/2]: the windowed layers' RoPE (their own base), where any
  // Gemma's differences from Llama's pass, neutral for the others:
  float embed_scale = 1.0f;            // x = token_embd[token] * embed_scale (Gemma: sqrt(dim))
  bool post_norms = false;             // x += rmsnorm(sublayer out) * post norm, after attention and FFN
  bool gelu_gate = false;              // the FFN gate's activation: GELU (tanh form) instead of SiLU
  float attn_scale = 0.0f;             // a score's scale (0: 1/sqrt(head_dim))
  float attn_softcap = 0.0f, final_softcap = 0.0f;   // cap * tanh(v / cap) of scores, of logits (0: none)
  bool is_swa(uint32_t layer) const { return layer < swa_layers.size() && swa_layers[layer]; }
  bool tied_embeddings = false;        // no output.weight: logits use token_embd
  // RoPE's inverse frequencies for a model created with a context of n_ctx positions: rope_inv_freq,
  // divided by LongRoPE's long factors when n_ctx exceeds rope_original_ctx, else by its short ones.
  std::vector<double> inv_freq(uint32_t n_ctx) const;
  uint32_t q_dim() const { return n_heads * head_dim; }      // one token's q
  uint32_t kv_dim() const { return n_kv_heads * head_dim; }  // one token's k (and v)
};

struct LlamaLayerTensors {
  const GgufTensor* attn_norm;   // [dim]
  const GgufTensor* wq;          // [n_heads*head_dim][dim]
  const GgufTensor* wk;          // [n_kv_heads*head_dim][dim]
  const GgufTensor* wv;          // [n_kv_heads*head_dim][dim]
  const GgufTensor* wo;          // [dim][n_heads*head_dim]
  const GgufTensor* ffn_norm;    // [dim]
  const GgufTensor* w_gate;      // [ffn_dim][dim]
  const GgufTensor* w_up;        // [ffn_dim][dim]
  const GgufTensor* w_down;      // [dim][ffn_dim]
  const GgufTensor* bq = nullptr;   // [n_heads*head_dim] f32: q = Wq xn + bq (with bk, bv; or none of them)
  const GgufTensor* bk = nullptr;   // [n_kv_heads*head_dim] f32
  const GgufTensor* bv = nullptr;   // [n_kv_heads*head_dim] f32
  const GgufTensor* q_norm = nullptr;   // [head_dim] f32: each head of q RMS-normalized, times q_norm (Qwen3)
  const GgufTensor* k_norm = nullptr;   // [head_dim] f32: the same for k
  // Phi-3 stores these fused (then wq, wk, wv, or w_gate and w_up, are null):
  const GgufTensor* wqkv = nullptr;       // [q_dim + 2*kv_dim][dim]: Wq, Wk, Wv stacked by rows
  const GgufTensor* w_gate_up = nullptr;  // [2*ffn_dim][dim]: Wg rows, then Wu rows
  // The Llama architecture's optional biases (llama.cpp reads them), f32: x += Wo att + bo; the gate's and the
  // up projection's before the activation; x += Wd hb + bd.
  const GgufTensor* bo = nullptr;       // [dim]
  const GgufTensor* b_gate = nullptr;   // [ffn_dim]
  const GgufTensor* b_up = nullptr;     // [ffn_dim]
  const GgufTensor* b_down = nullptr;   // [dim]
  const GgufTensor* attn_post_norm = nullptr;   // [dim] f32: x += rmsnorm(Wo att) * attn_post_norm (Gemma)
  const GgufTensor* ffn_post_norm = nullptr;    // [dim] f32: x += rmsnorm(Wd hb) * ffn_post_norm (Gemma)
};

struct LlamaTensors {
  const GgufTensor* token_embd;    // [n_vocab][dim]
  const GgufTensor* output_norm;   // [dim]
  const GgufTensor* output;        // [n_vocab][dim]; == token_embd when tied
  std::vector<LlamaLayerTensors> layers;
};

// The file's architecture, or a refusal with the real reason: an architecture vkspec does not run (named,
// and "mixture-of-experts" for one with experts), or metadata under the architecture's prefix that would
// change the computation in a way vkspec does not implement. Nothing in a file is ignored silently: every
// such key is read, checked to be neutral, or refused (kReadKeys).
Architecture check_supported_model(const GgufFile& f);
// Reads and validates (check_supported_model first).
LlamaHParams read_llama_hparams(const GgufFile& f);
// The tensors, shapes checked; a tensor in the file that the forward pass would not read (a bias, a per-head
// norm, experts, ...) is refused by name rather than ignored.
LlamaTensors find_llama_tensors(const GgufFile& f, const LlamaHParams& hp);
DType weight_dtype(const GgufTensor& t);   // throws for types the kernels do not take

}  // namespace vkspec
