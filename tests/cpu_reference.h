#pragma once
// A plain CPU Llama forward pass (double accumulation, llama2.c style) used as the independent reference
// for the device forward pass. Reads the same GGUF tensors through the host dequantizer.
#include <cmath>
#include <vector>

#include "gguf/model_file.h"
#include "core/quant.h"
#include "runtime/tensor.h"   // dequantize

namespace vkspec::test {

class CpuLlama {
 public:
  // n_ctx: the context the device model was created with (LongRoPE's factors depend on it).
  explicit CpuLlama(const GgufFile& f, uint32_t n_ctx = 0) : hp(read_llama_hparams(f)), inv_freq(hp.inv_freq(n_ctx)) {
    LlamaTensors t = find_llama_tensors(f, hp);
    auto deq = [](const GgufTensor* g) { return g ? dequantize(weight_dtype(*g), g->elements(), g->data) : std::vector<float>{}; };
    // rows [row0, row0 + rows) of a fused matrix of `cols` columns (Phi-3's q|k|v and gate|up)
    auto part = [](const std::vector<float>& m, size_t cols, size_t row0, size_t rows) {
      return std::vector<float>(m.begin() + row0 * cols, m.begin() + (row0 + rows) * cols);
    };
    emb = deq(t.token_embd);
    out_norm = deq(t.output_norm);
    out = deq(t.output);
    for (auto& L : t.layers) {
      layers.push_back({deq(L.attn_norm), deq(L.wq), deq(L.wk), deq(L.wv), deq(L.wo), deq(L.ffn_norm), deq(L.w_gate),
                        deq(L.w_up), deq(L.w_down), deq(L.bq), deq(L.bk), deq(L.bv), deq(L.q_norm), deq(L.k_norm),
                        deq(L.attn_post_norm), deq(L.ffn_post_norm), deq(L.bo), deq(L.b_gate), deq(L.b_up), deq(L.b_down)});
      Layer& y = layers.back();
      if (L.wqkv) {
        const std::vector<float> m = deq(L.wqkv);
        y.wq = part(m, hp.dim, 0, hp.q_dim());
        y.wk = part(m, hp.dim, hp.q_dim(), hp.kv_dim());
        y.wv = part(m, hp.dim, hp.q_dim() + hp.kv_dim(), hp.kv_dim());
      }
      if (L.w_gate_up) {
        const std::vector<float> m = deq(L.w_gate_up);
        y.w_gate = part(m, hp.dim, 0, hp.ffn_dim);
        y.w_up = part(m, hp.dim, hp.ffn_dim, hp.ffn_dim);
      }
    }
    kcache.resize(hp.n_layers);
    vcache.resize(hp.n_layers);
  }

  // Logits after feeding `token` at the next position.
  std::vector<double> step(uint32_t token) {
    const uint32_t D = hp.dim, hd = hp.head_dim, qd = hp.n_heads * hd, kvd = hp.n_kv_heads * hd, pos = n_past++;
    std::vector<double> x(emb.begin() + size_t(token) * D, emb.begin() + size_t(token + 1) * D);
    for (double& e : x) e *= hp.embed_scale;   // (Gemma: sqrt(dim))
    const double scale = hp.attn_scale > 0 ? hp.attn_scale : 1.0 / std::sqrt(double(hd));
    for (uint32_t l = 0; l < hp.n_layers; ++l) {
      const Layer& L = layers[l];
      const std::vector<double>& freq = hp.is_swa(l) ? hp.rope_inv_freq_swa : inv_freq;
      const uint32_t first = hp.is_swa(l) && pos >= hp.sliding_window ? pos + 1 - hp.sliding_window : 0;
      auto xn = rmsnorm(x, L.attn_norm);
      auto q = matvec(L.wq, xn, qd), k = matvec(L.wk, xn, kvd), v = matvec(L.wv, xn, kvd);
      for (uint32_t i = 0; i < qd && !L.bq.empty(); ++i) q[i] += L.bq[i];
      for (uint32_t i = 0; i < kvd && !L.bk.empty(); ++i) k[i] += L.bk[i], v[i] += L.bv[i];
      if (!L.q_norm.empty()) {   // each head RMS-normalized (Qwen3)
        norm_heads(q, hp.n_heads, L.q_norm);
        norm_heads(k, hp.n_kv_heads, L.k_norm);
      }
      rope(q, hp.n_heads, pos, freq);
      rope(k, hp.n_kv_heads, pos, freq);
      kcache[l].push_back(as_f16(k));   // the device's KV cache holds f16 (llama.cpp's default too)
      vcache[l].push_back(as_f16(v));
      std::vector<double> att(qd, 0.0);
      for (uint32_t h = 0; h < hp.n_heads; ++h) {
        const uint32_t g = h / (hp.n_heads / hp.n_kv_heads);
        std::vector<double> s(pos + 1, 0.0);   // keys first..pos (a sliding window's)
        double m = -1e300, z = 0;
        for (uint32_t j = first; j <= pos; ++j) {
          double d = 0;
          for (uint32_t e = 0; e < hd; ++e) d += q[h * hd + e] * kcache[l][j][g * hd + e];
          d *= scale;
          if (hp.attn_softcap > 0) d = hp.attn_softcap * std::tanh(d / hp.attn_softcap);
          m = std::max(m, s[j] = d);
        }
        for (uint32_t j = first; j <= pos; ++j) z += (s[j] = std::exp(s[j] - m));
        for (uint32_t j = first; j <= pos; ++j)
          for (uint32_t e = 0; e < hd; ++e) att[h * hd + e] += s[j] / z * vcache[l][j][g * hd + e];
      }
      auto o = matvec(L.wo, att, D);
      for (uint32_t i = 0; i < D && !L.bo.empty(); ++i) o[i] += L.bo[i];
      if (!L.attn_post_norm.empty()) o = rmsnorm(o, L.attn_post_norm);   // (Gemma)
      for (uint32_t i = 0; i < D; ++i) x[i] += o[i];
      xn = rmsnorm(x, L.ffn_norm);
      auto gt = matvec(L.w_gate, xn, hp.ffn_dim), up = matvec(L.w_up, xn, hp.ffn_dim);
      for (uint32_t i = 0; i < hp.ffn_dim && !L.b_gate.empty(); ++i) gt[i] += L.b_gate[i];
      for (uint32_t i = 0; i < hp.ffn_dim && !L.b_up.empty(); ++i) up[i] += L.b_up[i];
      for (uint32_t i = 0; i < hp.ffn_dim; ++i) {
        const double g = gt[i];   // SiLU, or GELU's tanh form (Gemma)
        gt[i] = (hp.gelu_gate ? 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g))) : g / (1 + std::exp(-g))) * up[i];
      }
      auto dn = matvec(L.w_down, gt, D);
      for (uint32_t i = 0; i < D && !L.b_down.empty(); ++i) dn[i] += L.b_down[i];
      if (!L.ffn_post_norm.empty()) dn = rmsnorm(dn, L.ffn_post_norm);
      for (uint32_t i = 0; i < D; ++i) x[i] += dn[i];
    }
    std::vector<double> logits = matvec(out, rmsnorm(x, out_norm), hp.n_vocab);
    if (hp.final_softcap > 0)
      for (double& v : logits) v = hp.final_softcap * std::tanh(v / hp.final_softcap);
    return logits;
  }

  LlamaHParams hp;
  std::vector<double> inv_freq;   // for the context given

 private:
  struct Layer {
    std::vector<float> attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down, bq, bk, bv, q_norm, k_norm, attn_post_norm,
        ffn_post_norm, bo, b_gate, b_up, b_down;
  };
  void norm_heads(std::vector<double>& v, uint32_t heads, const std::vector<float>& w) const {
    for (uint32_t h = 0; h < heads; ++h) {
      const std::vector<double> head(v.begin() + h * hp.head_dim, v.begin() + (h + 1) * hp.head_dim);
      const std::vector<double> normed = rmsnorm(head, w);
      std::copy(normed.begin(), normed.end(), v.begin() + h * hp.head_dim);
    }
  }
  std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<float>& w) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double s = 1.0 / std::sqrt(ss / x.size() + hp.rms_eps);
    std::vector<double> o(x.size());
    for (size_t i = 0; i < x.size(); ++i) o[i] = x[i] * s * w[i];
    return o;
  }
  static std::vector<double> as_f16(std::vector<double> v) {
    for (double& e : v) e = half_to_float(float_to_half(float(e)));
    return v;
  }
  static std::vector<double> matvec(const std::vector<float>& w, const std::vector<double>& x, uint32_t rows) {
    std::vector<double> y(rows, 0.0);
    for (uint32_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < x.size(); ++c) y[r] += double(w[r * x.size() + c]) * x[c];
    return y;
  }
  void rope(std::vector<double>& v, uint32_t heads, uint32_t pos, const std::vector<double>& freq) const {
    for (uint32_t h = 0; h < heads; ++h)
      for (uint32_t i = 0; i < hp.n_rot / 2; ++i) {
        const double th = pos * freq[i], c = std::cos(th) * hp.rope_attn_factor, s = std::sin(th) * hp.rope_attn_factor;
        // pairs (2i, 2i+1) of a head, or (i, i + n_rot/2) in NeoX's layout
        double& a = v[h * hp.head_dim + (hp.rope_neox ? i : 2 * i)];
        double& b = v[h * hp.head_dim + (hp.rope_neox ? i + hp.n_rot / 2 : 2 * i + 1)];
        const double a0 = a, b0 = b;
        a = a0 * c - b0 * s;
        b = a0 * s + b0 * c;
      }
  }
  std::vector<float> emb, out_norm, out;
  std::vector<Layer> layers;
  std::vector<std::vector<std::vector<double>>> kcache, vcache;
  uint32_t n_past = 0;
};

}  // namespace vkspec::test
