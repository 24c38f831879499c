// Weight element loads for every supported storage type. Layouts (per row of K elements):
//   f32  : K floats            f16/bf16 : K halves (read as uint pairs)
//   q8_0 : K int8 quants (4 per uint) + K/32 float scales in a separate plane. GGUF's q8_0 block
//          {f16 d; int8 q[32]} is repacked at upload (runtime/model.cpp) so rows are 4-byte aligned and
//          one uint load gives four quants; value = d * q exactly as in GGUF.
#include "contract.h"   // WT_* codes

vec2 bf16x2(uint u) { return vec2(uintBitsToFloat(u << 16), uintBitsToFloat(u & 0xffff0000u)); }
vec4 q8x4(uint u) {
  return vec4(bitfieldExtract(int(u), 0, 8), bitfieldExtract(int(u), 8, 8),
              bitfieldExtract(int(u), 16, 8), bitfieldExtract(int(u), 24, 8));
}

// 4 consecutive weights starting at element 4*i4 of a row-major [rows][K] tensor (needs K % 4 == 0).
vec4 load_w4(uint wt, uvec2 w, uvec2 scales, uint i4, uint K) {
  if (wt == WT_F32) return Vec4s(w).v[i4];
  if (wt == WT_F16) { uvec2 u = Uvec2s(w).v[i4]; return vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y)); }
  if (wt == WT_BF16) { uvec2 u = Uvec2s(w).v[i4]; return vec4(bf16x2(u.x), bf16x2(u.y)); }
  return q8x4(Uints(w).v[i4]) * Floats(scales).v[i4 >> 3];   // 8 uints = one 32-quant block
}

// One weight at element index i (any K).
float load_w1(uint wt, uvec2 w, uvec2 scales, uint i) {
  if (wt == WT_F32) return Floats(w).v[i];
  uint u = Uints(w).v[i >> 1];
  if (wt == WT_F16) { vec2 h = unpackHalf2x16(u); return (i & 1u) == 0u ? h.x : h.y; }
  if (wt == WT_BF16) { vec2 h = bf16x2(u); return (i & 1u) == 0u ? h.x : h.y; }
  return float(bitfieldExtract(int(Uints(w).v[i >> 2]), int(8u * (i & 3u)), 8)) * Floats(scales).v[i >> 5];
}
