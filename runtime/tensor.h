#pragma once
// Weight storage types and a weight matrix resident on the device.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core.h"
#include "runtime/memory.h"

namespace vkspec {

// A row-major [rows][cols] matrix (GGUF ne0 = cols). q8_0 is stored as an int8 plane `data` [rows][cols]
// plus a float plane `scales` [rows][cols/32] (repacked from GGUF's 34-byte blocks at upload).
struct DeviceMatrix {
  DType type = DType::F32;
  uint32_t rows = 0, cols = 0;
  Slice data;
  Slice scales;   // q8_0 only
};

}  // namespace vkspec

namespace vkspec {
class Uploader;
// Uploads a [rows][cols] matrix given in GGUF encoding of `type` (q8_0: GGUF blocks, split into planes).
DeviceMatrix upload_matrix(Arena& arena, Uploader& up, DType type, uint32_t rows, uint32_t cols, const void* bytes,
                           const char* name);
// The same matrix as f32 on the host (CPU references, tests).
std::vector<float> dequantize(DType type, uint64_t elements, const void* bytes);
}  // namespace vkspec
