#include "runtime/paged_kv.h"

#include <algorithm>
#include <cstring>

namespace vkspec {

PagedKvCache::PagedKvCache(Arena& device, Arena& upload, uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim,
                           uint32_t block_size, uint32_t n_blocks, uint32_t max_seq_len, uint32_t max_sequences)
    : block_size_(block_size), max_seq_len_(max_seq_len), max_blocks_per_seq_((max_seq_len + block_size - 1) / block_size) {
  if (block_size == 0 || n_blocks == 0) throw Error("KV cache needs at least one block");
  const VkDeviceSize pool_bytes = VkDeviceSize(n_blocks) * block_size * n_kv_heads * head_dim * sizeof(float);
  for (uint32_t l = 0; l < n_layers; ++l) {
    k_pools_.push_back(device.alloc(pool_bytes, "KV cache (K)"));
    v_pools_.push_back(device.alloc(pool_bytes, "KV cache (V)"));
  }
  for (uint32_t b = n_blocks; b-- > 0;) free_.push_back(b);
  seqs_.resize(max_sequences);
  for (auto& s : seqs_) {
    s.table = upload.alloc(max_blocks_per_seq_ * sizeof(uint32_t), "KV block table");
    memset(s.table.mapped, 0, s.table.size);
  }
}

int PagedKvCache::new_sequence() {
  for (size_t i = 0; i < seqs_.size(); ++i)
    if (!seqs_[i].used) {
      seqs_[i].used = true;
      seqs_[i].length = 0;
      return int(i);
    }
  throw Error("too many concurrent sequences in the KV cache");
}

void PagedKvCache::free_sequence(int seq) {
  truncate(seq, 0);
  seqs_.at(seq).used = false;
}

void PagedKvCache::grow(int seq, uint32_t new_len) {
  Sequence& s = seqs_.at(seq);
  if (new_len > max_seq_len_)
    throw Error("context is full: " + std::to_string(new_len) + " tokens > context size " + std::to_string(max_seq_len_));
  const uint32_t need = (new_len + block_size_ - 1) / block_size_;
  if (need > s.blocks.size() && need - s.blocks.size() > free_.size())
    throw Error("KV cache pool exhausted (" + std::to_string(free_.size()) + " free blocks)");
  while (s.blocks.size() < need) {
    uint32_t b = free_.back();
    free_.pop_back();
    s.table.host<uint32_t>()[s.blocks.size()] = b;
    s.blocks.push_back(b);
  }
  s.length = std::max(s.length, new_len);
}

void PagedKvCache::truncate(int seq, uint32_t new_len) {
  Sequence& s = seqs_.at(seq);
  if (new_len >= s.length) return;
  const uint32_t keep = (new_len + block_size_ - 1) / block_size_;
  while (s.blocks.size() > keep) {
    free_.push_back(s.blocks.back());
    s.blocks.pop_back();
  }
  s.length = new_len;
}

PagedKvView PagedKvCache::view(uint32_t layer, int seq) const {
  return PagedKvView{k_pools_.at(layer), v_pools_.at(layer), seqs_.at(seq).table, block_size_};
}

}  // namespace vkspec
