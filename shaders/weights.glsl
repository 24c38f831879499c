// Weight element loads for every device weight format (core/quant.h WeightFormat). Per row of K weights:
//   f32  : K floats            f16/bf16 : K halves (read as uint pairs)
//   q8   : K int8 quants (4 per uint)                   \  + per GROUP weights a float scale s, or a vec2
//   q4   : K unsigned 4-bit quants (8 per uint)          |   {s, m} when HAS_MIN, in a separate plane:
//   q6   : K 6-bit quants u = q + 32 (q in [-32, 31])   /    w = s * q + m
// q6 is laid out in units of 32 weights (6 uints, over the matrix's weights in row-major order, so any K
// that is a multiple of 32): uints 0-3 the low nibbles (weight e of the unit in uint e / 8, bits 4 (e % 8)),
// uints 4 and 5 the high two bits of weights 0-15 and 16-31, weight g of such a 16 at bit Q6_HIGH_SHIFT(g)
// (contract.h).
// That order puts the high bits of weights i and i + 4 16 bits apart, as their nibbles are, so that
// matmul_rows.comp's int8 path takes a pair of 6-bit quants with the same shifts and masks as a pair of
// nibbles.
// GGUF's quantized blocks (q4_0 ... q6_K) are repacked into q8/q6/q4 at upload with values identical to
// llama.cpp's dequantization (core/quant.cpp); the repacked rows are 4-byte aligned so one uint load
// gives four (q8) or eight (q4) quants.
#include "contract.h"   // WT_* codes

vec2 bf16x2(uint u) { return vec2(uintBitsToFloat(u << 16), uintBitsToFloat(u & 0xffff0000u)); }
vec4 q8x4(uint u) {
  return vec4(bitfieldExtract(int(u), 0, 8), bitfieldExtract(int(u), 8, 8),
              bitfieldExtract(int(u), 16, 8), bitfieldExtract(int(u), 24, 8));
}
// the four 4-bit quants in the low 16 bits of u
vec4 q4x4(uint u) { return vec4(u & 15u, (u >> 4) & 15u, (u >> 8) & 15u, (u >> 12) & 15u); }

// q6: four quants q from their nibbles (the low 16 bits of lo) and high bits (the low 8 bits of hi)
vec4 q6x4_bits(uint lo, uint hi) {
  const uvec4 u = (uvec4(lo, lo >> 4, lo >> 8, lo >> 12) & 15u) | ((uvec4(hi, hi >> 2, hi >> 4, hi >> 6) & 3u) << 4);
  return vec4(ivec4(u) - 32);
}
// q6: the four quants of weights 4 i4 .. 4 i4 + 3 of the matrix
vec4 q6x4(uvec2 w, uint i4) {
  const uint per = Q6_UNIT_WEIGHTS / 4u;   // groups of four per unit
  const uint unit = Q6_UNIT_UINTS * (i4 / per), f = (i4 % per) * 4u;   // f: the first weight's index in its unit
  return q6x4_bits(Uints(w).v[unit + (f >> 3)] >> (16u * ((f >> 2) & 1u)),
                   Uints(w).v[unit + Q6_HIGH_UINT + (f >> 4)] >> Q6_HIGH_SHIFT(f & 15u));
}
float q6x1(uvec2 w, uint i) {
  const uint unit = Q6_UNIT_UINTS * (i / Q6_UNIT_WEIGHTS), f = i % Q6_UNIT_WEIGHTS;
  const uint lo = (Uints(w).v[unit + (f >> 3)] >> (4u * (f & 7u))) & 15u;
  const uint hi = (Uints(w).v[unit + Q6_HIGH_UINT + (f >> 4)] >> Q6_HIGH_SHIFT(f & 15u)) & 3u;
  return float(int(lo | (hi << 4)) - 32);
}

// {s, m} of quant group g
vec2 group_scale(uvec2 scales, uint g, bool has_min) {
  return has_min ? Vec2s(scales).v[g] : vec2(Floats(scales).v[g], 0.0);
}

// 4 consecutive weights starting at element 4*i4 of a row-major [rows][K] tensor (needs K % 4 == 0).
vec4 load_w4(uint wt, uint group, bool has_min, uvec2 w, uvec2 scales, uint i4) {
  if (wt == WT_F32) return Vec4s(w).v[i4];
  if (wt == WT_F16) { uvec2 u = Uvec2s(w).v[i4]; return vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y)); }
  if (wt == WT_BF16) { uvec2 u = Uvec2s(w).v[i4]; return vec4(bf16x2(u.x), bf16x2(u.y)); }
  const vec4 q = wt == WT_Q8 ? q8x4(Uints(w).v[i4])
                 : wt == WT_Q6 ? q6x4(w, i4) : q4x4(Uints(w).v[i4 >> 1] >> (16u * (i4 & 1u)));
  const vec2 sm = group_scale(scales, 4u * i4 / group, has_min);
  precise vec4 v = q * sm.x + sm.y;   // never fused differently in two kernels that must agree (matmul, matmul_tile)
  return v;
}

// One weight at element index i (any K).
float load_w1(uint wt, uint group, bool has_min, uvec2 w, uvec2 scales, uint i) {
  if (wt == WT_F32) return Floats(w).v[i];
  const uint u = wt == WT_Q6 ? 0u : Uints(w).v[i >> (wt == WT_Q8 ? 2 : wt == WT_Q4 ? 3 : 1)];
  if (wt == WT_F16) { vec2 h = unpackHalf2x16(u); return (i & 1u) == 0u ? h.x : h.y; }
  if (wt == WT_BF16) { vec2 h = bf16x2(u); return (i & 1u) == 0u ? h.x : h.y; }
  const float q = wt == WT_Q8 ? float(bitfieldExtract(int(u), int(8u * (i & 3u)), 8))
                  : wt == WT_Q6 ? q6x1(w, i) : float(bitfieldExtract(u, int(4u * (i & 7u)), 4));
  const vec2 sm = group_scale(scales, i / group, has_min);
  precise float v = q * sm.x + sm.y;
  return v;
}
