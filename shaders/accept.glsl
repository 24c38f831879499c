// The accept/resample chain of speculative sampling, shared by spec_accept.comp (rows from the host, many
// trials) and sample_rows.comp (rows transformed on the device, the last workgroup runs it).
// The includer defines, before including: float p_at(uint row, uint v), float q_at(uint row, uint v),
// uint draft_at(uint i), and the vocabulary size `accept_V`.

shared float lane_mass[ACCEPT_MAX_LANES];
shared uint chosen;
shared bool masses_non_finite;

bool non_finite(float x) { return isnan(x) || isinf(x); }

// max(0, p - q) for a residual draw, p itself for the bonus draw.
float mass_of(float pv, float qv, bool residual) { return residual ? max(0.0, pv - qv) : pv; }
float mass(uint row, uint v, bool residual) { return mass_of(p_at(row, v), residual ? q_at(row, v) : 0.0, residual); }

// Inverse-CDF draw from the unnormalized masses of `row`. Lane l owns a contiguous slice of the vocabulary;
// slice totals are prefix-summed in lane order, so the lanes' intervals [before, before + s) tile [0, total)
// exactly in float and the lane whose interval holds u * total scans its slice. Returns V if total == 0,
// NON_FINITE_TOKEN if a p (or, for a residual, q) of the row is NaN or infinite: max(0, NaN) may be 0, so
// without the check a broken row would be sampled from silently.
uint draw(uint row, bool residual, float u) {
  const uint lane = gl_LocalInvocationID.x, per = (accept_V + WG - 1u) / WG;
  const uint lo = min(lane * per, accept_V), hi = min(lo + per, accept_V);
  float s = 0.0;
  bool bad = false;
  for (uint v = lo; v < hi; ++v) {   // each p (and q) read once: the rows may be coherent (uncached) reads
    const float pv = p_at(row, v), qv = residual ? q_at(row, v) : 0.0;
    bad = bad || non_finite(pv) || non_finite(qv);
    s += mass_of(pv, qv, residual);
  }
  barrier();
  lane_mass[lane] = s;
  if (lane == 0u) { chosen = accept_V; masses_non_finite = false; }
  barrier();
  if (bad) masses_non_finite = true;
  barrier();
  if (masses_non_finite) return NON_FINITE_TOKEN;   // uniform: every lane reads the same flag
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


// For i = 0..K-1 accept t_i with probability min(1, p_i(t_i) / q_i(t_i)); at the first rejection draw from
// norm(max(0, p_i - q_i)) and stop; if all are accepted draw the bonus token from p_K. Returns {accepted, next};
// next is NON_FINITE_TOKEN when a draft is not a token (the draft's own logits were non-finite) or a
// probability the chain reads is NaN or infinite. Every lane reads the same values: the returns are uniform.
uvec2 accept_chain(uint K, uvec2 seed, uint position) {
  uint i = 0;
  bool rejected = false;
  for (; i < K; ++i) {
    const uint t = draft_at(i);
    if (t >= accept_V) return uvec2(i, NON_FINITE_TOKEN);
    const float pt = p_at(i, t), qt = q_at(i, t);
    if (non_finite(pt) || non_finite(qt)) return uvec2(i, NON_FINITE_TOKEN);
    const float u = counter_uniform(seed, position + i, STREAM_ACCEPT);
    if (!(u * qt < pt)) { rejected = true; break; }   // accept iff u < p/q
  }
  const float u = counter_uniform(seed, position + i, STREAM_DRAW);
  uint next = draw(i, rejected, u);
  if (next == accept_V) next = draw(i, false, u);   // p == q up to rounding: the residual is empty, p is exact
  return uvec2(i, next);
}
