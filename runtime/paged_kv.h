#pragma once
// Block-paged KV cache for one model: a pool of fixed-size blocks shared by all sequences, and per
// sequence a block table (logical block -> physical block) kept on the host and mirrored in a
// host-visible device buffer the kernels read.
//
// Invariants:
//   - a sequence of length L owns exactly ceil(L / block_size) blocks, in table order;
//   - every block is either free or owned by exactly one sequence;
//   - truncate(seq, n) frees the blocks whose first position is >= n and never touches kept entries.
#include <cstdint>
#include <vector>

#include "runtime/kernels.h"

namespace vkspec {

class PagedKvCache {
 public:
  PagedKvCache(Arena& device, Arena& upload, uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim,
               uint32_t block_size, uint32_t n_blocks, uint32_t max_seq_len, uint32_t max_sequences = 4);

  int new_sequence();                       // throws when max_sequences are in use
  void free_sequence(int seq);              // releases all of its blocks
  uint32_t length(int seq) const { return seqs_.at(seq).length; }
  // Makes positions [length, new_len) writable (allocating blocks on demand) and sets the length.
  // Throws Error if the context or the pool would overflow.
  void grow(int seq, uint32_t new_len);
  void truncate(int seq, uint32_t new_len);

  PagedKvView view(uint32_t layer, int seq) const;
  const std::vector<uint32_t>& block_table(int seq) const { return seqs_.at(seq).blocks; }
  uint32_t free_blocks() const { return uint32_t(free_.size()); }
  uint32_t block_size() const { return block_size_; }
  uint32_t max_seq_len() const { return max_seq_len_; }

 private:
  struct Sequence {
    bool used = false;
    uint32_t length = 0;
    std::vector<uint32_t> blocks;
    Slice table;   // [max_blocks_per_seq] uint, host-visible
  };
  uint32_t block_size_, max_seq_len_, max_blocks_per_seq_;
  std::vector<Slice> k_pools_, v_pools_;   // per layer: [n_blocks][block_size][n_kv_heads][head_dim] f32
  std::vector<uint32_t> free_;             // free physical blocks (LIFO: recently freed reused first)
  std::vector<Sequence> seqs_;
};

}  // namespace vkspec
