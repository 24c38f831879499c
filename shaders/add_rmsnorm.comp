#version 460
// x[t] += rmsnorm(y[t]) * norm: the norm after a sublayer, before its residual add (Gemma's post-attention and
// post-FFN norms). One workgroup per row; the sum of squares is reduced in a fixed order (wg_sum), so a row's
// result does not depend on the rows beside it.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "contract.h"

layout(push_constant) uniform PC { PC_ADD_RMSNORM } pc;   // shaders/contract.h

void main() {
  const uint t = gl_WorkGroupID.x, base = t * pc.dim;
  precise float ss = 0.0;
  for (uint d = gl_LocalInvocationID.x; d < pc.dim; d += WG) {
    const float v = Floats(pc.y).v[base + d];
    ss += v * v;
  }
  const float scale = 1.0 / sqrt(wg_sum(ss) / float(pc.dim) + pc.eps);
  for (uint d = gl_LocalInvocationID.x; d < pc.dim; d += WG)
    Floats(pc.x).v[base + d] += Floats(pc.y).v[base + d] * scale * Floats(pc.norm).v[d];
}
