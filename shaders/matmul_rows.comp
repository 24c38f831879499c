#version 460
// Row-per-lane matmul for CPU devices (lavapipe): y[t][r] (+)= sum_k W[r][k] * x[t][k], RPL weight rows per
// lane (each x texel is fetched once for all of them), TT tokens per workgroup. Weights and x are read
// through uniform texel buffers of 16-byte texels because llvmpipe compiles texelFetch into one vector
// gather, while storage-buffer / device-address loads become a scalar loop with a branch per lane. Same modes as
// matmul.comp (accumulate, fused SwiGLU, RMSNorm applied on the fly: each lane reduces x^2 per token over the
// texels it reads anyway and multiplies x by the norm weight once for all of its rows).
//
// Layout per row: K/EPT texels (EPT = weights per texel: f32 4, f16/bf16 8, q8 16, q4 32), decoded EPC
// (<= 16) weights at a time; quantized formats have per-GROUP scales (float, or {s, m} when HAS_MIN) in a
// plane of the same memory block (shaders/weights.glsl). x rows are x_stride floats (x_stride % 4 == 0),
// 4 floats per texel. A quantized chunk contributes s * dot(q, x) + m * sum(x): the sum of x is taken once
// per token for all of a lane's rows.
// The k loop runs in steps of 32 weights whose scales lie in one texel per row, fetched once per step: on
// llvmpipe a texel fetch is a call of ~45 instructions whatever it reads, and fetching the scales once per
// 16-weight chunk made the q4 matmul of the Llama-3.2-1B shape 1.4x slower (7.3 -> 5.3 ms, q8 -7%).
// Batch invariance: each lane reduces its row in k order, one chunk at a time, whatever TT is.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "contract.h"
#include "weights.glsl"
#extension GL_EXT_control_flow_attributes : require

#if defined(WTYPE_F32)
const uint WTYPE = WT_F32, EPT = 4;
#elif defined(WTYPE_F16)
const uint WTYPE = WT_F16, EPT = 8;
#elif defined(WTYPE_BF16)
const uint WTYPE = WT_BF16, EPT = 8;
#elif defined(WTYPE_Q8)
const uint WTYPE = WT_Q8, EPT = 16;
#else
const uint WTYPE = WT_Q4, EPT = 32;
#endif
const uint EPC = EPT > 16u ? 16u : EPT;   // weights per decoded chunk
const uint CPT = EPT / EPC;               // chunks per texel

layout(constant_id = 1) const uint TT = 1;    // tokens per workgroup: 1..8
layout(constant_id = 2) const uint RPL = 1;   // rows per lane: 1, 2 or 4 (x is fetched once for all of them)
layout(constant_id = 3) const uint GROUP = 32;       // quantized: weights per scale (16 or 32)
layout(constant_id = 4) const bool HAS_MIN = false;  // quantized: scales are {s, m} pairs

layout(set = 0, binding = 0) uniform usamplerBuffer W;    // block holding W (and its scales)
layout(set = 0, binding = 1) uniform usamplerBuffer W2;   // block holding W2 (MODE_SWIGLU only)
layout(set = 0, binding = 2) uniform usamplerBuffer X;    // block holding x
layout(set = 0, binding = 3) uniform usamplerBuffer G;    // block holding the norm weight (MODE_RMSNORM only)


layout(push_constant) uniform PC { PC_MATMUL_ROWS } pc;   // shaders/contract.h

vec4 xv(uint t4) { return uintBitsToFloat(texelFetch(X, int(pc.x + t4))); }
vec4 gv(uint t4) { return uintBitsToFloat(texelFetch(G, int(pc.norm + t4))); }

// One chunk of a weight row, decoded: EPC weights (or quants) as up to four vec4s, and the quant group's
// scale and min.
struct Wt { vec4 a, b, c, d; float s, m; };

uvec4 fetch(usamplerBuffer tex, uint base, uint row, uint i, uint kt) { return texelFetch(tex, int(base + row * kt + i)); }

// Weights of chunk `chunk` (of the texel u holding it) with the scale {s, m} of its group.
Wt decode(uvec4 u, uint chunk, vec2 sm) {
  Wt w;
  w.s = sm.x;
  w.m = sm.y;
  w.b = w.c = w.d = vec4(0.0);
  if (WTYPE == WT_F32) {
    w.a = uintBitsToFloat(u);
  } else if (WTYPE == WT_F16) {
    w.a = vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y));
    w.b = vec4(unpackHalf2x16(u.z), unpackHalf2x16(u.w));
  } else if (WTYPE == WT_BF16) {
    w.a = vec4(bf16x2(u.x), bf16x2(u.y));
    w.b = vec4(bf16x2(u.z), bf16x2(u.w));
  } else if (WTYPE == WT_Q8) {
    w.a = q8x4(u.x); w.b = q8x4(u.y); w.c = q8x4(u.z); w.d = q8x4(u.w);
  } else {
    const uvec2 h = (chunk & 1u) == 0u ? u.xy : u.zw;   // two 16-quant chunks per texel
    w.a = q4x4(h.x); w.b = q4x4(h.x >> 16); w.c = q4x4(h.y); w.d = q4x4(h.y >> 16);
  }
  return w;
}

// Quantized formats: a step's groups lie in one scale texel (the host checks that GROUP 16 rows are whole
// steps): 4 scales, or 2 {s, m} pairs, per texel. gs = the row's group index at the step's start.
uint scale_texel(uint gs) { return HAS_MIN ? gs / 2u : gs / 4u; }
vec2 chunk_scale(vec4 t, uint gs, uint c) {
  if (WTYPE < WT_Q8) return vec2(1.0, 0.0);
  const uint g = gs + c * EPC / GROUP;
  if (HAS_MIN) return (g & 1u) == 0u ? t.xy : t.zw;
  const uint k = g & 3u;
  return vec2(k == 0u ? t.x : k == 1u ? t.y : k == 2u ? t.z : t.w, 0.0);
}

// sum over one chunk of weights times the matching x values x0..x3 (EPC/4 of them are used); xs = the sum
// of those x values (quantized formats with a min)
float dot_chunk(Wt w, vec4 x0, vec4 x1, vec4 x2, vec4 x3, float xs) {
  if (WTYPE == WT_F32) return dot(w.a, x0);
  if (WTYPE == WT_F16 || WTYPE == WT_BF16) return dot(w.a, x0) + dot(w.b, x1);
  const float q = (dot(w.a, x0) + dot(w.b, x1) + dot(w.c, x2) + dot(w.d, x3)) * w.s;
  return HAS_MIN ? q + w.m * xs : q;
}

float pick(vec4 lo, vec4 hi, uint t) { return t < 4u ? lo[t] : hi[t - 4u]; }

// Weights per step: quantized, 32 (the scale texel is fetched once per step); float formats have no scales
// and step a chunk at a time (an unrolled 8-chunk f32 step only made llvmpipe's JIT slower).
const uint STEP = WTYPE >= WT_Q8 ? 32u : EPC;
const uint CPS = STEP / EPC;              // chunks per step: q8/q4 2, float formats 1
const uint XPC = EPC / 4u;                // x texels per chunk

void main() {
  const uint row0 = gl_GlobalInvocationID.x * RPL;
  const uint t0 = gl_WorkGroupID.y * TT;
  const bool swiglu = (pc.mode & MODE_SWIGLU) != 0u, normed = (pc.mode & MODE_RMSNORM) != 0u;
  const uint kt = pc.K / EPT, xs4 = pc.x_stride / 4u;
  // rows are whole steps: a float step is one texel; quantized rows are whole 32-weight steps (q4 texels hold
  // 32, q8 groups are 32, or the host asks for K % 32 == 0)
  const uint steps = pc.K / STEP, gpr = pc.K / GROUP;
  // rows past M repeat the last row (their results are dropped)
  const uint r0 = min(row0, pc.M - 1u), r1 = min(row0 + 1u, pc.M - 1u);
  const uint r2 = min(row0 + 2u, pc.M - 1u), r3 = min(row0 + 3u, pc.M - 1u);

  // Accumulators (row j, tokens 0-3 / 4-7) live in vec4s, not float[TT]: llvmpipe puts indexed arrays
  // in scratch memory, which made every += a per-lane memory round trip (4x slower overall).
  precise vec4 a0l = vec4(0.0), a0h = vec4(0.0), a1l = vec4(0.0), a1h = vec4(0.0);
  precise vec4 a2l = vec4(0.0), a2h = vec4(0.0), a3l = vec4(0.0), a3h = vec4(0.0);
  precise vec4 g0l = vec4(0.0), g0h = vec4(0.0), g1l = vec4(0.0), g1h = vec4(0.0);   // SwiGLU's up rows
  precise vec4 g2l = vec4(0.0), g2h = vec4(0.0), g3l = vec4(0.0), g3h = vec4(0.0);
  precise vec4 ssl = vec4(0.0), ssh = vec4(0.0);   // MODE_RMSNORM: sum of x^2, tokens 0-3 / 4-7
  const uint last = (pc.n - 1u) * xs4;   // tokens past n repeat the last one (their results are dropped)
  const uint x0 = min(t0 * xs4, last);
  const vec4 one = vec4(1.0, 0.0, 1.0, 0.0);
  for (uint s = 0; s < steps; ++s) {
    // the step's scale texel of each row (quantized formats)
    const uint gs = s * STEP / GROUP;
    vec4 s0 = one, s1 = one, s2 = one, s3 = one, t0s = one, t1s = one, t2s = one, t3s = one;
    if (WTYPE >= WT_Q8) {
      s0 = uintBitsToFloat(texelFetch(W, int(pc.w_scales + scale_texel(r0 * gpr + gs))));
      if (RPL > 1u) s1 = uintBitsToFloat(texelFetch(W, int(pc.w_scales + scale_texel(r1 * gpr + gs))));
      if (RPL > 2u) {
        s2 = uintBitsToFloat(texelFetch(W, int(pc.w_scales + scale_texel(r2 * gpr + gs))));
        s3 = uintBitsToFloat(texelFetch(W, int(pc.w_scales + scale_texel(r3 * gpr + gs))));
      }
      if (swiglu) {
        t0s = uintBitsToFloat(texelFetch(W2, int(pc.w2_scales + scale_texel(r0 * gpr + gs))));
        if (RPL > 1u) t1s = uintBitsToFloat(texelFetch(W2, int(pc.w2_scales + scale_texel(r1 * gpr + gs))));
        if (RPL > 2u) {
          t2s = uintBitsToFloat(texelFetch(W2, int(pc.w2_scales + scale_texel(r2 * gpr + gs))));
          t3s = uintBitsToFloat(texelFetch(W2, int(pc.w2_scales + scale_texel(r3 * gpr + gs))));
        }
      }
    }
    uvec4 f0 = uvec4(0u), f1 = uvec4(0u), f2 = uvec4(0u), f3 = uvec4(0u);
    uvec4 e0 = uvec4(0u), e1 = uvec4(0u), e2 = uvec4(0u), e3 = uvec4(0u);
    [[unroll]] for (uint c = 0; c < CPS; ++c) {
    const uint chunk = s * CPS + c;
    if (c % CPT == 0u) {          // a new weight texel for each row
      const uint i = chunk / CPT;
      f0 = fetch(W, pc.w, r0, i, kt);
      if (RPL > 1u) f1 = fetch(W, pc.w, r1, i, kt);
      if (RPL > 2u) { f2 = fetch(W, pc.w, r2, i, kt); f3 = fetch(W, pc.w, r3, i, kt); }
      if (swiglu) {
        e0 = fetch(W2, pc.w2, r0, i, kt);
        if (RPL > 1u) e1 = fetch(W2, pc.w2, r1, i, kt);
        if (RPL > 2u) { e2 = fetch(W2, pc.w2, r2, i, kt); e3 = fetch(W2, pc.w2, r3, i, kt); }
      }
    }
    const Wt zero = Wt(vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0), 1.0, 0.0);
    const Wt w0 = decode(f0, chunk, chunk_scale(s0, r0 * gpr + gs, c));
    const Wt w1 = RPL > 1u ? decode(f1, chunk, chunk_scale(s1, r1 * gpr + gs, c)) : zero;
    const Wt w2 = RPL > 2u ? decode(f2, chunk, chunk_scale(s2, r2 * gpr + gs, c)) : zero;
    const Wt w3 = RPL > 2u ? decode(f3, chunk, chunk_scale(s3, r3 * gpr + gs, c)) : zero;
    Wt u0 = zero, u1 = zero, u2 = zero, u3 = zero;
    if (swiglu) {
      u0 = decode(e0, chunk, chunk_scale(t0s, r0 * gpr + gs, c));
      if (RPL > 1u) u1 = decode(e1, chunk, chunk_scale(t1s, r1 * gpr + gs, c));
      if (RPL > 2u) {
        u2 = decode(e2, chunk, chunk_scale(t2s, r2 * gpr + gs, c));
        u3 = decode(e3, chunk, chunk_scale(t3s, r3 * gpr + gs, c));
      }
    }
    const uint xi = chunk * XPC;   // the chunk's first x texel
    vec4 ga = vec4(1.0), gb = vec4(1.0), gc = vec4(1.0), gd = vec4(1.0);   // norm weights of this chunk
    if (normed) {
      ga = gv(xi);
      if (EPC > 4u) gb = gv(xi + 1u);
      if (EPC > 8u) { gc = gv(xi + 2u); gd = gv(xi + 3u); }
    }
#define ROW(w, u, acc, acc2, c)                                          \
    acc.c += dot_chunk(w, xa, xb, xc, xd, xs);                           \
    if (swiglu) acc2.c += dot_chunk(u, xa, xb, xc, xd, xs);
#define TOKEN(t, h, c)                                                   \
    if (TT > t) {                                                        \
      const uint xt = min(x0 + t * xs4, last) + xi;                      \
      precise vec4 xa = xv(xt);                                          \
      precise vec4 xb = EPC > 4u ? xv(xt + 1u) : vec4(0.0);              \
      precise vec4 xc = EPC > 8u ? xv(xt + 2u) : vec4(0.0);              \
      precise vec4 xd = EPC > 8u ? xv(xt + 3u) : vec4(0.0);              \
      if (normed) {                                                      \
        ss##h.c += dot(xa, xa) + dot(xb, xb) + dot(xc, xc) + dot(xd, xd); \
        xa *= ga; xb *= gb; xc *= gc; xd *= gd;                          \
      }                                                                  \
      precise float xs = HAS_MIN ? dot(xa + xb + xc + xd, vec4(1.0)) : 0.0; \
      ROW(w0, u0, a0##h, g0##h, c)                                       \
      if (RPL > 1u) { ROW(w1, u1, a1##h, g1##h, c) }                     \
      if (RPL > 2u) { ROW(w2, u2, a2##h, g2##h, c) ROW(w3, u3, a3##h, g3##h, c) } \
    }
    TOKEN(0, l, x) TOKEN(1, l, y) TOKEN(2, l, z) TOKEN(3, l, w)
    TOKEN(4, h, x) TOKEN(5, h, y) TOKEN(6, h, z) TOKEN(7, h, w)
#undef TOKEN
#undef ROW
    }
  }

  for (uint j = 0; j < RPL; ++j) {
    const uint row = row0 + j;
    const vec4 lo = j == 0u ? a0l : j == 1u ? a1l : j == 2u ? a2l : a3l;
    const vec4 hi = j == 0u ? a0h : j == 1u ? a1h : j == 2u ? a2h : a3h;
    const vec4 glo = j == 0u ? g0l : j == 1u ? g1l : j == 2u ? g2l : g3l;
    const vec4 ghi = j == 0u ? g0h : j == 1u ? g1h : j == 2u ? g2h : g3h;
    for (uint t = 0; t < TT; ++t) {
      const uint tok = t0 + t;
      if (row < pc.M && tok < pc.n) {
        const uint o = tok * pc.y_stride + row;
        precise float v = pick(lo, hi, t), v2 = pick(glo, ghi, t);
        if (normed) {
          const float scale = 1.0 / sqrt(pick(ssl, ssh, t) / float(pc.K) + pc.eps);
          v *= scale;
          v2 *= scale;
        }
        if (swiglu) v = v / (1.0 + exp(-v)) * v2;
        if ((pc.mode & MODE_ACCUMULATE) != 0u) v += Floats(pc.y).v[o];
        Floats(pc.y).v[o] = v;
      }
    }
  }
}
