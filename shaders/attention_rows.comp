#version 460
// Causal grouped-query attention for CPU devices (lavapipe): q and the paged KV cache are read through
// uniform texel buffers (one vector gather each, see matmul_rows.comp); a KV texel holds 8 f16 elements
// (shaders/paged_kv.glsl), so a 64-dim row is 8 fetches where f32 took 16 (the fetches are most of this
// kernel's time at long context). One workgroup per (kv head, token) serves the G query heads that share
// the kv head, so every K and V texel is fetched once for all of them. Keys are visited in chunks of C with
// an online softmax:
//   scores: lane i computes q_g . k_j for keys j = c0+i, c0+i+WG, ... (one K row per lane, texel by texel)
//   and keeps them, then their probabilities, in registers (pr: R vec4s, the G heads as components);
//   values: lane i owns KV texels i, i+WG, ... (dims 8i..8i+7, ...) and adds p_gj * V_j over the chunk in
//   key order, taking p_j from the lane that holds it with subgroupShuffle. The probabilities went through
//   shared memory before, which llvmpipe reads with a loop over the lanes per load: the shuffle made an
//   attention call at 4000 keys (1B shape) ~15-25% faster (interleaved probe runs).
// A workgroup is one subgroup (the host sets WG = the subgroup size): llvmpipe runs the subgroups of a
// larger workgroup as coroutines and switches between them at every barrier, and the online softmax has
// several per chunk; with 16 lanes (two subgroups) decode after 2000 tokens of context was 98 tok/s against
// 112-131 with 8, prefill 366-393 against 535-572 tok/s (pycode target).
// A token's result depends only on its position and the cache contents: identical for a decode step and
// for any row of a verify batch.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"
#include "contract.h"
#define PAGED_KV_BLOCK_SIZE_AT_RUN_TIME   // (its BLOCK_SIZE is this kernel's own, below)
#include "paged_kv.glsl"

layout(constant_id = 1) const uint BLOCK_SIZE = 16;
layout(constant_id = 2) const uint G = 1;   // query heads per kv head: 1..4
// head_dim as a constant: the d4 loops unroll and the row's q texels stay in registers (or the lane's
// stack), loaded once; fetched per key instead, they were G of every G + 1 texel fetches of the scores,
// each a function call on llvmpipe (attention at ~200 keys: 0.67 -> 0.60 ms for a 6-row verify, 0.99 ->
// 0.81 ms for a 16-row prefill chunk, pycode target). The host keeps HD <= 256 and HD % 8 == 0
// (Kernels::attention_texels): at most 256 q texels per lane, whole KV texels per row.
layout(constant_id = 3) const uint HD = 64;
const uint HD4 = HD / 4u;                   // q and output texels (f32) per head
const uint HD8 = HD / 8u;                   // KV texels (f16) per row
const uint OPL = (HD8 + WG - 1u) / WG;      // KV texels of the output per lane (two output texels each)
const uint C = 64;                          // keys per chunk
const uint R = (C + WG - 1u) / WG;          // keys per lane per chunk

layout(set = 0, binding = 0) uniform usamplerBuffer Q;    // block holding q [n][q_stride] (rotated)
layout(set = 0, binding = 1) uniform usamplerBuffer KP;   // block holding the K pool
layout(set = 0, binding = 2) uniform usamplerBuffer VP;   // block holding the V pool
layout(set = 0, binding = 3) uniform usamplerBuffer BT;   // block holding the block tables

layout(push_constant) uniform PC { PC_ATTENTION_ROWS } pc;   // shaders/contract.h

shared vec4 red4[8];

vec4 wg_max4(vec4 v) {
  v = subgroupMax(v);
  if (gl_NumSubgroups == 1) return v;
  barrier();
  if (subgroupElect()) red4[gl_SubgroupID] = v;
  barrier();
  vec4 m = red4[0];
  for (uint i = 1; i < gl_NumSubgroups; ++i) m = max(m, red4[i]);
  barrier();
  return m;
}

vec4 wg_sum4(vec4 v) {
  v = subgroupAdd(v);
  if (gl_NumSubgroups == 1) return v;
  barrier();
  if (subgroupElect()) red4[gl_SubgroupID] = v;
  barrier();
  vec4 s = vec4(0.0);
  for (uint i = 0; i < gl_NumSubgroups; ++i) s += red4[i];
  barrier();
  return s;
}

// row index (within a pool, in rows of HD8 texels) of position pos, kv head kvh, for the sequence
// whose block table starts at uint `table` of the tables
uint kv_row(uint table, uint pos, uint kvh) {
  const uint i = pc.block_tables * 4u + table + pos / BLOCK_SIZE;   // in uints
  const uint block = texelFetch(BT, int(i / 4u))[i % 4u];
  return (block * BLOCK_SIZE + pos % BLOCK_SIZE) * pc.n_kv_heads + kvh;
}

vec4 qv(uint t, uint head, uint d4) {
  return uintBitsToFloat(texelFetch(Q, int(pc.q + (t * pc.q_stride + head * HD) / 4u + d4)));
}

void main() {
  const uint kvh = gl_WorkGroupID.x, t = gl_WorkGroupID.y, lane = gl_LocalInvocationID.x;
  const uint h0 = kvh * G;
  const uvec4 row = kv_row_of(pc.rows, t);   // {position, block table, tree base, tree path}
  const uint len = row.x + 1u;              // causal: keys first_key .. pos
  vec4 m = vec4(-1.0 / 0.0), l = vec4(0.0);   // running max and sum per query head g (component g)
  // output texels 2e and 2e+1 (dims 8e..8e+7) of the G heads in [2i] and [2i+1], e = lane + i * WG
  vec4 acc0[2 * OPL], acc1[2 * OPL], acc2[2 * OPL], acc3[2 * OPL];
  [[unroll]] for (uint i = 0; i < 2 * OPL; ++i) acc0[i] = acc1[i] = acc2[i] = acc3[i] = vec4(0.0);

  vec4 q[HD4 * G];   // [d4][g]: the row's q texels of the G heads
  [[unroll]] for (uint d4 = 0; d4 < HD4; ++d4)
    [[unroll]] for (uint g = 0; g < G; ++g) q[d4 * G + g] = qv(t, h0 + g, d4);

  for (uint c0 = first_key(row.x, pc.window); c0 < len; c0 += C) {   // (chunks from the window's first key)
    const uint cn = min(C, len - c0);
    vec4 smax = vec4(-1.0 / 0.0);
    vec4 pr[R];   // this lane's keys lane + r * WG of the chunk: scores, then probabilities (0 past cn)
    [[unroll]] for (uint r = 0; r < R; ++r) {
      const uint jj = lane + r * WG;
      pr[r] = vec4(0.0);
      if (jj >= cn) continue;
      const uint kb = pc.k_pool + kv_row(row.y, kv_slot(row, c0 + jj), kvh) * HD8;
      vec4 s = vec4(0.0);
      [[unroll]] for (uint d8 = 0; d8 < HD8; ++d8) {
        const uvec4 u = texelFetch(KP, int(kb + d8));
        [[unroll]] for (uint h = 0; h < 2u; ++h) {   // dims 8 d8 + 4h .. + 3: q texel d4
          const uint d4 = 2u * d8 + h;
          const vec4 k4 = h == 0u ? vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y))
                                  : vec4(unpackHalf2x16(u.z), unpackHalf2x16(u.w));
          s.x += dot(q[d4 * G], k4);
          if (G > 1u) s.y += dot(q[d4 * G + 1u], k4);
          if (G > 2u) s.z += dot(q[d4 * G + 2u], k4);
          if (G > 3u) s.w += dot(q[d4 * G + 3u], k4);
        }
      }
      s *= pc.scale;
      if (pc.softcap > 0.0)
        s = vec4(softcap_score(s.x, pc.softcap), softcap_score(s.y, pc.softcap), softcap_score(s.z, pc.softcap),
                 softcap_score(s.w, pc.softcap));
      pr[r] = s;
      smax = max(smax, s);
    }
    const vec4 m_new = max(m, wg_max4(smax));
    const vec4 corr = exp(m - m_new);
    vec4 psum = vec4(0.0);
    [[unroll]] for (uint r = 0; r < R; ++r)
      if (lane + r * WG < cn) {
        pr[r] = exp(pr[r] - m_new);   // components past G: unused
        psum += pr[r];
      }
    l = l * corr + wg_sum4(psum);
    m = m_new;
    [[unroll]] for (uint i = 0; i < 2 * OPL; ++i) {
      acc0[i] *= corr.x; acc1[i] *= corr.y; acc2[i] *= corr.z; acc3[i] *= corr.w;
    }
    // keys in order: jj = r * WG + k, whose probabilities lane k holds in pr[r]
    for (uint jj = 0; jj < cn; ++jj) {
      const uint vb = pc.v_pool + kv_row(row.y, kv_slot(row, c0 + jj), kvh) * HD8;
      const vec4 p = subgroupShuffle(pr[jj / WG], jj % WG);
      const float p0 = p.x, p1 = p.y, p2 = p.z, p3 = p.w;
      [[unroll]] for (uint i = 0; i < OPL; ++i)
        if (lane + i * WG < HD8) {
          const uvec4 u = texelFetch(VP, int(vb + lane + i * WG));
          const vec4 lo = vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y)), hi = vec4(unpackHalf2x16(u.z), unpackHalf2x16(u.w));
          acc0[2 * i] += p0 * lo; acc0[2 * i + 1] += p0 * hi;
          if (G > 1u) { acc1[2 * i] += p1 * lo; acc1[2 * i + 1] += p1 * hi; }
          if (G > 2u) { acc2[2 * i] += p2 * lo; acc2[2 * i + 1] += p2 * hi; }
          if (G > 3u) { acc3[2 * i] += p3 * lo; acc3[2 * i + 1] += p3 * hi; }
        }
    }
  }
  [[unroll]] for (uint i = 0; i < OPL; ++i)
    if (lane + i * WG < HD8) {
      [[unroll]] for (uint h = 0; h < 2u; ++h) {
        const uint o = (t * pc.n_heads + h0) * HD4 + 2u * (lane + i * WG) + h;   // in vec4s
        Vec4s(pc.out_).v[o] = acc0[2 * i + h] / l.x;
        if (G > 1u) Vec4s(pc.out_).v[o + HD4] = acc1[2 * i + h] / l.y;
        if (G > 2u) Vec4s(pc.out_).v[o + 2u * HD4] = acc2[2 * i + h] / l.z;
        if (G > 3u) Vec4s(pc.out_).v[o + 3u * HD4] = acc3[2 * i + h] / l.w;
      }
    }
}
