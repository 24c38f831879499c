#pragma once
// The host mirror of the shaders' counter-based generator: the same source (shaders/rng.h) compiled as
// C++, so the tests' reference sampler draws exactly the numbers the device draws.
#include "shaders/rng.h"

namespace vkspec {

inline float counter_uniform(uint64_t seed, uint32_t position, uint32_t stream) {
  return rng::counter_uniform(rng::uvec2{uint32_t(seed), uint32_t(seed >> 32)}, position, stream);
}

}  // namespace vkspec
