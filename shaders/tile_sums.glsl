// A tile's sums reduced in the order of wg_sum_pairwise (common.glsl) without shuffles, shared by the tile
// kernels (matmul_tile.comp, matmul_dot8.comp): each of the WG = MATMUL_ROW_LANES lanes puts its partial
// sum of each value, then lane_sum(value) adds value's lane sums as the pairwise tree in lane order. Include
// after contract.h.
// Every (row, token) sum of a tile (and SwiGLU's second one, and RMSNorm's sum of squares per token) is
// reduced through this: value i's lane sums in row i of WG + 4 floats (the padding keeps one lane's vec4
// reads of its row and other lanes' of theirs in different banks), laid out as contract.h MATMUL_TILE_SUMS
// says (the host checks that a tile's values fit MATMUL_TILE_VALUES and passes WG = MATMUL_ROW_LANES).
const uint ROW = WG + 4u;
shared float tile_partials[MATMUL_TILE_VALUES * (MATMUL_ROW_LANES + 4u)];

// A value past the slots is dropped and reads back as NaN, so that a tile too large for them fails every
// test instead of writing past the array (the checks fold away: values are constants after unrolling).
void put_partial(uint value, float v) {
  if (value < MATMUL_TILE_VALUES) tile_partials[value * ROW + gl_LocalInvocationID.x] = v;
}

// wg_sum_pairwise's result for `value` (after the barrier that follows the put_partial calls): the pairwise
// tree over its WG lane sums, in registers.
float lane_sum(uint value) {
  if (value >= MATMUL_TILE_VALUES) return uintBitsToFloat(0x7fc00000u);
  precise float t[MATMUL_ROW_LANES];
  [[unroll]] for (uint i = 0; i < WG; i += 4u) {
    const uint at = value * ROW + i;
    t[i] = tile_partials[at];
    t[i + 1u] = tile_partials[at + 1u];
    t[i + 2u] = tile_partials[at + 2u];
    t[i + 3u] = tile_partials[at + 3u];
  }
  [[unroll]] for (uint w = 1u; w < WG; w *= 2u)
    [[unroll]] for (uint i = 0; i < WG; i += 2u * w) t[i] = t[i] + t[i + w];
  return t[0];
}

