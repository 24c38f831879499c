#include "speculative/drafter.h"

#include <algorithm>
#include <cmath>

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
}

ModelDrafter::Steps ModelDrafter::begin(std::span<const uint32_t> context, uint32_t k) {
  // Keep the cached prefix the context still agrees with; drop the rest (rejected drafts). The last context
  // token must be run to get its logits.
  keep_prefix(context.first(context.size() - 1));
  const size_t common = cached_.size();
  Steps st;
  st.k = std::min<uint32_t>(k, model_.n_ctx() - uint32_t(context.size()));
  if (st.k == 0) return st;
  st.in = model_.write_tokens(context.subspan(common));
  st.n_in = uint32_t(context.size() - common);
  return st;
}

// Step i's choice: draft i + 1 into slot i + 1 (argmax, or a draw with the target's noise at the draft's
// position, as the target's verify row for it draws; under rejection sampling, noise of its own and its
// probability row kept: TokenChooser::rejection); recorded now, or added to `batch` (recorded with other
// sequences' choices of the same step).
void ModelDrafter::choose(uint32_t i, DraftRound& round, const Slice& logits_row, size_t context_size,
                          BatchedChoices* batch) {
  TokenChooser& ch = round.chooser;
  round.model_drafts = true;
  if (i > 0) ch.record_append_history(round.rec, i, 1, round.history_len + i - 1);
  if (batch)
    batch->add(round.rec, model_.kernels(), ch, logits_row, i + 1, round.history_len + i, context_size + i, p_min_ > 0);
  else
    ch.record_choice(round.rec, model_.kernels(), logits_row, 1, i + 1, round.history_len + i, context_size + i, p_min_ > 0);
}

bool ModelDrafter::shape(DraftRound& round, uint32_t k) const {
  if (!round.runner_ups || p_min_ > 0 || k == 0) return false;
  round.tree = TokenTree{};
  for (uint32_t i = 0; i < k; ++i) round.tree.add(i);          // the chain: node i + 1 below node i
  for (uint32_t i = 0; i < k; ++i) round.tree.add(i);          // its runner-ups: node k + 1 + i beside node i + 1
  return true;
}

void ModelDrafter::choose_runner_up(uint32_t i, DraftRound& round, const Slice& logits_row) {
  const uint32_t k = (round.tree.n - 1) / 2;
  round.chooser.record_runner_up(round.rec, model_.kernels(), logits_row, i + 1, k + 1 + i);
}

void ModelDrafter::end(std::span<const uint32_t> context, uint32_t k) {
  cached_.assign(context.begin(), context.end());
  pending_ = k - 1;   // drafts whose K/V the steps appended (all but the last)
}

uint32_t ModelDrafter::record_steps(std::span<const uint32_t> context, uint32_t k, DraftRound& round) {
  // Step i runs the draft over its input (step 0: the context it has not seen; then draft i, slot i) and
  // chooses draft i + 1 into slot i + 1: k steps for k drafts.
  Steps st = begin(context, k);
  if (st.k == 0) return 0;
  const bool runner_ups = shape(round, st.k);
  if (st.n_in > 2 && round.rec.can_mark()) {   // catch up first, timed apart (DraftRound::catch_up_end)
    model_.record_forward(round.rec, seq_, st.in, st.n_in - 1, Logits::None);
    round.catch_up_end = round.rec.mark();
    st.in = model_.write_tokens(context.last(1));
    st.n_in = 1;
  }
  for (uint32_t i = 0; i < st.k; ++i) {
    model_.record_forward(round.rec, seq_, st.in, st.n_in, Logits::Last);
    choose(i, round, model_.logits_rows(), context.size());
    if (runner_ups) choose_runner_up(i, round, model_.logits_rows());
    st.in = round.chooser.input(i + 1);
    st.n_in = 1;
  }
  end(context, st.k);
  return st.k;
}

uint32_t record_batched_drafts(LlamaModel& draft, std::span<BatchedDraft> jobs, const Slice& logits,
                               BatchedChoices& choices) {
  std::vector<ModelDrafter::Steps> steps;
  uint32_t k_max = 0;
  std::vector<bool> runner_ups;
  for (BatchedDraft& j : jobs) {
    if (&j.drafter->model() != &draft) throw Error("internal: batched drafts on different draft models");
    steps.push_back(j.k ? j.drafter->begin(j.context, j.k) : ModelDrafter::Steps{});
    j.k = steps.back().k;
    runner_ups.push_back(j.drafter->shape(*j.round, j.k));
    k_max = std::max(k_max, j.k);
  }
  const VkDeviceSize row = VkDeviceSize(draft.hparams().n_vocab) * 4;
  std::vector<SeqRows> rows;
  uint32_t n_rows = 0;
  for (uint32_t i = 0; i < k_max; ++i) {
    rows.clear();
    for (size_t j = 0; j < jobs.size(); ++j)
      if (jobs[j].k > i) {
        rows.push_back({jobs[j].drafter->sequence(), steps[j].in, steps[j].n_in, Logits::Last});
        n_rows += steps[j].n_in;
      }
    Recorder& rec = jobs[0].round->rec;
    draft.record_batch(rec, rows, logits);
    uint32_t r = 0;
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (jobs[j].k <= i) continue;
      jobs[j].drafter->choose(i, *jobs[j].round, logits.sub(r++ * row, row), jobs[j].context.size(), &choices);
      steps[j].in = jobs[j].round->chooser.input(i + 1);
      steps[j].n_in = 1;
    }
    choices.record(rec, draft.kernels());
    r = 0;
    for (size_t j = 0; j < jobs.size(); ++j) {   // (the runner-ups leave out the drafts just chosen)
      if (jobs[j].k <= i) continue;
      const Slice row_logits = logits.sub(r++ * row, row);
      if (runner_ups[j]) jobs[j].drafter->choose_runner_up(i, *jobs[j].round, row_logits);
    }
  }
  for (BatchedDraft& j : jobs)
    if (j.k) j.drafter->end(j.context, j.k);
  return n_rows;
}

void ModelDrafter::round_done(std::span<const uint32_t> drafts) {
  cached_.insert(cached_.end(), drafts.begin(), drafts.begin() + std::min<size_t>(pending_, drafts.size()));
  pending_ = 0;
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
