#version 460
// x[t][:] = table[tokens[t]][:] as f32. One workgroup per token; the table may be any weight type.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "weights.glsl"

layout(constant_id = 1) const uint WTYPE = WT_F32;

layout(push_constant) uniform PC {
  uvec2 table, table_scales;  // [vocab][dim]
  uvec2 tokens;               // [n] uint
  uvec2 x;                    // [n][dim] f32
  uint dim, n, vocab;
} pc;

void main() {
  const uint t = gl_WorkGroupID.x;
  const uint id = min(Uints(pc.tokens).v[t], pc.vocab - 1u);   // ids are validated on the host
  for (uint d = gl_LocalInvocationID.x; d < pc.dim; d += WG)
    Floats(pc.x).v[t * pc.dim + d] = load_w1(WTYPE, pc.table, pc.table_scales, id * pc.dim + d);
}
