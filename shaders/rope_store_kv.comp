#version 460
// RoPE on q and k of row t (at its position, rows[t].x), then k and v written to its sequence's paged KV (f16).
// Pairs are adjacent elements (2i, 2i+1) of each head, as GGUF llama / llama2.c lay them out; only the
// first n_rot dims rotate. cos/sin come from a host table [n][n_rot/2] computed in double precision
// (with Llama 3 frequency scaling folded in), indexed by position, so no large-angle GPU sin/cos is involved.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "contract.h"
#include "paged_kv.glsl"

layout(push_constant) uniform PC { PC_ROPE_STORE_KV } pc;   // shaders/contract.h

void rotate(uvec2 buf, uint base, uint i, vec2 cs) {
  const float a = Floats(buf).v[base + 2u * i], b = Floats(buf).v[base + 2u * i + 1u];
  const vec2 ab = rope_rotate(a, b, cs);
  Floats(buf).v[base + 2u * i] = ab.x;
  Floats(buf).v[base + 2u * i + 1u] = ab.y;
}

void main() {
  const uint t = gl_WorkGroupID.x, half_rot = pc.n_rot / 2u;
  const uint kv_dim = pc.n_kv_heads * pc.head_dim;
  const uvec2 row = kv_row_of(pc.rows, t);   // {position, block table}
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
    const uint dst = kv_index(pc.block_tables, row.y, row.x, h, pc.n_kv_heads, pc.head_dim) + d;
    const uint src = t * pc.kv_stride + j;
    kv_store2(pc.k_pool, dst, Floats(pc.k).v[src], Floats(pc.k).v[src + 1u]);
    kv_store2(pc.v_pool, dst, Floats(pc.v).v[src], Floats(pc.v).v[src + 1u]);
  }
}
