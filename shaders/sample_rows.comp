#version 460
// The sampling transforms on the device, one workgroup per logits row, in llama.cpp's default order and
// with the host Sampler's exact semantics (tests/host_sampler.cpp is the reference the tests compare with):
//   logit bias -> penalties over the row's history window (repetition, then frequency and presence; once
//   per distinct token) -> JSON mode's mask -> top-k (ties by lower id) -> top-p and min-p at temperature 1 -> softmax at the
//   temperature.
// Each workgroup reads its row's entry of the host-written row table (SAMPLE_ROW in contract.h): where its
// logits, probabilities and draw slot are, and its settings. So one dispatch samples the rows of one
// sequence (a verify pass, a draft step) or one row of each of several sequences with their own settings
// (a batched step), and a row's result depends on its entry only.
// Writes the distribution as a dense probability row (zero outside the kept set; only where the entry gives
// one: rejection sampling's p and q rows, runtime/token_choice.h; the tests') and, when asked, draws a
// token from it by the Gumbel-max trick: the kept token with the largest (l - m) / T plus its Gumbel noise
// (shaders/rng.h, keyed by the entry's (seed, position) and the token), ties by lower id. A draft
// model's row and the target's row at one position share that noise (speculative/controller.h).
// top-k is found by a 4-pass radix select over order-preserving 32-bit keys (8-bit digit histograms in
// shared memory), so the kept set never needs a sort of the vocabulary. With k <= MAX_TOP_K the candidates are
// ranked in shared memory. Otherwise (top-k off or large: any kept set up to the vocabulary) every later cut
// is a prefix of the rank order found the same way by mass instead of count: top-p is the shortest prefix
// whose mass reaches top_p; masses are summed per lane in a fixed order (deterministic), and a prefix is
// (key of its last element, how many of the elements with that key it takes, lowest ids first). The draw
// is a maximum, so it needs no order: each lane's best, then the best lane (any lane count, one token).
// A row's penalty window is hist[max(0, h_end - last_n) .. h_end): the host uploads the tail of the
// context followed by the drafts, and row r of a sequence ends its window r tokens later than row 0, so
// the window grows draft by draft. The penalties are applied to the logits row in place.
// A draw goes to the row's token slot ({token, top probability}), which the next step's embedding reads.
// Lane ranges are whole groups of 4 ids, walked 4 logits per read (logits4): on CPU devices the variant
// built with TEXEL_LOGITS (sample_rows_texels) reads them through a uniform texel buffer, which llvmpipe
// fetches for all lanes in one vector gather, where a device-address load is a scalar loop over the lanes
// (the 8192-logit row of the pycode pair: ~0.45 ms per row that way). The host picks it only for rows of
// whole texels (V % 4 == 0) and no bias, penalty or mask (they rewrite logits in place, and a texel read is not
// made to see writes of the same dispatch); both variants visit the same ids in the same order.
// A row whose logits are non-finite draws NON_FINITE_TOKEN (its probabilities may look finite: NaN keys rank
// arbitrarily).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "contract.h"
#include "rng.h"


layout(push_constant) uniform PC { PC_SAMPLE_ROWS } pc;   // shaders/contract.h
struct SampleRow { SAMPLE_ROW };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer SampleRows { SampleRow v[]; };
SampleRow P;   // this workgroup's row: SampleRows(pc.rows).v[gl_WorkGroupID.x], set first in main
shared bool row_non_finite;   // the row's logits hold NaN or Inf: its draw is NON_FINITE_TOKEN

// Logits 4t .. 4t+3 of the row (ids past V read as 0; callers stop at their hi).
#ifdef TEXEL_LOGITS
layout(set = 0, binding = 0) uniform usamplerBuffer L;
vec4 logits4(uint t) { return uintBitsToFloat(texelFetch(L, int(P.logits_texel + t))); }
#else
vec4 logits4(uint t) {
  vec4 q = vec4(0.0);
  for (uint c = 0u; c < 4u; ++c)
    if (4u * t + c < pc.V) q[c] = Floats(P.logits).v[4u * t + c];
  return q;
}
#endif
// The loop over a lane's ids lo..hi-1 in id order (lo a multiple of 4): v = the id, l = its logit.
#define FOR_LOGITS(lo, hi)                                     \
  for (uint t_ = (lo) / 4u; 4u * t_ < (hi); ++t_) {            \
    const vec4 q_ = logits4(t_);                               \
    [[unroll]] for (uint c_ = 0u; c_ < 4u; ++c_) {             \
      const uint v = 4u * t_ + c_;                             \
      if (v >= (hi)) break;                                    \
      const float l = q_[c_];
#define END_FOR_LOGITS }}

// The dense row is zeroed by the lanes owning its ids and then written by the lanes holding its candidates.
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer CoherentFloats { float v[]; };

shared uint digit_count[256];
shared uint lane_ties[WG];
shared uint sel_prefix, sel_remaining, n_cand;
shared uint cand_id[MAX_TOP_K];
shared float cand_l[MAX_TOP_K];
shared uint order[MAX_TOP_K];     // order[rank] = candidate index, by logit descending, ties by lower id
shared float cand_p[MAX_TOP_K];   // probability of the candidate at each rank (0 = cut)

// order-preserving map of a float to uint (larger float -> larger key). -0 takes +0's key: the two are equal
// logits, tied by id as in the host Sampler (their bits ranked +0 first, so a draw among zero logits differed).
uint key_of(float f) {
  const uint u = f == 0.0 ? 0u : floatBitsToUint(f);
  return (u & 0x80000000u) != 0u ? ~u : u | 0x80000000u;
}

// ---- the general path (top-k off or above MAX_TOP_K) ----
// A rank prefix: the elements with key > k, and the first `ties` elements (lowest ids) with key == k.
// Each lane scans its contiguous range in id order, so an element's rank among the ties is the ties in
// earlier lanes (tie_base) plus those before it in the lane.
shared float digit_mass[16u * WG];   // per lane, per 4-bit digit: mass of the matching elements (the draws
                                     // reuse it: the general path's lane maxima, the top-k path's rank scores)
shared uint g_key, g_ties;
shared float g_above;

float logit_of_key(uint k) { return uintBitsToFloat((k & 0x80000000u) != 0u ? k & 0x7fffffffu : ~k); }

// Elements with key == k in the lanes before this one.
uint tie_base(uint k, uint lo, uint hi) {
  uint c = 0u;
  FOR_LOGITS(lo, hi) c += key_of(l) == k ? 1u : 0u; END_FOR_LOGITS
  barrier();
  lane_ties[gl_LocalInvocationID.x] = c;
  barrier();
  uint b = 0u;
  for (uint l = 0u; l < gl_LocalInvocationID.x; ++l) b += lane_ties[l];
  barrier();
  return b;
}

// The shortest prefix of the set S = prefix (sk, st) with logit >= floor_l whose mass, sum of
// exp((l - m) * s), reaches `target` (strict: exceeds it); the whole set when nothing does. Result in
// g_key, g_ties.
void mass_select(uint lo, uint hi, uint sk, uint st, uint s_base, float floor_l, float m, float s,
                 float target, bool strict) {
  const uint lane = gl_LocalInvocationID.x;
  uint prefix = 0u, mask = 0u;
  if (lane == 0u) g_above = 0.0;
  for (int shift = 28; shift >= 0; shift -= 4) {
    for (uint b = 0u; b < 16u; ++b) digit_mass[lane * 16u + b] = 0.0;
    uint tr = s_base;
    FOR_LOGITS(lo, hi)
      const uint key = key_of(l);
      bool in_s = key > sk;
      if (key == sk) in_s = tr++ < st;
      if (in_s && l >= floor_l && (key & mask) == prefix)
        digit_mass[lane * 16u + ((key >> uint(shift)) & 15u)] += exp((l - m) * s);
    END_FOR_LOGITS
    barrier();
    if (lane == 0u) {
      float above = g_above;
      uint pick = 16u, lowest = 16u;
      for (int b = 15; b >= 0; --b) {
        float bm = 0.0;
        for (uint l = 0u; l < WG; ++l) bm += digit_mass[l * 16u + uint(b)];
        if (bm <= 0.0) continue;
        lowest = uint(b);
        if (strict ? above + bm > target : above + bm >= target) { pick = uint(b); break; }
        above += bm;
      }
      if (pick == 16u) {   // nothing reached the target (rounding): take everything down to the lowest bucket
        pick = lowest;
        float bm = 0.0;
        for (uint l = 0u; l < WG; ++l) bm += digit_mass[l * 16u + pick];
        above -= bm;
      }
      g_above = above;
      g_key = prefix | (pick << uint(shift));
    }
    barrier();
    prefix = g_key;
    mask |= 15u << uint(shift);
    barrier();
  }
  // prefix is the key of the last element; take as many of its ties as reach the target
  uint avail = 0u;
  FOR_LOGITS(lo, hi) avail += key_of(l) == prefix ? 1u : 0u; END_FOR_LOGITS
  lane_ties[lane] = avail;
  barrier();
  if (lane == 0u) {
    uint total = 0u;
    for (uint l = 0u; l < WG; ++l) total += lane_ties[l];
    if (prefix == sk) total = min(total, st);
    const float l = logit_of_key(prefix);
    const float e = exp((l - m) * s);
    uint t = 1u;
    while (t < total && (strict ? g_above + float(t) * e <= target : g_above + float(t) * e < target)) ++t;
    g_ties = t;
  }
  barrier();
}

void sample_general(uint lo, uint hi, uint kth, uint ties_k) {
  const uint lane = gl_LocalInvocationID.x;
  // m: the largest logit; z: the mass of the top-k set at temperature 1
  float mx = -1.0 / 0.0;
  FOR_LOGITS(lo, hi) mx = max(mx, l); END_FOR_LOGITS
  const float m = wg_max(mx);
  const uint k_base = tie_base(kth, lo, hi);
  const float no_floor = -1.0 / 0.0;
  float z = 0.0;
  uint tr = k_base;
  FOR_LOGITS(lo, hi)
    const uint key = key_of(l);
    bool in_k = key > kth;
    if (key == kth) in_k = tr++ < ties_k;
    if (in_k) z += exp(l - m);
  END_FOR_LOGITS
  z = wg_sum(z);
  // top-p: the shortest prefix of the top-k set whose probability reaches top_p
  uint fk = kth, ft = ties_k;
  if (P.top_p < 1.0) {
    mass_select(lo, hi, kth, ties_k, k_base, no_floor, m, 1.0, P.top_p * z, false);
    fk = g_key;
    ft = g_ties;
  }
  // min-p: p_r / p_0 >= min_p, i.e. exp(l - m) >= min_p (at most 1, so the top element always stays)
  const float floor_l = P.min_p > 0.0 ? m + log(min(P.min_p, 1.0)) : no_floor;
  const uint f_base = tie_base(fk, lo, hi);
  const float inv_t = inverse_temperature(P.temperature);
  float zt = 0.0;
  tr = f_base;
  FOR_LOGITS(lo, hi)
    const uint key = key_of(l);
    bool keep = key > fk;
    if (key == fk) keep = tr++ < ft;
    if (keep && l >= floor_l) zt += exp((l - m) * inv_t);
  END_FOR_LOGITS
  zt = wg_sum(zt);
  // dense row, and each lane's best draw score among its kept ids (none: -inf at id 0xffffffff, which no
  // kept id fails to beat)
  const bool draw = (pc.flags & SAMPLE_DRAW) != 0u, write_probs = P.probs != uvec2(0u);
  if (!draw && !write_probs) return;
  const uint noise_key = counter_key(P.seed, P.position);
  float best = -1.0 / 0.0;
  uint best_id = 0xffffffffu;
  tr = f_base;
  FOR_LOGITS(lo, hi)
    const uint key = key_of(l);
    bool keep = key > fk;
    if (key == fk) keep = tr++ < ft;
    keep = keep && l >= floor_l;
    if (write_probs) CoherentFloats(P.probs).v[v] = keep ? exp((l - m) * inv_t) / zt : 0.0;
    if (draw && keep) {
      const float score = draw_score(l, m, inv_t, noise_key, v);
      if (beats(score, v, best, best_id)) { best = score; best_id = v; }
    }
  END_FOR_LOGITS
  if (!draw) return;
  digit_mass[lane] = best;
  lane_ties[lane] = best_id;
  barrier();
  if (lane == 0u) {   // the best lane's (an empty lane's -inf at 0xffffffff beats nothing)
    uint pick = 0xffffffffu;
    float top = -1.0 / 0.0;
    for (uint l = 0u; l < WG; ++l)
      if (beats(digit_mass[l], lane_ties[l], top, pick)) { top = digit_mass[l]; pick = lane_ties[l]; }
    Uints(P.draw).v[SLOT_TOKEN(0u)] = row_non_finite || pick == 0xffffffffu ? NON_FINITE_TOKEN : pick;
    Uints(P.draw).v[SLOT_AUX(0u)] = floatBitsToUint(1.0 / zt);   // the top element's probability
  }
}

// ---- the top-k path (k <= MAX_TOP_K): selection by 8-bit digits, from a candidate list when k <= WG ----
// The k-th largest lane maximum is a lower bound of the k-th largest key (k lanes each hold an element at
// least that large), so the keys at or above it hold the whole top-k set and its ties: usually a few dozen,
// gathered in one walk of the row instead of six (four digit passes, the ties, the candidates) over the row
// itself (the 128,256 logits of a Llama 3 row: 2.4 -> 1.5-1.8 ms on lavapipe; no change at 8192). Counts of
// a bucket are partial only below the bound, where the walk down the buckets never goes past, so the
// selection finds the same key and ties as over the whole row.
shared uint list_key[SAMPLE_LIST_CAP], list_id[SAMPLE_LIST_CAP];
shared uint n_list, thr_key;

// Gathers the keys at or above the k-th largest lane maximum (lane_hi: this lane's largest logit) with their
// ids into the list; false when they are more than SAMPLE_LIST_CAP (mass ties). Needs P.top_k <= WG.
// lane_ties holds the lanes' maximum keys meanwhile.
bool gather_above_bound(uint lo, uint hi, float lane_hi) {
  const uint lane = gl_LocalInvocationID.x;
  lane_ties[lane] = lo < hi ? key_of(lane_hi) : 0u;   // an empty lane: the smallest key
  if (lane == 0u) n_list = 0u;
  barrier();
  const uint mine = lane_ties[lane];
  uint rank = 0u;   // lanes whose maximum ranks above this one's (equal keys by lane)
  for (uint l = 0u; l < WG; ++l) rank += lane_ties[l] > mine || (lane_ties[l] == mine && l < lane) ? 1u : 0u;
  if (rank == P.top_k - 1u) thr_key = mine;
  barrier();
  const uint bound = thr_key;
  FOR_LOGITS(lo, hi)
    const uint key = key_of(l);
    if (key >= bound) {
      const uint slot = atomicAdd(n_list, 1u);
      if (slot < SAMPLE_LIST_CAP) { list_key[slot] = key; list_id[slot] = v; }
    }
  END_FOR_LOGITS
  barrier();
  return n_list <= SAMPLE_LIST_CAP;
}

// The k-th largest key (sel_prefix) and how many of the keys equal to it to take (sel_remaining), one 8-bit
// digit per pass, most significant first; over the list when `listed`, else over the lanes' logits.
void radix_select(uint lo, uint hi, bool listed) {
  const uint lane = gl_LocalInvocationID.x;
  if (lane == 0u) { sel_prefix = 0u; sel_remaining = P.top_k >= 1u && P.top_k < pc.V ? P.top_k : pc.V; }
  uint mask = 0u;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (uint b = lane; b < 256u; b += WG) digit_count[b] = 0u;
    barrier();
    const uint prefix = sel_prefix;
    if (listed) {
      for (uint i = lane; i < n_list; i += WG)
        if ((list_key[i] & mask) == prefix) atomicAdd(digit_count[(list_key[i] >> uint(shift)) & 255u], 1u);
    } else {
      FOR_LOGITS(lo, hi)
        const uint key = key_of(l);
        if ((key & mask) == prefix) atomicAdd(digit_count[(key >> uint(shift)) & 255u], 1u);
      END_FOR_LOGITS
    }
    barrier();
    if (lane == 0u) {
      uint above = 0u, b = 255u;
      while (b > 0u && above + digit_count[b] < sel_remaining) above += digit_count[b--];
      sel_remaining -= above;   // how many keys equal to the final prefix are still to be taken
      sel_prefix = prefix | (b << uint(shift));
    }
    mask |= 255u << uint(shift);
    barrier();
  }
}

// The kept candidates from the list: keys above the k-th, and the lowest-id ties at it (all in the list).
void collect_from_list(uint kth, uint ties_to_take) {
  const uint n = n_list;
  for (uint i = gl_LocalInvocationID.x; i < n; i += WG) {
    const uint key = list_key[i];
    bool keep = key > kth;
    if (key == kth) {
      uint lower = 0u;   // ties with lower ids
      for (uint j = 0u; j < n; ++j) lower += list_key[j] == kth && list_id[j] < list_id[i] ? 1u : 0u;
      keep = lower < ties_to_take;
    }
    if (keep) {
      const uint slot = atomicAdd(n_cand, 1u);
      cand_id[slot] = list_id[i];
      cand_l[slot] = logit_of_key(key);
    }
  }
}

// The same from the lanes' logits: a lane's ties rank after those of lower lanes (lower ids).
void collect_from_row(uint lo, uint hi, uint kth, uint ties_to_take) {
  const uint lane = gl_LocalInvocationID.x;
  uint ties = 0u;
  FOR_LOGITS(lo, hi) ties += key_of(l) == kth ? 1u : 0u; END_FOR_LOGITS
  lane_ties[lane] = ties;
  barrier();
  uint tie_rank = 0u;
  for (uint l = 0u; l < lane; ++l) tie_rank += lane_ties[l];
  FOR_LOGITS(lo, hi)
    const uint key = key_of(l);
    bool keep = key > kth;
    if (key == kth) keep = tie_rank++ < ties_to_take;
    if (keep) {
      const uint slot = atomicAdd(n_cand, 1u);
      cand_id[slot] = v;
      cand_l[slot] = l;
    }
  END_FOR_LOGITS
}

void main() {
  const uint lane = gl_LocalInvocationID.x;
  P = SampleRows(pc.rows).v[gl_WorkGroupID.x];
  // Whole groups of 4 ids per lane. A lane past the row gets an empty range that starts at a multiple of 4
  // too (lo = hi = V would let FOR_LOGITS, which walks whole groups, visit the row's last ids once more in
  // every such lane: V = 301 counted id 300 many times, and its lanes raced on its probability).
  const uint per = ((pc.V + WG - 1u) / WG + 3u) & ~3u;
  const uint lo = min(lane * per, (pc.V + 3u) & ~3u), hi = lo < pc.V ? min(lo + per, pc.V) : lo;

  // 0. non-finite logits (a broken model) are reported, not sampled from: NaN ranks and sums arbitrarily
  if (lane == 0u) row_non_finite = false;
  barrier();
  bool bad = false;
  float lane_hi = -1.0 / 0.0;   // this lane's largest logit (the top-k path's bound)
  FOR_LOGITS(lo, hi)
    bad = bad || isnan(l) || isinf(l);
    lane_hi = max(lane_hi, l);
  END_FOR_LOGITS
  if (bad) row_non_finite = true;
  barrier();

  // 1. the logit bias, each entry added to its token's logit in list order (llama.cpp's first sampler), then
  // the penalties, once per distinct token of the window: repetition (a positive logit divided, a negative
  // multiplied), then frequency (once per occurrence) and presence subtracted, as the host Sampler (never
  // with TEXEL_LOGITS: see the top). The frequency term is a sum of additions, not count * frequency: with
  // no product a GPU cannot contract it into a fused multiply-add, so every device gets the host's bits
  // (`precise` would do that too, but on lavapipe it changed the code of the later transforms: their
  // probabilities moved by an ulp between this and the texel variant). The host gives last_n = 0 when no
  // penalty applies; at their neutral values (1, 0, 0) they would leave every logit's bits as they are.
#ifndef TEXEL_LOGITS
  // Each lane rewrites the logits of its own range only, so every later read of a logit is by the invocation
  // that wrote it (program order). The logits are not coherent memory: when any lane penalized any id, a GPU
  // let the owning lane's later loops read the old value in one walk and the new in another (an H200 gave a
  // probability row that differed run to run; test_sampler's BatchedRowsEqualOneRecordEach).
  for (uint b = 0u; b < P.n_bias; ++b) {
    const uvec2 e = Uvec2s(P.bias).v[b];
    if (e.x >= lo && e.x < hi) Floats(P.logits).v[e.x] += uintBitsToFloat(e.y);
  }
  if (P.last_n != 0u) {
    const uint end = P.h_end, start = end > P.last_n ? end - P.last_n : 0u;
    for (uint j = start; j < end; ++j) {
      const uint id = Uints(P.hist).v[j];
      bool first = id >= lo && id < hi;
      for (uint i = start; i < j && first; ++i) first = Uints(P.hist).v[i] != id;
      if (first) {
        float frequency = 0.0;
        for (uint i = j; i < end; ++i)
          if (Uints(P.hist).v[i] == id) frequency += P.frequency;
        const float l = Floats(P.logits).v[id];
        const float v = l > 0.0 ? l / P.penalty : l * P.penalty;
        Floats(P.logits).v[id] = v - (frequency + P.presence);
      }
    }
  }
  // 1b. the constraint's mask (JSON mode, a grammar): a token it does not allow gets -inf, so that it is never kept nor drawn, as
  // llama.cpp's grammar sampler does before the other transforms (-inf stays -inf through them)
  const bool masked = P.mask != uvec2(0u);
  if (masked) {
    for (uint v = lo; v < hi; ++v)
      if ((Uints(P.mask).v[TOKEN_MASK_WORD(v)] & TOKEN_MASK_BIT(v)) == 0u) Floats(P.logits).v[v] = -1.0 / 0.0;
  }
  if (P.n_bias != 0u || P.last_n != 0u || masked) {   // uniform: the bias, penalties or mask moved logits
    lane_hi = -1.0 / 0.0;
    FOR_LOGITS(lo, hi) lane_hi = max(lane_hi, l); END_FOR_LOGITS
  }
#endif

  // 2. top-k: the k-th largest key and how many of its ties to take; from the candidate list when k <= WG
  // (a finite row; NaN keys bound nothing)
  const bool small_k = P.top_k >= 1u && P.top_k <= MAX_TOP_K && P.top_k < pc.V;
  const bool listed = small_k && P.top_k <= WG && !row_non_finite && gather_above_bound(lo, hi, lane_hi);
  radix_select(lo, hi, listed);
  const uint kth = sel_prefix, ties_to_take = sel_remaining;
  if (!small_k) {
    sample_general(lo, hi, kth, ties_to_take);
  } else {

  // 3. collect the kept candidates: keys above the k-th, and the lowest-id ties at it
  if (lane == 0u) n_cand = 0u;
  barrier();
  if (listed) collect_from_list(kth, ties_to_take);
  else collect_from_row(lo, hi, kth, ties_to_take);
  barrier();
  const uint n = n_cand;   // == top_k

  // 4. rank the candidates (logit descending, ties by lower id). NaN compares false with everything, so a
  // row holding one gets no permutation from this: it keeps the identity order instead, only so that every
  // order[] read below is initialized and in range (its draw is NON_FINITE_TOKEN anyway).
  for (uint i = lane; i < n; i += WG) {
    uint rank = 0u;
    for (uint j = 0u; j < n; ++j)
      rank += (cand_l[j] > cand_l[i] || (cand_l[j] == cand_l[i] && cand_id[j] < cand_id[i])) ? 1u : 0u;
    order[row_non_finite ? i : rank] = i;
  }
  barrier();

  // 5. top-p and min-p at temperature 1, then the softmax at the temperature (as Sampler::distribution)
  if (lane == 0u) {
    const float m = cand_l[order[0]];
    float z = 0.0;
    for (uint r = 0u; r < n; ++r) z += exp(cand_l[order[r]] - m);
    uint keep = n;
    if (P.top_p < 1.0) {
      float cum = 0.0;
      uint r = 0u;
      while (r < n) {
        cum += exp(cand_l[order[r++]] - m) / z;
        if (cum >= P.top_p) break;
      }
      keep = max(r, 1u);
    }
    if (P.min_p > 0.0) {
      // p_r / p_0 >= min_p over the kept prefix (the top-p cut renormalizes both sides alike)
      uint r = 1u;
      while (r < keep && exp(cand_l[order[r]] - m) >= P.min_p) ++r;
      keep = r;
    }
    const float inv_t = inverse_temperature(P.temperature);
    float zt = 0.0;
    for (uint r = 0u; r < n; ++r) {
      const float e = r < keep ? exp((cand_l[order[r]] - m) * inv_t) : 0.0;
      cand_p[r] = e;
      zt += e;
    }
    for (uint r = 0u; r < keep; ++r) cand_p[r] /= zt;
  }
  barrier();

  // 6. dense row: zeros, then the kept probabilities
  if (P.probs != uvec2(0u)) {   // uniform per workgroup
    for (uint v = lo; v < hi; ++v) CoherentFloats(P.probs).v[v] = 0.0;
    memoryBarrierBuffer();
    barrier();
    for (uint r = lane; r < n; r += WG)
      if (cand_p[r] > 0.0) CoherentFloats(P.probs).v[cand_id[order[r]]] = cand_p[r];
  }

  // 7. draw: the kept rank whose score beats the others'; each lane scores its ranks (digit_mass is free on
  // this path), lane 0 takes the best
  if ((pc.flags & SAMPLE_DRAW) != 0u) {   // uniform
    const uint noise_key = counter_key(P.seed, P.position);
    const float m = cand_l[order[0]], inv_t = inverse_temperature(P.temperature);
    for (uint r = lane; r < n; r += WG)
      if (cand_p[r] > 0.0) digit_mass[r] = draw_score(cand_l[order[r]], m, inv_t, noise_key, cand_id[order[r]]);
    barrier();
    if (lane == 0u) {
      uint pick = cand_id[order[0]];
      float best = digit_mass[0];
      for (uint r = 1u; r < n && cand_p[r] > 0.0; ++r) {
        const uint id = cand_id[order[r]];
        if (beats(digit_mass[r], id, best, pick)) { best = digit_mass[r]; pick = id; }
      }
      Uints(P.draw).v[SLOT_TOKEN(0u)] = row_non_finite ? NON_FINITE_TOKEN : pick;
      Uints(P.draw).v[SLOT_AUX(0u)] = floatBitsToUint(cand_p[0]);
    }
  }
  }   // small_k
}
