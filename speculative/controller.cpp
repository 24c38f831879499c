#include "speculative/controller.h"

#include <algorithm>
#include <array>
#include <cstdio>


namespace vkspec {

namespace {
struct Verdict {
  uint32_t accepted = 0, next = 0;
  std::array<uint8_t, TokenTree::kMaxDepth + 1> path{};   // a tree's accepted nodes by depth (path[0]: the root)
};

// The longest prefix of drafts equal to the target's own choices (verify slots), and the target's choice
// after it (the correction at the first mismatch, or the bonus token when all are kept).
Verdict verify(const TokenChooser& ch, std::span<const uint32_t> drafts) {
  Verdict v;
  while (v.accepted < drafts.size() && ch.token(TokenChooser::kVerifySlot + v.accepted) == drafts[v.accepted])
    ++v.accepted;
  v.next = ch.token(TokenChooser::kVerifySlot + v.accepted);
  return v;
}

// The same over a tree: from the root, the child whose draft (drafts[node - 1]) is the target's choice
// after its parent, as long as there is one; then the target's choice after the last accepted node.
Verdict walk_tree(const TokenChooser& ch, const TokenTree& tree, std::span<const uint32_t> drafts) {
  Verdict v;
  for (uint32_t node = 0;;) {
    const uint32_t choice = ch.token(TokenChooser::kVerifySlot + node);
    uint32_t child = 0;
    for (uint32_t c = node + 1; c < tree.n && !child; ++c)
      if (tree.parent[c] == node && drafts[c - 1] == choice) child = c;
    if (!child) {
      v.next = choice;
      return v;
    }
    v.path[++v.accepted] = uint8_t(child);
    node = child;
  }
}

// Rejection sampling's verdict over a tree (spec_accept.comp): the verify slots hold the accepted nodes' tokens,
// each slot's aux naming its node, then the token that ends the walk (aux 0).
Verdict walk_verdict(const TokenChooser& ch, const TokenTree& tree) {
  Verdict v;
  for (uint32_t node = 0;;) {
    const uint32_t slot = TokenChooser::kVerifySlot + v.accepted, next = ch.verdict_node(slot);
    if (next == 0) {
      v.next = ch.token(slot);
      return v;
    }
    if (next >= tree.n || tree.parent[next] != node) throw Error("internal: a rejection verdict off the tree");
    v.path[++v.accepted] = uint8_t(next);
    node = next;
  }
}

}  // namespace

// What a draft model's tree tells of its runner-ups: at each node the walk reached whose draw was not the
// target's choice, whether its rank-1 child was.
void SpeculativeDecoder::observe_runner_ups(const DraftTreeShape& s, std::span<const uint8_t> path, uint32_t accepted) {
  for (uint32_t d = 0; d <= accepted; ++d) {
    const uint32_t next = d < accepted ? path[d + 1] : 0;
    for (uint32_t c = path[d] + 1u; c < s.tree.n; ++c)
      if (s.tree.parent[c] == path[d] && s.rank[c] == 1 && s.sibling[c] != next) policy_.observe_runner_up(c == next);
  }
}

SpeculativeDecoder::SpeculativeDecoder(LlamaModel& target, int seq, Drafter& drafter, TokenChooser& chooser, Recorder& rec,
                                       std::vector<uint32_t>& context, const SpeculativeOptions& opts, Emit emit)
    : target_(target), seq_(seq), drafter_(drafter), chooser_(chooser), rec_(rec), context_(context), opts_(opts),
      emit_(std::move(emit)),
      policy_(opts.draft_max, opts.policy == DraftLengthPolicy::Adaptive, /*timing_free=*/opts.timing_free || !rec.can_mark(),
              drafter.relative_cost(target)),
      g_(chooser.token(0)),   // the target's choice after the prefilled context
      round_{rec, chooser, 0} {
  // a constraint masks each verify row after the drafts before it, which the host must know while recording
  if (!can_speculate(drafter.kind(), chooser.params().constrained()))
    throw Error("internal: a sequence speculates that may not (can_speculate)");
  drafts_.reserve(LlamaModel::kMaxBatch);
}

bool SpeculativeDecoder::round() {
  if (!submit_round()) return false;
  rec_.wait(UINT64_MAX);   // the round's one wait
  return collect_round();
}

bool SpeculativeDecoder::submit_round() {
  if (!start()) return false;
  rec_.begin();
  m_draft_ = rec_.mark();
  rows_ = record_drafts();
  m_verify_ = rec_.mark();
  target_.record_forward(rec_, seq_, verify_input(), rows_, Logits::All, verify_tree());
  record_verify(target_.logits_rows());
  m_end_ = rec_.mark();
  rec_.submit();
  return true;
}

bool SpeculativeDecoder::collect_round() {
  last_round_s_ = rec_.seconds_between(m_draft_, m_end_);
  stats_.gpu_s += std::max(0.0, last_round_s_);
  const bool caught_up = round_.catch_up_end >= 0;   // the drafter caught up first, timed apart
  const uint32_t m_steps = caught_up ? uint32_t(round_.catch_up_end) : m_draft_;
  if (rec_.profiling_each())   // what a round's parts cost on the device: the figures adaptive K weighs
    fprintf(stderr, "speculative round: %u drafts %.3f ms, verify pass of %u rows %.3f ms\n", k_,
            1e3 * rec_.seconds_between(m_steps, m_verify_), rows_, 1e3 * rec_.seconds_between(m_verify_, m_end_));
  return finish(rec_.seconds_between(m_steps, m_verify_), rec_.seconds_between(m_verify_, m_end_),
                caught_up ? rec_.seconds_between(m_draft_, m_steps) : -1.0);
}

bool SpeculativeDecoder::start() {
  context_.push_back(g_);
  stats_.tokens++;
  return emit_(g_, false) && context_.size() < target_.n_ctx();
}

uint32_t SpeculativeDecoder::record_drafts() {
  const uint32_t k_max = drafts_planned();
  if (k_max == 0) return drafts_recorded(0);
  const Drafted d = drafter_.draft(context_, k_max, round_);
  return drafts_recorded(d.model ? d.model->record_steps(context_, k_max, round_) : d.written);
}

uint32_t SpeculativeDecoder::drafts_planned(uint32_t sharing, const std::optional<SharedCosts>& costs) {
  // K is chosen before recording; never past the end of the context (K = 0: a plain decoding pass).
  policy_.share_passes(sharing, costs);
  const uint32_t room = target_.n_ctx() - uint32_t(context_.size());
  uint32_t k_max = std::min({policy_.next_k(drafter_.next_round_free(context_)), room, LlamaModel::kMaxBatch - 1});
  if (k_max < opts_.draft_min) k_max = 0;
  chooser_.set_token(0, g_);
  history_len_ = chooser_.mode() == ChoiceMode::Device ? chooser_.set_history(context_) : 0;
  round_.history_len = history_len_;
  round_.catch_up_end = -1;
  round_.model_drafts = false;
  round_.tree = TokenTree{};
  round_.tree_allowed = opts_.tree != DraftTree::Off && can_draft_tree(chooser_.params());
  round_.model_tree = {};
  if (round_.tree_allowed && k_max > 0 && (opts_.tree == DraftTree::Wide || !target_.facts().prefers_row_per_lane())) {
    // the draft model's tree: k_max deep at most, its nodes those worth their verify rows (Wide: all it may have)
    const double a0 = std::min(policy_.alpha(), 0.99);
    round_.model_tree = {std::min(TokenTree::kMaxNodes, room + 1), a0, (1 - a0) * policy_.runner_up_rate(),
                         opts_.tree == DraftTree::Wide ? 0.0 : policy_.node_value_min(k_max)};
  }
  return k_max;
}

uint32_t SpeculativeDecoder::drafts_recorded(uint32_t k) {
  if (round_.tree.n > 1) k = round_.tree.n - 1;   // a drafter's tree: its nodes are the drafts
  k = chooser_.set_draft_masks(k);   // constrained: only drafts it allows, each verify row masked
  k_ = k < opts_.draft_min ? 0 : k;   // a short n-gram proposal: decode plainly
  tree_ = k_ > 0 && round_.tree.n > 1 && !round_.tree.chain();
  if (tree_ && round_.tree.n != k_ + 1) throw Error("internal: a draft tree whose nodes are not its drafts");
  base_ = target_.kv().length(seq_);
  return k_ + 1;   // verify: one target pass over [g, d1..dK] (a tree's nodes) gives its distribution after each
}

void SpeculativeDecoder::record_verify(const Slice& target_logits) {
  // the target's own choice after each row: row r's penalty sees the drafts before it, its draw position r
  if (tree_ && chooser_.rejection()) {   // siblings tried in turn: the verdict's slots name their nodes
    chooser_.record_rejection_verify(rec_, target_.kernels(), target_logits, k_, history_len_, context_.size(),
                                     round_.model_drafts, 0.0f, &round_.tree);
    return;
  }
  if (tree_) {   // each node's choice at its own depth (no penalty window or mask: can_draft_tree)
    chooser_.record_tree_choices(rec_, target_.kernels(), target_logits, round_.tree, TokenChooser::kVerifySlot,
                                 history_len_, context_.size());
    return;
  }
  chooser_.record_append_history(rec_, 1, k_, history_len_);
  if (chooser_.rejection() && k_ > 0)   // the accepted drafts and the token after them (TokenChooser::rejection)
    chooser_.record_rejection_verify(rec_, target_.kernels(), target_logits, k_, history_len_, context_.size(),
                                     round_.model_drafts, drafter_.p_min());
  else
    chooser_.record_choice(rec_, target_.kernels(), target_logits, k_ + 1, TokenChooser::kVerifySlot, history_len_,
                           context_.size());
}

bool SpeculativeDecoder::finish(double draft_s, double verify_s, double catch_up_s) {
  const uint32_t k = k_;
  stats_.verify_passes++;
  stats_.tree_rounds += tree_;
  std::vector<uint32_t>& drafts = drafts_;
  drafts.resize(k);
  for (uint32_t i = 0; i < k; ++i) drafts[i] = chooser_.token(i + 1);
  const uint32_t kept = tree_ ? k : keep_drafts(chooser_, k, drafter_.p_min());
  const std::span<const uint32_t> verified(drafts.data(), kept);
  const Verdict v = !tree_                ? verify(chooser_, verified)
                    : chooser_.rejection() ? walk_verdict(chooser_, round_.tree)
                                           : walk_tree(chooser_, round_.tree, verified);
  if (v.accepted > kept) throw Error("internal: verification accepted more drafts than it was given");
  drafter_.round_done(drafts, tree_ ? std::span<const uint8_t>(v.path.data(), v.accepted + 1) : std::span<const uint8_t>());
  if (tree_ && round_.model_drafts) observe_runner_ups(round_.shape, v.path, v.accepted);
  stats_.drafted += kept;
  stats_.accepted += v.accepted;
  if (!drafter_.steps_timed()) draft_s = catch_up_s = -1;   // host lookups: no draft steps to price
  // a tree is priced as the chain of its depth (what adaptive K's per-position acceptance models)
  uint32_t depth = 0;
  for (uint32_t i = 0; tree_ && i < round_.tree.n; ++i) depth = std::max<uint32_t>(depth, round_.tree.depth[i]);
  policy_.observe(tree_ ? depth : kept, v.accepted, draft_s, verify_s, catch_up_s, k + 1);
  for (uint32_t d = 0; d < (tree_ ? depth : kept); ++d) stats_.drafted_at[d]++, stats_.accepted_at[d] += d < v.accepted;
  for (uint32_t d = 1; tree_ && d <= v.accepted; ++d)   // a tree's accepted nodes move to the positions they hold
    if (v.path[d] != d) target_.kv().queue_move(seq_, base_ + v.path[d], base_ + d);
  target_.kv().truncate(seq_, base_ + 1 + v.accepted);   // keep g and the accepted drafts

  for (uint32_t i = 0; i < v.accepted; ++i) {
    const uint32_t token = tree_ ? drafts[v.path[i + 1] - 1] : drafts[i];
    context_.push_back(token);
    stats_.tokens++;
    if (!emit_(token, true) || context_.size() >= target_.n_ctx()) return false;
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
