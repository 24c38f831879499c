// Paged KV addressing. A layer's K (or V) pool is [n_blocks][BLOCK_SIZE][n_kv_heads][head_dim] f32; every
// sequence's block table (logical block pos / BLOCK_SIZE -> physical block) lives in one tables buffer, and
// each row of a pass says where it is: rows[t] = {position, first uint of its sequence's table}, so one
// dispatch serves the rows of several sequences (continuous batching).
layout(constant_id = 1) const uint BLOCK_SIZE = 16;

uvec2 kv_row_of(uvec2 rows, uint t) { return Uvec2s(rows).v[t]; }

uint kv_index(uvec2 tables, uint table, uint pos, uint kv_head, uint n_kv_heads, uint head_dim) {
  const uint block = Uints(tables).v[table + pos / BLOCK_SIZE];
  return ((block * BLOCK_SIZE + pos % BLOCK_SIZE) * n_kv_heads + kv_head) * head_dim;
}
