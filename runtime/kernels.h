#pragma once
// Host side of the GLSL kernels in shaders/: one method per op, each recording one dispatch (no waits;
// the caller orders dependent ops with Recorder::barrier()). Where an op needs a pass of its own first, the
// method records it and the barrier between them (a quantized matmul's int8 activations, quantize_x8; the
// unfused q|k|v projection's rope_store_kv): its inputs and output stay the caller's to order.
//
// Two kernel families, chosen from probed facts (DeviceFacts::prefers_row_per_lane) and both tested:
//   RowPerLane: each lane owns a weight row and loops over it 16 bytes at a time (CPU devices: lanes are
//               SIMD lanes, so cross-lane strided loads would be gathers). Reads go through texel buffers
//               when the device has push descriptors (matmul_rows.comp), else device addresses.
//   Subgroup:   a workgroup owns a row; lanes stride over it for coalesced loads and reduce with
//               subgroupAdd (GPUs).
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/recorder.h"
#include "core/settings.h"
#include "runtime/tensor.h"
#include "shaders/contract.h"

namespace vkspec {


struct PagedKvView {        // one layer of the KV cache, as the kernels see it
  Slice k_pool, v_pool;     // [n_blocks][block_size][n_kv_heads][head_dim] f16 pairs (shaders/paged_kv.glsl)
  Slice block_tables;       // every sequence's table, logical block -> physical block (uint)
  uint32_t block_size = 16;
};

// Where the rows of a pass are: rows[t] = {position, first uint of its sequence's table in block_tables,
// tree base, tree path} (host-written; contract.h KV_ROW_UINTS), so that one dispatch serves rows of several
// sequences and a token tree's nodes. max_len: at least 1 + the largest position (the longest row's keys).
struct KvRows {
  Slice rows;
  uint32_t max_len = 0;
  bool one_sequence = false;   // every row in one sequence's table, none in a tree (attention tiles share keys)
};

// Token ids an embedding reads: `ids` holds them `stride` uints apart (1: host-written prompt tokens;
// 2: token slots, the {token, aux} pairs that argmax and the sampler write; runtime/token_choice.h).
struct TokenInput {
  Slice ids;
  uint32_t stride = 1;
};

// What a matmul multiplies: x as it is, or (norm set) rmsnorm(x) * norm, which the matmul computes itself
// (MODE_RMSNORM: x^2 reduced alongside the dot products, x scaled by the norm weight as it is read, the row
// sums by 1/sqrt(mean(x^2) + eps)), so RMSNorm costs no dispatch (its work is repeated for every row of an
// untiled multi-token call). With int8 activations (x8_matmul) the quantizing pass applies the norm instead.
struct MatmulInput {
  MatmulInput(const Slice& x_) : x(x_) {}   // implicit: a plain input
  MatmulInput(const Slice& x_, const Slice& norm_, float eps_) : x(x_), norm(norm_), eps(eps_) {}
  Slice x;
  Slice norm;        // [dim] f32 RMSNorm weight (empty: x is used as is)
  float eps = 0.0f;
};

struct RopeKvEpilogue;

struct AttentionShape {
  uint32_t n_heads = 0, n_kv_heads = 0, head_dim = 0, n_rot = 0;
  // floats from one token's q (k, v) row to the next; 0 = packed (n_heads*head_dim, n_kv_heads*head_dim).
  // The model keeps q, k and v side by side in one [n][q_dim + 2*kv_dim] buffer (one fused projection).
  uint32_t q_stride = 0, kv_stride = 0;
  bool rope_neox = false;   // RoPE pairs (i, i + n_rot/2) of a head instead of (2i, 2i+1) (LlamaHParams)
  float norm_eps = 0;       // the per-head q/k RMSNorm's epsilon (the model's rms_eps)
  // A score: q.k * scale (0: 1/sqrt(head_dim)), soft-capped where softcap > 0, over the keys of a sliding
  // window of `window` positions (0: all keys); contract.h ATTENTION_SCORES.
  float scale = 0, softcap = 0;
  uint32_t window = 0;
  uint32_t q_dim() const { return n_heads * head_dim; }
  uint32_t kv_dim() const { return n_kv_heads * head_dim; }
  uint32_t q_row() const { return q_stride ? q_stride : q_dim(); }
  uint32_t kv_row() const { return kv_stride ? kv_stride : kv_dim(); }
};

// q, k and v of one [n][q_dim + 2 kv_dim] buffer (rows side by side: strides q_row() = kv_row() = its width),
// each slice starting at its part of row 0.
struct QkvSlices {
  Slice q, k, v;
};
inline QkvSlices qkv_slices(const Slice& qkv, const AttentionShape& s) {
  const VkDeviceSize k0 = VkDeviceSize(s.q_dim()) * 4, v0 = k0 + VkDeviceSize(s.kv_dim()) * 4;
  return {qkv, qkv.sub(k0, qkv.size - k0), qkv.sub(v0, qkv.size - v0)};
}

// The kernels a device runs, decided here once from its probed facts and the caller's or the environment's
// request (VKSPEC_KERNELS, VKSPEC_MATMUL; Auto: the device's choice); `vkspec devices` prints it.
// refused: why a requested family or path cannot run on this device ("" when it can).
struct KernelChoice {
  KernelFamily family = KernelFamily::RowPerLane;
  MatmulPath matmul = MatmulPath::Fma;
  // Coopmat: the matrix-unit shaders' VK_KHR_cooperative_matrix build where the device has it (the standard,
  // every vendor's), else the VK_NV_cooperative_matrix build
  bool coopmat_khr = false;
  std::string refused;
};
// prefer_khr = false (KernelVariants::coopmat_khr, tests): the NV build where the device has both.
KernelChoice choose_kernels(const DeviceFacts& f, KernelFamily family, MatmulPath matmul, bool prefer_khr = true);

// Kernel variants whose fallbacks the tests compare with them (not settable at run time: a model's passes
// all take the defaults).
struct KernelVariants {
  bool int8_x = true;        // int8 activations for quantized weights where the device has them
  bool matmul_tile = true;   // multi-token matmuls in tiles of rows x tokens (subgroup family)
  bool fma = true;           // fused multiply-adds in matmul.comp and matmul_tile.comp
  bool coopmat_khr = true;   // Coopmat: the KHR build where the device has it (false: NV's where it has both; choose_kernels)
};

class Kernels {
 public:
  static constexpr uint32_t kMaxBatch = 16;   // rows with logits in one pass (a verify pass); prompt chunks: --ubatch
  // Keys per workgroup of the device-address attention kernel on CPU devices once a pass reaches past them
  // (flash decoding: decode at 4096 positions runs 16x n_heads workgroups instead of n_heads); GPUs split
  // finer (attention_split).
  static constexpr uint32_t kAttentionSplit = 256, kAttentionSplitGpu = 64;
  // Bytes of attention's split partials for a pass of n rows in n_splits splits (contract.h's layout). At
  // most ceil(n_ctx / kAttentionSplitGpu) splits.
  static uint64_t attention_partials_bytes(const AttentionShape& s, uint32_t n, uint32_t n_splits) {
    return uint64_t(n) * s.n_heads * n_splits * (s.head_dim + contract::ATTENTION_PARTIAL_EXTRA) * 4;
  }
  static constexpr uint32_t kBatchTile = 8;   // tokens per workgroup in batched matmuls
  // Rows per workgroup of the subgroup family's multi-token matmul (matmul_tile.comp; SwiGLU's holds two
  // sums per row and token).
  static constexpr uint32_t kTileRows = 8, kTileRowsSwiglu = 4;

  // family, matmul: Auto takes VKSPEC_KERNELS / VKSPEC_MATMUL, then the device's choice (choose_kernels); a
  // choice the device cannot run is an Error.
  Kernels(VulkanDevice& ctx, Pipelines& pipelines, KernelFamily family = KernelFamily::Auto,
          KernelVariants variants = {}, MatmulPath matmul = MatmulPath::Auto);
  KernelFamily family() const { return family_; }
  MatmulPath matmul_path() const { return matmul_; }

  // x[t] = table[tokens[t]] * scale (f32 out), t < n.
  void embed(Recorder& r, const DeviceMatrix& table, const TokenInput& tokens, const Slice& x, uint32_t n,
             float scale = 1.0f);
  // y[t] = W x[t] (accumulate: y[t] += W x[t]). x: [n][x_stride], y: [n][y_stride].
  void matmul(Recorder& r, const DeviceMatrix& w, const MatmulInput& x, const Slice& y, uint32_t n, bool accumulate,
              uint32_t x_stride = 0, uint32_t y_stride = 0);
  // Which shader matmul() records for these operands and n tokens (tests check every path is exercised).
  const char* matmul_shader(const DeviceMatrix& w, const Slice& x, uint32_t x_stride = 0, uint32_t n = 1) const;
  // y[t] = silu(Wg x[t]) * (Wu x[t]), or with gelu gelu(Wg x[t]) * (Wu x[t]) (GeGLU, GELU's tanh form).
  void matmul_swiglu(Recorder& r, const DeviceMatrix& gate, const DeviceMatrix& up, const MatmulInput& x,
                     const Slice& y, uint32_t n, bool gelu = false);
  // x[t] += rmsnorm(y[t]) * norm for t < n: rows of `dim` floats (a post-sublayer norm, Gemma).
  void add_rmsnorm(Recorder& r, const Slice& x, const Slice& y, const Slice& norm, uint32_t dim, float eps, uint32_t n);
  // y[t][i] += b[i] for t < n, i < width, rows `stride` floats apart (biases after a matmul).
  void add_bias(Recorder& r, const Slice& y, const Slice& b, uint32_t width, uint32_t stride, uint32_t n);
  // y[t][i] = silu|gelu(gu[t][i] + b[i]) * (gu[t][width + i] + b[width + i]) for t < n: a gated FFN whose gate
  // and up projections have biases (gu: their sums side by side, [n][2 width]; y: [n][width]).
  void biased_glu(Recorder& r, const Slice& gu, const Slice& b, const Slice& y, uint32_t width, uint32_t n, bool gelu);
  // v[i] = cap * tanh(v[i] / cap) for i < count (final logit soft-capping, Gemma 2).
  void softcap(Recorder& r, const Slice& v, uint32_t count, float cap);
  // Add bias ([q_dim | kv_dim | kv_dim] f32; none when empty) to q, k, v of rows 0..n-1, RMS-normalize each
  // head of q and k times qk_norm ([head_dim | head_dim] f32, with s.norm_eps; none when empty), rotate q, k
  // (each at its position) in place and write k, v to its sequence's paged cache. rope_table: (cos, sin) of
  // every position.
  void rope_store_kv(Recorder& r, const AttentionShape& s, const Slice& q, const Slice& k, const Slice& v,
                     const Slice& rope_table, const PagedKvView& kv, const KvRows& rows, uint32_t n,
                     const Slice& bias = {}, const Slice& qk_norm = {});
  // [q k v][t] = Wqkv x[t], then rope_store_kv's work on them: one dispatch where the texel matmul does it
  // in its epilogue (qkv_rope_fused: adjacent RoPE pairs, no bias or norm), else the matmul, a barrier and
  // rope_store_kv. qkv: [n][wqkv.rows], wqkv.rows = q_dim + 2 kv_dim of `s`.
  void qkv_rope_store_kv(Recorder& r, const DeviceMatrix& wqkv, const MatmulInput& x, const Slice& qkv, uint32_t n,
                         const AttentionShape& s, const Slice& rope_table, const PagedKvView& kv, const KvRows& rows,
                         const Slice& bias = {}, const Slice& qk_norm = {});
  bool qkv_rope_fused(const DeviceMatrix& wqkv, const MatmulInput& x, const AttentionShape& s,
                      const Slice& bias = {}, const Slice& qk_norm = {}) const;
  // out[t] = causal GQA attention of q[t] (at position p) over its sequence's cached keys 0..p.
  void attention(Recorder& r, const AttentionShape& s, const Slice& q, const Slice& out, const PagedKvView& kv,
                 const KvRows& rows, uint32_t n);
  // Which shader attention() records: attention_coop(_nv) on the coopmat paths (coop_attention), else
  // attention_rows (texel reads, G = n_heads/n_kv_heads <= 4 query heads per workgroup, head_dim a multiple
  // of 8 up to 256: whole f16 KV texels per row) for the row-per-lane family when q, the pools and the table
  // are texel-readable and the device has subgroupShuffle, else attention.
  const char* attention_shader(const AttentionShape& s, const Slice& q, const PagedKvView& kv) const;
  // slots[t] = {argmax of row t (lowest id among ties), its softmax probability when top_prob else 0};
  // `exclude` (token slots): row t leaves out exclude's slot t token.
  void argmax(Recorder& r, const Slice& logits, const Slice& slots, uint32_t n, uint32_t cols, bool top_prob = false,
              const Slice& exclude = {});
  // Rejection sampling's verdict on one sequence's drafts (shaders/spec_accept.comp): pc's out slots get the
  // accepted drafts and the token after them.
  void spec_accept(Recorder& r, const contract::SpecAcceptPC& pc);

 private:
  bool attention_texels(const AttentionShape& s, const Slice& q, const PagedKvView& kv) const;
  // MatmulPath::Coopmat / CoopmatEmulated: attention as flash-attention tiles (attention_coop.comp) in every
  // pass, one token included, where the shape fits its tile. Decided from the shape and the path only.
  bool coop_attention(const AttentionShape& s) const {
    return (matmul_ == MatmulPath::Coopmat || matmul_ == MatmulPath::CoopmatEmulated) && s.head_dim % contract::COOP_TILE == 0 &&
           s.head_dim <= contract::COOP_ATTN_MAX_HEAD_DIM && s.n_heads / s.n_kv_heads <= contract::COOP_ATTN_ROWS;
  }
  // Split attention's partials for a pass of n rows in n_splits splits: grown, never shrunk or freed (passes
  // recorded earlier keep reading the buffer they were given).
  const Slice& attention_partials(const AttentionShape& s, uint32_t n, uint32_t n_splits);
  void record_matmul(Recorder& r, const DeviceMatrix& w, const DeviceMatrix* w2, const MatmulInput& in, const Slice& y,
                     uint32_t n, uint32_t mode, uint32_t x_stride, uint32_t y_stride,
                     const RopeKvEpilogue* rope = nullptr);
  // Int8 activations: the texel matmul of quantized weights reads x quantized per 32 values
  // (quantize_x8.comp) and multiplies in integers, q4 two weights per 32-bit product (matmul_rows.comp X8). Decided from the weights' format and
  // the device only (every pass of a model takes the same path: batch invariance). KernelVariants::int8_x = false turns
  // it off (measurements, tests of the float path).
  bool x8_matmul(const DeviceMatrix& w) const { return x8_ && w.format.quantized(); }
  // MatmulPath::Int8Dot: quantized weights multiply by packed int8 dot products (matmul_dot8.comp) in every
  // pass, one token included, on either family; x is quantized by quantize_x8.comp's DOT8 build. Decided
  // from the weights' format and shape and the device only (batch invariance).
  bool dot8_matmul(const DeviceMatrix& w, uint32_t x_stride) const {
    return matmul_ == MatmulPath::Int8Dot && w.format.quantized() && w.cols % contract::X8_BLOCK == 0 &&
           (x_stride ? x_stride : w.cols) % 4 == 0;
  }
  // MatmulPath::Coopmat / CoopmatEmulated: f16 and quantized weights (whose values an f16 tile holds; f32 and
  // bf16 would lose bits or range) multiply in f16 tiles (matmul_coop.comp) in every pass, one token
  // included. Decided from the weights' format and shape and the device only.
  bool coop_matmul(const DeviceMatrix& w, uint32_t x_stride) const {
    return (matmul_ == MatmulPath::Coopmat || matmul_ == MatmulPath::CoopmatEmulated) &&
           (w.format.quantized() || w.format.storage == WT_F16) && w.cols % contract::COOP_STEP == 0 &&
           (x_stride ? x_stride : w.cols) % 4 == 0;
  }
  bool tile_matmul(const DeviceMatrix& w, uint32_t n, uint32_t x_stride) const;
  // The kernel a matmul of these operands over n tokens records: the one decision record_matmul,
  // matmul_shader and qkv_rope_fused read (x_stride 0: w.cols).
  enum class MatmulKernel : uint8_t { Dot8, Coop, Texel, Tile, Plain };
  MatmulKernel matmul_kernel(const DeviceMatrix& w, const DeviceMatrix* w2, const MatmulInput& in, uint32_t n,
                             uint32_t x_stride) const;
  // Records x (RMSNorm applied when in.norm is set) -> int8 activations and a barrier; returns where they
  // are: the next of two halves of a scratch buffer, so that a matmul still reading the other half (no
  // barrier between it and this call) is not overwritten.
  // dot8: in the layout of matmul_dot8.comp (contract.h DOT8_BLOCK_UINTS), x read through device addresses.
  Slice quantize_x8(Recorder& r, const MatmulInput& in, uint32_t K, uint32_t n, uint32_t x_stride, bool dot8 = false);

  VulkanDevice& ctx_;
  Pipelines& pipelines_;
  KernelFamily family_;
  MatmulPath matmul_;
  bool coopmat_khr_ = false;   // matmul_ == Coopmat: the KHR build of the matrix-unit shaders (else NV's)
  uint32_t coop_subgroup_ = 0;   // matmul_ == Coopmat: contract::COOP_SUBGROUP, the matrix-unit builds' subgroup
  uint32_t wg_rows_;   // workgroup size for the row-parallel kernels
  bool x8_ = false;    // int8 activations for quantized texel matmuls (x8_matmul)
  bool tile_ = false;  // multi-token matmuls in tiles (tile_matmul); KernelVariants::matmul_tile
  // matmul.comp and matmul_tile.comp accumulate by fused multiply-adds (dot4_acc in common.glsl): one GPU
  // instruction per weight where `precise` multiplies and adds took two. Both kernels take the same value,
  // so their results stay identical; KernelVariants::fma = false turns it off (for the tests).
  bool fma_ = true;
  // Workgroup size for a kernel whose lanes meet at barriers, given its size on a GPU: one subgroup on CPU
  // devices, where llvmpipe runs a larger workgroup's subgroups as coroutines switched at every barrier.
  uint32_t wg_synced(uint32_t gpu_wg) const;
  // Keys per split of the device-address attention (flash decoding), per family.
  uint32_t attention_split() const;
  // Split attention's partials, grown (never shrunk: recorded passes may still read the old one) as
  // contexts get longer; shared by copies of this object.
  std::shared_ptr<Arena> scratch_arena_;
  std::shared_ptr<Slice> partials_;
  // Int8 activations: two halves, used in turn (quantize_x8); grown like partials_.
  struct X8Scratch {
    Slice buffer;
    VkDeviceSize half = 0;
    uint32_t next = 0;
  };
  std::shared_ptr<X8Scratch> x8_scratch_;
};

}  // namespace vkspec
