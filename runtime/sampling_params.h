#pragma once
// A request's sampling settings, applied in llama.cpp's default order: logit bias -> penalties (repetition,
// then frequency and presence) -> top-k -> top-p -> min-p -> temperature -> draw (the device sampler,
// runtime/device_sampler.h; its host reference is tests/host_sampler.h).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vkspec {

struct LogitBias {
  uint32_t token;
  float bias;
};

// How a sampled request's drafts are verified (named by spec_sampling_name: "coupled", "rejection").
//   Coupled: the target's own draw at each position (Gumbel-max noise keyed by seed and position), which a
//            draft matches or not: the tokens are exactly those of sampling without speculation.
//   Rejection: Leviathan et al.'s rejection sampling (accept d with probability min(1, p(d) / q(d)), else draw
//            from norm(max(0, p - q))): the same distribution, at least the coupled mode's acceptance, but the
//            tokens depend on the drafts (runtime/token_choice.h).
enum class SpecSampling : uint8_t { Coupled, Rejection };
inline const char* spec_sampling_name(SpecSampling s) { return s == SpecSampling::Rejection ? "rejection" : "coupled"; }
inline bool parse_spec_sampling(std::string_view name, SpecSampling& out) {
  for (SpecSampling s : {SpecSampling::Coupled, SpecSampling::Rejection})
    if (name == spec_sampling_name(s)) return out = s, true;
  return false;
}

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
  // (constrain/json_grammar.h: one JSON object) or in a GBNF grammar (constrain/gbnf.h: its text), by a mask the
  // host writes before it (TokenChooser::start's constraint; DeviceSampler::mask_words). At most one of them.
  bool json_object = false;
  std::string grammar;
  // A lazy grammar (llama.cpp's; tool calls with tool_choice "auto"): GBNF of the text that starts the
  // grammar's hold (constrain/gbnf.h TriggeredGbnfConstraint); empty: the grammar holds from the first token.
  std::string grammar_trigger;
  SpecSampling spec_sampling = SpecSampling::Coupled;   // only sampled requests that speculate differ
  bool constrained() const { return json_object || !grammar.empty(); }
  bool greedy() const { return temperature <= 0.f; }
  // A penalty applies (the one place this rule is written).
  bool penalized() const {
    return (repeat_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f) && repeat_last_n != 0;
  }
  // The logits are changed before the cuts (a bias, a penalty or a mask): greedy then needs the device sampler.
  bool adjusts_logits() const { return penalized() || !logit_bias.empty() || constrained(); }
};

}  // namespace vkspec
