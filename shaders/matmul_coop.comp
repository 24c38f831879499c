#version 460
// Matmul on matrix units (MatmulPath::Coopmat) or its emulation (CoopmatEmulated): y[t][r] (+)= sum_k W[r][k] *
// x[t][k] for a tile of BM rows x BN tokens (WG = 2 BM lanes), with matmul.comp's modes (MODE_SWIGLU, MODE_RMSNORM,
// MODE_ACCUMULATE). Per step of BK = 32 weights, the workgroup dequantizes its rows' weights into shared
// memory and its tokens' x (times the norm weight under MODE_RMSNORM), both rounded to f16, then multiplies
// the two tiles with f32 accumulators: the COOPMAT_NV build (and the KHR build made from it:
// shaders/coop_types.glsl) with 16x16x16 f16 cooperative matrices, each subgroup of 32
// owning 16 rows; the default build (emulated) in plain arithmetic from the same shared tiles, thread i
// owning 4 rows x BN/8 tokens and adding the 32 products of a step in k order. Both end in the same store
// through shared memory and matmul_epilogue.glsl, so every index, bound, dequantization and epilogue of the
// matrix-unit kernel runs on every device the emulation runs on (lavapipe in CI).
//
// Batch invariance: the host runs every width of pass through this kernel, one token included (one valid
// column of BN = 16, in tiles of BM = 16 rows: a workgroup per 16 rows spreads a one-token pass over the
// device), and a (row, token) sum is made from that row's and that token's shared values in an order that
// depends on neither BM, BN, the other rows nor the other tokens (RMSNorm's sum of squares: per token, 4 lanes
// over fixed quarters of each step, added as (a + b) + (c + d)).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifdef COOPMAT_NV
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#endif
#include "common.glsl"
#include "contract.h"
#include "coop_types.glsl"
#include "weights.glsl"

#include "wtype.glsl"

layout(constant_id = 1) const uint BN = 32;         // tokens per workgroup: 16 or 32
layout(constant_id = 2) const uint GROUP = 32;      // quantized: weights per scale
layout(constant_id = 3) const bool HAS_MIN = false; // quantized: scales are {s, m} pairs
layout(constant_id = 4) const uint MODE = 0;        // MODE_SWIGLU | MODE_RMSNORM (MODE_ACCUMULATE stays in pc.mode)
const bool SWIGLU = (MODE & MODE_SWIGLU) != 0u, NORMED = (MODE & MODE_RMSNORM) != 0u;
layout(constant_id = 5) const uint BM = 64;         // rows per workgroup: 16 or COOP_ROWS (the host passes WG = 2 BM)
const uint BK = COOP_STEP;
const uint STRIDE = BK + 8u;                        // shared row stride in elements (16-byte rows, fewer bank conflicts)
const uint TOKEN_LANES = WG / (BM / 4u);            // emulation: lanes along the tokens (8: the host passes WG = 2 BM)

layout(push_constant) uniform PC { PC_MATMUL } pc;   // shaders/contract.h
#include "matmul_epilogue.glsl"

#ifdef COOPMAT_NV
#define SH_T float16_t
SH_T to_sh(float v) { return float16_t(v); }
#else
#define SH_T float
float to_sh(float v) { return unpackHalf2x16(packHalf2x16(vec2(v, 0.0))).x; }   // the value an f16 tile holds
#endif
shared SH_T sh_w[COOP_ROWS * STRIDE];               // sized for the largest BM (shared arrays take no spec-sized
shared SH_T sh_w2[SWIGLU ? COOP_ROWS * STRIDE : 1]; // length in every compiler)
shared SH_T sh_x[BN * STRIDE];
// The tile's sums, [row][token] (BM * BN <= BM * STRIDE): the emulation's f32 weight tiles hold them once
// read (lavapipe's 32 KiB of shared memory holds no more), the f16 ones cannot.
#ifdef COOPMAT_NV
shared float sh_out[COOP_ROWS * BN];
shared float sh_out2[SWIGLU ? COOP_ROWS * BN : 1];
#else
#define sh_out sh_w
#define sh_out2 sh_w2
#endif
shared float sh_sq[BN * 4u];                        // RMSNorm: each token's four quarter sums of x^2

// Rows r0 .. r0 + BM - 1, weights k0 .. k0 + BK - 1 of w -> sh (rows past M repeat the last; not stored).
void load_w_tile(uvec2 w, uvec2 scales, uint r0, uint k0, bool second) {
  const uint K4 = pc.K / 4u;
  for (uint i = gl_LocalInvocationID.x; i < BM * BK / 4u; i += WG) {
    const uint r = i / (BK / 4u), c4 = i % (BK / 4u);
    const uint row = min(r0 + r, pc.M - 1u);
    const vec4 v = load_w4(WTYPE, GROUP, HAS_MIN, w, scales, row * K4 + k0 / 4u + c4);
    const uint at = r * STRIDE + 4u * c4;
    [[unroll]] for (uint j = 0; j < 4u; ++j) {
      if (second) sh_w2[at + j] = to_sh(v[j]);
      else sh_w[at + j] = to_sh(v[j]);
    }
  }
}

void main() {
  const uint lane = gl_LocalInvocationID.x;
  const uint r0 = gl_WorkGroupID.x * BM, t0 = gl_WorkGroupID.y * BN;
  const uint xs4 = pc.x_stride / 4u;   // the host asks for K % BK == 0 and x_stride % 4 == 0

#ifdef COOPMAT_NV
  const uint sg = gl_SubgroupID;   // rows 16 sg .. 16 sg + 15 (the host asks for BM / 16 subgroups of 32)
  COOP_ACC acc[BN / 16u], acc2[BN / 16u];
  [[unroll]] for (uint j = 0; j < BN / 16u; ++j) {
    acc[j] = COOP_ACC(0.0);
    acc2[j] = COOP_ACC(0.0);
  }
#else
  const uint rg = lane % (BM / 4u), tl = lane / (BM / 4u);   // rows 4 rg .. 4 rg + 3, tokens tl, tl + 8, ...
  const uint TPL = BN / TOKEN_LANES;
  precise float acc[4 * (BN / TOKEN_LANES)];
  precise float acc2[4 * (BN / TOKEN_LANES)];
  [[unroll]] for (uint i = 0; i < 4u * TPL; ++i) { acc[i] = 0.0; acc2[i] = 0.0; }
#endif
  // RMSNorm: lane-owned quarter sums of x^2 (token i / 4, quarter i % 4, over every step)
  precise float sq[BN * 4u / 32u];   // at most BN * 4 / WG used (WG >= 32)
  [[unroll]] for (uint i = 0; i < BN * 4u / 32u; ++i) sq[i] = 0.0;

  for (uint k0 = 0; k0 < pc.K; k0 += BK) {
    barrier();   // the previous step's tiles are read
    load_w_tile(pc.w, pc.w_scales, r0, k0, false);
    if (SWIGLU) load_w_tile(pc.w2, pc.w2_scales, r0, k0, true);
    for (uint i = lane, n = 0; i < BN * 4u; i += WG, ++n) {   // token i / 4, its quarter i % 4 of the step (8 values)
      const uint t = i / 4u, q = i % 4u;
      const uint tok = min(t0 + t, pc.n - 1u);   // tokens past n repeat the last one (not stored)
      [[unroll]] for (uint h = 0; h < 2u; ++h) {
        const uint c4 = (k0 + 8u * q) / 4u + h;
        precise vec4 xv = Vec4s(pc.x).v[tok * xs4 + c4];
        if (NORMED) {
          sq[n] = dot4_acc(sq[n], xv, xv, false);
          xv *= Vec4s(pc.norm).v[c4];
        }
        [[unroll]] for (uint j = 0; j < 4u; ++j) sh_x[t * STRIDE + 8u * q + 4u * h + j] = to_sh(xv[j]);
      }
    }
    barrier();
#ifdef COOPMAT_NV
    [[unroll]] for (uint kc = 0; kc < BK; kc += 16u) {
      COOP_A a, a2;
      COOP_B b;
      coopMatLoadNV(a, sh_w, 16u * sg * STRIDE + kc, STRIDE, false);
      if (SWIGLU) coopMatLoadNV(a2, sh_w2, 16u * sg * STRIDE + kc, STRIDE, false);
      [[unroll]] for (uint j = 0; j < BN / 16u; ++j) {
        coopMatLoadNV(b, sh_x, 16u * j * STRIDE + kc, STRIDE, true);   // [k][token], tokens STRIDE apart
        acc[j] = coopMatMulAddNV(a, b, acc[j]);
        if (SWIGLU) acc2[j] = coopMatMulAddNV(a2, b, acc2[j]);
      }
    }
#else
    [[unroll]] for (uint k = 0; k < BK; ++k) {
      float xk[BN / TOKEN_LANES];
      [[unroll]] for (uint j = 0; j < TPL; ++j) xk[j] = float(sh_x[(tl + TOKEN_LANES * j) * STRIDE + k]);
      [[unroll]] for (uint r = 0; r < 4u; ++r) {
        const float wk = float(sh_w[(4u * rg + r) * STRIDE + k]);
        const float wk2 = SWIGLU ? float(sh_w2[(4u * rg + r) * STRIDE + k]) : 0.0;
        [[unroll]] for (uint j = 0; j < TPL; ++j) {
          acc[r * TPL + j] = dot1_acc(acc[r * TPL + j], wk, xk[j], true);
          if (SWIGLU) acc2[r * TPL + j] = dot1_acc(acc2[r * TPL + j], wk2, xk[j], true);
        }
      }
    }
#endif
  }

  barrier();   // every lane is done with the last step's tiles
#ifdef COOPMAT_NV
  [[unroll]] for (uint j = 0; j < BN / 16u; ++j) {
    coopMatStoreNV(acc[j], sh_out, 16u * sg * BN + 16u * j, BN, false);
    if (SWIGLU) coopMatStoreNV(acc2[j], sh_out2, 16u * sg * BN + 16u * j, BN, false);
  }
#else
  [[unroll]] for (uint r = 0; r < 4u; ++r)
    [[unroll]] for (uint j = 0; j < TPL; ++j) {
      sh_out[(4u * rg + r) * BN + tl + TOKEN_LANES * j] = acc[r * TPL + j];
      if (SWIGLU) sh_out2[(4u * rg + r) * BN + tl + TOKEN_LANES * j] = acc2[r * TPL + j];
    }
#endif
  if (NORMED)
    for (uint i = lane, n = 0; i < BN * 4u; i += WG, ++n) sh_sq[i] = sq[n];
  barrier();
  for (uint i = lane; i < BM * BN; i += WG) {
    const uint r = i / BN, t = i % BN, row = r0 + r, tok = t0 + t;
    if (row < pc.M && tok < pc.n) {
      precise float s = 0.0;
      if (NORMED) s = (sh_sq[4u * t] + sh_sq[4u * t + 1u]) + (sh_sq[4u * t + 2u] + sh_sq[4u * t + 3u]);
      matmul_store(tok * pc.y_stride + row, sh_out[i], SWIGLU ? sh_out2[i] : 0.0, s, SWIGLU, NORMED);
    }
  }
}
