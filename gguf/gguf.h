#pragma once
// GGUF v2/v3 reader over a memory-mapped file. Everything is validated before it is trusted: every
// read is bounds-checked, counts and lengths are checked against the bytes that remain, tensor shapes,
// types, offsets, sizes and alignment are checked against the data section. A malformed file raises
// vkspec::Error naming the key or tensor at fault.
#include <cstdint>
#include <map>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/core.h"   // vkspec::Error

namespace vkspec {
namespace platform {
class MappedFile;   // platform/platform.h
}

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12,
};

struct GgufValue {
  GgufType type = GgufType::U8;
  GgufType array_type = GgufType::U8;   // element type when type == ARRAY
  double number = 0;                    // any scalar numeric or bool
  std::string str;
  std::vector<std::string> strings;     // string arrays
  // Numeric/bool arrays stay in the file (a view into the mapping or buffer) until they are used: an unused
  // 250 MB array costs nothing (as doubles it cost 8 bytes per element). Validated when decoded.
  const uint8_t* raw = nullptr;
  uint64_t count = 0;
  std::vector<double> numbers(const std::string& key) const;   // the array decoded; throws Error naming `key`
  size_t array_size() const { return array_type == GgufType::STRING ? strings.size() : size_t(count); }
};

struct GgufTensor {
  std::string name;
  std::vector<uint64_t> dims;   // ne0 first (the contiguous dimension)
  uint32_t type = 0;            // ggml type code
  uint64_t offset = 0;          // from the start of the data section
  uint64_t bytes = 0;
  uint64_t file_offset = 0;     // from the start of the file
  const uint8_t* data = nullptr;   // in the mapping or buffer (null for a file read through a Reader)
  uint64_t elements() const;
};

const char* ggml_type_name(uint32_t code);

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);
  // Parse from memory (fuzzing, tests). The buffer must outlive the object.
  GgufFile(const uint8_t* data, size_t size, std::string label);
  // Read through an application's callback (an asset pack): read(offset, out, n) fills out or throws. The
  // metadata is read into memory at construction (as much of the file's start as it needs, at most
  // kMaxMetadataBytes); tensors are read through it when asked. It must outlive the object.
  using Reader = std::function<void(uint64_t offset, uint8_t* out, uint64_t n)>;
  GgufFile(Reader read, uint64_t size, std::string label);
  static constexpr uint64_t kMaxMetadataBytes = 256ull << 20;
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  const std::string& path() const { return path_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }

  const GgufValue* find(const std::string& key) const;
  const GgufTensor* tensor(const std::string& name) const;

  // Typed accessors: throw Error naming the key when it is missing (required) or has the wrong type.
  std::string get_string(const std::string& key) const;
  std::optional<std::string> opt_string(const std::string& key) const;
  std::optional<double> opt_number(const std::string& key) const;
  uint64_t get_uint(const std::string& key) const;
  std::optional<uint64_t> opt_uint(const std::string& key) const;
  const std::vector<std::string>* opt_strings(const std::string& key) const;
  std::optional<std::vector<double>> opt_numbers(const std::string& key) const;

  // A tensor's bytes, copied with positioned reads from the file (from memory for a parsed buffer). Loading reads
  // tensors this way rather than through the mapping: a file truncated while it loads then gives a clear
  // Error (a short read) instead of SIGBUS on a page past the new end of the mapping.
  void read_tensor(const GgufTensor& t, std::vector<uint8_t>& out) const;
  void read_tensor(const GgufTensor& t, uint8_t* out) const;   // into t.bytes bytes at out
  // `n` bytes of a tensor from byte `at` of it (at + n <= t.bytes), as read_tensor reads them.
  void read_tensor_part(const GgufTensor& t, uint64_t at, uint8_t* out, uint64_t n) const;

 private:
  void parse();
  std::string path_;
  const uint8_t* base_ = nullptr;   // the metadata (and for a mapping or buffer, all of the file)
  size_t base_bytes_ = 0;           // bytes at base_
  uint64_t size_ = 0;               // the file's
  Reader reader_;                   // a file read through the application's callback
  std::vector<uint8_t> head_;       // its first bytes, holding the metadata
  std::unique_ptr<platform::MappedFile> file_;   // null when parsed from memory
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace vkspec
