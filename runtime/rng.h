#pragma once
// The host mirror of the shaders' counter-based generator: the same source (shaders/rng.h) compiled as
// C++, so the tests' reference sampler draws exactly the numbers the device draws.
#include "shaders/rng.h"

namespace vkspec {

// The key of a draw's noise (rng::gumbel_noise) for a 64-bit seed.
inline uint32_t counter_key(uint64_t seed, uint32_t position) {
  return rng::counter_key(rng::uvec2{uint32_t(seed), uint32_t(seed >> 32)}, position);
}

}  // namespace vkspec
