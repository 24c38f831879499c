#version 460
// Speculative sampling, accept/reject for one verify pass (exact rejection sampling: Leviathan et al.,
// Chen et al. 2023). Inputs: the target's distributions p_0..p_K over the vocabulary (p_i is the
// distribution of the token after draft i-1, after every sampling transform), the draft's q_0..q_{K-1},
// and the drafted tokens t_0..t_{K-1} (t_i ~ q_i). For i = 0..K-1: accept t_i with probability
// min(1, p_i(t_i) / q_i(t_i)); at the first rejection draw the correction from norm(max(0, p_i - q_i)) and
// stop; if every draft is accepted draw a bonus token from p_K. The emitted tokens are then distributed
// exactly as sampling the target alone. Writes result = {accepted count, next token}.
// One workgroup per trial: generation dispatches one; the statistical tests dispatch many trials at once
// (trial j reads row j of `tokens` and uses seed + j).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "rng.glsl"

layout(push_constant) uniform PC {
  uvec2 p;        // [K+1][V] f32, rows sum to 1
  uvec2 q;        // [K][V] f32, rows sum to 1
  uvec2 tokens;   // [trials][tokens_stride] uint
  uvec2 result;   // [trials][2] uint
  uvec2 seed;     // 64-bit seed (lo, hi)
  uint K, V;
  uint position;  // sequence position of t_0 (the RNG counter)
  uint tokens_stride, trials;
} pc;

const uint STREAM_ACCEPT = 1u, STREAM_DRAW = 2u;

shared float lane_mass[1024];
shared uint chosen;

// max(0, p - q) at v for a residual draw, p itself for the bonus draw.
float mass(uint row, uint v, bool residual) {
  const float pv = Floats(pc.p).v[row * pc.V + v];
  return residual ? max(0.0, pv - Floats(pc.q).v[row * pc.V + v]) : pv;
}

// Inverse-CDF draw from the unnormalized masses of `row`. Lane l owns a contiguous slice of the vocabulary;
// slice totals are prefix-summed in lane order, so the lanes' intervals [before, before + s) tile [0, total)
// exactly in float and the lane whose interval holds u * total scans its slice. Returns V if total == 0.
uint draw(uint row, bool residual, float u) {
  const uint lane = gl_LocalInvocationID.x, per = (pc.V + WG - 1u) / WG;
  const uint lo = min(lane * per, pc.V), hi = min(lo + per, pc.V);
  float s = 0.0;
  for (uint v = lo; v < hi; ++v) s += mass(row, v, residual);
  barrier();
  lane_mass[lane] = s;
  if (lane == 0u) chosen = pc.V;
  barrier();
  float before = 0.0, total = 0.0;
  bool last_nonzero = s > 0.0;
  for (uint l = 0; l < WG; ++l) {
    if (l < lane) before += lane_mass[l];
    if (l > lane && lane_mass[l] > 0.0) last_nonzero = false;
    total += lane_mass[l];
  }
  const float target = u * total;
  // u * total can round up to total: the last lane with mass takes it.
  const bool owner = s > 0.0 && ((target >= before && target < before + s) || (target >= total && last_nonzero));
  if (owner) {
    const float local = target - before;
    float c = 0.0;
    uint pick = lo;
    for (uint v = lo; v < hi; ++v) {
      const float m = mass(row, v, residual);
      if (m <= 0.0) continue;
      pick = v;   // the last token with mass, should rounding run past the end of the slice
      c += m;
      if (local < c) break;
    }
    atomicMin(chosen, pick);
  }
  barrier();
  return chosen;
}

void main() {
  const uint trial = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;   // 2D: > 65535 trials
  if (trial >= pc.trials) return;   // uniform per workgroup, so barriers stay uniform
  const uvec2 seed = uvec2(pc.seed.x + trial, pc.seed.y);
  uint i = 0;
  bool rejected = false;
  for (; i < pc.K; ++i) {
    const uint t = Uints(pc.tokens).v[trial * pc.tokens_stride + i];
    const float pt = Floats(pc.p).v[i * pc.V + t], qt = Floats(pc.q).v[i * pc.V + t];
    const float u = counter_uniform(seed, pc.position + i, STREAM_ACCEPT);
    if (!(u * qt < pt)) { rejected = true; break; }   // accept iff u < p/q
  }
  const float u = counter_uniform(seed, pc.position + i, STREAM_DRAW);
  uint next = draw(i, rejected, u);
  if (next == pc.V) next = draw(i, false, u);   // p == q up to rounding: the residual is empty, p is exact
  if (gl_LocalInvocationID.x == 0u) {
    Uints(pc.result).v[2u * trial] = i;
    Uints(pc.result).v[2u * trial + 1u] = next;
  }
}
