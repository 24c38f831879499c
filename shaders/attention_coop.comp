#version 460
// Causal GQA attention as a flash-attention tile on matrix units (MatmulPath::Coopmat) or its emulation
// (CoopmatEmulated), for every pass of a model on that path, one token included. A workgroup of 32 lanes owns
// ROWS = 16 query rows of one kv head: its G query heads of TQ consecutive tokens of the pass (row r: token
// r / G, head r % G; TQ = ROWS / G where the pass is one sequence's without a tree, else 1), over the keys of
// split z (COOP_ATTN_SPLIT keys each when pc.split > 0: attention_combine.comp then merges a row's splits in
// order). Keys go in chunks of KEYS at absolute positions:
//   S = Q K^T                16 x KEYS: f16 q and k, f32 sums, into shared memory;
//   per row (lane r < 16):   scale, soft cap and mask its keys, online softmax (m, l), p rounded to f16;
//   O = O * corr + P V       16 x head_dim, f32, in shared memory (lane: row lane % 16, every other dim).
// The COOPMAT_NV build (and the KHR build made from it: coop_types.glsl) multiplies on 16x16x16 cooperative-
// matrix tiles (one subgroup of 32); the default build emulates both products from the same shared tiles, an
// element at a time (sums in dim order, then key order), so every index, mask and softmax step runs wherever
// the emulation does (lavapipe in CI).
//
// Batch invariance: a row's chunks, masks, softmax and sums depend only on its own position, q and keys (an
// element of a product comes from its row and its column alone), so a token gets the same bits alone (a
// decode step: G valid rows) or in any tile, split or not (a token with one split: acc / l either way). Keys
// outside every row's range are zero, never read (a window's dropped blocks). Rows of different sequences or
// of a token tree cannot share a chunk's keys: the host gives such a pass a token per tile
// (KvRows::one_sequence; a tile that took its tokens in turns lost lanes' work on lavapipe past ~100 chunks,
// cause not found).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifdef COOPMAT_NV
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#endif
#include "common.glsl"
#include "contract.h"
#include "coop_types.glsl"
#include "paged_kv.glsl"

layout(constant_id = 2) const uint G = 1;     // query heads per kv head: 1..ROWS
layout(constant_id = 3) const uint HD = 64;   // head_dim: a multiple of 16, <= COOP_ATTN_MAX_HEAD_DIM
const uint ROWS = COOP_ATTN_ROWS, KEYS = COOP_ATTN_KEYS, MAXD = COOP_ATTN_MAX_HEAD_DIM;
const uint DS = MAXD + 8u;                    // shared row stride (elements) of the q and key/value tiles

layout(push_constant) uniform PC { PC_ATTENTION_COOP } pc;   // shaders/contract.h

#ifdef COOPMAT_NV
#define SH_T float16_t
SH_T to_sh(float v) { return float16_t(v); }
#else
#define SH_T float
float to_sh(float v) { return unpackHalf2x16(packHalf2x16(vec2(v, 0.0))).x; }   // the value an f16 tile holds
#endif
shared SH_T sh_q[ROWS * DS];      // [row][dim]
shared SH_T sh_kv[KEYS * DS];     // the chunk's keys [key][dim], then its values
shared float sh_s[ROWS * KEYS];   // scores [row][key]
shared SH_T sh_p[ROWS * KEYS];    // probabilities [row][key]
shared float sh_m[ROWS], sh_l[ROWS], sh_corr[ROWS];
shared uint sh_on[ROWS];          // the row takes part in this chunk
shared float sh_o[ROWS * MAXD];   // the rows' unnormalized outputs [row][dim] (lane: row lane % 16, every other dim)
#ifdef COOPMAT_NV
shared float sh_pv[ROWS * MAXD];  // the chunk's P V [row][dim]
#endif

// Token t's keys in this workgroup's split: [begin, end) (empty when begin >= end).
uvec2 key_range(uint t) {
  const uint pos = kv_row_of(pc.rows, t).x;
  const uint lo = pc.split > 0u ? gl_WorkGroupID.z * pc.split : 0u;
  const uint hi = pc.split > 0u ? lo + pc.split : pos + 1u;
  return uvec2(max(first_key(pos, pc.window), lo), min(pos + 1u, hi));
}

// Keys c0 .. c0 + KEYS - 1 of `pool` at row ref's slots -> sh_kv (zero outside [kb, ke)).
void load_keys(uvec2 pool, uvec4 ref, uint kvh, uint c0, uint kb, uint ke) {
  for (uint i = gl_LocalInvocationID.x; i < KEYS * HD / 2u; i += WG) {
    const uint j = i / (HD / 2u), d = 2u * (i % (HD / 2u)), key = c0 + j;
    vec2 v = vec2(0.0);
    if (key >= kb && key < ke) v = kv_load2(pool, kv_index(pc.block_tables, ref.y, kv_slot(ref, key), kvh, pc.n_kv_heads, HD) + d);
    sh_kv[j * DS + d] = to_sh(v.x);
    sh_kv[j * DS + d + 1u] = to_sh(v.y);
  }
}

void main() {
  const uint kvh = gl_WorkGroupID.x, lane = gl_LocalInvocationID.x;
  const uint TQ = pc.tile_tokens, t0 = gl_WorkGroupID.y * TQ, nt = min(TQ, pc.n - t0);
  const uint my_r = lane % ROWS, my_half = lane / ROWS;   // this lane's output: row my_r, dims my_half, + 2, ...

  uint kb = 0xffffffffu, ke = 0u;   // the union of the tile's tokens' keys in this split
  for (uint tt = 0; tt < nt; ++tt) {
    const uvec2 kr = key_range(t0 + tt);
    if (kr.x < kr.y) {
      kb = min(kb, kr.x);
      ke = max(ke, kr.y);
    }
  }
  if (kb >= ke) return;   // (uniform: past every token's keys, or before its window)
  const uvec4 ref = kv_row_of(pc.rows, t0);   // whose slots hold the keys (every token's: one sequence, no tree)

  for (uint i = lane; i < ROWS * HD / 2u; i += WG) {
    const uint r = i / (HD / 2u), d = 2u * (i % (HD / 2u)), tt = r / G;
    vec2 v = vec2(0.0);
    if (tt < nt) {
      const uint at = (t0 + tt) * pc.q_stride + (kvh * G + r % G) * HD + d;
      v = vec2(Floats(pc.q).v[at], Floats(pc.q).v[at + 1u]);
    }
    sh_q[r * DS + d] = to_sh(v.x);
    sh_q[r * DS + d + 1u] = to_sh(v.y);
  }
  if (lane < ROWS) {
    sh_m[lane] = -1.0 / 0.0;
    sh_l[lane] = 0.0;
  }
  for (uint i = lane; i < ROWS * MAXD; i += WG) sh_o[i] = 0.0;

  for (uint c0 = kb / KEYS * KEYS; c0 < ke; c0 += KEYS) {
      barrier();   // the previous chunk's values and probabilities are read
      load_keys(pc.k_pool, ref, kvh, c0, kb, ke);
      barrier();
#ifdef COOPMAT_NV
      {
        COOP_ACC s[KEYS / COOP_TILE];
        [[unroll]] for (uint j = 0; j < KEYS / COOP_TILE; ++j) s[j] = COOP_ACC(0.0);
        for (uint kc = 0; kc < HD; kc += COOP_TILE) {
          COOP_A a;
          COOP_B b;
          coopMatLoadNV(a, sh_q, kc, DS, false);
          [[unroll]] for (uint j = 0; j < KEYS / COOP_TILE; ++j) {
            coopMatLoadNV(b, sh_kv, COOP_TILE * j * DS + kc, DS, true);   // [dim][key]: keys DS apart
            s[j] = coopMatMulAddNV(a, b, s[j]);
          }
        }
        [[unroll]] for (uint j = 0; j < KEYS / COOP_TILE; ++j) coopMatStoreNV(s[j], sh_s, COOP_TILE * j, KEYS, false);
      }
#else
      for (uint i = lane; i < ROWS * KEYS; i += WG) {
        const uint r = i / KEYS, j = i % KEYS;
        precise float s = 0.0;
        for (uint d = 0; d < HD; ++d) s = dot1_acc(s, float(sh_q[r * DS + d]), float(sh_kv[j * DS + d]), true);
        sh_s[i] = s;
      }
#endif
      barrier();   // the scores are made and the keys read
      load_keys(pc.v_pool, ref, kvh, c0, kb, ke);
      if (lane < ROWS) {   // row `lane`'s online softmax over the chunk
        const uint r = lane, tt = r / G;
        const uvec2 kr = tt < nt ? key_range(t0 + tt) : uvec2(0u);
        const bool on = kr.x < kr.y && c0 < kr.y && c0 + KEYS > kr.x;
        sh_on[r] = on ? 1u : 0u;
        if (on) {
          float mx = -1.0 / 0.0;
          for (uint j = 0; j < KEYS; ++j) {
            const uint key = c0 + j;
            if (key < kr.x || key >= kr.y) continue;
            const float s = softcap_score(sh_s[r * KEYS + j] * pc.scale, pc.softcap);
            sh_s[r * KEYS + j] = s;
            mx = max(mx, s);
          }
          const float m = sh_m[r], m_new = max(m, mx), corr = exp(m - m_new);
          precise float sum = 0.0;
          for (uint j = 0; j < KEYS; ++j) {
            const uint key = c0 + j;
            const SH_T p = key < kr.x || key >= kr.y ? SH_T(0.0) : to_sh(exp(sh_s[r * KEYS + j] - m_new));
            sh_p[r * KEYS + j] = p;
            sum += float(p);
          }
          sh_l[r] = sh_l[r] * corr + sum;
          sh_m[r] = m_new;
          sh_corr[r] = corr;
        } else {
          for (uint j = 0; j < KEYS; ++j) sh_p[r * KEYS + j] = SH_T(0.0);
        }
      }
      barrier();   // the values and probabilities are in
#ifdef COOPMAT_NV
      {
        COOP_ACC pv[MAXD / COOP_TILE];
        [[unroll]] for (uint j = 0; j < MAXD / COOP_TILE; ++j) pv[j] = COOP_ACC(0.0);
        [[unroll]] for (uint kc = 0; kc < KEYS; kc += COOP_TILE) {
          COOP_A a;
          COOP_B b;
          coopMatLoadNV(a, sh_p, kc, KEYS, false);
          [[unroll]] for (uint j = 0; j < MAXD / COOP_TILE; ++j) {
            if (COOP_TILE * j >= HD) break;
            coopMatLoadNV(b, sh_kv, kc * DS + COOP_TILE * j, DS, false);   // [key][dim]
            pv[j] = coopMatMulAddNV(a, b, pv[j]);
          }
        }
        [[unroll]] for (uint j = 0; j < MAXD / COOP_TILE; ++j)
          if (COOP_TILE * j < HD) coopMatStoreNV(pv[j], sh_pv, COOP_TILE * j, MAXD, false);
      }
      barrier();
      if (sh_on[my_r] != 0u) {
        const float corr = sh_corr[my_r];
        for (uint d = my_half; d < HD; d += 2u) sh_o[my_r * MAXD + d] = sh_o[my_r * MAXD + d] * corr + sh_pv[my_r * MAXD + d];
      }
#else
      if (sh_on[my_r] != 0u) {
        const float corr = sh_corr[my_r];
        for (uint d = my_half; d < HD; d += 2u) {
          precise float pv = 0.0;
          for (uint j = 0; j < KEYS; ++j) pv = dot1_acc(pv, float(sh_p[my_r * KEYS + j]), float(sh_kv[j * DS + d]), true);
          sh_o[my_r * MAXD + d] = sh_o[my_r * MAXD + d] * corr + pv;
        }
      }
#endif
  }
  barrier();   // every row's m and l are final

  const uint tt = my_r / G, h = kvh * G + my_r % G;
  if (tt >= nt) return;
  const uvec2 kr = key_range(t0 + tt);
  if (kr.x >= kr.y) return;   // no keys here (attention_combine.comp skips this split)
  const uint t = t0 + tt;
  if (pc.split > 0u) {
    const uint base = ((t * pc.n_heads + h) * gl_NumWorkGroups.z + gl_WorkGroupID.z) * (HD + ATTENTION_PARTIAL_EXTRA);
    for (uint d = my_half; d < HD; d += 2u) Floats(pc.partials).v[base + d] = sh_o[my_r * MAXD + d];
    if (my_half == 0u) {
      Floats(pc.partials).v[base + HD] = sh_m[my_r];
      Floats(pc.partials).v[base + HD + 1u] = sh_l[my_r];
    }
    return;
  }
  const float l = sh_l[my_r];
  for (uint d = my_half; d < HD; d += 2u) Floats(pc.out_).v[(t * pc.n_heads + h) * HD + d] = sh_o[my_r * MAXD + d] / l;
}
