#version 460
// Biases added to q, k and v of row t and each head of q and k RMS-normalized (where the model has them: Qwen2's
// biases, Qwen3's norms), RoPE on q and k (at its position, rows[t].x),
// then k and v written to its sequence's paged KV (f16). Pairs are adjacent elements (2i, 2i+1) of each head,
// as GGUF llama / llama2.c lay them out, or (i, i + n_rot/2) with pc.neox (Qwen2's); only the first n_rot
// dims rotate. cos/sin come from a host table [n][n_rot/2] computed in double precision
// (with Llama 3 frequency scaling folded in), indexed by position, so no large-angle GPU sin/cos is involved.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "contract.h"
#include "paged_kv.glsl"

layout(push_constant) uniform PC { PC_ROPE_STORE_KV } pc;   // shaders/contract.h

void rotate(uvec2 buf, uint base, uint i, vec2 cs) {
  const uint ia = base + (pc.neox != 0u ? i : 2u * i), ib = ia + (pc.neox != 0u ? pc.n_rot / 2u : 1u);
  const vec2 ab = rope_rotate(Floats(buf).v[ia], Floats(buf).v[ib], cs);
  Floats(buf).v[ia] = ab.x;
  Floats(buf).v[ib] = ab.y;
}

void add_bias(uint t, uint q_dim, uint kv_dim) {
  for (uint j = gl_LocalInvocationID.x; j < q_dim + 2u * kv_dim; j += WG) {
    const float b = Floats(pc.bias).v[j];
    if (j < q_dim) Floats(pc.q).v[t * pc.q_stride + j] += b;
    else if (j < q_dim + kv_dim) Floats(pc.k).v[t * pc.kv_stride + j - q_dim] += b;
    else Floats(pc.v).v[t * pc.kv_stride + j - q_dim - kv_dim] += b;
  }
  memoryBarrierBuffer();
  barrier();   // this workgroup's own row: biased before it is rotated and copied
}

// Each head of `heads` RMS-normalized over head_dim and scaled by w: a lane per head, in order (the sum's
// order is the row's own, whatever shares the pass).
void norm_heads(uvec2 buf, uint base, uint heads, uint w) {
  for (uint h = gl_LocalInvocationID.x; h < heads; h += WG) {
    const uint at = base + h * pc.head_dim;
    float ss = 0.0;
    for (uint e = 0u; e < pc.head_dim; ++e) ss += Floats(buf).v[at + e] * Floats(buf).v[at + e];
    const float scale = inversesqrt(ss / float(pc.head_dim) + pc.norm_eps);
    for (uint e = 0u; e < pc.head_dim; ++e) Floats(buf).v[at + e] *= scale * Floats(pc.qk_norm).v[w + e];
  }
}

void main() {
  const uint t = gl_WorkGroupID.x, half_rot = pc.n_rot / 2u;
  const uint kv_dim = pc.n_kv_heads * pc.head_dim;
  const uvec4 row = kv_row_of(pc.rows, t);   // {position, block table, tree base, tree path}
  if (pc.bias != uvec2(0u)) add_bias(t, pc.n_heads * pc.head_dim, kv_dim);
  if (pc.qk_norm != uvec2(0u)) {
    norm_heads(pc.q, t * pc.q_stride, pc.n_heads, 0u);
    norm_heads(pc.k, t * pc.kv_stride, pc.n_kv_heads, pc.head_dim);
    memoryBarrierBuffer();
    barrier();   // normalized before rotated (by other lanes)
  }
  for (uint j = gl_LocalInvocationID.x; j < pc.n_heads * half_rot; j += WG) {
    const uint h = j / half_rot, i = j % half_rot;
    rotate(pc.q, t * pc.q_stride + h * pc.head_dim, i, Vec2s(pc.rope).v[row.x * half_rot + i]);
  }
  for (uint j = gl_LocalInvocationID.x; j < pc.n_kv_heads * half_rot; j += WG) {
    const uint h = j / half_rot, i = j % half_rot;
    rotate(pc.k, t * pc.kv_stride + h * pc.head_dim, i, Vec2s(pc.rope).v[row.x * half_rot + i]);
  }
  barrier();   // k of this token is rotated by this workgroup before it is copied
  for (uint j2 = gl_LocalInvocationID.x; j2 < kv_dim / 2u; j2 += WG) {   // pairs (2i, 2i+1) of a head: one f16 pair
    const uint j = 2u * j2, h = j / pc.head_dim, d = j % pc.head_dim;
    const uint dst = kv_index(pc.block_tables, row.y, kv_slot(row, row.x), h, pc.n_kv_heads, pc.head_dim) + d;
    const uint src = t * pc.kv_stride + j;
    kv_store2(pc.k_pool, dst, Floats(pc.k).v[src], Floats(pc.k).v[src + 1u]);
    kv_store2(pc.v_pool, dst, Floats(pc.v).v[src], Floats(pc.v).v[src + 1u]);
  }
}
