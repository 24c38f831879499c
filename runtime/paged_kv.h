#pragma once
// Block-paged KV cache for one model: a pool of fixed-size blocks shared by all sequences, and per
// sequence a block table (logical block -> physical block) kept on the host and mirrored in one
// host-visible buffer of every sequence's table that the kernels read (a row of a pass names its table).
//
// Blocks are reference-counted so that sequences can share a prompt prefix (share_prefix): a shared block
// is never written. When a sequence's next write lands in a block it shares (the partial last block of a
// shared prefix), grow() gives it a private copy (copy-on-write): the device copy is queued and recorded by
// record_copies() before the pass that writes it.
//
// Invariants (check_invariants() asserts them; the tests call it):
//   - a sequence of length L owns exactly ceil(L / block_size) table entries, in table order;
//   - a block's reference count is the number of table entries naming it; a block is free iff its count
//     is 0, and every free block is on the free list exactly once;
//   - truncate(seq, n) drops the entries whose first position is >= n and never touches kept entries.
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
  // Makes positions [length, new_len) writable (allocating blocks on demand, copying a shared block the
  // write would land in) and sets the length. Throws Error if the context or the pool would overflow.
  void grow(int seq, uint32_t new_len);
  void truncate(int seq, uint32_t new_len);
  // An empty sequence `dst` takes the first n positions of `src` by reference (n <= length(src)): the
  // blocks holding them are shared, none is copied now. Returns the number of blocks shared.
  uint32_t share_prefix(int dst, int src, uint32_t n);
  // Records the copy-on-write copies that grow() queued (every layer's K and V block), then a barrier.
  // Called once the blocks of a pass are known and before the pass writes them.
  void record_copies(Recorder& r);
  // A pass that failed while recording is never submitted: its queued copies are forgotten (the sequences
  // that grew in it are freed by the caller).
  void drop_pending_copies() { pending_copies_.clear(); }

  PagedKvView view(uint32_t layer) const;
  // Layer `layer`'s K (v false) or V physical block `block`: block_size positions of [n_kv_heads][head_dim]
  // f16 each, position_bytes() apart (session files copy positions out of them and back).
  Slice block(uint32_t layer, bool v, uint32_t block) const;
  VkDeviceSize position_bytes() const { return block_bytes_ / block_size_; }
  // Where seq's table starts in view().block_tables, in uints (KvRows).
  uint32_t table_offset(int seq) const { return uint32_t(seq) * max_blocks_per_seq_; }
  const std::vector<uint32_t>& block_table(int seq) const { return seqs_.at(seq).blocks; }
  uint32_t free_blocks() const { return uint32_t(free_.size()); }
  uint32_t total_blocks() const { return uint32_t(refs_.size()); }
  uint32_t blocks_in_use() const { return total_blocks() - free_blocks(); }
  uint64_t blocks_allocated() const { return allocated_; }   // blocks taken from the free list, ever
  uint64_t blocks_copied() const { return copied_; }         // copy-on-write copies, ever
  uint32_t block_size() const { return block_size_; }
  uint32_t max_sequences() const { return uint32_t(seqs_.size()); }
  uint32_t max_seq_len() const { return max_seq_len_; }
  uint32_t blocks_for(uint32_t positions) const { return (positions + block_size_ - 1) / block_size_; }
  void check_invariants() const;

 private:
  struct Sequence {
    bool used = false;
    uint32_t length = 0;
    std::vector<uint32_t> blocks;
    uint32_t* table = nullptr;   // its part of tables_
  };
  uint32_t take_block();
  void release_block(uint32_t b);

  uint32_t block_size_, max_seq_len_, max_blocks_per_seq_;
  VkDeviceSize block_bytes_;
  std::vector<Slice> k_pools_, v_pools_;   // per layer: [n_blocks][block_size][n_kv_heads][head_dim] f16
  Slice tables_;                           // [max_sequences][max_blocks_per_seq] uint, host-visible
  std::vector<uint32_t> free_;             // free physical blocks (LIFO: recently freed reused first)
  std::vector<uint32_t> refs_;             // per physical block: table entries naming it
  std::vector<std::pair<uint32_t, uint32_t>> pending_copies_;   // (from, to) queued by grow()
  std::vector<Sequence> seqs_;
  uint64_t allocated_ = 0, copied_ = 0;
};

}  // namespace vkspec
