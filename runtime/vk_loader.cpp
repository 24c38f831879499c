#include "runtime/vk_loader.h"

#include <mutex>

#include "platform/platform.h"

namespace vkspec {

const char* vk_result_name(VkResult r) {
  switch (r) {
#define CASE(x) case x: return #x;
    CASE(VK_SUCCESS) CASE(VK_NOT_READY) CASE(VK_TIMEOUT) CASE(VK_INCOMPLETE)
    CASE(VK_ERROR_OUT_OF_HOST_MEMORY) CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    CASE(VK_ERROR_INITIALIZATION_FAILED) CASE(VK_ERROR_DEVICE_LOST) CASE(VK_ERROR_MEMORY_MAP_FAILED)
    CASE(VK_ERROR_LAYER_NOT_PRESENT) CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    CASE(VK_ERROR_FEATURE_NOT_PRESENT) CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    CASE(VK_ERROR_TOO_MANY_OBJECTS) CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
    CASE(VK_ERROR_INVALID_SHADER_NV) CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
#undef CASE
    default: return "VkResult(unknown)";
  }
}

void vk_check(VkResult r, const char* what) {
  if (r == VK_SUCCESS) return;
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
    throw Error(std::string("out of ") + (r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? "device" : "host") +
                " memory: " + what + " (try a smaller --ctx or a smaller model)");
  throw Error(std::string(what) + " failed: " + vk_result_name(r));
}

namespace vk {
#define VKSPEC_DEFINE(name) PFN_##name name = nullptr;
VKSPEC_INSTANCE_FUNCS(VKSPEC_DEFINE)
VKSPEC_DEVICE_FUNCS(VKSPEC_DEFINE)
#undef VKSPEC_DEFINE
PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
PFN_vkCmdPushDescriptorSetKHR vkCmdPushDescriptorSetKHR = nullptr;
PFN_vkCreateInstance vkCreateInstance = nullptr;
PFN_vkEnumerateInstanceLayerProperties vkEnumerateInstanceLayerProperties = nullptr;
PFN_vkEnumerateInstanceExtensionProperties vkEnumerateInstanceExtensionProperties = nullptr;
std::mutex g_loader_mutex;   // loads (model loads, device listings) from several threads

void load_loader() {
  if (vkGetInstanceProcAddr) return;
  void* lib = platform::open_vulkan_loader();
  if (!lib) throw Error(platform::vulkan_loader_advice());
  auto gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(platform::library_symbol(lib, "vkGetInstanceProcAddr"));
  if (!gipa) throw Error("the Vulkan loader has no vkGetInstanceProcAddr");
  use_loader(gipa);
}

// The entry points are process-wide: every model of the process (an engine's plugin beside another's) uses
// one Vulkan loader. Each is stored only where it changes, so that a second model's load, which finds the
// same trampolines, writes nothing that a running model reads.
template <class F>
void store(F& slot, F value) {
  if (slot != value) slot = value;
}

void use_loader(PFN_vkGetInstanceProcAddr gipa) {
#ifdef VKSPEC_SANITIZED_BUILD
  platform::pin_vulkan_driver_modules();   // lavapipe's process-wide caches stay named for LeakSanitizer
#endif
  std::lock_guard<std::mutex> lock(g_loader_mutex);
  if (vkGetInstanceProcAddr && vkGetInstanceProcAddr != gipa && vkCreateInstance &&
      reinterpret_cast<PFN_vkCreateInstance>(gipa(nullptr, "vkCreateInstance")) != vkCreateInstance)
    throw Error("vkspec already uses another Vulkan loader in this process: every device handed to it must come "
                "from the same loader (its vkGetInstanceProcAddr)");
  if (vkGetInstanceProcAddr) return;
  vkGetInstanceProcAddr = gipa;
  vkCreateInstance = reinterpret_cast<PFN_vkCreateInstance>(vkGetInstanceProcAddr(nullptr, "vkCreateInstance"));
  vkEnumerateInstanceLayerProperties = reinterpret_cast<PFN_vkEnumerateInstanceLayerProperties>(
      vkGetInstanceProcAddr(nullptr, "vkEnumerateInstanceLayerProperties"));
  vkEnumerateInstanceExtensionProperties = reinterpret_cast<PFN_vkEnumerateInstanceExtensionProperties>(
      vkGetInstanceProcAddr(nullptr, "vkEnumerateInstanceExtensionProperties"));
}

void load_instance(VkInstance instance) {
  std::lock_guard<std::mutex> lock(g_loader_mutex);
#define LOAD(name) store(name, reinterpret_cast<PFN_##name>(vkGetInstanceProcAddr(instance, #name)));
  VKSPEC_INSTANCE_FUNCS(LOAD)
#undef LOAD
}

// Device-level commands are the loader's trampolines (vkGetInstanceProcAddr), which dispatch on the device
// handle, not vkGetDeviceProcAddr's per-device pointers: these pointers are process-wide, and several
// devices may live at once (two models, an application's device beside ours). A pointer that
// vkGetDeviceProcAddr gave for one device may be dead once that device is destroyed (an implicit layer's
// dispatch): a VulkanDevice destroyed after another was created made the first one crash in vkDestroyQueryPool.
void load_device(VkInstance instance, VkDevice device) {
  (void)device;
  std::lock_guard<std::mutex> lock(g_loader_mutex);
#define LOAD(name)                                                                       \
  store(name, reinterpret_cast<PFN_##name>(vkGetInstanceProcAddr(instance, #name)));     \
  if (!name) throw Error("Vulkan driver lacks " #name);
  VKSPEC_DEVICE_FUNCS(LOAD)
#undef LOAD
  store(vkCmdPushDescriptorSetKHR,
        reinterpret_cast<PFN_vkCmdPushDescriptorSetKHR>(vkGetInstanceProcAddr(instance, "vkCmdPushDescriptorSetKHR")));
}
}  // namespace vk
}  // namespace vkspec
