// Shared by every vkspec kernel. Buffers are reached through buffer device addresses passed in push
// constants (uvec2 = little-endian 64-bit address): no descriptor sets, and no maxStorageBufferRange
// limit on how big one tensor may be (lavapipe's is 128 MiB; a Llama-3.2-1B embedding is 500 MiB).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "contract.h"   // RED_SCRATCH_FLOATS

layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4s { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Uints { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Uvec2s { uvec2 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Uvec4s { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Vec2s { vec2 v[]; };

// Workgroup size is specialization constant 0 everywhere; the host picks it per device.
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;

// acc + a.x x.x + a.y x.y + a.z x.z + a.w x.w for the float matmuls (matmul.comp for one token,
// matmul_tile.comp for more, which must give the same bits). FUSED: four fused multiply-adds, acc first (one
// GPU instruction per term); else the products summed, then added to acc (a multiply and an add per term).
// `precise` either way: no compiler may contract or reorder it differently in the two kernels.
float dot4_acc(float acc, vec4 a, vec4 x, bool fused) {
  precise float r;
  if (fused) {
    r = fma(a.x, x.x, acc);
    r = fma(a.y, x.y, r);
    r = fma(a.z, x.z, r);
    r = fma(a.w, x.w, r);
  } else {
    r = acc + (a.x * x.x + a.y * x.y + a.z * x.z + a.w * x.w);
  }
  return r;
}
float dot1_acc(float acc, float a, float x, bool fused) {
  precise float r;
  if (fused) r = fma(a, x, acc);
  else r = acc + a * x;
  return r;
}

// Workgroup reductions with a fixed order for a given device and WG: subgroup reduction first, then the
// per-subgroup partials summed in subgroup order. Nothing depends on how many tokens share the dispatch,
// which is what makes every kernel batch-invariant.
shared float red_scratch[RED_SCRATCH_FLOATS];

float wg_sum(float v) {
  v = subgroupAdd(v);
  if (gl_NumSubgroups == 1) return v;
  barrier();
  if (subgroupElect()) red_scratch[gl_SubgroupID] = v;
  barrier();
  float s = 0.0;
  for (uint i = 0; i < gl_NumSubgroups; ++i) s += red_scratch[i];
  return s;
}

// The sum of every lane's v as a pairwise tree in lane order, for WG a power of two <= RED_SCRATCH_FLOATS:
// lanes 2i and 2i + 1 first, then those pairs' sums two by two, and so on. One order for every device and subgroup size
// (levels below the subgroup size by shuffles, the others in shared memory give the same additions; a + b
// and b + a are the same bits), so that matmul_tile.comp, which adds up a row's lane partial sums in shared
// memory, gives the same bits as matmul.comp does with this (batch invariance of the subgroup family).
float wg_sum_pairwise(float v) {
  precise float s = v;
  uint d = 1u;
  for (; d < gl_SubgroupSize && d < WG; d <<= 1u) s += subgroupShuffleXor(s, d);
  if (d >= WG) return s;
  barrier();   // red_scratch's previous use is done
  red_scratch[gl_LocalInvocationID.x] = s;   // lane l holds its block of d lanes' sum
  for (; d < WG; d <<= 1u) {
    barrier();
    const uint l = gl_LocalInvocationID.x;
    if ((l & (2u * d - 1u)) == 0u) {
      precise float b = red_scratch[l] + red_scratch[l + d];
      red_scratch[l] = b;
    }
  }
  barrier();
  return red_scratch[0];
}

float wg_max(float v) {
  v = subgroupMax(v);
  if (gl_NumSubgroups == 1) return v;
  barrier();
  if (subgroupElect()) red_scratch[gl_SubgroupID] = v;
  barrier();
  float m = red_scratch[0];
  for (uint i = 1; i < gl_NumSubgroups; ++i) m = max(m, red_scratch[i]);
  return m;
}

// RoPE on one pair (a, b) = dims (2i, 2i+1) of a head, cs = (cos, sin) of its angle: the one rotation that
// rope_store_kv.comp and matmul_rows.comp's MODE_ROPE_KV both use, precise so that neither contracts it into
// an FMA differently (the two paths give bit-identical q, k and cache contents).
vec2 rope_rotate(float a, float b, vec2 cs) {
  precise float ra = a * cs.x - b * cs.y, rb = a * cs.y + b * cs.x;
  return vec2(ra, rb);
}

// tanh with its argument clamped where the float result is +-1 already (tanh(9) rounds to 1): some drivers
// compute tanh as a ratio of exponentials, which is inf / inf past ~44.
float tanh_safe(float v) { return tanh(clamp(v, -9.0, 9.0)); }

// The activation of a gated FFN's gate: SiLU (SwiGLU: Llama, Qwen, Phi) or GELU in its tanh form (GeGLU:
// Gemma; ggml's gelu).
float gate_activation(float g, bool gelu) {
  if (!gelu) return g / (1.0 + exp(-g));
  return 0.5 * g * (1.0 + tanh_safe(0.7978845608028654 * g * (1.0 + 0.044715 * g * g)));
}

// An attention score after its scale: cap * tanh(s / cap) where cap > 0 (Gemma 2's soft-capping).
float softcap_score(float s, float cap) { return cap > 0.0 ? cap * tanh_safe(s / cap) : s; }

// The first key a row at position pos attends to under a sliding window of `window` positions (0: none):
// keys pos - window + 1 .. pos, llama.cpp's standard window (a key window or more positions back is masked).
uint first_key(uint pos, uint window) { return window == 0u || pos < window ? 0u : pos + 1u - window; }
