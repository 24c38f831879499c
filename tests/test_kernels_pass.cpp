// The other kernels of a pass against a plain CPU reference, for both kernel families: embedding, argmax,
// RoPE with paged attention, the q|k|v epilogue; and the device's memory: the discrete memory model, tensors
// past the storage-buffer range, the validation layer's counter.
#include "tests/attention_check.h"
#include "tests/kernel_test_env.h"

namespace vkspec::test {
namespace {

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

// RoPE + paged attention against the CPU reference and batch invariant (tests/attention_check.h).
TEST_P(KernelTest, RopeAndPagedAttentionMatchReferenceAndAreBatchInvariant) {
  Kernels k = kernels();
  for (const AttentionCase& c : kAttentionCases) check_paged_attention(*this, k, c, family_attention_shader(GetParam(), c), 2e-5, false);
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
      for (uint32_t i = 0; i < n; ++i) rows.insert(rows.end(), {prior + i, 0u, contract::KV_NO_TREE, 0u});
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
