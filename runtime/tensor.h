#pragma once
// A weight matrix resident on the device, and its host-side staging form.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core.h"
#include "runtime/memory.h"
#include "runtime/quant.h"

namespace vkspec {

// A row-major [rows][cols] matrix (GGUF ne0 = cols) in `format` (runtime/quant.h): `data` holds the float
// values or the quants, `scales` the per-group scales (and mins) of a quantized format, in the same memory
// block as `data` (texel kernels bind one view).
struct DeviceMatrix {
  DType type = DType::F32;   // the file's type (quantized types of one fused matrix: the first part's)
  WeightFormat format;
  uint32_t rows = 0, cols = 0;
  Slice data;
  Slice scales;   // quantized formats only
};

// A matrix decoded into a device format on the host, before upload. Matrices in the same format and with
// the same row length stack (append) into one: fused QKV, and any mix of quantized types after widening.
struct HostMatrix {
  DType type = DType::F32;
  WeightFormat format;
  uint32_t rows = 0, cols = 0;
  std::vector<uint8_t> data;
  std::vector<float> scales;
  void append(const HostMatrix& other);
};

class Uploader;
// Decodes a [rows][cols] matrix given in GGUF encoding of `type` into `format` (default: its native one).
// Throws (naming the tensor) when cols is not a whole number of the type's blocks.
HostMatrix decode_matrix(DType type, uint32_t rows, uint32_t cols, const void* bytes, const char* name,
                         const WeightFormat* format = nullptr);
DeviceMatrix upload_matrix(Arena& arena, Uploader& up, const HostMatrix& m, const char* name);
// The same from GGUF bytes in the type's native format (float types straight from the mapping, no copy).
DeviceMatrix upload_matrix(Arena& arena, Uploader& up, DType type, uint32_t rows, uint32_t cols, const void* bytes,
                           const char* name);
// The same matrix as f32 on the host (CPU references, tests): value = s * q + m for quantized types.
std::vector<float> dequantize(DType type, uint64_t elements, const void* bytes);
}  // namespace vkspec
