// Paged KV addressing. A layer's K (or V) pool is [n_blocks][block_size][n_kv_heads][head_dim] f16 with
// elements 2i and 2i+1 of a head packed in one uint (contract.h KV_ELEMENT_BYTES; llama.cpp's default cache
// type, and half the bytes of f32 for the attention to read). Every sequence's block table (logical block
// pos / block_size -> physical block) lives in one tables buffer, and each row of a pass says where it is:
// rows[t] = {position, first uint of its sequence's table, tree base, tree path} (contract.h KV_ROW_UINTS), so
// one dispatch serves the rows of several sequences (continuous batching) and the nodes of a token tree.
uvec4 kv_row_of(uvec2 rows, uint t) { return Uvec4s(rows).v[t]; }
// The slot that holds key position j of `row` (j <= its position): j itself, or inside a token tree the
// slot of the row's ancestor at that depth.
uint kv_slot(uvec4 row, uint j) { return j < row.z ? j : row.z + ((row.w >> (4u * (j - row.z))) & 15u); }

// Element i of a pool (an index from kv_index_in + a dim).
float kv_load(uvec2 pool, uint i) {
  const vec2 h = unpackHalf2x16(Uints(pool).v[i >> 1]);
  return (i & 1u) == 0u ? h.x : h.y;
}
// Elements i and i + 1 of a pool (i even: a pair never straddles two uints).
vec2 kv_load2(uvec2 pool, uint i) { return unpackHalf2x16(Uints(pool).v[i >> 1]); }
void kv_store2(uvec2 pool, uint i, float a, float b) { Uints(pool).v[i >> 1] = packHalf2x16(vec2(a, b)); }

// The element index of (pos, kv_head, dim 0) in a pool, for a block size known only at run time.
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
