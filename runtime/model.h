#pragma once
// A Llama model resident on one Vulkan device, and its forward pass. record_forward() records n tokens
// (1 = decode, up to kMaxBatch = verify; longer prefills in chunks of ubatch()) into the caller's command
// buffer without submitting: a decode step or a speculative round records the forward passes and token
// choices of both models into one submission (engine/engine.cpp, speculative/controller.cpp). forward() is the
// self-contained form (own recorder, argmax, one submission, one wait) the tests use.
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "gguf/model_file.h"
#include "runtime/paged_kv.h"
#include "runtime/token_tree.h"

namespace vkspec {

struct ModelOptions {
  uint32_t n_ctx = 0;               // 0: the model's training context (capped at 4096)
  uint32_t kv_block_size = 16;
  uint32_t max_sequences = 2;
  uint32_t kv_blocks = 0;           // blocks in the KV pool; 0: n_ctx positions for each of kv_pool_sequences
  uint32_t kv_pool_sequences = 0;   // 0: max_sequences (more sequences than that may share a smaller pool)
  uint64_t kv_pool_blocks(uint32_t n_ctx) const {
    return kv_blocks ? kv_blocks
                     : (uint64_t(n_ctx) + kv_block_size - 1) / kv_block_size * (kv_pool_sequences ? kv_pool_sequences : max_sequences);
  }
  KernelFamily kernels = KernelFamily::Auto;
  uint32_t ubatch = 0;              // tokens per forward chunk, 1..kMaxUbatch; 0: DeviceFacts::default_ubatch()
  std::function<void(uint64_t done, uint64_t total)> progress;   // bytes of weights uploaded
};

struct LayerWeights {
  Slice attn_norm;                 // [dim] f32
  // wq [n_heads*hd][dim], wk and wv [n_kv*hd][dim] stacked into one [q_dim + 2*kv_dim][dim] matrix (one
  // dispatch instead of three); files whose three projections differ in type keep them apart (fused = false).
  bool fused_qkv = false;
  DeviceMatrix wqkv, wq, wk, wv;
  Slice qkv_bias;                  // [q_dim + 2*kv_dim] f32 [bq | bk | bv], where the model has them
  Slice qk_norm;                   // [2*head_dim] f32 [q_norm | k_norm], where the model has them (Qwen3)
  DeviceMatrix wo;                 // [dim][n_heads*hd]
  Slice ffn_norm;                  // [dim] f32
  DeviceMatrix w_gate, w_up;       // [ffn][dim]
  DeviceMatrix w_down;             // [dim][ffn]
  Slice attn_post_norm, ffn_post_norm;   // [dim] f32, where the model has them (Gemma)
  Slice bo, b_down;                // [dim] f32, where the model has them (Llama's optional biases)
  Slice glu_bias;                  // [2*ffn] f32 [b_gate | b_up] (zeros for one it lacks), where it has either
};

enum class Logits { None, Last, All };

// The rows one sequence contributes to a batched pass: n tokens read from `in`, run at positions
// kv().length(seq) .. +n and appended to its cache. Last: the last row's logits; All: every row's.
// tree (not a chain): the rows are its nodes first_node .. first_node + n - 1, each at base + its depth over
// its ancestors' keys (runtime/token_tree.h), stored at base + its index, base being the length before the
// pass less first_node (a draft model runs a tree a depth at a time, growing its cache past the nodes it
// does not run first).
struct SeqRows {
  int seq = -1;
  TokenInput in;
  uint32_t n = 0;
  Logits want = Logits::None;
  const TokenTree* tree = nullptr;
  uint32_t first_node = 0;
};

// Device memory a model needs (what LlamaModel's constructor checks before allocating).
struct MemoryEstimate {
  uint32_t n_ctx = 0;
  uint64_t weights = 0, kv = 0, activations = 0;   // as stored on the device
  uint64_t device = 0;                             // device-local heaps (a CPU device: the host's RAM)
  uint64_t total() const { return weights + kv + activations; }
};

class LlamaModel {
 public:
  static constexpr uint32_t kMaxBatch = Kernels::kMaxBatch;   // rows with logits in one pass (a verify pass)
  static constexpr uint32_t kMaxUbatch = 512;                  // tokens per forward chunk, at most
  // The chunk size these options give on this device (refuses an ubatch out of 1..kMaxUbatch).
  static uint32_t ubatch_for(const VulkanDevice& ctx, const ModelOptions& opts);
  static MemoryEstimate estimate_memory(const VulkanDevice& ctx, const GgufFile& file, const ModelOptions& opts);

  LlamaModel(VulkanDevice& ctx, Pipelines& pipelines, const GgufFile& file, const ModelOptions& opts = {});
  ~LlamaModel();

  const LlamaHParams& hparams() const { return hp_; }
  PagedKvCache& kv() { return *kv_; }
  uint32_t n_ctx() const { return n_ctx_; }
  const DeviceFacts& facts() const { return ctx_.facts(); }
  uint64_t weight_bytes() const { return weight_bytes_; }   // what one decode step reads, near enough
  uint32_t ubatch() const { return ubatch_; }               // tokens per forward chunk
  Kernels& kernels() { return *kernels_; }

  // Records the pass over n tokens read from `in` at positions kv().length(seq) .. +n (growing the KV
  // first, so block tables are final before submission), appending their K/V. Logits::Last leaves the
  // last token's logits in logits_rows() row 0; Logits::All leaves row i for token i (n <= kMaxBatch).
  // tree: the rows are a token tree's nodes (SeqRows::tree).
  void record_forward(Recorder& r, int seq, const TokenInput& in, uint32_t n, Logits want, const TokenTree* tree = nullptr);
  // Continuous batching: one pass over the rows of several sequences (each at most once), in chunks of
  // ubatch() rows whose matmuls read each weight once for all of them; RoPE, the KV append and attention
  // run per sequence, at its own positions over its own block table. Every kernel is batch-invariant, so a
  // row's logits are bit-identical to what a pass over its sequence alone gives. Logits rows go to `logits`
  // in the order of `rows` (Last: one row, All: n rows); returns how many.
  uint32_t record_batch(Recorder& r, std::span<const SeqRows> rows, const Slice& logits);
  // Host tokens for record_forward: copied into the model's input ring, so that several writes of one
  // submission (the sequences of a batch, their drafters) keep their own regions. Each write is at most
  // n_ctx tokens and a submission writes at most one per sequence, which the ring's size allows.
  TokenInput write_tokens(std::span<const uint32_t> tokens);

  // Logits live in device memory; this copies rows 0..rows-1 to the host mirror that logits(row) reads
  // (host-side sampling, tests).
  void record_logits_readback(Recorder& r, uint32_t rows);

  // Self-contained: record_forward of `tokens`, then argmax of the logits rows and their readback; one
  // submission and wait. argmax_id(i) is the argmax of row i whenever logits were computed.
  void forward(int seq, std::span<const uint32_t> tokens, Logits want);
  // Embeddings: the final hidden state (x after the output norm, what llama.cpp calls embeddings) of
  // `tokens` run at positions kv().length(seq) .. +n, appended to seq's KV: the last token's (llama.cpp's and
  // Ollama's for a decoder model, whose last token has seen the whole text) or their mean. Passes of up to
  // ubatch() tokens in one submission (more where a mean's rows outgrow the readback buffer); the host reads
  // their x rows and applies the norm.
  enum class Pooling { Last, Mean };
  std::vector<float> embed(int seq, std::span<const uint32_t> tokens, Pooling pooling);
  // The same in parts, so that a server interleaves a long text with other sequences' steps: each call runs
  // the next tokens of `tokens` (at most max_tokens, at least one) from `part.done` on seq, whose KV holds
  // the ones before, and pools their rows; the vector is ready when part.done == tokens.size(). Equal to
  // embed() whatever the parts (the rows are the same and are summed in the same order).
  struct EmbeddingPart {
    uint32_t done = 0;          // tokens run so far
    std::vector<double> sum;    // their pooled rows' sum (dim), after the output norm
  };
  void embed_part(int seq, std::span<const uint32_t> tokens, Pooling pooling, EmbeddingPart& part, uint32_t max_tokens);
  std::vector<float> embedding_of(const EmbeddingPart& part, uint32_t n_tokens, Pooling pooling) const;
  // Creates the pipelines a pass of any width uses, by running passes of 1..Kernels::kBatchTile tokens
  // (wider ones are tiles of those widths) with all their logits rows over a scratch sequence, which it
  // then frees (needs a free sequence), or over `seq` after its cached tokens, which it keeps (needs
  // room for kBatchTile more). Drivers create a pipeline at its first dispatch, which is slow: a server
  // does this before its first request, whose steps would otherwise wait for every new width.
  void warm_up(int seq = -1);
  const float* logits(uint32_t row) const { return logits_host_.host<float>() + size_t(row) * hp_.n_vocab; }
  uint32_t argmax_id(uint32_t row) const { return ids_.host<uint32_t>()[contract::TOKEN_SLOT_UINTS * row]; }
  const Slice& logits_rows() const { return logits_; }   // [kMaxBatch][n_vocab], for device-side sampling

 private:
  // first: the index of the part's first row among its sequence's rows (a tree's node index)
  struct ChunkPart { int seq; TokenInput in; uint32_t row0, n; bool logits_last, logits_all; const TokenTree* tree; uint32_t first; };
  uint32_t record_chunk(Recorder& r, std::span<const ChunkPart> parts, uint32_t n, const Slice& logits,
                        uint32_t logits_row);
  void check_memory(VulkanDevice& ctx, const GgufFile& file, const ModelOptions& opts) const;

  VulkanDevice& ctx_;
  LlamaHParams hp_;
  uint32_t n_ctx_;
  uint32_t ubatch_;   // rows per chunk of record_batch; the activations below hold that many
  uint64_t weight_bytes_ = 0;
  std::unique_ptr<Arena> weights_arena_, act_arena_, upload_arena_, readback_arena_;
  std::unique_ptr<Kernels> kernels_;
  std::unique_ptr<Recorder> rec_;
  std::unique_ptr<PagedKvCache> kv_;

  DeviceMatrix token_embd_;   // [n_vocab][dim]
  Slice output_norm_;         // [dim]
  std::vector<float> output_norm_host_;   // [dim], the same weights for embed()'s norm on the host
  DeviceMatrix output_;       // [n_vocab][dim] (token_embd_ when tied)
  std::vector<LayerWeights> layers_;

  // Activations for ubatch_ tokens, allocated once.
  Slice x_, qkv_, att_, hb_;   // qkv_: [n][q_dim + 2*kv_dim], each token's q, k, v side by side
  Slice x_out_;                // [ubatch_][dim]: the rows of x that want logits, gathered
  Slice sub_out_;              // [ubatch_][dim]: a sublayer's output before its post norm (Gemma only)
  Slice gate_up_;              // [ubatch_][2*ffn]: the gate's and up projection's sums (FFN biases only)
  Slice rope_;            // [n_ctx][n_rot/2] (cos, sin), computed in double at load (device-resident)
  Slice rope_swa_;        // the same for the sliding-window layers' frequencies, where they have their own
  Slice tokens_;          // [2 * max_sequences * n_ctx] uint ring: host-written input tokens (write_tokens)
  uint32_t tokens_cursor_ = 0;
  Slice kv_rows_;         // ring of KvRows entries, one per row of each chunk
  uint32_t kv_rows_cursor_ = 0;
  Slice logits_, ids_;    // [kMaxBatch][n_vocab] logits (device); [kMaxBatch] token slots of forward()'s argmax
  Slice logits_host_;     // [kMaxBatch][n_vocab] host-readable mirror (record_logits_readback)
};

}  // namespace vkspec
