// The matmul kernels against a plain CPU reference, on odd sizes and every weight type, for both kernel
// families, plus bit-for-bit batch invariance (a token computed alone == the same token as one row of an
// n-token batch) and the quant decoders against GGML's. The other kernels of a pass: test_kernels_pass.cpp.
#include "tests/kernel_test_env.h"

namespace vkspec::test {
namespace {

TEST_P(KernelTest, MatmulMatchesReferenceAllTypesOddSizes) {
  // K = 72: 18 f32 / 9 f16 texels, an odd count
  for (DType type : kFloatTypes)
    for (uint32_t M : {1u, 7u, 64u, 257u})
      for (uint32_t K : {1u, 7u, 64u, 72u, 257u, 4099u})
        for (uint32_t n : {1u, 3u, 16u}) check_matmul(this, kernels(), type, {M, K, n}, false);
  for (DType type : kQuantTypes) {
    const uint32_t b = block_layout(type).elems;   // rows are whole blocks: 1, 3 and 18 of them
    for (uint32_t M : {1u, 7u, 257u})
      for (uint32_t K : {b, 3 * b, 18 * b})   // 18 blocks: whole 64-weight steps of the row kernel
        for (uint32_t n : {1u, 5u, 16u}) {
          check_matmul(this, kernels(), type, {M, K, n}, false);
          if (GetParam() == KernelFamily::RowPerLane)   // the float-x path of the row kernel as well
            check_matmul(this, kernels_float_x(), type, {M, K, n}, false);
        }
  }
  // The sizes above take 1 or 2 rows per lane on CPU devices; these 4 and 8 (matmul_rows' 8-row builds,
  // at one token and in a tile)
  if (GetParam() != KernelFamily::RowPerLane) return;
  const std::vector<DType> types = all_types();
  for (DType type : types)
    for (uint32_t M : {600u, 1100u})
      for (uint32_t n : {1u, 5u}) check_matmul(this, kernels(), type, {M, 3 * block_layout(type).elems * 8, n}, false);
}

// The int8-activation kernels (matmul_rows.comp X8: q4 and q6 pack two products in one 32-bit integer) at
// their largest products (kernel_test_env.h expect_largest_products_exact).
TEST_P(KernelTest, Int8ActivationsHoldTheLargestProducts) { expect_largest_products_exact(*this, kernels()); }

// Weight i of a matrix packed for the device, read back on the host as the kernels read it: s * q + m.
float packed_value(const HostMatrix& h, size_t i) {
  const WeightFormat& f = h.format;
  int q;
  if (f.storage == WT_Q4) {
    q = (h.data[i / 2] >> (4 * (i & 1))) & 15;
  } else if (f.storage == WT_Q8) {
    q = int8_t(h.data[i]);
  } else {   // WT_Q6: per 32 weights 16 bytes of nibbles, then 8 of high bits (shaders/weights.glsl)
    const uint8_t* unit = &h.data[i / 32 * 24];
    const size_t e = i % 32, g = e % 16;
    uint32_t high;
    memcpy(&high, unit + 16 + 4 * (e / 16), 4);
    const int lo = (unit[e / 2] >> (4 * (e & 1))) & 15;
    q = (lo | int((high >> (2 * (g % 4) + 16 * ((g / 4) % 2) + 8 * (g / 8))) & 3) << 4) - 32;
  }
  const size_t g = i / f.group;
  return f.has_min ? h.scales[2 * g] * float(q) + h.scales[2 * g + 1] : h.scales[g] * float(q);
}

// The repacked device format decodes to llama.cpp's values bit for bit: runtime dequantize (s*q + m from
// the canonical planes) against the tests' transcription of ggml's loops, on random blocks of every type.
TEST(Quant, RuntimeDecoderMatchesGgmlDequantizationBitForBit) {
  for (DType type : kQuantTypes) {
    const size_t n = 64 * 256;
    auto blocks = random_blocks(type, n, 7 + uint32_t(type));
    auto ours = dequantize(type, n, blocks.data()), ref = ref_dequantize(type, blocks.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(ours[i], ref[i]) << dtype_name(type) << " element " << i;
    // and the packed device planes hold the same values (read back on the host)
    HostMatrix h = decode_matrix(type, 64, 256, blocks.data(), "w");
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(packed_value(h, i), ref[i]) << dtype_name(type) << " packed element " << i;
  }
  // large tensors are repacked by several threads, each taking its own blocks (9009 blocks: an odd split)
  for (DType type : {DType::Q4_0, DType::Q6_K}) {
    const uint32_t cols = block_layout(type).elems * 9, rows = 1001;
    auto blocks = random_blocks(type, size_t(rows) * cols, 5);
    auto ref = ref_dequantize(type, blocks.data(), size_t(rows) * cols);
    HostMatrix h = decode_matrix(type, rows, cols, blocks.data(), "w");
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(packed_value(h, i), ref[i]) << dtype_name(type) << " packed element " << i;
  }
}

// Widening to a common format (fused QKV / gate-up of mixed types) keeps every value.
TEST(Quant, CommonFormatHoldsBothTypesExactly) {
  for (DType a : kQuantTypes)
    for (DType b : kQuantTypes) {
      const WeightFormat f = common_format(native_format(a), native_format(b));
      for (DType t : {a, b}) {
        auto blocks = random_blocks(t, 2 * 256, 3);
        HostMatrix h = decode_matrix(t, 2, 256, blocks.data(), "w", &f);
        auto ref = ref_dequantize(t, blocks.data(), 512);
        for (size_t i = 0; i < 512; ++i)
          ASSERT_EQ(packed_value(h, i), ref[i]) << dtype_name(t) << " in the format shared with " << dtype_name(a == t ? b : a);
      }
    }
}

TEST(Quant, PartialBlocksAreRefusedWithTheTensorName) {
  auto blocks = random_blocks(DType::Q4_K, 256, 1);
  try {
    decode_matrix(DType::Q4_K, 2, 128, blocks.data(), "blk.0.ffn_up.weight");
    FAIL() << "a q4_K row of 128 weights was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.ffn_up.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("256"), std::string::npos) << e.what();
  }
}

// A block whose scale is NaN (a damaged file) is refused naming the tensor and the cause, in both of the
// loader's paths (repacked into mapped device memory, or decoded on the host first).
TEST(Quant, NonFiniteScalesAreRefusedWithTheTensorName) {
  for (const DType type : {DType::Q8_0, DType::Q4_K}) {
    auto blocks = random_blocks(type, 2 * block_layout(type).elems, 1);
    blocks[0] = 0x00, blocks[1] = 0x7E;   // the first block's f16 d: a NaN
    try {
      decode_matrix(type, 1, 2 * block_layout(type).elems, blocks.data(), "blk.3.attn_v.weight");
      FAIL() << "a NaN scale was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("blk.3.attn_v.weight"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("not a finite number"), std::string::npos) << e.what();
    }
  }
}

// Both matmul paths must be exercised by the cases above: on a device with push descriptors the row-per-lane
// family reads whole-texel rows through texel buffers and falls back to device addresses otherwise.
TEST_P(KernelTest, MatmulPathsAreBothCovered) {
  Kernels k = kernels();
  std::vector<float> w(64 * 64, 0.5f);
  DeviceMatrix aligned = upload_matrix(*arena_, gpu().uploader, DType::F32, 64, 64, w.data(), "w");
  DeviceMatrix odd = upload_matrix(*arena_, gpu().uploader, DType::F32, 64, 63, w.data(), "w");
  Slice x = zeros<float>(64);
  const bool texels = GetParam() == KernelFamily::RowPerLane && gpu().ctx.facts().texel_reads();
  EXPECT_STREQ(k.matmul_shader(aligned, x), texels ? "matmul_rows_f32" : "matmul_f32");
  EXPECT_STREQ(k.matmul_shader(odd, x), "matmul_f32");
  // several tokens: the subgroup family's tiles of rows x tokens where rows are whole vec4s
  const bool tiles = GetParam() == KernelFamily::Subgroup;
  EXPECT_STREQ(k.matmul_shader(aligned, x, 0, 8), tiles ? "matmul_tile_f32" : texels ? "matmul_rows_f32" : "matmul_f32");
  EXPECT_STREQ(k.matmul_shader(odd, x, 0, 8), "matmul_f32");
  const Kernels untiled(gpu().ctx, gpu().pipelines, GetParam(), {.matmul_tile = false});   // one row per workgroup
  EXPECT_STREQ(untiled.matmul_shader(aligned, x, 0, 8), texels ? "matmul_rows_f32" : "matmul_f32");
  if (gpu().ctx.facts().type == VK_PHYSICAL_DEVICE_TYPE_CPU && GetParam() == KernelFamily::RowPerLane) {
    EXPECT_TRUE(texels) << "lavapipe has push descriptors: the texel path should be on";
  }
  // q4 weights on the texel path take int8 activations where the device has subgroup arithmetic (the
  // quantizing pass reduces x^2 with subgroupAdd), unless KernelVariants::int8_x is off
  const auto blocks = random_blocks(DType::Q4_K, 64 * 256, 1);
  DeviceMatrix q4 = upload_matrix(*arena_, gpu().uploader, DType::Q4_K, 64, 256, blocks.data(), "q4");
  gpu().uploader.flush();
  const bool x8 = texels && gpu().ctx.facts().subgroup_arithmetic;
  EXPECT_STREQ(k.matmul_shader(q4, x), x8 ? "matmul_rows_q4_x8" : texels ? "matmul_rows_q4" : "matmul_q4");
  EXPECT_STREQ(kernels_float_x().matmul_shader(q4, x), texels ? "matmul_rows_q4" : "matmul_q4");
  const auto blocks8 = random_blocks(DType::Q6_K, 64 * 256, 2);
  DeviceMatrix q8 = upload_matrix(*arena_, gpu().uploader, DType::Q6_K, 64, 256, blocks8.data(), "q8");
  gpu().uploader.flush();
  EXPECT_STREQ(k.matmul_shader(q8, x), x8 ? "matmul_rows_q6_x8" : texels ? "matmul_rows_q6" : "matmul_q6");
  const auto blocks80 = random_blocks(DType::Q8_0, 64 * 256, 3);
  DeviceMatrix q80 = upload_matrix(*arena_, gpu().uploader, DType::Q8_0, 64, 256, blocks80.data(), "q8_0");
  gpu().uploader.flush();
  EXPECT_STREQ(k.matmul_shader(q80, x), x8 ? "matmul_rows_q8_x8" : texels ? "matmul_rows_q8" : "matmul_q8");
}

// More rows than a dispatch dimension holds workgroups on some devices (65535; lavapipe, Intel): a 128k-word
// vocabulary's output matrix, one token (a workgroup per row in the subgroup family) and a few.
TEST_P(KernelTest, MatmulOfMoreRowsThanADispatchDimension) {
  for (DType type : {DType::F16, DType::Q8_0})
    for (uint32_t n : {1u, 3u}) check_matmul(this, kernels(), type, {70001, 32, n}, false);
}

TEST_P(KernelTest, MatmulAccumulatesIntoResidual) {
  for (DType type : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_K})
    check_matmul(this, kernels(), type, {65, type == DType::Q4_K ? 256u : 96u, 4}, true);
}

// A matrix stacked from parts of different types at row offsets (fused QKV of Q4_K_M: q4_K q/k, q6_K v),
// each part decoded by write_rows straight into its rows (mapped memory) or through staging (discrete).
TEST_P(KernelTest, StackedPartsOfDifferentTypesMatchTheirOwnValues) {
  struct Part { DType type; uint32_t rows; };
  const Part parts[] = {{DType::Q4_K, 67}, {DType::Q6_K, 33}, {DType::Q4_K, 29}};
  const uint32_t K = 512, n = 3, M = 67 + 33 + 29;
  WeightFormat f = native_format(parts[0].type);
  for (const Part& p : parts) f = f == native_format(p.type) ? f : common_format(f, native_format(p.type));
  DeviceMatrix m = alloc_matrix(*arena_, parts[0].type, f, M, K, "qkv");
  std::vector<float> values;
  uint32_t row0 = 0;
  for (const Part& p : parts) {
    const TestMatrix t = test_matrix(p.type, p.rows, K, row0 + 5);
    write_rows(gpu().uploader, m, row0, p.type, p.rows, t.bytes.data(), dtype_name(p.type));
    values.insert(values.end(), t.values.begin(), t.values.end());
    row0 += p.rows;
  }
  gpu().uploader.flush();
  EXPECT_THROW(write_rows(gpu().uploader, m, M - 1, DType::Q4_K, 2, values.data(), "past the end"), Error);
  auto x = random_floats(n * K, 11);
  Slice xs = upload(x), ys = zeros<float>(n * M);
  Kernels k = kernels();
  run([&](Recorder& r) { k.matmul(r, m, xs, ys, n, false); });
  expect_product(download<float>(ys, n * M), values, x_as_multiplied(k, m, xs, x), DType::Q4_K, {M, K, n});
}

TEST_P(KernelTest, MatmulSwigluMatchesReference) {
  struct Case { DType gate, up; uint32_t K; };
  // stories260K's FFN shape in f32; Q4_K_M's q4_K gate with a q6_K up, read in their common format
  for (Case c : {Case{DType::F32, DType::F32, 64}, Case{DType::Q8_0, DType::Q8_0, 64}, Case{DType::Q4_K, DType::Q6_K, 256}}) {
    const uint32_t M = 300, K = c.K, n = 9;   // 8 rows per lane in the texel kernel, a partial workgroup
    const TestMatrix g = test_matrix(c.gate, M, K, 1), u = test_matrix(c.up, M, K, 2);
    auto x = random_floats(n * K, 3);
    DeviceMatrix gm, um;
    if (c.gate == c.up) {
      gm = upload_matrix(*arena_, gpu().uploader, c.gate, M, K, g.bytes.data(), "gate");
      um = upload_matrix(*arena_, gpu().uploader, c.up, M, K, u.bytes.data(), "up");
    } else {
      const WeightFormat f = common_format(native_format(c.gate), native_format(c.up));
      gm = upload_matrix(*arena_, gpu().uploader, decode_matrix(c.gate, M, K, g.bytes.data(), "gate", &f), "gate");
      um = upload_matrix(*arena_, gpu().uploader, decode_matrix(c.up, M, K, u.bytes.data(), "up", &f), "up");
    }
    gpu().uploader.flush();
    Slice xs = upload(x), ys = zeros<float>(n * M), singles = zeros<float>(n * M);
    Kernels k = kernels();
    run([&](Recorder& r) {
      k.matmul_swiglu(r, gm, um, xs, ys, n);
      for (uint32_t t = 0; t < n; ++t)
        k.matmul_swiglu(r, gm, um, xs.sub(t * K * 4, K * 4), singles.sub(t * M * 4, M * 4), 1);
    });
    auto y = download<float>(ys, n * M), y1 = download<float>(singles, n * M);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], y1[i]) << "batch invariance at " << i;
    x = x_as_multiplied(k, gm, xs, x);
    for (uint32_t t = 0; t < n; ++t)
      for (uint32_t r = 0; r < M; ++r) {
        double a = 0, b = 0, abs_a = 0, abs_b = 0;
        for (uint32_t i = 0; i < K; ++i) {
          a += double(g.values[r * K + i]) * x[t * K + i];
          b += double(u.values[r * K + i]) * x[t * K + i];
          abs_a += std::fabs(double(g.values[r * K + i]) * x[t * K + i]);
          abs_b += std::fabs(double(u.values[r * K + i]) * x[t * K + i]);
        }
        const double ref = a / (1 + std::exp(-a)) * b;
        // the error of silu(a) * b from errors ea, eb in a and b: |b| ea (silu' <= 1.1) + |silu(a)| eb
        const double tol = 1.1 * std::fabs(b) * tolerance(c.gate, abs_a) + std::fabs(a) * tolerance(c.up, abs_b);
        ASSERT_NEAR(y[t * M + r], ref, tol + 1e-6 * std::fabs(ref)) << dtype_name(c.gate) << "/" << dtype_name(c.up);
      }
  }
}

// A matmul of rmsnorm(x) * g, the norm computed by the matmul itself (both families, the texel kernel and
// the device-address one for odd K): against the CPU reference, and bit for bit whatever the batch.
TEST_P(KernelTest, NormalizedMatmulMatchesReferenceAndIsBatchInvariant) {
  Kernels k = kernels();
  for (DType type : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q5_K, DType::Q6_K})
    for (uint32_t K : {64u, 96u, 257u, 384u, 512u}) {
      if (K % block_layout(type).elems) continue;
      const uint32_t M = 263, n = 16;   // 8 rows per lane in the texel kernel, a partial workgroup
      const float eps = 1e-5f;
      auto x = random_floats(n * K, 6, -3.f, 3.f), g = random_floats(K, 7, 0.5f, 1.5f);
      const TestMatrix w = test_matrix(type, M, K, K);
      const std::vector<float>& wref = w.values;
      DeviceMatrix m = upload_matrix(*arena_, gpu().uploader, type, M, K, w.bytes.data(), "w");
      gpu().uploader.flush();
      Slice xs = upload(x), gs = upload(g), batch = zeros<float>(n * M), single = zeros<float>(n * M);
      run([&](Recorder& r) {
        k.matmul(r, m, MatmulInput(xs, gs, eps), batch, n, false);
        for (uint32_t t = 0; t < n; ++t)
          k.matmul(r, m, MatmulInput(xs.sub(t * K * 4, K * 4), gs, eps), single.sub(t * M * 4, M * 4), 1, false);
      });
      auto b = download<float>(batch, n * M), sg = download<float>(single, n * M);
      // int8 activations: x normalized in f32 as quantize_x8.comp does, then rounded per 32. Its sum of
      // squares is reduced in another order than here, so a value within an ulp of a rounding boundary may
      // land on the other quant: the tolerance allows two such (d * the largest |w| each).
      const bool x8 = int8_x(k, m, xs);
      float max_d = 0, max_w = 0;
      for (float v : wref) max_w = std::max(max_w, std::fabs(v));
      for (uint32_t t = 0; t < n; ++t) {
        double ss = 0;
        for (uint32_t i = 0; i < K; ++i) ss += double(x[t * K + i]) * x[t * K + i];
        const double scale = 1.0 / std::sqrt(ss / K + eps);
        std::vector<double> xn(K);
        if (x8) {
          std::vector<float> v(K);
          for (uint32_t i = 0; i < K; ++i) v[i] = (x[t * K + i] * float(scale)) * g[i];
          const std::vector<float> q = ref_int8_activations(v, &max_d);
          std::copy(q.begin(), q.end(), xn.begin());
        } else {
          for (uint32_t i = 0; i < K; ++i) xn[i] = x[t * K + i] * scale * g[i];
        }
        const double flips = x8 ? 2.0 * max_d * max_w : 0.0;
        for (uint32_t r = 0; r < M; ++r) {
          double ref = 0;
          for (uint32_t i = 0; i < K; ++i) ref += double(wref[r * K + i]) * xn[i];
          ASSERT_NEAR(b[t * M + r], ref, (is_quantized(type) ? 2e-4 : 2e-5) * (1 + std::fabs(ref)) + flips)
              << dtype_name(type) << " K=" << K;
          ASSERT_EQ(b[t * M + r], sg[t * M + r]) << "batch invariance " << dtype_name(type) << " K=" << K;
        }
      }
    }
}

// Token t's output must not depend on n or on which other tokens share the dispatch. In the row-per-lane
// family M = 97 takes one row per lane and M = 1100 eight (matmul_rows' 2-row and 8-row builds, each at one
// token and in tiles).
// ...with fused multiply-adds (the default) and without (KernelVariants::fma off: both kernels of a pass must take
// the same setting).
TEST_P(KernelTest, MatmulIsBatchInvariantBitForBit) {
  for (const bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused multiply-adds" : "multiply, then add");
    Kernels k(gpu().ctx, gpu().pipelines, GetParam(), {.fma = fused});
    const std::vector<DType> types = all_types();
    for (DType type : types)
      for (uint32_t K : {64u, 96u, 257u, 512u})
      for (uint32_t M : {97u, 1100u}) {
        if (K % block_layout(type).elems || (M > 97 && (K != 512 || GetParam() != KernelFamily::RowPerLane))) continue;
        const uint32_t n = 16;
        auto x = random_floats(n * K, 5);
        const TestMatrix w = test_matrix(type, M, K, K);
        DeviceMatrix m = upload_matrix(*arena_, gpu().uploader, type, M, K, w.bytes.data(), "w");
        gpu().uploader.flush();
        Slice xs = upload(x), batch = zeros<float>(n * M), single = zeros<float>(n * M);
        // reversed order: every token sits in another tile position with other neighbours
        std::vector<float> xr(x.size());
        for (uint32_t t = 0; t < n; ++t) std::copy_n(&x[t * K], K, &xr[(n - 1 - t) * K]);
        Slice xrs = upload(xr), reversed = zeros<float>(n * M), sub = zeros<float>(n * M), sub9 = zeros<float>(n * M);
        run([&](Recorder& r) {
          k.matmul(r, m, xs, batch, n, false);
          k.matmul(r, m, xrs, reversed, n, false);
          k.matmul(r, m, xs, sub, 11, false);   // batch sizes that are no multiple of a tile: 6 + 5, 5 + 4
          k.matmul(r, m, xs, sub9, 9, false);
          for (uint32_t t = 0; t < n; ++t)
            k.matmul(r, m, xs.sub(t * K * 4, K * 4), single.sub(t * M * 4, M * 4), 1, false);
        });
        auto b = download<float>(batch, n * M), s = download<float>(single, n * M);
        auto rv = download<float>(reversed, n * M), sb = download<float>(sub, n * M), sb9 = download<float>(sub9, n * M);
        for (uint32_t t = 0; t < n; ++t)
          for (uint32_t r = 0; r < M; ++r) {
            ASSERT_EQ(b[t * M + r], s[t * M + r]) << dtype_name(type) << " K=" << K << " t=" << t << " r=" << r;
            ASSERT_EQ(rv[(n - 1 - t) * M + r], s[t * M + r]);
            if (t < 11) {
              ASSERT_EQ(sb[t * M + r], s[t * M + r]);
            }
            if (t < 9) {
              ASSERT_EQ(sb9[t * M + r], s[t * M + r]);
            }
          }
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, KernelTest, ::testing::Values(KernelFamily::RowPerLane, KernelFamily::Subgroup),
                         [](const auto& info) { return info.param == KernelFamily::RowPerLane ? "RowPerLane" : "Subgroup"; });

}  // namespace
}  // namespace vkspec::test
