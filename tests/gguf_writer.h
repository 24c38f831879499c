#pragma once
// Writes GGUF v3 files from test code (synthetic models, malformed-file cases).
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace vkspec::test {

class GgufWriter {
 public:
  void u32(const std::string& k, uint32_t v) { key(k, 4); put(v); n_kv_++; }
  void f32(const std::string& k, float v) { key(k, 6); put(v); n_kv_++; }
  void boolean(const std::string& k, bool v) { key(k, 7); put(uint8_t(v)); n_kv_++; }
  void str(const std::string& k, const std::string& v) { key(k, 8); put_str(v); n_kv_++; }
  void strs(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9); put(uint32_t(8)); put(uint64_t(v.size()));
    for (auto& s : v) put_str(s);
    n_kv_++;
  }
  void f32s(const std::string& k, const std::vector<float>& v) {
    key(k, 9); put(uint32_t(6)); put(uint64_t(v.size()));
    for (float f : v) put(f);
    n_kv_++;
  }
  void bools(const std::string& k, const std::vector<bool>& v) {
    key(k, 9); put(uint32_t(7)); put(uint64_t(v.size()));
    for (bool b : v) put(uint8_t(b));
    n_kv_++;
  }
  void i32s(const std::string& k, const std::vector<int32_t>& v) {
    key(k, 9); put(uint32_t(5)); put(uint64_t(v.size()));
    for (int32_t i : v) put(i);
    n_kv_++;
  }
  // Copies every metadata key of `f` with its type, except those `skip` returns true for.
  template <class Skip> void copy_metadata(const GgufFile& f, Skip skip) {
    for (auto& [k, v] : f.metadata()) {
      if (skip(k)) continue;
      if (v.type == GgufType::STRING) str(k, v.str);
      else if (v.type == GgufType::ARRAY && v.array_type == GgufType::STRING) strs(k, v.strings);
      else if (v.type == GgufType::ARRAY && v.array_type == GgufType::F32) {
        const auto n = v.numbers(k);
        f32s(k, std::vector<float>(n.begin(), n.end()));
      } else if (v.type == GgufType::ARRAY) {
        const auto n = v.numbers(k);
        i32s(k, std::vector<int32_t>(n.begin(), n.end()));
      }
      else if (v.type == GgufType::F32) f32(k, float(v.number));
      else if (v.type == GgufType::BOOL) boolean(k, v.number != 0);
      else u32(k, uint32_t(v.number));
    }
  }
  // dims ne0 first; type: 0 f32, 1 f16, 8 q8_0, 30 bf16
  void tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, const void* data, size_t bytes) {
    Tensor t{name, dims, type, std::vector<uint8_t>(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes), 0};
    tensors_.push_back(std::move(t));
  }
  // A tensor whose `bytes` of data the caller writes itself after bytes(), in declaration order, each
  // padded to 32 bytes (for files too large to hold in memory). Declare tensors with data first.
  void tensor_header(const std::string& name, std::vector<uint64_t> dims, uint32_t type, size_t bytes) {
    tensors_.push_back(Tensor{name, dims, type, {}, bytes});
  }
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out;
    auto app = [&](const void* p, size_t n) { out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n); };
    app("GGUF", 4);
    uint32_t version = 3;
    app(&version, 4);
    uint64_t nt = tensors_.size(), nk = n_kv_;
    app(&nt, 8);
    app(&nk, 8);
    app(kv_.data(), kv_.size());
    uint64_t offset = 0;
    for (auto& t : tensors_) {
      uint64_t len = t.name.size();
      app(&len, 8);
      app(t.name.data(), len);
      uint32_t nd = uint32_t(t.dims.size());
      app(&nd, 4);
      app(t.dims.data(), 8 * nd);
      app(&t.type, 4);
      app(&offset, 8);
      offset += (t.size() + 31) / 32 * 32;
    }
    out.resize((out.size() + 31) / 32 * 32, 0);
    for (auto& t : tensors_) {
      if (t.header_only_bytes) continue;
      app(t.data.data(), t.data.size());
      out.resize((out.size() + 31) / 32 * 32, 0);
    }
    return out;
  }
  void write(const std::string& path) const {
    auto b = bytes();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  }

 private:
  struct Tensor {
    std::string name; std::vector<uint64_t> dims; uint32_t type; std::vector<uint8_t> data;
    size_t header_only_bytes = 0;   // > 0: data written by the caller (tensor_header)
    size_t size() const { return header_only_bytes ? header_only_bytes : data.size(); }
  };
  template <class T> void put(T v) { kv_.insert(kv_.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + sizeof v); }
  void put_str(const std::string& s) { put(uint64_t(s.size())); kv_.insert(kv_.end(), s.begin(), s.end()); }
  void key(const std::string& k, uint32_t type) { put_str(k); put(type); }
  std::vector<uint8_t> kv_;
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace vkspec::test
