#pragma once
// RoPE + paged KV append + causal GQA attention against a CPU reference, for any Kernels (a family, a matmul
// path): K/V live in shuffled, non-contiguous blocks; the n query tokens of a case computed as one pass equal
// the same tokens decoded one by one, and equal them again when every other row of the pass names its
// sequence's table through a second copy of it (rows that look like two sequences' to the kernel).
#include <numeric>
#include <random>

#include "tests/kernel_test_env.h"

namespace vkspec::test {
namespace {

// (cos, sin) of `positions` positions x n_rot/2 frequencies (theta 10000), as LlamaModel's table is laid out.
inline std::vector<float> rope_table(uint32_t positions, uint32_t n_rot) {
  std::vector<float> rope(size_t(positions) * n_rot);
  for (uint32_t p = 0; p < positions; ++p)
    for (uint32_t i = 0; i < n_rot / 2; ++i) {
      const double th = p * std::pow(10000.0, -2.0 * i / n_rot);
      rope[(p * n_rot / 2 + i) * 2] = float(std::cos(th));
      rope[(p * n_rot / 2 + i) * 2 + 1] = float(std::sin(th));
    }
  return rope;
}

// `prior` tokens already cached, then n more in one pass.
struct AttentionCase { uint32_t n_heads, n_kv, head_dim, block, prior, n; };
inline const AttentionCase kAttentionCases[] = {
    {4, 4, 64, 16, 37, 5}, {4, 2, 8, 4, 3, 16}, {8, 2, 64, 16, 70, 9}, {8, 1, 32, 8, 0, 7}, {16, 2, 64, 16, 129, 3},
    {6, 2, 64, 16, 100, 6},
    // past Kernels::attention_split() keys (64 subgroup, 256 row-per-lane and the coopmat tiles): split attention
    // (flash decoding), passes whose first rows have one split fewer than their last (64 and 256 keys), and many
    // splits
    {4, 2, 64, 16, 60, 8}, {4, 2, 64, 16, 250, 10}, {8, 2, 128, 16, 600, 5},
    // head_dim 256 (Gemma's), with four query heads per kv head (Gemma 3 1B's), and one that is not whole f16
    // KV texels (8 dims): the device-address kernel on every device
    {4, 2, 256, 16, 20, 4}, {4, 1, 256, 16, 40, 6}, {4, 2, 12, 4, 30, 5}};

// The shader the families' attention takes for a case: the texel kernel serves up to 4 query heads per kv head
// and head_dim <= 256 (a multiple of 8: whole f16 KV texels) on CPU devices; the device-address one the rest.
inline const char* family_attention_shader(KernelFamily family, const AttentionCase& c) {
  const DeviceFacts& f = gpu().ctx.facts();
  return family == KernelFamily::RowPerLane && f.texel_reads() && f.subgroup_shuffle && c.n_heads / c.n_kv <= 4 &&
                 c.head_dim <= 256 && c.head_dim % 8 == 0
             ? "attention_rows"
             : "attention";
}

// tol: against the reference in double; q_f16: the kernel multiplies q rounded to f16 (the reference does too).
inline void check_paged_attention(VkTest& test, Kernels& k, const AttentionCase& c, const std::string& shader, double tol,
                                  bool q_f16) {
  SCOPED_TRACE("heads=" + std::to_string(c.n_heads) + " kv=" + std::to_string(c.n_kv) + " hd=" + std::to_string(c.head_dim) +
               " prior=" + std::to_string(c.prior) + " n=" + std::to_string(c.n));
  const uint32_t total = c.prior + c.n, hd = c.head_dim, qd = c.n_heads * hd, kvd = c.n_kv * hd;
  const uint32_t n_blocks = (total + c.block - 1) / c.block + 3;
  std::vector<uint32_t> table(n_blocks);
  std::iota(table.begin(), table.end(), 0u);
  std::shuffle(table.begin(), table.end(), std::mt19937(c.prior));
  auto q = random_floats(total * qd, 1), kk = random_floats(total * kvd, 2), v = random_floats(total * kvd, 3);
  const std::vector<float> rope = rope_table(total, hd);
  AttentionShape shape{c.n_heads, c.n_kv, hd, hd};
  enum class Pass { Batched, OneByOne, TwoTables };
  auto run_attention = [&](Pass mode) {
    // The tables buffer holds another sequence's table first, then this one's twice: the rows name theirs by
    // offset (TwoTables: every other row of the pass the second copy).
    std::vector<uint32_t> tables(n_blocks);
    std::iota(tables.rbegin(), tables.rend(), 0u);
    tables.insert(tables.end(), table.begin(), table.end());
    tables.insert(tables.end(), table.begin(), table.end());
    Slice qs = test.upload(q), ks = test.upload(kk), vs = test.upload(v), rs = test.upload(rope), tbl = test.upload(tables);
    PagedKvView kv{test.zeros<uint16_t>(n_blocks * c.block * kvd), test.zeros<uint16_t>(n_blocks * c.block * kvd), tbl, c.block};
    auto rows = [&](uint32_t pos0, uint32_t n, bool two_tables) {   // rows at pos0 .. pos0 + n - 1
      std::vector<uint32_t> r;
      for (uint32_t i = 0; i < n; ++i) r.insert(r.end(), {pos0 + i, (two_tables && i % 2 ? 2 : 1) * n_blocks, contract::KV_NO_TREE, 0u});
      return KvRows{test.upload(r), pos0 + n, !two_tables};
    };
    Slice out = test.zeros<float>(total * qd);
    EXPECT_EQ(k.attention_shader(shape, qs, kv), shader);
    auto at = [&](const Slice& s, uint32_t t, uint32_t width) { return s.sub(size_t(t) * width * 4, size_t(width) * 4 * (total - t)); };
    test.run([&](Recorder& r) {
      if (c.prior) {
        k.rope_store_kv(r, shape, qs, ks, vs, rs, kv, rows(0, c.prior, false), c.prior);
        r.barrier();
      }
      if (mode != Pass::OneByOne) {
        const KvRows rs_n = rows(c.prior, c.n, mode == Pass::TwoTables);
        k.rope_store_kv(r, shape, at(qs, c.prior, qd), at(ks, c.prior, kvd), at(vs, c.prior, kvd), rs, kv, rs_n, c.n);
        r.barrier();
        k.attention(r, shape, at(qs, c.prior, qd), at(out, c.prior, qd), kv, rs_n, c.n);
      } else {
        for (uint32_t t = c.prior; t < total; ++t) {
          const KvRows one = rows(t, 1, false);
          k.rope_store_kv(r, shape, at(qs, t, qd), at(ks, t, kvd), at(vs, t, kvd), rs, kv, one, 1);
          r.barrier();
          k.attention(r, shape, at(qs, t, qd), at(out, t, qd), kv, one, 1);
          r.barrier();
        }
      }
    });
    return test.download<float>(out, total * qd);
  };
  const auto batched = run_attention(Pass::Batched), single = run_attention(Pass::OneByOne),
             two_tables = run_attention(Pass::TwoTables);

  auto rotate = [&](std::vector<float>& buf, uint32_t width, uint32_t heads) {
    for (uint32_t p = 0; p < total; ++p)
      for (uint32_t h = 0; h < heads; ++h)
        for (uint32_t i = 0; i < hd / 2; ++i) {
          float* e = &buf[p * width + h * hd + 2 * i];
          float cs = rope[(p * hd / 2 + i) * 2], sn = rope[(p * hd / 2 + i) * 2 + 1];
          float a = e[0], b = e[1];
          e[0] = a * cs - b * sn;
          e[1] = a * sn + b * cs;
        }
  };
  auto qr = q, kr = kk, vr = v;
  rotate(qr, qd, c.n_heads);
  rotate(kr, kvd, c.n_kv);
  for (auto* kv_rows : {&kr, &vr})   // the cache holds f16
    for (float& e : *kv_rows) e = half_to_float(float_to_half(e));
  if (q_f16)
    for (float& e : qr) e = half_to_float(float_to_half(e));
  for (uint32_t t = c.prior; t < total; ++t)
    for (uint32_t h = 0; h < c.n_heads; ++h) {
      uint32_t g = h / (c.n_heads / c.n_kv);
      std::vector<double> s(t + 1);
      double m = -1e300, z = 0;
      for (uint32_t j = 0; j <= t; ++j) {
        double d = 0;
        for (uint32_t e = 0; e < hd; ++e) d += double(qr[t * qd + h * hd + e]) * kr[j * kvd + g * hd + e];
        s[j] = d / std::sqrt(double(hd));
        m = std::max(m, s[j]);
      }
      for (auto& x : s) z += (x = std::exp(x - m));
      for (uint32_t e = 0; e < hd; ++e) {
        double o = 0;
        for (uint32_t j = 0; j <= t; ++j) o += s[j] / z * vr[j * kvd + g * hd + e];
        size_t i = t * qd + h * hd + e;
        ASSERT_NEAR(batched[i], o, tol) << "t=" << t << " h=" << h << " e=" << e;
        ASSERT_EQ(batched[i], single[i]) << "batch invariance t=" << t << " h=" << h << " e=" << e;
        ASSERT_EQ(two_tables[i], single[i]) << "two tables, t=" << t << " h=" << h << " e=" << e;
      }
    }
}

}  // namespace
}  // namespace vkspec::test
