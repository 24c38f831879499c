#include "core/quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

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

BlockLayout block_layout(uint32_t code) {
  switch (DType(code)) {
    case DType::F32: return {1, 4};
    case DType::F16: case DType::BF16: return {1, 2};
    case DType::Q4_0: return {32, 18};    // {f16 d; u8 qs[16]}
    case DType::Q4_1: return {32, 20};    // {f16 d; f16 m; u8 qs[16]}
    case DType::Q5_0: return {32, 22};    // {f16 d; u8 qh[4]; u8 qs[16]}
    case DType::Q5_1: return {32, 24};    // {f16 d; f16 m; u8 qh[4]; u8 qs[16]}
    case DType::Q8_0: return {32, 34};    // {f16 d; i8 qs[32]}
    case DType::Q2_K: return {256, 84};   // {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}
    case DType::Q3_K: return {256, 110};  // {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}
    case DType::Q4_K: return {256, 144};  // {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}
    case DType::Q5_K: return {256, 176};  // {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}
    case DType::Q6_K: return {256, 210};  // {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}
  }
  return {0, 0};
}

size_t gguf_tensor_bytes(uint32_t code, uint64_t elements) {
  const BlockLayout b = block_layout(code);
  if (b.elems == 0 || elements % b.elems) return 0;
  return elements / b.elems * b.bytes;
}

WeightFormat native_format(DType t) {
  switch (t) {
    case DType::F32: return {WT_F32, 0, false};
    case DType::F16: return {WT_F16, 0, false};
    case DType::BF16: return {WT_BF16, 0, false};
    case DType::Q8_0: return {WT_Q8, 32, false};
    // 5- and 6-bit quants in 6 bits: 0.75 bytes per weight instead of 1, and pairs of them in one 32-bit
    // product in matmul_rows.comp's int8 path, as nibbles are
    case DType::Q5_0: return {WT_Q6, 32, false};
    case DType::Q5_1: case DType::Q5_K: return {WT_Q6, 32, true};
    case DType::Q6_K: return {WT_Q6, 16, false};
    case DType::Q4_0: case DType::Q4_1: case DType::Q4_K: return {WT_Q4, 32, true};
    case DType::Q2_K: case DType::Q3_K: return {WT_Q4, 16, true};
  }
  throw Error("internal: no weight format for type " + std::to_string(uint32_t(t)));
}

uint64_t device_bytes(DType t, uint64_t elements) {
  const WeightFormat f = native_format(t);
  if (!f.quantized()) return elements * block_layout(t).bytes;
  return f.data_bytes(elements) + f.scale_floats(elements) * 4;
}

WeightFormat common_format(const WeightFormat& a, const WeightFormat& b) {
  if (!a.quantized() || !b.quantized()) throw Error("internal: common_format of a float type");
  // every Q4 quant (0..15) fits Q6 (-32..31), every Q6 quant Q8
  const uint32_t storage = a.storage == WT_Q8 || b.storage == WT_Q8   ? uint32_t(WT_Q8)
                           : a.storage == WT_Q6 || b.storage == WT_Q6 ? uint32_t(WT_Q6)
                                                                      : uint32_t(WT_Q4);
  return {storage, std::min(a.group, b.group), a.has_min || b.has_min};
}

namespace {
float f16_at(const uint8_t* p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return half_to_float(h);
}

// q4_K / q5_K: eight 6-bit (scale, min) pairs packed in 12 bytes (ggml-quants.c get_scale_min_k4).
void scale_min_k4(int j, const uint8_t* q, uint8_t& sc, uint8_t& mn) {
  if (j < 4) {
    sc = q[j] & 63;
    mn = q[j + 4] & 63;
  } else {
    sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    mn = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// One block of `t` into q[block elems] and s, m per 16 weights. Why the values are exact: d is an f16
// (11 significant bits); sub-block scales have at most 6 bits (q6_K: 8), quants at most 5 bits, so every
// product s * q below fits f32's 24 bits except q6_K's, which llama.cpp rounds identically; the added
// minimum is the one llama.cpp subtracts (q4_0/q3_K: the offset folded in, exact because the result is
// representable).
void decode_block(DType t, const uint8_t* b, int8_t* q, float* s, float* m) {
  switch (t) {
    case DType::Q8_0: {
      const float d = f16_at(b);
      for (int i = 0; i < 32; ++i) q[i] = int8_t(b[2 + i]);
      s[0] = s[1] = d, m[0] = m[1] = 0;
      break;
    }
    case DType::Q4_0: case DType::Q4_1: {   // weight j: low nibble of qs[j], j + 16: high nibble
      const bool q41 = t == DType::Q4_1;
      const float d = f16_at(b), mn = q41 ? f16_at(b + 2) : -8 * d;
      const uint8_t* qs = b + (q41 ? 4 : 2);
      for (int j = 0; j < 16; ++j) q[j] = int8_t(qs[j] & 0xF), q[j + 16] = int8_t(qs[j] >> 4);
      s[0] = s[1] = d, m[0] = m[1] = mn;
      break;
    }
    case DType::Q5_0: case DType::Q5_1: {   // the fifth bit of weight j is bit j of qh
      const bool q51 = t == DType::Q5_1;
      const float d = f16_at(b), mn = q51 ? f16_at(b + 2) : 0.0f;
      uint32_t qh;
      memcpy(&qh, b + (q51 ? 4 : 2), 4);
      const uint8_t* qs = b + (q51 ? 8 : 6);
      const int off = q51 ? 0 : 16;
      for (int j = 0; j < 16; ++j) {
        q[j] = int8_t(((qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - off);
        q[j + 16] = int8_t(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - off);
      }
      s[0] = s[1] = d, m[0] = m[1] = mn;
      break;
    }
    case DType::Q2_K: {   // 16 sub-blocks of 16; 2-bit quants, four per byte across 32-byte groups
      const float d = f16_at(b + 80), dmin = f16_at(b + 82);
      const uint8_t* sc = b;
      for (int half = 0; half < 2; ++half)   // weight e = 128 half + 32 j + l
        for (int j = 0; j < 4; ++j)
          for (int l = 0; l < 32; ++l) q[128 * half + 32 * j + l] = int8_t((b[16 + half * 32 + l] >> (2 * j)) & 3);
      for (int g = 0; g < 16; ++g) s[g] = d * float(sc[g] & 0xF), m[g] = -(dmin * float(sc[g] >> 4));
      break;
    }
    case DType::Q3_K: {   // 2 low bits as q2_K, the third from hmask (set: +0, clear: -4); 6-bit signed scales
      const float d = f16_at(b + 108);
      const uint8_t* hm = b;
      const uint8_t* qs = b + 32;
      const uint8_t* sc = b + 96;
      for (int half = 0; half < 2; ++half)   // weight e = 128 half + 32 j + l
        for (int j = 0; j < 4; ++j)
          for (int l = 0; l < 32; ++l) {
            const int lo = (qs[half * 32 + l] >> (2 * j)) & 3, hi = (hm[l] >> (half * 4 + j)) & 1;
            q[128 * half + 32 * j + l] = int8_t(lo + 4 * hi);   // stored as q + 4 (0..7): the -4 goes into m
          }
      for (int g = 0; g < 16; ++g) {
        const int low = g < 8 ? sc[g] & 0xF : sc[g - 8] >> 4, high = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
        const float dl = d * float((low | (high << 4)) - 32);
        s[g] = dl, m[g] = -4 * dl;
      }
      break;
    }
    case DType::Q4_K: case DType::Q5_K: {   // 8 sub-blocks of 32 with 6-bit scales and mins
      const bool q5 = t == DType::Q5_K;
      const float d = f16_at(b), dmin = f16_at(b + 2);
      const uint8_t* scales = b + 4;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (q5 ? 48 : 16);
      for (int pair = 0; pair < 4; ++pair)   // weight 64 pair + l: low nibble of qs[32 pair + l], + 32: high
        for (int l = 0; l < 32; ++l) {
          const int byte = qs[pair * 32 + l];
          const int h = q5 ? qh[l] >> (2 * pair) : 0;
          q[64 * pair + l] = int8_t((byte & 0xF) | ((h & 1) << 4));
          q[64 * pair + 32 + l] = int8_t((byte >> 4) | ((h & 2) << 3));
        }
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, mn;
        scale_min_k4(j, scales, sc, mn);
        s[2 * j] = s[2 * j + 1] = d * float(sc);
        m[2 * j] = m[2 * j + 1] = -(dmin * float(mn));
      }
      break;
    }
    case DType::Q6_K: {   // 4 low bits in ql, 2 high in qh, minus 32; 16 int8 scales
      const float d = f16_at(b + 208);
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
      for (int half = 0; half < 2; ++half)   // weight e = 128 half + 32 j + l
        for (int j = 0; j < 4; ++j)
          for (int l = 0; l < 32; ++l) {
            const int lo = (ql[half * 64 + (j & 1) * 32 + l] >> (4 * (j >> 1))) & 0xF;
            const int hi = (qh[half * 32 + l] >> (2 * j)) & 3;
            q[128 * half + 32 * j + l] = int8_t((lo | (hi << 4)) - 32);
          }
      for (int g = 0; g < 16; ++g) s[g] = d * float(sc[g]), m[g] = 0;
      break;
    }
    default: throw Error(std::string("internal: decode_quant of ") + dtype_name(t));
  }
}
}  // namespace

void decode_quant(DType t, const uint8_t* blocks, size_t n, int8_t* q, float* s, float* m) {
  const BlockLayout L = block_layout(t);
  for (size_t blk = 0; blk < n / L.elems; ++blk) {
    const size_t e = blk * L.elems;
    decode_block(t, blocks + blk * L.bytes, q + e, s + e / kCanonicalGroup, m + e / kCanonicalGroup);
  }
}

namespace {
// repack_quant over blocks [first, last)
void repack_blocks(DType t, const WeightFormat& f, const uint8_t* blocks, size_t first, size_t last, uint8_t* data,
                   float* scales) {
  const BlockLayout L = block_layout(t);
  const bool q4 = f.storage == WT_Q4, q6 = f.storage == WT_Q6;
  const size_t per = f.group / kCanonicalGroup, stride = f.has_min ? 2 : 1;
  int8_t q[256];
  float s[16], m[16];
  for (size_t blk = first; blk < last; ++blk) {
    decode_block(t, blocks + blk * L.bytes, q, s, m);
    const size_t e0 = blk * L.elems;
    if (q4) {
      // Into a local buffer, copied out after: stores through `data` (a byte pointer) would otherwise have to
      // stay ordered with the loads of q. high: any bit above the nibbles, tested once after the loop.
      uint8_t packed[sizeof q / 2], high = 0;
      for (uint32_t i = 0; i < L.elems / 2; ++i) {
        high |= uint8_t(q[2 * i] | q[2 * i + 1]);
        packed[i] = uint8_t(q[2 * i] | (q[2 * i + 1] << 4));
      }
      if (high & 0xF0) throw Error("internal: a quant does not fit 4 bits");
      memcpy(data + e0 / 2, packed, L.elems / 2);
    } else if (q6) {   // per unit of 32 weights: 4 uints of nibbles, 2 of high bits (shaders/weights.glsl)
      for (uint32_t u0 = 0; u0 < L.elems; u0 += contract::Q6_UNIT_WEIGHTS) {
        // Each word is built in a register by a loop of constant trip count and shifts (unrolled; a loop
        // over the 32 weights updating words[e / 8] in memory was the hottest loop of a Q4_K_M model's load).
        static_assert(contract::Q6_HIGH_UINT * 8 == contract::Q6_UNIT_WEIGHTS &&
                          (contract::Q6_UNIT_UINTS - contract::Q6_HIGH_UINT) * 16 == contract::Q6_UNIT_WEIGHTS,
                      "the loops below write every word of a unit");
        const int8_t* qu = q + u0;
        uint32_t words[contract::Q6_UNIT_UINTS], outside = 0;   // outside: any bit of a q + 32 outside 0..63
        for (uint32_t k = 0; k < contract::Q6_HIGH_UINT; ++k) {   // nibbles of weights 8 k .. 8 k + 7
          uint32_t w = 0;
          for (uint32_t e = 0; e < 8; ++e) {
            const uint32_t v = uint32_t(qu[8 * k + e] + 32);
            outside |= v;
            w |= (v & 15) << (4 * e);
          }
          words[k] = w;
        }
        if (outside & ~63u) throw Error("internal: a quant does not fit 6 bits");
        for (uint32_t h = 0; h < contract::Q6_UNIT_UINTS - contract::Q6_HIGH_UINT; ++h) {   // high bits, 16 each
          uint32_t w = 0;
          for (uint32_t g = 0; g < 16; ++g) w |= (uint32_t(qu[16 * h + g] + 32) >> 4) << Q6_HIGH_SHIFT(g);
          words[contract::Q6_HIGH_UINT + h] = w;
        }
        static_assert(std::endian::native == std::endian::little, "device uints are little-endian");
        memcpy(data + f.data_bytes(e0 + u0), words, sizeof words);
      }
    } else {
      memcpy(data + e0, q, L.elems);
    }
    float* sc = scales + e0 / f.group * stride;
    for (uint32_t g = 0; g < L.elems / f.group; ++g) {
      for (size_t k = 0; k < per; ++k)   // (NaN compares unequal: said for what it is, not as a mismatch)
        if (!std::isfinite(s[g * per + k]) || !std::isfinite(m[g * per + k]))
          throw Error("a block's scale is not a finite number (NaN or infinity): the tensor's data is damaged");
      for (size_t k = 1; k < per; ++k)   // a wider group is only valid when its canonical groups agree
        if (s[g * per + k] != s[g * per] || m[g * per + k] != m[g * per])
          throw Error("internal: scales differ inside a group");
      if (!f.has_min && m[g * per] != 0) throw Error("internal: a minimum in a format without one");
      sc[g * stride] = s[g * per];
      if (f.has_min) sc[g * stride + 1] = m[g * per];
    }
  }
}
}  // namespace

void repack_quant(DType t, const WeightFormat& f, const uint8_t* blocks, size_t n, uint8_t* data, float* scales) {
  const BlockLayout L = block_layout(t);
  if (!f.quantized() || f.group % kCanonicalGroup || L.elems % f.group) throw Error("internal: repack format");
  const size_t n_blocks = n / L.elems;
  // Decoding is a quarter of a quantized model's start (1B-shape Q4_K_M, `run -n 1` on lavapipe: 27% of the
  // CPU samples; the rest is page faults, reads and pipelines): a large tensor is split over the cores, each
  // thread writing its own whole blocks.
  const size_t threads = std::min<size_t>({std::max(1u, std::thread::hardware_concurrency()), 8, n_blocks / 4096 + 1});
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(threads);
  auto part = [&](size_t i) {
    try {
      repack_blocks(t, f, blocks, n_blocks * i / threads, n_blocks * (i + 1) / threads, data, scales);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  try {
    for (size_t i = 1; i < threads; ++i) pool.emplace_back(part, i);
  } catch (...) {   // no thread to be had: the rest runs here
    for (size_t i = pool.size() + 1; i < threads; ++i) part(i);
  }
  part(0);
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace vkspec
