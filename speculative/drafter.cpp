#include "speculative/drafter.h"

#include <algorithm>
#include <cmath>

namespace vkspec {

ModelDrafter::ModelDrafter(LlamaModel& draft, float p_min) : model_(draft), p_min_(p_min), seq_(draft.kv().new_sequence()) {}

ModelDrafter::~ModelDrafter() { model_.kv().free_sequence(seq_); }

std::vector<uint32_t> ModelDrafter::draft(std::span<const uint32_t> context, uint32_t k, const DraftSampling& s) {
  const bool sample = s.sampler && !s.sampler->params().greedy() && (s.device || s.q);
  // Keep the cached prefix the context still agrees with; drop the rest (rejected drafts).
  size_t common = 0;
  while (common < cached_.size() && common < context.size() && cached_[common] == context[common]) ++common;
  if (common == context.size()) --common;   // the last context token must be run to get its logits
  model_.kv().truncate(seq_, uint32_t(common));
  cached_.resize(common);
  k = std::min<uint32_t>(k, model_.n_ctx() - uint32_t(context.size()));
  std::vector<uint32_t> out;
  if (k == 0) return out;
  model_.forward(seq_, context.subspan(common), Logits::Last);
  cached_.assign(context.begin(), context.end());
  const uint32_t V = model_.hparams().n_vocab;
  std::vector<uint32_t> history;   // sampling only: the transforms' context, growing draft by draft
  if (sample) history.assign(context.begin(), context.end());
  for (uint32_t i = 0; i < k; ++i) {
    uint32_t tok = model_.argmax_id(0);
    if (sample && s.device) {   // q_i and the draw stay on the device
      const DeviceSampler::Draw d = s.device->draw_draft(i, s.sampler->params(), model_.logits_rows(), history);
      if (p_min_ > 0 && d.top_prob < p_min_ && !out.empty()) break;
      tok = d.token;
    } else if (sample) {
      // q_i after the target's transforms; the draw uses its own stream so it is independent of the
      // target's accept/resample numbers at the same position.
      Candidates c = s.sampler->distribution({model_.logits(0), V}, history);
      const double u = counter_uniform(s.sampler->params().seed ^ 0xD1B54A32D192ED03ull, history.size());
      double cum = 0;
      tok = c.ids.back();
      for (size_t j = 0; j < c.ids.size(); ++j)
        if (u < (cum += c.probs[j])) { tok = c.ids[j]; break; }
      const double top = c.probs.front();   // candidates are sorted by logit: the first is the mode
      if (p_min_ > 0 && top < p_min_ && !out.empty()) break;
      s.q->push_back(std::move(c));
    } else if (p_min_ > 0) {   // top probability of the draft's distribution
      const float* l = model_.logits(0);
      double z = 0;
      for (uint32_t v = 0; v < V; ++v) z += std::exp(double(l[v] - l[tok]));
      if (1.0 / z < p_min_ && !out.empty()) break;
    }
    out.push_back(tok);
    if (sample) history.push_back(tok);
    if (i + 1 == k) break;
    model_.forward(seq_, std::span<const uint32_t>(&out.back(), 1), Logits::Last);
    cached_.push_back(tok);
  }
  return out;
}

std::vector<uint32_t> NgramDrafter::draft(std::span<const uint32_t> context, uint32_t k, const DraftSampling&) {
  const size_t len = context.size();
  for (uint32_t n = std::min<uint32_t>(max_n_, uint32_t(len ? len - 1 : 0)); n >= min_n_ && n > 0; --n) {
    auto suffix = context.subspan(len - n);
    // most recent earlier occurrence of the suffix wins
    for (size_t start = len - n; start-- > 0;) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + long(start))) continue;
      std::vector<uint32_t> out;
      for (size_t j = start + n; j < len && out.size() < k; ++j) out.push_back(context[j]);
      if (!out.empty()) return out;
    }
  }
  return {};
}

void check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft) {
  if (target.n_vocab() != draft.n_vocab())
    throw Error("draft vocabulary has " + std::to_string(draft.n_vocab()) + " tokens, the target's " +
                std::to_string(target.n_vocab()) + ": the models must share a vocabulary");
  if (target.bos() != draft.bos() || target.eos() != draft.eos())
    throw Error("draft and target disagree on BOS/EOS ids: the models must share a vocabulary");
  for (uint32_t i = 0; i < target.n_vocab(); ++i)
    if (target.text(i) != draft.text(i) || target.type(i) != draft.type(i))
      throw Error("draft and target vocabularies differ at token " + std::to_string(i) + " ('" + target.text(i) +
                  "' vs '" + draft.text(i) + "')");
}

}  // namespace vkspec
