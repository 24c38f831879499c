#version 460
// Flash-decoding combine: one workgroup per (head, token) merges the partials {acc[head_dim], m, l} that
// attention.comp wrote for the token's splits, in split order: M = max m_s, out = sum acc_s e^(m_s - M) /
// sum l_s e^(m_s - M) (the splits from its window's first key). A token with one split gets acc / l, exactly
// what the unsplit kernel writes.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "contract.h"

layout(push_constant) uniform PC { PC_ATTENTION_COMBINE } pc;   // shaders/contract.h

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, lane = gl_LocalInvocationID.x;
  const uint len = Uints(pc.rows).v[t * KV_ROW_UINTS] + 1u;   // this row's keys: its position + 1
  const uint splits = (len + pc.split - 1u) / pc.split;   // this token's
  const uint stride = pc.head_dim + ATTENTION_PARTIAL_EXTRA;
  const uint base = (t * pc.n_heads + h) * pc.n_splits * stride;
  const uint o_base = (t * pc.n_heads + h) * pc.head_dim;
  const uint s0 = first_key(len - 1u, pc.window) / pc.split;   // splits before it saw no key of the window
  if (splits - s0 == 1u) {
    const uint at = base + s0 * stride;
    const float l = Floats(pc.partials).v[at + pc.head_dim + 1u];
    for (uint d = lane; d < pc.head_dim; d += WG) Floats(pc.out_).v[o_base + d] = Floats(pc.partials).v[at + d] / l;
    return;
  }
  float M = -1.0 / 0.0;
  for (uint s = s0; s < splits; ++s) M = max(M, Floats(pc.partials).v[base + s * stride + pc.head_dim]);
  precise float L = 0.0;
  for (uint s = s0; s < splits; ++s)
    L += Floats(pc.partials).v[base + s * stride + pc.head_dim + 1u] * exp(Floats(pc.partials).v[base + s * stride + pc.head_dim] - M);
  for (uint d = lane; d < pc.head_dim; d += WG) {
    precise float a = 0.0;
    for (uint s = s0; s < splits; ++s)
      a += Floats(pc.partials).v[base + s * stride + d] * exp(Floats(pc.partials).v[base + s * stride + pc.head_dim] - M);
    Floats(pc.out_).v[o_base + d] = a / L;
  }
}
