#pragma once
// Vulkan instance + one logical device with one compute queue, and the probed facts that kernel
// variants are chosen from. Invariant: a VulkanDevice is fully usable once constructed or it threw.
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "core/settings.h"
#include "runtime/vk_loader.h"

namespace vkspec {

struct DeviceFacts {
  uint32_t index = 0;
  std::string name;
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  uint32_t vendor_id = 0;
  uint32_t api_version = 0;
  std::string driver;
  std::string uuid_hex;
  uint32_t subgroup_size = 0;
  uint32_t min_subgroup_size = 0, max_subgroup_size = 0;
  bool subgroup_size_control = false;
  bool compute_required_subgroup_size = false;   // requiredSubgroupSizeStages has compute
  // Whether a compute pipeline can run in subgroups of n: the default size, or one it can require
  // (subgroupSizeControl: AMD's 32 or 64).
  bool runs_subgroups_of(uint32_t n) const {
    return subgroup_size == n || (subgroup_size_control && compute_required_subgroup_size && min_subgroup_size <= n &&
                                  n <= max_subgroup_size);
  }
  bool subgroup_arithmetic = false;  // subgroupAdd/Max in compute
  bool subgroup_shuffle = false;     // subgroupShuffle in compute (attention_rows)
  bool subgroup_basic = false;
  bool shader_float16 = false;       // fp16 arithmetic
  bool shader_int8 = false;
  bool storage_16bit = false;
  bool storage_8bit = false;
  bool buffer_device_address = false;
  bool timeline_semaphore = false;   // Vulkan 1.2 (the engine-submits mode's completion)
  bool push_descriptor = false;      // VK_KHR_push_descriptor (texel-buffer kernels bind through it)
  // Packed 4x8-bit integer dot products in shaders (VK_KHR_shader_integer_dot_product's
  // shaderIntegerDotProduct; the extension, since vkspec's instance asks for Vulkan 1.2: the int8dot matmul
  // path), and whether the device says they are faster than their emulation
  // (integerDotProduct4x8BitPackedSignedAccelerated; lavapipe: not).
  bool integer_dot_product = false;
  bool integer_dot_accelerated = false;
  bool vulkan_memory_model = false;     // vulkanMemoryModel (Vulkan 1.2): the matrix-unit builds' SPIR-V uses it
  bool cooperative_matrix = false;      // VK_KHR_cooperative_matrix is offered (matrix units)
  // VK_KHR_cooperative_matrix / VK_NV_cooperative_matrix with its feature, f16 arithmetic, the Vulkan memory
  // model and a 16x16x16 f16 x f16 + f32 subgroup shape: what the matrix-unit shaders' KHR / NV builds need
  // (shaders/coop_types.glsl)
  bool cooperative_matrix_khr = false;
  bool cooperative_matrix_nv = false;
  uint64_t max_texel_buffer_elements = 0;
  uint64_t max_storage_buffer_range = 0;
  uint32_t max_shared_memory = 0;
  uint64_t max_allocation_size = 0;
  uint32_t max_workgroup_invocations = 0;
  uint32_t max_push_constants = 0;
  bool timestamps = false;
  float timestamp_period_ns = 0.f;
  uint64_t device_local_bytes = 0;
  // The memory model of a discrete GPU: device-local memory is never mapped, even where the driver offers
  // host-visible device memory (lavapipe, ReBAR); weights and inputs reach it through staging copies.
  // VKSPEC_MEMORY=discrete turns it on anywhere, so that CI exercises the GPU path on lavapipe.
  bool discrete_memory = false;
  // How a recording is submitted (Recorder::barrier, decided here once). A GPU runs a step's parts while the
  // host records the rest, so the host's recording time is hidden instead of added to each step. On a CPU
  // device recording is a small part of a step, and each submission wakes its queue thread: it takes
  // recordings whole.
  // VKSPEC_SUBMIT=whole|parts|barriers overrides (barriers: a part at every barrier, for CI on lavapipe).
  using SubmitSplit = vkspec::SubmitSplit;
  SubmitSplit submit_split = SubmitSplit::Whole;
  const char* submit_split_name() const;   // "whole", "parts" or "barriers": VKSPEC_SUBMIT's values

  const char* type_name() const;
  // Kernel family: "row per lane" on CPU devices (each lane is a SIMD lane of the host, so strided
  // loads across lanes turn into gathers); subgroup-cooperative rows on GPUs.
  bool prefers_row_per_lane() const { return type == VK_PHYSICAL_DEVICE_TYPE_CPU; }
  // Tokens per forward chunk (a prefill's unit, llama.cpp's ubatch) unless ModelOptions::ubatch says.
  // Each chunk reads every weight once and runs a fixed number of dispatches: at small chunks a GPU is bound
  // by those, so it takes large ones. A CPU device's chunk is arithmetic-bound whatever its size, so it keeps
  // the smaller activations.
  uint32_t default_ubatch() const { return prefers_row_per_lane() ? 16 : 256; }
  // Weight reads through uniform texel buffers: lavapipe turns texelFetch into a vector gather, while
  // every storage-buffer or device-address load becomes a per-lane scalar loop with a branch per lane.
  bool texel_reads() const { return push_descriptor && max_texel_buffer_elements >= (1u << 24); }
};

// One recording handed to the application in the engine-submits mode: it submits the command buffers, in
// order, on a queue of the device's queue family, waiting for `semaphore` (a timeline) to reach wait_value
// and signalling signal_value when they are done. Pointers are valid during the call only.
struct Handover {
  const VkCommandBuffer* command_buffers = nullptr;
  uint32_t n_command_buffers = 0;
  VkSemaphore semaphore = VK_NULL_HANDLE;
  uint64_t wait_value = 0, signal_value = 0;
};

// A device the embedding application created and owns (a game engine's): vkspec records on it and never
// destroys anything of it. Either vkspec submits on the application's queue (inside the lock callbacks, if
// given) or, with hand_over, the application submits what vkspec recorded (Unity's AccessQueue, Godot's
// RenderingDevice): vkspec then never touches a queue and learns of completion from its timeline semaphore.
// Vulkan cannot report which features a VkDevice was created with, so the application says which of those
// vkspec uses it enabled; vkspec uses no feature beyond them.
struct ExternalDevice {
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  uint32_t queue_family = 0;                 // must support compute
  VkQueue queue = VK_NULL_HANDLE;
  PFN_vkGetInstanceProcAddr get_instance_proc_addr = nullptr;   // null: the system loader's
  // Enabled at vkCreateDevice. Required: buffer_device_address (Vulkan 1.2).
  bool buffer_device_address = false, storage_16bit = false, storage_8bit = false, shader_float16 = false,
       shader_int8 = false, subgroup_size_control = false, push_descriptor = false,
       shader_integer_dot_product = false, cooperative_matrix_nv = false, cooperative_matrix_khr = false,
       vulkan_memory_model = false;
  // Held around every vkQueueSubmit vkspec makes (the queue may be shared with the application's threads).
  void (*lock_queue)(void* user) = nullptr;
  void (*unlock_queue)(void* user) = nullptr;
  void* lock_user = nullptr;
  // The engine-submits mode (needs timeline_semaphore enabled): returns false when the application could
  // not take the recording. Called on the thread of the vkspec call that submits.
  std::function<bool(const Handover&)> hand_over;
  bool timeline_semaphore = false;
};

// What vkspec needs of a device: the one source of the checks at device creation, at adoption and in
// device_requirements(). missing: each thing the device lacks ("" when none), comma-separated.
struct DeviceRequirements {
  uint32_t api_version = VK_API_VERSION_1_2;
  bool buffer_device_address = true;        // required
  bool subgroup_size_control = false;       // optional: enabled where the device has it
  bool timeline_semaphore = false;          // where the device has it: needed by the engine-submits mode
  bool integer_dot_product = false;         // optional, the int8dot matmul path: shaderIntegerDotProduct
  // optional, the coopmat path: cooperativeMatrix (KHR, NV) + shaderFloat16 + vulkanMemoryModel
  bool cooperative_matrix_khr = false, cooperative_matrix_nv = false, vulkan_memory_model = false;
  // optional ones the device has: VK_KHR_push_descriptor, VK_EXT_subgroup_size_control and the dot
  // product's and cooperative matrices' (at most vkspec_device_requirements' eight)
  std::vector<const char*> extensions;
  std::string missing;
};
DeviceRequirements device_requirements(const DeviceFacts& f, bool has_compute_queue);
// The same for a device of the application's instance (before it creates its VkDevice).
DeviceRequirements device_requirements(VkInstance instance, VkPhysicalDevice physical, PFN_vkGetInstanceProcAddr gipa);

struct VulkanDeviceOptions {
  int device_index = -1;      // -1: VKSPEC_DEVICE env, else best device (discrete > integrated > virtual > CPU)
  bool validation = false;    // also enabled by VKSPEC_VALIDATION=1
  const ExternalDevice* external = nullptr;   // use the application's device instead of creating one
};

class VulkanDevice {
 public:
  explicit VulkanDevice(const VulkanDeviceOptions& opts = {});
  ~VulkanDevice();
  VulkanDevice(const VulkanDevice&) = delete;
  VulkanDevice& operator=(const VulkanDevice&) = delete;

  // All physical devices with their facts (creates a temporary instance).
  static std::vector<DeviceFacts> list_devices();

  VkDevice device() const { return device_; }
  VkQueue queue() const { return queue_; }
  uint32_t queue_family() const { return queue_family_; }
  VkPhysicalDevice physical() const { return physical_; }
  const DeviceFacts& facts() const { return facts_; }
  const VkPhysicalDeviceMemoryProperties& memory_properties() const { return mem_props_; }
  bool validation_enabled() const { return messenger_ != VK_NULL_HANDLE; }
  bool external() const { return external_; }
  // Every queue submission goes through this (the external device's lock callbacks around it). si null:
  // no work, the fence only (signalled once all work submitted before it has completed).
  VkResult submit(const VkSubmitInfo* si, VkFence fence) const;
  // The engine-submits mode (ExternalDevice::hand_over): the application submits vkspec's recordings.
  // hand_over() gives it one and returns the timeline value its completion signals; reached() says whether
  // the timeline has got there, waiting up to timeout_ns (0: a look). Invariant: values are handed in
  // increasing order, each submission waiting for the one before (so their order on the device is vkspec's
  // whatever the order the application submits them in).
  bool engine_submits() const { return static_cast<bool>(hand_over_); }
  uint64_t hand_over(const VkCommandBuffer* cmds, uint32_t n);
  bool reached(uint64_t value, uint64_t timeout_ns) const;
  // Validation-layer warnings + errors seen so far (tests assert this stays 0).
  uint64_t validation_messages() const { return validation_messages_.load(); }
  std::string last_validation_message() const;

 private:
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  bool external_ = false;
  void (*lock_queue_)(void*) = nullptr;
  void (*unlock_queue_)(void*) = nullptr;
  void* lock_user_ = nullptr;
  std::function<bool(const Handover&)> hand_over_;
  VkSemaphore timeline_ = VK_NULL_HANDLE;   // the engine-submits mode's (vkspec's own object)
  std::mutex hand_over_mutex_;
  uint64_t handed_ = 0;                     // the last value handed over
  DeviceFacts facts_;
  VkPhysicalDeviceMemoryProperties mem_props_{};
  std::atomic<uint64_t> validation_messages_{0};
  std::string last_message_;

  void adopt(const ExternalDevice& e);
  static VKAPI_ATTR VkBool32 VKAPI_CALL on_debug_message(VkDebugUtilsMessageSeverityFlagBitsEXT,
                                                         VkDebugUtilsMessageTypeFlagsEXT,
                                                         const VkDebugUtilsMessengerCallbackDataEXT*, void*);
};

}  // namespace vkspec
