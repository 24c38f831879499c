#include "speculative/draft_tree.h"

#include <algorithm>
#include <vector>

#include "core/core.h"

namespace vkspec {

void DraftTreeShape::check() const {
  const auto fail = [](const char* what) { throw Error(std::string("internal: a draft tree shape where ") + what); };
  uint32_t deepest_running = 0;
  for (uint32_t i = 1; i < tree.n; ++i) {
    const uint32_t p = tree.parent[i], d = tree.depth[i];
    if (p >= i || d != tree.depth[p] + 1u) fail("a parent does not come first");
    if (d < tree.depth[i - 1]) fail("depths are out of order");
    if (!runs(p)) fail("a node that does not run has children");
    if (rank[i] > 1 || (rank[i] == 1 && (tree.parent[sibling[i]] != p || rank[sibling[i]] != 0)))
      fail("a runner-up is not beside its draw");
  }
  for (uint32_t d = 0; d <= TokenTree::kMaxDepth; ++d) {
    if (first[d + 1] < first[d] || running[d] > first[d + 1] - first[d] || running[d] > kMaxRunning)
      fail("a depth's running nodes are not its first");
    if (running[d]) deepest_running = d + 1;
  }
  if (first[TokenTree::kMaxDepth + 1] != tree.n || steps != deepest_running) fail("the depths do not cover the tree");
}

DraftTreeShape shape_draft_tree(uint32_t depth, uint32_t nodes, double a0, double a1, double v_min) {
  if (depth < 1 || nodes < 2 || nodes > TokenTree::kMaxNodes) throw Error("internal: shape_draft_tree's limits");
  depth = std::min(depth, TokenTree::kMaxDepth);
  struct Node {
    uint32_t parent, depth, rank;
    double value;
    int first_child = -1;   // its rank-0 child (where the rank-1 one's sibling is)
  };
  std::vector<Node> taken = {{0, 0, 0, 1.0}};
  std::array<uint32_t, TokenTree::kMaxDepth + 1> running_at{};
  struct Candidate { uint32_t parent, rank; double value; };
  std::vector<Candidate> open = {{0, 0, a0}};
  while (taken.size() < nodes && !open.empty()) {
    const auto best = std::max_element(open.begin(), open.end(),
                                       [](const Candidate& x, const Candidate& y) { return x.value < y.value; });
    const Candidate c = *best;
    open.erase(best);
    if (c.value < v_min) break;
    Node& parent = taken[c.parent];
    if (c.rank == 0) {   // the parent starts running: its depth's running nodes are bounded
      if (running_at[parent.depth] == DraftTreeShape::kMaxRunning) continue;
      running_at[parent.depth]++;
    }
    const uint32_t index = uint32_t(taken.size());
    if (c.rank == 0) parent.first_child = int(index);
    taken.push_back({c.parent, parent.depth + 1, c.rank, c.value});
    if (c.rank == 0) open.push_back({c.parent, 1, taken[c.parent].value * a1});
    if (taken.back().depth < depth) open.push_back({index, 0, c.value * a0});
  }
  // Renumber: by depth, running nodes first (taken order within each group keeps parents first).
  const auto runs = [&](uint32_t i) { return taken[i].first_child >= 0; };
  std::vector<uint32_t> order;
  for (uint32_t d = 0; d <= depth; ++d)
    for (const bool running : {true, false})
      for (uint32_t i = 0; i < taken.size(); ++i)
        if (taken[i].depth == d && runs(i) == running) order.push_back(i);
  std::vector<uint32_t> index_of(taken.size());
  for (uint32_t k = 0; k < order.size(); ++k) index_of[order[k]] = k;
  DraftTreeShape s;
  for (uint32_t k = 1; k < order.size(); ++k) {
    const Node& n = taken[order[k]];
    s.tree.add(index_of[n.parent]);
    s.rank[k] = uint8_t(n.rank);
    if (n.rank == 1) s.sibling[k] = uint8_t(index_of[uint32_t(taken[n.parent].first_child)]);
  }
  for (uint32_t k = 0; k < order.size(); ++k) {
    const uint32_t d = taken[order[k]].depth;
    for (uint32_t e = d + 1; e <= TokenTree::kMaxDepth + 1; ++e) s.first[e] = uint8_t(k + 1);
    if (runs(order[k])) s.running[d]++, s.steps = std::max(s.steps, d + 1);
  }
  s.check();
  return s;
}

}  // namespace vkspec
