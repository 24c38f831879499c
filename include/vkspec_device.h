/* vkspec: Vulkan devices in the C API, included by vkspec.h (not on its own): the devices vkspec sees and
 * what it would choose on each, and the external device mode: the application's own instance, device and queue
 * (a game engine's), what vkspec needs of that device, and the recordings it hands over when the engine submits. */
#ifndef VKSPEC_DEVICE_H
#define VKSPEC_DEVICE_H
#ifndef VKSPEC_H
#error "include vkspec.h, which includes this header"
#endif

typedef struct vkspec_device_info {
  uint32_t index;              /* what vkspec_model_params.device takes */
  char name[256];
  char type[16];               /* "discrete", "integrated", "virtual", "CPU", "other" */
  char driver[128];
  char uuid[33];               /* hex; the same device listed twice (two drivers) shares it */
  uint32_t subgroup_size;
  uint64_t device_local_bytes;
  uint64_t max_storage_buffer_range;
  int32_t shader_float16, storage_8bit, storage_16bit, timestamps; /* 0 or 1 */
  char kernel_family[16];      /* "subgroup" or "row-per-lane" */
  char api_version[16];        /* Vulkan version the driver offers, "1.3.255" */
  uint32_t min_subgroup_size, max_subgroup_size;
  int32_t subgroup_size_control, subgroup_arithmetic, shader_int8, buffer_device_address; /* 0 or 1 */
  uint32_t max_shared_memory;  /* bytes per workgroup */
  uint64_t max_allocation_size;
  char memory_model[16];       /* "discrete" (device memory only through staging copies) or "mapped" */
  char submit[16];             /* how a step's recording is submitted: "parts" (GPUs: the device starts
                                  while the host records), "whole" (CPU devices), "barriers" (a test mode) */
  /* API version 14: packed 4x8-bit integer dot products (shaderIntegerDotProduct), whether the driver says
     they are accelerated, VK_KHR_cooperative_matrix and VK_NV_cooperative_matrix (with 16x16x16 f16 tiles)
     offered (0 or 1); the matmuls' arithmetic under the environment (VKSPEC_MATMUL): "fma", "int8dot",
     "coopmat", "coopmat-emulated", or "refused" where the requested one cannot run */
  int32_t integer_dot_product, integer_dot_accelerated, cooperative_matrix, cooperative_matrix_nv;
  char matmul_path[24];
  /* API version 16: vulkanMemoryModel (the matrix-unit kernels' SPIR-V uses it); VK_KHR_cooperative_matrix
     with 16x16x16 f16 tiles (what the coopmat path takes first; cooperative_matrix_nv now also needs
     vulkan_memory_model) */
  int32_t vulkan_memory_model, cooperative_matrix_khr;
} vkspec_device_info;

/* Fills up to `capacity` entries; *count is the number of devices. */
VKSPEC_API vkspec_status vkspec_list_devices(vkspec_device_info* out, uint32_t capacity, uint32_t* count);
/* One recording of vkspec's, handed to the application in the engine-submits mode (API version 11): submit
 * the command buffers, in order, on a queue of queue_family_index, with a VkTimelineSemaphoreSubmitInfo that
 * waits for `semaphore` to reach wait_value (at VK_PIPELINE_STAGE_ALL_COMMANDS_BIT) and signals signal_value
 * when they are done. The struct and its array are valid during the callback only (copy the handles); the
 * command buffers stay valid until vkspec has seen signal_value. Each handed recording waits for the one
 * before, so recordings may be submitted late, batched or in any order, but every one must be submitted. */
typedef struct vkspec_submission {
  uint32_t n_command_buffers;
  void* const* command_buffers;   /* VkCommandBuffer (primary) */
  void* semaphore;                /* VkSemaphore of type VK_SEMAPHORE_TYPE_TIMELINE, vkspec's */
  uint64_t wait_value, signal_value;
} vkspec_submission;

/* The application's Vulkan objects (handles passed as pointers, so this header needs no Vulkan headers):
 * VkInstance, VkPhysicalDevice, VkDevice, VkQueue and PFN_vkGetInstanceProcAddr. The device must have been
 * created with bufferDeviceAddress (Vulkan 1.2) enabled; the optional features below are used only when the
 * application says it enabled them. All must outlive the model.
 * Two modes: vkspec submits on `queue` (taking lock_queue/unlock_queue around each vkQueueSubmit, when given),
 * or the engine submits: with `submit` set, vkspec never touches a queue (`queue` may be NULL) and hands each
 * recording to submit() instead, on the thread of the vkspec call that records it (under max_device_us, each
 * release of a recording's parts: also vkspec_step_poll's and vkspec_step_wait's); it learns of completion
 * from its timeline semaphore (timelineSemaphore must be enabled) and never waits on a queue. submit() returns
 * 0 when it took the recording. Calls that block (vkspec_model_load, vkspec_generate, vkspec_step,
 * vkspec_context_save/load, vkspec_context_free with a unit in flight) wait for what they handed over: an
 * engine that submits only on its render thread calls them from another thread, or uses vkspec_step_submit
 * and vkspec_step_poll. */
typedef struct vkspec_external_device {
  void* instance;
  void* physical_device;
  void* device;
  uint32_t queue_family_index;          /* a family with VK_QUEUE_COMPUTE_BIT */
  void* queue;
  void (*get_instance_proc_addr)(void); /* PFN_vkGetInstanceProcAddr; NULL: the system's libvulkan */
  int32_t buffer_device_address;        /* required: 1 */
  int32_t storage_buffer_16bit, storage_buffer_8bit, shader_float16, shader_int8, subgroup_size_control;
  int32_t push_descriptor;              /* VK_KHR_push_descriptor enabled */
  /* Called around every vkQueueSubmit vkspec makes on `queue` (both or neither). */
  void (*lock_queue)(void* user);
  void (*unlock_queue)(void* user);
  void* lock_user;
  /* API version 11: the engine-submits mode (NULL: vkspec submits on `queue`) */
  int32_t (*submit)(const vkspec_submission* submission, void* user);
  void* submit_user;
  int32_t timeline_semaphore;           /* VkPhysicalDeviceVulkan12Features.timelineSemaphore enabled */
  /* API version 15: the matmul paths' features (vkspec_device_requirements says which the device has).
     shader_integer_dot_product: VK_KHR_shader_integer_dot_product and its shaderIntegerDotProduct enabled;
     cooperative_matrix_nv: VK_NV_cooperative_matrix and its cooperativeMatrix enabled (with shader_float16). */
  int32_t shader_integer_dot_product, cooperative_matrix_nv;
  /* API version 16: cooperative_matrix_khr: VK_KHR_cooperative_matrix and its cooperativeMatrix enabled (with
     shader_float16); vulkan_memory_model: VkPhysicalDeviceVulkan12Features.vulkanMemoryModel enabled, which
     either cooperative matrix path needs. */
  int32_t cooperative_matrix_khr, vulkan_memory_model;
} vkspec_external_device;

/* What vkspec needs of a device, for an engine to merge into the VkDeviceCreateInfo of the device it will
 * hand over (API version 10). For `physical_device` of `instance` (get_instance_proc_addr as above; NULL: the
 * system's libvulkan): the Vulkan version, the features to enable and the device extensions to enable (the
 * optional ones the device has), and in `missing` each thing the device lacks, named (then the status is
 * VKSPEC_ERROR_DEVICE: vkspec cannot run on it). Declare what was enabled in vkspec_external_device. */
typedef struct vkspec_device_requirements {
  uint32_t api_version;            /* VK_API_VERSION_1_2: the least apiVersion for VkApplicationInfo */
  int32_t buffer_device_address;   /* 1: enable VkPhysicalDeviceVulkan12Features.bufferDeviceAddress (required) */
  int32_t subgroup_size_control;   /* 1: the device has subgroupSizeControl; enable it (optional, faster;
                                      since API version 16 with VK_EXT_subgroup_size_control in `extensions`) */
  uint32_t n_extensions;
  const char* extensions[8];       /* device extension names to enable (static strings; API version 16: 8, was 4) */
  char missing[256];               /* "" when the device has everything vkspec needs */
  int32_t timeline_semaphore;      /* 1: the device has timelineSemaphore (Vulkan 1.2); enable it for the
                                      engine-submits mode (API version 11) */
  /* API version 15, optional (faster matmul paths, runtime's choice): 1 where the device has them; their
     extensions are then in `extensions`. shader_integer_dot_product: enable
     VkPhysicalDeviceShaderIntegerDotProductFeatures.shaderIntegerDotProduct; cooperative_matrix_nv: enable
     VkPhysicalDeviceCooperativeMatrixFeaturesNV.cooperativeMatrix and VkPhysicalDeviceVulkan12Features.shaderFloat16. */
  int32_t shader_integer_dot_product, cooperative_matrix_nv;
  /* API version 16: cooperative_matrix_khr: enable VkPhysicalDeviceCooperativeMatrixFeaturesKHR.cooperativeMatrix
     and shaderFloat16; vulkan_memory_model (1 where either cooperative matrix is): enable
     VkPhysicalDeviceVulkan12Features.vulkanMemoryModel. */
  int32_t cooperative_matrix_khr, vulkan_memory_model;
} vkspec_device_requirements;
VKSPEC_API vkspec_status vkspec_device_requirements_get(void* instance, void* physical_device,
                                                        void (*get_instance_proc_addr)(void),
                                                        vkspec_device_requirements* out);

#endif /* VKSPEC_DEVICE_H */
