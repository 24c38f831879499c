#pragma once
// The tests' own dequantizer for GGUF's block types, written from the block layouts in ggml-common.h and the
// loops of ggml-quants.c (dequantize_row_*), independently of core/quant.cpp's decoder; and random blocks
// of every type (any bit pattern is a valid block; the f16 scales are kept finite and moderate); and the
// int8 activations of the q4 row kernel.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/quant.h"

namespace vkspec::test {

inline float f16(const uint8_t* p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return half_to_float(h);
}

// ggml-quants.c get_scale_min_k4
inline void ref_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

// One block of `t` at `x` into y[block elems], as ggml's dequantize_row_<t> computes it.
inline void ref_dequantize_block(DType t, const uint8_t* x, float* y) {
  switch (t) {
    case DType::Q8_0: {
      const float d = f16(x);
      for (int j = 0; j < 32; ++j) y[j] = float(int8_t(x[2 + j])) * d;
      break;
    }
    case DType::Q4_0: case DType::Q4_1: {
      const bool one = t == DType::Q4_1;
      const float d = f16(x), m = one ? f16(x + 2) : 0;
      const uint8_t* qs = x + (one ? 4 : 2);
      for (int j = 0; j < 16; ++j) {
        const int x0 = (qs[j] & 0x0F) - (one ? 0 : 8), x1 = (qs[j] >> 4) - (one ? 0 : 8);
        y[j] = one ? x0 * d + m : x0 * d;
        y[j + 16] = one ? x1 * d + m : x1 * d;
      }
      break;
    }
    case DType::Q5_0: case DType::Q5_1: {
      const bool one = t == DType::Q5_1;
      const float d = f16(x), m = one ? f16(x + 2) : 0;
      uint32_t qh;
      memcpy(&qh, x + (one ? 4 : 2), 4);
      const uint8_t* qs = x + (one ? 8 : 6);
      for (int j = 0; j < 16; ++j) {
        const uint8_t xh_0 = uint8_t(((qh >> (j + 0)) << 4) & 0x10);
        const uint8_t xh_1 = uint8_t(((qh >> (j + 12))) & 0x10);
        const int x0 = ((qs[j] & 0x0F) | xh_0) - (one ? 0 : 16), x1 = ((qs[j] >> 4) | xh_1) - (one ? 0 : 16);
        y[j] = one ? x0 * d + m : x0 * d;
        y[j + 16] = one ? x1 * d + m : x1 * d;
      }
      break;
    }
    case DType::Q2_K: {
      const float d = f16(x + 80), min = f16(x + 82);
      const uint8_t* q = x + 16;
      int is = 0;
      for (int n = 0; n < 256; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; ++j) {
          uint8_t sc = x[is++];
          float dl = d * (sc & 0xF), ml = min * (sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * (int8_t)((q[l] >> shift) & 3) - ml;
          sc = x[is++];
          dl = d * (sc & 0xF), ml = min * (sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * (int8_t)((q[l + 16] >> shift) & 3) - ml;
          shift += 2;
        }
        q += 32;
      }
      break;
    }
    case DType::Q3_K: {
      const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
      uint32_t aux[4];
      const int8_t* scales = reinterpret_cast<const int8_t*>(aux);
      const float d_all = f16(x + 108);
      const uint8_t* q = x + 32;
      const uint8_t* hm = x;
      uint8_t m = 1;
      memcpy(aux, x + 96, 12);
      const uint32_t tmp = aux[2];
      aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
      aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
      aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
      aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
      int is = 0;
      for (int n = 0; n < 256; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; ++j) {
          float dl = d_all * (scales[is++] - 32);
          for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l + 0] >> shift) & 3) - ((hm[l + 0] & m) ? 0 : 4));
          dl = d_all * (scales[is++] - 32);
          for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
          shift += 2;
          m <<= 1;
        }
        q += 32;
      }
      break;
    }
    case DType::Q4_K: case DType::Q5_K: {
      const bool five = t == DType::Q5_K;
      const float d = f16(x), min = f16(x + 2);
      const uint8_t* scales = x + 4;
      const uint8_t* qh = x + 16;
      const uint8_t* q = x + (five ? 48 : 16);
      int is = 0;
      uint8_t sc, m, u1 = 1, u2 = 2;
      for (int j = 0; j < 256; j += 64) {
        ref_scale_min_k4(is + 0, scales, &sc, &m);
        const float d1 = d * sc, m1 = min * m;
        ref_scale_min_k4(is + 1, scales, &sc, &m);
        const float d2 = d * sc, m2 = min * m;
        for (int l = 0; l < 32; ++l) *y++ = d1 * ((q[l] & 0xF) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; ++l) *y++ = d2 * ((q[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
        q += 32;
        is += 2;
        u1 <<= 2;
        u2 <<= 2;
      }
      break;
    }
    case DType::Q6_K: {
      const float d = f16(x + 208);
      const uint8_t* ql = x;
      const uint8_t* qh = x + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(x + 192);
      for (int n = 0; n < 256; n += 128) {
        for (int l = 0; l < 32; ++l) {
          const int is = l / 16;
          const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
          const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
          const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          y[l + 0] = d * sc[is + 0] * q1;
          y[l + 32] = d * sc[is + 2] * q2;
          y[l + 64] = d * sc[is + 4] * q3;
          y[l + 96] = d * sc[is + 6] * q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
      }
      break;
    }
    default: break;
  }
}

// x as the int8-activation matmul multiplies it (shaders/quantize_x8.comp, written here from its contract):
// per 32 values d = max |v| / 127, q = roundEven(v * (1 / d)), value d * q; all in f32. max_d (when given)
// gets the largest d.
inline std::vector<float> ref_int8_activations(const std::vector<float>& x, float* max_d = nullptr) {
  std::vector<float> y(x.size());
  for (size_t b = 0; b + 32 <= x.size(); b += 32) {
    float amax = 0;
    for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b + i]));
    const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    for (size_t i = 0; i < 32; ++i) y[b + i] = d * std::nearbyint(x[b + i] * id);   // default rounding: to even
    if (max_d) *max_d = std::max(*max_d, d);
  }
  return y;
}

inline std::vector<float> ref_dequantize(DType t, const uint8_t* x, size_t n) {
  const BlockLayout L = block_layout(t);
  std::vector<float> y(n);
  for (size_t b = 0; b < n / L.elems; ++b) ref_dequantize_block(t, x + b * L.bytes, y.data() + b * L.elems);
  return y;
}

// Offsets of the f16 fields in a block of `t` (they get finite values of a plausible size).
inline std::vector<int> f16_fields(DType t) {
  switch (t) {
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: return {0};
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: return {0, 2};
    case DType::Q2_K: return {80, 82};
    case DType::Q3_K: return {108};
    case DType::Q6_K: return {208};
    default: return {};
  }
}

// `n` weights (whole blocks) of random blocks of type `t`: random quants and sub-scales, f16 scales of
// magnitude ~2^-10..2^-4 (either sign for d, as real files have).
inline std::vector<uint8_t> random_blocks(DType t, size_t n, uint32_t seed) {
  const BlockLayout L = block_layout(t);
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n / L.elems * L.bytes);
  for (auto& v : b) v = uint8_t(rng());
  std::uniform_real_distribution<float> mag(1.0f / 1024, 1.0f / 16);
  for (size_t blk = 0; blk < n / L.elems; ++blk)
    for (int off : f16_fields(t)) {
      const float v = mag(rng) * ((rng() & 1) ? -1.0f : 1.0f);
      const uint16_t h = float_to_half(v);
      memcpy(&b[blk * L.bytes + off], &h, 2);
    }
  return b;
}

}  // namespace vkspec::test
