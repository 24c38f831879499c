// The matmul paths beside the families' float multiply-adds (runtime/kernels.h choose_kernels), on both kernel
// families: int8 dot products (MatmulPath::Int8Dot: quantize_x8.comp's DOT8 build, matmul_dot8.comp) against
// the CPU reference with x rounded per 32 values as the quantizer does, its extreme products exact; the
// cooperative-matrix kernel in its emulated build (MatmulPath::CoopmatEmulated, matmul_coop.comp: the matrix
// units' tiling, dequantization and epilogue) against the reference over f16-rounded weights and x; both
// bit-for-bit batch invariant (one token, tiles, SwiGLU, RMSNorm); and the one place that decides the path
// refusing what a device cannot run.
#include "tests/attention_check.h"
#include "tests/kernel_test_env.h"

namespace vkspec::test {
namespace {

class Int8DotTest : public KernelTest {
 protected:
  Kernels dot8() { return Kernels(gpu().ctx, gpu().pipelines, GetParam(), {}, MatmulPath::Int8Dot); }
  void SetUp() override {
    KernelTest::SetUp();
    if (!gpu().ctx.facts().integer_dot_product) GTEST_SKIP() << "the device has no integer dot products";
  }
};

TEST_P(Int8DotTest, QuantizedWeightsTakeThePathFloatsKeepTheirs) {
  Kernels k = dot8();
  EXPECT_EQ(k.matmul_path(), MatmulPath::Int8Dot);
  for (const auto& [type, shader] : {std::pair{DType::Q4_K, "matmul_dot8_q4"}, std::pair{DType::Q6_K, "matmul_dot8_q6"},
                                     std::pair{DType::Q8_0, "matmul_dot8_q8"}}) {
    const auto blocks = random_blocks(type, 64 * 256, 1);
    DeviceMatrix m = upload_matrix(*arena_, gpu().uploader, type, 64, 256, blocks.data(), "w");
    gpu().uploader.flush();
    Slice x = zeros<float>(256);
    EXPECT_STREQ(k.matmul_shader(m, x), shader);
    EXPECT_STREQ(k.matmul_shader(m, x, 0, 9), shader);   // one kernel for every width of pass
  }
  std::vector<float> w(64 * 64, 0.5f);
  DeviceMatrix f32 = upload_matrix(*arena_, gpu().uploader, DType::F32, 64, 64, w.data(), "w");
  gpu().uploader.flush();
  EXPECT_STREQ(k.matmul_shader(f32, zeros<float>(64)), kernels().matmul_shader(f32, zeros<float>(64)));
}

// Every quantized type (q4 with and without mins, groups of 32 and 16, q6, q8), odd row counts, one token,
// a partial tile and whole tiles, plain and accumulating.
TEST_P(Int8DotTest, MatmulMatchesReference) {
  Kernels k = dot8();
  for (DType type : kQuantTypes) {
    const uint32_t b = block_layout(type).elems;
    for (uint32_t M : {1u, 7u, 257u})
      for (uint32_t K : {b, 3 * b})
        for (uint32_t n : {1u, 5u, 16u}) check_matmul(this, k, type, {M, K, n}, M == 7);
  }
  check_matmul(this, k, DType::Q4_0, {33, 32 * 70, 3}, false);   // blocks past the workgroup's 64 lanes
  // more rows than a dispatch has workgroups per dimension (65535; a 128k-word vocabulary's output), one token
  check_matmul(this, k, DType::Q8_0, {70001, 32, 1}, false);
}

// As test_kernels' Int8ActivationsHoldTheLargestProducts: the extreme quants against activations of +-127
// must come out exact (y = K * w * x).
TEST_P(Int8DotTest, TheLargestProductsAreExact) { expect_largest_products_exact(*this, dot8()); }

// A token's bits do not depend on the pass: each of n tokens of x ([n][K]) alone, in a batch of n, in
// reversed order and in batches of each `partial` size (partial tiles); plain, through RMSNorm, and for the
// fused SwiGLU, with M rows of `type`.
void expect_batch_invariant(VkTest& test, Kernels& k, DType type, uint32_t M, uint32_t K, uint32_t n,
                            std::initializer_list<uint32_t> partial) {
  SCOPED_TRACE(std::string(dtype_name(type)) + " K=" + std::to_string(K));
  auto x = random_floats(n * K, 5, -2.f, 2.f), g = random_floats(K, 7, 0.5f, 1.5f);
  const TestMatrix w = test_matrix(type, M, K, K), w2 = test_matrix(type, M, K, K + 1);
  DeviceMatrix m = upload_matrix(*test.arena_, gpu().uploader, type, M, K, w.bytes.data(), "w");
  DeviceMatrix m2 = upload_matrix(*test.arena_, gpu().uploader, type, M, K, w2.bytes.data(), "w2");
  gpu().uploader.flush();
  std::vector<float> xr(x.size());
  for (uint32_t t = 0; t < n; ++t) std::copy_n(&x[t * K], K, &xr[(n - 1 - t) * K]);
  Slice xs = test.upload(x), xrs = test.upload(xr), gs = test.upload(g);
  for (int form = 0; form < 3; ++form) {   // plain, RMSNorm, SwiGLU
    SCOPED_TRACE(form == 0 ? "plain" : form == 1 ? "rmsnorm" : "swiglu");
    auto pass = [&](Recorder& r, const Slice& in, const Slice& y, uint32_t count) {
      const MatmulInput mi = form == 1 ? MatmulInput(in, gs, 1e-5f) : MatmulInput(in);
      if (form == 2) k.matmul_swiglu(r, m, m2, mi, y, count);
      else k.matmul(r, m, mi, y, count, false);
    };
    Slice batch = test.zeros<float>(n * M), reversed = test.zeros<float>(n * M), single = test.zeros<float>(n * M);
    std::vector<Slice> parts;
    for (size_t i = 0; i < partial.size(); ++i) parts.push_back(test.zeros<float>(n * M));
    test.run([&](Recorder& r) {
      pass(r, xs, batch, n);
      pass(r, xrs, reversed, n);
      for (size_t i = 0; i < partial.size(); ++i) pass(r, xs, parts[i], partial.begin()[i]);
      for (uint32_t t = 0; t < n; ++t) pass(r, xs.sub(t * K * 4, K * 4), single.sub(t * M * 4, M * 4), 1);
    });
    auto b = test.download<float>(batch, n * M), s = test.download<float>(single, n * M), rv = test.download<float>(reversed, n * M);
    for (uint32_t t = 0; t < n; ++t)
      for (uint32_t r = 0; r < M; ++r) {
        ASSERT_TRUE(std::isfinite(s[t * M + r]));
        ASSERT_EQ(b[t * M + r], s[t * M + r]) << "t=" << t << " r=" << r;
        ASSERT_EQ(rv[(n - 1 - t) * M + r], s[t * M + r]) << "reversed, t=" << t << " r=" << r;
      }
    for (size_t i = 0; i < partial.size(); ++i) {
      const uint32_t count = partial.begin()[i];
      auto p = test.download<float>(parts[i], n * M);
      for (uint32_t t = 0; t < count; ++t)
        for (uint32_t r = 0; r < M; ++r) ASSERT_EQ(p[t * M + r], s[t * M + r]) << count << " tokens, t=" << t << " r=" << r;
    }
  }
}

TEST_P(Int8DotTest, BatchInvariantBitForBit) {
  Kernels k = dot8();
  for (DType type : {DType::Q4_K, DType::Q2_K, DType::Q6_K, DType::Q8_0, DType::Q5_0})
    for (uint32_t K : {256u, 512u}) expect_batch_invariant(*this, k, type, 97, K, 16, {11, 9});
}

INSTANTIATE_TEST_SUITE_P(Families, Int8DotTest, ::testing::Values(KernelFamily::RowPerLane, KernelFamily::Subgroup),
                         [](const auto& info) { return info.param == KernelFamily::RowPerLane ? "RowPerLane" : "Subgroup"; });

// The emulated build everywhere; the matrix units' KHR and NV builds where the device has each (a GPU
// session's check).
enum class CoopBuild { Emulated, Khr, Nv };
class CoopTest : public VkTest, public ::testing::WithParamInterface<std::tuple<KernelFamily, CoopBuild>> {
 protected:
  CoopBuild build() const { return std::get<1>(GetParam()); }
  Kernels coop() {
    KernelVariants v;
    v.coopmat_khr = build() == CoopBuild::Khr;
    return Kernels(gpu().ctx, gpu().pipelines, std::get<0>(GetParam()), v,
                   build() == CoopBuild::Emulated ? MatmulPath::CoopmatEmulated : MatmulPath::Coopmat);
  }
  void SetUp() override {
    VkTest::SetUp();
    const bool khr = build() == CoopBuild::Khr;
    const KernelChoice c = choose_kernels(gpu().ctx.facts(), KernelFamily::Auto, MatmulPath::Coopmat, khr);
    if (build() != CoopBuild::Emulated && (!c.refused.empty() || c.coopmat_khr != khr))
      GTEST_SKIP() << "the device has no matrix units this build runs on";
  }
};

float f16(float v) { return half_to_float(float_to_half(v)); }

// y [n][M] against sum_k f16(w) f16(xn) in double, xn = x or rmsnorm(x) * g (then scaled by the norm's
// 1/rms after the sum, as the kernel does), plus y0 when given; SwiGLU with w2.
void expect_f16_product(const std::vector<float>& y, const std::vector<float>& w, const std::vector<float>* w2,
                        const std::vector<float>& x, const std::vector<float>* g, MatmulCase c, const std::vector<float>* y0) {
  for (uint32_t t = 0; t < c.n; ++t) {
    double ss = 0;
    for (uint32_t i = 0; i < c.K; ++i) ss += double(x[t * c.K + i]) * x[t * c.K + i];
    const double scale = g ? 1.0 / std::sqrt(ss / c.K + 1e-5) : 1.0;
    for (uint32_t r = 0; r < c.M; ++r) {
      double a = 0, b = 0, abs_sum = 0;
      for (uint32_t i = 0; i < c.K; ++i) {
        const double xi = f16(g ? x[t * c.K + i] * (*g)[i] : x[t * c.K + i]);
        a += double(f16(w[size_t(r) * c.K + i])) * xi;
        if (w2) b += double(f16((*w2)[size_t(r) * c.K + i])) * xi;
        abs_sum += std::fabs(double(w[size_t(r) * c.K + i]) * xi) + (w2 ? std::fabs(double((*w2)[size_t(r) * c.K + i]) * xi) : 0.0);
      }
      a *= scale;
      b *= scale;
      double ref = w2 ? a / (1 + std::exp(-a)) * b : a;
      if (y0) ref += (*y0)[t * c.M + r];
      const double tol = 2e-5 * abs_sum * scale * (w2 ? 1 + std::fabs(a) + std::fabs(b) : 1) + 1e-6 * std::fabs(ref) + 1e-30;
      ASSERT_NEAR(y[t * c.M + r], ref, tol) << "t=" << t << " row=" << r;
    }
  }
}

// f16 and every quantized type, rows that fill no tile or more than one, one token, a partial tile of 16 and
// of 32 tokens and two tiles; plain, accumulating, through RMSNorm and as the fused SwiGLU.
TEST_P(CoopTest, MatmulMatchesReference) {
  Kernels k = coop();
  std::vector<DType> types = {DType::F16};
  types.insert(types.end(), std::begin(kQuantTypes), std::end(kQuantTypes));
  for (DType type : types) {
    const uint32_t K = std::max(64u, block_layout(type).elems);
    for (const MatmulCase c : {MatmulCase{7, K, 1}, MatmulCase{130, K, 17}, MatmulCase{64, 2 * K, 40}}) {
      SCOPED_TRACE(std::string(dtype_name(type)) + " M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) + " n=" + std::to_string(c.n));
      const TestMatrix w = test_matrix(type, c.M, c.K, c.M + c.K), w2 = test_matrix(type, c.M, c.K, c.M + c.K + 1);
      DeviceMatrix m = upload_matrix(*arena_, gpu().uploader, type, c.M, c.K, w.bytes.data(), "w");
      DeviceMatrix m2 = upload_matrix(*arena_, gpu().uploader, type, c.M, c.K, w2.bytes.data(), "w2");
      gpu().uploader.flush();
      EXPECT_EQ(std::string(k.matmul_shader(m, zeros<float>(c.K), 0, c.n)).rfind("matmul_coop_", 0), 0u);
      auto x = random_floats(size_t(c.n) * c.K, c.K + 3), g = random_floats(c.K, 4, 0.5f, 1.5f);
      auto y0 = random_floats(size_t(c.n) * c.M, 9);
      Slice xs = upload(x), gs = upload(g), plain = zeros<float>(c.n * c.M), acc = upload(y0), normed = zeros<float>(c.n * c.M),
            glu = zeros<float>(c.n * c.M);
      run([&](Recorder& r) {
        k.matmul(r, m, xs, plain, c.n, false);
        k.matmul(r, m, xs, acc, c.n, true);
        k.matmul(r, m, MatmulInput(xs, gs, 1e-5f), normed, c.n, false);
        k.matmul_swiglu(r, m, m2, xs, glu, c.n);
      });
      expect_f16_product(download<float>(plain, c.n * c.M), w.values, nullptr, x, nullptr, c, nullptr);
      expect_f16_product(download<float>(acc, c.n * c.M), w.values, nullptr, x, nullptr, c, &y0);
      expect_f16_product(download<float>(normed, c.n * c.M), w.values, nullptr, x, &g, c, nullptr);
      expect_f16_product(download<float>(glu, c.n * c.M), w.values, &w2.values, x, nullptr, c, nullptr);
    }
  }
}

// Tiles of 16 and of 32 tokens included.
TEST_P(CoopTest, BatchInvariantBitForBit) {
  Kernels k = coop();
  for (DType type : {DType::F16, DType::Q4_K, DType::Q6_K, DType::Q8_0}) expect_batch_invariant(*this, k, type, 97, 256, 40, {11, 17});
}

INSTANTIATE_TEST_SUITE_P(Families, CoopTest,
                         ::testing::Combine(::testing::Values(KernelFamily::RowPerLane, KernelFamily::Subgroup),
                                            ::testing::Values(CoopBuild::Emulated, CoopBuild::Khr, CoopBuild::Nv)),
                         [](const auto& info) {
                           const CoopBuild b = std::get<1>(info.param);
                           return std::string(std::get<0>(info.param) == KernelFamily::RowPerLane ? "RowPerLane" : "Subgroup") +
                                  (b == CoopBuild::Khr ? "MatrixUnitsKhr" : b == CoopBuild::Nv ? "MatrixUnitsNv" : "Emulated");
                         });

// Attention on the coopmat paths: flash-attention tiles (attention_coop.comp) against the reference with q
// rounded to f16 as the tiles hold it (and p: 1e-3), one token by one equal to every tile bit for bit, rows of
// two tables in one tile, splits of COOP_ATTN_SPLIT keys; shapes the tile does not take (head_dim 8, 12, 256)
// keep the family's kernel.
TEST_P(CoopTest, AttentionMatchesReferenceAndIsBatchInvariant) {
  Kernels k = coop();
  for (const AttentionCase& c : kAttentionCases) {
    const bool tile = c.head_dim % contract::COOP_TILE == 0 && c.head_dim <= contract::COOP_ATTN_MAX_HEAD_DIM;
    const std::string shader = !tile                         ? family_attention_shader(std::get<0>(GetParam()), c)
                               : build() == CoopBuild::Khr ? "attention_coop_khr"
                               : build() == CoopBuild::Nv  ? "attention_coop_nv"
                                                           : "attention_coop";
    check_paged_attention(*this, k, c, shader, tile ? 1e-3 : 2e-5, tile);
  }
}

// The one place that decides: the device's facts against what is asked for.
TEST(KernelChoice, RefusesWhatTheDeviceCannotRun) {
  DeviceFacts gpu;
  gpu.type = VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
  gpu.subgroup_shuffle = true;
  KernelChoice c = choose_kernels(gpu, KernelFamily::Auto, MatmulPath::Auto);
  EXPECT_EQ(c.family, KernelFamily::Subgroup);
  EXPECT_EQ(c.matmul, MatmulPath::Fma);
  EXPECT_EQ(c.refused, "");
  c = choose_kernels(gpu, KernelFamily::Auto, MatmulPath::Int8Dot);
  EXPECT_NE(c.refused.find("shaderIntegerDotProduct"), std::string::npos) << c.refused;
  gpu.integer_dot_product = true;
  c = choose_kernels(gpu, KernelFamily::Auto, MatmulPath::Int8Dot);
  EXPECT_EQ(c.refused, "");
  EXPECT_EQ(c.matmul, MatmulPath::Int8Dot);
  gpu.subgroup_size = 32;
  c = choose_kernels(gpu, KernelFamily::Auto, MatmulPath::Coopmat);
  EXPECT_NE(c.refused.find("VK_KHR_cooperative_matrix"), std::string::npos) << c.refused;
  gpu.cooperative_matrix = true;   // offered, but without the 16x16x16 f16 shape (or its features)
  EXPECT_NE(choose_kernels(gpu, KernelFamily::Auto, MatmulPath::Coopmat).refused, "");
  gpu.cooperative_matrix_nv = true;   // NV only
  c = choose_kernels(gpu, KernelFamily::Auto, MatmulPath::Coopmat);
  EXPECT_EQ(c.refused, "");
  EXPECT_FALSE(c.coopmat_khr);
  gpu.cooperative_matrix_khr = true;   // both: the KHR build (the NV build where a test asks for it)
  c = choose_kernels(gpu, KernelFamily::Auto, MatmulPath::Coopmat);
  EXPECT_EQ(c.refused, "");
  EXPECT_TRUE(c.coopmat_khr);
  EXPECT_FALSE(choose_kernels(gpu, KernelFamily::Auto, MatmulPath::Coopmat, false).coopmat_khr);
  gpu.cooperative_matrix_nv = false;   // KHR only (AMD, Intel)
  c = choose_kernels(gpu, KernelFamily::Auto, MatmulPath::Coopmat);
  EXPECT_EQ(c.refused, "");
  EXPECT_TRUE(c.coopmat_khr);
  EXPECT_TRUE(choose_kernels(gpu, KernelFamily::Auto, MatmulPath::Coopmat, false).coopmat_khr);   // the only build
  EXPECT_FALSE(choose_kernels(gpu, KernelFamily::Auto, MatmulPath::CoopmatEmulated).coopmat_khr);
  gpu.subgroup_size = 64;   // 4 subgroups of 32 own the tile's rows
  EXPECT_NE(choose_kernels(gpu, KernelFamily::Auto, MatmulPath::Coopmat).refused, "");
  gpu.subgroup_size_control = gpu.compute_required_subgroup_size = true;   // AMD: 32 or 64, 32 required
  gpu.min_subgroup_size = 32;
  gpu.max_subgroup_size = 64;
  EXPECT_EQ(choose_kernels(gpu, KernelFamily::Auto, MatmulPath::Coopmat).refused, "");
  gpu.compute_required_subgroup_size = false;
  EXPECT_NE(choose_kernels(gpu, KernelFamily::Auto, MatmulPath::Coopmat).refused, "");
  gpu.compute_required_subgroup_size = true;
  gpu.min_subgroup_size = 64;
  EXPECT_NE(choose_kernels(gpu, KernelFamily::Auto, MatmulPath::Coopmat).refused, "");
  gpu.max_shared_memory = 16384;
  EXPECT_NE(choose_kernels(gpu, KernelFamily::Auto, MatmulPath::CoopmatEmulated).refused, "");
  gpu.max_shared_memory = 32768;
  EXPECT_EQ(choose_kernels(gpu, KernelFamily::Auto, MatmulPath::CoopmatEmulated).refused, "");
  DeviceFacts cpu = gpu;
  cpu.type = VK_PHYSICAL_DEVICE_TYPE_CPU;
  EXPECT_EQ(choose_kernels(cpu, KernelFamily::Auto, MatmulPath::Auto).family, KernelFamily::RowPerLane);
  cpu.subgroup_shuffle = false;
  EXPECT_NE(choose_kernels(cpu, KernelFamily::Subgroup, MatmulPath::Auto).refused, "");
}

// VKSPEC_MATMUL reaches the kernels, and a path the device cannot run is an error there, not a fallback.
TEST(KernelChoice, EnvironmentForcesThePath) {
  Gpu& g = gpu();
  if (!g.ctx.facts().cooperative_matrix_nv && !g.ctx.facts().cooperative_matrix_khr) {
    platform::set_env("VKSPEC_MATMUL", "coopmat");
    EXPECT_THROW(Kernels(g.ctx, g.pipelines), Error);
  }
  platform::set_env("VKSPEC_MATMUL", "tensor");
  EXPECT_THROW(read_settings(), Error);
  if (g.ctx.facts().integer_dot_product) {
    platform::set_env("VKSPEC_MATMUL", "int8dot");
    EXPECT_EQ(Kernels(g.ctx, g.pipelines).matmul_path(), MatmulPath::Int8Dot);
  }
  platform::set_env("VKSPEC_MATMUL", "coopmat-emulated");
  EXPECT_EQ(Kernels(g.ctx, g.pipelines).matmul_path(), MatmulPath::CoopmatEmulated);
  platform::unset_env("VKSPEC_MATMUL");
  EXPECT_EQ(Kernels(g.ctx, g.pipelines).matmul_path(), MatmulPath::Fma);
}

}  // namespace
}  // namespace vkspec::test
