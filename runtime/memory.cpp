#include "runtime/memory.h"

#include <algorithm>
#include <cstring>

#include "runtime/recorder.h"

namespace vkspec {

Slice Slice::sub(VkDeviceSize off, VkDeviceSize len) const {
  if (off + len > size) throw Error("internal: slice out of range");
  Slice s = *this;
  s.offset += off;
  s.size = len;
  s.address += off;
  if (s.mapped) s.mapped += off;
  return s;
}

namespace {
uint32_t pick_memory_type(const VkPhysicalDeviceMemoryProperties& mp, uint32_t allowed, MemoryKind kind,
                          bool discrete, VkMemoryPropertyFlags* flags_out) {
  // Ordered preferences per kind; the first memory type matching one of them wins.
  std::vector<VkMemoryPropertyFlags> prefs;
  const auto DL = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
             HC = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, CA = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
  switch (kind) {
    // host-visible device memory = no staging, except under the discrete model (never mapped)
    case MemoryKind::Device:
      if (discrete) prefs = {DL};
      else prefs = {DL | HV | HC, DL};
      break;
    case MemoryKind::Upload: prefs = {DL | HV | HC, HV | HC}; break;
    case MemoryKind::Readback: prefs = {HV | HC | CA, HV | HC}; break;
  }
  for (auto want : prefs)
    for (uint32_t i = 0; i < mp.memoryTypeCount; ++i)
      if ((allowed & (1u << i)) && (mp.memoryTypes[i].propertyFlags & want) == want) {
        *flags_out = mp.memoryTypes[i].propertyFlags;
        return i;
      }
  throw Error("no suitable Vulkan memory type");
}
}  // namespace

Arena::Arena(VulkanDevice& ctx, MemoryKind kind, VkDeviceSize block_size)
    : ctx_(ctx), kind_(kind), block_size_(std::min<VkDeviceSize>(block_size, ctx.facts().max_allocation_size)) {}

Arena::~Arena() {
  for (auto& b : blocks_) {
    if (b.texels) vk::vkDestroyBufferView(ctx_.device(), b.texels, nullptr);
    vk::vkDestroyBuffer(ctx_.device(), b.buffer, nullptr);
    vk::vkFreeMemory(ctx_.device(), b.memory, nullptr);
  }
}

bool Arena::host_visible() const { return memory_flags_ & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT; }

Arena::Block& Arena::new_block(VkDeviceSize min_size, const char* what) {
  Block b;
  b.size = std::max(block_size_, min_size);
  if (b.size > ctx_.facts().max_allocation_size)
    throw Error(std::string(what) + ": " + std::to_string(min_size >> 20) +
                " MiB exceeds the device's maxMemoryAllocationSize");
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = b.size;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
             VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT | VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT;
  vk_check(vk::vkCreateBuffer(ctx_.device(), &bi, nullptr, &b.buffer), "vkCreateBuffer");
  VkMemoryRequirements req;
  vk::vkGetBufferMemoryRequirements(ctx_.device(), b.buffer, &req);
  VkMemoryPropertyFlags flags = 0;
  const bool discrete = ctx_.facts().discrete_memory && kind_ == MemoryKind::Device;
  uint32_t type = pick_memory_type(ctx_.memory_properties(), req.memoryTypeBits, kind_, discrete, &flags);
  VkMemoryAllocateFlagsInfo fi{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
  fi.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.pNext = &fi;
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = type;
  VkResult r = vk::vkAllocateMemory(ctx_.device(), &ai, nullptr, &b.memory);
  if (r != VK_SUCCESS) {
    vk::vkDestroyBuffer(ctx_.device(), b.buffer, nullptr);
    vk_check(r, (std::string("allocating ") + std::to_string(b.size >> 20) + " MiB for " + what).c_str());
  }
  vk_check(vk::vkBindBufferMemory(ctx_.device(), b.buffer, b.memory, 0), "vkBindBufferMemory");
  if ((flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && !discrete) {
    void* p = nullptr;
    vk_check(vk::vkMapMemory(ctx_.device(), b.memory, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory");
    b.mapped = static_cast<uint8_t*>(p);
  }
  VkBufferDeviceAddressInfo ainfo{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
  ainfo.buffer = b.buffer;
  b.address = vk::vkGetBufferDeviceAddress(ctx_.device(), &ainfo);
  if (ctx_.facts().texel_reads()) {
    VkBufferViewCreateInfo vi{VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO};
    vi.buffer = b.buffer;
    vi.format = VK_FORMAT_R32G32B32A32_UINT;
    vi.range = b.texel_range = std::min<VkDeviceSize>(b.size, ctx_.facts().max_texel_buffer_elements * 16) / 16 * 16;
    vk_check(vk::vkCreateBufferView(ctx_.device(), &vi, nullptr, &b.texels), "vkCreateBufferView");
  }
  memory_flags_ = flags;
  blocks_.push_back(b);
  return blocks_.back();
}

Slice Arena::alloc(VkDeviceSize size, const char* what, VkDeviceSize align) {
  size = std::max<VkDeviceSize>(size, 4);
  Block* blk = nullptr;
  for (auto& b : blocks_) {
    VkDeviceSize off = (b.used + align - 1) / align * align;
    if (off + size <= b.size) { blk = &b; break; }
  }
  if (!blk) blk = &new_block(size, what);
  VkDeviceSize off = (blk->used + align - 1) / align * align;
  blk->used = off + size;
  Slice s;
  s.buffer = blk->buffer;
  s.offset = off;
  s.size = size;
  s.address = blk->address + off;
  s.mapped = blk->mapped ? blk->mapped + off : nullptr;
  if (off + size <= blk->texel_range) s.texels = blk->texels;
  return s;
}

Uploader::Uploader(VulkanDevice& ctx, VkDeviceSize ring_size) : ctx_(ctx) {
  ring_arena_ = std::make_unique<Arena>(ctx, MemoryKind::Upload, ring_size);
  ring_ = ring_arena_->alloc(ring_size, "staging ring");
  rec_ = std::make_unique<Recorder>(ctx, false);
}

Uploader::~Uploader() = default;

void Uploader::upload(const Slice& dst, const void* data, VkDeviceSize size, VkDeviceSize dst_offset) {
  if (dst_offset + size > dst.size) throw Error("internal: upload out of range");
  if (dst.mapped) {
    memcpy(dst.mapped + dst_offset, data, size);
    return;
  }
  const uint8_t* src = static_cast<const uint8_t*>(data);
  while (size > 0) {
    if (ring_used_ == ring_.size) flush();
    VkDeviceSize n = std::min(size, ring_.size - ring_used_);
    memcpy(ring_.mapped + ring_used_, src, n);
    if (!recording_) { rec_->begin(); recording_ = true; }
    rec_->copy(ring_.sub(ring_used_, n), dst.sub(dst_offset, n));
    ring_used_ += n;
    src += n;
    dst_offset += n;
    size -= n;
  }
}

void Uploader::flush() {
  if (recording_) rec_->submit_and_wait();
  recording_ = false;
  ring_used_ = 0;
}

}  // namespace vkspec
