#pragma once
// SPIR-V compiled from shaders/*.comp at build time and linked into the binary (cmake/shaders.cmake).
#include <cstddef>
#include <cstdint>

namespace vkspec::shaders {
struct EmbeddedShader {
  const char* name;     // variant name, e.g. "matmul_f16"
  const uint32_t* words;
  size_t size_bytes;
};
extern const EmbeddedShader kShaders[];
extern const size_t kShaderCount;
}  // namespace vkspec::shaders
