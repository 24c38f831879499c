#version 460
// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w. One workgroup per token; fixed reduction order.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "contract.h"

layout(push_constant) uniform PC { PC_RMSNORM } pc;   // shaders/contract.h

void main() {
  const uint base = gl_WorkGroupID.x * pc.dim;
  precise float ss = 0.0;
  for (uint d = gl_LocalInvocationID.x; d < pc.dim; d += WG) {
    const float v = Floats(pc.x).v[base + d];
    ss += v * v;
  }
  ss = wg_sum(ss);
  const float scale = 1.0 / sqrt(ss / float(pc.dim) + pc.eps);
  for (uint d = gl_LocalInvocationID.x; d < pc.dim; d += WG)
    Floats(pc.out_).v[base + d] = Floats(pc.x).v[base + d] * scale * Floats(pc.w).v[d];
}
