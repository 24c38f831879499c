#version 460
// v = cap * tanh(v / cap), in place: Gemma 2's final logit soft-capping. Elementwise: no row sees another.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "contract.h"

layout(push_constant) uniform PC { PC_SOFTCAP } pc;   // shaders/contract.h

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i < pc.count) Floats(pc.v).v[i] = softcap_score(Floats(pc.v).v[i], pc.cap);
}
