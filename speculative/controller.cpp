#include "speculative/controller.h"

#include <algorithm>

#include "speculative/draft_policy.h"

namespace vkspec {

namespace {
struct Verdict {
  uint32_t accepted = 0, next = 0;
};

// Greedy: the longest prefix of drafts equal to the target's own choices (verify slots), and the target's
// choice after it (the correction at the first mismatch, or the bonus token when all are kept).
Verdict verify_greedy(const TokenChooser& ch, std::span<const uint32_t> drafts) {
  Verdict v;
  while (v.accepted < drafts.size() && ch.token(TokenChooser::kVerifySlot + v.accepted) == drafts[v.accepted])
    ++v.accepted;
  v.next = ch.token(TokenChooser::kVerifySlot + v.accepted);
  return v;
}

}  // namespace

SpeculativeStats generate_speculative(LlamaModel& target, int seq, Drafter& drafter, TokenChooser& chooser,
                                      Recorder& rec, std::vector<uint32_t>& context, const SpeculativeOptions& opts,
                                      const std::function<bool(uint32_t, bool)>& emit) {
  const bool sampling = !chooser.greedy();
  SpecAcceptor* acceptor = opts.acceptor;
  if (sampling && !acceptor) throw Error("internal: sampling verification needs a SpecAcceptor");
  const ChoiceMode mode = chooser.mode();
  const uint32_t V = target.hparams().n_vocab;
  // sampled runs stay reproducible: K from the acceptance and modeled costs, not timings
  DraftPolicy policy(opts.draft_max, opts.adaptive, /*timing_free=*/sampling || !rec.can_mark(),
                     drafter.relative_cost(target));
  PagedKvCache& kv = target.kv();
  SpeculativeStats stats;
  std::vector<uint32_t> drafts;
  drafts.reserve(LlamaModel::kMaxBatch);
  uint32_t g = chooser.token(0);   // the target's choice after the prefilled context
  while (true) {
    context.push_back(g);
    stats.tokens++;
    if (!emit(g, false) || context.size() >= target.n_ctx()) return stats;

    // K is chosen before recording; never past the end of the context (K = 0: a plain decoding pass).
    const uint32_t room = target.n_ctx() - uint32_t(context.size());
    uint32_t k_max = std::min({policy.next_k(), room, LlamaModel::kMaxBatch - 1});
    if (k_max < opts.draft_min) k_max = 0;
    rec.begin();
    chooser.set_token(0, g);
    const uint32_t history_len = mode == ChoiceMode::Device ? chooser.set_history(context) : 0;
    const uint32_t m_draft = rec.mark();
    DraftRound round{rec, chooser, acceptor, history_len};
    uint32_t k = k_max ? drafter.draft(context, k_max, round) : 0;
    if (k < opts.draft_min) k = 0;   // a short n-gram proposal: decode plainly

    // Verify: one target pass over [g, d1..dK] gives the target's distribution after each of them.
    const uint32_t m_verify = rec.mark();
    const uint32_t base = kv.length(seq);
    target.record_forward(rec, seq, chooser.input(0), k + 1, Logits::All);
    if (sampling) {
      acceptor->record_verify(rec, chooser.device_params(), target.logits_rows(), context,
                              chooser.slot_range(1, k + 1), k, drafter.p_min(),
                              /*one_hot_q=*/!drafter.samples());   // deterministic drafts: q one-hot at each
    } else {   // greedy: the target's own choice after each row
      chooser.record_append_history(rec, 1, k, history_len);
      chooser.record_choice(rec, target.kernels(), target.logits_rows(), k + 1, TokenChooser::kVerifySlot,
                            history_len, context.size(), DeviceSampler::kStreamPlain);
    }
    const uint32_t m_end = rec.mark();
    rec.submit_and_wait();   // the round's one wait
    stats.verify_passes++;

    drafts.resize(k);
    for (uint32_t i = 0; i < k; ++i) drafts[i] = chooser.token(i + 1);
    drafter.round_done(drafts);
    const uint32_t kept = keep_drafts(chooser, k, drafter.p_min());
    const std::span<const uint32_t> verified(drafts.data(), kept);
    Verdict v;
    if (!sampling) {
      v = verify_greedy(chooser, verified);
    } else {
      const SpecAcceptor::Outcome o = acceptor->result();
      v = {o.accepted, o.next};
    }
    if (v.next >= V) TokenChooser::throw_non_finite(v.next);
    if (v.accepted > kept) throw Error("internal: verification accepted more drafts than it was given");
    stats.drafted += kept;
    stats.accepted += v.accepted;
    policy.observe(kept, v.accepted, rec.seconds_between(m_draft, m_verify), rec.seconds_between(m_verify, m_end));
    stats.gpu_s += std::max(0.0, rec.seconds_between(m_draft, m_end));
    kv.truncate(seq, base + 1 + v.accepted);   // keep g and the accepted drafts

    for (uint32_t i = 0; i < v.accepted; ++i) {
      context.push_back(drafts[i]);
      stats.tokens++;
      if (!emit(drafts[i], true) || context.size() >= target.n_ctx()) return stats;
    }
    g = v.next;
  }
}

}  // namespace vkspec
