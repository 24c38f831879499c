// Paged KV addressing. A layer's K (or V) pool is [n_blocks][BLOCK_SIZE][n_kv_heads][head_dim] f32;
// a sequence's block table maps logical block (pos / BLOCK_SIZE) to a physical block of the pool.
layout(constant_id = 1) const uint BLOCK_SIZE = 16;

uint kv_index(uvec2 block_table, uint pos, uint kv_head, uint n_kv_heads, uint head_dim) {
  const uint block = Uints(block_table).v[pos / BLOCK_SIZE];
  return ((block * BLOCK_SIZE + pos % BLOCK_SIZE) * n_kv_heads + kv_head) * head_dim;
}
