#pragma once
// Host-side number formats: IEEE half, bfloat16, GGUF's block-quantized types, and the device layout the
// matmul kernels read them in (WeightFormat). Vulkan-free: gguf/ and the tests use it too.
#include <cstddef>
#include <bit>
#include <cstdint>
#include <vector>

#include "core/core.h"

namespace vkspec {

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);   // round to nearest even
inline float bf16_to_float(uint16_t b) {
  return std::bit_cast<float>(uint32_t(b) << 16);
}
uint16_t float_to_bf16(float f);   // round to nearest even

// GGUF storage of a type: `elems` consecutive weights of a row in `bytes` bytes (f32/f16/bf16: 1 weight).
// Rows are whole blocks: a row length that is not a multiple of `elems` is a malformed tensor.
struct BlockLayout {
  uint32_t elems = 0, bytes = 0;
};
// The layout of GGML type `code`, or {0, 0} for a type vkspec does not read.
BlockLayout block_layout(uint32_t code);
inline BlockLayout block_layout(DType t) { return block_layout(uint32_t(t)); }
// Bytes a tensor of `elements` weights of GGML type `code` occupies; 0 for unknown types or partial blocks.
size_t gguf_tensor_bytes(uint32_t code, uint64_t elements);

constexpr size_t kQ8BlockElems = 32;
constexpr size_t kQ8BlockBytes = 34;
// GGUF q8_0 quantization of `n` floats (n % 32 == 0) into n/32 blocks ({f16 d; int8 q[32]}).
void quantize_q8_0(const float* x, size_t n, uint8_t* blocks);

// How a matrix is laid out on the device (the contract with shaders/weights.glsl). Float types keep their
// GGUF encoding. Quantized types are repacked at upload into
//   data:   the quants, row-major; WT_Q8: one int8 per weight; WT_Q4: one unsigned nibble per weight
//           (weight e of a row in byte e/2, low nibble first); WT_Q6: q + 32 in 6 bits, per 32 weights 16
//           bytes of nibbles and 8 of high bits (shaders/weights.glsl says where each bit lies);
//   scales: per `group` consecutive weights of a row, float s, or vec2 {s, m} when `has_min`;
// and weight = s * q + m, which equals llama.cpp's dequantized value bit for bit (see decode_quant).
// The GGUF file stays the source of truth: the repacking is exact and reversible.
struct WeightFormat {
  uint32_t storage = WT_F32;   // WT_F32 / WT_F16 / WT_BF16 / WT_Q8 / WT_Q4 / WT_Q6
  uint32_t group = 0;          // quantized: weights per scale, 16 or 32
  bool has_min = false;
  bool quantized() const { return storage == WT_Q8 || storage == WT_Q4 || storage == WT_Q6; }
  // Quantized formats: the planes of `weights` consecutive weights of a row-major matrix (whole groups;
  // WT_Q6: whole units of 32, which every quantized row is)
  uint64_t data_bytes(uint64_t weights) const {
    return storage == WT_Q4   ? weights / 2
           : storage == WT_Q6 ? weights / contract::Q6_UNIT_WEIGHTS * contract::Q6_UNIT_UINTS * 4
                              : weights;
  }
  uint64_t scale_floats(uint64_t weights) const { return weights / group * (has_min ? 2 : 1); }
  bool operator==(const WeightFormat& o) const {
    return storage == o.storage && group == o.group && has_min == o.has_min;
  }
};
WeightFormat native_format(DType t);
// The narrowest quantized format holding both `a` and `b` exactly (Q4 widens to Q6, Q6 to Q8, groups to 16,
// a min plane added): so matrices of different quantized types can share one kernel (fused QKV, gate/up).
WeightFormat common_format(const WeightFormat& a, const WeightFormat& b);

// Device bytes of `elements` weights of type `t` in its native format (data plane + scales).
uint64_t device_bytes(DType t, uint64_t elements);

constexpr uint32_t kCanonicalGroup = 16;
// Decodes `n` weights (whole blocks) of quantized type `t` into the canonical planes: q[n] (int8) and s, m
// per 16 weights, with value = s * q + m. Every product s * q is exact in f32 except q6_K's, which rounds
// exactly like llama.cpp's `d * sc * q`, so the values equal dequantize_row_* in ggml-quants.c.
void decode_quant(DType t, const uint8_t* blocks, size_t n, int8_t* q, float* s, float* m);
// Repacks `n` weights (whole blocks) of quantized type `t` into format `f` (native_format(t) or a common
// format holding it): data[] gets n int8 or n/2 nibble bytes, scales[] n/group floats (x2 with a min).
// Throws Error when a value does not fit the format (an internal error: formats come from native_format).
void repack_quant(DType t, const WeightFormat& f, const uint8_t* blocks, size_t n, uint8_t* data, float* scales);

}  // namespace vkspec
