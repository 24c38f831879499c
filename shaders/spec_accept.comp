#version 460
// Rejection sampling's verdict on one sequence's drafts (Leviathan et al. 2023, "Fast Inference from
// Transformers via Speculative Decoding"; runtime/token_choice.h says when it runs). Draft i + 1, d ~ q_i, is
// accepted with probability min(1, p_i(d) / q_i(d)): u * q_i(d) < p_i(d) for a uniform u keyed by
// (seed, position + i, ACCEPT_STREAM). At the first rejection the token is drawn from the residual
// norm(max(0, p_i - q_i)) instead, and the walk stops; when every kept draft is accepted, a bonus token is
// drawn from p_k with the plain draw's noise at its position. Draws are Gumbel-max over log weights.
// p: sample_rows' dense probability rows of the target's verify rows; q: the draft model's after its steps
// (the same transforms), or none for host drafts, whose q is one-hot at d (accept with probability p(d);
// the residual is p without d). The kept drafts are keep_drafts' (speculative/drafter.cpp): all up to the
// first i >= 1 whose top probability is below p_min (the same rule, written again here: the host knows the
// top probabilities only after the submission).
// Verdict: out slots 0..a-1 = the accepted drafts, slot a = the residual's or the bonus draw, never d_a (it
// is excluded), so the host's walk (speculative/controller.cpp) stops there. The out slots hold sample_rows'
// draws from p on entry: a NON_FINITE_TOKEN there (the row's logits were non-finite) stays and ends the walk.
// One workgroup per sequence; only lane 0 walks (k <= 16 reads), all lanes draw.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "contract.h"
#include "rng.h"

layout(push_constant) uniform PC { PC_SPEC_ACCEPT } pc;   // shaders/contract.h

shared uint s_kept, s_accepted;
shared float best_s[WG];
shared uint best_i[WG];
shared bool s_bad;

// The draft's probability of v after its step `row` (one-hot at d for host drafts).
float q_of(uint row, uint v, uint d) {
  if (pc.q == uvec2(0u)) return v == d ? 1.0 : 0.0;
  return Floats(pc.q).v[row * pc.V + v];
}

// The Gumbel-max draw from row `row`'s weights under `key`, never d: the residual max(0, p - q), or p itself.
// Returns 0xffffffff when no token has weight; s_bad: the row holds a non-finite probability.
uint draw(uint row, uint d, uint key, bool residual) {
  const uint lane = gl_LocalInvocationID.x;
  float bs = -1.0 / 0.0;
  uint bi = 0xffffffffu;
  bool bad = false;
  if (lane == 0u) s_bad = false;
  for (uint v = lane; v < pc.V; v += WG) {
    const float pv = Floats(pc.p).v[row * pc.V + v];
    bad = bad || isnan(pv) || isinf(pv);
    const float w = v == d ? 0.0 : residual ? max(0.0, pv - q_of(row, v, d)) : pv;
    if (w > 0.0) {
      const float s = log(w) + gumbel_noise(key, v);
      if (beats(s, v, bs, bi)) { bs = s; bi = v; }
    }
  }
  barrier();
  if (bad) s_bad = true;   // every writer writes the same value
  best_s[lane] = bs;
  best_i[lane] = bi;
  barrier();
  for (uint stride = WG / 2u; stride > 0u; stride /= 2u) {   // WG is a power of two
    if (lane < stride && best_i[lane + stride] != 0xffffffffu &&
        (best_i[lane] == 0xffffffffu || beats(best_s[lane + stride], best_i[lane + stride], best_s[lane], best_i[lane]))) {
      best_s[lane] = best_s[lane + stride];
      best_i[lane] = best_i[lane + stride];
    }
    barrier();
  }
  const uint r = best_i[0];
  barrier();
  return r;
}

void main() {
  const uint lane = gl_LocalInvocationID.x;
  Uints slots = Uints(pc.slots), out_slots = Uints(pc.verdict);
  if (lane == 0u) {
    uint kept = pc.k;
    if (pc.p_min > 0.0)
      for (uint i = 1u; i < pc.k; ++i)
        if (uintBitsToFloat(slots.v[SLOT_AUX(i + 1u)]) < pc.p_min) { kept = i; break; }
    uint a = 0u;
    for (; a < kept; ++a) {
      const uint d = slots.v[SLOT_TOKEN(a + 1u)];
      if (out_slots.v[SLOT_TOKEN(a)] == NON_FINITE_TOKEN || d >= pc.V) break;
      const float pd = Floats(pc.p).v[a * pc.V + d], qd = q_of(a, d, d);
      const float u = uniform24(stream_key(counter_key(pc.seed, pc.position + a), ACCEPT_STREAM));
      if (!(u * qd < pd)) break;
      out_slots.v[SLOT_TOKEN(a)] = d;
      out_slots.v[SLOT_AUX(a)] = 0u;
    }
    s_kept = kept;
    s_accepted = a;
  }
  barrier();
  const uint a = s_accepted;
  if (out_slots.v[SLOT_TOKEN(a)] == NON_FINITE_TOKEN) return;   // uniform: every lane reads the same slot
  const bool rejected = a < s_kept;
  const uint d = rejected ? slots.v[SLOT_TOKEN(a + 1u)] : 0xffffffffu;
  const uint key = counter_key(pc.seed, pc.position + a);
  uint t = draw(a, d, rejected ? stream_key(key, RESIDUAL_STREAM) : key, rejected);
  // p and q equal to rounding leave no residual: the draw from p without d is the limit it tends to
  if (t == 0xffffffffu && rejected) t = draw(a, d, stream_key(key, RESIDUAL_STREAM), false);
  if (lane == 0u && t != 0xffffffffu) {
    out_slots.v[SLOT_TOKEN(a)] = s_bad ? NON_FINITE_TOKEN : t;
    out_slots.v[SLOT_AUX(a)] = 0u;
  }
}
