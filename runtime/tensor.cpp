#include "runtime/tensor.h"

#include <cstring>
#include <vector>

namespace vkspec {

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
  m.data.resize(m.format.data_bytes(n));
  m.scales.resize(m.format.scale_floats(n));
  try {
    repack_quant(type, m.format, static_cast<const uint8_t*>(bytes), n, m.data.data(), m.scales.data());
  } catch (const Error& e) {
    throw Error(std::string("tensor '") + name + "': " + e.what());
  }
  return m;
}

DeviceMatrix upload_matrix(Arena& arena, Uploader& up, const HostMatrix& h, const char* name) {
  DeviceMatrix m = alloc_matrix(arena, h.type, h.format, h.rows, h.cols, name);
  up.upload(m.data, h.data.data(), h.data.size());
  if (h.format.quantized()) up.upload(m.scales, h.scales.data(), h.scales.size() * 4);
  return m;
}

DeviceMatrix alloc_matrix(Arena& arena, DType type, const WeightFormat& format, uint32_t rows, uint32_t cols,
                          const char* name) {
  DeviceMatrix m;
  m.type = type;
  m.format = format;
  m.rows = rows;
  m.cols = cols;
  const uint64_t n = uint64_t(rows) * cols;
  if (!format.quantized()) {
    m.data = arena.alloc(n * block_layout(type).bytes, name);   // float types: one weight per "block"
    return m;
  }
  // One allocation for both planes, so they share a memory block (texel kernels bind one view).
  const VkDeviceSize data_bytes = format.data_bytes(n), padded = (data_bytes + 255) / 256 * 256;
  Slice both = arena.alloc(padded + format.scale_floats(n) * 4, name);
  m.data = both.sub(0, data_bytes);
  m.scales = both.sub(padded, both.size - padded);
  return m;
}

void write_rows(Uploader& up, const DeviceMatrix& m, uint32_t row0, DType type, uint32_t rows, const void* bytes,
                const char* name) {
  if (uint64_t(row0) + rows > m.rows) throw Error(std::string("internal: rows past the end of '") + name + "'");
  const uint64_t n = uint64_t(rows) * m.cols, first = uint64_t(row0) * m.cols;   // weights, and the first one
  const BlockLayout L = block_layout(type);
  if (L.elems == 0 || m.cols % L.elems)
    throw Error(std::string("tensor '") + name + "': " + dtype_name(type) + " row length " + std::to_string(m.cols) +
                " is not a multiple of its block size " + std::to_string(L.elems));
  if (!is_quantized(type)) {
    if (!(m.format == native_format(type))) throw Error("internal: float matrices keep their own format");
    up.upload(m.data, bytes, n * L.bytes, first * L.bytes);
    return;
  }
  const WeightFormat& f = m.format;
  const uint64_t data_off = f.data_bytes(first), scale_off = f.scale_floats(first);
  if (m.data.mapped && m.scales.mapped) {   // straight into the device planes
    try {
      repack_quant(type, f, static_cast<const uint8_t*>(bytes), n, m.data.mapped + data_off,
                   reinterpret_cast<float*>(m.scales.mapped) + scale_off);
    } catch (const Error& e) {
      throw Error(std::string("tensor '") + name + "': " + e.what());
    }
    return;
  }
  const HostMatrix h = decode_matrix(type, rows, m.cols, bytes, name, &f);
  up.upload(m.data, h.data.data(), h.data.size(), data_off);
  up.upload(m.scales, h.scales.data(), h.scales.size() * 4, scale_off * 4);
}

uint8_t* mapped_float_rows(const DeviceMatrix& m, uint32_t row0) {
  if (m.format.quantized() || !m.data.mapped || row0 >= m.rows) return nullptr;
  return m.data.mapped + uint64_t(row0) * m.cols * block_layout(m.type).bytes;
}

DeviceMatrix upload_matrix(Arena& arena, Uploader& up, DType type, uint32_t rows, uint32_t cols, const void* bytes,
                           const char* name) {
  DeviceMatrix m = alloc_matrix(arena, type, native_format(type), rows, cols, name);
  write_rows(up, m, 0, type, rows, bytes, name);
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
