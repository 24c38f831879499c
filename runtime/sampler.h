#pragma once
// Host-side sampling over one row of logits, in llama.cpp's default order: repetition penalty ->
// top-k -> top-p -> min-p -> temperature -> draw. Random numbers come from a counter-based generator
// keyed by (seed, position), so the same seed gives the same tokens however the work is batched.
#include <cstdint>
#include <span>
#include <vector>

namespace vkspec {

struct SamplingParams {
  float temperature = 0.8f;    // <= 0: greedy
  int top_k = 40;              // <= 0: off
  float top_p = 0.95f;         // >= 1: off
  float min_p = 0.05f;         // <= 0: off
  float repeat_penalty = 1.0f; // 1: off
  int repeat_last_n = 64;
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.f; }
};

// Uniform double in [0, 1) from (seed, counter): splitmix64 of the pair.
double counter_uniform(uint64_t seed, uint64_t counter);

struct Candidates {
  std::vector<uint32_t> ids;
  std::vector<float> probs;   // normalized over ids
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p) {}
  const SamplingParams& params() const { return p_; }

  // The distribution the next token is drawn from, after every transform. `history` is the context
  // (prompt + generated) the repetition penalty looks at.
  Candidates distribution(std::span<const float> logits, std::span<const uint32_t> history) const;
  // Draws the token at sequence position `position` (greedy: argmax of the logits).
  uint32_t sample(std::span<const float> logits, std::span<const uint32_t> history, uint64_t position) const;

 private:
  SamplingParams p_;
};

uint32_t argmax(std::span<const float> logits);   // lowest index among ties

}  // namespace vkspec
