#version 460
// y[t][r] (+)= sum_k W[r][k] * x[t][k] for rows r < M, tokens t < n (n = 1 decode; more: a verify pass or a prompt chunk).
// MODE_SWIGLU: W is the FFN gate, W2 the up projection; y = silu(W x) * (W2 x) (SwiGLU fused into the
// gate/up matmul, so the hidden activation is written once). MODE_ACCUMULATE adds into y (residual).
// MODE_RMSNORM: x is the raw residual stream and the matmul applies RMSNorm itself: the sum of squares of x
// is reduced alongside the dot products (same lanes, same order), x is multiplied by the norm weight as it
// is read, and the row sums are scaled by 1/sqrt(mean(x^2) + eps) at the end: one dispatch instead of two.
//
// Batch invariance: every y[t][r] is reduced in the same order (k ascending within a lane, the lanes' sums
// added as a pairwise tree by wg_sum_pairwise) whatever n and TT are; `precise` (dot4_acc) stops the
// compiler from fusing or reordering differently in the TT=1 and TT=8 variants. The subgroup family
// (LPR = WG) uses this kernel for one token only and matmul_tile.comp, which keeps this order, for more.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "contract.h"
#include "weights.glsl"

#include "wtype.glsl"

layout(constant_id = 1) const uint TT = 1;    // tokens per workgroup (1 for decode, 8 for batches)
layout(constant_id = 2) const uint LPR = 1;   // lanes per row: 1 = row per lane (CPU devices), WG = row per workgroup (GPUs)
layout(constant_id = 3) const uint GROUP = 32;      // quantized: weights per scale
layout(constant_id = 4) const bool HAS_MIN = false; // quantized: scales are {s, m} pairs
layout(constant_id = 5) const bool FUSED = true;    // dot4_acc's fused multiply-adds (VKSPEC_FMA=0: off)


layout(push_constant) uniform PC { PC_MATMUL } pc;   // shaders/contract.h
#include "matmul_epilogue.glsl"

void main() {
  const uint gid = gl_GlobalInvocationID.x;
  // LPR = WG: a workgroup per row, in z slabs of gl_NumWorkGroups.x rows (a dispatch dimension holds 65535
  // workgroups on some devices; a 128k-word vocabulary's output is 128k rows)
  const uint row = LPR == WG ? gl_WorkGroupID.z * gl_NumWorkGroups.x + gl_WorkGroupID.x : gid / LPR, lane = gid % LPR;
  const uint t0 = gl_WorkGroupID.y * TT;
  const bool in_range = row < pc.M;
  const uint r = in_range ? row : 0u;      // inactive lanes still join the reductions
  const bool swiglu = (pc.mode & MODE_SWIGLU) != 0u, normed = (pc.mode & MODE_RMSNORM) != 0u;
  const bool vec4_path = (pc.K & 3u) == 0u && (pc.x_stride & 3u) == 0u;

  precise float acc[TT];
  precise float acc2[TT];
  precise float ss[TT];   // MODE_RMSNORM: sum of x^2 per token
  for (uint t = 0; t < TT; ++t) { acc[t] = 0.0; acc2[t] = 0.0; ss[t] = 0.0; }

  if (vec4_path) {
    const uint K4 = pc.K / 4u, xs4 = pc.x_stride / 4u;
    for (uint k4 = lane; k4 < K4; k4 += LPR) {
      const vec4 a = load_w4(WTYPE, GROUP, HAS_MIN, pc.w, pc.w_scales, r * K4 + k4);
      vec4 b = vec4(0.0);
      if (swiglu) b = load_w4(WTYPE, GROUP, HAS_MIN, pc.w2, pc.w2_scales, r * K4 + k4);
      for (uint t = 0; t < TT; ++t) {
        const uint tok = min(t0 + t, pc.n - 1u);
        precise vec4 xv = Vec4s(pc.x).v[tok * xs4 + k4];
        if (normed) {
          ss[t] = dot4_acc(ss[t], xv, xv, FUSED);
          xv *= Vec4s(pc.norm).v[k4];
        }
        acc[t] = dot4_acc(acc[t], a, xv, FUSED);
        if (swiglu) acc2[t] = dot4_acc(acc2[t], b, xv, FUSED);
      }
    }
  } else {
    for (uint k = lane; k < pc.K; k += LPR) {
      const float a = load_w1(WTYPE, GROUP, HAS_MIN, pc.w, pc.w_scales, r * pc.K + k);
      const float b = swiglu ? load_w1(WTYPE, GROUP, HAS_MIN, pc.w2, pc.w2_scales, r * pc.K + k) : 0.0;
      for (uint t = 0; t < TT; ++t) {
        const uint tok = min(t0 + t, pc.n - 1u);
        precise float xv = Floats(pc.x).v[tok * pc.x_stride + k];
        if (normed) {
          ss[t] = dot1_acc(ss[t], xv, xv, FUSED);
          xv *= Floats(pc.norm).v[k];
        }
        acc[t] = dot1_acc(acc[t], a, xv, FUSED);
        if (swiglu) acc2[t] = dot1_acc(acc2[t], b, xv, FUSED);
      }
    }
  }

  for (uint t = 0; t < TT; ++t) {
    precise float s = acc[t], s2 = acc2[t], sq = ss[t];
    if (LPR > 1u) {
      s = wg_sum_pairwise(s);
      if (swiglu) s2 = wg_sum_pairwise(s2);
      if (normed) sq = wg_sum_pairwise(sq);
    }
    const uint tok = t0 + t;
    if (in_range && lane == 0u && tok < pc.n) matmul_store(tok * pc.y_stride + row, s, s2, sq, swiglu, normed);
  }
}
