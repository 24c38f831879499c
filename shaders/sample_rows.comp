#version 460
// The sampling transforms on the device, one workgroup per logits row, in llama.cpp's default order and
// with the host Sampler's exact semantics (runtime/sampler.cpp is the reference the tests compare with):
//   repetition penalty over the row's history window (once per distinct token) -> top-k (ties by lower
//   id) -> top-p and min-p at temperature 1 -> softmax at the temperature.
// Writes the distribution as a dense probability row (zero outside the kept set) and, when asked, draws a
// token from it with the counter-based generator keyed by (seed, position + row, stream).
// top-k is found by a 4-pass radix select over order-preserving 32-bit keys (8-bit digit histograms in
// shared memory), so the kept set never needs a sort of the vocabulary; only the k <= MAX_K kept
// candidates are ranked. The host keeps the general case (top-k off or above MAX_K).
// Row r's penalty window is hist[max(0, h_ctx + r - last_n) .. h_ctx + r): the host uploads the tail of
// the context (h_ctx tokens) followed by the drafts, so the window grows draft by draft.
// The penalty is applied to the logits row in place.
// Draws go to `draws` as token slots ({token, top probability} pairs), which the next step's embedding reads.
// Fused verify (accept != 0): the rows are the target's p_0..p_K; each workgroup publishes its row and counts
// itself done on `counter`; the last one runs the accept/resample chain (accept.glsl) over all rows and the
// draft's q rows, writes {accepted, next} and resets the counter. Rows go through coherent references so
// the last workgroup sees the others' writes.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "rng.glsl"

const uint MAX_K = 256u;

layout(push_constant) uniform PC {
  uvec2 logits;       // [rows][V] f32 (penalized in place)
  uvec2 probs;        // [rows][V] f32 out
  uvec2 draws;        // [rows][2] uint out: token, bits of the top probability (when draw != 0)
  uvec2 hist;         // uint token ids
  uvec2 seed;
  uint V, h_ctx, last_n;   // last_n = 0: no penalty window
  float penalty, temperature, top_p, min_p;
  uint top_k, position, stream, draw;
  float draft_p_min;   // fused verify: drafts from the first i >= 1 whose top probability is below it are ignored
  uvec2 q, tokens, result, counter;   // fused verify only: draft rows [K][V], drafts [K][2], {accepted, next}, uint
  uint K, accept;

} pc;

layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer CoherentFloats { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer CoherentUints { uint v[]; };

float p_at(uint row, uint v) { return CoherentFloats(pc.probs).v[row * pc.V + v]; }
float q_at(uint row, uint v) { return Floats(pc.q).v[row * pc.V + v]; }
// Drafts in the token-slot layout ({token, top probability} pairs) the draft steps wrote.
uint draft_at(uint i) { return Uints(pc.tokens).v[2u * i]; }
#define accept_V pc.V
#include "accept.glsl"

shared bool last_done;

shared uint digit_count[256];
shared uint lane_ties[256];
shared uint sel_prefix, sel_remaining, n_cand;
shared uint cand_id[MAX_K];
shared float cand_l[MAX_K];
shared uint order[MAX_K];     // order[rank] = candidate index, by logit descending, ties by lower id
shared float cand_p[MAX_K];   // probability of the candidate at each rank (0 = cut)

// order-preserving map of a float to uint (larger float -> larger key)
uint key_of(float f) {
  const uint u = floatBitsToUint(f);
  return (u & 0x80000000u) != 0u ? ~u : u | 0x80000000u;
}

void main() {
  const uint row = gl_WorkGroupID.x, lane = gl_LocalInvocationID.x;
  const uint base = row * pc.V;
  const uint per = (pc.V + WG - 1u) / WG, lo = min(lane * per, pc.V), hi = min(lo + per, pc.V);

  // 1. repetition penalty, once per distinct token of the window
  if (pc.last_n != 0u && pc.penalty != 1.0) {
    const uint end = pc.h_ctx + row, start = end > pc.last_n ? end - pc.last_n : 0u;
    for (uint j = start + lane; j < end; j += WG) {
      const uint id = Uints(pc.hist).v[j];
      bool first = id < pc.V;
      for (uint i = start; i < j && first; ++i) first = Uints(pc.hist).v[i] != id;
      if (first) {
        const float l = Floats(pc.logits).v[base + id];
        Floats(pc.logits).v[base + id] = l > 0.0 ? l / pc.penalty : l * pc.penalty;
      }
    }
    memoryBarrierBuffer();
    barrier();
  }

  // 2. top-k: the k-th largest key, one 8-bit digit per pass, most significant first
  if (lane == 0u) { sel_prefix = 0u; sel_remaining = pc.top_k; }
  uint mask = 0u;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (uint b = lane; b < 256u; b += WG) digit_count[b] = 0u;
    barrier();
    const uint prefix = sel_prefix;
    for (uint v = lo; v < hi; ++v) {
      const uint key = key_of(Floats(pc.logits).v[base + v]);
      if ((key & mask) == prefix) atomicAdd(digit_count[(key >> uint(shift)) & 255u], 1u);
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
  const uint kth = sel_prefix, ties_to_take = sel_remaining;

  // 3. collect the kept candidates: keys above the k-th, and the lowest-id ties at it
  uint ties = 0u;
  for (uint v = lo; v < hi; ++v) ties += key_of(Floats(pc.logits).v[base + v]) == kth ? 1u : 0u;
  lane_ties[lane] = ties;
  if (lane == 0u) n_cand = 0u;
  barrier();
  uint tie_rank = 0u;   // ties in lower lanes (lower ids)
  for (uint l = 0u; l < lane; ++l) tie_rank += lane_ties[l];
  for (uint v = lo; v < hi; ++v) {
    const float l = Floats(pc.logits).v[base + v];
    const uint key = key_of(l);
    bool keep = key > kth;
    if (key == kth) keep = tie_rank++ < ties_to_take;
    if (keep) {
      const uint slot = atomicAdd(n_cand, 1u);
      cand_id[slot] = v;
      cand_l[slot] = l;
    }
  }
  barrier();
  const uint n = n_cand;   // == top_k

  // 4. rank the candidates (logit descending, ties by lower id)
  for (uint i = lane; i < n; i += WG) {
    uint rank = 0u;
    for (uint j = 0u; j < n; ++j)
      rank += (cand_l[j] > cand_l[i] || (cand_l[j] == cand_l[i] && cand_id[j] < cand_id[i])) ? 1u : 0u;
    order[rank] = i;
  }
  barrier();

  // 5. top-p and min-p at temperature 1, then the softmax at the temperature (as Sampler::distribution)
  if (lane == 0u) {
    const float m = cand_l[order[0]];
    float z = 0.0;
    for (uint r = 0u; r < n; ++r) z += exp(cand_l[order[r]] - m);
    uint keep = n;
    if (pc.top_p < 1.0) {
      float cum = 0.0;
      uint r = 0u;
      while (r < n) {
        cum += exp(cand_l[order[r++]] - m) / z;
        if (cum >= pc.top_p) break;
      }
      keep = max(r, 1u);
    }
    if (pc.min_p > 0.0) {
      // p_r / p_0 >= min_p over the kept prefix (the top-p cut renormalizes both sides alike)
      uint r = 1u;
      while (r < keep && exp(cand_l[order[r]] - m) >= pc.min_p) ++r;
      keep = r;
    }
    const float inv_t = 1.0 / max(pc.temperature, 1e-6);
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
  for (uint v = lo; v < hi; ++v) CoherentFloats(pc.probs).v[base + v] = 0.0;
  memoryBarrierBuffer();
  barrier();
  for (uint r = lane; r < n; r += WG)
    if (cand_p[r] > 0.0) CoherentFloats(pc.probs).v[base + cand_id[order[r]]] = cand_p[r];

  // 7. draw by inverse CDF in rank order (the host Sampler's order)
  if (pc.draw != 0u && lane == 0u) {
    const float u = counter_uniform(pc.seed, pc.position + row, pc.stream);
    float cum = 0.0;
    uint pick = cand_id[order[0]];
    for (uint r = 0u; r < n && cand_p[r] > 0.0; ++r) {
      pick = cand_id[order[r]];
      cum += cand_p[r];
      if (u < cum) break;
    }
    Uints(pc.draws).v[2u * row] = pick;
    Uints(pc.draws).v[2u * row + 1u] = floatBitsToUint(cand_p[0]);
  }

  // 8. fused verify: the last workgroup to finish its row runs accept/reject over all of them
  if (pc.accept == 0u) return;
  memoryBarrierBuffer();   // this row's writes are visible device-wide before it counts as done
  barrier();
  if (lane == 0u) last_done = atomicAdd(CoherentUints(pc.counter).v[0], 1u) == gl_NumWorkGroups.x - 1u;
  barrier();
  if (!last_done) return;   // uniform per workgroup
  memoryBarrierBuffer();
  // --draft-p-min on the device: the draft ran all K steps, but a draft after one it was unsure of is not
  // verified (the host applies the same rule to its count of drafts: SpeculativeRound::drafts_kept).
  uint k = pc.K;
  for (uint i = 1u; i < pc.K && pc.draft_p_min > 0.0; ++i)
    if (uintBitsToFloat(Uints(pc.tokens).v[2u * i + 1u]) < pc.draft_p_min) { k = i; break; }
  const uvec2 r = accept_chain(k, pc.seed, pc.position);
  if (lane == 0u) {
    Uints(pc.result).v[0] = r.x;
    Uints(pc.result).v[1] = r.y;
    CoherentUints(pc.counter).v[0] = 0u;   // ready for the next verify
  }
}
