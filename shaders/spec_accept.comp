#version 460
// Rejection sampling's verdict on one sequence's drafts (Leviathan et al. 2023, "Fast Inference from
// Transformers via Speculative Decoding"; runtime/token_choice.h says when it runs), over a chain or a token
// tree (Stratos, "Speculative Decoding", §2.1: several drafts tried in turn). At node u (the root: the last
// accepted token) its children c_1, c_2, ... are tried in order: c_j's draft d ~ q_j is accepted with
// probability min(1, r_j(d) / q_j(d)), u * q_j(d) < r_j(d) for a uniform u keyed by (seed, position + depth(u),
// ACCEPT_STREAM + j SIBLING_STREAM), where r_1 = p_u and each rejection leaves r_{j+1} = norm(max(0, r_j - q_j));
// an accepted child becomes u. Where every child is rejected the token is drawn from the last residual and the
// walk stops; at a node without children (every draft accepted) a bonus token is drawn from p_u with the plain
// draw's noise at its position. Draws are Gumbel-max over log weights (a residual's normalization does not
// move its argmax, so the last one is drawn unnormalized). Siblings drawn from one q independently (a draft
// model's draws after one node), or host drafts with q one-hot at their distinct tokens, keep the token's
// distribution p.
// p: sample_rows' dense probability rows of the target's verify rows (row i: node i); q: the draft model's
// rows by draft slot (slot c: the distribution c was drawn from, the same transforms), or none for host
// drafts. A chain's kept drafts are keep_drafts' (speculative/drafter.cpp): all up to the first i >= 1 whose
// top probability is below p_min (the same rule, written again here: the host knows the top probabilities
// only after the submission); a tree keeps every node.
// Verdict: out slots 0..a-1 = the accepted drafts (aux: their node), slot a = the residual's or the bonus draw
// (aux 0; p_u's own draw where no residual has weight), never a rejected sibling's token when the residual has
// weight, so the host's walk
// (speculative/controller.cpp) stops there. The out slots hold sample_rows' draws from p (by node) on entry:
// a NON_FINITE_TOKEN at the node the walk reaches (its row's logits were non-finite) is written at a and ends
// the walk. One workgroup per sequence; every lane walks alike (the residuals' sums need all of them).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "contract.h"
#include "rng.h"

layout(push_constant) uniform PC { PC_SPEC_ACCEPT } pc;   // shaders/contract.h

shared float red_s[WG];
shared uint red_i[WG];
shared bool s_bad, s_accept;
shared float s_rd;
// the rejections at the walk's current node, in order: the child and what its residual was divided by
// (> 0: the sum of max(0, r - q); <= 0: minus 1 - r(d), the residual being r without d: p and q equal to
// rounding leave no max(0, r - q))
shared uint rej_node[KV_TREE_MAX_NODES];
shared float rej_z[KV_TREE_MAX_NODES];

uint parent_of(uint i) {
  if (pc.tree == 0u) return i - 1u;
  return ((i < 8u ? pc.parents_lo >> (4u * i) : pc.parents_hi >> (4u * (i - 8u)))) & 15u;
}
uint depth_of(uint i) {
  uint d = 0u;
  for (; i != 0u; i = parent_of(i)) ++d;
  return d;
}

uint draft_token(uint c) { return Uints(pc.slots).v[SLOT_TOKEN(c)]; }

// Draft slot c's probability of v (one-hot at its token for host drafts).
float q_of(uint c, uint v) {
  if (pc.q == uvec2(0u)) return v == draft_token(c) ? 1.0 : 0.0;
  return Floats(pc.q).v[(c - 1u) * pc.V + v];
}

// r_{m+1}(v) at node u after its first m rejections.
float residual(uint u, uint v, uint m) {
  float r = Floats(pc.p).v[u * pc.V + v];
  for (uint j = 0u; j < m; ++j) {
    const uint c = rej_node[j];
    const float z = rej_z[j];
    r = z > 0.0 ? max(0.0, r - q_of(c, v)) / z : (v == draft_token(c) ? 0.0 : r / -z);
  }
  return r;
}

// The weight of v in node u's last draw: after m rejections, max(0, r_m - q_m) unnormalized (or, where that
// is empty, r_m without the rejected token); with none, p_u.
float last_weight(uint u, uint v, uint m, bool without_residual) {
  if (m == 0u) return Floats(pc.p).v[u * pc.V + v];
  const uint c = rej_node[m - 1u];
  if (v == draft_token(c)) return 0.0;
  const float r = residual(u, v, m - 1u);
  return without_residual ? r : max(0.0, r - q_of(c, v));
}

// The sum over the vocabulary of max(0, r_{m+1} - q_c) at node u (every lane).
float residual_mass(uint u, uint m, uint c) {
  const uint lane = gl_LocalInvocationID.x;
  float s = 0.0;
  for (uint v = lane; v < pc.V; v += WG) s += max(0.0, residual(u, v, m) - q_of(c, v));
  red_s[lane] = s;
  barrier();
  for (uint stride = WG / 2u; stride > 0u; stride /= 2u) {
    if (lane < stride) red_s[lane] += red_s[lane + stride];
    barrier();
  }
  const float z = red_s[0];
  barrier();
  return z;
}

// The Gumbel-max draw of node u's last weights under `key`. Returns 0xffffffff when no token has weight;
// s_bad: p_u holds a non-finite probability.
uint draw(uint u, uint m, uint key, bool without_residual) {
  const uint lane = gl_LocalInvocationID.x;
  float bs = -1.0 / 0.0;
  uint bi = 0xffffffffu;
  bool bad = false;
  if (lane == 0u) s_bad = false;
  for (uint v = lane; v < pc.V; v += WG) {
    const float pv = Floats(pc.p).v[u * pc.V + v];
    bad = bad || isnan(pv) || isinf(pv);
    const float w = last_weight(u, v, m, without_residual);
    if (w > 0.0) {
      const float s = log(w) + gumbel_noise(key, v);
      if (beats(s, v, bs, bi)) { bs = s; bi = v; }
    }
  }
  barrier();
  if (bad) s_bad = true;   // every writer writes the same value
  red_s[lane] = bs;
  red_i[lane] = bi;
  barrier();
  for (uint stride = WG / 2u; stride > 0u; stride /= 2u) {   // WG is a power of two
    if (lane < stride && red_i[lane + stride] != 0xffffffffu &&
        (red_i[lane] == 0xffffffffu || beats(red_s[lane + stride], red_i[lane + stride], red_s[lane], red_i[lane]))) {
      red_s[lane] = red_s[lane + stride];
      red_i[lane] = red_i[lane + stride];
    }
    barrier();
  }
  const uint r = red_i[0];
  barrier();
  return r;
}

void main() {
  const uint lane = gl_LocalInvocationID.x;
  Uints out_slots = Uints(pc.verdict);
  uint kept = pc.k;   // a chain's drafts up to --draft-p-min's cut
  if (pc.tree == 0u && pc.p_min > 0.0)
    for (uint i = 1u; i < pc.k; ++i)
      if (uintBitsToFloat(Uints(pc.slots).v[SLOT_AUX(i + 1u)]) < pc.p_min) { kept = i; break; }
  uint u = 0u, a = 0u;
  for (;;) {   // uniform: every lane takes the same steps
    if (out_slots.v[SLOT_TOKEN(u)] == NON_FINITE_TOKEN) {
      barrier();
      if (lane == 0u) {
        out_slots.v[SLOT_TOKEN(a)] = NON_FINITE_TOKEN;
        out_slots.v[SLOT_AUX(a)] = 0u;
      }
      return;
    }
    const uint key = counter_key(pc.seed, pc.position + depth_of(u));
    uint m = 0u, next = 0u;
    for (uint c = u + 1u, j = 0u; c <= kept && next == 0u; ++c) {
      if (parent_of(c) != u) continue;
      const uint d = draft_token(c);
      if (d >= pc.V) continue;
      if (lane == 0u) {
        const float rd = residual(u, d, m);
        s_rd = rd;
        s_accept = uniform24(stream_key(key, ACCEPT_STREAM + j * SIBLING_STREAM)) * q_of(c, d) < rd;
      }
      barrier();
      const bool accept = s_accept;
      const float rd = s_rd;
      ++j;
      if (accept) {
        next = c;
        break;
      }
      bool later = false;   // a sibling after c, which the residual's sum must divide for
      for (uint s = c + 1u; s <= kept && !later; ++s) later = parent_of(s) == u && draft_token(s) < pc.V;
      const float z = later ? residual_mass(u, m, c) : 1.0;
      if (lane == 0u) {
        rej_node[m] = c;
        rej_z[m] = z > 0.0 ? z : -max(1.0 - rd, 1e-30);
      }
      barrier();
      ++m;
    }
    if (next == 0u) {   // the walk ends at u: a residual draw, or the bonus
      const bool rejected = m > 0u;
      uint t = draw(u, m, rejected ? stream_key(key, RESIDUAL_STREAM) : key, false);
      // p and q equal to rounding leave no residual: the draw from r without d is the limit it tends to
      if (t == 0xffffffffu && rejected) t = draw(u, m, stream_key(key, RESIDUAL_STREAM), true);
      if (t == 0xffffffffu && rejected) t = draw(u, 0u, key, false);   // r all on rejected tokens: p's own draw
      if (lane == 0u && t != 0xffffffffu) {
        out_slots.v[SLOT_TOKEN(a)] = s_bad ? NON_FINITE_TOKEN : t;
        out_slots.v[SLOT_AUX(a)] = 0u;
      }
      return;
    }
    barrier();   // every lane has read u's slot before lane 0 overwrites slot a (a <= u)
    if (lane == 0u) {
      out_slots.v[SLOT_TOKEN(a)] = draft_token(next);
      out_slots.v[SLOT_AUX(a)] = next;
    }
    barrier();
    u = next;
    ++a;
  }
}
