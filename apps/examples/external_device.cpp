// external_device MODEL PROMPT N: as generate.c, but the program creates the Vulkan instance, device and
// queue itself (as a game engine does) and hands them to vkspec, which then runs on them, taking the
// program's queue lock around each submission. Prints the same text as `vkspec run ... --temp 0`.
//   c++ -std=c++17 external_device.cpp $(pkg-config --cflags --libs vkspec) -lvulkan
#include <vulkan/vulkan.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "vkspec.h"

namespace {

void check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) {
    fprintf(stderr, "external_device: %s failed (%d)\n", what, int(r));
    exit(1);
  }
}

struct Device {   // what the application owns
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  uint32_t family = 0;
  vkspec_external_device handoff{};
  std::mutex queue_lock;   // the application's own submissions would take it too
  int lock_calls = 0;
};

void create(Device& d) {
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ici.pApplicationInfo = &app;
  check(vkCreateInstance(&ici, nullptr, &d.instance), "vkCreateInstance");
  uint32_t n = 0;
  vkEnumeratePhysicalDevices(d.instance, &n, nullptr);
  std::vector<VkPhysicalDevice> pds(n);
  vkEnumeratePhysicalDevices(d.instance, &n, pds.data());
  const char* pick = getenv("VKSPEC_DEVICE");
  if (pds.empty()) check(VK_ERROR_INITIALIZATION_FAILED, "finding a Vulkan device");
  d.physical = pds[pick && *pick ? std::min<size_t>(strtoul(pick, nullptr, 10), pds.size() - 1) : 0];

  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(d.physical, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(d.physical, &nq, qf.data());
  while (d.family < nq && !(qf[d.family].queueFlags & VK_QUEUE_COMPUTE_BIT)) ++d.family;

  // Enable what vkspec asks of this device (merged into the application's own features, in an engine), and
  // tell vkspec exactly that.
  vkspec_device_requirements req{};
  if (vkspec_device_requirements_get(d.instance, d.physical, reinterpret_cast<void (*)(void)>(&vkGetInstanceProcAddr),
                                     &req) != VKSPEC_OK) {
    fprintf(stderr, "external_device: %s\n", vkspec_last_error());
    exit(1);
  }
  VkPhysicalDeviceVulkan12Features e12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceSubgroupSizeControlFeatures esgc{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
  VkPhysicalDeviceFeatures2 ef2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  ef2.pNext = &e12;
  e12.bufferDeviceAddress = req.buffer_device_address ? VK_TRUE : VK_FALSE;
  if (req.subgroup_size_control) {
    e12.pNext = &esgc;
    esgc.subgroupSizeControl = VK_TRUE;
  }
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = d.family;
  qci.queueCount = 1;
  qci.pQueuePriorities = &prio;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = &ef2;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = req.n_extensions;
  dci.ppEnabledExtensionNames = req.extensions;
  check(vkCreateDevice(d.physical, &dci, nullptr, &d.device), "vkCreateDevice");
  vkGetDeviceQueue(d.device, d.family, 0, &d.queue);

  vkspec_external_device& h = d.handoff;
  h.instance = d.instance;
  h.physical_device = d.physical;
  h.device = d.device;
  h.queue_family_index = d.family;
  h.queue = d.queue;
  h.get_instance_proc_addr = reinterpret_cast<void (*)(void)>(&vkGetInstanceProcAddr);
  h.buffer_device_address = e12.bufferDeviceAddress;
  h.subgroup_size_control = esgc.subgroupSizeControl;
  for (uint32_t i = 0; i < req.n_extensions; ++i)
    h.push_descriptor |= strcmp(req.extensions[i], VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME) == 0;
  h.lock_user = &d;
  h.lock_queue = [](void* u) {
    auto* dev = static_cast<Device*>(u);
    dev->queue_lock.lock();
    dev->lock_calls++;
  };
  h.unlock_queue = [](void* u) { static_cast<Device*>(u)->queue_lock.unlock(); };
}

int fail(const char* what, vkspec_status s) {
  fprintf(stderr, "external_device: %s: %s: %s\n", what, vkspec_status_name(s), vkspec_last_error());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: external_device MODEL.gguf PROMPT N\n");
    return 2;
  }
  Device d;
  create(d);
  vkspec_model_params mp = vkspec_model_default_params();
  mp.external = &d.handoff;
  vkspec_model* model = nullptr;
  vkspec_status s = vkspec_model_load(argv[1], &mp, &model);
  if (s != VKSPEC_OK) return fail("loading the model", s);
  size_t n = 0;
  vkspec_tokenize(model, argv[2], strlen(argv[2]), 1, 1, nullptr, 0, &n);
  std::vector<int32_t> prompt(n);
  if ((s = vkspec_tokenize(model, argv[2], strlen(argv[2]), 1, 1, prompt.data(), n, &n)) != VKSPEC_OK) return fail("tokenize", s);
  vkspec_context_params cp = vkspec_context_default_params();
  cp.sampling.temperature = 0.0f;
  vkspec_context* ctx = nullptr;
  if ((s = vkspec_context_create(model, &cp, &ctx)) != VKSPEC_OK) return fail("creating a context", s);
  vkspec_generate_params gp = vkspec_generate_default_params();
  gp.n_predict = atoi(argv[3]);
  gp.on_token = [](int32_t, const char* piece, size_t len, int32_t, void*) {
    return int(fwrite(piece, 1, len, stdout) != len || fflush(stdout) != 0);
  };
  if ((s = vkspec_generate(ctx, prompt.data(), prompt.size(), &gp)) != VKSPEC_OK) return fail("generate", s);
  printf("\n");
  vkspec_context_free(ctx);
  vkspec_model_free(model);
  fprintf(stderr, "external_device: vkspec took the queue lock %d times\n", d.lock_calls);
  vkDestroyDevice(d.device, nullptr);   // the application's objects, destroyed by the application
  vkDestroyInstance(d.instance, nullptr);
  return d.lock_calls > 0 ? 0 : 1;
}
