#version 460
// Row-per-lane matmul for CPU devices (lavapipe): y[t][r] (+)= sum_k W[r][k] * x[t][k], one weight row per
// lane, TT tokens per workgroup. Weights and x are read through uniform texel buffers of 16-byte texels
// because llvmpipe compiles texelFetch into one vector gather, while storage-buffer / device-address loads
// become a scalar loop with a branch per lane. Same modes as matmul.comp (accumulate, fused SwiGLU).
//
// Layout per row: K/EPT texels (EPT = elements per texel: f32 4, f16/bf16 8, q8_0 16); q8_0 scales are a
// float plane of K/32 per row. x rows are x_stride floats (x_stride % 4 == 0), 4 floats per texel.
// Batch invariance: each lane reduces its row in k order, one texel at a time, whatever TT is.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "weights.glsl"

#if defined(WTYPE_F32)
const uint WTYPE = WT_F32, EPT = 4;
#elif defined(WTYPE_F16)
const uint WTYPE = WT_F16, EPT = 8;
#elif defined(WTYPE_BF16)
const uint WTYPE = WT_BF16, EPT = 8;
#else
const uint WTYPE = WT_Q8_0, EPT = 16;
#endif

layout(constant_id = 1) const uint TT = 1;   // tokens per workgroup: 1..8

layout(set = 0, binding = 0) uniform usamplerBuffer W;    // block holding W (and its scales)
layout(set = 0, binding = 1) uniform usamplerBuffer W2;   // block holding W2 (MODE_SWIGLU only)
layout(set = 0, binding = 2) uniform usamplerBuffer X;    // block holding x

const uint MODE_ACCUMULATE = 1u;
const uint MODE_SWIGLU = 2u;

layout(push_constant) uniform PC {
  uvec2 y;                              // [n][y_stride] f32
  uint w, w_scales, w2, w2_scales, x;   // texel offsets of the slices in their blocks
  uint M, K, n, x_stride, y_stride, mode;
} pc;

vec4 xv(uint t4) { return uintBitsToFloat(texelFetch(X, int(pc.x + t4))); }

// sum over one texel of weights (EPT elements starting at element e of the row) times x[tok][e..]
float dot_texel(uvec4 u, float scale, uint xt) {
  if (WTYPE == WT_F32) return dot(uintBitsToFloat(u), xv(xt));
  if (WTYPE == WT_F16 || WTYPE == WT_BF16) {
    const vec4 a = WTYPE == WT_F16 ? vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y)) : vec4(bf16x2(u.x), bf16x2(u.y));
    const vec4 b = WTYPE == WT_F16 ? vec4(unpackHalf2x16(u.z), unpackHalf2x16(u.w)) : vec4(bf16x2(u.z), bf16x2(u.w));
    return dot(a, xv(xt)) + dot(b, xv(xt + 1u));
  }
  return (dot(q8x4(u.x), xv(xt)) + dot(q8x4(u.y), xv(xt + 1u)) + dot(q8x4(u.z), xv(xt + 2u)) +
          dot(q8x4(u.w), xv(xt + 3u))) * scale;
}

float scale_of(usamplerBuffer s, uint base, uint block) {
  return uintBitsToFloat(texelFetch(s, int(base + block / 4u))[block % 4u]);
}

void main() {
  const uint row = gl_GlobalInvocationID.x;
  const uint t0 = gl_WorkGroupID.y * TT;
  const bool in_range = row < pc.M;
  const uint r = in_range ? row : 0u;
  const bool swiglu = (pc.mode & MODE_SWIGLU) != 0u;
  const uint kt = pc.K / EPT, xs4 = pc.x_stride / 4u;

  // Accumulators for up to 8 tokens live in vec4s, not float[TT]: llvmpipe puts indexed arrays in
  // scratch memory, which made every += a per-lane memory round trip (4x slower overall).
  precise vec4 acc_lo = vec4(0.0), acc_hi = vec4(0.0), acc2_lo = vec4(0.0), acc2_hi = vec4(0.0);
  const uint last = (pc.n - 1u) * xs4;   // tokens past n repeat the last one (their results are dropped)
  const uint x0 = min(t0 * xs4, last);
  for (uint i = 0; i < kt; ++i) {
    const uvec4 a = texelFetch(W, int(pc.w + r * kt + i));
    uvec4 b = uvec4(0);
    if (swiglu) b = texelFetch(W2, int(pc.w2 + r * kt + i));
    float sa = 1.0, sb = 1.0;
    if (WTYPE == WT_Q8_0) {
      const uint blk = r * (pc.K / 32u) + i / 2u;   // two 16-quant texels per 32-quant block
      sa = scale_of(W, pc.w_scales, blk);
      if (swiglu) sb = scale_of(W2, pc.w2_scales, blk);
    }
    const uint xi = i * (EPT / 4u);
#define TOKEN(t, acc, acc2, c)                                   \
    if (TT > t) {                                                \
      const uint xt = min(x0 + t * xs4, last) + xi;              \
      acc.c += dot_texel(a, sa, xt);                             \
      if (swiglu) acc2.c += dot_texel(b, sb, xt);                \
    }
    TOKEN(0, acc_lo, acc2_lo, x) TOKEN(1, acc_lo, acc2_lo, y) TOKEN(2, acc_lo, acc2_lo, z) TOKEN(3, acc_lo, acc2_lo, w)
    TOKEN(4, acc_hi, acc2_hi, x) TOKEN(5, acc_hi, acc2_hi, y) TOKEN(6, acc_hi, acc2_hi, z) TOKEN(7, acc_hi, acc2_hi, w)
#undef TOKEN
  }

  for (uint t = 0; t < TT; ++t) {
    const uint tok = t0 + t;
    if (in_range && tok < pc.n) {
      const uint o = tok * pc.y_stride + row;
      float v = t < 4u ? acc_lo[t] : acc_hi[t - 4u];
      if (swiglu) v = v / (1.0 + exp(-v)) * (t < 4u ? acc2_lo[t] : acc2_hi[t - 4u]);
      if ((pc.mode & MODE_ACCUMULATE) != 0u) v += Floats(pc.y).v[o];
      Floats(pc.y).v[o] = v;
    }
  }
}
