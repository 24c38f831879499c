// What an application (a game engine) does before it hands its Vulkan device to vkspec: creates the instance,
// asks vkspec_device_requirements_get what to enable, merges that into its own VkDeviceCreateInfo, creates
// the device and a compute-capable queue, and fills a vkspec_external_device with exactly what it enabled.
// Shared by the examples external_device.cpp and frame_loop.cpp.
#pragma once
#include <vulkan/vulkan.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "vkspec.h"

inline void vk_or_exit(VkResult r, const char* what) {
  if (r != VK_SUCCESS) {
    fprintf(stderr, "%s failed (%d)\n", what, int(r));
    exit(1);
  }
}

struct AppDevice {
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  uint32_t family = 0;
  vkspec_external_device handoff{};   // vkspec submits on `queue` inside queue_lock (the lock mode)
  std::mutex queue_lock;              // the application's own submissions take it too
  int lock_calls = 0;

  AppDevice() {
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ici.pApplicationInfo = &app;
    vk_or_exit(vkCreateInstance(&ici, nullptr, &instance), "vkCreateInstance");
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(instance, &n, nullptr);
    std::vector<VkPhysicalDevice> pds(n);
    vkEnumeratePhysicalDevices(instance, &n, pds.data());
    const char* pick = getenv("VKSPEC_DEVICE");
    if (pds.empty()) vk_or_exit(VK_ERROR_INITIALIZATION_FAILED, "finding a Vulkan device");
    physical = pds[pick && *pick ? std::min<size_t>(strtoul(pick, nullptr, 10), pds.size() - 1) : 0];

    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(physical, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> qf(nq);
    vkGetPhysicalDeviceQueueFamilyProperties(physical, &nq, qf.data());
    while (family < nq && !(qf[family].queueFlags & VK_QUEUE_COMPUTE_BIT)) ++family;

    // Enable what vkspec asks of this device (merged into the application's own features, in an engine), and
    // tell vkspec exactly that.
    vkspec_device_requirements req{};
    if (vkspec_device_requirements_get(instance, physical, reinterpret_cast<void (*)(void)>(&vkGetInstanceProcAddr), &req) !=
        VKSPEC_OK) {
      fprintf(stderr, "%s\n", vkspec_last_error());
      exit(1);
    }
    VkPhysicalDeviceVulkan12Features e12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceSubgroupSizeControlFeatures esgc{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
    VkPhysicalDeviceFeatures2 ef2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    ef2.pNext = &e12;
    e12.bufferDeviceAddress = req.buffer_device_address ? VK_TRUE : VK_FALSE;
    e12.timelineSemaphore = req.timeline_semaphore ? VK_TRUE : VK_FALSE;   // for the engine-submits mode
    if (req.subgroup_size_control) {
      e12.pNext = &esgc;
      esgc.subgroupSizeControl = VK_TRUE;
    }
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qci.queueFamilyIndex = family;
    qci.queueCount = 1;
    qci.pQueuePriorities = &prio;
    VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    dci.pNext = &ef2;
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    dci.enabledExtensionCount = req.n_extensions;
    dci.ppEnabledExtensionNames = req.extensions;
    vk_or_exit(vkCreateDevice(physical, &dci, nullptr, &device), "vkCreateDevice");
    vkGetDeviceQueue(device, family, 0, &queue);

    vkspec_external_device& h = handoff;
    h.instance = instance;
    h.physical_device = physical;
    h.device = device;
    h.queue_family_index = family;
    h.queue = queue;
    h.get_instance_proc_addr = reinterpret_cast<void (*)(void)>(&vkGetInstanceProcAddr);
    h.buffer_device_address = e12.bufferDeviceAddress;
    h.subgroup_size_control = esgc.subgroupSizeControl;
    h.timeline_semaphore = e12.timelineSemaphore;
    for (uint32_t i = 0; i < req.n_extensions; ++i)
      h.push_descriptor |= strcmp(req.extensions[i], VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME) == 0;
    h.lock_user = this;
    h.lock_queue = [](void* u) {
      auto* d = static_cast<AppDevice*>(u);
      d->queue_lock.lock();
      d->lock_calls++;
    };
    h.unlock_queue = [](void* u) { static_cast<AppDevice*>(u)->queue_lock.unlock(); };
  }
  ~AppDevice() {   // the application's objects, destroyed by the application once vkspec's model is freed
    vkDestroyDevice(device, nullptr);
    vkDestroyInstance(instance, nullptr);
  }
  AppDevice(const AppDevice&) = delete;
  AppDevice& operator=(const AppDevice&) = delete;
};
