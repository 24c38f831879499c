#include "runtime/tensor.h"

#include <cstring>
#include <vector>

namespace vkspec {

void HostMatrix::append(const HostMatrix& o) {
  if (!(o.format == format) || o.cols != cols) throw Error("internal: stacking matrices of different formats");
  data.insert(data.end(), o.data.begin(), o.data.end());
  scales.insert(scales.end(), o.scales.begin(), o.scales.end());
  rows += o.rows;
}

HostMatrix decode_matrix(DType type, uint32_t rows, uint32_t cols, const void* bytes, const char* name,
                         const WeightFormat* format) {
  HostMatrix m;
  m.type = type;
  m.format = format ? *format : native_format(type);
  m.rows = rows;
  m.cols = cols;
  const uint64_t n = uint64_t(rows) * cols;
  const BlockLayout L = block_layout(type);
  if (L.elems == 0 || cols % L.elems)
    throw Error(std::string("tensor '") + name + "': " + dtype_name(type) + " row length " + std::to_string(cols) +
                " is not a multiple of its block size " + std::to_string(L.elems));
  if (!is_quantized(type)) {
    if (!(m.format == native_format(type))) throw Error("internal: float matrices keep their own format");
    m.data.resize(n / L.elems * L.bytes);
    memcpy(m.data.data(), bytes, m.data.size());
    return m;
  }
  m.data.resize(m.format.storage == WT_Q4 ? n / 2 : n);
  m.scales.resize(n / m.format.group * (m.format.has_min ? 2 : 1));
  repack_quant(type, m.format, static_cast<const uint8_t*>(bytes), n, m.data.data(), m.scales.data());
  return m;
}

DeviceMatrix upload_matrix(Arena& arena, Uploader& up, const HostMatrix& h, const char* name) {
  DeviceMatrix m;
  m.type = h.type;
  m.format = h.format;
  m.rows = h.rows;
  m.cols = h.cols;
  if (!h.format.quantized()) {
    m.data = arena.alloc(h.data.size(), name);
    up.upload(m.data, h.data.data(), h.data.size());
    return m;
  }
  // One allocation for both planes, so they share a memory block (texel kernels bind one view).
  const VkDeviceSize data_bytes = (h.data.size() + 255) / 256 * 256;
  Slice both = arena.alloc(data_bytes + h.scales.size() * 4, name);
  m.data = both.sub(0, h.data.size());
  m.scales = both.sub(data_bytes, h.scales.size() * 4);
  up.upload(m.data, h.data.data(), h.data.size());
  up.upload(m.scales, h.scales.data(), h.scales.size() * 4);
  return m;
}

DeviceMatrix upload_matrix(Arena& arena, Uploader& up, DType type, uint32_t rows, uint32_t cols, const void* bytes,
                           const char* name) {
  if (is_quantized(type)) return upload_matrix(arena, up, decode_matrix(type, rows, cols, bytes, name), name);
  DeviceMatrix m;
  m.type = type;
  m.format = native_format(type);
  m.rows = rows;
  m.cols = cols;
  const uint64_t size = uint64_t(rows) * cols * block_layout(type).bytes;
  m.data = arena.alloc(size, name);
  up.upload(m.data, bytes, size);
  return m;
}

std::vector<float> dequantize(DType type, uint64_t n, const void* bytes) {
  std::vector<float> out(n);
  const auto* u16 = static_cast<const uint16_t*>(bytes);
  switch (type) {
    case DType::F32: memcpy(out.data(), bytes, n * 4); break;
    case DType::F16: for (uint64_t i = 0; i < n; ++i) out[i] = half_to_float(u16[i]); break;
    case DType::BF16: for (uint64_t i = 0; i < n; ++i) out[i] = bf16_to_float(u16[i]); break;
    default: {
      std::vector<int8_t> q(n);
      std::vector<float> s(n / kCanonicalGroup), m(n / kCanonicalGroup);
      decode_quant(type, static_cast<const uint8_t*>(bytes), n, q.data(), s.data(), m.data());
      for (uint64_t i = 0; i < n; ++i) out[i] = s[i / kCanonicalGroup] * float(q[i]) + m[i / kCanonicalGroup];
    }
  }
  return out;
}

}  // namespace vkspec
