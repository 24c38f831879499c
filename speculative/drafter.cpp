#include "speculative/drafter.h"

#include <algorithm>
#include <cmath>

namespace vkspec {

ModelDrafter::ModelDrafter(LlamaModel& draft, float p_min) : model_(draft), p_min_(p_min), seq_(draft.kv().new_sequence()) {}

ModelDrafter::~ModelDrafter() { model_.kv().free_sequence(seq_); }

uint32_t keep_drafts(const TokenChooser& chooser, uint32_t k, float p_min) {
  if (p_min <= 0.0f) return k;
  for (uint32_t i = 1; i < k; ++i)
    if (chooser.top_prob(i + 1) < p_min) return i;
  return k;
}

uint32_t ModelDrafter::draft(std::span<const uint32_t> context, uint32_t k, DraftRound& round) {
  TokenChooser& ch = round.chooser;
  const bool sampling = !ch.greedy();
  // Keep the cached prefix the context still agrees with; drop the rest (rejected drafts).
  size_t common = 0;
  while (common < cached_.size() && common < context.size() && cached_[common] == context[common]) ++common;
  if (common == context.size()) --common;   // the last context token must be run to get its logits
  model_.kv().truncate(seq_, uint32_t(common));
  cached_.resize(common);
  pending_ = 0;
  k = std::min<uint32_t>(k, model_.n_ctx() - uint32_t(context.size()));
  if (k == 0) return 0;
  const VkDeviceSize row = VkDeviceSize(model_.hparams().n_vocab) * 4;
  // Step i runs the draft over its input (step 0: the context it has not seen; then draft i, slot i) and
  // chooses draft i + 1 into slot i + 1: k steps for k drafts.
  TokenInput in = model_.write_tokens(context.subspan(common));
  uint32_t n_in = uint32_t(context.size() - common);
  for (uint32_t i = 0; i < k; ++i) {
    model_.record_forward(round.rec, seq_, in, n_in, Logits::Last);
    if (i > 0) ch.record_append_history(round.rec, i, 1, round.history_len + i - 1);
    const Slice q = sampling ? round.acceptor->q_rows().sub(i * row, row) : Slice{};
    ch.record_choice(round.rec, model_.kernels(), model_.logits_rows(), 1, i + 1, round.history_len + i,
                     context.size() + i, DeviceSampler::kStreamDraft, sampling ? &q : nullptr, p_min_ > 0);
    in = ch.input(i + 1);
    n_in = 1;
  }
  cached_.assign(context.begin(), context.end());
  pending_ = k - 1;   // drafts whose K/V the steps appended (all but the last)
  return k;
}

void ModelDrafter::round_done(std::span<const uint32_t> drafts) {
  cached_.insert(cached_.end(), drafts.begin(), drafts.begin() + std::min<size_t>(pending_, drafts.size()));
  pending_ = 0;
}

uint32_t NgramDrafter::draft(std::span<const uint32_t> context, uint32_t k, DraftRound& round) {
  const std::vector<uint32_t> drafts = propose(context, k);
  for (size_t i = 0; i < drafts.size(); ++i) round.chooser.set_token(uint32_t(i + 1), drafts[i]);
  return uint32_t(drafts.size());
}

std::vector<uint32_t> NgramDrafter::propose(std::span<const uint32_t> context, uint32_t k) const {
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
