#include "speculative/controller.h"

#include <algorithm>

namespace vkspec {

SpeculativeStats generate_speculative(LlamaModel& target, int seq, Drafter& drafter, std::vector<uint32_t>& context,
                                      const SpeculativeOptions& opts, const std::function<bool(uint32_t)>& emit) {
  SpeculativeStats stats;
  PagedKvCache& kv = target.kv();
  uint32_t g = target.argmax_id(0);   // the target's next token after the prefilled context
  while (true) {
    context.push_back(g);
    stats.tokens++;
    if (!emit(g) || context.size() >= target.n_ctx()) return stats;

    // Draft, never past the end of the context (K shrinks to 0 = plain decoding).
    const uint32_t room = target.n_ctx() - uint32_t(context.size());
    const uint32_t k_max = std::min({opts.draft_max, room, LlamaModel::kMaxBatch - 1});
    std::vector<uint32_t> drafts = k_max ? drafter.draft(context, k_max) : std::vector<uint32_t>{};
    if (drafts.size() < opts.draft_min) drafts.clear();
    stats.drafted += drafts.size();

    // Verify: one target pass over [g, d1..dK] gives the target's argmax after each of them.
    std::vector<uint32_t> batch{g};
    batch.insert(batch.end(), drafts.begin(), drafts.end());
    const uint32_t base = kv.length(seq);
    target.forward(seq, batch, Logits::All);
    stats.verify_passes++;
    size_t n_ok = 0;
    while (n_ok < drafts.size() && target.argmax_id(uint32_t(n_ok)) == drafts[n_ok]) ++n_ok;
    stats.accepted += n_ok;
    kv.truncate(seq, base + 1 + uint32_t(n_ok));   // keep g and the accepted drafts

    for (size_t i = 0; i < n_ok; ++i) {
      context.push_back(drafts[i]);
      stats.tokens++;
      if (!emit(drafts[i]) || context.size() >= target.n_ctx()) return stats;
    }
    g = target.argmax_id(uint32_t(n_ok));   // correction (first mismatch) or bonus (all accepted)
  }
}

}  // namespace vkspec
