#version 460
// Multi-token matmul of the subgroup family (GPUs): y[t][r] (+)= sum_k W[r][k] * x[t][k] for a tile of RT rows
// x TT tokens per workgroup, with matmul.comp's modes (MODE_SWIGLU, MODE_RMSNORM, MODE_ACCUMULATE). matmul.comp
// gives a workgroup one row, so each of its lanes loads TT x vec4s for every weight vec4 (TT + 1 loads per
// 4 TT multiply-adds: load-bound on a GPU); here each weight vec4 serves TT tokens and each x vec4 RT rows
// (RT + TT loads per 4 RT TT multiply-adds).
//
// Batch invariance with matmul.comp, which the host uses for one token (LPR = WG): lane l adds up the vec4
// chunks k4 = l, l + WG, ... of each row in ascending order with matmul.comp's expressions (dot4_acc,
// `precise`), and each (row, token) sum is the pairwise tree of the lanes' sums in lane order, as
// wg_sum_pairwise forms it there. Here each lane writes its sums to shared memory and lane i adds up value
// i's WG sums in that tree (tile_sums.glsl; no shuffles; by count ~4x fewer shared-memory operations than a
// subgroupAdd per value).
// The epilogue is matmul_epilogue.glsl's, as in matmul.comp. So y[t][r] has the same bits whatever else
// shares the pass.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "contract.h"
#include "weights.glsl"

#include "wtype.glsl"

layout(constant_id = 1) const uint TT = 8;          // tokens per workgroup
layout(constant_id = 2) const uint RT = 4;          // rows per workgroup
layout(constant_id = 3) const uint GROUP = 32;      // quantized: weights per scale
layout(constant_id = 4) const bool HAS_MIN = false; // quantized: scales are {s, m} pairs
layout(constant_id = 5) const uint MODE = 0;        // MODE_SWIGLU | MODE_RMSNORM (MODE_ACCUMULATE stays in pc.mode)
layout(constant_id = 6) const bool FUSED = true;    // as matmul.comp's (the host passes both the same)
const bool SWIGLU = (MODE & MODE_SWIGLU) != 0u, NORMED = (MODE & MODE_RMSNORM) != 0u;

layout(push_constant) uniform PC { PC_MATMUL } pc;   // shaders/contract.h
#include "matmul_epilogue.glsl"

#include "tile_sums.glsl"
const uint SS_AT = MATMUL_TILE_SUMS(RT, TT, SWIGLU);   // RMSNorm's sums of squares follow the sums
shared float tok_sq[TT];

void main() {
  const uint lane = gl_LocalInvocationID.x;
  const uint r0 = gl_WorkGroupID.x * RT, t0 = gl_WorkGroupID.y * TT;
  const uint K4 = pc.K / 4u, xs4 = pc.x_stride / 4u;   // the host asks for K % 4 == 0 and x_stride % 4 == 0

  precise float acc[RT * TT];
  precise float acc2[RT * TT];
  precise float ss[TT];   // MODE_RMSNORM: sum of x^2 per token
  [[unroll]] for (uint i = 0; i < RT * TT; ++i) { acc[i] = 0.0; acc2[i] = 0.0; }
  [[unroll]] for (uint t = 0; t < TT; ++t) ss[t] = 0.0;

  for (uint k4 = lane; k4 < K4; k4 += WG) {
    vec4 xs[TT];
    [[unroll]] for (uint t = 0; t < TT; ++t) {
      const uint tok = min(t0 + t, pc.n - 1u);   // tokens past n repeat the last one (not stored)
      precise vec4 xv = Vec4s(pc.x).v[tok * xs4 + k4];
      if (NORMED) {
        ss[t] = dot4_acc(ss[t], xv, xv, FUSED);
        xv *= Vec4s(pc.norm).v[k4];
      }
      xs[t] = xv;
    }
    [[unroll]] for (uint r = 0; r < RT; ++r) {
      const uint row = min(r0 + r, pc.M - 1u);   // rows past M repeat the last one (not stored)
      const vec4 a = load_w4(WTYPE, GROUP, HAS_MIN, pc.w, pc.w_scales, row * K4 + k4);
      vec4 b = vec4(0.0);
      if (SWIGLU) b = load_w4(WTYPE, GROUP, HAS_MIN, pc.w2, pc.w2_scales, row * K4 + k4);
      [[unroll]] for (uint t = 0; t < TT; ++t) {
        const vec4 xv = xs[t];
        acc[r * TT + t] = dot4_acc(acc[r * TT + t], a, xv, FUSED);
        if (SWIGLU) acc2[r * TT + t] = dot4_acc(acc2[r * TT + t], b, xv, FUSED);
      }
    }
  }

  [[unroll]] for (uint i = 0; i < RT * TT; ++i) {
    put_partial(i, acc[i]);
    if (SWIGLU) put_partial(RT * TT + i, acc2[i]);
  }
  if (NORMED) [[unroll]] for (uint t = 0; t < TT; ++t) put_partial(SS_AT + t, ss[t]);
  barrier();
  if (NORMED) {   // each token's sum of squares once, for all of the tile's rows
    if (lane < TT) tok_sq[lane] = lane_sum(SS_AT + lane);
    barrier();
  }
  for (uint i = lane; i < RT * TT; i += WG) {
    const uint r = i / TT, t = i % TT, row = r0 + r, tok = t0 + t;
    if (row < pc.M && tok < pc.n) {
      const float s = lane_sum(i), s2 = SWIGLU ? lane_sum(RT * TT + i) : 0.0;
      const float sq = NORMED ? tok_sq[t] : 0.0;
      matmul_store(tok * pc.y_stride + row, s, s2, sq, SWIGLU, NORMED);
    }
  }
}
