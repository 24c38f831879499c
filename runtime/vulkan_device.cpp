#include "runtime/vulkan_device.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <utility>

namespace vkspec {
namespace {

// Whether a cooperative-matrix extension's shapes (KHR's or NV's: the same fields but the result's name and
// KHR's saturation; the same component and scope values) list the matrix-unit builds' (shaders/coop_types.glsl):
// COOP_TILE cubed, f16 A and B, f32 C and result, a subgroup's.
template <class Shape, class Query>
bool lists_coop_shape(VkPhysicalDevice pd, Query query, Shape blank) {
  uint32_t n = 0;
  query(pd, &n, nullptr);
  std::vector<Shape> shapes(n, blank);
  query(pd, &n, shapes.data());
  return std::any_of(shapes.begin(), shapes.end(), [](const Shape& c) {
    constexpr uint32_t kF16 = VK_COMPONENT_TYPE_FLOAT16_KHR, kF32 = VK_COMPONENT_TYPE_FLOAT32_KHR, t = contract::COOP_TILE;
    bool result_f32 = false;
    if constexpr (std::is_same_v<Shape, VkCooperativeMatrixPropertiesKHR>)
      result_f32 = uint32_t(c.ResultType) == kF32 && !c.saturatingAccumulation;
    else
      result_f32 = uint32_t(c.DType) == kF32;
    return c.MSize == t && c.NSize == t && c.KSize == t && uint32_t(c.AType) == kF16 && uint32_t(c.BType) == kF16 &&
           uint32_t(c.CType) == kF32 && result_f32 && uint32_t(c.scope) == VK_SCOPE_SUBGROUP_KHR;
  });
}

std::mutex g_message_mutex;

// layer_version: the validation layer's specVersion when it is on (else 0).
VkInstance create_instance(bool validation, bool* debug_utils, uint32_t* layer_version = nullptr) {
  vk::load_loader();
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "vkspec";
  app.apiVersion = VK_API_VERSION_1_2;
  std::vector<const char*> layers, exts;
  *debug_utils = false;
  if (validation) {
    uint32_t n = 0;
    vk::vkEnumerateInstanceLayerProperties(&n, nullptr);
    std::vector<VkLayerProperties> props(n);
    vk::vkEnumerateInstanceLayerProperties(&n, props.data());
    bool found = false;
    for (auto& p : props)
      if (strcmp(p.layerName, "VK_LAYER_KHRONOS_validation") == 0) {
        found = true;
        if (layer_version) *layer_version = p.specVersion;
      }
    if (!found) throw Error("validation requested but VK_LAYER_KHRONOS_validation is not installed "
                            "(apt install vulkan-validationlayers)");
    layers.push_back("VK_LAYER_KHRONOS_validation");
    exts.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    *debug_utils = true;
  }
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  ci.enabledLayerCount = uint32_t(layers.size());
  ci.ppEnabledLayerNames = layers.data();
  ci.enabledExtensionCount = uint32_t(exts.size());
  ci.ppEnabledExtensionNames = exts.data();
  VkInstance inst = VK_NULL_HANDLE;
  VkResult r = vk::vkCreateInstance(&ci, nullptr, &inst);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER || r == VK_ERROR_INITIALIZATION_FAILED)
    throw Error("no Vulkan driver found. Install one, e.g. `apt install mesa-vulkan-drivers` (CPU: lavapipe) "
                "or your GPU vendor's Vulkan driver");
  vk_check(r, "vkCreateInstance");
  vk::load_instance(inst);
  return inst;
}

// VKSPEC_SUBMIT's values, which vkspec_device_info.submit prints back.

DeviceFacts probe(VkPhysicalDevice pd, uint32_t index) {
  DeviceFacts f;
  f.index = index;
  VkPhysicalDeviceSubgroupProperties sg{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceSubgroupSizeControlProperties sgc{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
  VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceIDProperties id{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES};
  sg.pNext = &sgc;
  sgc.pNext = &drv;
  drv.pNext = &id;
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p2.pNext = &sg;
  vk::vkGetPhysicalDeviceProperties2(pd, &p2);
  const auto& p = p2.properties;
  f.name = p.deviceName;
  f.type = p.deviceType;
  f.vendor_id = p.vendorID;
  f.api_version = p.apiVersion;
  f.driver = std::string(drv.driverName) + " " + drv.driverInfo;
  char hex[3];
  for (uint8_t b : id.deviceUUID) { snprintf(hex, sizeof hex, "%02x", b); f.uuid_hex += hex; }
  f.subgroup_size = sg.subgroupSize;
  f.subgroup_basic = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                     (sg.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT);
  f.subgroup_arithmetic = f.subgroup_basic && (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
  f.subgroup_shuffle = f.subgroup_basic && (sg.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
  f.min_subgroup_size = sgc.minSubgroupSize ? sgc.minSubgroupSize : sg.subgroupSize;
  f.max_subgroup_size = sgc.maxSubgroupSize ? sgc.maxSubgroupSize : sg.subgroupSize;
  f.compute_required_subgroup_size = (sgc.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
  f.max_storage_buffer_range = p.limits.maxStorageBufferRange;
  f.max_shared_memory = p.limits.maxComputeSharedMemorySize;
  f.max_workgroup_invocations = p.limits.maxComputeWorkGroupInvocations;
  f.max_push_constants = p.limits.maxPushConstantsSize;
  f.max_texel_buffer_elements = p.limits.maxTexelBufferElements;
  uint32_t n_ext = 0;
  vk::vkEnumerateDeviceExtensionProperties(pd, nullptr, &n_ext, nullptr);
  std::vector<VkExtensionProperties> exts(n_ext);
  vk::vkEnumerateDeviceExtensionProperties(pd, nullptr, &n_ext, exts.data());
  bool dot_extension = false, coopmat_nv_extension = false, subgroup_size_extension = false;
  for (auto& e : exts) {
    f.push_descriptor |= strcmp(e.extensionName, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME) == 0;
    dot_extension |= strcmp(e.extensionName, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME) == 0;
    f.cooperative_matrix |= strcmp(e.extensionName, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME) == 0;
    coopmat_nv_extension |= strcmp(e.extensionName, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) == 0;
    subgroup_size_extension |= strcmp(e.extensionName, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME) == 0;
  }
  const Settings settings = read_settings();
  f.discrete_memory = settings.discrete_memory;
  f.submit_split = settings.submit ? *settings.submit
                   : f.type == VK_PHYSICAL_DEVICE_TYPE_CPU ? SubmitSplit::Whole : SubmitSplit::Parts;
  f.timestamps = p.limits.timestampComputeAndGraphics && p.limits.timestampPeriod > 0;
  f.timestamp_period_ns = p.limits.timestampPeriod;

  VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  VkPhysicalDeviceProperties2 p3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p3.pNext = &m3;
  vk::vkGetPhysicalDeviceProperties2(pd, &p3);
  f.max_allocation_size = m3.maxMemoryAllocationSize;

  VkPhysicalDeviceVulkan11Features v11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features v12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceSubgroupSizeControlFeatures sgcf{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
  v11.pNext = &v12;
  v12.pNext = &sgcf;
  VkPhysicalDeviceShaderIntegerDotProductFeatures dotf{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
  VkPhysicalDeviceCooperativeMatrixFeaturesNV cmf{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  VkPhysicalDeviceCooperativeMatrixFeaturesKHR cmk{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
  void** chain = &sgcf.pNext;
  if (dot_extension) {
    *chain = &dotf;
    chain = &dotf.pNext;
  }
  if (coopmat_nv_extension) {
    *chain = &cmf;
    chain = &cmf.pNext;
  }
  if (f.cooperative_matrix) *chain = &cmk;
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  f2.pNext = &v11;
  vk::vkGetPhysicalDeviceFeatures2(pd, &f2);
  f.integer_dot_product = dotf.shaderIntegerDotProduct;
  f.vulkan_memory_model = v12.vulkanMemoryModel;
  // (the matrix-unit builds' SPIR-V uses f16 arithmetic and the Vulkan memory model)
  const bool coop_base = v12.shaderFloat16 && v12.vulkanMemoryModel;
  f.cooperative_matrix_khr = cmk.cooperativeMatrix && coop_base && vk::vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR &&
                             lists_coop_shape(pd, vk::vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR,
                                              VkCooperativeMatrixPropertiesKHR{VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR});
  f.cooperative_matrix_nv = cmf.cooperativeMatrix && coop_base && vk::vkGetPhysicalDeviceCooperativeMatrixPropertiesNV &&
                            lists_coop_shape(pd, vk::vkGetPhysicalDeviceCooperativeMatrixPropertiesNV,
                                             VkCooperativeMatrixPropertiesNV{VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
  if (f.integer_dot_product) {
    VkPhysicalDeviceShaderIntegerDotProductProperties dotp{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES};
    VkPhysicalDeviceProperties2 p4{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    p4.pNext = &dotp;
    vk::vkGetPhysicalDeviceProperties2(pd, &p4);
    f.integer_dot_accelerated = dotp.integerDotProduct4x8BitPackedSignedAccelerated;
  }

  f.storage_16bit = v11.storageBuffer16BitAccess;
  f.storage_8bit = v12.storageBuffer8BitAccess;
  f.shader_float16 = v12.shaderFloat16;
  f.shader_int8 = v12.shaderInt8;
  f.buffer_device_address = v12.bufferDeviceAddress;
  f.timeline_semaphore = v12.timelineSemaphore;
  // (a Vulkan 1.3 feature: vkspec's instance asks for 1.2, so it is enabled through the extension)
  f.subgroup_size_control = sgcf.subgroupSizeControl && subgroup_size_extension;

  VkPhysicalDeviceMemoryProperties mp;
  vk::vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  for (uint32_t i = 0; i < mp.memoryHeapCount; ++i)
    if (mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) f.device_local_bytes += mp.memoryHeaps[i].size;
  return f;
}

int type_rank(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 4;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 3;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 1;
    default: return 0;
  }
}

std::vector<VkPhysicalDevice> physical_devices(VkInstance inst) {
  uint32_t n = 0;
  vk_check(vk::vkEnumeratePhysicalDevices(inst, &n, nullptr), "vkEnumeratePhysicalDevices");
  std::vector<VkPhysicalDevice> pds(n);
  vk_check(vk::vkEnumeratePhysicalDevices(inst, &n, pds.data()), "vkEnumeratePhysicalDevices");
  if (pds.empty())
    throw Error("no Vulkan device found. Install a driver, e.g. `apt install mesa-vulkan-drivers` (CPU: lavapipe)");
  return pds;
}

}  // namespace

const char* DeviceFacts::submit_split_name() const { return vkspec::submit_split_name(submit_split); }

const char* DeviceFacts::type_name() const {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
  }
}

std::vector<DeviceFacts> VulkanDevice::list_devices() {
  bool dbg;
  VkInstance inst = create_instance(false, &dbg);
  std::vector<DeviceFacts> out;
  try {
    auto pds = physical_devices(inst);
    for (uint32_t i = 0; i < pds.size(); ++i) out.push_back(probe(pds[i], i));
  } catch (...) {
    vk::vkDestroyInstance(inst, nullptr);
    throw;
  }
  vk::vkDestroyInstance(inst, nullptr);
  return out;
}

VKAPI_ATTR VkBool32 VKAPI_CALL VulkanDevice::on_debug_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                         VkDebugUtilsMessageTypeFlagsEXT,
                                                         const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                         void* user) {
  auto* self = static_cast<VulkanDevice*>(user);
  if (severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
    self->validation_messages_++;
    std::lock_guard<std::mutex> lock(g_message_mutex);
    self->last_message_ = data->pMessage ? data->pMessage : "";
    fprintf(stderr, "vkspec: validation: %s\n", self->last_message_.c_str());
  }
  return VK_FALSE;
}

std::string VulkanDevice::last_validation_message() const {
  std::lock_guard<std::mutex> lock(g_message_mutex);
  return last_message_;
}

VkResult VulkanDevice::submit(const VkSubmitInfo* si, VkFence fence) const {
  if (lock_queue_) lock_queue_(lock_user_);
  const VkResult r = vk::vkQueueSubmit(queue_, si ? 1 : 0, si, fence);
  if (unlock_queue_) unlock_queue_(lock_user_);
  return r;
}

DeviceRequirements device_requirements(const DeviceFacts& f, bool has_compute_queue) {
  DeviceRequirements r;
  std::vector<std::string> lacks;
  if (f.api_version < r.api_version) lacks.push_back("Vulkan 1.2 (the device offers " + std::to_string(VK_API_VERSION_MAJOR(f.api_version)) + "." + std::to_string(VK_API_VERSION_MINOR(f.api_version)) + ")");
  if (!f.buffer_device_address) lacks.push_back("bufferDeviceAddress (Vulkan 1.2)");
  if (!f.subgroup_arithmetic) lacks.push_back("subgroup arithmetic in compute shaders");
  if (!has_compute_queue) lacks.push_back("a compute queue");
  for (const std::string& l : lacks) r.missing += (r.missing.empty() ? "" : ", ") + l;
  r.subgroup_size_control = f.subgroup_size_control;
  r.timeline_semaphore = f.timeline_semaphore;
  r.integer_dot_product = f.integer_dot_product;
  r.cooperative_matrix_nv = f.cooperative_matrix_nv;
  r.cooperative_matrix_khr = f.cooperative_matrix_khr;
  r.vulkan_memory_model = f.cooperative_matrix_nv || f.cooperative_matrix_khr;
  if (f.push_descriptor) r.extensions.push_back(VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
  if (f.subgroup_size_control) r.extensions.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  if (f.integer_dot_product) r.extensions.push_back(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
  if (f.cooperative_matrix_nv) r.extensions.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  if (f.cooperative_matrix_khr) r.extensions.push_back(VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);
  return r;
}

DeviceRequirements device_requirements(VkInstance instance, VkPhysicalDevice physical, PFN_vkGetInstanceProcAddr gipa) {
  if (!instance || !physical) throw Error("device requirements: an instance and a physical device are required");
  if (gipa) vk::use_loader(gipa);
  else vk::load_loader();
  vk::load_instance(instance);
  const DeviceFacts f = probe(physical, 0);
  uint32_t nq = 0;
  vk::vkGetPhysicalDeviceQueueFamilyProperties(physical, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vk::vkGetPhysicalDeviceQueueFamilyProperties(physical, &nq, qf.data());
  bool compute = false;
  for (const VkQueueFamilyProperties& q : qf) compute |= (q.queueFlags & VK_QUEUE_COMPUTE_BIT) != 0;
  return device_requirements(f, compute);
}

void VulkanDevice::adopt(const ExternalDevice& e) {
  if (!e.instance || !e.physical || !e.device) throw Error("external device: instance, physical device and device are required");
  if (!e.queue && !e.hand_over) throw Error("external device: a queue, or a submit callback (the engine-submits mode), is required");
  if (!!e.lock_queue != !!e.unlock_queue) throw Error("external device: give both queue lock callbacks or neither");
  if (e.hand_over && e.lock_queue) throw Error("external device: queue lock callbacks or a submit callback, not both");
  if (e.get_instance_proc_addr) vk::use_loader(e.get_instance_proc_addr);
  else vk::load_loader();
  vk::load_instance(e.instance);
  external_ = true;
  instance_ = e.instance;
  physical_ = e.physical;
  facts_ = probe(physical_, 0);
  // What the application enabled bounds what the kernels use.
  std::string missing = device_requirements(facts_, true).missing;
  if (!e.buffer_device_address && facts_.buffer_device_address)
    missing += std::string(missing.empty() ? "" : ", ") + "bufferDeviceAddress enabled at vkCreateDevice (vkspec_device_requirements_get)";
  if (e.hand_over && !(e.timeline_semaphore && facts_.timeline_semaphore))
    missing += std::string(missing.empty() ? "" : ", ") + "timelineSemaphore enabled at vkCreateDevice (the engine-submits mode)";
  if (!missing.empty()) throw Error("external device '" + facts_.name + "' lacks what vkspec needs: " + missing);
  facts_.storage_16bit &= e.storage_16bit;
  facts_.storage_8bit &= e.storage_8bit;
  facts_.shader_float16 &= e.shader_float16;
  facts_.shader_int8 &= e.shader_int8;
  facts_.subgroup_size_control &= e.subgroup_size_control;
  facts_.push_descriptor &= e.push_descriptor;
  facts_.integer_dot_product &= e.shader_integer_dot_product;
  facts_.vulkan_memory_model &= e.vulkan_memory_model;
  facts_.cooperative_matrix_nv &= e.cooperative_matrix_nv && e.shader_float16 && e.vulkan_memory_model;
  facts_.cooperative_matrix_khr &= e.cooperative_matrix_khr && e.shader_float16 && e.vulkan_memory_model;
  vk::vkGetPhysicalDeviceMemoryProperties(physical_, &mem_props_);
  uint32_t nq = 0;
  vk::vkGetPhysicalDeviceQueueFamilyProperties(physical_, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vk::vkGetPhysicalDeviceQueueFamilyProperties(physical_, &nq, qf.data());
  if (e.queue_family >= nq || !(qf[e.queue_family].queueFlags & VK_QUEUE_COMPUTE_BIT))
    throw Error("external device: queue family " + std::to_string(e.queue_family) + " does not support compute");
  if (qf[e.queue_family].timestampValidBits == 0) facts_.timestamps = false;
  queue_family_ = e.queue_family;
  device_ = e.device;
  queue_ = e.queue;
  lock_queue_ = e.lock_queue;
  unlock_queue_ = e.unlock_queue;
  lock_user_ = e.lock_user;
  vk::load_device(instance_, device_);
  if (e.hand_over) {
    VkSemaphoreTypeCreateInfo ti{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
    ti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
    VkSemaphoreCreateInfo si{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
    si.pNext = &ti;
    vk_check(vk::vkCreateSemaphore(device_, &si, nullptr, &timeline_), "vkCreateSemaphore (timeline)");
    hand_over_ = e.hand_over;
  }
}

uint64_t VulkanDevice::hand_over(const VkCommandBuffer* cmds, uint32_t n) {
  std::lock_guard<std::mutex> lock(hand_over_mutex_);
  Handover h;
  h.command_buffers = cmds;
  h.n_command_buffers = n;
  h.semaphore = timeline_;
  h.wait_value = handed_;
  h.signal_value = handed_ + 1;
  if (!hand_over_(h)) throw Error("the application's submit callback did not take vkspec's recording");
  return ++handed_;
}

bool VulkanDevice::reached(uint64_t value, uint64_t timeout_ns) const {
  VkSemaphoreWaitInfo wi{VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
  wi.semaphoreCount = 1;
  wi.pSemaphores = &timeline_;
  wi.pValues = &value;
  const VkResult r = vk::vkWaitSemaphores(device_, &wi, timeout_ns);
  if (r == VK_TIMEOUT) return false;
  vk_check(r, "vkWaitSemaphores");
  return true;
}

VulkanDevice::VulkanDevice(const VulkanDeviceOptions& opts) {
  if (opts.external) {
    adopt(*opts.external);
    return;
  }
  const Settings settings = read_settings();
  const bool validation = opts.validation || settings.validation;
  bool debug_utils = false;
  uint32_t layer_version = 0;
  instance_ = create_instance(validation, &debug_utils, &layer_version);
  try {
    if (debug_utils) {
      VkDebugUtilsMessengerCreateInfoEXT mi{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
      mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
      mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
      mi.pfnUserCallback = &VulkanDevice::on_debug_message;
      mi.pUserData = this;
      vk_check(vk::vkCreateDebugUtilsMessengerEXT(instance_, &mi, nullptr, &messenger_), "create debug messenger");
    }
    auto pds = physical_devices(instance_);
    int index = opts.device_index;
    if (index < 0) index = settings.device;
    if (index >= int(pds.size()))
      throw Error("device " + std::to_string(index) + " does not exist (" + std::to_string(pds.size()) +
                  " Vulkan device(s); see `vkspec devices`)");
    if (index < 0) {
      int best = -1;
      for (uint32_t i = 0; i < pds.size(); ++i) {
        DeviceFacts f = probe(pds[i], i);
        if (!f.buffer_device_address) continue;
        if (best < 0 || type_rank(f.type) > type_rank(probe(pds[best], best).type)) best = int(i);
      }
      if (best < 0) throw Error("no Vulkan device supports bufferDeviceAddress (Vulkan 1.2), which vkspec needs");
      index = best;
    }
    physical_ = pds[index];
    facts_ = probe(physical_, uint32_t(index));
    // A validation layer older than VK_KHR_cooperative_matrix (Debian 12's, 1.3.239) reports its structures at
    // vkCreateDevice and its SPIR-V as errors: under such a layer the KHR build is not used (NV's is, if any).
    if (layer_version && layer_version < kKhrCooperativeMatrixHeader) facts_.cooperative_matrix_khr = false;
    vk::vkGetPhysicalDeviceMemoryProperties(physical_, &mem_props_);

    uint32_t nq = 0;
    vk::vkGetPhysicalDeviceQueueFamilyProperties(physical_, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> qf(nq);
    vk::vkGetPhysicalDeviceQueueFamilyProperties(physical_, &nq, qf.data());
    queue_family_ = UINT32_MAX;
    for (uint32_t i = 0; i < nq && queue_family_ == UINT32_MAX; ++i)
      if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) queue_family_ = i;
    const DeviceRequirements req = device_requirements(facts_, queue_family_ != UINT32_MAX);
    if (!req.missing.empty()) throw Error("device '" + facts_.name + "' lacks what vkspec needs: " + req.missing);
    if (qf[queue_family_].timestampValidBits == 0) facts_.timestamps = false;

    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qci.queueFamilyIndex = queue_family_;
    qci.queueCount = 1;
    qci.pQueuePriorities = &prio;
    VkPhysicalDeviceVulkan11Features v11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceVulkan12Features v12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceSubgroupSizeControlFeatures sgcf{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
    // Only what the shaders use: buffer device addresses (and subgroup size control, integer dot products and
    // cooperative matrices where the device has them: device_requirements). 8- and 16-bit storage is probed
    // (DeviceFacts) but no kernel uses it, so it is not enabled.
    v11.pNext = &v12;
    v12.bufferDeviceAddress = VK_TRUE;
    void** chain = &v12.pNext;
    if (req.subgroup_size_control) {
      *chain = &sgcf;
      chain = &sgcf.pNext;
      sgcf.subgroupSizeControl = VK_TRUE;
    }
    VkPhysicalDeviceShaderIntegerDotProductFeatures dotf{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
    if (req.integer_dot_product) {   // the int8dot matmul path (runtime/kernels.h choose_kernels)
      *chain = &dotf;
      chain = &dotf.pNext;
      dotf.shaderIntegerDotProduct = VK_TRUE;
    }
    // the coopmat matmul path: f16 tiles on matrix units, SPIR-V in the Vulkan memory model
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cmf{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    if (req.cooperative_matrix_nv) {
      *chain = &cmf;
      chain = &cmf.pNext;
      cmf.cooperativeMatrix = VK_TRUE;
    }
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR cmk{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
    if (req.cooperative_matrix_khr) {
      *chain = &cmk;
      cmk.cooperativeMatrix = VK_TRUE;
    }
    if (req.cooperative_matrix_nv || req.cooperative_matrix_khr) v12.shaderFloat16 = VK_TRUE;
    if (req.vulkan_memory_model) v12.vulkanMemoryModel = VK_TRUE;
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f2.pNext = &v11;
    VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    dci.pNext = &f2;
    dci.enabledExtensionCount = uint32_t(req.extensions.size());
    dci.ppEnabledExtensionNames = req.extensions.data();
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    vk_check(vk::vkCreateDevice(physical_, &dci, nullptr, &device_), "vkCreateDevice");
    vk::load_device(instance_, device_);
    vk::vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
  } catch (...) {
    if (messenger_) vk::vkDestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
    vk::vkDestroyInstance(instance_, nullptr);
    throw;
  }
}

VulkanDevice::~VulkanDevice() {
  if (external_) {   // the application's: vkspec's own objects are gone by now (they belong to its owners)
    if (timeline_) vk::vkDestroySemaphore(device_, timeline_, nullptr);
    return;
  }
  if (device_) {
    vk::vkDeviceWaitIdle(device_);
    vk::vkDestroyDevice(device_, nullptr);
  }
  if (messenger_) vk::vkDestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
  if (instance_) vk::vkDestroyInstance(instance_, nullptr);
}

}  // namespace vkspec
