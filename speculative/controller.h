#pragma once
// The speculative decoding loop. Per round, recorded into one command buffer and submitted once:
//   the drafter's K steps (a draft model chooses each draft on the device into token slot i + 1, which its
//   next step embeds; n-gram drafts are written by the host into the same slots), the target's verify pass
//   over slots [g, d1..dK], and the target's own choice after each row into the verify slots, made as plain
//   decoding makes it: argmax when greedy; when sampling, a draw at the row's sequence position by the
//   Gumbel-max trick (the kept token with the largest scaled logit plus noise keyed by seed and position,
//   shaders/rng.h). The host keeps the longest prefix of drafts equal to the target's choices and the
//   target's choice after it.
// Every kernel is batch-invariant and the noise depends on the seed and position alone, so the output equals plain
// decoding token for token, greedy or sampled, whatever K, drafter or batch: lossless in the strongest
// sense. A draft model draws its draft at a position with the same noise, so it matches the target's draw
// whenever the two perturbed maxima fall on one token: probability P(argmax(log q + G) = argmax(log p + G)),
// below rejection sampling's sum min(p, q) (pycode pair, T = 0.8, the target's own text: 0.607 against 0.633),
// and exactly p(d) for a deterministic draft d (n-gram), as rejection sampling gives. This is "drafter-
// invariant speculative decoding" (Daliri, Musco, Suresh, arXiv 2408.07978): at least (1 - TV) / (1 + TV),
// which they show no scheme whose output ignores the drafter can beat in the worst case. What that buys:
// verification needs no probability rows or accept kernel, and a sampled sequence's tokens do not depend on
// its K, so sampled rounds take timed K and batch like greedy ones (docs/PERFORMANCE.md measured both).
// The host reads {drafts, choices} once per round and truncates the target's KV.
// SpecSampling::Rejection (sampled requests) replaces the target's own draws with rejection sampling's verdict
// (TokenChooser::rejection, shaders/spec_accept.comp): more drafts kept, tokens that depend on the drafts. The
// verify slots then hold the accepted drafts and the token after them, so finish() walks them alike.
#include <array>
#include <functional>
#include <span>
#include <vector>

#include "runtime/token_choice.h"
#include "speculative/draft_policy.h"
#include "speculative/drafter.h"

namespace vkspec {

// Which rounds draft token trees (verified in one pass) instead of chains:
//   Off:  none.
//   Auto: prompt lookup's rounds where earlier matches continue differently (NgramDrafter::propose_tree), and
//         a draft model's trees (speculative/draft_tree.h: each node's draw and runner-up, the nodes whose
//         chance of being reached pays for their verify rows, DraftPolicy::node_value_min) where the device is
//         a GPU (a verify pass of 16 rows costs about what one of 6 costs there; on a CPU device it does not).
//   Wide: as Auto, and a draft model's trees on every device, as many nodes as a tree may have.
enum class DraftTree : uint8_t { Off, Auto, Wide };

struct SpeculativeOptions {
  uint32_t draft_max = 5;   // K
  uint32_t draft_min = 0;   // rounds with fewer drafted tokens decode plainly
  // Adaptive K (speculative/draft_policy.h): the K in 0..draft_max with the best expected tokens per second
  // from the measured acceptance, draft and verify costs (GPU timestamps around the round's parts; modeled
  // costs, weight bytes, without them). The tokens do not depend on K. Otherwise always draft_max.
  DraftLengthPolicy policy = DraftLengthPolicy::Fixed;
  // K from modeled costs even when the device has timestamps (a batch shares its passes between sequences,
  // so a sequence's own draft and verify times cannot be measured).
  bool timing_free = false;
  // Token trees (runtime/token_tree.h) where can_draft_tree allows: DraftTree says which.
  DraftTree tree = DraftTree::Auto;
};

// The one rule for when a round may draft a tree: its verify rows' choices must not depend on the drafts
// before them along a chain (a penalty's window, a constraint's mask). Its verdict is the walk over the
// target's choices, or rejection sampling's over siblings in turn (spec_accept.comp).
inline bool can_draft_tree(const SamplingParams& p) { return !p.penalized() && !p.constrained(); }

struct SpeculativeStats {
  uint64_t drafted = 0, accepted = 0, verify_passes = 0, tokens = 0, tree_rounds = 0;
  // per depth d + 1 (a chain's draft d + 1, a tree's nodes at depth d + 1): rounds that verified a draft there,
  // and rounds that accepted one there
  std::array<uint64_t, LlamaModel::kMaxBatch> drafted_at{}, accepted_at{};
  double gpu_s = 0;   // device time of the rounds (timestamps; 0 without them)
  double acceptance_rate() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
  double tokens_per_verify() const { return verify_passes ? double(tokens) / double(verify_passes) : 0.0; }
  SpeculativeStats& operator+=(const SpeculativeStats& o) {
    drafted += o.drafted, accepted += o.accepted, verify_passes += o.verify_passes, tokens += o.tokens;
    tree_rounds += o.tree_rounds;
    for (size_t d = 0; d < drafted_at.size(); ++d) drafted_at[d] += o.drafted_at[d], accepted_at[d] += o.accepted_at[d];
    gpu_s += o.gpu_s;
    return *this;
  }
};

// One protocol, one round at a time (a caller bounds the work it does at a time: the C API's vkspec_step):
//   1. start() emits the target's last choice g (false: the sequence has ended);
//   2. drafts_planned() picks K (0: a plain pass) and sets slot 0 and the penalty history;
//   3. the drafter's draft() writes host drafts, or leaves them to a draft model's steps, which the caller
//      records (ModelDrafter::record_steps alone, record_batched_drafts for a batch);
//   4. drafts_recorded(k) gives the rows to verify, [g, d1..dk], read from verify_input();
//   5. the caller records the target's pass over them (Logits::All) and record_verify() on their logits rows;
//   6. after the one submission, finish() reads the verdict, truncates the KV and emits the accepted drafts
//      (false: the sequence has ended).
// round() runs 1-6 for one sequence on its own recorder: submit_round() 1-5 and submits (false: the sequence
// ended at step 1, nothing submitted), collect_round() 6 once the recorder's wait says the device is done; a
// batch (engine/batch_step.cpp) runs the same steps for every sequence into one submission.
class SpeculativeDecoder {
 public:
  using Emit = std::function<bool(uint32_t token, bool from_draft)>;
  SpeculativeDecoder(LlamaModel& target, int seq, Drafter& drafter, TokenChooser& chooser, Recorder& rec,
                     std::vector<uint32_t>& context, const SpeculativeOptions& opts, Emit emit);
  bool round();
  bool submit_round();
  bool collect_round();
  double last_round_seconds() const { return last_round_s_; }   // device time; -1 without timestamps
  const SpeculativeStats& stats() const { return stats_; }

  bool start();
  // sharing: how many sequences' rows share the pass, and costs what the batch measured its passes to cost
  // (a sequence's K is priced at its share of it: DraftPolicy::share_passes).
  uint32_t drafts_planned(uint32_t sharing = 1, const std::optional<SharedCosts>& costs = std::nullopt);
  uint32_t drafts_recorded(uint32_t k);
  DraftRound& draft_round() { return round_; }
  Drafter& drafter() { return drafter_; }
  TokenInput verify_input() const { return chooser_.input(0); }
  // The verify pass's tree (its rows are the nodes), or null for a chain.
  const TokenTree* verify_tree() const { return tree_ ? &round_.tree : nullptr; }
  uint32_t history_len() const { return history_len_; }   // the penalty history drafts_planned() set (0: none)
  void record_verify(const Slice& target_logits);
  bool finish(double draft_s = -1, double verify_s = -1, double catch_up_s = -1);

 private:
  uint32_t record_drafts();   // steps 2-4 for this sequence alone
  void observe_runner_ups(const DraftTreeShape& shape, std::span<const uint8_t> path, uint32_t accepted);
  LlamaModel& target_;
  int seq_;
  Drafter& drafter_;
  TokenChooser& chooser_;
  Recorder& rec_;
  std::vector<uint32_t>& context_;
  SpeculativeOptions opts_;
  Emit emit_;
  DraftPolicy policy_;
  uint32_t g_;                      // the target's latest choice, emitted at the start of the next round
  std::vector<uint32_t> drafts_;
  uint32_t k_ = 0, history_len_ = 0, base_ = 0;   // of the round being recorded
  bool tree_ = false;                             // its drafts are a tree (round_.tree), not a chain
  uint32_t m_draft_ = 0, m_verify_ = 0, m_end_ = 0, rows_ = 0;   // its marks and verify rows (submit_round)
  double last_round_s_ = -1;
  DraftRound round_;
  SpeculativeStats stats_;
};

// Generates after `context`, which is prefilled in `seq`; the target's choice after it is in the chooser's
// slot 0 (TokenChooser::start and a prefill with record_choice into slot 0). `emit` receives each accepted
// token in order, and whether it was a verified draft, and returns false to stop (EOS, n reached). `rec` is
// the caller's recorder.
SpeculativeStats generate_speculative(LlamaModel& target, int seq, Drafter& drafter, TokenChooser& chooser,
                                      Recorder& rec, std::vector<uint32_t>& context, const SpeculativeOptions& opts,
                                      const std::function<bool(uint32_t token, bool from_draft)>& emit);
inline SpeculativeStats generate_speculative(LlamaModel& target, int seq, Drafter& drafter, TokenChooser& chooser,
                                             Recorder& rec, std::vector<uint32_t>& context,
                                             const SpeculativeOptions& opts, const std::function<bool(uint32_t)>& emit) {
  return generate_speculative(target, seq, drafter, chooser, rec, context, opts,
                              [&](uint32_t t, bool) { return emit(t); });
}

}  // namespace vkspec
