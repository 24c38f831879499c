#pragma once
// Host-side sampling over one row of logits, in llama.cpp's default order: logit bias -> penalties
// (repetition, then frequency and presence) -> top-k -> top-p -> min-p -> temperature -> draw: the
// reference the device sampler (sample_rows.comp) is tested against. Draws use the device's counter-based
// generator (shaders/rng.h), so a seed gives the reference the device's noise.
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampling_params.h"

namespace vkspec {

struct Candidates {
  std::vector<uint32_t> ids;
  std::vector<float> probs;   // normalized over ids
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p) {}
  const SamplingParams& params() const { return p_; }

  // The distribution the next token is drawn from, after every transform. `history` is the context
  // (prompt + generated) the penalties look at.
  Candidates distribution(std::span<const float> logits, std::span<const uint32_t> history) const;
  // Draws the token at sequence position `position` (greedy: argmax of the logits) by the Gumbel-max trick:
  // the kept token with the largest (l - m) / T + rng::gumbel_noise(key of (seed, position), token),
  // the lower id on ties (as sample_rows.comp).
  uint32_t sample(std::span<const float> logits, std::span<const uint32_t> history, uint64_t position) const;
  // The draw's score of each kept token (`kept`: distribution() of the same row), in its order.
  std::vector<float> draw_scores(std::span<const float> logits, std::span<const uint32_t> history,
                                 const Candidates& kept, uint64_t position) const;

 private:
  SamplingParams p_;
};

uint32_t argmax(std::span<const float> logits);   // lowest index among ties

}  // namespace vkspec
