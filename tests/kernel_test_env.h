#pragma once
// The kernel suites' helpers (tests/test_kernels*.cpp): test matrices of every type, the family fixture and
// the matmul check against the CPU reference.
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
inline std::vector<DType> all_types() {
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
inline TestMatrix test_matrix(DType type, uint32_t rows, uint32_t cols, uint32_t seed) {
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

// [rows][cols] blocks of `type` (Q4_0, Q8_0 or Q6_K) whose every scale is 1 and every quant byte quant_byte:
// each weight at its format's extreme (the int8 kernels' largest exact products).
inline std::vector<uint8_t> extreme_blocks(DType type, uint8_t quant_byte, uint32_t rows, uint32_t cols) {
  const BlockLayout L = block_layout(type);
  std::vector<uint8_t> blocks(size_t(rows) * cols / L.elems * L.bytes);
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
  return blocks;
}

class KernelTest : public VkTest, public ::testing::WithParamInterface<KernelFamily> {
 protected:
  Kernels kernels() { return Kernels(gpu().ctx, gpu().pipelines, GetParam()); }
  // The same family with int8 activations off: the float path of the q4 row kernel.
  Kernels kernels_float_x() { return Kernels(gpu().ctx, gpu().pipelines, GetParam(), {.int8_x = false}); }
};

// The x a matmul of `m` multiplies: x itself, or, where it takes int8 activations (matmul_rows_*_x8,
// matmul_dot8_*), x [n][K] rounded per 32 values as quantize_x8.comp does (tests/quant_reference.h).
inline bool int8_x(const Kernels& k, const DeviceMatrix& m, const Slice& xs) {
  const std::string shader = k.matmul_shader(m, xs);
  return (shader.size() > 3 && shader.compare(shader.size() - 3, 3, "_x8") == 0) || shader.rfind("matmul_dot8_", 0) == 0;
}
inline std::vector<float> x_as_multiplied(const Kernels& k, const DeviceMatrix& m, const Slice& xs, const std::vector<float>& x) {
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

inline void check_matmul(KernelTest* self, Kernels k, DType type, MatmulCase c, bool accumulate) {
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

// The int8 kernels sum exact integer products: the largest they can meet (every quant at its extreme, every
// activation +-127 of the same sign, or alternating) must come out exact, y = K * w * x, for q4_0 blocks of
// d = 1 and quants 15 (w = 15 - 8), q8_0 blocks of d = 1 and quants -128, and q6_K blocks of d = 1, scales 1
// and quants 0 (w = 0 - 32). The float kernels hold these sums exactly too (integers below 2^24).
inline void expect_largest_products_exact(VkTest& test, Kernels k) {
  const uint32_t M = 37, K = 512;
  for (const auto& [type, quant_byte, w] : {std::tuple{DType::Q4_0, 0xff, 7.0}, std::tuple{DType::Q8_0, 0x80, -128.0},
                                            std::tuple{DType::Q6_K, 0x00, -32.0}}) {
    SCOPED_TRACE(dtype_name(type));
    const std::vector<uint8_t> blocks = extreme_blocks(type, uint8_t(quant_byte), M, K);
    DeviceMatrix m = upload_matrix(*test.arena_, gpu().uploader, type, M, K, blocks.data(), "w");
    gpu().uploader.flush();
    for (float v : {1.0f, -1.0f}) {
      std::vector<float> x(2 * K, v);   // token 0: all v; token 1: +-1 alternating (sum 0)
      for (uint32_t i = 0; i < K; ++i) x[K + i] = i % 2 ? -1.0f : 1.0f;
      Slice xs = test.upload(x), ys = test.zeros<float>(2 * M);
      test.run([&](Recorder& r) { k.matmul(r, m, xs, ys, 2, false); });
      auto y = test.download<float>(ys, 2 * M);
      for (uint32_t r = 0; r < M; ++r) {
        ASSERT_EQ(y[r], float(w * K * v)) << "x = " << v << " row " << r;
        ASSERT_EQ(y[M + r], 0.0f) << "alternating x, row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace vkspec::test
