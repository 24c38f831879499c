// Every kernel against a plain CPU reference, on odd sizes, for both kernel families, plus bit-for-bit
// batch invariance (a token computed alone == the same token as one row of an n-token batch).
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <numeric>
#include <tuple>

#include "platform/platform.h"
#include "core/quant.h"
#include "tests/host_sampler.h"
#include "tests/quant_reference.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {

const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};
const DType kQuantTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                             DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};
std::vector<DType> all_types() {
  std::vector<DType> types(std::begin(kFloatTypes), std::end(kFloatTypes));
  types.insert(types.end(), std::begin(kQuantTypes), std::end(kQuantTypes));
  return types;
}

// A [rows][cols] test matrix in GGUF encoding of `type`, and its values: float types encode random floats;
// quantized types are random blocks, valued by the tests' own dequantizer (tests/quant_reference.h).
struct TestMatrix {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};
TestMatrix test_matrix(DType type, uint32_t rows, uint32_t cols, uint32_t seed) {
  TestMatrix m;
  const size_t n = size_t(rows) * cols;
  if (is_quantized(type)) {
    m.bytes = random_blocks(type, n, seed);
    m.values = ref_dequantize(type, m.bytes.data(), n);
    return m;
  }
  auto w = random_floats(n, seed);
  m.bytes.resize(n * block_layout(type).bytes);
  if (type == DType::F32) memcpy(m.bytes.data(), w.data(), m.bytes.size());
  auto* p = reinterpret_cast<uint16_t*>(m.bytes.data());
  for (size_t i = 0; type != DType::F32 && i < n; ++i)
    p[i] = type == DType::F16 ? float_to_half(w[i]) : float_to_bf16(w[i]);
  m.values = dequantize(type, n, m.bytes.data());
  return m;
}

class KernelTest : public VkTest, public ::testing::WithParamInterface<KernelFamily> {
 protected:
  Kernels kernels() { return Kernels(gpu().ctx, gpu().pipelines, GetParam()); }
  // The same family with int8 activations off (VKSPEC_INT8_X=0): the float path of the q4 row kernel.
  Kernels kernels_float_x() {
    platform::set_env("VKSPEC_INT8_X", "0");
    Kernels k(gpu().ctx, gpu().pipelines, GetParam());
    platform::unset_env("VKSPEC_INT8_X");
    return k;
  }
};

// The x a matmul of `m` multiplies: x itself, or, where it takes int8 activations (matmul_rows_*_x8),
// x [n][K] rounded per 32 values as quantize_x8.comp does (tests/quant_reference.h).
bool int8_x(const Kernels& k, const DeviceMatrix& m, const Slice& xs) {
  const std::string shader = k.matmul_shader(m, xs);
  return shader.size() > 3 && shader.compare(shader.size() - 3, 3, "_x8") == 0;
}
std::vector<float> x_as_multiplied(const Kernels& k, const DeviceMatrix& m, const Slice& xs, const std::vector<float>& x) {
  return int8_x(k, m, xs) ? ref_int8_activations(x) : x;
}

struct MatmulCase { uint32_t M, K, n; };

// Reference: double accumulation over the dequantized weights. The device's weights are exact (f16/bf16
// widen exactly; quantized weights are s*q + m with the values of llama.cpp's dequantization), so the error
// is f32 accumulation over K terms: 1e-5 * sum_k |w x|. Quantized chunks are summed as s*sum(q x) + m*sum(x)
// by the texel kernel, whose terms can be larger than |w x| (a min cancels part of s*q): 1e-4 there.
double tolerance(DType t, double abs_sum) { return (is_quantized(t) ? 1e-4 : 1e-5) * abs_sum + 1e-30; }

// y [n][M] against the product of weights w [M][K] (values) and x [n][K] in double, plus y0 when given.
void expect_product(const std::vector<float>& y, const std::vector<float>& w, const std::vector<float>& x, DType type,
                    MatmulCase c, const std::vector<float>* y0 = nullptr) {
  for (uint32_t t = 0; t < c.n; ++t)
    for (uint32_t r = 0; r < c.M; ++r) {
      double ref = y0 ? (*y0)[t * c.M + r] : 0.0, abs_sum = std::fabs(ref);
      for (uint32_t i = 0; i < c.K; ++i) {
        double p = double(w[size_t(r) * c.K + i]) * x[size_t(t) * c.K + i];
        ref += p;
        abs_sum += std::fabs(p);
      }
      ASSERT_NEAR(y[t * c.M + r], ref, tolerance(type, abs_sum)) << "t=" << t << " row=" << r;
    }
}

void check_matmul(KernelTest* self, Kernels k, DType type, MatmulCase c, bool accumulate) {
  SCOPED_TRACE(std::string(dtype_name(type)) + " M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) +
               " n=" + std::to_string(c.n) + (accumulate ? " accumulate" : ""));
  const TestMatrix w = test_matrix(type, c.M, c.K, c.M * 31 + c.K);
  const std::vector<float>& wq = w.values;
  auto x = random_floats(size_t(c.n) * c.K, c.K + 7);
  auto y0 = random_floats(size_t(c.n) * c.M, 99);
  DeviceMatrix m = upload_matrix(*self->arena_, gpu().uploader, type, c.M, c.K, w.bytes.data(), "w");
  gpu().uploader.flush();
  Slice xs = self->upload(x), ys = self->upload(y0);
  self->run([&](Recorder& r) { k.matmul(r, m, xs, ys, c.n, accumulate); });
  expect_product(self->download<float>(ys, y0.size()), wq, x_as_multiplied(k, m, xs, x), type, c,
                 accumulate ? &y0 : nullptr);
}

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

// The int8-activation kernels sum exact integer products (matmul_rows.comp X8; q4 packs two in one 32-bit
// integer): the largest they can meet (every quant at its extreme, every activation +-127 of the same
// sign, or alternating) must come out exact: y = K * w * x for q4_0 blocks of d = 1 and quants 15 (w = 15 - 8),
// q8_0 blocks of d = 1 and quants -128, and q6_K blocks of d = 1, scales 1 and quants 0 (w = 0 - 32; q6 pairs
// two of them in one product too).
TEST_P(KernelTest, Int8ActivationsHoldTheLargestProducts) {
  const uint32_t M = 37, K = 512;
  for (const auto& [type, quant_byte, w] : {std::tuple{DType::Q4_0, 0xff, 7.0}, std::tuple{DType::Q8_0, 0x80, -128.0},
                                            std::tuple{DType::Q6_K, 0x00, -32.0}}) {
  SCOPED_TRACE(dtype_name(type));
  const BlockLayout L = block_layout(type);
  std::vector<uint8_t> blocks(size_t(M) * K / L.elems * L.bytes);
  const uint16_t one = float_to_half(1.0f);
  for (size_t b = 0; b < blocks.size(); b += L.bytes) {
    if (type == DType::Q6_K) {   // {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}
      memset(&blocks[b], quant_byte, 192);
      memset(&blocks[b + 192], 1, 16);
      memcpy(&blocks[b + 208], &one, 2);
      continue;
    }
    memcpy(&blocks[b], &one, 2);
    memset(&blocks[b + 2], quant_byte, L.bytes - 2);
  }
  DeviceMatrix m = upload_matrix(*arena_, gpu().uploader, type, M, K, blocks.data(), "w");
  gpu().uploader.flush();
  Kernels k = kernels();
  for (float v : {1.0f, -1.0f}) {
    std::vector<float> x(2 * K, v);   // token 0: all v; token 1: +-1 alternating (sum 0)
    for (uint32_t i = 0; i < K; ++i) x[K + i] = i % 2 ? -1.0f : 1.0f;
    Slice xs = upload(x), ys = zeros<float>(2 * M);
    run([&](Recorder& r) { k.matmul(r, m, xs, ys, 2, false); });
    auto y = download<float>(ys, 2 * M);
    for (uint32_t r = 0; r < M; ++r) {
      ASSERT_NEAR(y[r], w * K * v, 1e-5 * std::fabs(w) * K) << "x = " << v << " row " << r;
      ASSERT_NEAR(y[M + r], 0.0, 1e-5 * std::fabs(w) * K) << "alternating x, row " << r;
    }
  }
  }
}

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
  platform::set_env("VKSPEC_MATMUL_TILE", "0");   // the A/B switch: one row per workgroup again
  const Kernels untiled(gpu().ctx, gpu().pipelines, GetParam());
  platform::unset_env("VKSPEC_MATMUL_TILE");
  EXPECT_STREQ(untiled.matmul_shader(aligned, x, 0, 8), texels ? "matmul_rows_f32" : "matmul_f32");
  if (gpu().ctx.facts().type == VK_PHYSICAL_DEVICE_TYPE_CPU && GetParam() == KernelFamily::RowPerLane) {
    EXPECT_TRUE(texels) << "lavapipe has push descriptors: the texel path should be on";
  }
  // q4 weights on the texel path take int8 activations where the device has subgroup arithmetic (the
  // quantizing pass reduces x^2 with subgroupAdd), unless VKSPEC_INT8_X=0
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
// ...with fused multiply-adds (the default) and without (VKSPEC_FMA=0, the A/B switch: both kernels of a
// pass must take the same setting).
TEST_P(KernelTest, MatmulIsBatchInvariantBitForBit) {
  for (const bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused multiply-adds" : "VKSPEC_FMA=0");
    if (!fused) platform::set_env("VKSPEC_FMA", "0");
    Kernels k = kernels();
    platform::unset_env("VKSPEC_FMA");
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

TEST_P(KernelTest, EmbedGathersRowsOfEveryType) {
  const uint32_t vocab = 67;
  std::vector<uint32_t> ids = {0, 66, 5, 5, 31};
  const std::vector<DType> types = all_types();
  for (DType type : types) {
    const uint32_t dim = block_layout(type).elems == 256 ? 512 : 96;
    const TestMatrix table = test_matrix(type, vocab, dim, 11);
    const std::vector<float>& ref = table.values;
    DeviceMatrix m = upload_matrix(*arena_, gpu().uploader, type, vocab, dim, table.bytes.data(), "emb");
    gpu().uploader.flush();
    // the same ids as host-written tokens (stride 1) and as token slots ({token, aux} pairs, stride 2)
    std::vector<uint32_t> slots;
    for (uint32_t id : ids) slots.insert(slots.end(), {id, 0xdeadbeefu});
    Slice ts = upload(ids), ss = upload(slots), xs = zeros<float>(ids.size() * dim), xss = zeros<float>(ids.size() * dim);
    Kernels k = kernels();
    run([&](Recorder& r) {
      k.embed(r, m, TokenInput{ts, 1}, xs, uint32_t(ids.size()));
      k.embed(r, m, TokenInput{ss, 2}, xss, uint32_t(ids.size()));
    });
    auto x = download<float>(xs, ids.size() * dim), xslots = download<float>(xss, ids.size() * dim);
    for (size_t t = 0; t < ids.size(); ++t)
      for (uint32_t d = 0; d < dim; ++d) {
        ASSERT_EQ(x[t * dim + d], ref[ids[t] * dim + d]) << dtype_name(type);
        ASSERT_EQ(xslots[t * dim + d], ref[ids[t] * dim + d]) << dtype_name(type);
      }
  }
}

TEST_P(KernelTest, ArgmaxAndTopProbabilityMatchReference) {
  for (uint32_t cols : {1u, 7u, 257u, 4099u}) {
    const uint32_t n = 3;
    auto logits = random_floats(n * cols, cols, -8.f, 8.f);
    if (cols > 7) logits[cols + 5] = logits[cols + 200] = 100.f;   // a tie: lowest index wins
    Slice ls = upload(logits), ids = zeros<uint32_t>(2 * n), ids_p = zeros<uint32_t>(2 * n);
    Kernels k = kernels();
    run([&](Recorder& r) {
      k.argmax(r, ls, ids, n, cols);
      k.argmax(r, ls, ids_p, n, cols, /*top_prob=*/true);
    });
    auto am = download<uint32_t>(ids, 2 * n), am_p = download<uint32_t>(ids_p, 2 * n);
    for (uint32_t t = 0; t < n; ++t) {
      const float* l = &logits[t * cols];
      const double m = *std::max_element(l, l + cols);
      ASSERT_EQ(am[2 * t], uint32_t(std::max_element(l, l + cols) - l));   // token slots: {id, top probability}
      ASSERT_EQ(am[2 * t + 1], 0u);
      ASSERT_EQ(am_p[2 * t], am[2 * t]);
      double z1 = 0;
      for (uint32_t i = 0; i < cols; ++i) z1 += std::exp(double(l[i]) - m);
      float top;
      std::memcpy(&top, &am_p[2 * t + 1], 4);
      ASSERT_NEAR(top, 1.0 / z1, 1e-6);
    }
  }
}

// RoPE + paged KV append + causal GQA attention against a CPU reference; K/V live in shuffled,
// non-contiguous blocks; the n query tokens computed as one batch equal the same tokens decoded one by one.
// A row of logits holding NaN or Inf gets NON_FINITE_TOKEN (the host reports a broken model), the others
// their argmax as usual.
TEST_P(KernelTest, ArgmaxMarksNonFiniteRows) {
  const uint32_t cols = 1000, n = 3;
  auto logits = random_floats(n * cols, 5);
  logits[0 * cols + 17] = std::numeric_limits<float>::quiet_NaN();
  logits[2 * cols + 999] = std::numeric_limits<float>::infinity();
  Slice ls = upload(logits), ids = zeros<uint32_t>(2 * n);
  Kernels k = kernels();
  run([&](Recorder& r) { k.argmax(r, ls, ids, n, cols); });
  auto am = download<uint32_t>(ids, 2 * n);
  EXPECT_EQ(am[0], contract::NON_FINITE_TOKEN);
  EXPECT_EQ(am[2], uint32_t(std::max_element(&logits[cols], &logits[2 * cols]) - &logits[cols]));
  EXPECT_EQ(am[4], contract::NON_FINITE_TOKEN);
}

// (cos, sin) of `positions` positions x n_rot/2 frequencies (theta 10000), as LlamaModel's table is laid out.
std::vector<float> rope_table(uint32_t positions, uint32_t n_rot) {
  std::vector<float> rope(size_t(positions) * n_rot);
  for (uint32_t p = 0; p < positions; ++p)
    for (uint32_t i = 0; i < n_rot / 2; ++i) {
      const double th = p * std::pow(10000.0, -2.0 * i / n_rot);
      rope[(p * n_rot / 2 + i) * 2] = float(std::cos(th));
      rope[(p * n_rot / 2 + i) * 2 + 1] = float(std::sin(th));
    }
  return rope;
}

TEST_P(KernelTest, RopeAndPagedAttentionMatchReferenceAndAreBatchInvariant) {
  struct Case { uint32_t n_heads, n_kv, head_dim, block, prior, n; };
  for (Case c : {Case{4, 4, 64, 16, 37, 5}, Case{4, 2, 8, 4, 3, 16}, Case{8, 2, 64, 16, 70, 9},
                 Case{8, 1, 32, 8, 0, 7}, Case{16, 2, 64, 16, 129, 3}, Case{6, 2, 64, 16, 100, 6},
                 // past Kernels::attention_split() keys (64 subgroup, 256 row-per-lane): split attention (flash
                 // decoding) in the device-address kernel, batches whose first rows have one split fewer than
                 // their last (64 and 256 keys), and many splits
                 Case{4, 2, 64, 16, 60, 8}, Case{4, 2, 64, 16, 250, 10}, Case{8, 2, 128, 16, 600, 5},
                 // head_dim past the texel kernel's 128, and one that is not whole f16 KV texels (8 dims): the
                 // device-address kernel on every device
                 Case{4, 2, 256, 16, 20, 4}, Case{4, 2, 12, 4, 30, 5}}) {
    SCOPED_TRACE("heads=" + std::to_string(c.n_heads) + " kv=" + std::to_string(c.n_kv));
    const uint32_t total = c.prior + c.n, hd = c.head_dim, qd = c.n_heads * hd, kvd = c.n_kv * hd;
    const uint32_t n_blocks = (total + c.block - 1) / c.block + 3;
    std::vector<uint32_t> table(n_blocks);
    std::iota(table.begin(), table.end(), 0u);
    std::shuffle(table.begin(), table.end(), std::mt19937(c.prior));
    auto q = random_floats(total * qd, 1), kk = random_floats(total * kvd, 2), v = random_floats(total * kvd, 3);
    const std::vector<float> rope = rope_table(total, hd);
    AttentionShape shape{c.n_heads, c.n_kv, hd, hd};
    auto run_attention = [&](bool batched) {
      // The tables buffer holds another sequence's table first: the rows name theirs by offset.
      std::vector<uint32_t> tables(n_blocks);
      std::iota(tables.rbegin(), tables.rend(), 0u);
      tables.insert(tables.end(), table.begin(), table.end());
      Slice qs = upload(q), ks = upload(kk), vs = upload(v), rs = upload(rope), tbl = upload(tables);
      PagedKvView kv{zeros<uint16_t>(n_blocks * c.block * kvd), zeros<uint16_t>(n_blocks * c.block * kvd), tbl, c.block};
      auto rows = [&](uint32_t pos0, uint32_t n) {   // {position, table offset} of rows at pos0 .. pos0 + n - 1
        std::vector<uint32_t> r;
        for (uint32_t i = 0; i < n; ++i) r.insert(r.end(), {pos0 + i, n_blocks});
        return KvRows{upload(r), pos0 + n};
      };
      Slice out = zeros<float>(total * qd);
      Kernels k = kernels();
      // the texel kernel serves up to 4 query heads per kv head and head_dim <= 128 (a multiple of 8: whole f16
      // KV texels) on CPU devices; the device-address one the rest
      const bool rows_expected = GetParam() == KernelFamily::RowPerLane && gpu().ctx.facts().texel_reads() &&
                                 gpu().ctx.facts().subgroup_shuffle && c.n_heads / c.n_kv <= 4 && hd <= 128 && hd % 8 == 0;
      EXPECT_STREQ(k.attention_shader(shape, qs, kv), rows_expected ? "attention_rows" : "attention");
      auto at = [&](const Slice& s, uint32_t t, uint32_t width) { return s.sub(size_t(t) * width * 4, size_t(width) * 4 * (total - t)); };
      run([&](Recorder& r) {
        if (c.prior) {
          k.rope_store_kv(r, shape, qs, ks, vs, rs, kv, rows(0, c.prior), c.prior);
          r.barrier();
        }
        if (batched) {
          const KvRows rs_n = rows(c.prior, c.n);
          k.rope_store_kv(r, shape, at(qs, c.prior, qd), at(ks, c.prior, kvd), at(vs, c.prior, kvd), rs, kv, rs_n, c.n);
          r.barrier();
          k.attention(r, shape, at(qs, c.prior, qd), at(out, c.prior, qd), kv, rs_n, c.n);
        } else {
          for (uint32_t t = c.prior; t < total; ++t) {
            const KvRows one = rows(t, 1);
            k.rope_store_kv(r, shape, at(qs, t, qd), at(ks, t, kvd), at(vs, t, kvd), rs, kv, one, 1);
            r.barrier();
            k.attention(r, shape, at(qs, t, qd), at(out, t, qd), kv, one, 1);
            r.barrier();
          }
        }
      });
      return download<float>(out, total * qd);
    };
    auto batched = run_attention(true), single = run_attention(false);

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
          ASSERT_NEAR(batched[i], o, 2e-5) << "t=" << t << " h=" << h << " e=" << e;
          ASSERT_EQ(batched[i], single[i]) << "batch invariance t=" << t << " h=" << h << " e=" << e;
        }
      }
  }
}

// The q|k|v projection with RoPE and the KV store in its epilogue (one dispatch, texel kernel) must equal
// the matmul followed by rope_store_kv bit for bit: q and k rotated in the output, k and v in the pools.
// (On the subgroup family qkv_rope_store_kv is that pair itself: there only the decision is checked.)
TEST_P(KernelTest, QkvRopeEpilogueEqualsMatmulThenRopeStoreKv) {
  struct Case { uint32_t n_heads, n_kv, head_dim, n_rot, K; DType type; };
  for (Case c : {Case{6, 2, 64, 64, 384, DType::F16},     // the pycode target's shape: 8 rows per lane
                 Case{3, 1, 64, 64, 192, DType::F16},     // the draft's: 4 rows per lane
                 Case{4, 2, 16, 8, 128, DType::Q8_0},     // partial rotary dims, quantized weights
                 Case{8, 2, 32, 32, 256, DType::Q4_K}}) {
    const uint32_t qd = c.n_heads * c.head_dim, kvd = c.n_kv * c.head_dim, M = qd + 2 * kvd, block = 16;
    SCOPED_TRACE("heads=" + std::to_string(c.n_heads) + " K=" + std::to_string(c.K) + " " + dtype_name(c.type));
    const TestMatrix w = test_matrix(c.type, M, c.K, M + c.K);
    DeviceMatrix m = upload_matrix(*arena_, gpu().uploader, c.type, M, c.K, w.bytes.data(), "wqkv");
    gpu().uploader.flush();
    const uint32_t prior = 21, n_max = 11, total = prior + n_max, n_blocks = total / block + 3;
    std::vector<uint32_t> table(n_blocks);
    std::iota(table.begin(), table.end(), 0u);
    std::shuffle(table.begin(), table.end(), std::mt19937(c.K));
    const std::vector<float> rope = rope_table(total, c.n_rot);
    const AttentionShape shape{c.n_heads, c.n_kv, c.head_dim, c.n_rot, M, M};
    Kernels k = kernels();
    const Slice x_probe = upload(random_floats(c.K, 1)), norm = upload(random_floats(c.K, 9, 0.5f, 1.5f));
    EXPECT_EQ(k.qkv_rope_fused(m, MatmulInput(x_probe, norm, 1e-5f), shape),
              GetParam() == KernelFamily::RowPerLane && gpu().ctx.facts().texel_reads());
    for (uint32_t n : {1u, n_max}) {
      auto x = random_floats(n * c.K, n, -2.f, 2.f);
      std::vector<uint32_t> rows;
      for (uint32_t i = 0; i < n; ++i) rows.insert(rows.end(), {prior + i, 0u});
      const Slice xs = upload(x), rs = upload(rope), tbl = upload(table);
      const KvRows kv_rows{upload(rows), prior + n};
      const MatmulInput in(xs, norm, 1e-5f);
      const Slice fused = zeros<float>(n * M), split = zeros<float>(n * M);
      const PagedKvView kv_fused{zeros<uint16_t>(n_blocks * block * kvd), zeros<uint16_t>(n_blocks * block * kvd), tbl, block};
      const PagedKvView kv_split{zeros<uint16_t>(n_blocks * block * kvd), zeros<uint16_t>(n_blocks * block * kvd), tbl, block};
      run([&](Recorder& r) {
        k.qkv_rope_store_kv(r, m, in, fused, n, shape, rs, kv_fused, kv_rows);
        k.matmul(r, m, in, split, n, false, 0, M);
        r.barrier();
        const QkvSlices parts = qkv_slices(split, shape);
        k.rope_store_kv(r, shape, parts.q, parts.k, parts.v, rs, kv_split, kv_rows, n);
      });
      // bit patterns, not float ==: -0 and +0 would pass that
      const size_t pool = size_t(n_blocks) * block * kvd / 2;   // uints: f16 pairs
      EXPECT_EQ(download<uint32_t>(fused, n * M), download<uint32_t>(split, n * M)) << "q|k|v rows, n=" << n;
      EXPECT_EQ(download<uint32_t>(kv_fused.k_pool, pool), download<uint32_t>(kv_split.k_pool, pool)) << "K pool, n=" << n;
      EXPECT_EQ(download<uint32_t>(kv_fused.v_pool, pool), download<uint32_t>(kv_split.v_pool, pool)) << "V pool, n=" << n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, KernelTest, ::testing::Values(KernelFamily::RowPerLane, KernelFamily::Subgroup),
                         [](const auto& info) { return info.param == KernelFamily::RowPerLane ? "RowPerLane" : "Subgroup"; });

// VKSPEC_MEMORY=discrete (CI's second run of the suite): device-local memory is never mapped, so every
// upload and readback above went through staging copies, as on a discrete GPU.
TEST_F(VkTest, DiscreteMemoryModelNeverMapsDeviceMemory) {
  const char* env = getenv("VKSPEC_MEMORY");
  const bool discrete = env && std::string(env) == "discrete";
  EXPECT_EQ(gpu().ctx.facts().discrete_memory, discrete);
  Arena device(gpu().ctx, MemoryKind::Device, 1 << 20);
  const Slice s = device.alloc(4096, "probe");
  if (discrete) {
    EXPECT_EQ(s.mapped, nullptr);
  }
  const std::vector<float> v = random_floats(1024, 3);
  EXPECT_EQ(download<float>(upload(v), v.size()), v);
}

// A weight matrix bigger than lavapipe's 128 MiB maxStorageBufferRange goes through a matmul (buffer
// device addresses have no range limit). On a GPU with a larger range it is an ordinary large matmul.
TEST_F(VkTest, MatmulOverTensorLargerThan128MiB) {
  const uint32_t M = 34000, K = 1024;   // 139 MB of f32
  std::vector<float> w(size_t(M) * K);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float((i * 2654435761u) % 1000) / 1000.f - 0.5f;
  auto x = random_floats(K, 4);
  Arena big(gpu().ctx, MemoryKind::Device, 256ull << 20);
  DeviceMatrix m = upload_matrix(big, gpu().uploader, DType::F32, M, K, w.data(), "big");
  gpu().uploader.flush();
  Slice xs = upload(x), ys = zeros<float>(M);
  Kernels k(gpu().ctx, gpu().pipelines);
  run([&](Recorder& r) { k.matmul(r, m, xs, ys, 1, false); });
  auto y = download<float>(ys, M);
  for (uint32_t r : {0u, 1u, M / 2, M - 2, M - 1}) {
    double ref = 0, abs_sum = 0;
    for (uint32_t i = 0; i < K; ++i) { ref += double(w[size_t(r) * K + i]) * x[i]; abs_sum += std::fabs(w[size_t(r) * K + i] * x[i]); }
    EXPECT_NEAR(y[r], ref, 1e-5 * abs_sum) << "row " << r;
  }
}


// Every quantized type as one tensor bigger than 128 MiB on the device (past lavapipe's storage-buffer
// range and its texel-view size: the device-address kernel takes it), checked on rows at both ends.
TEST_F(VkTest, QuantizedMatmulOverTensorLargerThan128MiB) {
  for (DType type : kQuantTypes) {
    const WeightFormat f = native_format(type);
    const uint32_t K = 4096;
    const double bits = (f.storage == WT_Q4 ? 4 : f.storage == WT_Q6 ? 6 : 8) + 32.0 * (f.has_min ? 2 : 1) / f.group;
    const uint32_t M = uint32_t((129.0 * (1 << 20) * 8) / (bits * K)) + 1;
    // 64 random rows, repeated (random bytes for 130 MiB would dominate the suite's time)
    const auto rows64 = random_blocks(type, size_t(64) * K, 5);
    std::vector<uint8_t> blocks(rows64.size() / 64 * M);
    for (size_t o = 0; o < blocks.size(); o += rows64.size())
      memcpy(&blocks[o], rows64.data(), std::min(rows64.size(), blocks.size() - o));
    auto x = random_floats(K, 4);
    Arena big(gpu().ctx, MemoryKind::Device, 160ull << 20);
    DeviceMatrix m = upload_matrix(big, gpu().uploader, type, M, K, blocks.data(), "big");
    ASSERT_GT(m.data.size + m.scales.size, 128ull << 20) << dtype_name(type);
    gpu().uploader.flush();
    Slice xs = upload(x), ys = zeros<float>(M);
    Kernels k(gpu().ctx, gpu().pipelines);
    run([&](Recorder& r) { k.matmul(r, m, xs, ys, 1, false); });
    auto y = download<float>(ys, M);
    const BlockLayout L = block_layout(type);
    x = x_as_multiplied(k, m, xs, x);
    for (uint32_t r : {0u, 1u, M / 2 + 3, M - 1}) {
      auto w = ref_dequantize(type, blocks.data() + size_t(r) * (K / L.elems) * L.bytes, K);
      double ref = 0, abs_sum = 0;
      for (uint32_t i = 0; i < K; ++i) { ref += double(w[i]) * x[i]; abs_sum += std::fabs(double(w[i]) * x[i]); }
      EXPECT_NEAR(y[r], ref, 1e-4 * abs_sum) << dtype_name(type) << " row " << r;
    }
  }
}
}  // namespace
}  // namespace vkspec::test

namespace vkspec::test {
namespace {
// The suite's zero-validation-messages guarantee only means something if the layer is on and its
// messages are counted: provoke one invalid call and see the counter move.
TEST(Validation, LayerIsOnAndCountsMessages) {
  ASSERT_TRUE(gpu().ctx.validation_enabled());
  uint64_t before = gpu().ctx.validation_messages();
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = 0;   // invalid: VUID-VkBufferCreateInfo-size-00912
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  VkBuffer b = VK_NULL_HANDLE;
  fprintf(stderr, "(the next validation message is expected)\n");
  if (vk::vkCreateBuffer(gpu().ctx.device(), &bi, nullptr, &b) == VK_SUCCESS && b) vk::vkDestroyBuffer(gpu().ctx.device(), b, nullptr);
  EXPECT_GT(gpu().ctx.validation_messages(), before);
}
}  // namespace
}  // namespace vkspec::test
