#include "runtime/quant.h"

#include <cmath>
#include <cstring>

namespace vkspec {

float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
  if (exp == 0) {
    if (mant == 0) u = sign;
    else {   // subnormal: renormalize
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) { mant <<= 1; exp--; }
      u = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) u = sign | 0x7f800000 | (mant << 13);
  else u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  int32_t exp = int32_t((u >> 23) & 0xff) - 127 + 15;
  uint32_t mant = u & 0x7fffff;
  if (((u >> 23) & 0xff) == 0xff) return uint16_t(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31) return uint16_t(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return uint16_t(sign);
    mant |= 0x800000;
    uint32_t shift = uint32_t(14 - exp);
    uint32_t half = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return uint16_t(sign | half);
  }
  uint32_t half = sign | (uint32_t(exp) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
  return uint16_t(half);
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return uint16_t((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

void quantize_q8_0(const float* x, size_t n, uint8_t* blocks) {
  for (size_t b = 0; b < n / kQ8BlockElems; ++b) {
    const float* xb = x + b * kQ8BlockElems;
    float amax = 0;
    for (size_t i = 0; i < kQ8BlockElems; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
    uint8_t* out = blocks + b * kQ8BlockBytes;
    uint16_t dh = float_to_half(d);
    memcpy(out, &dh, 2);
    for (size_t i = 0; i < kQ8BlockElems; ++i) out[2 + i] = uint8_t(int8_t(std::lround(xb[i] * id)));
  }
}

void split_q8_0(const uint8_t* blocks, size_t n, int8_t* quants, float* scales) {
  for (size_t b = 0; b < n / kQ8BlockElems; ++b) {
    const uint8_t* in = blocks + b * kQ8BlockBytes;
    uint16_t dh;
    memcpy(&dh, in, 2);
    scales[b] = half_to_float(dh);
    memcpy(quants + b * kQ8BlockElems, in + 2, kQ8BlockElems);
  }
}

size_t gguf_tensor_bytes(uint32_t type_code, uint64_t elements) {
  switch (type_code) {
    case 0: return elements * 4;                                   // F32
    case 1: return elements * 2;                                   // F16
    case 30: return elements * 2;                                  // BF16
    case 8: return elements / kQ8BlockElems * kQ8BlockBytes;       // Q8_0
    default: return 0;
  }
}

}  // namespace vkspec
