#pragma once
// Drafters propose up to K next tokens for the target to verify in one pass. Drafts go to token slots
// 1..K of the round's TokenChooser, which the target's verify pass embeds directly.
//   ModelDrafter: a small draft model sharing the target's vocabulary, with its own paged KV kept in step
//                 with the accepted context (filled lazily: the first call prefills the prompt). Its K steps
//                 are recorded into the round's command buffer: each chooses its draft on the device (argmax,
//                 or a draw after the target's sampling transforms with the target's noise at that
//                 position: speculative/controller.h) into the slot the next step embeds, or, for a token
//                 tree (speculative/draft_tree.h), a step per depth chooses the children of that depth's
//                 nodes. --draft-p-min limits what is verified (keep_drafts).
//   NgramDrafter: prompt lookup: the longest recent n-gram that occurred earlier in the context proposes
//                 the tokens that followed it (zero model cost); written into the slots by the host.
//   LookupThenModelDrafter: both (-md with --draft ngram): prompt lookup when the context has a match of at
//                 least LookupThenModelDrafter::kMinMatch tokens, the draft model otherwise.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "text/tokenizer.h"
#include "runtime/model.h"
#include "runtime/token_choice.h"
#include "runtime/token_tree.h"
#include "speculative/draft_tree.h"

namespace vkspec {

// What one round's drafting records into and writes to.
struct DraftRound {
  Recorder& rec;                       // the round's command buffer (begun)
  TokenChooser& chooser;               // mode, sampling parameters, token slots (drafts go to 1..K)
  uint32_t history_len = 0;            // Device mode: the penalty history after the context (set_history)
  // A draft model's mark after catching up on the context it had not seen (the prompt, tokens decoded
  // plainly), or -1: the policy prices drafts per step, and a first round whose 5 drafts were priced with a
  // 128-token catch-up in them sent adaptive K to plain rounds for most of a completion.
  int64_t catch_up_end = -1;
  bool model_drafts = false;           // a draft model chose the drafts (ModelDrafter::choose), else the host wrote them
  // The drafts' shape: a chain, unless a drafter wrote a tree (node i's token in slot i) where the round
  // allows one (SpeculativeDecoder: can_draft_tree, DraftTree): prompt lookup's (tree_allowed), or a draft
  // model's (model_tree: what shape_draft_tree is given; nodes 0: chains).
  bool tree_allowed = false;
  struct ModelTree {
    uint32_t nodes = 0;               // at most, the root included
    double a0 = 0, a1 = 0, v_min = 0;   // shape_draft_tree's
  } model_tree;
  TokenTree tree;
  DraftTreeShape shape;               // a draft model's tree: how its steps expand `tree`
};

// How many of `k` drafts in slots 1..k are verified under --draft-p-min: all up to the first i >= 1 whose
// top probability (slot aux) is below p_min.
uint32_t keep_drafts(const TokenChooser& chooser, uint32_t k, float p_min);

class ModelDrafter;

// Which drafter a context or a batch runs: the CLI's --draft ngram and -md DRAFT.gguf, alone or together.
enum class DrafterKind : uint8_t { None, Ngram, Model, NgramThenModel };
const char* drafter_name(DrafterKind kind);   // "ngram", "draft-model", "ngram+model" ("" for None)

// The one rule for when a sequence speculates: with a drafter, and when its output is constrained (JSON
// mode, a grammar) only with host-written drafts (prompt lookup): each verify row's mask depends on the
// drafts before it, which a draft model chooses on the device.
inline bool can_speculate(DrafterKind kind, bool constrained) {
  return kind != DrafterKind::None && (!constrained || kind == DrafterKind::Ngram);
}

// What Drafter::draft did: `written` drafts put into slots 1.. by the host, or, when this round's drafts are
// a draft model's steps, nothing yet: `model` is that ModelDrafter, whose steps the caller records
// (ModelDrafter::record_steps alone, or record_batched_drafts together with other sequences').
struct Drafted {
  uint32_t written = 0;
  ModelDrafter* model = nullptr;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual DrafterKind kind() const = 0;
  // The cost of one draft relative to a decoding step of `target` (used where timings must not steer K).
  virtual double relative_cost(const LlamaModel& target) const = 0;
  // Up to `k` tokens likely to follow `context` (which ends with the last accepted token g, in slot 0), for
  // slots 1..: written now by the host, or left to a draft model's steps (Drafted).
  virtual Drafted draft(std::span<const uint32_t> context, uint32_t k, DraftRound& round) = 0;
  // After the round's submission: the drafts it produced (all of them, verified or not), and for a tree
  // the accepted nodes by depth (accepted_path[0]: the root; empty for a chain).
  virtual void round_done(std::span<const uint32_t> drafts, std::span<const uint8_t> accepted_path) {
    (void)drafts, (void)accepted_path;
  }
  virtual float p_min() const { return 0.0f; }
  // False when the last round's drafts must not price the drafter's steps (DraftPolicy::observe): host
  // lookups between a model's recorded steps would make its steps look free.
  virtual bool steps_timed() const { return true; }
  // True when draft() on `context` would write host lookups, which cost no draft step (DraftPolicy::next_k).
  virtual bool next_round_free(std::span<const uint32_t> context) const { (void)context; return false; }
  // The draft model's drafter this one is or holds (with its draft KV sequence), if any.
  virtual ModelDrafter* model_drafter() { return nullptr; }
};

// A drafter of `kind` (not None); `draft_model` for the kinds that run one.
std::unique_ptr<Drafter> make_drafter(DrafterKind kind, LlamaModel* draft_model, float p_min);

class ModelDrafter : public Drafter {
 public:
  // p_min: stop drafting once the draft's top probability falls below it (0 = always draft k).
  ModelDrafter(LlamaModel& draft, float p_min);
  ~ModelDrafter() override;
  DrafterKind kind() const override { return DrafterKind::Model; }
  ModelDrafter* model_drafter() override { return this; }
  // Drops what the cache holds past its longest common prefix with `context` (a drafter kept from a
  // finished request and reused for a new one that starts with part of its context: its next catch-up runs
  // only the rest).
  void keep_prefix(std::span<const uint32_t> context);
  Drafted draft(std::span<const uint32_t>, uint32_t, DraftRound&) override { return {0, this}; }
  // decoding is memory-bound: a step costs about the bytes of weights it reads
  double relative_cost(const LlamaModel& target) const override {
    return double(model_.weight_bytes()) / double(target.weight_bytes());
  }
  // The k steps of one sequence's drafts, recorded into the round (draft() left them to the caller): each
  // chooses draft i + 1 into slot i + 1, or for a tree (shape) step d chooses the children of depth d's
  // running nodes. Returns how many it drafted (k, or fewer at the context's end; a tree's nodes but the root).
  uint32_t record_steps(std::span<const uint32_t> context, uint32_t k, DraftRound& round);
  // A tree's accepted nodes that the draft ran move to the positions they hold in its cache (queue_move);
  // the rest of its tree rows are dropped.
  void round_done(std::span<const uint32_t> drafts, std::span<const uint8_t> accepted_path) override;
  float p_min() const override { return p_min_; }

  // record_steps() in parts, which record_batched_drafts interleaves for several sequences: begin() trims the
  // cache to what still agrees with the context, writes the tokens the first step runs (k clamped to the
  // context) and shapes the round's tree where it drafts one (round.model_tree; not with --draft-p-min, whose
  // cut a tree has not); rows(i) are step i's (the first: `in`, n_in tokens; a tree's: depth i's running
  // nodes), choose(i) draws the drafts their logits rows give (the chain's draft i + 1; a tree's rank-0
  // children), choose_runner_ups(i) then the tree's rank-1 children; end() records what the cache now holds.
  struct Steps {
    TokenInput in;
    uint32_t n_in = 0, k = 0;
    uint32_t count = 0;   // passes: k for a chain, shape.steps for a tree
    bool tree = false;
  };
  Steps begin(std::span<const uint32_t> context, uint32_t k, DraftRound& round);
  SeqRows rows(uint32_t i, const Steps& st, DraftRound& round);
  uint32_t logits_rows(uint32_t i, const Steps& st, const DraftRound& round) const;   // what rows(i) leave
  // logits: step i's first logits row and those after it
  void choose(uint32_t i, const Steps& st, DraftRound& round, const Slice& logits, size_t context_size,
              BatchedChoices* batch = nullptr);
  void choose_runner_ups(uint32_t i, DraftRound& round, const Slice& logits);
  void end(std::span<const uint32_t> context, const Steps& st, const DraftRound& round);
  int sequence() const { return seq_; }
  LlamaModel& model() { return model_; }

 private:
  LlamaModel& model_;
  float p_min_;
  int seq_;
  std::vector<uint32_t> cached_;   // tokens whose K/V are in the draft's cache, in order
  uint32_t pending_ = 0;           // drafts of the last round whose K/V went in (round_done appends them)
  // The last round's tree, when it drafted one: its root's position and the nodes the draft ran, whose K/V
  // are at tree_base_ + node (round_done moves the accepted ones into place).
  bool tree_pending_ = false;
  uint32_t tree_base_ = 0;
  uint32_t tree_ran_ = 0;          // bit i: node i ran
};

class NgramDrafter : public Drafter {
 public:
  explicit NgramDrafter(uint32_t max_n = 4, uint32_t min_n = 1) : max_n_(max_n), min_n_(min_n) {}
  DrafterKind kind() const override { return DrafterKind::Ngram; }
  double relative_cost(const LlamaModel&) const override { return 0.0; }
  // A tree where the round allows one and earlier matches disagree, else the chain.
  Drafted draft(std::span<const uint32_t> context, uint32_t k, DraftRound& round) override;
  bool next_round_free(std::span<const uint32_t>) const override { return true; }
  // The proposal itself (host only), and its writing into the round's slots 1.. (returns its size).
  std::vector<uint32_t> propose(std::span<const uint32_t> context, uint32_t k) const;
  static uint32_t write(std::span<const uint32_t> drafts, DraftRound& round);
  // Up to k drafts as a tree: the chain (propose) as its first branch, nodes 1..m, then the continuations of
  // the suffix's other earlier occurrences (the longest suffix first, the most recent first) merged where
  // they agree, in the k - m nodes the chain leaves, each at most TokenTree::kMaxDepth deep; tokens[i] is
  // node i's (tokens[0]: the root, unused). Nothing when the chain fills k, is deeper than a tree may be, or
  // no other continuation differs: the chain is the proposal then. The walk follows the chain wherever it
  // matches (a token has one child per parent), so a tree never verifies fewer tokens than its chain; it
  // verifies more rows (measured: docs/PERFORMANCE.md).
  struct TreeProposal { TokenTree tree; std::vector<uint32_t> tokens; };
  std::optional<TreeProposal> propose_tree(std::span<const uint32_t> context, uint32_t k) const;

 private:
  uint32_t max_n_, min_n_;
};

// Prompt lookup first, the draft model when the lookup has nothing: on contexts that repeat themselves
// (code, and the loops small models fall into under greedy decoding) a lookup's drafts cost no model step.
// What a round's drafts are (sampled or one-hot, --draft-p-min, timed) follows the drafter that made them;
// the draft model catches up on the tokens of lookup rounds at its next round, as after plain rounds.
// Invariant: source_ names the drafter of the last draft() call.
class LookupThenModelDrafter : public Drafter {
 public:
  static constexpr uint32_t kMinMatch = 2;   // a lookup needs a suffix of this many tokens seen before
  LookupThenModelDrafter(LlamaModel& draft, float p_min) : model_(draft, p_min), lookup_(4, kMinMatch) {}
  DrafterKind kind() const override { return DrafterKind::NgramThenModel; }
  double relative_cost(const LlamaModel& target) const override { return model_.relative_cost(target); }
  // the lookup's drafts, or the draft model (whose steps the caller records) when the lookup finds none
  Drafted draft(std::span<const uint32_t> context, uint32_t k, DraftRound& round) override;
  void round_done(std::span<const uint32_t> drafts, std::span<const uint8_t> accepted_path) override {
    source_->round_done(drafts, accepted_path);
  }
  float p_min() const override { return source_->p_min(); }
  bool steps_timed() const override { return source_ == &model_; }
  bool next_round_free(std::span<const uint32_t> context) const override { return !lookup_.propose(context, 1).empty(); }
  ModelDrafter* model_drafter() override { return &model_; }
  uint64_t lookup_rounds() const { return lookup_rounds_; }   // rounds drafted by each source so far
  uint64_t model_rounds() const { return model_rounds_; }

 private:
  ModelDrafter model_;
  NgramDrafter lookup_;
  Drafter* source_ = &model_;
  uint64_t lookup_rounds_ = 0, model_rounds_ = 0;
};

// The drafts of several sequences on one draft model, recorded together: step i of every sequence that
// drafts more than i tokens runs in one batched pass (LlamaModel::record_batch), then each draws its draft
// from its row (a tree: step i of every sequence runs its depth-i nodes), the step's choices recorded together
// (`choices`: one argmax or sample_rows dispatch for all of them). Drafts are those each ModelDrafter::draft
// would give alone (batch invariance). `logits` holds DraftTreeShape::kMaxRunning rows per job. Each job's k
// becomes what it drafted, `steps` its passes; returns the rows its passes ran in all, the first step's
// catch-ups (context a draft model has not seen yet) included.
struct BatchedDraft {
  ModelDrafter* drafter;
  std::span<const uint32_t> context;
  uint32_t k;
  DraftRound* round;
  uint32_t steps = 0;
};
uint32_t record_batched_drafts(LlamaModel& draft, std::span<BatchedDraft> jobs, const Slice& logits,
                               BatchedChoices& choices);

// Draft and target must share a vocabulary (size, texts, types, special ids); throws Error otherwise.
void check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft);

}  // namespace vkspec
