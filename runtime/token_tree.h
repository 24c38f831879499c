#pragma once
// A token tree: a speculative round's drafts as a tree (several continuations verified in one pass). Nodes
// 0..n-1 in an order where every parent comes before its children; node 0 is the root (the last accepted
// token g), node i >= 1 a draft whose parent is parent[i]. A chain is the tree whose node i's parent is
// i - 1. A verify pass runs node i at position base + depth(i) and stores its K/V at slot base + i; its
// attention sees the context and its ancestors (contract.h KV_ROW: the path names their slots), so each node's
// logits are those of its root-to-node path run alone, bit for bit.
#include <array>
#include <cstdint>

#include "core/core.h"
#include "shaders/contract.h"

namespace vkspec {

struct TokenTree {
  static constexpr uint32_t kMaxNodes = contract::KV_TREE_MAX_NODES;
  static constexpr uint32_t kMaxDepth = contract::KV_TREE_MAX_DEPTH - 1;   // depths 0..kMaxDepth
  std::array<uint8_t, kMaxNodes> parent{}, depth{};
  uint32_t n = 1;   // the root alone

  // Adds a child of node p; returns its index.
  uint32_t add(uint32_t p) {
    if (p >= n || n == kMaxNodes || depth[p] == kMaxDepth) throw Error("internal: a token tree past its limits");
    parent[n] = uint8_t(p);
    depth[n] = uint8_t(depth[p] + 1);
    return n++;
  }
  bool chain() const {
    for (uint32_t i = 1; i < n; ++i)
      if (parent[i] != i - 1) return false;
    return true;
  }
  // Every node's parent, nibble i of word i / 8 holding node i's (contract.h PC_SPEC_ACCEPT's parents_lo/hi).
  std::array<uint32_t, 2> parent_nibbles() const {
    static_assert(kMaxNodes <= 16, "two words of nibbles");
    std::array<uint32_t, 2> w{};
    for (uint32_t i = 1; i < n; ++i) w[i / 8] |= uint32_t(parent[i]) << (4 * (i % 8));
    return w;
  }
  // Node i's path (contract.h KV_ROW's tree path): nibble d is the node index of its ancestor at depth d
  // (its own at depth[i]).
  uint32_t path(uint32_t i) const {
    uint32_t p = 0;
    for (uint32_t a = i;; a = parent[a]) {
      p |= a << (4 * depth[a]);
      if (a == 0) return p;
    }
  }
};

}  // namespace vkspec
