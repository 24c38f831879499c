#include "runtime/kv_block_pool.h"

#include <string>

#include "core/core.h"

namespace vkspec {

KvBlockPool::KvBlockPool(uint32_t block_size, uint32_t n_blocks, uint32_t max_seq_len, uint32_t max_sequences,
                         uint32_t* tables)
    : block_size_(block_size), max_seq_len_(max_seq_len) {
  if (block_size == 0 || n_blocks == 0) throw Error("KV cache needs at least one block");
  max_blocks_per_seq_ = (max_seq_len + block_size - 1) / block_size;
  for (uint32_t b = n_blocks; b-- > 0;) free_.push_back(b);
  refs_.assign(n_blocks, 0);
  seqs_.resize(max_sequences);
  if (tables)
    for (size_t i = 0; i < seqs_.size(); ++i) seqs_[i].table = tables + i * max_blocks_per_seq_;
}

int KvBlockPool::new_sequence() {
  for (size_t i = 0; i < seqs_.size(); ++i)
    if (!seqs_[i].used) {
      seqs_[i].used = true;
      seqs_[i].length = 0;
      return int(i);
    }
  throw Error("too many concurrent sequences in the KV cache");
}

void KvBlockPool::free_sequence(int seq) {
  truncate(seq, 0);
  seqs_.at(seq).used = false;
}

uint32_t KvBlockPool::take_block() {
  const uint32_t b = free_.back();
  free_.pop_back();
  refs_[b] = 1;
  ++allocated_;
  return b;
}

void KvBlockPool::release_block(uint32_t b) {
  if (refs_.at(b) == 0) throw Error("internal: KV block released twice");
  if (--refs_[b] == 0) free_.push_back(b);
}

void KvBlockPool::grow(int seq, uint32_t new_len) {
  Sequence& s = seqs_.at(seq);
  if (!s.used) throw Error("internal: grow of a free KV sequence");
  if (new_len > max_seq_len_)
    throw Error("context is full: " + std::to_string(new_len) + " tokens > context size " + std::to_string(max_seq_len_));
  if (new_len <= s.length) return;
  // The block the first new position lands in, when the sequence already holds it and shares it.
  const uint32_t first = s.length / block_size_;
  const bool cow = first < s.blocks.size() && refs_[s.blocks[first]] > 1;
  const uint32_t need = (new_len + block_size_ - 1) / block_size_;
  const uint32_t fresh = need - uint32_t(s.blocks.size()) + (cow ? 1 : 0);
  if (fresh > free_.size())
    throw Error("KV cache pool exhausted (" + std::to_string(free_.size()) + " free blocks)");
  if (cow) {
    const uint32_t from = s.blocks[first], to = take_block();
    release_block(from);   // still held by the sequences sharing it
    s.blocks[first] = to;
    set_entry(s, first, to);
    pending_copies_.emplace_back(from, to);
  }
  while (s.blocks.size() < need) {
    const uint32_t b = take_block();
    set_entry(s, s.blocks.size(), b);
    s.blocks.push_back(b);
  }
  s.length = new_len;
}

void KvBlockPool::truncate(int seq, uint32_t new_len) {
  Sequence& s = seqs_.at(seq);
  if (new_len >= s.length) return;
  const uint32_t keep = (new_len + block_size_ - 1) / block_size_;
  while (s.blocks.size() > keep) {
    release_block(s.blocks.back());
    s.blocks.pop_back();
  }
  s.length = new_len;
}

uint32_t KvBlockPool::share_prefix(int dst, int src, uint32_t n) {
  Sequence& d = seqs_.at(dst);
  const Sequence& s = seqs_.at(src);
  if (!d.used || !s.used || dst == src || d.length != 0 || n > s.length)
    throw Error("internal: share_prefix needs an empty sequence and a prefix of another");
  const uint32_t blocks = (n + block_size_ - 1) / block_size_;
  for (uint32_t i = 0; i < blocks; ++i) {
    ++refs_[s.blocks[i]];
    set_entry(d, i, s.blocks[i]);
    d.blocks.push_back(s.blocks[i]);
  }
  d.length = n;
  return blocks;
}

void KvBlockPool::check_invariants() const {
  std::vector<uint32_t> counted(refs_.size(), 0);
  for (const Sequence& s : seqs_) {
    if (!s.used && (s.length || !s.blocks.empty())) throw Error("internal KV invariant: a free sequence holds blocks");
    if (s.blocks.size() != (s.length + block_size_ - 1) / block_size_)
      throw Error("internal KV invariant: a sequence's table does not match its length");
    for (size_t i = 0; i < s.blocks.size(); ++i) {
      if (s.table && s.table[i] != s.blocks[i]) throw Error("internal KV invariant: device table out of date");
      ++counted.at(s.blocks[i]);
    }
  }
  std::vector<uint8_t> on_free(refs_.size(), 0);
  for (uint32_t b : free_) {
    if (on_free.at(b)++) throw Error("internal KV invariant: a block is free twice");
  }
  for (size_t b = 0; b < refs_.size(); ++b)
    if (counted[b] != refs_[b] || (refs_[b] == 0) != bool(on_free[b]))
      throw Error("internal KV invariant: block " + std::to_string(b) + " reference count is wrong");
}

}  // namespace vkspec
