#include "gguf/gguf.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "platform/platform.h"
#include "core/quant.h"

namespace vkspec {
namespace {

constexpr uint64_t kMaxTensors = 1u << 20;
constexpr uint64_t kMaxKeys = 1u << 20;
constexpr uint64_t kMaxDims = 4;

// Bounds-checked little-endian cursor; `what` names the field in the error.
class Cursor {
 public:
  Cursor(const uint8_t* p, size_t n, const std::string& label) : p_(p), n_(n), label_(label) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return n_ - pos_; }
  void need(uint64_t bytes, const std::string& what) const {
    if (bytes > remaining()) throw Error(label_ + ": truncated GGUF file while reading " + what);
  }
  template <class T> T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  const uint8_t* skip(uint64_t bytes, const std::string& what) {   // the skipped bytes, in place
    need(bytes, what);
    const uint8_t* at = p_ + pos_;
    pos_ += bytes;
    return at;
  }
  std::string read_string(const std::string& what) {
    uint64_t len = read<uint64_t>(what + " length");
    need(len, what);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* p_;
  size_t n_, pos_ = 0;
  const std::string& label_;
};

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

double read_scalar(Cursor& c, GgufType t, const std::string& what) {
  switch (t) {
    case GgufType::U8: return c.read<uint8_t>(what);
    case GgufType::I8: return c.read<int8_t>(what);
    case GgufType::BOOL: {
      uint8_t b = c.read<uint8_t>(what);
      if (b > 1) throw Error("GGUF key '" + what + "': bool value " + std::to_string(b));
      return b;
    }
    case GgufType::U16: return c.read<uint16_t>(what);
    case GgufType::I16: return c.read<int16_t>(what);
    case GgufType::U32: return c.read<uint32_t>(what);
    case GgufType::I32: return c.read<int32_t>(what);
    case GgufType::F32: return c.read<float>(what);
    case GgufType::U64: return double(c.read<uint64_t>(what));
    case GgufType::I64: return double(c.read<int64_t>(what));
    case GgufType::F64: return c.read<double>(what);
    default: throw Error("GGUF key '" + what + "': bad value type");
  }
}

}  // namespace

uint64_t GgufTensor::elements() const {
  uint64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

const char* ggml_type_name(uint32_t code) {
  static const char* names[] = {"f32", "f16", "q4_0", "q4_1", "q4_2", "q4_3", "q5_0", "q5_1", "q8_0", "q8_1",
                                "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "q8_K", "iq2_xxs", "iq2_xs", "iq3_xxs",
                                "iq1_s", "iq4_nl", "iq3_s", "iq2_s", "iq4_xs", "i8", "i16", "i32", "i64", "f64",
                                "iq1_m", "bf16"};
  return code < sizeof(names) / sizeof(names[0]) ? names[code] : "unknown";
}

GgufFile::GgufFile(const std::string& path) : path_(path) {
  const platform::FileInfo info = platform::file_info(path);
  if (info.type == platform::FileType::Regular && info.size == 0) throw Error("'" + path + "' is empty, not a GGUF file");
  try {
    file_ = std::make_unique<platform::MappedFile>(path);
  } catch (const std::runtime_error& e) {
    throw Error(e.what());
  }
  base_ = file_->data();
  base_bytes_ = size_ = file_->size();
  parse();
}

GgufFile::GgufFile(const uint8_t* data, size_t size, std::string label)
    : path_(std::move(label)), base_(data), base_bytes_(size), size_(size) {
  parse();
}

GgufFile::GgufFile(Reader read, uint64_t size, std::string label) : path_(std::move(label)), size_(size), reader_(std::move(read)) {
  if (size == 0) throw Error("'" + path_ + "' is empty, not a GGUF file");
  // The metadata's length is known only once it is parsed: a start that ends inside it is read again, 4x
  // longer, until it holds it (or is the whole file, or the limit).
  for (uint64_t want = std::min<uint64_t>(size, 1u << 20);; want = std::min({size, want * 4, kMaxMetadataBytes})) {
    head_.resize(size_t(want));
    reader_(0, head_.data(), want);
    base_ = head_.data();
    base_bytes_ = head_.size();
    try {
      kv_.clear();
      tensors_.clear();
      tensor_index_.clear();
      parse();
      return;
    } catch (const Error&) {
      if (want == size || want == kMaxMetadataBytes) throw;
    }
  }
}

GgufFile::~GgufFile() = default;

void GgufFile::parse() {
  Cursor c(base_, base_bytes_, path_);
  if (base_bytes_ < 4 || memcmp(base_, "GGUF", 4) != 0) throw Error("'" + path_ + "' is not a GGUF file (bad magic)");
  c.read<uint32_t>("magic");
  version_ = c.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3)
    throw Error("'" + path_ + "': unsupported GGUF version " + std::to_string(version_) + " (2 and 3 are supported)");
  uint64_t n_tensors = c.read<uint64_t>("tensor count"), n_kv = c.read<uint64_t>("metadata count");
  if (n_tensors > kMaxTensors) throw Error("'" + path_ + "': implausible tensor count " + std::to_string(n_tensors));
  if (n_tensors * 24 > c.remaining())
    throw Error("'" + path_ + "': " + std::to_string(n_tensors) + " tensors declared but the file ends " +
                std::to_string(c.remaining()) + " bytes later: it is truncated or corrupt");
  if (n_kv > kMaxKeys || n_kv * 12 > c.remaining())
    throw Error("'" + path_ + "': implausible metadata count " + std::to_string(n_kv));

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.read_string("metadata key #" + std::to_string(i));
    if (key.empty()) throw Error("'" + path_ + "': empty metadata key");
    GgufValue v;
    uint32_t t = c.read<uint32_t>("type of key '" + key + "'");
    if (t > uint32_t(GgufType::F64)) throw Error("GGUF key '" + key + "': invalid type " + std::to_string(t));
    v.type = GgufType(t);
    if (v.type == GgufType::STRING) {
      v.str = c.read_string("key '" + key + "'");
    } else if (v.type == GgufType::ARRAY) {
      uint32_t at = c.read<uint32_t>("array type of key '" + key + "'");
      if (at > uint32_t(GgufType::F64) || at == uint32_t(GgufType::ARRAY))
        throw Error("GGUF key '" + key + "': invalid array element type " + std::to_string(at));
      v.array_type = GgufType(at);
      uint64_t n = c.read<uint64_t>("array length of key '" + key + "'");
      size_t min_elem = v.array_type == GgufType::STRING ? 8 : scalar_size(v.array_type);
      if (n > c.remaining() / min_elem)
        throw Error("GGUF key '" + key + "': array length " + std::to_string(n) + " exceeds the file");
      if (v.array_type == GgufType::STRING) {
        v.strings.reserve(n);
        for (uint64_t j = 0; j < n; ++j) v.strings.push_back(c.read_string("key '" + key + "'"));
      } else {
        v.count = n;
        v.raw = c.skip(n * scalar_size(v.array_type), "key '" + key + "'");
      }
    } else {
      v.number = read_scalar(c, v.type, key);
    }
    if (!kv_.emplace(key, std::move(v)).second) throw Error("'" + path_ + "': duplicate metadata key '" + key + "'");
  }

  uint64_t alignment = 32;
  if (auto a = opt_uint("general.alignment")) {
    alignment = *a;
    if (alignment == 0 || (alignment & (alignment - 1)) || alignment > (1u << 16))
      throw Error("'" + path_ + "': general.alignment " + std::to_string(alignment) + " is not a power of two");
  }

  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = c.read_string("tensor name #" + std::to_string(i));
    if (t.name.empty() || t.name.size() > 256) throw Error("'" + path_ + "': bad tensor name #" + std::to_string(i));
    uint32_t nd = c.read<uint32_t>("dims of tensor '" + t.name + "'");
    if (nd == 0 || nd > kMaxDims)
      throw Error("tensor '" + t.name + "': " + std::to_string(nd) + " dimensions (1 to 4 allowed)");
    uint64_t elements = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      uint64_t ne = c.read<uint64_t>("shape of tensor '" + t.name + "'");
      if (ne == 0 || ne > (1ull << 40) || elements > (1ull << 44) / ne)
        throw Error("tensor '" + t.name + "': implausible dimension " + std::to_string(ne));
      elements *= ne;
      t.dims.push_back(ne);
    }
    t.type = c.read<uint32_t>("type of tensor '" + t.name + "'");
    t.offset = c.read<uint64_t>("offset of tensor '" + t.name + "'");
    const BlockLayout block = block_layout(t.type);
    if (block.elems == 0)
      throw Error("tensor '" + t.name + "' has type " + ggml_type_name(t.type) + " (" + std::to_string(t.type) +
                  "), which vkspec does not read (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K..q6_K)");
    if (t.dims[0] % block.elems)
      throw Error("tensor '" + t.name + "': " + ggml_type_name(t.type) + " row length " + std::to_string(t.dims[0]) +
                  " is not a multiple of its block size " + std::to_string(block.elems));
    t.bytes = gguf_tensor_bytes(t.type, elements);
    if (t.offset % alignment) throw Error("tensor '" + t.name + "': offset is not aligned to " + std::to_string(alignment));
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) throw Error("duplicate tensor '" + t.name + "'");
    tensors_.push_back(std::move(t));
  }
  uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
  if (data_start > size_ && n_tensors > 0) throw Error("'" + path_ + "': truncated before the tensor data");
  uint64_t data_size = size_ >= data_start ? size_ - data_start : 0;
  for (auto& t : tensors_) {
    if (t.offset > data_size || t.bytes > data_size - t.offset)
      throw Error("tensor '" + t.name + "': data lies outside the file (truncated or corrupt)");
    t.file_offset = data_start + t.offset;
    t.data = reader_ ? nullptr : base_ + t.file_offset;
  }
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::optional<std::string> GgufFile::opt_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::STRING) throw Error("GGUF key '" + key + "' should be a string");
  return v->str;
}

std::string GgufFile::get_string(const std::string& key) const {
  auto s = opt_string(key);
  if (!s) throw Error("'" + path_ + "': missing GGUF key '" + key + "'");
  return *s;
}

std::optional<double> GgufFile::opt_number(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type == GgufType::STRING || v->type == GgufType::ARRAY) throw Error("GGUF key '" + key + "' should be a number");
  return v->number;
}

std::optional<uint64_t> GgufFile::opt_uint(const std::string& key) const {
  auto n = opt_number(key);
  if (!n) return std::nullopt;
  // range first: casting NaN, a negative or a value >= 2^64 to an integer is undefined behaviour
  if (!(*n >= 0 && *n < 18446744073709551616.0) || *n != std::floor(*n))
    throw Error("GGUF key '" + key + "' should be a non-negative integer");
  return uint64_t(*n);
}

uint64_t GgufFile::get_uint(const std::string& key) const {
  auto n = opt_uint(key);
  if (!n) throw Error("'" + path_ + "': missing GGUF key '" + key + "'");
  return *n;
}

const std::vector<std::string>* GgufFile::opt_strings(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (v->type != GgufType::ARRAY || v->array_type != GgufType::STRING)
    throw Error("GGUF key '" + key + "' should be an array of strings");
  return &v->strings;
}

void GgufFile::read_tensor(const GgufTensor& t, std::vector<uint8_t>& out) const {
  out.resize(t.bytes);
  read_tensor(t, out.data());
}

void GgufFile::read_tensor(const GgufTensor& t, uint8_t* out) const { read_tensor_part(t, 0, out, t.bytes); }

void GgufFile::read_tensor_part(const GgufTensor& t, uint64_t at, uint8_t* out, uint64_t n) const {
  if (at > t.bytes || n > t.bytes - at) throw Error("internal: a read past the end of tensor '" + t.name + "'");
  if (!file_ && !reader_) {
    memcpy(out, t.data + at, n);
    return;
  }
  try {
    if (reader_) reader_(t.file_offset + at, out, n);
    else file_->read(t.file_offset + at, out, n);
  } catch (const std::runtime_error& e) {
    throw Error("'" + path_ + "': cannot read tensor '" + t.name + "' (" + e.what() + ")");
  }
}

std::vector<double> GgufValue::numbers(const std::string& key) const {
  if (type != GgufType::ARRAY || array_type == GgufType::STRING) throw Error("GGUF key '" + key + "' should be a numeric array");
  const size_t size = scalar_size(array_type);
  Cursor c(raw, size_t(count) * size, key);
  std::vector<double> out;
  out.reserve(count);
  for (uint64_t j = 0; j < count; ++j) out.push_back(read_scalar(c, array_type, key));
  return out;
}

std::optional<std::vector<double>> GgufFile::opt_numbers(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  return v->numbers(key);
}

}  // namespace vkspec
