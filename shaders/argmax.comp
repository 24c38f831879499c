#version 460
// slots[t] = {argmax(logits[t]), top probability}: ties go to the lowest index (as llama.cpp's greedy
// sampler); the top probability 1 / sum(exp(l - max)) only when want_top_prob (speculative drafts with
// --draft-p-min), else 0. Output in the token-slot layout ({token, aux} pairs) that the next step's
// embedding reads (which clamps ids to the vocabulary). A row holding NaN or Inf gets NON_FINITE_TOKEN, which
// the host reports as broken logits. With `exclude`, row t's argmax leaves out the token in slot t there (a
// draft's runner-up: the best token but the one drawn). One workgroup per row.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "contract.h"

layout(push_constant) uniform PC { PC_ARGMAX } pc;   // shaders/contract.h

shared float best_v[WG];
shared uint best_i[WG];
shared float part_z[WG];
shared bool non_finite;

void main() {
  const uint base = gl_WorkGroupID.x * pc.cols, lane = gl_LocalInvocationID.x;
  const uint excluded = pc.exclude == uvec2(0u) ? 0xffffffffu : Uints(pc.exclude).v[SLOT_TOKEN(gl_WorkGroupID.x)];
  float bv = -1.0 / 0.0;
  uint bi = 0xffffffffu;
  bool bad = false;
  if (lane == 0u) non_finite = false;
  for (uint i = lane; i < pc.cols; i += WG) {
    const float v = Floats(pc.logits).v[base + i];
    bad = bad || isnan(v) || isinf(v);
    if (i != excluded && (v > bv || bi == 0xffffffffu)) { bv = v; bi = i; }
  }
  barrier();
  if (bad) non_finite = true;   // every writer writes the same value
  best_v[lane] = bv;
  best_i[lane] = bi;
  barrier();
  for (uint stride = WG / 2u; stride > 0u; stride /= 2u) {   // WG is a power of two
    if (lane < stride) {
      const float ov = best_v[lane + stride];
      const uint oi = best_i[lane + stride];
      if (ov > best_v[lane] || (ov == best_v[lane] && oi < best_i[lane])) { best_v[lane] = ov; best_i[lane] = oi; }
    }
    barrier();
  }
  float top_prob = 0.0;
  if (pc.want_top_prob != 0u) {
    const float m = best_v[0];
    float z = 0.0;
    for (uint i = lane; i < pc.cols; i += WG) z += exp(Floats(pc.logits).v[base + i] - m);
    part_z[lane] = z;
    barrier();
    for (uint stride = WG / 2u; stride > 0u; stride /= 2u) {
      if (lane < stride) part_z[lane] += part_z[lane + stride];
      barrier();
    }
    top_prob = 1.0 / part_z[0];
  }
  if (lane == 0u) {
    Uints(pc.slots).v[SLOT_TOKEN(gl_WorkGroupID.x)] = non_finite ? NON_FINITE_TOKEN : best_i[0] == 0xffffffffu ? 0u : best_i[0];
    Uints(pc.slots).v[SLOT_AUX(gl_WorkGroupID.x)] = floatBitsToUint(top_prob);
  }
}
