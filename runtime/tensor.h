#pragma once
// A weight matrix resident on the device, and its host-side staging form.
#include <cstdint>
#include <string>
#include <vector>

#include "core/core.h"
#include "runtime/memory.h"
#include "core/quant.h"

namespace vkspec {

// A row-major [rows][cols] matrix (GGUF ne0 = cols) in `format` (core/quant.h): `data` holds the float
// values or the quants, `scales` the per-group scales (and mins) of a quantized format, in the same memory
// block as `data` (texel kernels bind one view).
struct DeviceMatrix {
  DType type = DType::F32;   // the file's type (quantized types of one fused matrix: the first part's)
  WeightFormat format;
  uint32_t rows = 0, cols = 0;
  Slice data;
  Slice scales;   // quantized formats only
};

// A matrix decoded into a device format on the host (the staging form when device memory is not mapped,
// and the tests' view of the device planes).
struct HostMatrix {
  DType type = DType::F32;
  WeightFormat format;
  uint32_t rows = 0, cols = 0;
  std::vector<uint8_t> data;
  std::vector<float> scales;
};

class Uploader;
// Decodes a [rows][cols] matrix given in GGUF encoding of `type` into `format` (default: its native one).
// Throws (naming the tensor) when cols is not a whole number of the type's blocks.
HostMatrix decode_matrix(DType type, uint32_t rows, uint32_t cols, const void* bytes, const char* name,
                         const WeightFormat* format = nullptr);
DeviceMatrix upload_matrix(Arena& arena, Uploader& up, const HostMatrix& m, const char* name);
// A [rows][cols] matrix in `format` on the device, not yet written: both planes of a quantized format in one
// allocation (texel kernels bind one view).
DeviceMatrix alloc_matrix(Arena& arena, DType type, const WeightFormat& format, uint32_t rows, uint32_t cols,
                          const char* name);
// Writes rows [row0, row0 + rows) of `m` from GGUF bytes of `type` (rows of m.cols weights; whole blocks,
// checked, naming the tensor), decoded into m's format, which must hold `type` exactly (its native format,
// or a common format of a fused matrix). Into mapped device memory the decoder writes directly (no host
// copy: loading a 1B Q4_K_M model on lavapipe spent ~40% of its time zeroing and copying host planes);
// otherwise through a host decode and the uploader's staging ring. Stacking parts by rows makes a fused
// matrix (QKV, or gate/up of different quantized types).
void write_rows(Uploader& up, const DeviceMatrix& m, uint32_t row0, DType type, uint32_t rows, const void* bytes,
                const char* name);
// Where row `row0` of a float matrix lies in mapped device memory, so that its GGUF bytes (float types keep
// their encoding) can be read there in place; nullptr for quantized formats and unmapped memory.
uint8_t* mapped_float_rows(const DeviceMatrix& m, uint32_t row0);
// A matrix of GGUF bytes in the type's native format: alloc_matrix + write_rows.
DeviceMatrix upload_matrix(Arena& arena, Uploader& up, DType type, uint32_t rows, uint32_t cols, const void* bytes,
                           const char* name);
// The same matrix as f32 on the host (CPU references, tests): value = s * q + m for quantized types.
std::vector<float> dequantize(DType type, uint64_t elements, const void* bytes);
}  // namespace vkspec
