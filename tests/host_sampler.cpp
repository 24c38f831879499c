#include "tests/host_sampler.h"

#include "runtime/rng.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <map>

namespace vkspec {

uint32_t argmax(std::span<const float> logits) {
  return uint32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// The logits the cuts see: the logit bias added (llama_sampler_logit_bias, llama.cpp's first sampler), then
// llama.cpp's penalties (llama_sampler_penalties), once per distinct token among the last repeat_last_n of
// the history: the repetition penalty divides a positive logit and multiplies a negative one, then
// frequency_penalty per occurrence and presence_penalty are subtracted. The frequency term is summed
// occurrence by occurrence where llama.cpp multiplies by the count: sample_rows.comp's arithmetic, which
// no device can contract into a fused multiply-add (the two differ only by rounding).
static std::vector<float> adjusted(const SamplingParams& p, std::span<const float> logits,
                                   std::span<const uint32_t> history) {
  std::vector<float> l(logits.begin(), logits.end());
  for (const LogitBias& b : p.logit_bias)
    if (b.token < l.size()) l[b.token] += b.bias;
  if (p.penalized()) {
    size_t from = p.repeat_last_n < 0 || size_t(p.repeat_last_n) >= history.size() ? 0 : history.size() - size_t(p.repeat_last_n);
    std::map<uint32_t, uint32_t> count;
    for (size_t i = from; i < history.size(); ++i) ++count[history[i]];
    for (const auto& [id, c] : count) {
      if (id >= l.size()) continue;
      const float v = l[id] > 0 ? l[id] / p.repeat_penalty : l[id] * p.repeat_penalty;
      float frequency = 0.0f;
      for (uint32_t k = 0; k < c; ++k) frequency += p.frequency_penalty;
      l[id] = v - (frequency + p.presence_penalty);
    }
  }
  return l;
}

Candidates Sampler::distribution(std::span<const float> logits, std::span<const uint32_t> history) const {
  const uint32_t n = uint32_t(logits.size());
  std::vector<float> l = adjusted(p_, logits, history);
  std::vector<uint32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0u);
  // Sort by logit (descending, ties by id) so every cut below is deterministic.
  auto by_logit = [&](uint32_t a, uint32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  size_t keep = n;
  if (p_.top_k > 0 && size_t(p_.top_k) < n) {
    keep = size_t(p_.top_k);
    std::partial_sort(ids.begin(), ids.begin() + long(keep), ids.end(), by_logit);
  } else {
    std::sort(ids.begin(), ids.end(), by_logit);
  }
  ids.resize(keep);
  auto softmax = [&](float inv_t) {
    std::vector<double> p(ids.size());
    double m = l[ids[0]] * inv_t, z = 0;
    for (size_t i = 0; i < ids.size(); ++i) z += p[i] = std::exp(double(l[ids[i]]) * inv_t - m);
    for (auto& x : p) x /= z;
    return p;
  };
  if (p_.top_p < 1.0f) {
    auto p = softmax(1.0f);
    double cum = 0;
    size_t k = 0;
    while (k < ids.size()) {
      cum += p[k++];
      if (cum >= p_.top_p) break;
    }
    ids.resize(std::max<size_t>(k, 1));
  }
  if (p_.min_p > 0.0f) {
    auto p = softmax(1.0f);
    const double cut = p[0] * p_.min_p;
    size_t k = 1;
    while (k < ids.size() && p[k] >= cut) ++k;
    ids.resize(k);
  }
  auto p = softmax(rng::inverse_temperature(p_.temperature));
  Candidates c;
  c.ids = std::move(ids);
  c.probs.assign(p.begin(), p.end());
  return c;
}

std::vector<float> Sampler::draw_scores(std::span<const float> logits, std::span<const uint32_t> history,
                                        const Candidates& kept, uint64_t position) const {
  // sample_rows.comp's float arithmetic; its log differs in the last bits (GLSL's is not correctly rounded)
  const std::vector<float> l = adjusted(p_, logits, history);
  const uint32_t key = counter_key(p_.seed, uint32_t(position));
  const float m = l[kept.ids[0]], inv_t = rng::inverse_temperature(p_.temperature);
  std::vector<float> scores(kept.ids.size());
  for (size_t i = 0; i < kept.ids.size(); ++i) scores[i] = rng::draw_score(l[kept.ids[i]], m, inv_t, key, kept.ids[i]);
  return scores;
}

uint32_t Sampler::sample(std::span<const float> logits, std::span<const uint32_t> history, uint64_t position) const {
  if (p_.greedy()) return argmax(adjusted(p_, logits, history));
  const Candidates c = distribution(logits, history);
  const std::vector<float> scores = draw_scores(logits, history, c, position);
  size_t pick = 0;
  for (size_t i = 1; i < scores.size(); ++i)
    if (rng::beats(scores[i], c.ids[i], scores[pick], c.ids[pick])) pick = i;
  return c.ids[pick];
}

}  // namespace vkspec
