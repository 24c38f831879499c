#pragma once
// Host-side number formats: IEEE half, bfloat16 and GGUF's q8_0 blocks ({f16 d; int8 q[32]}, value = d*q).
#include <cstddef>
#include <cstdint>

namespace vkspec {

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);   // round to nearest even
inline float bf16_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
uint16_t float_to_bf16(float f);   // round to nearest even

constexpr size_t kQ8BlockElems = 32;
constexpr size_t kQ8BlockBytes = 34;

// GGUF q8_0 quantization of `n` floats (n % 32 == 0) into n/32 blocks.
void quantize_q8_0(const float* x, size_t n, uint8_t* blocks);
// Split GGUF q8_0 blocks into an int8 plane (n quants) and a float scale plane (n/32 scales).
void split_q8_0(const uint8_t* blocks, size_t n, int8_t* quants, float* scales);
// Bytes a row-major [rows][cols] tensor of `type` occupies in GGUF.
size_t gguf_tensor_bytes(uint32_t type_code, uint64_t elements);

}  // namespace vkspec
