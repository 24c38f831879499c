// The end of a matmul sum, shared by matmul.comp and matmul_tile.comp so that both give the same bits (batch
// invariance): RMSNorm's scale (sq = the token's sum of x^2 over the row), SwiGLU or GeGLU, MODE_ACCUMULATE, the store
// into y[o]. Include after the PC_MATMUL push-constant block `pc`.
void matmul_store(uint o, float sum, float sum2, float sq, bool swiglu, bool normed) {
  precise float s = sum, s2 = sum2;
  if (normed) {
    const float scale = 1.0 / sqrt(sq / float(pc.K) + pc.eps);
    s *= scale;
    s2 *= scale;
  }
  precise float v = s;
  if (swiglu) v = gate_activation(s, (pc.mode & MODE_GELU) != 0u) * s2;
  if ((pc.mode & MODE_ACCUMULATE) != 0u) v += Floats(pc.y).v[o];
  Floats(pc.y).v[o] = v;
}
