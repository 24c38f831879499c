#version 460
// Row-per-lane matmul for CPU devices (lavapipe): y[t][r] (+)= sum_k W[r][k] * x[t][k], RPL weight rows per
// lane (each x texel is fetched once for all of them), TT tokens per workgroup. Weights and x are read
// through uniform texel buffers of 16-byte texels because llvmpipe compiles texelFetch into one vector
// gather, while storage-buffer / device-address loads become a scalar loop with a branch per lane. Same modes as
// matmul.comp (accumulate, fused SwiGLU, RMSNorm applied on the fly: each lane reduces x^2 per token over the
// texels it reads anyway and multiplies x by the norm weight once for all of its rows).
//
// Layout per row: K/EPT texels (EPT = weights per texel: f32 4, f16/bf16 8, q8 16, q4 32; q6 64 per 3 texels:
// its units of 32 weights are 1.5 texels, see q6_chunk), decoded EPC
// (<= 16) weights at a time; quantized formats have per-GROUP scales (float, or {s, m} when HAS_MIN) in a
// plane of the same memory block (shaders/weights.glsl). x rows are x_stride floats (x_stride % 4 == 0),
// 4 floats per texel. A quantized chunk contributes s * dot(q, x) + m * sum(x): the sum of x is taken once
// per token for all of a lane's rows.
// The k loop runs in steps (64 or 32 weights, see STEP) whose scales are fetched once per step: on llvmpipe
// a texel fetch is a call of ~45 instructions whatever it reads, and fetching the scales once per 16-weight
// chunk made the q4 matmul of the Llama-3.2-1B shape 1.4x slower (7.3 -> 5.3 ms, q8 -7%).
// Batch invariance: each lane reduces its row in k order, one chunk at a time, whatever TT (and so STEP) is.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "contract.h"
#include "weights.glsl"
#define PAGED_KV_BLOCK_SIZE_AT_RUN_TIME   // constant 1 is TT here: MODE_ROPE_KV passes pc.block_size
#include "paged_kv.glsl"
#extension GL_EXT_control_flow_attributes : require

#include "wtype.glsl"
const uint EPT = WTYPE == WT_F32 ? 4u : WTYPE == WT_Q8 ? 16u : WTYPE >= WT_Q4 ? 32u : 8u;   // weights per texel (q6: nibbles)
#ifdef X8
// x as int8 activations (quantize_x8.comp; layout at contract.h X8_BLOCK), quantized weights only. q4: a
// chunk's 16 nibbles are taken in pairs 16 bits apart and multiplied by the matching pairs of x, one 32-bit
// product for two weights (sum of 8 products: |upper half| <= 8 * 2 * 15 * 127 < 2^15, |lower half| <=
// 8 * 15 * 127 < 2^15, so rounding off the lower half leaves the exact integer dot product of the chunk).
// q6: pairs of 6-bit quants minus 32 the same way; |q| <= 32, so the upper half is taken per 8 weights
// (|upper half| <= 4 * 2 * 32 * 127 < 2^15, |lower half| <= 4 * 32 * 127). q8 (only q8_0 now): one integer
// product per weight (int8 x int8 does not fit 16-bit halves), x unpacked from its pairs once per token.
// On llvmpipe, which splits every float multiply-add into two instructions, a call of the 1B shape's q4
// matmul took ~1.3x less time than with float x, of the q8 one (then holding the q6_K tensors) ~1.13x
// less; whole Q4_K_M prefill and decode ~1.3x faster (docs/PERFORMANCE.md). The q6 format made those
// q6_K calls ~1.35x faster again at one token and ~1.85x at eight. Groups of two chunks add their integer
// dot products before one scaling (PAIRED below): the 1B shape's eight-row q4 call ~6% faster, its
// prefill ~9%. Whole-texel (32-weight) q4 chunks were tried: prefill got slower.
#endif
const uint EPC = EPT > 16u ? 16u : EPT;   // weights per decoded chunk
const uint CPT = EPT / EPC;               // chunks per texel

// tokens per workgroup: 1..8. ONE_TOKEN, decode's build (the host passes TT = 1 to it), holds one token's
// code. TT stays a specialization constant there: as a literal it made glslang unroll the chunk loop into a
// larger module, which lavapipe then created no faster.
layout(constant_id = 1) const uint TT = 1;
layout(constant_id = 2) const uint RPL = 1;   // rows per lane: 1, 2, 4 or 8 (x is fetched once for all of them)
layout(constant_id = 3) const uint GROUP = 32;       // quantized: weights per scale (16 or 32)
layout(constant_id = 4) const bool HAS_MIN = false;  // quantized: scales are {s, m} pairs
// MODE_SWIGLU and MODE_RMSNORM as a specialization constant: on llvmpipe a branch on a push constant runs
// both sides under a lane mask, and these branches sit in the innermost loop (as push constants they made
// the 1B-shape decode 1.7x slower). MODE_ACCUMULATE only touches the store and stays in pc.mode, which
// saves compiling a variant per use.
layout(constant_id = 5) const uint MODE = 0;
const bool SWIGLU = (MODE & MODE_SWIGLU) != 0u, NORMED = (MODE & MODE_RMSNORM) != 0u;
const bool ROPE_KV = (MODE & MODE_ROPE_KV) != 0u;   // the host asks for an even RPL and M

layout(set = 0, binding = 0) uniform usamplerBuffer W;    // block holding W (and its scales)
layout(set = 0, binding = 1) uniform usamplerBuffer W2;   // block holding W2 (MODE_SWIGLU only)
layout(set = 0, binding = 2) uniform usamplerBuffer X;    // block holding x
layout(set = 0, binding = 3) uniform usamplerBuffer G;    // block holding the norm weight (MODE_RMSNORM only)


layout(push_constant) uniform PC { PC_MATMUL_ROWS } pc;   // shaders/contract.h

vec4 xv(uint t4) { return uintBitsToFloat(texelFetch(X, int(pc.x + t4))); }
uvec4 xq(uint t4) { return texelFetch(X, int(pc.x + t4)); }   // X8: x as quantize_x8.comp wrote it
vec4 gv(uint t4) { return uintBitsToFloat(texelFetch(G, int(pc.norm + t4))); }

// One chunk of a weight row, decoded: EPC weights (or quants) as up to four vec4s, and the quant group's
// scale and min.
struct Wt { vec4 a, b, c, d; float s, m; };
// X8: a q4 chunk as nibble pairs (weights i and i + 4 of each 8, in the low and high 16 bits), a q6 chunk
// as pairs of quants (signed 16-bit halves), or a q8 chunk's texel as it is (pa: 16 int8 weights, 4 per uint)
struct Wq { uvec4 pa, pb; float s, m; };

// q6: chunk c (0-3) of a 64-weight step. The step is 3 texels, two units of 32 weights (weights.glsl):
// t0 = unit 0's nibbles, t1 = unit 0's high bits and the first half of unit 1's nibbles, t2 = the rest of
// unit 1's nibbles and its high bits. The kernel holds t0 (then t2, fetched at chunk 2) in f and t1 in f2.
// Returns the chunk's two nibble uints and its high-bit uint.
uvec3 q6_chunk(uvec4 f, uvec4 f2, uint c) {
  if (c == 0u) return uvec3(f.xy, f2.x);
  if (c == 1u) return uvec3(f.zw, f2.y);
  if (c == 2u) return uvec3(f2.zw, f.z);
  return uvec3(f.xy, f.w);
}

uvec4 fetch(usamplerBuffer tex, uint base, uint row, uint i, uint kt) { return texelFetch(tex, int(base + row * kt + i)); }

// Weights of chunk `chunk` (of the texel u holding it; q6: chunk c of a step in u and u2) with the scale
// {s, m} of its group.
Wt decode(uvec4 u, uvec4 u2, uint chunk, uint c, vec2 sm) {
  Wt w;
  w.s = sm.x;
  w.m = sm.y;
  w.b = w.c = w.d = vec4(0.0);
  if (WTYPE == WT_F32) {
    w.a = uintBitsToFloat(u);
  } else if (WTYPE == WT_F16) {
    w.a = vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y));
    w.b = vec4(unpackHalf2x16(u.z), unpackHalf2x16(u.w));
  } else if (WTYPE == WT_BF16) {
    w.a = vec4(bf16x2(u.x), bf16x2(u.y));
    w.b = vec4(bf16x2(u.z), bf16x2(u.w));
  } else if (WTYPE == WT_Q8) {
    w.a = q8x4(u.x); w.b = q8x4(u.y); w.c = q8x4(u.z); w.d = q8x4(u.w);
  } else if (WTYPE == WT_Q6) {   // weights 0-3, 4-7, 8-11, 12-15: their high bits at 0, 16, 8, 24
    const uvec3 q = q6_chunk(u, u2, c);
    w.a = q6x4_bits(q.x, q.z); w.b = q6x4_bits(q.x >> 16, q.z >> 16);
    w.c = q6x4_bits(q.y, q.z >> 8); w.d = q6x4_bits(q.y >> 16, q.z >> 24);
  } else {
    const uvec2 h = (chunk & 1u) == 0u ? u.xy : u.zw;   // two 16-quant chunks per texel
    w.a = q4x4(h.x); w.b = q4x4(h.x >> 16); w.c = q4x4(h.y); w.d = q4x4(h.y >> 16);
  }
  return w;
}

Wq decode_pairs(uvec4 u, uvec4 u2, uint chunk, uint c, vec2 sm) {
  if (WTYPE == WT_Q8) return Wq(u, uvec4(0u), sm.x, sm.y);   // a whole texel: 16 int8 weights
  const uvec4 sh = uvec4(0u, 4u, 8u, 12u);
  if (WTYPE == WT_Q6) {   // nibble pairs with their high bits (16 bits apart too), minus 32 in each half
    const uvec3 q = q6_chunk(u, u2, c);
    const uvec4 a = ((uvec4(q.x) >> sh) & 0x000F000Fu) | (((uvec4(q.z) >> (sh >> 1)) & 0x00030003u) << 4);
    const uvec4 b = ((uvec4(q.y) >> sh) & 0x000F000Fu) | (((uvec4(q.z) >> ((sh >> 1) + 8u)) & 0x00030003u) << 4);
    return Wq(a - 0x00200020u, b - 0x00200020u, sm.x, sm.y);
  }
  const uvec2 h = (chunk & 1u) == 0u ? u.xy : u.zw;
  return Wq((uvec4(h.x) >> sh) & 0x000F000Fu, (uvec4(h.y) >> sh) & 0x000F000Fu, sm.x, sm.y);
}

// X8: a chunk's exact integer dot product with its x pairs xa, xb.
int chunk_dot_x8(Wq w, ivec4 xa, ivec4 xb) {
  if (WTYPE == WT_Q8) {   // one product per weight: x unpacked from its pairs, weight k = byte k % 4 of pa[k / 4]
    const ivec4 sh = ivec4(24, 16, 8, 0);
    const ivec4 p = ((ivec4(w.pa.x) << sh) >> 24) * ((xa + 32768) >> 16) + ((ivec4(w.pa.y) << sh) >> 24) * ((xa << 16) >> 16) +
                    ((ivec4(w.pa.z) << sh) >> 24) * ((xb + 32768) >> 16) + ((ivec4(w.pa.w) << sh) >> 24) * ((xb << 16) >> 16);
    return p.x + p.y + p.z + p.w;
  }
  if (WTYPE == WT_Q6) {   // each 8 weights' sum in its own upper half
    const ivec4 pa = ivec4(w.pa) * xa, pb = ivec4(w.pb) * xb;
    return ((pa.x + pa.y + pa.z + pa.w + 32768) >> 16) + ((pb.x + pb.y + pb.z + pb.w + 32768) >> 16);
  }
  const ivec4 p = ivec4(w.pa) * xa + ivec4(w.pb) * xb;
  return (p.x + p.y + p.z + p.w + 32768) >> 16;
}

// X8: the contribution of a group's (or a chunk's) integer dot product q: d * s * q + m * xs, where xd is
// x's block scale d and xs = d * the sum of the matching quants of x.
float scaled_x8(int q, float s, float m, float xd, float xs) {
  precise float v = float(q) * (s * xd);
  return HAS_MIN ? v + m * xs : v;
}

// Quantized formats: scale texels hold SPT groups' scales (4 floats, or 2 {s, m} pairs); a step's groups
// lie in one texel or, when they are more than SPT (GROUP 16 with a min), in two consecutive ones (rows are
// whole steps, so a step's first group is a multiple of SPT then). gs = the row's group index at the step's
// start; t0/t1 = the step's scale texels.
const uint SPT = HAS_MIN ? 2u : 4u;
uint scale_texel(uint gs) { return gs / SPT; }
vec2 chunk_scale(vec4 t0, vec4 t1, uint gs, uint c) {
  if (WTYPE < WT_Q8) return vec2(1.0, 0.0);
  const uint lg = c * EPC / GROUP;   // the chunk's group within the step (a constant once c is unrolled)
  const vec4 t = lg < SPT ? t0 : t1;
  const uint k = (gs + lg) % SPT;
  if (HAS_MIN) return k == 0u ? t.xy : t.zw;
  return vec2(k == 0u ? t.x : k == 1u ? t.y : k == 2u ? t.z : t.w, 0.0);
}

// sum over one chunk of weights times the matching x values x0..x3 (EPC/4 of them are used); xs = the sum
// of those x values (quantized formats with a min)
float dot_chunk(Wt w, vec4 x0, vec4 x1, vec4 x2, vec4 x3, float xs) {
  if (WTYPE == WT_F32) return dot(w.a, x0);
  if (WTYPE == WT_F16 || WTYPE == WT_BF16) return dot(w.a, x0) + dot(w.b, x1);
  const float q = (dot(w.a, x0) + dot(w.b, x1) + dot(w.c, x2) + dot(w.d, x3)) * w.s;
  return HAS_MIN ? q + w.m * xs : q;
}

float pick(vec4 lo, vec4 hi, uint t) { return t < 4u ? lo[t] : hi[t - 4u]; }

// Weights per step: quantized, ROW_QUANT_STEP for one token (the step's scale texels are fetched once per
// step: 1B-shape decode ~10% faster than with 32-weight steps) and half of it for multi-token tiles, whose
// fetches are shared by TT tokens already (64-weight steps were no faster there, and every extra unrolled
// chunk costs JIT time in every process: lavapipe compiles each pipeline when it is created; q6 keeps whole
// steps, two of its 32-weight units, so that a step is whole texels). Float formats
// have no scales and step a chunk at a time (a longer unrolled step only made the JIT slower).
const uint STEP = WTYPE >= WT_Q8 ? (TT == 1u || WTYPE == WT_Q6 ? ROW_QUANT_STEP : ROW_QUANT_STEP / 2u) : EPC;
const uint CPS = STEP / EPC;              // chunks per step: q8/q4 4, float formats 1
const bool TWO_SCALE_TEXELS = STEP / GROUP > SPT;
const uint XPC = EPC / 4u;                // x texels per chunk
// X8, quantized groups of two chunks (every GROUP-32 format: q4_K, q4_0/1, q5_0/1/K, q8_0; not q6_K's 16):
// the two chunks' exact integer dot products are added before the group's scale is applied, once, and x's
// block sum is read once (the group is x's block); the even chunk reads no scale texel of x. Integer
// addition is exact, so the order of float operations per group is the same for every TT.
const bool PAIRED = GROUP == X8_BLOCK && 2u * EPC == X8_BLOCK;

// Per-row code is written once and expanded for rows 0..RPL-1 (llvmpipe keeps named vec4s in registers or
// its stack frame, but an indexed array in scratch memory).
#ifdef TWO_ROWS   // the build for RPL <= 2 (cmake/shaders.cmake vkspec_matmul_rows_shaders)
#define FOR_ROWS(M) M(0) M(1)
#define FOR_ROWS_AT(M, h, c) M(0, h, c) M(1, h, c)
#else
#define FOR_ROWS(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#define FOR_ROWS_AT(M, h, c) M(0, h, c) M(1, h, c) M(2, h, c) M(3, h, c) M(4, h, c) M(5, h, c) M(6, h, c) M(7, h, c)
#endif

// y[t][row] for the TT tokens of the workgroup from one row's sums (lo: tokens 0-3, hi: 4-7; up: SwiGLU's)
void store_row(uint row, uint t0, vec4 lo, vec4 hi, vec4 up_lo, vec4 up_hi, vec4 ssl, vec4 ssh) {
  for (uint t = 0; t < TT; ++t) {
    const uint tok = t0 + t;
    if (row < pc.M && tok < pc.n) {
      const uint o = tok * pc.y_stride + row;
      precise float v = pick(lo, hi, t), v2 = pick(up_lo, up_hi, t);
      if (NORMED) {
        const float scale = 1.0 / sqrt(pick(ssl, ssh, t) / float(pc.K) + pc.eps);
        v *= scale;
        v2 *= scale;
      }
      if (SWIGLU) v = gate_activation(v, (pc.mode & MODE_GELU) != 0u) * v2;
      if ((pc.mode & MODE_ACCUMULATE) != 0u) v += Floats(pc.y).v[o];
      Floats(pc.y).v[o] = v;
    }
  }
}

// MODE_ROPE_KV: rows `row` and `row + 1` (row even) of [q | k | v] for the TT tokens, with RoPE on q and k and
// k and v copied into the token's slot of the paged KV: rope_store_kv.comp's work, done where the values
// are. A lane's rows are consecutive and a rotation pair is two adjacent dims of one head (GGUF llama's
// layout), so each pair is within a lane. The rotation is common.glsl's rope_rotate, as in rope_store_kv.comp.
void store_rope_pair(uint row, uint t0, vec4 al, vec4 ah, vec4 bl, vec4 bh, vec4 ssl, vec4 ssh) {
  const uint kv_dim = pc.n_kv_heads * pc.head_dim, half_rot = pc.n_rot / 2u;
  const bool is_q = row < pc.q_dim, is_v = row >= pc.q_dim + kv_dim;
  const uint j = is_q ? row : row - pc.q_dim - (is_v ? kv_dim : 0u);   // index within q, k or v
  const uint d = j % pc.head_dim;
  for (uint t = 0; t < TT; ++t) {
    const uint tok = t0 + t;
    if (row < pc.M && tok < pc.n) {
      precise float a = pick(al, ah, t), b = pick(bl, bh, t);
      if (NORMED) {
        const float scale = 1.0 / sqrt(pick(ssl, ssh, t) / float(pc.K) + pc.eps);
        a *= scale;
        b *= scale;
      }
      const uvec4 kr = kv_row_of(pc.kv_rows, tok);   // {position, block table, tree base, tree path}
      if (!is_v && d < pc.n_rot) {
        const vec2 cs = Vec2s(pc.rope).v[kr.x * half_rot + d / 2u];
        const vec2 ab = rope_rotate(a, b, cs);
        a = ab.x;
        b = ab.y;
      }
      const uint o = tok * pc.y_stride + row;
      Floats(pc.y).v[o] = a;
      Floats(pc.y).v[o + 1u] = b;
      if (!is_q) {
        const uint dst =
            kv_index_in(pc.block_tables, kr.y, kv_slot(kr, kr.x), j / pc.head_dim, pc.n_kv_heads, pc.head_dim, pc.block_size) + d;
        kv_store2(is_v ? pc.v_pool : pc.k_pool, dst, a, b);   // d is even: the pair is one f16 pair
      }
    }
  }
}

void main() {
  const uint row0 = gl_GlobalInvocationID.x * RPL;
  const uint t0 = gl_WorkGroupID.y * TT;
  const uint kt = WTYPE == WT_Q6 ? pc.K / Q6_UNIT_WEIGHTS * Q6_UNIT_UINTS / 4u : pc.K / EPT, xs4 = pc.x_stride / 4u;   // texels per row
  // rows are whole steps: float steps are one texel (the host asks for K % EPT == 0), quantized rows whole
  // ROW_QUANT_STEPs (the host asks for K % ROW_QUANT_STEP == 0)
  const uint steps = pc.K / STEP, gpr = pc.K / GROUP;
  const vec4 one = vec4(1.0, 0.0, 1.0, 0.0);
  const Wt zero = Wt(vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0), 1.0, 0.0);
  const Wq zeroq = Wq(uvec4(0u), uvec4(0u), 1.0, 0.0);
  // Per row j: its index (rows past M repeat the last row; their results are dropped) and its sums (a: W,
  // g: W2; tokens 0-3 in l, 4-7 in h). Nothing else lives across steps: llvmpipe writes a variable that a
  // loop carries through memory under the lane mask (keeping the scale texels across steps was 20% slower).
#define ROW_STATE(j)                                                                    \
  const uint r##j = min(row0 + j, pc.M - 1u);                                           \
  precise vec4 a##j##l = vec4(0.0), a##j##h = vec4(0.0), g##j##l = vec4(0.0), g##j##h = vec4(0.0);
  FOR_ROWS(ROW_STATE)
#undef ROW_STATE
  precise vec4 ssl = vec4(0.0), ssh = vec4(0.0);   // MODE_RMSNORM: sum of x^2, tokens 0-3 / 4-7
  const uint last = (pc.n - 1u) * xs4;   // tokens past n repeat the last one (their results are dropped)
  const uint x0 = min(t0 * xs4, last);
  for (uint s = 0; s < steps; ++s) {
    const uint gs = s * STEP / GROUP;   // the step's first group in a row
    // per row: the step's scale texels (s: W, z: W2) and the current weight texels (f: W, e: W2; q6: and its
    // second texel, f2 and e2)
#define STEP_STATE(j) vec4 s##j = one, z##j = one, s##j##b = one, z##j##b = one; \
    uvec4 f##j = uvec4(0u), e##j = uvec4(0u), f2##j = uvec4(0u), e2##j = uvec4(0u);       \
    ivec4 p##j##l = ivec4(0), p##j##h = ivec4(0), pg##j##l = ivec4(0), pg##j##h = ivec4(0);
    FOR_ROWS(STEP_STATE)
#undef STEP_STATE
    if (WTYPE >= WT_Q8) {               // the step's scale texels of each row
#define SCALES(j)                                                                                        \
      if (RPL > j) {                                                                                     \
        const int st = int(scale_texel(r##j * gpr + gs));                                               \
        s##j = uintBitsToFloat(texelFetch(W, int(pc.w_scales) + st));                                    \
        if (TWO_SCALE_TEXELS) s##j##b = uintBitsToFloat(texelFetch(W, int(pc.w_scales) + st + 1));       \
        if (SWIGLU) {                                                                                    \
          z##j = uintBitsToFloat(texelFetch(W2, int(pc.w2_scales) + st));                                \
          if (TWO_SCALE_TEXELS) z##j##b = uintBitsToFloat(texelFetch(W2, int(pc.w2_scales) + st + 1));   \
        }                                                                                                \
      }
      FOR_ROWS(SCALES)
#undef SCALES
    }
    [[unroll]] for (uint c = 0; c < CPS; ++c) {
    const uint chunk = s * CPS + c;
    const bool odd = (c & 1u) == 1u;   // a step is whole chunk pairs: chunk and c have the same parity
    if (c % CPT == 0u) {    // a new weight texel for each row (q6: t0 and t1 at chunk 0, t2 at chunk 2)
      const uint i = WTYPE == WT_Q6 ? 3u * s + (c == 0u ? 0u : 2u) : chunk / CPT;
#define FETCH(j)                                                                 \
      if (RPL > j) {                                                             \
        f##j = fetch(W, pc.w, r##j, i, kt);                                      \
        if (WTYPE == WT_Q6 && c == 0u) f2##j = fetch(W, pc.w, r##j, i + 1u, kt); \
        if (SWIGLU) {                                                            \
          e##j = fetch(W2, pc.w2, r##j, i, kt);                                  \
          if (WTYPE == WT_Q6 && c == 0u) e2##j = fetch(W2, pc.w2, r##j, i + 1u, kt); \
        }                                                                        \
      }
      FOR_ROWS(FETCH)
#undef FETCH
    }
#ifdef X8
#define DECODE(j)                                                                                \
    Wq w##j = zeroq, u##j = zeroq;                                                               \
    if (RPL > j) {                                                                               \
      w##j = decode_pairs(f##j, f2##j, chunk, c, chunk_scale(s##j, s##j##b, r##j * gpr + gs, c));           \
      if (SWIGLU) u##j = decode_pairs(e##j, e2##j, chunk, c, chunk_scale(z##j, z##j##b, r##j * gpr + gs, c)); \
    }
#else
#define DECODE(j)                                                          \
    Wt w##j = zero, u##j = zero;                                           \
    if (RPL > j) {                                                         \
      w##j = decode(f##j, f2##j, chunk, c, chunk_scale(s##j, s##j##b, r##j * gpr + gs, c));   \
      if (SWIGLU) u##j = decode(e##j, e2##j, chunk, c, chunk_scale(z##j, z##j##b, r##j * gpr + gs, c)); \
    }
#endif
    FOR_ROWS(DECODE)
#undef DECODE
#ifdef X8
// per row: a chunk's integer dot products (p: W, pg: W2; tokens in l/h.c); PAIRED keeps the even chunk's
// for its group's odd one
#define ROW(j, h, c)                                                                                 \
    if (RPL > j) {                                                                                   \
      const int q = chunk_dot_x8(w##j, xa, xb), qg = SWIGLU ? chunk_dot_x8(u##j, xa, xb) : 0;         \
      if (PAIRED && !odd) {                                                                          \
        p##j##h.c = q;                                                                               \
        pg##j##h.c = qg;                                                                             \
      } else {                                                                                       \
        a##j##h.c += scaled_x8(PAIRED ? p##j##h.c + q : q, w##j.s, w##j.m, xd, xs);                  \
        if (SWIGLU) g##j##h.c += scaled_x8(PAIRED ? pg##j##h.c + qg : qg, u##j.s, u##j.m, xd, xs);   \
      }                                                                                              \
    }
#define TOKEN(t, h, c)                                                                      \
    if (TT > t) {                                                                           \
      const uint xt = min(x0 + t * xs4, last) + xi;                                         \
      const ivec4 xa = ivec4(xq(xt)), xb = ivec4(xq(xt + 1u));                              \
      const vec4 xsc = PAIRED && !odd ? vec4(0.0) : uintBitsToFloat(xq(xt + xsi));          \
      const float xd = xsc.x, xs = PAIRED ? xsc.w : odd ? xsc.z : xsc.y;                    \
      FOR_ROWS_AT(ROW, h, c)                                                                \
    }
    // the chunk's x pairs (block chunk / 2, its texels 2 (chunk & 1) and 2 (chunk & 1) + 1) and, xsi texels
    // on, its block's scale texel
    const uint xi = chunk / 2u * X8_BLOCK_TEXELS + (chunk & 1u) * 2u, xsi = X8_SCALE_TEXEL - (chunk & 1u) * 2u;
#else
    const uint xi = chunk * XPC;   // the chunk's first x texel
    vec4 ga = vec4(1.0), gb = vec4(1.0), gc = vec4(1.0), gd = vec4(1.0);   // norm weights of this chunk
    if (NORMED) {
      ga = gv(xi);
      if (EPC > 4u) gb = gv(xi + 1u);
      if (EPC > 8u) { gc = gv(xi + 2u); gd = gv(xi + 3u); }
    }
#define ROW(j, h, c)                                                     \
    if (RPL > j) {                                                       \
      a##j##h.c += dot_chunk(w##j, xa, xb, xc, xd, xs);                  \
      if (SWIGLU) g##j##h.c += dot_chunk(u##j, xa, xb, xc, xd, xs);      \
    }
#define TOKEN(t, h, c)                                                   \
    if (TT > t) {                                                        \
      const uint xt = min(x0 + t * xs4, last) + xi;                      \
      precise vec4 xa = xv(xt);                                          \
      precise vec4 xb = EPC > 4u ? xv(xt + 1u) : vec4(0.0);              \
      precise vec4 xc = EPC > 8u ? xv(xt + 2u) : vec4(0.0);              \
      precise vec4 xd = EPC > 8u ? xv(xt + 3u) : vec4(0.0);              \
      if (NORMED) {                                                      \
        ss##h.c += dot(xa, xa) + dot(xb, xb) + dot(xc, xc) + dot(xd, xd); \
        xa *= ga; xb *= gb; xc *= gc; xd *= gd;                          \
      }                                                                  \
      precise float xs = HAS_MIN ? dot(xa + xb + xc + xd, vec4(1.0)) : 0.0; \
      FOR_ROWS_AT(ROW, h, c)                                             \
    }
#endif
    TOKEN(0, l, x)
#ifndef ONE_TOKEN
    TOKEN(1, l, y) TOKEN(2, l, z) TOKEN(3, l, w)
    TOKEN(4, h, x) TOKEN(5, h, y) TOKEN(6, h, z) TOKEN(7, h, w)
#endif
#undef TOKEN
#undef ROW
    }
  }

  if (ROPE_KV) {
#define STORE_PAIR(j, k) if (RPL > j) store_rope_pair(row0 + j, t0, a##j##l, a##j##h, a##k##l, a##k##h, ssl, ssh);
    STORE_PAIR(0, 1)
#ifndef TWO_ROWS
    STORE_PAIR(2, 3) STORE_PAIR(4, 5) STORE_PAIR(6, 7)
#endif
#undef STORE_PAIR
  } else {
#define STORE(j) if (RPL > j) store_row(row0 + j, t0, a##j##l, a##j##h, g##j##l, g##j##h, ssl, ssh);
    FOR_ROWS(STORE)
#undef STORE
  }
}
