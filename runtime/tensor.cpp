#include "runtime/tensor.h"

#include <cstring>
#include <vector>

#include "runtime/quant.h"

namespace vkspec {

DeviceMatrix upload_matrix(Arena& arena, Uploader& up, DType type, uint32_t rows, uint32_t cols, const void* bytes,
                           const char* name) {
  DeviceMatrix m;
  m.type = type;
  m.rows = rows;
  m.cols = cols;
  const uint64_t n = uint64_t(rows) * cols;
  switch (type) {
    case DType::F32: m.data = arena.alloc(n * 4, name); up.upload(m.data, bytes, n * 4); break;
    case DType::F16:
    case DType::BF16: m.data = arena.alloc(n * 2, name); up.upload(m.data, bytes, n * 2); break;
    case DType::Q8_0: {
      if (cols % kQ8BlockElems) throw Error(std::string(name) + ": q8_0 row length is not a multiple of 32");
      std::vector<int8_t> quants(n);
      std::vector<float> scales(n / kQ8BlockElems);
      split_q8_0(static_cast<const uint8_t*>(bytes), n, quants.data(), scales.data());
      // One allocation for both planes, so they share a memory block (texel kernels bind one view).
      const VkDeviceSize quant_bytes = (n + 255) / 256 * 256;
      Slice both = arena.alloc(quant_bytes + scales.size() * 4, name);
      m.data = both.sub(0, n);
      m.scales = both.sub(quant_bytes, scales.size() * 4);
      up.upload(m.data, quants.data(), n);
      up.upload(m.scales, scales.data(), scales.size() * 4);
      break;
    }
  }
  return m;
}

std::vector<float> dequantize(DType type, uint64_t n, const void* bytes) {
  std::vector<float> out(n);
  const auto* u16 = static_cast<const uint16_t*>(bytes);
  switch (type) {
    case DType::F32: memcpy(out.data(), bytes, n * 4); break;
    case DType::F16: for (uint64_t i = 0; i < n; ++i) out[i] = half_to_float(u16[i]); break;
    case DType::BF16: for (uint64_t i = 0; i < n; ++i) out[i] = bf16_to_float(u16[i]); break;
    case DType::Q8_0: {
      const auto* b = static_cast<const uint8_t*>(bytes);
      for (uint64_t blk = 0; blk < n / kQ8BlockElems; ++blk) {
        uint16_t dh;
        memcpy(&dh, b + blk * kQ8BlockBytes, 2);
        float d = half_to_float(dh);
        for (size_t i = 0; i < kQ8BlockElems; ++i)
          out[blk * kQ8BlockElems + i] = d * float(int8_t(b[blk * kQ8BlockBytes + 2 + i]));
      }
      break;
    }
  }
  return out;
}

}  // namespace vkspec
