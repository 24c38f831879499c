#pragma once
// The host side of a block-paged KV cache (PagedKvCache adds the device pools): a pool of fixed-size blocks
// shared by all sequences, and per sequence a block table (logical block -> physical block), mirrored into
// `tables` when one is given (the host-visible buffer the kernels read). No device is needed: the batch
// engine's admission is tested on this alone.
//
// Blocks are reference-counted so that sequences can share a prompt prefix (share_prefix): a shared block is
// never written. When a sequence's next write lands in a block it shares (the partial last block of a shared
// prefix), grow() gives it a private block and queues the copy (pending_copies), which the device side records
// before the pass that writes it.
//
// Invariants (check_invariants() asserts them):
//   - a sequence of length L owns exactly ceil(L / block_size) table entries, in table order;
//   - a block's reference count is the number of table entries naming it; a block is free iff its count
//     is 0, and every free block is on the free list exactly once;
//   - truncate(seq, n) drops the entries whose first position is >= n and never touches kept entries.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace vkspec {

class KvBlockPool {
 public:
  // tables: [max_sequences][ceil(max_seq_len / block_size)] uints to mirror the tables into (null: none).
  KvBlockPool(uint32_t block_size, uint32_t n_blocks, uint32_t max_seq_len, uint32_t max_sequences,
              uint32_t* tables = nullptr);

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
  // The copy-on-write copies grow() queued, (from, to) physical blocks; a pass that failed while recording
  // is never submitted, and its queued copies are forgotten (the sequences that grew in it are freed).
  const std::vector<std::pair<uint32_t, uint32_t>>& pending_copies() const { return pending_copies_; }
  void drop_pending_copies() { pending_copies_.clear(); }

  const std::vector<uint32_t>& block_table(int seq) const { return seqs_.at(seq).blocks; }
  uint32_t free_blocks() const { return uint32_t(free_.size()); }
  uint32_t total_blocks() const { return uint32_t(refs_.size()); }
  uint32_t blocks_in_use() const { return total_blocks() - free_blocks(); }
  uint64_t blocks_allocated() const { return allocated_; }   // blocks taken from the free list, ever
  uint64_t blocks_copied() const { return copied_; }         // copy-on-write copies, ever
  uint32_t block_size() const { return block_size_; }
  uint32_t max_sequences() const { return uint32_t(seqs_.size()); }
  uint32_t max_seq_len() const { return max_seq_len_; }
  uint32_t max_blocks_per_sequence() const { return max_blocks_per_seq_; }
  uint32_t blocks_for(uint32_t positions) const { return (positions + block_size_ - 1) / block_size_; }
  void check_invariants() const;

 protected:
  void copies_recorded() {
    copied_ += pending_copies_.size();
    pending_copies_.clear();
  }

 private:
  struct Sequence {
    bool used = false;
    uint32_t length = 0;
    std::vector<uint32_t> blocks;
    uint32_t* table = nullptr;   // its part of the mirrored tables (null: none)
  };
  uint32_t take_block();
  void release_block(uint32_t b);
  void set_entry(Sequence& s, size_t i, uint32_t b) {
    if (s.table) s.table[i] = b;
  }

  uint32_t block_size_, max_seq_len_, max_blocks_per_seq_;
  std::vector<uint32_t> free_;   // free physical blocks (LIFO: recently freed reused first)
  std::vector<uint32_t> refs_;   // per physical block: table entries naming it
  std::vector<std::pair<uint32_t, uint32_t>> pending_copies_;   // (from, to) queued by grow()
  std::vector<Sequence> seqs_;
  uint64_t allocated_ = 0, copied_ = 0;
};

}  // namespace vkspec
