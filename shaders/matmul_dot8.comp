#version 460
// Matmul of quantized weights by packed 8-bit integer dot products (MatmulPath::Int8Dot; OpSDot of
// VK_KHR_shader_integer_dot_product): y[t][r] (+)= sum_k W[r][k] * x[t][k] for a tile of RT rows x TT tokens,
// with MODE_SWIGLU (fused gate/up) and MODE_ACCUMULATE. x comes as quantize_x8.comp's DOT8 build wrote it
// (contract.h DOT8_BLOCK_UINTS: RMSNorm applied, per 32 values int8 q and a scale d); each weight block of 32
// is turned into the same byte order and multiplied four bytes per instruction, exactly, in integers.
//
// Per (row, token): lane l takes blocks l, l + WG, ... in ascending order and adds, per quant group of the
// block (one, or two for GROUP 16), float(integer dot) * (s * d) (+ m * d * sum of the group's q: a
// weight min) to its sum; the WG lane sums are added as tile_sums.glsl's pairwise tree. Neither depends on
// RT, TT or which tokens share the tile, and the host runs every width of pass through this kernel, one
// token included (batch invariance): a row's bits are the same alone, in a prompt chunk or in a batch.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_spirv_intrinsics : require
#include "common.glsl"
#include "contract.h"
#include "weights.glsl"

#include "wtype.glsl"

layout(constant_id = 1) const uint TT = 8;          // tokens per workgroup
layout(constant_id = 2) const uint RT = 4;          // rows per workgroup
layout(constant_id = 3) const uint GROUP = 32;      // weights per scale: 32 or 16
layout(constant_id = 4) const bool HAS_MIN = false; // scales are {s, m} pairs
layout(constant_id = 5) const uint MODE = 0;        // MODE_SWIGLU (MODE_ACCUMULATE stays in pc.mode)
const bool SWIGLU = (MODE & MODE_SWIGLU) != 0u;
const uint SUBS = X8_BLOCK / GROUP;                 // quant groups per block of 32
const uint UPS = 8u / SUBS;                         // uints of q per quant group

layout(push_constant) uniform PC { PC_MATMUL } pc;   // shaders/contract.h; x_stride in uints
#include "matmul_epilogue.glsl"
#include "tile_sums.glsl"

// OpSDot (4450) on two uints of four signed bytes each (operand 0: PackedVectorFormat4x8Bit). Debian 12's
// glslang has no GL_EXT_integer_dot_product, so the instruction is declared here.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot_packed(uint a, uint b, spirv_literal int packed_vector_format);
int dot4x8(uint a, uint b) { return sdot_packed(a, b, 0); }

// q6: bytes holding 6-bit quants u in 0..63 -> u - 32 as signed bytes: flip bit 5, then copy the new bit 5
// into bits 6 and 7 (no carry crosses a byte).
uint q6_signed(uint u) {
  const uint t = u ^ 0x20202020u, m = t & 0x20202020u;
  return t | (m << 1) | (m << 2);
}

// Block b (weights 32 b .. 32 b + 31) of row `row` of w as 8 uints of signed bytes in DOT8 order: per 8
// weights, the even ones, then the odd ones (K32 = blocks per row; weights.glsl has the layouts).
void weight_block(uvec2 w, uint row, uint b, uint K32, out uint q[8]) {
  const uint blk = row * K32 + b;
  if (WTYPE == WT_Q4) {   // 8 nibbles per uint, weight e at bits 4e
    [[unroll]] for (uint j = 0; j < 4u; ++j) {
      const uint u = Uints(w).v[blk * 4u + j];
      q[2u * j] = u & 0x0F0F0F0Fu;
      q[2u * j + 1u] = (u >> 4) & 0x0F0F0F0Fu;
    }
  } else if (WTYPE == WT_Q6) {   // a unit of 32: 4 uints of nibbles, 2 of high bits (weight g of a 16 at Q6_HIGH_SHIFT(g))
    [[unroll]] for (uint j = 0; j < 4u; ++j) {
      const uint n = Uints(w).v[blk * Q6_UNIT_UINTS + j];
      // weights 8j .. 8j+7: high bits of the even ones at 0, 4, 16, 20, of the odd ones at 2, 6, 18, 22
      const uint h = Uints(w).v[blk * Q6_UNIT_UINTS + Q6_HIGH_UINT + (j >> 1)] >> (8u * (j & 1u));
      q[2u * j] = q6_signed((n & 0x0F0F0F0Fu) | ((h & 0x00030003u) << 4) | ((h & 0x00300030u) << 8));
      q[2u * j + 1u] = q6_signed(((n >> 4) & 0x0F0F0F0Fu) | ((h & 0x000C000Cu) << 2) | ((h & 0x00C000C0u) << 6));
    }
  } else {   // WT_Q8: 4 int8 per uint in order; a pair (w0..w3), (w4..w7) -> (w0 w2 w4 w6), (w1 w3 w5 w7)
    [[unroll]] for (uint j = 0; j < 4u; ++j) {
      const uint a = Uints(w).v[blk * 8u + 2u * j], c = Uints(w).v[blk * 8u + 2u * j + 1u];
      [[unroll]] for (uint odd = 0; odd < 2u; ++odd) {
        const uint t = ((a >> (8u * odd)) & 0x00FF00FFu) | (((c >> (8u * odd)) & 0x00FF00FFu) << 8);   // bytes w0 w4 w2 w6
        q[2u * j + odd] = (t & 0xFF0000FFu) | ((t >> 8) & 0x0000FF00u) | ((t << 8) & 0x00FF0000u);
      }
    }
  }
}

// One block's contribution to a (row, token) sum: xq its q, xs its scale floats (contract.h X8_SCALE_TEXEL),
// sm[g] the weight groups' {s, m}.
float block_sum(uint q[8], uint xq[8], vec4 xs, vec2 sm0, vec2 sm1) {
  precise float v = 0.0;
  [[unroll]] for (uint g = 0; g < SUBS; ++g) {
    int d = 0;
    [[unroll]] for (uint j = 0; j < UPS; ++j) d += dot4x8(q[g * UPS + j], xq[g * UPS + j]);
    const vec2 sm = g == 0u ? sm0 : sm1;
    precise float p = float(d) * (sm.x * xs.x);
    if (HAS_MIN) p += sm.y * (SUBS == 1u ? xs.w : g == 0u ? xs.y : xs.z);
    v += p;
  }
  return v;
}

void main() {
  const uint lane = gl_LocalInvocationID.x;
  const uint r0 = gl_WorkGroupID.x * RT, t0 = gl_WorkGroupID.y * TT;
  const uint K32 = pc.K / X8_BLOCK, groups = pc.K / GROUP;   // the host asks for K % X8_BLOCK == 0

  precise float acc[RT * TT];
  precise float acc2[RT * TT];
  [[unroll]] for (uint i = 0; i < RT * TT; ++i) { acc[i] = 0.0; acc2[i] = 0.0; }

  for (uint b = lane; b < K32; b += WG) {
    uint xq[TT][8];
    vec4 xs[TT];
    [[unroll]] for (uint t = 0; t < TT; ++t) {
      const uint tok = min(t0 + t, pc.n - 1u);   // tokens past n repeat the last one (not stored)
      const uint at = tok * pc.x_stride + b * DOT8_BLOCK_UINTS;
      [[unroll]] for (uint j = 0; j < 8u; ++j) xq[t][j] = Uints(pc.x).v[at + j];
      xs[t] = Vec4s(pc.x).v[(at + DOT8_SCALES_AT) / 4u];
    }
    [[unroll]] for (uint r = 0; r < RT; ++r) {
      const uint row = min(r0 + r, pc.M - 1u);   // rows past M repeat the last one (not stored)
      const uint g0 = row * groups + b * SUBS;
      uint q[8], q2[8];
      weight_block(pc.w, row, b, K32, q);
      const vec2 a0 = group_scale(pc.w_scales, g0, HAS_MIN);
      const vec2 a1 = SUBS > 1u ? group_scale(pc.w_scales, g0 + 1u, HAS_MIN) : a0;
      vec2 c0 = a0, c1 = a1;
      if (SWIGLU) {
        weight_block(pc.w2, row, b, K32, q2);
        c0 = group_scale(pc.w2_scales, g0, HAS_MIN);
        c1 = SUBS > 1u ? group_scale(pc.w2_scales, g0 + 1u, HAS_MIN) : c0;
      }
      [[unroll]] for (uint t = 0; t < TT; ++t) {
        acc[r * TT + t] += block_sum(q, xq[t], xs[t], a0, a1);
        if (SWIGLU) acc2[r * TT + t] += block_sum(q2, xq[t], xs[t], c0, c1);
      }
    }
  }

  [[unroll]] for (uint i = 0; i < RT * TT; ++i) {
    put_partial(i, acc[i]);
    if (SWIGLU) put_partial(RT * TT + i, acc2[i]);
  }
  barrier();
  for (uint i = lane; i < RT * TT; i += WG) {
    const uint r = i / TT, t = i % TT, row = r0 + r, tok = t0 + t;
    if (row < pc.M && tok < pc.n) matmul_store(tok * pc.y_stride + row, lane_sum(i), SWIGLU ? lane_sum(RT * TT + i) : 0.0, 0.0, SWIGLU, false);
  }
}
