#version 460
// Causal grouped-query attention over the paged KV cache for n query rows, each at its own position over its
// own sequence's block table (rows[t]: the rows may belong to several sequences; a token tree's nodes see
// their ancestors' keys, paged_kv.glsl kv_slot).
// One workgroup per (head, token), or with pc.split > 0 per (head, token, split of `split` keys) (flash
// decoding: at long context a decode step has thousands of workgroups instead of n_heads): each writes its
// unnormalized partial {acc, m, l} and attention_combine.comp merges the splits in order. Keys are visited
// in chunks of WG with an online softmax; each output element is reduced over its keys in ascending order,
// and the splits of a token depend only on its position, so the result for a token depends only on its
// position and the cache contents: identical for a decode step and for any row of a verify batch (a token
// with one split gets acc / l either way).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "contract.h"
#include "paged_kv.glsl"


layout(push_constant) uniform PC { PC_ATTENTION } pc;   // shaders/contract.h

shared float q_s[MAX_HEAD_DIM];
shared float p_s[1024];

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, lane = gl_LocalInvocationID.x;
  const uint kvh = h / (pc.n_heads / pc.n_kv_heads);
  const uint q_base = t * pc.q_stride + h * pc.head_dim;
  const uint o_base = (t * pc.n_heads + h) * pc.head_dim;
  const uvec4 row = kv_row_of(pc.rows, t);   // {position, block table, tree base, tree path}
  const uint len = row.x + 1u;               // causal: keys first_key .. pos
  const uint split = gl_WorkGroupID.z;
  const uint k_begin = max(first_key(row.x, pc.window), pc.split > 0u ? split * pc.split : 0u);
  const uint k_end = pc.split > 0u ? min(len, split * pc.split + pc.split) : len;
  // past this token's keys (the dispatch covers the batch's longest row), or wholly before its window
  // (attention_combine.comp skips those splits)
  if (k_begin >= k_end) return;

  for (uint d = lane; d < pc.head_dim; d += WG) q_s[d] = Floats(pc.q).v[q_base + d];
  barrier();

  const uint DPL = (MAX_HEAD_DIM + WG - 1u) / WG;   // output dims owned per lane: d = lane + i*WG
  precise float acc[DPL];
  for (uint i = 0; i < DPL; ++i) acc[i] = 0.0;
  float m = -1.0 / 0.0, l = 0.0;

  for (uint c0 = k_begin; c0 < k_end; c0 += WG) {
    const uint j = c0 + lane;
    precise float s = -1.0 / 0.0;
    if (j < k_end) {
      const uint kb = kv_index(pc.block_tables, row.y, kv_slot(row, j), kvh, pc.n_kv_heads, pc.head_dim);
      s = 0.0;
      for (uint d = 0; d < pc.head_dim; d += 2u) {   // kb and head_dim are even: f16 pairs
        const vec2 k2 = kv_load2(pc.k_pool, kb + d);
        s += q_s[d] * k2.x;
        s += q_s[d + 1u] * k2.y;
      }
      s = softcap_score(s * pc.scale, pc.softcap);
    }
    const float m_new = max(m, wg_max(s));
    const float p = j < k_end ? exp(s - m_new) : 0.0;
    p_s[lane] = p;
    const float corr = exp(m - m_new);
    l = l * corr + wg_sum(p);
    barrier();
    const uint cn = min(WG, k_end - c0);
    for (uint i = 0; i < DPL; ++i) {
      const uint d = lane + i * WG;
      if (d >= pc.head_dim) break;
      precise float a = acc[i] * corr;
      for (uint jj = 0; jj < cn; ++jj)
        a += p_s[jj] * kv_load(pc.v_pool, kv_index(pc.block_tables, row.y, kv_slot(row, c0 + jj), kvh, pc.n_kv_heads, pc.head_dim) + d);
      acc[i] = a;
    }
    m = m_new;
    barrier();
  }
  if (pc.split > 0u) {
    const uint n_splits = gl_NumWorkGroups.z;
    const uint p_base = ((t * pc.n_heads + h) * n_splits + split) * (pc.head_dim + ATTENTION_PARTIAL_EXTRA);
    for (uint i = 0; i < DPL; ++i) {
      const uint d = lane + i * WG;
      if (d < pc.head_dim) Floats(pc.partials).v[p_base + d] = acc[i];
    }
    if (lane == 0u) {
      Floats(pc.partials).v[p_base + pc.head_dim] = m;
      Floats(pc.partials).v[p_base + pc.head_dim + 1u] = l;
    }
    return;
  }
  for (uint i = 0; i < DPL; ++i) {
    const uint d = lane + i * WG;
    if (d < pc.head_dim) Floats(pc.out_).v[o_base + d] = acc[i] / l;
  }
}
