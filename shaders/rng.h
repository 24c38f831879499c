// Counter-based random numbers, defined once for the shaders and the host: a uniform in [0, 1) is a pure
// function of (seed, position, stream), so a run is reproducible however work is batched and nothing
// carries generator state between dispatches. Included by GLSL (sample_rows.comp, spec_accept.comp) and
// by C++ (runtime/rng.h: the bit-exact mirror the tests draw with).
// Three rounds of a 32-bit avalanche hash (lowbias32 by Chris Wellons) over the mixed key.
#ifndef VKSPEC_RNG_H
#define VKSPEC_RNG_H
#ifdef __cplusplus
#include <cstdint>
namespace vkspec::rng {
using uint = uint32_t;
struct uvec2 { uint x, y; };
#define VKSPEC_FN inline
#else
#define VKSPEC_FN
#endif

// Streams: which draw of a position a number is for.
const uint STREAM_ACCEPT = 1u;   // accept/reject of draft i (accept.glsl)
const uint STREAM_DRAW = 2u;     // the residual or bonus draw after the chain (accept.glsl)
const uint STREAM_PLAIN = 3u;    // the target's own draws (plain decoding, the token after a prefill)
const uint STREAM_DRAFT = 4u;    // a draft model's draws

VKSPEC_FN uint hash32(uint x) {
  x ^= x >> 16u; x *= 0x7feb352du;
  x ^= x >> 15u; x *= 0x846ca68bu;
  x ^= x >> 16u;
  return x;
}

// 24 random bits: exactly representable as a float, and u < 1 always.
VKSPEC_FN float counter_uniform(uvec2 seed, uint position, uint stream) {
  uint h = hash32(seed.x ^ 0x9e3779b9u);
  h = hash32(h ^ seed.y ^ 0x85ebca6bu);
  h = hash32(h ^ position * 0xc2b2ae35u);
  h = hash32(h ^ stream * 0x27d4eb2fu);
  return float(h >> 8u) * (1.0f / 16777216.0f);
}

#ifdef __cplusplus
}  // namespace vkspec::rng
#endif
#undef VKSPEC_FN
#endif
