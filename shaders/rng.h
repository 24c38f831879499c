// Counter-based random numbers and the draw built on them, defined once for the shaders and the host: a
// number is a pure function of (seed, position, token), so a run is reproducible however work is batched and
// nothing carries generator state between dispatches. Included by GLSL (sample_rows.comp) and by C++
// (runtime/rng.h: the mirror the host Sampler, the tests' reference, draws with).
// Rounds of a 32-bit avalanche hash (lowbias32 by Chris Wellons) over the mixed key.
#ifndef VKSPEC_RNG_H
#define VKSPEC_RNG_H
#ifdef __cplusplus
#include <algorithm>
#include <cmath>
#include <cstdint>
namespace vkspec::rng {
using std::log;
using std::max;
using uint = uint32_t;
struct uvec2 { uint x, y; };
#define VKSPEC_FN inline
#else
#define VKSPEC_FN
#endif

VKSPEC_FN uint hash32(uint x) {
  x ^= x >> 16u; x *= 0x7feb352du;
  x ^= x >> 15u; x *= 0x846ca68bu;
  x ^= x >> 16u;
  return x;
}

// The key of a position's draw. A draft model's draw at a position has the target's key
// (speculative/controller.h says why).
VKSPEC_FN uint counter_key(uvec2 seed, uint position) {
  uint h = hash32(seed.x ^ 0x9e3779b9u);
  h = hash32(h ^ seed.y ^ 0x85ebca6bu);
  return hash32(h ^ position * 0xc2b2ae35u);
}

// -log(u) for u = (k + 0.5) / 2^24, k the 24 bits (never 0 or 1): an exponential variate. The small ones,
// u near 1, become the largest noise and decide draws, and there a log's argument is near 1, where GLSL
// promises only an absolute error of 2^-21 (GPUs approximate log2 that way): so for u >= 0.5 the series of
// -log(1 - v) = 2 atanh(t), t = v / (2 - v) <= 1/3, with v = 1 - u exact; the terms past t^15 add < 2e-9.
VKSPEC_FN float exponential24(uint k) {
  if (k < 0x800000u) return -log((float(k) + 0.5f) * (1.0f / 16777216.0f));
  const float v = (float(0xffffffu - k) + 0.5f) * (1.0f / 16777216.0f);
  const float t = v / (2.0f - v), t2 = t * t;
  float s = 1.0f / 15.0f;
  s = s * t2 + 1.0f / 13.0f;
  s = s * t2 + 1.0f / 11.0f;
  s = s * t2 + 1.0f / 9.0f;
  s = s * t2 + 1.0f / 7.0f;
  s = s * t2 + 1.0f / 5.0f;
  s = s * t2 + 1.0f / 3.0f;
  s = s * t2 + 1.0f;
  return 2.0f * t * s;
}

// The Gumbel noise of `token` under a key: -log of an exponential variate. A draw at a position is the kept
// token with the largest scaled logit plus its noise (the Gumbel-max trick: exactly a draw from the
// softmax), so two distributions drawn at one position share their noise: a draft and the target that
// verifies it agree whenever their perturbed maxima fall on the same token (speculative/controller.h).
VKSPEC_FN float gumbel_noise(uint key, uint token) {
  return -log(exponential24(hash32(hash32(key ^ token * 0x165667b1u) ^ 0xd3a2646cu) >> 8u));
}

// A uniform variate in (0, 1) under a key: (k + 0.5) / 2^24 for 24 hashed bits (rejection sampling's accept
// test, spec_accept.comp), and the key of one of a position's further streams (contract.h ACCEPT_STREAM ...).
VKSPEC_FN float uniform24(uint key) {
  return (float(hash32(key ^ 0x5bd1e995u) >> 8u) + 0.5f) * (1.0f / 16777216.0f);
}
VKSPEC_FN uint stream_key(uint key, uint stream) { return hash32(key ^ stream * 0x27d4eb2fu); }

// 1 / T, by which every softmax and draw scales logits: a temperature at or below 1e-6 (greedy's limit, with a
// penalty or a draft's rows) takes 1e6 rather than a division by 0.
VKSPEC_FN float inverse_temperature(float t) { return 1.0f / max(t, 1e-6f); }

// A kept token's draw score: its logit less the row's largest, scaled, plus its noise. The draw is the kept
// token whose score beats every other's: higher, or equal with a lower id.
VKSPEC_FN float draw_score(float logit, float m, float inv_t, uint key, uint token) {
  return (logit - m) * inv_t + gumbel_noise(key, token);
}
VKSPEC_FN bool beats(float score, uint id, float best, uint best_id) {
  return score > best || (score == best && id < best_id);
}

#ifdef __cplusplus
}  // namespace vkspec::rng
#endif
#undef VKSPEC_FN
#endif
