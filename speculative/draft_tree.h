#pragma once
// The token tree a draft model expands in one round, fixed before its steps are recorded (the round is one
// submission, so the host cannot look at the draft's probabilities while it drafts). A node's children are
// the draft's choices after it by rank: rank 0 is its draw (a chain's draft), rank 1 the best token but that
// one (TokenChooser::record_runner_up), or under rejection sampling a second independent draw (siblings that
// shaders/spec_accept.comp tries in turn). Built as SpecInfer's and Sequoia's static trees are: a node's value is
// the probability that the walk reaches it, the product along its path of a0 (a rank-0 child is the
// target's choice after its parent) and a1 (a rank-1 child is); the most valuable nodes are taken, best
// first, while their value is at least v_min, up to `nodes` and depth `depth`.
// The draft runs a node iff it has children: one pass per depth over that depth's running nodes (their
// logits choose the next depth), so its steps are as many as the deepest running node's depth + 1.
// Order: by depth; within a depth the running nodes first (a draft step's rows are consecutive nodes), at
// most kMaxRunning of them (what a batched draft step's logits rows and choices are sized for).
#include <array>
#include <cstdint>

#include "runtime/token_tree.h"

namespace vkspec {

struct DraftTreeShape {
  static constexpr uint32_t kMaxRunning = 4;   // running nodes per depth
  TokenTree tree;
  std::array<uint8_t, TokenTree::kMaxNodes> rank{};      // node i's rank among its parent's choices
  std::array<uint8_t, TokenTree::kMaxNodes> sibling{};   // a rank-1 node's rank-0 sibling (the token it leaves out)
  std::array<uint8_t, TokenTree::kMaxDepth + 2> first{};  // depth d's nodes: [first[d], first[d + 1])
  std::array<uint8_t, TokenTree::kMaxDepth + 1> running{}; // of which the first running[d] have children
  uint32_t steps = 0;                                     // the draft's passes: depths with a running node

  bool runs(uint32_t node) const { return node < first[tree.depth[node]] + running[tree.depth[node]]; }
  // Invariants, asserted by shape_draft_tree (and the tests): parents before children, depths in order,
  // running nodes first and only they have children, a rank-1 node beside its rank-0 sibling.
  void check() const;
};

// depth >= 1, nodes >= 2 (the root included; at most TokenTree::kMaxNodes), 0 <= a1 <= a0 < 1.
DraftTreeShape shape_draft_tree(uint32_t depth, uint32_t nodes, double a0, double a1, double v_min);

}  // namespace vkspec
