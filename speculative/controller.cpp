#include "speculative/controller.h"

#include <algorithm>


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

SpeculativeDecoder::SpeculativeDecoder(LlamaModel& target, int seq, Drafter& drafter, TokenChooser& chooser, Recorder& rec,
                                       std::vector<uint32_t>& context, const SpeculativeOptions& opts, Emit emit)
    : target_(target), seq_(seq), drafter_(drafter), chooser_(chooser), rec_(rec), context_(context), opts_(opts),
      emit_(std::move(emit)), sampling_(!chooser.greedy()),
      // sampled runs stay reproducible: K from the acceptance and modeled costs, not timings
      policy_(opts.draft_max, opts.adaptive, /*timing_free=*/sampling_ || !rec.can_mark(), drafter.relative_cost(target)),
      g_(chooser.token(0)) {   // the target's choice after the prefilled context
  if (sampling_ && !opts.acceptor) throw Error("internal: sampling verification needs a SpecAcceptor");
  drafts_.reserve(LlamaModel::kMaxBatch);
}

bool SpeculativeDecoder::round() {
  std::vector<uint32_t>& context = context_;
  LlamaModel& target = target_;
  TokenChooser& chooser = chooser_;
  Recorder& rec = rec_;
  SpecAcceptor* acceptor = opts_.acceptor;
  PagedKvCache& kv = target.kv();
  context.push_back(g_);
  stats_.tokens++;
  if (!emit_(g_, false) || context.size() >= target.n_ctx()) return false;

  // K is chosen before recording; never past the end of the context (K = 0: a plain decoding pass).
  const uint32_t room = target.n_ctx() - uint32_t(context.size());
  uint32_t k_max = std::min({policy_.next_k(), room, LlamaModel::kMaxBatch - 1});
  if (k_max < opts_.draft_min) k_max = 0;
  rec.begin();
  chooser.set_token(0, g_);
  const uint32_t history_len = chooser.mode() == ChoiceMode::Device ? chooser.set_history(context) : 0;
  const uint32_t m_draft = rec.mark();
  DraftRound round{rec, chooser, acceptor, history_len};
  uint32_t k = k_max ? drafter_.draft(context, k_max, round) : 0;
  if (k < opts_.draft_min) k = 0;   // a short n-gram proposal: decode plainly

  // Verify: one target pass over [g, d1..dK] gives the target's distribution after each of them.
  const uint32_t m_verify = rec.mark();
  const uint32_t base = kv.length(seq_);
  target.record_forward(rec, seq_, chooser.input(0), k + 1, Logits::All);
  if (sampling_) {
    acceptor->record_verify(rec, chooser.device_params(), target.logits_rows(), context, chooser.slot_range(1, k + 1),
                            k, drafter_.p_min(), /*one_hot_q=*/!drafter_.samples());   // deterministic drafts: q one-hot
  } else {   // greedy: the target's own choice after each row
    chooser.record_append_history(rec, 1, k, history_len);
    chooser.record_choice(rec, target.kernels(), target.logits_rows(), k + 1, TokenChooser::kVerifySlot,
                          history_len, context.size(), DeviceSampler::kStreamPlain);
  }
  const uint32_t m_end = rec.mark();
  rec.submit_and_wait();   // the round's one wait
  stats_.verify_passes++;

  std::vector<uint32_t>& drafts = drafts_;
  drafts.resize(k);
  for (uint32_t i = 0; i < k; ++i) drafts[i] = chooser.token(i + 1);
  drafter_.round_done(drafts);
  const uint32_t kept = keep_drafts(chooser, k, drafter_.p_min());
  const std::span<const uint32_t> verified(drafts.data(), kept);
  Verdict v;
  if (!sampling_) {
    v = verify_greedy(chooser, verified);
  } else {
    const SpecAcceptor::Outcome o = acceptor->result();
    v = {o.accepted, o.next};
  }
  if (v.next >= target.hparams().n_vocab) TokenChooser::throw_non_finite(v.next);
  if (v.accepted > kept) throw Error("internal: verification accepted more drafts than it was given");
  stats_.drafted += kept;
  stats_.accepted += v.accepted;
  policy_.observe(kept, v.accepted, rec.seconds_between(m_draft, m_verify), rec.seconds_between(m_verify, m_end));
  stats_.gpu_s += std::max(0.0, rec.seconds_between(m_draft, m_end));
  kv.truncate(seq_, base + 1 + v.accepted);   // keep g and the accepted drafts

  for (uint32_t i = 0; i < v.accepted; ++i) {
    context.push_back(drafts[i]);
    stats_.tokens++;
    if (!emit_(drafts[i], true) || context.size() >= target.n_ctx()) return false;
  }
  g_ = v.next;
  return true;
}

SpeculativeStats generate_speculative(LlamaModel& target, int seq, Drafter& drafter, TokenChooser& chooser,
                                      Recorder& rec, std::vector<uint32_t>& context, const SpeculativeOptions& opts,
                                      const std::function<bool(uint32_t, bool)>& emit) {
  SpeculativeDecoder d(target, seq, drafter, chooser, rec, context, opts, emit);
  while (d.round()) {
  }
  return d.stats();
}

}  // namespace vkspec
