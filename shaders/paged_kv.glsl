// Paged KV addressing. A layer's K (or V) pool is [n_blocks][block_size][n_kv_heads][head_dim] f32; every
// sequence's block table (logical block pos / block_size -> physical block) lives in one tables buffer, and
// each row of a pass says where it is: rows[t] = {position, first uint of its sequence's table}, so one
// dispatch serves the rows of several sequences (continuous batching).
uvec2 kv_row_of(uvec2 rows, uint t) { return Uvec2s(rows).v[t]; }

// The float index of (pos, kv_head, dim 0) in a pool, for a block size known only at run time.
uint kv_index_in(uvec2 tables, uint table, uint pos, uint kv_head, uint n_kv_heads, uint head_dim, uint block_size) {
  const uint block = Uints(tables).v[table + pos / block_size];
  return ((block * block_size + pos % block_size) * n_kv_heads + kv_head) * head_dim;
}

// Most kernels take the block size as specialization constant 1; one whose constant 1 means something else
// (matmul_rows.comp, MODE_ROPE_KV) defines PAGED_KV_BLOCK_SIZE_AT_RUN_TIME and calls kv_index_in.
#ifndef PAGED_KV_BLOCK_SIZE_AT_RUN_TIME
layout(constant_id = 1) const uint BLOCK_SIZE = 16;

uint kv_index(uvec2 tables, uint table, uint pos, uint kv_head, uint n_kv_heads, uint head_dim) {
  return kv_index_in(tables, table, pos, kv_head, n_kv_heads, head_dim, BLOCK_SIZE);
}
#endif
