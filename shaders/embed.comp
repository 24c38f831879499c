#version 460
// x[t][:] = table[tokens[t * stride]][:] * scale as f32. One workgroup per token; the table may be any weight type.
// stride 2 reads the token slots ({token, aux} pairs) that argmax and the sampler write (runtime/token_choice.h).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "contract.h"
#include "weights.glsl"

layout(constant_id = 1) const uint WTYPE = WT_F32;
layout(constant_id = 2) const uint GROUP = 32;       // quantized formats: weights per scale
layout(constant_id = 3) const bool HAS_MIN = false;  // quantized formats: scales are {s, m} pairs

layout(push_constant) uniform PC { PC_EMBED } pc;   // shaders/contract.h

void main() {
  const uint t = gl_WorkGroupID.x;
  const uint id = min(Uints(pc.tokens).v[t * pc.stride], pc.vocab - 1u);   // ids are validated on the host
  for (uint d = gl_LocalInvocationID.x; d < pc.dim; d += WG)
    Floats(pc.x).v[t * pc.dim + d] = load_w1(WTYPE, GROUP, HAS_MIN, pc.table, pc.table_scales, id * pc.dim + d) * pc.scale;
}
