#include "speculative/drafter.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace vkspec {

const char* drafter_name(DrafterKind kind) {
  switch (kind) {
    case DrafterKind::None: return "";
    case DrafterKind::Ngram: return "ngram";
    case DrafterKind::Model: return "draft-model";
    case DrafterKind::NgramThenModel: return "ngram+model";
  }
  return "";
}

std::unique_ptr<Drafter> make_drafter(DrafterKind kind, LlamaModel* draft_model, float p_min) {
  const bool needs_model = kind == DrafterKind::Model || kind == DrafterKind::NgramThenModel;
  if (kind == DrafterKind::None || needs_model != (draft_model != nullptr))
    throw Error("internal: make_drafter with a drafter kind and draft model that do not go together");
  switch (kind) {
    case DrafterKind::Ngram: return std::make_unique<NgramDrafter>();
    case DrafterKind::Model: return std::make_unique<ModelDrafter>(*draft_model, p_min);
    case DrafterKind::NgramThenModel: return std::make_unique<LookupThenModelDrafter>(*draft_model, p_min);
    case DrafterKind::None: break;
  }
  return nullptr;
}

ModelDrafter::ModelDrafter(LlamaModel& draft, float p_min) : model_(draft), p_min_(p_min), seq_(draft.kv().new_sequence()) {}

ModelDrafter::~ModelDrafter() { model_.kv().free_sequence(seq_); }

uint32_t keep_drafts(const TokenChooser& chooser, uint32_t k, float p_min) {
  if (p_min <= 0.0f) return k;
  for (uint32_t i = 1; i < k; ++i)
    if (chooser.top_prob(i + 1) < p_min) return i;
  return k;
}

void ModelDrafter::keep_prefix(std::span<const uint32_t> context) {
  size_t common = 0;
  while (common < cached_.size() && common < context.size() && cached_[common] == context[common]) ++common;
  model_.kv().truncate(seq_, uint32_t(common));
  cached_.resize(common);
  pending_ = 0;
  tree_pending_ = false;   // a tree round whose verdict never came: its rows are dropped with the rest
}

ModelDrafter::Steps ModelDrafter::begin(std::span<const uint32_t> context, uint32_t k, DraftRound& round) {
  // Keep the cached prefix the context still agrees with; drop the rest (rejected drafts). The last context
  // token must be run to get its logits.
  keep_prefix(context.first(context.size() - 1));
  const size_t common = cached_.size();
  Steps st;
  st.k = std::min<uint32_t>(k, model_.n_ctx() - uint32_t(context.size()));
  if (st.k == 0) return st;
  st.in = model_.write_tokens(context.subspan(common));
  st.n_in = uint32_t(context.size() - common);
  st.count = st.k;
  tree_base_ = uint32_t(context.size() - 1);   // g's position
  const DraftRound::ModelTree& t = round.model_tree;
  if (t.nodes > 2 && p_min_ <= 0) {
    const uint32_t nodes = std::min(t.nodes, model_.n_ctx() + 1 - uint32_t(context.size()));   // its rows fit
    round.shape = shape_draft_tree(st.k, std::max(nodes, 2u), t.a0, t.a1, t.v_min);
    if (!round.shape.tree.chain()) {
      round.tree = round.shape.tree;
      st.tree = true;
      st.count = round.shape.steps;
      st.k = round.tree.n - 1;
    }
  }
  return st;
}

SeqRows ModelDrafter::rows(uint32_t i, const Steps& st, DraftRound& round) {
  if (i == 0 || !st.tree) return {seq_, i == 0 ? st.in : round.chooser.input(i), i == 0 ? st.n_in : 1, Logits::Last};
  // depth i's running nodes, over their ancestors' keys (the root at tree_base_, node x at tree_base_ + x)
  const DraftTreeShape& s = round.shape;
  model_.kv().grow(seq_, tree_base_ + s.first[i]);   // (the leaves before them do not run)
  return {seq_, round.chooser.input(s.first[i]), s.running[i], Logits::All, &round.tree, s.first[i]};
}

uint32_t ModelDrafter::logits_rows(uint32_t i, const Steps& st, const DraftRound& round) const {
  return i == 0 || !st.tree ? 1 : round.shape.running[i];
}

// A draft into `slot` from one logits row, drawn at counter `position` (argmax, or a draw with the target's
// noise at the draft's position, as the target's verify row for it draws; under rejection sampling, noise of
// its own and its probability row kept: TokenChooser::rejection); recorded now, or added to `batch` (recorded
// with other sequences' choices of the same step).
void ModelDrafter::choose(uint32_t i, const Steps& st, DraftRound& round, const Slice& logits, size_t context_size,
                          BatchedChoices* batch) {
  TokenChooser& ch = round.chooser;
  round.model_drafts = true;
  const VkDeviceSize row = VkDeviceSize(model_.hparams().n_vocab) * 4;
  const auto draw = [&](const Slice& logits_row, uint32_t slot, uint32_t history_len, uint64_t position) {
    if (batch)
      batch->add(round.rec, model_.kernels(), ch, logits_row, slot, history_len, position, p_min_ > 0);
    else
      ch.record_choice(round.rec, model_.kernels(), logits_row, 1, slot, history_len, position, p_min_ > 0);
  };
  if (!st.tree) {   // draft i + 1 at position context + i, its penalty history the drafts before it
    if (i > 0) ch.record_append_history(round.rec, i, 1, round.history_len + i - 1);
    draw(logits.sub(0, row), i + 1, round.history_len + i, context_size + i);
    return;
  }
  // each running node's rank-0 child, drawn at the child's position (no penalty: can_draft_tree); under
  // rejection sampling its rank-1 child too, the node's second draw (independent: spec_accept.comp's siblings)
  const DraftTreeShape& s = round.shape;
  const uint32_t node0 = i == 0 ? 0 : s.first[i];
  for (uint32_t c = s.first[i + 1]; c < s.first[i + 2]; ++c)
    if (s.rank[c] == 0 || ch.rejection())
      draw(logits.sub((s.tree.parent[c] - node0) * row, row), c, round.history_len,
           context_size + i + uint64_t(s.rank[c]) * contract::DRAW_INDEX_STRIDE);
}

void ModelDrafter::choose_runner_ups(uint32_t i, DraftRound& round, const Slice& logits) {
  if (round.chooser.rejection()) return;   // its rank-1 children are draws (choose)
  const DraftTreeShape& s = round.shape;
  const VkDeviceSize row = VkDeviceSize(model_.hparams().n_vocab) * 4;
  const uint32_t node0 = i == 0 ? 0 : s.first[i];
  for (uint32_t c = s.first[i + 1]; c < s.first[i + 2]; ++c)
    if (s.rank[c] == 1)
      round.chooser.record_runner_up(round.rec, model_.kernels(), logits.sub((s.tree.parent[c] - node0) * row, row),
                                     s.sibling[c], c);
}

void ModelDrafter::end(std::span<const uint32_t> context, const Steps& st, const DraftRound& round) {
  cached_.assign(context.begin(), context.end());
  pending_ = st.tree ? 0 : st.k - 1;   // a chain's drafts whose K/V the steps appended (all but the last)
  tree_pending_ = st.tree;
  tree_ran_ = 0;
  for (uint32_t x = 0; st.tree && x < round.tree.n; ++x) tree_ran_ |= uint32_t(round.shape.runs(x)) << x;
}

uint32_t ModelDrafter::record_steps(std::span<const uint32_t> context, uint32_t k, DraftRound& round) {
  // Step i runs the draft over its rows (step 0: the context it has not seen, ending with g; then draft i,
  // slot i, or a tree's running nodes at depth i) and chooses the drafts after them.
  Steps st = begin(context, k, round);
  if (st.k == 0) return 0;
  if (st.n_in > 2 && round.rec.can_mark()) {   // catch up first, timed apart (DraftRound::catch_up_end)
    model_.record_forward(round.rec, seq_, st.in, st.n_in - 1, Logits::None);
    round.catch_up_end = round.rec.mark();
    st.in = model_.write_tokens(context.last(1));
    st.n_in = 1;
  }
  for (uint32_t i = 0; i < st.count; ++i) {
    const SeqRows r = rows(i, st, round);
    model_.record_batch(round.rec, std::span<const SeqRows>(&r, 1), model_.logits_rows());
    choose(i, st, round, model_.logits_rows(), context.size());
    if (st.tree) choose_runner_ups(i, round, model_.logits_rows());
  }
  end(context, st, round);
  return st.k;
}

uint32_t record_batched_drafts(LlamaModel& draft, std::span<BatchedDraft> jobs, const Slice& logits,
                               BatchedChoices& choices) {
  std::vector<ModelDrafter::Steps> steps;
  uint32_t count_max = 0;
  for (BatchedDraft& j : jobs) {
    if (&j.drafter->model() != &draft) throw Error("internal: batched drafts on different draft models");
    steps.push_back(j.k ? j.drafter->begin(j.context, j.k, *j.round) : ModelDrafter::Steps{});
    j.k = steps.back().k;
    j.steps = steps.back().count;
    count_max = std::max(count_max, steps.back().count);
  }
  const VkDeviceSize row = VkDeviceSize(draft.hparams().n_vocab) * 4;
  std::vector<SeqRows> rows;
  std::vector<uint32_t> first_row(jobs.size());
  const auto rows_of = [&](size_t j) { return logits.sub(first_row[j] * row, logits.size - first_row[j] * row); };
  uint32_t n_rows = 0;
  for (uint32_t i = 0; i < count_max; ++i) {
    rows.clear();
    uint32_t r = 0;
    for (size_t j = 0; j < jobs.size(); ++j)
      if (steps[j].count > i) {
        rows.push_back(jobs[j].drafter->rows(i, steps[j], *jobs[j].round));
        n_rows += rows.back().n;
        first_row[j] = r;
        r += jobs[j].drafter->logits_rows(i, steps[j], *jobs[j].round);
      }
    Recorder& rec = jobs[0].round->rec;
    draft.record_batch(rec, rows, logits);
    for (size_t j = 0; j < jobs.size(); ++j)
      if (steps[j].count > i)
        jobs[j].drafter->choose(i, steps[j], *jobs[j].round, rows_of(j), jobs[j].context.size(), &choices);
    choices.record(rec, draft.kernels());
    for (size_t j = 0; j < jobs.size(); ++j)   // (the runner-ups leave out the drafts just chosen)
      if (steps[j].count > i && steps[j].tree)
        jobs[j].drafter->choose_runner_ups(i, *jobs[j].round, rows_of(j));
  }
  for (size_t j = 0; j < jobs.size(); ++j)
    if (jobs[j].k) jobs[j].drafter->end(jobs[j].context, steps[j], *jobs[j].round);
  return n_rows;
}

void ModelDrafter::round_done(std::span<const uint32_t> drafts, std::span<const uint8_t> accepted_path) {
  if (!std::exchange(tree_pending_, false)) {
    cached_.insert(cached_.end(), drafts.begin(), drafts.begin() + std::min<size_t>(pending_, drafts.size()));
    pending_ = 0;
    return;
  }
  // The accepted nodes the draft ran, from depth 1 on, to the positions they now hold (an earlier move never
  // writes a later one's source: node indices are at least their depths and grow along the path).
  uint32_t kept = 0;
  for (size_t d = 1; d < accepted_path.size() && (tree_ran_ >> accepted_path[d] & 1u); ++d) {
    if (accepted_path[d] != d) model_.kv().queue_move(seq_, tree_base_ + accepted_path[d], tree_base_ + uint32_t(d));
    cached_.push_back(drafts[accepted_path[d] - 1]);
    ++kept;
  }
  model_.kv().truncate(seq_, tree_base_ + 1 + kept);
}

uint32_t NgramDrafter::write(std::span<const uint32_t> drafts, DraftRound& round) {
  for (size_t i = 0; i < drafts.size(); ++i) round.chooser.set_token(uint32_t(i + 1), drafts[i]);
  return uint32_t(drafts.size());
}

Drafted LookupThenModelDrafter::draft(std::span<const uint32_t> context, uint32_t k, DraftRound& round) {
  const bool found = !lookup_.propose(context, 1).empty();
  source_ = found ? static_cast<Drafter*>(&lookup_) : &model_;
  ++(found ? lookup_rounds_ : model_rounds_);
  if (!found) return {0, &model_};
  return lookup_.draft(context, k, round);
}

Drafted NgramDrafter::draft(std::span<const uint32_t> context, uint32_t k, DraftRound& round) {
  if (round.tree_allowed)
    if (std::optional<TreeProposal> t = propose_tree(context, k)) {
      for (uint32_t i = 1; i < t->tree.n; ++i) round.chooser.set_token(i, t->tokens[i]);
      round.tree = t->tree;
      return {t->tree.n - 1, nullptr};
    }
  return {write(propose(context, k), round), nullptr};
}

std::optional<NgramDrafter::TreeProposal> NgramDrafter::propose_tree(std::span<const uint32_t> context, uint32_t k) const {
  constexpr uint32_t kMaxBranches = 8;   // earlier occurrences looked at
  const std::vector<uint32_t> chain = propose(context, k);
  const uint32_t budget = std::min(k + 1, TokenTree::kMaxNodes);   // nodes, the root included
  if (chain.empty() || chain.size() + 1 >= budget || chain.size() > TokenTree::kMaxDepth) return std::nullopt;
  TreeProposal t;
  t.tokens.assign(1, 0);
  // a continuation's tokens from context position j on, merged into the tree below the root
  const auto insert = [&](size_t j) {
    uint32_t node = 0;
    for (; j < context.size() && t.tree.depth[node] < TokenTree::kMaxDepth; ++j) {
      uint32_t next = 0;
      for (uint32_t c = node + 1; c < t.tree.n && !next; ++c)
        if (t.tree.parent[c] == node && t.tokens[c] == context[j]) next = c;
      if (!next) {
        if (t.tree.n == budget) return;
        next = t.tree.add(node);
        t.tokens.push_back(context[j]);
      }
      node = next;
    }
  };
  for (const uint32_t token : chain) t.tokens.push_back(token), t.tree.add(t.tree.n - 1);
  const size_t len = context.size();
  uint32_t branches = 0;
  for (uint32_t n = std::min<uint32_t>(max_n_, uint32_t(len - 1)); n >= min_n_ && n > 0 && t.tree.n < budget; --n) {
    const auto suffix = context.subspan(len - n);
    for (size_t start = len - n; start-- > 0 && branches < kMaxBranches && t.tree.n < budget;)
      if (std::equal(suffix.begin(), suffix.end(), context.begin() + long(start))) {
        ++branches;
        insert(start + n);
      }
  }
  if (t.tree.chain()) return std::nullopt;
  return t;
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
