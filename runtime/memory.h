#pragma once
// Device memory: a few large VkDeviceMemory blocks, each wrapped by one VkBuffer, suballocated by bumping
// an offset (weights, activations and KV pools live for the whole model lifetime, so nothing is freed
// individually). Kernels reach a Slice through its buffer device address.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/vulkan_device.h"

namespace vkspec {

struct Slice {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize offset = 0, size = 0;
  VkDeviceAddress address = 0;   // device address of the first byte
  uint8_t* mapped = nullptr;     // host pointer when the memory is host-visible, else null
  // A uniform texel buffer view (R32G32B32A32_UINT, 16-byte texels) over the whole block the slice lives
  // in, when the device reads through texel buffers (DeviceFacts::texel_reads); the slice starts at
  // texel offset / 16 (offsets are 256-byte aligned).
  VkBufferView texels = VK_NULL_HANDLE;

  explicit operator bool() const { return buffer != VK_NULL_HANDLE; }
  Slice sub(VkDeviceSize off, VkDeviceSize len) const;
  template <class T> T* host() const { return reinterpret_cast<T*>(mapped); }
};

// A slice the texel kernels can read: inside its block's texel view, at a 16-byte offset that a 32-bit
// texel index reaches. texel_offset: its first texel in that view.
inline bool texel_readable(const Slice& s) { return s.texels && s.offset % 16 == 0 && s.offset / 16 < UINT32_MAX; }
inline uint32_t texel_offset(const Slice& s) { return uint32_t(s.offset / 16); }

enum class MemoryKind {
  Device,     // device-local (weights, activations, KV)
  Upload,     // host-visible + coherent, written by the host each pass (token ids, rope table, block tables)
  Readback,   // host-visible, preferably cached (logits, sampled ids)
};

class Arena {
 public:
  Arena(VulkanDevice& ctx, MemoryKind kind, VkDeviceSize block_size = 256ull << 20);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Aligned suballocation; throws Error naming `what` if the device is out of memory.
  Slice alloc(VkDeviceSize size, const char* what, VkDeviceSize align = 256);
  bool host_visible() const;

 private:
  struct Block {
    VkDeviceMemory memory = VK_NULL_HANDLE;
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceSize size = 0, used = 0;
    VkDeviceAddress address = 0;
    uint8_t* mapped = nullptr;
    VkBufferView texels = VK_NULL_HANDLE;
    VkDeviceSize texel_range = 0;   // bytes the view covers (maxTexelBufferElements may cap it)
  };
  Block& new_block(VkDeviceSize min_size, const char* what);

  VulkanDevice& ctx_;
  MemoryKind kind_;
  VkDeviceSize block_size_;
  VkMemoryPropertyFlags memory_flags_ = 0;
  std::vector<Block> blocks_;
};

class Recorder;

// Copies host data into device slices: a direct memcpy when the slice is host-visible (lavapipe, ReBAR),
// otherwise through a staging ring, flushed with one submit whenever the ring fills.
class Uploader {
 public:
  Uploader(VulkanDevice& ctx, VkDeviceSize ring_size = 64ull << 20);
  ~Uploader();
  void upload(const Slice& dst, const void* data, VkDeviceSize size, VkDeviceSize dst_offset = 0);
  void flush();   // waits until every queued copy has landed

 private:
  VulkanDevice& ctx_;
  std::unique_ptr<Arena> ring_arena_;
  Slice ring_;
  VkDeviceSize ring_used_ = 0;
  std::unique_ptr<Recorder> rec_;
  bool recording_ = false;
};

}  // namespace vkspec
