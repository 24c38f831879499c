#version 460
// ids[t] = argmax(logits[t]); ties go to the lowest index (as llama.cpp's greedy sampler). One workgroup per row.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(push_constant) uniform PC {
  uvec2 logits;   // [n][cols]
  uvec2 ids;      // [n] uint
  uint cols;
} pc;

shared float best_v[1024];
shared uint best_i[1024];

void main() {
  const uint base = gl_WorkGroupID.x * pc.cols, lane = gl_LocalInvocationID.x;
  float bv = -1.0 / 0.0;
  uint bi = 0xffffffffu;
  for (uint i = lane; i < pc.cols; i += WG) {
    const float v = Floats(pc.logits).v[base + i];
    if (v > bv || bi == 0xffffffffu) { bv = v; bi = i; }
  }
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
  if (lane == 0u) Uints(pc.ids).v[gl_WorkGroupID.x] = best_i[0] == 0xffffffffu ? 0u : best_i[0];
}
