#include "runtime/paged_kv.h"

#include <cstring>

namespace vkspec {
namespace {
// The tables' buffer, zeroed, allocated before KvBlockPool mirrors into it.
Slice table_buffer(Arena& upload, uint32_t block_size, uint32_t max_seq_len, uint32_t max_sequences) {
  if (block_size == 0) throw Error("KV cache needs at least one block");
  const VkDeviceSize per_seq = (max_seq_len + block_size - 1) / block_size;
  Slice s = upload.alloc(VkDeviceSize(max_sequences) * per_seq * sizeof(uint32_t), "KV block tables");
  memset(s.mapped, 0, s.size);
  return s;
}
}  // namespace

PagedKvCache::PagedKvCache(Arena& device, Arena& upload, uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim,
                           uint32_t block_size, uint32_t n_blocks, uint32_t max_seq_len, uint32_t max_sequences)
    : PagedKvCache(device, n_layers, n_kv_heads, head_dim, block_size, n_blocks, max_seq_len, max_sequences,
                   table_buffer(upload, block_size, max_seq_len, max_sequences)) {}

PagedKvCache::PagedKvCache(Arena& device, uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim, uint32_t block_size,
                           uint32_t n_blocks, uint32_t max_seq_len, uint32_t max_sequences, Slice tables)
    : KvBlockPool(block_size, n_blocks, max_seq_len, max_sequences, tables.host<uint32_t>()), tables_(tables) {
  if (head_dim % 2) throw Error("internal: the f16 KV cache needs an even head_dim");
  block_bytes_ = VkDeviceSize(block_size) * n_kv_heads * head_dim * contract::KV_ELEMENT_BYTES;
  const VkDeviceSize pool_bytes = VkDeviceSize(n_blocks) * block_bytes_;
  for (uint32_t l = 0; l < n_layers; ++l) {
    k_pools_.push_back(device.alloc(pool_bytes, "KV cache (K)"));
    v_pools_.push_back(device.alloc(pool_bytes, "KV cache (V)"));
  }
}

Slice PagedKvCache::block(uint32_t layer, bool v, uint32_t b) const {
  if (layer >= k_pools_.size() || b >= total_blocks())
    throw Error("internal: no KV block " + std::to_string(b) + " of layer " + std::to_string(layer));
  return (v ? v_pools_ : k_pools_)[layer].sub(VkDeviceSize(b) * block_bytes_, block_bytes_);
}

void PagedKvCache::queue_move(int seq, uint32_t from, uint32_t to) {
  if (from >= length(seq) || to >= length(seq)) throw Error("internal: a KV move outside the sequence");
  const auto slot = [&](uint32_t pos) { return std::pair(tables_.host<uint32_t>()[table_offset(seq) + pos / block_size()], pos % block_size()); };
  const auto [fb, fo] = slot(from);
  const auto [tb, to_off] = slot(to);
  pending_moves_.push_back({fb, fo, tb, to_off});
}

void PagedKvCache::record_copies(Recorder& r) {
  if (!pending_moves_.empty()) {   // in order: a move may read a slot an earlier one wrote
    const VkDeviceSize pos = position_bytes();
    for (const Move& m : pending_moves_) {
      for (size_t l = 0; l < k_pools_.size(); ++l)
        for (const std::vector<Slice>* pools : {&k_pools_, &v_pools_})
          r.copy((*pools)[l].sub(m.from_block * block_bytes_ + m.from_offset * pos, pos),
                 (*pools)[l].sub(m.to_block * block_bytes_ + m.to_offset * pos, pos));
      r.barrier();
    }
    pending_moves_.clear();
  }
  if (pending_copies().empty()) return;
  for (const auto& [from, to] : pending_copies())
    for (size_t l = 0; l < k_pools_.size(); ++l) {
      r.copy(k_pools_[l].sub(from * block_bytes_, block_bytes_), k_pools_[l].sub(to * block_bytes_, block_bytes_));
      r.copy(v_pools_[l].sub(from * block_bytes_, block_bytes_), v_pools_[l].sub(to * block_bytes_, block_bytes_));
    }
  copies_recorded();
  r.barrier();
}

PagedKvView PagedKvCache::view(uint32_t layer) const {
  return PagedKvView{k_pools_.at(layer), v_pools_.at(layer), tables_, block_size()};
}

}  // namespace vkspec
