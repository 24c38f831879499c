#pragma once
// Host-side sampling over one row of logits, in llama.cpp's default order: logit bias -> penalties
// (repetition, then frequency and presence) -> top-k -> top-p -> min-p -> temperature -> draw: the
// reference the device sampler (sample_rows.comp) is tested against. Draws use the device's counter-based
// generator (runtime/rng.h), so a seed gives the reference the device's noise.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace vkspec {

struct LogitBias {
  uint32_t token;
  float bias;
};

struct SamplingParams {
  static constexpr size_t kMaxLogitBias = 1024;      // entries of logit_bias
  static constexpr float kLogitBiasBound = 100.0f;   // a bias lies in [-bound, bound] (OpenAI's range)
  float temperature = 0.8f;    // <= 0: greedy
  int top_k = 40;              // <= 0: off
  float top_p = 0.95f;         // >= 1: off
  float min_p = 0.05f;         // <= 0: off
  float repeat_penalty = 1.0f; // 1: off
  float frequency_penalty = 0.0f;   // subtracted once per occurrence in the window (0: off)
  float presence_penalty = 0.0f;    // subtracted once per distinct token in the window (0: off)
  int repeat_last_n = 64;           // the penalties' window: the context's last tokens; -1: all of it
  std::vector<LogitBias> logit_bias;   // added to the logits first, in this order (duplicates add up)
  uint64_t seed = 0;
  // Constrained generation: each choice is limited to the tokens that continue the text in JSON mode
  // (loader/json_grammar.h: one JSON object) or in a GBNF grammar (loader/gbnf.h: its text), by a mask the
  // host writes before it (TokenChooser::start's constraint; DeviceSampler::mask_words). At most one of them.
  bool json_object = false;
  std::string grammar;
  // A lazy grammar (llama.cpp's; tool calls with tool_choice "auto"): GBNF of the text that starts the
  // grammar's hold (loader/gbnf.h TriggeredGbnfConstraint); empty: the grammar holds from the first token.
  std::string grammar_trigger;
  bool constrained() const { return json_object || !grammar.empty(); }
  bool greedy() const { return temperature <= 0.f; }
  // A penalty applies (the one place this rule is written).
  bool penalized() const {
    return (repeat_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f) && repeat_last_n != 0;
  }
  // The logits are changed before the cuts (a bias, a penalty or a mask): greedy then needs the device sampler.
  bool adjusts_logits() const { return penalized() || !logit_bias.empty() || constrained(); }
};


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
