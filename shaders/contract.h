// The host/shader contract, defined once and included by the GLSL kernels and by C++ (runtime/kernels.cpp,
// runtime/device_sampler.cpp, runtime/token_choice.cpp): weight-type codes, limits, mode flags, the
// token-slot layout, and every push-constant block. A block is written once as a field list; GLSL wraps it
// in `layout(push_constant) uniform PC { ... } pc;` and C++ in a struct, so the two layouts cannot drift
// (natural alignment in both: 64-bit addresses on 8 bytes, 32-bit fields on 4; see the static_asserts in
// runtime/kernels.cpp for the sizes every device accepts).
#ifndef VKSPEC_CONTRACT_H
#define VKSPEC_CONTRACT_H

#ifdef __cplusplus
#include <cstdint>
namespace vkspec::contract {
using vk_addr = uint64_t;   // a buffer device address (GLSL: uvec2, little-endian)
using vk_uint = uint32_t;
using vk_float = float;
#define VKSPEC_CONST inline constexpr uint32_t
#else
#define vk_addr uvec2
#define vk_uint uint
#define vk_float float
#define VKSPEC_CONST const uint
#endif

// Weight storage on the device (core/quant.h WeightFormat::storage; layouts in shaders/weights.glsl).
#define WT_F32 0
#define WT_F16 1
#define WT_BF16 2
#define WT_Q8 3    // int8 quants + per-group scales (and mins)
#define WT_Q4 4    // 4-bit unsigned quants + per-group scales and mins
#define WT_Q6 5    // 6-bit quants (q + 32 in a nibble plane and a 2-bit plane) + per-group scales (and mins)
// WT_Q6: the bit at which weight g (0..15) of a 16 keeps its two high bits in their uint (shaders/weights.glsl)
// WT_Q6: a unit of Q6_UNIT_WEIGHTS weights is Q6_UNIT_UINTS uints, its nibbles first (4 uints), then its high
// bits (2 uints)
VKSPEC_CONST Q6_UNIT_WEIGHTS = 32u;
VKSPEC_CONST Q6_UNIT_UINTS = 6u;
VKSPEC_CONST Q6_HIGH_UINT = 4u;
#define Q6_HIGH_SHIFT(g) (2u * ((g) & 3u) + 16u * (((g) >> 2) & 1u) + 8u * ((g) >> 3))

VKSPEC_CONST MAX_TOP_K = 256u;        // top-k the sampler ranks in shared memory (larger: the general path)
VKSPEC_CONST MAX_HEAD_DIM = 256u;     // attention.comp keeps one head's output dims in registers
// Split attention's partial of a (row, head, split): head_dim weighted values, then its max, then its sum
VKSPEC_CONST ATTENTION_PARTIAL_EXTRA = 2u;
VKSPEC_CONST NON_FINITE_TOKEN = 0xffffffffu;   // argmax's token for a row of logits holding NaN or Inf
VKSPEC_CONST TOKEN_SLOT_UINTS = 2u;   // a token slot: {token, aux (float bits: top probability)}
// A row of a pass (KvRows; read as one uvec4 by shaders/paged_kv.glsl): {position, first uint of its block
// table, tree base, tree path}. A row of a token tree (a verify pass over a draft tree) is at position
// base + its depth and sees the keys of its ancestors, which are stored at base + their node index: key
// position j >= base lives at slot base + nibble j - base of the path (kv_slot), so a node's keys are the
// keys of its path run alone, in the same order. Other rows: base KV_NO_TREE (slot = position).
VKSPEC_CONST KV_ROW_UINTS = 4u;
VKSPEC_CONST KV_NO_TREE = 0xffffffffu;
VKSPEC_CONST KV_TREE_MAX_DEPTH = 8u;   // path nibbles in a uint: a tree's depths 0..7
VKSPEC_CONST KV_TREE_MAX_NODES = 16u;  // a nibble's slots
// The KV cache holds f16 (llama.cpp's default cache type): two elements of a head packed in one uint
// (packHalf2x16, shaders/paged_kv.glsl), so head_dim is even.
VKSPEC_CONST KV_ELEMENT_BYTES = 2u;
#define SLOT_TOKEN(i) (TOKEN_SLOT_UINTS * (i))        // uint index of slot i's token
#define SLOT_AUX(i) (TOKEN_SLOT_UINTS * (i) + 1u)     // uint index of slot i's aux
// matmul_rows.comp walks a quantized row in steps of at most this many weights (one token; multi-token
// tiles take half), whose scales lie in one or two texels that are fetched once per step. Rows of quantized
// weights must be whole steps for that kernel (runtime/kernels.cpp texel_path).
VKSPEC_CONST ROW_QUANT_STEP = 64u;
// common.glsl's red_scratch: the subgroups' partials of wg_sum and wg_max, or wg_sum_pairwise's lane sums.
VKSPEC_CONST RED_SCRATCH_FLOATS = 64u;
// The subgroup family's lanes per matmul row: matmul.comp's workgroup there, whose lane sums
// wg_sum_pairwise adds as a pairwise tree (a power of two, at most RED_SCRATCH_FLOATS: runtime/kernels.cpp
// asserts it), and matmul_tile.comp's row of lane sums per value, which stands for those lanes.
VKSPEC_CONST MATMUL_ROW_LANES = 64u;
// matmul_tile.comp reduces a workgroup's sums (RT * TT of them, twice with SwiGLU, + TT sums of squares with
// RMSNorm) through shared memory, a row of MATMUL_ROW_LANES lane sums per value: runtime/kernels.cpp sizes
// its tiles against this.
VKSPEC_CONST MATMUL_TILE_VALUES = 72u;
// Its slot layout: the sums at 0.., SwiGLU's second sums at RT * TT.., the sums of squares from here on.
#define MATMUL_TILE_SUMS(RT, TT, SWIGLU) (((SWIGLU) ? 2u : 1u) * (RT) * (TT))
// Int8 activations (matmul_rows_q4_x8 / _q6_x8 / _q8_x8; runtime/kernels.h x8_matmul): quantize_x8.comp
// writes each token's x (RMSNorm applied) as blocks of X8_BLOCK values, X8_BLOCK_TEXELS texels each:
//   texels 0-3: the block's two 16-value chunks as int pairs, chunk c in texels 2c, 2c+1: pair i of texel
//               2c+h is q[8h + i + 4] + 65536 * q[8h + i] (q = round(x / d), |q| <= 127; the weights'
//               nibble pairs of matmul_rows.comp meet them so that one 32-bit product holds two weights'
//               products in its upper half);
//   texel 4:    floats {d, d * (sum of chunk 0's q), d * (sum of chunk 1's q), d * (sum of the block's q)}
//               (d = max |x| / 127).
// A token's row of K values is X8_ROW_TEXELS(K) texels.
VKSPEC_CONST X8_BLOCK = 32u;
VKSPEC_CONST X8_BLOCK_TEXELS = 5u;
VKSPEC_CONST X8_SCALE_TEXEL = 4u;   // the block's texel of floats
#define X8_ROW_TEXELS(K) ((K) / X8_BLOCK * X8_BLOCK_TEXELS)
// Int8 activations for packed dot products (matmul_dot8.comp; MatmulPath::Int8Dot): quantize_x8.comp's
// DOT8 build writes each token's x as blocks of X8_BLOCK values (the same q and d), DOT8_BLOCK_UINTS uints each:
//   uints 0-7: the q as signed bytes, per 8 values v0..v7 two uints: (v0, v2, v4, v6) then (v1, v3, v5, v7),
//              byte 0 lowest: the order in which a uint of eight 4-bit weights splits into its even and odd
//              nibbles (u & 0x0F0F0F0F, (u >> 4) & 0x0F0F0F0F), so q4 and q6 weights meet them unshuffled;
//   uints 8-11: floats as X8_SCALE_TEXEL's.
// A token's row of K values is DOT8_ROW_UINTS(K) uints.
VKSPEC_CONST DOT8_BLOCK_UINTS = 12u;
VKSPEC_CONST DOT8_SCALES_AT = 8u;
#define DOT8_ROW_UINTS(K) ((K) / X8_BLOCK * DOT8_BLOCK_UINTS)
// matmul_coop.comp (MatmulPath::Coopmat, CoopmatEmulated): a workgroup of 2 BM lanes (BM / 16 subgroups of 32
// on the matrix units) owns BM rows x 16 or 32 tokens, BM = 16 for one token and COOP_ROWS for more, and steps
// through K by COOP_STEP weights (rows must be whole steps: runtime/kernels.h coop_matmul).
VKSPEC_CONST COOP_ROWS = 64u;
VKSPEC_CONST COOP_STEP = 32u;
// attention_coop.comp (attention on the same paths): a workgroup of COOP_ATTN_WG lanes owns COOP_ATTN_ROWS
// query rows (the G heads of COOP_ATTN_ROWS / G consecutive tokens) of one kv head and walks the keys of one
// split of COOP_ATTN_SPLIT in chunks of COOP_ATTN_KEYS at absolute positions; head_dim a multiple of COOP_TILE
// up to COOP_ATTN_MAX_HEAD_DIM (runtime/kernels.h coop_attention).
VKSPEC_CONST COOP_TILE = 16u;        // a matrix-unit tile's edge (16x16x16 f16): head_dim is whole tiles
VKSPEC_CONST COOP_SUBGROUP = 32u;    // the matrix-unit builds' subgroup (one per 16 rows): required where not the default
VKSPEC_CONST COOP_ATTN_WG = COOP_SUBGROUP;
VKSPEC_CONST COOP_ATTN_ROWS = COOP_TILE;
VKSPEC_CONST COOP_ATTN_KEYS = 16u;
VKSPEC_CONST COOP_ATTN_SPLIT = 256u;
VKSPEC_CONST COOP_ATTN_MAX_HEAD_DIM = 128u;
VKSPEC_CONST MODE_ACCUMULATE = 1u;    // matmul: y += W x
VKSPEC_CONST MODE_SWIGLU = 2u;        // matmul: y = silu(W x) * (W2 x)
VKSPEC_CONST MODE_RMSNORM = 4u;       // matmul: x is rmsnorm(x) * norm, computed on the fly
VKSPEC_CONST MODE_ROPE_KV = 8u;       // matmul_rows, the [q k v] projection: RoPE on q and k and the KV store
                                      // in the epilogue (rope_store_kv.comp's work, one dispatch less)
VKSPEC_CONST MODE_GELU = 16u;         // with MODE_SWIGLU: the gate's activation is GELU (tanh form), GeGLU
                                      // (Gemma); read in the store only (pc.mode)

// ---- push-constant blocks ----
#define PC_EMBED                                                                                        \
  vk_addr table; vk_addr table_scales; /* [vocab][dim] */                                               \
  vk_addr tokens;                      /* [n][stride] uint */                                           \
  vk_addr x;                           /* [n][dim] f32 */                                               \
  vk_uint dim; vk_uint n; vk_uint vocab; vk_uint stride;                                             \
  vk_float scale;                      /* x = table row * scale (Gemma: sqrt(dim); else 1) */

#define PC_MATMUL                                                                                       \
  vk_addr w; vk_addr w_scales;         /* [M][K] */                                                     \
  vk_addr w2; vk_addr w2_scales;       /* [M][K] up projection (MODE_SWIGLU only) */                    \
  vk_addr x;                           /* [n][x_stride] f32 */                                          \
  vk_addr y;                           /* [n][y_stride] f32 */                                          \
  vk_uint M; vk_uint K; vk_uint n; vk_uint x_stride; vk_uint y_stride; vk_uint mode;                  \
  vk_addr norm;                        /* [K] f32 (MODE_RMSNORM) */                                     \
  vk_float eps;

#define PC_MATMUL_ROWS                                                                                  \
  vk_addr y;                           /* [n][y_stride] f32 */                                          \
  vk_uint w; vk_uint w_scales; vk_uint w2; vk_uint w2_scales; vk_uint x; /* texel offsets in blocks */  \
  vk_uint M; vk_uint K; vk_uint n; vk_uint x_stride; vk_uint y_stride; vk_uint mode;                  \
  vk_uint norm;                        /* texel offset of the [K] f32 norm weight (MODE_RMSNORM) */     \
  vk_float eps;                                                                                         \
  /* MODE_ROPE_KV only (as in PC_ROPE_STORE_KV): y's rows are [q | k | v] of q_dim, kv_dim, kv_dim */    \
  vk_addr rope; vk_addr k_pool; vk_addr v_pool; vk_addr block_tables; vk_addr kv_rows;                  \
  vk_uint q_dim; vk_uint n_kv_heads; vk_uint head_dim; vk_uint n_rot; vk_uint block_size;

#define PC_QUANTIZE_X8                                                                                  \
  vk_addr out_;                        /* [n][K / X8_BLOCK][X8_BLOCK_TEXELS] texels */                  \
  vk_uint x; vk_uint norm;             /* texel offsets: x [n][x_stride] f32, the [K] norm weight */    \
  vk_uint K; vk_uint x_stride;                                                                          \
  vk_float eps;

#define PC_QUANTIZE_DOT8                                                                                \
  vk_addr out_;                        /* [n][K / X8_BLOCK][DOT8_BLOCK_UINTS] uints */                  \
  vk_addr x; vk_addr norm;             /* x [n][x_stride] f32, the [K] norm weight (0: none) */         \
  vk_uint K; vk_uint x_stride;                                                                          \
  vk_float eps;

#define PC_ROPE_STORE_KV                                                                                \
  vk_addr q; vk_addr k; vk_addr v;     /* q: [n][q_stride], k/v: [n][kv_stride] (q, k rotated in place) */ \
  vk_addr rope;                        /* [n_ctx][n_rot/2] vec2(cos, sin) of every position */          \
  vk_addr k_pool; vk_addr v_pool; vk_addr block_tables;                                                 \
  vk_addr rows;                        /* [n] uvec2 {position, first uint of its block table} */        \
  vk_uint n_heads; vk_uint n_kv_heads; vk_uint head_dim; vk_uint n_rot;                                 \
  vk_uint q_stride; vk_uint kv_stride; /* floats between consecutive tokens' rows */                    \
  vk_addr bias;                        /* [q_dim | kv_dim | kv_dim] f32 added to q, k, v first; 0: none */ \
  vk_uint neox;                        /* 1: RoPE pairs (i, i + n_rot/2) of a head; 0: (2i, 2i + 1) */   \
  vk_addr qk_norm;                     /* [head_dim | head_dim] f32: per-head RMSNorm of q, k first; 0: none */ \
  vk_float norm_eps;

// What a score is, shared by the attention kernels: s = q.k * scale, then softcap * tanh(s / softcap) where
// softcap > 0 (Gemma 2), over the keys of the row's window: positions pos - window + 1 .. pos (window 0: all;
// first_key in common.glsl).
#define ATTENTION_SCORES vk_float softcap; vk_uint window;

#define PC_ATTENTION                                                                                    \
  vk_addr q;                           /* [n][q_stride] (already rotated) */                            \
  vk_addr out_;                        /* [n][n_heads*head_dim] */                                      \
  vk_addr k_pool; vk_addr v_pool; vk_addr block_tables;                                                 \
  vk_addr rows;                        /* [n] uvec2 {position, first uint of its block table} */        \
  vk_addr partials;                    /* split > 0: [n][n_heads][n_splits][head_dim + 2] */            \
  vk_uint n_heads; vk_uint n_kv_heads; vk_uint head_dim;                                                \
  vk_float scale;                      /* a score's, AttentionShape::scale (default 1/sqrt(head_dim)) */ \
  vk_uint q_stride;                                                                                     \
  vk_uint split;                       /* keys per workgroup (0: one workgroup per head and token) */    \
  ATTENTION_SCORES

#define PC_ATTENTION_COOP PC_ATTENTION                                                                  \
  vk_uint n;                           /* attention_coop.comp: the pass's rows */                       \
  vk_uint tile_tokens;                 /* tokens per tile: 1 or COOP_ATTN_ROWS / G */

#define PC_ATTENTION_COMBINE                                                                            \
  vk_addr partials; vk_addr out_; vk_addr rows;                                                         \
  vk_uint n_heads; vk_uint head_dim; vk_uint split; vk_uint n_splits;                                 \
  vk_uint window;                      /* as PC_ATTENTION's: splits wholly before the window are skipped */

#define PC_ATTENTION_ROWS                                                                               \
  vk_addr out_;                        /* [n][n_heads*head_dim] f32 */                                  \
  vk_addr rows;                        /* [n] uvec2 {position, first uint of its block table} */        \
  vk_uint q; vk_uint k_pool; vk_uint v_pool; vk_uint block_tables; /* texel offsets in their blocks */  \
  vk_uint n_heads; vk_uint n_kv_heads; /* head_dim: specialization constant 3 */                        \
  vk_float scale;                      /* a score's, AttentionShape::scale (default 1/sqrt(head_dim)) */ \
  vk_uint q_stride;                    /* multiple of 4 */                                              \
  ATTENTION_SCORES

#define PC_ARGMAX                                                                                       \
  vk_addr logits;                      /* [n][cols] */                                                  \
  vk_addr slots;                       /* [n] token slots */                                            \
  vk_addr exclude;                     /* 0, or [n] token slots: row t never chooses slot t's token */  \
  vk_uint cols; vk_uint want_top_prob;

// A token mask (SAMPLE_ROW.mask; written by constrain/token_constraint.h's constraints): a row of
// TOKEN_MASK_WORDS(V) uints in which token t is allowed iff TOKEN_MASK_BIT(t) is set in word TOKEN_MASK_WORD(t).
#define TOKEN_MASK_WORDS(V) (((V) + 31u) / 32u)
#define TOKEN_MASK_WORD(t) ((t) / 32u)
#define TOKEN_MASK_BIT(t) (1u << ((t) % 32u))
VKSPEC_CONST SAMPLE_LIST_CAP = 256u;    // sample_rows: entries of the top-k path's candidate list
VKSPEC_CONST SAMPLE_DRAW = 1u;      // sample_rows: draw a token per row into its draw slot
// One row of sample_rows (an entry of the host-written row table PC_SAMPLE_ROWS points to): where its
// logits, probabilities and draw are and how it is sampled, so that one dispatch samples the rows of
// several sequences with their own settings (a batched step) as well as the rows of one.
#define SAMPLE_ROW                                                                                      \
  vk_addr logits;                      /* [V] f32 (penalized in place) */                               \
  vk_addr probs;                       /* [V] f32 out; 0: not written (only the tests read them) */     \
  vk_addr draw;                        /* one token slot out (flags & SAMPLE_DRAW) */                   \
  vk_addr hist;                        /* uint token ids: the penalties' history */                     \
  vk_addr seed;                                                                                         \
  vk_addr bias;                        /* n_bias {uint token, float bias} pairs, added in order */      \
  vk_addr mask;                        /* [TOKEN_MASK_WORDS(V)] uint (a constraint's); 0: every token */  \
  vk_uint h_end;                       /* the penalty window ends before hist[h_end] */                 \
  vk_uint last_n;                      /* the window's length; 0: no penalty */                         \
  vk_float penalty;                    /* repetition */                                                 \
  vk_float frequency; vk_float presence;                                                                \
  vk_float temperature; vk_float top_p; vk_float min_p;                                                 \
  vk_uint top_k; vk_uint position;     /* the draw's counter: (seed, position) */                       \
  vk_uint n_bias;                      /* (with logits_texel: the entry's size a multiple of 8) */      \
  vk_uint logits_texel;                /* sample_rows_texels: texel offset of logits in binding 0 */

// Rejection sampling (runtime/token_choice.h): a draft model's draw at a position is keyed by position +
// DRAFT_STREAM (noise of its own, independent of the target's); spec_accept.comp's numbers at a position are
// the target's key mixed with these streams.
VKSPEC_CONST DRAFT_STREAM = 0x80000000u;
VKSPEC_CONST ACCEPT_STREAM = 0x1u;     // the uniform that accepts or rejects a draft
VKSPEC_CONST RESIDUAL_STREAM = 0x2u;   // the Gumbel noise of the draw from the residual after a rejection
// A token tree's siblings: child j of a node is accepted by the uniform of stream ACCEPT_STREAM + j *
// SIBLING_STREAM; a draft model's j-th draw after a node is keyed by position + j * DRAW_INDEX_STRIDE (+
// DRAFT_STREAM), independent draws from one q.
VKSPEC_CONST SIBLING_STREAM = 0x10u;
VKSPEC_CONST DRAW_INDEX_STRIDE = 0x1000000u;
#define PC_SPEC_ACCEPT                                                                                  \
  vk_addr p;                           /* [k + 1][V] f32: the target's probabilities after each verify row */ \
  vk_addr q;                           /* [k][V] f32: the draft's after each of its steps; 0: host drafts */ \
  vk_addr slots;                       /* token slots 0..k: the drafts in 1..k {token, top probability} */ \
  vk_addr verdict;                     /* k + 1 token slots: sample_rows' draws from p in, the verdict out */ \
  vk_addr seed;                                                                                         \
  vk_uint V; vk_uint k;                                                                                 \
  vk_uint position;                    /* of verify row 0 (the draws' counter, as sample_rows') */      \
  vk_float p_min;                      /* --draft-p-min: verify no draft after one below it (0: off) */ \
  vk_uint tree;                        /* 0: a chain; else the drafts are a token tree's nodes 1..k, */ \
  vk_uint parents_lo; vk_uint parents_hi; /* node i's parent in nibble i of lo (i < 8) or hi (i - 8) */

#define PC_ADD_RMSNORM                                                                                  \
  vk_addr x;                           /* [n][dim] f32: x += rmsnorm(y) * norm */                        \
  vk_addr y;                           /* [n][dim] f32 */                                               \
  vk_addr norm;                        /* [dim] f32 */                                                  \
  vk_uint dim; vk_float eps;

#define PC_BIAS_ROWS                                                                                    \
  vk_addr y;                           /* [n][stride] f32: glu 0: y[t][i] += b[i], i < width */          \
  vk_addr b;                           /* [width] f32 (glu: [2 width], the gate's, then the up's) */    \
  vk_addr gu;                          /* glu: [n][2 width] f32 gate|up sums; y[t][i] = act(g + bg) * (u + bu) */ \
  vk_uint width; vk_uint stride; vk_uint glu; vk_uint gelu;

#define PC_SOFTCAP                                                                                      \
  vk_addr v;                           /* [count] f32, in place: cap * tanh(v / cap) */                 \
  vk_uint count; vk_float cap;

#define PC_SAMPLE_ROWS                                                                                  \
  vk_addr rows;                        /* [workgroups] SAMPLE_ROW entries, one per workgroup */         \
  vk_uint V; vk_uint flags;            /* SAMPLE_DRAW */

#ifdef __cplusplus
struct EmbedPC { PC_EMBED };
struct MatmulPC { PC_MATMUL };
struct MatmulRowsPC { PC_MATMUL_ROWS };
struct QuantizeX8PC { PC_QUANTIZE_X8 };
struct QuantizeDot8PC { PC_QUANTIZE_DOT8 };
struct RopeKvPC { PC_ROPE_STORE_KV };
struct AttentionPC { PC_ATTENTION };
struct AttentionCoopPC { PC_ATTENTION_COOP };
struct AttentionCombinePC { PC_ATTENTION_COMBINE };
struct AttentionRowsPC { PC_ATTENTION_ROWS };
struct ArgmaxPC { PC_ARGMAX };
struct SampleRow { SAMPLE_ROW };
struct SampleRowsPC { PC_SAMPLE_ROWS };
struct SpecAcceptPC { PC_SPEC_ACCEPT };
struct AddRmsNormPC { PC_ADD_RMSNORM };
struct SoftcapPC { PC_SOFTCAP };
struct BiasRowsPC { PC_BIAS_ROWS };
}  // namespace vkspec::contract
#endif
#undef VKSPEC_CONST
#endif
