#version 460
// Speculative sampling, accept/reject for one verify pass (exact rejection sampling: Leviathan et al.,
// Chen et al. 2023). Inputs: the target's distributions p_0..p_K over the vocabulary (p_i is the
// distribution of the token after draft i-1, after every sampling transform), the draft's q_0..q_{K-1},
// and the drafted tokens t_0..t_{K-1} (t_i ~ q_i). For i = 0..K-1: accept t_i with probability
// min(1, p_i(t_i) / q_i(t_i)); at the first rejection draw the correction from norm(max(0, p_i - q_i)) and
// stop; if every draft is accepted draw a bonus token from p_K. The emitted tokens are then distributed
// exactly as sampling the target alone. Writes result = {accepted count, next token}.
// Rows written by the host (top-k off or above DeviceSampler::kMaxTopK, and the statistical tests); with
// device transforms sample_rows.comp runs the same chain (accept.glsl) fused after the transforms.
// One workgroup per trial: generation dispatches one; the statistical tests dispatch many trials at once
// (trial j reads row j of `tokens` and uses seed + j).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "contract.h"
#include "rng.h"

layout(push_constant) uniform PC { PC_SPEC_ACCEPT } pc;   // shaders/contract.h

float p_at(uint row, uint v) { return Floats(pc.p).v[row * pc.V + v]; }
float q_at(uint row, uint v) { return Floats(pc.q).v[row * pc.V + v]; }
uint trial_row = 0u;
uint draft_at(uint i) { return Uints(pc.tokens).v[trial_row * pc.tokens_stride + i]; }
#define accept_V pc.V
#include "accept.glsl"

void main() {
  const uint trial = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;   // 2D: > 65535 trials
  if (trial >= pc.trials) return;   // uniform per workgroup, so barriers stay uniform
  trial_row = trial;
  const uvec2 r = accept_chain(pc.K, uvec2(pc.seed.x + trial, pc.seed.y), pc.position);
  if (gl_LocalInvocationID.x == 0u) {
    Uints(pc.result).v[2u * trial] = r.x;
    Uints(pc.result).v[2u * trial + 1u] = r.y;
  }
}
