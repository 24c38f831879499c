#pragma once
// Vulkan entry points, loaded at run time from libvulkan.so.1 so that a machine without a Vulkan
// loader gets a clear message ("install libvulkan1 ...") instead of a dynamic-linker failure.
#include "core/core.h"
#include <vulkan/vulkan.h>

#include "runtime/vk_khr_cooperative_matrix.h"

#include <stdexcept>
#include <string>

#define VKSPEC_INSTANCE_FUNCS(X)                                                                   \
  X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)              \
  X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceFeatures2)                                \
  X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkGetPhysicalDeviceMemoryProperties)               \
  X(vkEnumerateDeviceExtensionProperties) X(vkCreateDevice) X(vkGetDeviceProcAddr)                 \
  X(vkCreateDebugUtilsMessengerEXT) X(vkDestroyDebugUtilsMessengerEXT)                           \
  X(vkGetPhysicalDeviceCooperativeMatrixPropertiesNV) X(vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)

#define VKSPEC_DEVICE_FUNCS(X)                                                                     \
  X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkAllocateMemory) X(vkFreeMemory) X(vkMapMemory)        \
  X(vkUnmapMemory) X(vkCreateBuffer) X(vkDestroyBuffer) X(vkGetBufferMemoryRequirements)           \
  X(vkBindBufferMemory) X(vkGetBufferDeviceAddress) X(vkCreateShaderModule)                        \
  X(vkDestroyShaderModule) X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout)                    \
  X(vkCreateComputePipelines) X(vkDestroyPipeline) X(vkCreatePipelineCache)                        \
  X(vkDestroyPipelineCache) X(vkGetPipelineCacheData) X(vkCreateCommandPool)                       \
  X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) X(vkBeginCommandBuffer)                      \
  X(vkEndCommandBuffer) X(vkResetCommandBuffer) X(vkCmdBindPipeline) X(vkCmdPushConstants)         \
  X(vkCmdDispatch) X(vkCmdPipelineBarrier) X(vkCmdCopyBuffer) X(vkCmdFillBuffer)                   \
  X(vkCmdWriteTimestamp) X(vkCmdResetQueryPool) X(vkCreateQueryPool) X(vkDestroyQueryPool)         \
  X(vkGetQueryPoolResults) X(vkQueueSubmit) X(vkCreateFence) X(vkDestroyFence) X(vkWaitForFences)  \
  X(vkResetFences) X(vkDeviceWaitIdle) X(vkFlushMappedMemoryRanges)                                \
  X(vkInvalidateMappedMemoryRanges) X(vkCreateBufferView) X(vkDestroyBufferView)                  \
  X(vkCreateDescriptorSetLayout) X(vkDestroyDescriptorSetLayout) X(vkCreateSemaphore)              \
  X(vkDestroySemaphore) X(vkWaitSemaphores)

namespace vkspec {


const char* vk_result_name(VkResult r);
// Throws Error("<what>: <VkResult name>"); out-of-memory results get a dedicated message.
void vk_check(VkResult r, const char* what);

namespace vk {
#define VKSPEC_DECLARE(name) extern PFN_##name name;
VKSPEC_INSTANCE_FUNCS(VKSPEC_DECLARE)
VKSPEC_DEVICE_FUNCS(VKSPEC_DECLARE)
extern PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
extern PFN_vkCmdPushDescriptorSetKHR vkCmdPushDescriptorSetKHR;   // callable when DeviceFacts::push_descriptor
extern PFN_vkCreateInstance vkCreateInstance;
extern PFN_vkEnumerateInstanceLayerProperties vkEnumerateInstanceLayerProperties;
extern PFN_vkEnumerateInstanceExtensionProperties vkEnumerateInstanceExtensionProperties;
#undef VKSPEC_DECLARE

void load_loader();                     // libvulkan.so.1 / vulkan-1.dll (platform/); throws Error if absent
void use_loader(PFN_vkGetInstanceProcAddr gipa);   // an application's loader entry point instead
void load_instance(VkInstance instance);
// Device-level commands: the loader's trampolines, valid for every device of any instance (see the .cpp).
void load_device(VkInstance instance, VkDevice device);
}  // namespace vk
}  // namespace vkspec
