#pragma once
// The Vulkan-free core that loader/, runtime/ and the fuzzer share: the error type and the weight types.
#include <cstdint>
#include <stdexcept>

#include "shaders/contract.h"

namespace vkspec {

// Every failure surfaces as this exception with a message a user can act on.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Weight storage types on the device; the values are the shaders' WT_* codes.
enum class DType : uint32_t { F32 = WT_F32, F16 = WT_F16, BF16 = WT_BF16, Q8_0 = WT_Q8_0 };

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::Q8_0: return "q8_0";
  }
  return "?";
}

}  // namespace vkspec
