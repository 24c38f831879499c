#pragma once
// The single source of truth for a Llama model's hyperparameters, read from GGUF metadata and checked
// against the tensor shapes, plus the named tensors of the `llama` architecture.
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "core/core.h"   // DType

namespace vkspec {

struct LlamaHParams {
  uint32_t n_vocab = 0;
  uint32_t dim = 0;          // embedding width
  uint32_t n_layers = 0;
  uint32_t n_heads = 0, n_kv_heads = 0, head_dim = 0;   // GQA: n_heads % n_kv_heads == 0
  uint32_t ffn_dim = 0;
  uint32_t n_rot = 0;        // rotated dims per head (rope.dimension_count), even, <= head_dim
  uint32_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  double rope_base = 10000.0;
  std::vector<double> rope_inv_freq;   // [n_rot/2]: base^(-2i/n_rot) with linear / Llama 3 scaling folded in
  bool tied_embeddings = false;        // no output.weight: logits use token_embd
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
};

struct LlamaTensors {
  const GgufTensor* token_embd;    // [n_vocab][dim]
  const GgufTensor* output_norm;   // [dim]
  const GgufTensor* output;        // [n_vocab][dim]; == token_embd when tied
  std::vector<LlamaLayerTensors> layers;
};

// Reads and validates; refuses architectures other than `llama` with a clear error.
LlamaHParams read_llama_hparams(const GgufFile& f);
LlamaTensors find_llama_tensors(const GgufFile& f, const LlamaHParams& hp);
DType weight_dtype(const GgufTensor& t);   // throws for types the kernels do not take

}  // namespace vkspec
