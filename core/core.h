#pragma once
// The bottom layer (no Vulkan), which every other layer and the fuzzers share: the error type and the weight types.
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "shaders/contract.h"

namespace vkspec {

// Every failure surfaces as this exception with a message a user can act on. Messages quote text from
// files and requests (key and tensor names, template source): control characters are escaped here, once
// for every path (CLI, C API, server), so a message is one printable line and a NUL cannot cut it short
// where it is read back as a C string (what(), vkspec_last_error()).
struct Error : std::runtime_error {
  explicit Error(const std::string& message) : std::runtime_error(escape_controls(message)) {}
  static std::string escape_controls(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (const char ch : s) {
      const unsigned char c = static_cast<unsigned char>(ch);
      if (c < 0x20 || c == 0x7f) {
        char esc[8];
        snprintf(esc, sizeof esc, "\\x%02x", c);
        out += esc;
      } else {
        out += ch;
      }
    }
    return out;
  }
};

// Weight types as a GGUF file stores them; the values are GGML's type codes. How each is laid out on the
// device (and which shader reads it) is core/quant.h's WeightFormat.
enum class DType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, BF16 = 30,
};

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::Q4_0: return "q4_0";
    case DType::Q4_1: return "q4_1";
    case DType::Q5_0: return "q5_0";
    case DType::Q5_1: return "q5_1";
    case DType::Q8_0: return "q8_0";
    case DType::Q2_K: return "q2_K";
    case DType::Q3_K: return "q3_K";
    case DType::Q4_K: return "q4_K";
    case DType::Q5_K: return "q5_K";
    case DType::Q6_K: return "q6_K";
  }
  return "?";
}

inline bool is_quantized(DType t) { return t != DType::F32 && t != DType::F16 && t != DType::BF16; }

}  // namespace vkspec
