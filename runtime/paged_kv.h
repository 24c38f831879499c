#pragma once
// Block-paged KV cache for one model: KvBlockPool's block tables (runtime/kv_block_pool.h) over one K and one
// V pool per layer on the device, with the tables mirrored in one host-visible buffer the kernels read (a row
// of a pass names its table).
#include <cstdint>
#include <vector>

#include "runtime/kernels.h"
#include "runtime/kv_block_pool.h"

namespace vkspec {

class PagedKvCache : public KvBlockPool {
 public:
  // (the tables buffer is allocated from `upload` before the base class mirrors into it)
  PagedKvCache(Arena& device, Arena& upload, uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim,
               uint32_t block_size, uint32_t n_blocks, uint32_t max_seq_len, uint32_t max_sequences = 4);

  // Queues the move of seq's K/V at position `from` to position `to` (every layer's): a token tree's accepted
  // path, from the slots its nodes were stored at to the positions they now hold. The physical slots are
  // taken now, so the caller may truncate the sequence next.
  void queue_move(int seq, uint32_t from, uint32_t to);
  // Records the queued moves, then the copy-on-write copies that grow() queued (every layer's K and V
  // block), each followed by a barrier. Called before a pass writes its blocks (LlamaModel's chunks), and
  // before the cache is read on the host (session files).
  void record_copies(Recorder& r);
  bool copies_pending() const { return !pending_moves_.empty() || !pending_copies().empty(); }

  PagedKvView view(uint32_t layer) const;
  // Layer `layer`'s K (v false) or V physical block `block`: block_size positions of [n_kv_heads][head_dim]
  // f16 each, position_bytes() apart (session files copy positions out of them and back).
  Slice block(uint32_t layer, bool v, uint32_t block) const;
  VkDeviceSize position_bytes() const { return block_bytes_ / block_size(); }
  // Where seq's table starts in view().block_tables, in uints (KvRows).
  uint32_t table_offset(int seq) const { return uint32_t(seq) * max_blocks_per_sequence(); }

 private:
  PagedKvCache(Arena& device, uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim, uint32_t block_size,
               uint32_t n_blocks, uint32_t max_seq_len, uint32_t max_sequences, Slice tables);
  VkDeviceSize block_bytes_;
  std::vector<Slice> k_pools_, v_pools_;   // per layer: [n_blocks][block_size][n_kv_heads][head_dim] f16
  Slice tables_;                           // [max_sequences][max_blocks_per_seq] uint, host-visible
  struct Move { uint32_t from_block, from_offset, to_block, to_offset; };
  std::vector<Move> pending_moves_;        // queue_move's, recorded (in order) by record_copies
};

}  // namespace vkspec
