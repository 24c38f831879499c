#version 460
// x -> int8 activations for matmul_rows_q4_x8 / _q6_x8 / _q8_x8 (layout: shaders/contract.h X8_BLOCK) or, in the
// DOT8 build (quantize_dot8, x read through device addresses), for matmul_dot8 (contract.h DOT8_BLOCK_UINTS): per
// token, optional RMSNorm ((x * 1/sqrt(mean(x^2) + eps)) * norm, llama.cpp's order), then per block of 32 values
// d = max |v| / 127 and q = roundEven(v / d) (as v * (1 / d)), like llama.cpp's q8_0 activations.
// One workgroup (one subgroup: the host sets WG = the subgroup size) per token; lane i quantizes blocks
// i, i + WG, ... . A token's result depends on its own x only (batch invariance).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "contract.h"

layout(constant_id = 1) const bool NORMED = false;

#ifdef DOT8
layout(push_constant) uniform PC { PC_QUANTIZE_DOT8 } pc;   // shaders/contract.h
vec4 xv(uint t4) { return Vec4s(pc.x).v[t4]; }
vec4 gv(uint t4) { return Vec4s(pc.norm).v[t4]; }
uint x_row(uint tok) { return tok * (pc.x_stride / 4u); }   // the token's first vec4 of x
#else
layout(set = 0, binding = 0) uniform usamplerBuffer X;   // block holding x
layout(set = 0, binding = 1) uniform usamplerBuffer G;   // block holding the norm weight (NORMED only)

layout(push_constant) uniform PC { PC_QUANTIZE_X8 } pc;   // shaders/contract.h

vec4 xv(uint t4) { return uintBitsToFloat(texelFetch(X, int(t4))); }
vec4 gv(uint t4) { return uintBitsToFloat(texelFetch(G, int(pc.norm + t4))); }
uint x_row(uint tok) { return pc.x + tok * (pc.x_stride / 4u); }
#endif
uint bytes4(int a, int b, int c, int d) { return uint(a & 255) | uint(b & 255) << 8 | uint(c & 255) << 16 | uint(d & 255) << 24; }
float amax4(vec4 v) { const vec4 a = abs(v); return max(max(a.x, a.y), max(a.z, a.w)); }

void main() {
  const uint tok = gl_WorkGroupID.x, lane = gl_LocalInvocationID.x;
  const uint x0 = x_row(tok), k4 = pc.K / 4u, blocks = pc.K / X8_BLOCK;
  precise float scale = 1.0;
  if (NORMED) {
    precise float ss = 0.0;
    for (uint i = lane; i < k4; i += WG) {
      const vec4 v = xv(x0 + i);
      ss += dot(v, v);
    }
    scale = 1.0 / sqrt(subgroupAdd(ss) / float(pc.K) + pc.eps);
  }
  for (uint b = lane; b < blocks; b += WG) {
    vec4 v[8];   // the block's 32 values (constant indices after unrolling: registers)
    float amax = 0.0;
    [[unroll]] for (uint i = 0; i < 8u; ++i) {
      precise vec4 x = xv(x0 + b * 8u + i);
      if (NORMED) x = (x * scale) * gv(b * 8u + i);
      v[i] = x;
      amax = max(amax, amax4(x));
    }
    const float d = amax / 127.0, id = d > 0.0 ? 1.0 / d : 0.0;
    ivec4 q[8];
    [[unroll]] for (uint i = 0; i < 8u; ++i) q[i] = ivec4(roundEven(v[i] * id));
#ifdef DOT8
    // values 8j .. 8j+7 = q[2j], q[2j+1]: their even ones, then their odd ones
    const uint o = tok * DOT8_ROW_UINTS(pc.K) + b * DOT8_BLOCK_UINTS;
    [[unroll]] for (uint j = 0; j < 4u; ++j) {
      const ivec4 a = q[2u * j], c = q[2u * j + 1u];
      Uints(pc.out_).v[o + 2u * j] = bytes4(a.x, a.z, c.x, c.z);
      Uints(pc.out_).v[o + 2u * j + 1u] = bytes4(a.y, a.w, c.y, c.w);
    }
    const uint f = o + DOT8_SCALES_AT;
#else
    // chunk c = q[4c .. 4c+3]; texel 2c+h pairs q[4c+2h+1] (low half) with q[4c+2h] (high half)
    const uint o = (tok * X8_ROW_TEXELS(pc.K) + b * X8_BLOCK_TEXELS) * 4u;   // the block's first uint
    [[unroll]] for (uint t = 0; t < 4u; ++t) {
      const ivec4 pairs = q[2u * t + 1u] + q[2u * t] * 65536;
      [[unroll]] for (uint i = 0; i < 4u; ++i) Uints(pc.out_).v[o + 4u * t + i] = uint(pairs[i]);
    }
    const uint f = o + 4u * X8_SCALE_TEXEL;
#endif
    const ivec4 v0 = q[0] + q[1] + q[2] + q[3], v1 = q[4] + q[5] + q[6] + q[7];
    const int s0 = v0.x + v0.y + v0.z + v0.w, s1 = v1.x + v1.y + v1.z + v1.w;   // each chunk's sum of q
    Floats(pc.out_).v[f] = d;
    Floats(pc.out_).v[f + 1u] = d * float(s0);
    Floats(pc.out_).v[f + 2u] = d * float(s1);
    Floats(pc.out_).v[f + 3u] = d * float(s0 + s1);
  }
}
