#include "tests/vk_test_env.h"

#include <cstdlib>

namespace vkspec::test {

namespace {
// Validation is on unless VKSPEC_VALIDATION=0: the Windows suite under Wine (scripts/test-windows.sh), where the
// Khronos layer is a Linux library that Windows programs cannot load.
bool validate() {
  const char* v = getenv("VKSPEC_VALIDATION");
  return !(v && std::string(v) == "0");
}
}  // namespace

Gpu::Gpu() : ctx(VulkanDeviceOptions{-1, validate()}), pipelines(ctx), uploader(ctx) {}

Gpu& gpu() {
  static Gpu* g = new Gpu();   // lives until exit; Vulkan objects are reclaimed by the driver at exit
  return *g;
}

std::string shared_path(const std::string& rel) {
  const char* s = getenv("VKSPEC_SHARED");
  return std::string(s && *s ? s : "../shared") + "/" + rel;
}

void VkTest::SetUp() {
  validation_start_ = gpu().ctx.validation_messages();
  arena_ = std::make_unique<Arena>(gpu().ctx, MemoryKind::Device, 64ull << 20);
  readback_ = std::make_unique<Arena>(gpu().ctx, MemoryKind::Readback, 16ull << 20);
  rec_ = std::make_unique<Recorder>(gpu().ctx, false);
}

void VkTest::TearDown() {
  rec_.reset();
  arena_.reset();
  readback_.reset();
  EXPECT_EQ(gpu().ctx.validation_messages(), validation_start_)
      << "validation layer reported: " << gpu().ctx.last_validation_message();
}

void VkTest::read_back(const Slice& s, void* dst, size_t bytes) {
  if (s.mapped) {
    memcpy(dst, s.mapped, bytes);
    return;
  }
  Slice tmp = readback_->alloc(bytes, "test readback");
  rec_->begin();
  rec_->copy(s.sub(0, bytes), tmp);
  rec_->submit_and_wait();
  memcpy(dst, tmp.mapped, bytes);
}

std::vector<float> random_floats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace vkspec::test
