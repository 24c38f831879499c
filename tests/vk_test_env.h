#pragma once
// Shared Vulkan environment for the test suites: one validated VulkanDevice + pipeline set per process,
// a fresh device arena per test, and helpers to move vectors to and from the device.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/kernels.h"

namespace vkspec::test {

struct Gpu {
  VulkanDevice ctx;
  Pipelines pipelines;
  Uploader uploader;
  Gpu();
};
Gpu& gpu();

// Path under ../shared (VKSPEC_SHARED from CTest, or the default relative to the source tree).
std::string shared_path(const std::string& rel);

class VkTest : public ::testing::Test {
 public:
  void SetUp() override;
  void TearDown() override;

  template <class T> Slice upload(const std::vector<T>& v) {
    Slice s = arena_->alloc(v.size() * sizeof(T), "test buffer");
    gpu().uploader.upload(s, v.data(), v.size() * sizeof(T));
    gpu().uploader.flush();
    return s;
  }
  template <class T> Slice zeros(size_t n) { return upload(std::vector<T>(n, T{})); }
  template <class T> std::vector<T> download(const Slice& s, size_t n) {
    std::vector<T> out(n);
    read_back(s, out.data(), n * sizeof(T));
    return out;
  }
  void read_back(const Slice& s, void* dst, size_t bytes);
  Recorder& rec() { return *rec_; }
  void run(const std::function<void(Recorder&)>& record) {
    rec_->begin();
    record(*rec_);
    rec_->submit_and_wait();
  }

  std::unique_ptr<Arena> arena_;
  std::unique_ptr<Arena> readback_;
  std::unique_ptr<Recorder> rec_;
  uint64_t validation_start_ = 0;
};

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f);

}  // namespace vkspec::test
