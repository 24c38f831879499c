#version 460
// probs[t] = softmax(logits[t] / temperature). One workgroup per row; fixed reduction order.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "contract.h"

layout(push_constant) uniform PC { PC_SOFTMAX } pc;   // shaders/contract.h

void main() {
  const uint base = gl_WorkGroupID.x * pc.cols;
  float m = -1.0 / 0.0;
  for (uint i = gl_LocalInvocationID.x; i < pc.cols; i += WG) m = max(m, Floats(pc.logits).v[base + i] * pc.inv_temperature);
  m = wg_max(m);
  precise float s = 0.0;
  for (uint i = gl_LocalInvocationID.x; i < pc.cols; i += WG) s += exp(Floats(pc.logits).v[base + i] * pc.inv_temperature - m);
  s = wg_sum(s);
  for (uint i = gl_LocalInvocationID.x; i < pc.cols; i += WG)
    Floats(pc.probs).v[base + i] = exp(Floats(pc.logits).v[base + i] * pc.inv_temperature - m) / s;
}
