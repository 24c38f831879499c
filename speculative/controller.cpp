#include "speculative/controller.h"

#include <algorithm>
#include <chrono>

#include "speculative/draft_policy.h"

namespace vkspec {

namespace {
// Sampling verification: the target's distributions p_0..p_k (transforms applied with the context growing
// draft by draft), the draft's q_i, and the accept/reject chain in the fused kernel. With device transforms
// the rows never leave the device; otherwise the host computes them (top-k off or above the device's cap).
SpecAcceptor::Outcome verify_sampled(LlamaModel& target, SpecAcceptor& acceptor, const Sampler& sampler, bool on_device,
                                     bool q_written, const std::vector<uint32_t>& context,
                                     const std::vector<uint32_t>& drafts, const std::vector<Candidates>& q) {
  const uint32_t k = uint32_t(drafts.size()), V = target.hparams().n_vocab;
  if (on_device) {
    if (!q_written)   // deterministic drafts: q is one-hot at each draft
      for (uint32_t i = 0; i < k; ++i) acceptor.set_row(acceptor.q_row(i), Candidates{}, drafts[i]);
    return acceptor.verify(sampler.params(), target.logits_rows(), context, drafts);
  }
  std::vector<uint32_t> history = context;
  for (uint32_t i = 0; i <= k; ++i) {
    acceptor.set_row(acceptor.p_row(i), sampler.distribution({target.logits(i), V}, history));
    if (i == k) break;
    acceptor.set_row(acceptor.q_row(i), q.empty() ? Candidates{} : q[i], drafts[i]);   // empty: one-hot
    acceptor.tokens()[i] = drafts[i];
    history.push_back(drafts[i]);
  }
  return acceptor.run(k, sampler.params().seed, uint32_t(context.size()))[0];
}
}  // namespace

SpeculativeStats generate_speculative(LlamaModel& target, int seq, Drafter& drafter, std::vector<uint32_t>& context,
                                      const SpeculativeOptions& opts, const std::function<bool(uint32_t)>& emit) {
  const Sampler* sampler = opts.sampler;
  const bool sampling = sampler && !sampler->params().greedy();
  if (sampling && !opts.acceptor) throw Error("internal: sampling verification needs a SpecAcceptor");
  const uint32_t V = target.hparams().n_vocab;
  // Greedy choice after logits row `row` (the repetition penalty, when on, is applied on the host).
  const bool penalized = sampler && sampler->params().repeat_penalty != 1.0f;
  auto greedy_pick = [&](uint32_t row, const std::vector<uint32_t>& history) {
    return penalized ? sampler->sample({target.logits(row), V}, history, history.size()) : target.argmax_id(row);
  };
  SpeculativeStats stats;
  PagedKvCache& kv = target.kv();
  // sampled runs stay reproducible: K from the acceptance and modeled costs, not timings
  DraftPolicy policy(opts.draft_max, opts.adaptive, /*timing_free=*/sampling, drafter.relative_cost(target));
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  const bool on_device = sampling && DeviceSampler::supports(sampler->params(), V);
  // the target's next token after the prefilled context (drawn exactly as plain sampling draws it)
  uint32_t g = on_device  ? opts.acceptor->device_sampler().sample(sampler->params(), target.logits_rows().sub(0, V * 4ull),
                                                                   context, context.size())
               : sampling ? sampler->sample({target.logits(0), V}, context, context.size())
                          : greedy_pick(0, context);
  while (true) {
    context.push_back(g);
    stats.tokens++;
    if (!emit(g) || context.size() >= target.n_ctx()) return stats;

    // Draft, never past the end of the context (K shrinks to 0 = plain decoding).
    const uint32_t room = target.n_ctx() - uint32_t(context.size());
    const uint32_t k_max = std::min({policy.next_k(), room, LlamaModel::kMaxBatch - 1});
    const auto t0 = clock::now();
    std::vector<Candidates> q;
    const DraftSampling how{sampler, on_device ? opts.acceptor : nullptr, on_device ? nullptr : &q};
    std::vector<uint32_t> drafts = k_max ? drafter.draft(context, k_max, how) : std::vector<uint32_t>{};
    if (drafts.size() < opts.draft_min) drafts.clear();
    stats.drafted += drafts.size();

    // Verify: one target pass over [g, d1..dK] gives the target's distribution after each of them.
    std::vector<uint32_t> batch{g};
    batch.insert(batch.end(), drafts.begin(), drafts.end());
    const auto t1 = clock::now();
    const uint32_t base = kv.length(seq);
    target.forward(seq, batch, Logits::All);
    stats.verify_passes++;
    size_t n_ok = 0;
    uint32_t next = 0;
    if (sampling) {
      const auto o = verify_sampled(target, *opts.acceptor, *sampler, on_device, drafter.samples(), context, drafts, q);
      n_ok = o.accepted;
      next = o.next;
    } else {   // exact match against the target's own choice
      std::vector<uint32_t> history;   // the penalty's context, grown draft by draft; unused without a penalty
      if (penalized) history = context;
      while (n_ok < drafts.size() && greedy_pick(uint32_t(n_ok), history) == drafts[n_ok]) {
        if (penalized) history.push_back(drafts[n_ok]);
        ++n_ok;
      }
      next = greedy_pick(uint32_t(n_ok), history);   // correction (first mismatch) or bonus (all accepted)
    }
    stats.accepted += n_ok;
    policy.observe(uint32_t(drafts.size()), uint32_t(n_ok), seconds(t0, t1), seconds(t1, clock::now()));
    kv.truncate(seq, base + 1 + uint32_t(n_ok));   // keep g and the accepted drafts

    for (size_t i = 0; i < n_ok; ++i) {
      context.push_back(drafts[i]);
      stats.tokens++;
      if (!emit(drafts[i]) || context.size() >= target.n_ctx()) return stats;
    }
    g = next;
  }
}

}  // namespace vkspec
