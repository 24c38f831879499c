#version 460
// Biases a matmul's kernels do not add (the Llama architecture's optional ones, as llama.cpp reads them):
//   glu 0: y[t][i] += b[i]                                   (attn_output.bias, ffn_down.bias)
//   glu 1: y[t][i] = act(gu[t][i] + bg[i]) * (gu[t][W + i] + bu[i])   (ffn_gate.bias, ffn_up.bias: the gated
//          FFN's sums, computed by two plain matmuls side by side, biased before the activation)
// One workgroup per row; elementwise, so a row does not depend on the rows beside it.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "contract.h"

layout(push_constant) uniform PC { PC_BIAS_ROWS } pc;   // shaders/contract.h

void main() {
  const uint t = gl_WorkGroupID.x;
  for (uint i = gl_LocalInvocationID.x; i < pc.width; i += WG) {
    if (pc.glu == 0u) {
      Floats(pc.y).v[t * pc.stride + i] += Floats(pc.b).v[i];
    } else {
      const uint g = t * 2u * pc.width + i;
      precise float gate = Floats(pc.gu).v[g] + Floats(pc.b).v[i];
      precise float up = Floats(pc.gu).v[g + pc.width] + Floats(pc.b).v[pc.width + i];
      Floats(pc.y).v[t * pc.stride + i] = gate_activation(gate, pc.gelu != 0u) * up;
    }
  }
}
