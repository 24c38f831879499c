// The C API on an application's own Vulkan device (vkspec_external_device): what a device must offer and
// enable, refusals that name what is missing, and the engine-submits mode, where a test "engine" submits
// vkspec's recordings on its own thread, late and between frames of its own, and the tokens are exactly
// those of vkspec's own device, with the validation layer on the application's instance reporting nothing.
#include "runtime/vk_khr_cooperative_matrix.h"
#include "tests/c_api_helpers.h"

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <random>

namespace {

// The application: an instance (with the validation layer and a messenger counting its warnings and errors
// where the layer is installed), the first device with what vkspec_device_requirements_get asks for enabled,
// and one queue. Vulkan is reached through the loader's vkGetInstanceProcAddr, as an engine's plugin would.
struct AppDevice {
  PFN_vkGetInstanceProcAddr gipa = nullptr;
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  std::atomic<int> validation_messages{0};
  std::string last_message;
  bool validated = false;
  vkspec_device_requirements req{};

  template <class F>
  F fn(const char* name) const {
    return reinterpret_cast<F>(gipa(instance, name));
  }
#define VK(name) fn<PFN_##name>(#name)

  // enable: the device features to enable (false: none at all, for a refusal)
  explicit AppDevice(bool enable = true) {
    void* lib = vkspec::platform::open_vulkan_loader();
    EXPECT_NE(lib, nullptr);
    gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(vkspec::platform::library_symbol(lib, "vkGetInstanceProcAddr"));
    uint32_t n = 0;
    VK(vkEnumerateInstanceLayerProperties)(&n, nullptr);
    std::vector<VkLayerProperties> layers(n);
    VK(vkEnumerateInstanceLayerProperties)(&n, layers.data());
    for (const VkLayerProperties& l : layers) validated |= strcmp(l.layerName, "VK_LAYER_KHRONOS_validation") == 0;
    const char* layer = "VK_LAYER_KHRONOS_validation";
    const char* ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ici.pApplicationInfo = &app;
    if (validated) {
      ici.enabledLayerCount = 1;
      ici.ppEnabledLayerNames = &layer;
      ici.enabledExtensionCount = 1;
      ici.ppEnabledExtensionNames = &ext;
    }
    EXPECT_EQ(VK(vkCreateInstance)(&ici, nullptr, &instance), VK_SUCCESS);
    if (validated) {
      VkDebugUtilsMessengerCreateInfoEXT mi{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
      mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
      mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT;
      mi.pfnUserCallback = [](VkDebugUtilsMessageSeverityFlagBitsEXT, VkDebugUtilsMessageTypeFlagsEXT,
                              const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) -> VkBool32 {
        auto* self = static_cast<AppDevice*>(user);
        self->validation_messages++;
        self->last_message = data->pMessage ? data->pMessage : "";
        return VK_FALSE;
      };
      mi.pUserData = this;
      EXPECT_EQ(VK(vkCreateDebugUtilsMessengerEXT)(instance, &mi, nullptr, &messenger), VK_SUCCESS);
    }
    n = 1;
    VK(vkEnumeratePhysicalDevices)(instance, &n, &physical);
    EXPECT_EQ(vkspec_device_requirements_get(instance, physical, reinterpret_cast<void (*)(void)>(gipa), &req), VKSPEC_OK)
        << vkspec_last_error();
    VkPhysicalDeviceVulkan12Features e12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceSubgroupSizeControlFeatures sgc{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
    VkPhysicalDeviceShaderIntegerDotProductFeatures dot{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
    VkPhysicalDeviceCooperativeMatrixFeaturesNV coop{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR coop_khr{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f2.pNext = &e12;
    e12.bufferDeviceAddress = enable && req.buffer_device_address;
    e12.timelineSemaphore = enable && req.timeline_semaphore;
    void** chain = &e12.pNext;
    if (enable && req.subgroup_size_control) {
      *chain = &sgc;
      chain = &sgc.pNext;
      sgc.subgroupSizeControl = VK_TRUE;
    }
    if (enable && req.shader_integer_dot_product) {
      *chain = &dot;
      chain = &dot.pNext;
      dot.shaderIntegerDotProduct = VK_TRUE;
    }
    if (enable && req.cooperative_matrix_nv) {
      *chain = &coop;
      chain = &coop.pNext;
      coop.cooperativeMatrix = VK_TRUE;
      e12.shaderFloat16 = VK_TRUE;
    }
    if (enable && req.cooperative_matrix_khr) {
      *chain = &coop_khr;
      coop_khr.cooperativeMatrix = VK_TRUE;
      e12.shaderFloat16 = VK_TRUE;
    }
    e12.vulkanMemoryModel = enable && req.vulkan_memory_model;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qci.queueCount = 1;   // (lavapipe's one family computes)
    qci.pQueuePriorities = &prio;
    VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    dci.pNext = &f2;
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    dci.enabledExtensionCount = enable ? req.n_extensions : 0;
    dci.ppEnabledExtensionNames = req.extensions;
    EXPECT_EQ(VK(vkCreateDevice)(physical, &dci, nullptr, &device), VK_SUCCESS);
    VK(vkGetDeviceQueue)(device, 0, 0, &queue);
  }
  ~AppDevice() {
    if (device) VK(vkDestroyDevice)(device, nullptr);
    if (messenger) VK(vkDestroyDebugUtilsMessengerEXT)(instance, messenger, nullptr);
    VK(vkDestroyInstance)(instance, nullptr);
  }

  // What the application tells vkspec: everything enabled above (a test may then take some of it back).
  vkspec_external_device handoff() const {
    vkspec_external_device x{};
    x.instance = instance;
    x.physical_device = physical;
    x.device = device;
    x.queue = queue;
    x.get_instance_proc_addr = reinterpret_cast<void (*)(void)>(gipa);
    x.buffer_device_address = req.buffer_device_address;
    x.subgroup_size_control = req.subgroup_size_control;
    x.timeline_semaphore = req.timeline_semaphore;
    x.shader_integer_dot_product = req.shader_integer_dot_product;
    x.cooperative_matrix_nv = req.cooperative_matrix_nv;
    x.cooperative_matrix_khr = req.cooperative_matrix_khr;
    x.shader_float16 = req.cooperative_matrix_nv || req.cooperative_matrix_khr;
    x.vulkan_memory_model = req.vulkan_memory_model;
    for (uint32_t i = 0; i < req.n_extensions; ++i)
      x.push_descriptor |= strcmp(req.extensions[i], VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME) == 0;
    return x;
  }
};

// A game engine's render thread: it owns the queue, submits a frame of its own (a 4 MiB buffer fill) every
// turn, and submits what vkspec hands over a random 0-3 ms late, on its own thread, after its frame.
class TestEngine {
 public:
  explicit TestEngine(AppDevice& d) : d_(d) {
    VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bi.size = 4 << 20;
    bi.usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    EXPECT_EQ(d.VK(vkCreateBuffer)(d.device, &bi, nullptr, &buffer_), VK_SUCCESS);
    VkMemoryRequirements mr;
    d.VK(vkGetBufferMemoryRequirements)(d.device, buffer_, &mr);
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = mr.size;
    while (!(mr.memoryTypeBits & (1u << ai.memoryTypeIndex))) ++ai.memoryTypeIndex;
    EXPECT_EQ(d.VK(vkAllocateMemory)(d.device, &ai, nullptr, &memory_), VK_SUCCESS);
    EXPECT_EQ(d.VK(vkBindBufferMemory)(d.device, buffer_, memory_, 0), VK_SUCCESS);
    VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    EXPECT_EQ(d.VK(vkCreateCommandPool)(d.device, &pi, nullptr, &pool_), VK_SUCCESS);
    VkCommandBufferAllocateInfo ci{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ci.commandPool = pool_;
    ci.commandBufferCount = 1;
    EXPECT_EQ(d.VK(vkAllocateCommandBuffers)(d.device, &ci, &frame_), VK_SUCCESS);
    VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    d.VK(vkBeginCommandBuffer)(frame_, &begin);
    d.VK(vkCmdFillBuffer)(frame_, buffer_, 0, VK_WHOLE_SIZE, 0x3f800000u);
    d.VK(vkEndCommandBuffer)(frame_);
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    fi.flags = VK_FENCE_CREATE_SIGNALED_BIT;
    EXPECT_EQ(d.VK(vkCreateFence)(d.device, &fi, nullptr, &frame_fence_), VK_SUCCESS);
    thread_ = std::thread([this] { loop(); });
  }
  ~TestEngine() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    d_.VK(vkQueueWaitIdle)(d_.queue);   // the engine's own queue
    d_.VK(vkDestroyFence)(d_.device, frame_fence_, nullptr);
    d_.VK(vkDestroyCommandPool)(d_.device, pool_, nullptr);
    d_.VK(vkDestroyBuffer)(d_.device, buffer_, nullptr);
    d_.VK(vkFreeMemory)(d_.device, memory_, nullptr);
  }

  vkspec_external_device handoff() {
    vkspec_external_device x = d_.handoff();
    x.queue = nullptr;   // vkspec never sees it
    x.submit = [](const vkspec_submission* s, void* user) -> int32_t { return static_cast<TestEngine*>(user)->take(*s); };
    x.submit_user = this;
    return x;
  }
  std::atomic<bool> refuse{false};   // the callback says it cannot take a recording
  std::atomic<int> taken{0}, submitted{0}, frames{0}, failures{0};

 private:
  struct Pending {
    std::vector<VkCommandBuffer> cmds;
    VkSemaphore semaphore;
    uint64_t wait, signal;
  };
  AppDevice& d_;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer frame_ = VK_NULL_HANDLE;
  VkFence frame_fence_ = VK_NULL_HANDLE;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  bool stop_ = false;
  std::thread thread_;

  int32_t take(const vkspec_submission& s) {
    if (refuse) return 1;
    Pending p;
    for (uint32_t i = 0; i < s.n_command_buffers; ++i) p.cmds.push_back(static_cast<VkCommandBuffer>(s.command_buffers[i]));
    p.semaphore = static_cast<VkSemaphore>(s.semaphore);
    p.wait = s.wait_value;
    p.signal = s.signal_value;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.push_back(std::move(p));
    }
    taken++;
    cv_.notify_all();
    return 0;
  }

  void loop() {
    std::mt19937 rng(1);
    for (;;) {
      std::deque<Pending> now;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait_for(lock, std::chrono::milliseconds(2), [&] { return stop_ || !pending_.empty(); });
        if (stop_ && pending_.empty()) return;
        now.swap(pending_);
      }
      // a frame of the engine's own
      d_.VK(vkWaitForFences)(d_.device, 1, &frame_fence_, VK_TRUE, UINT64_MAX);
      d_.VK(vkResetFences)(d_.device, 1, &frame_fence_);
      VkSubmitInfo frame{VK_STRUCTURE_TYPE_SUBMIT_INFO};
      frame.commandBufferCount = 1;
      frame.pCommandBuffers = &frame_;
      if (d_.VK(vkQueueSubmit)(d_.queue, 1, &frame, frame_fence_) != VK_SUCCESS) failures++;
      frames++;
      for (const Pending& p : now) {
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
        VkTimelineSemaphoreSubmitInfo ts{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
        ts.waitSemaphoreValueCount = 1;
        ts.pWaitSemaphoreValues = &p.wait;
        ts.signalSemaphoreValueCount = 1;
        ts.pSignalSemaphoreValues = &p.signal;
        const VkPipelineStageFlags stage = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
        VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
        si.pNext = &ts;
        si.waitSemaphoreCount = 1;
        si.pWaitSemaphores = &p.semaphore;
        si.pWaitDstStageMask = &stage;
        si.commandBufferCount = uint32_t(p.cmds.size());
        si.pCommandBuffers = p.cmds.data();
        si.signalSemaphoreCount = 1;
        si.pSignalSemaphores = &p.semaphore;
        if (d_.VK(vkQueueSubmit)(d_.queue, 1, &si, VK_NULL_HANDLE) != VK_SUCCESS) failures++;
        submitted++;
      }
    }
  }
};

struct Setting {
  const char* name;
  vkspec_context_params p;
};
std::vector<Setting> settings(const std::string& draft_path) {
  vkspec_context_params sampled = vkspec_context_default_params();
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.seed = 5;
  vkspec_context_params ngram = Ctx::greedy();
  ngram.draft.ngram = 1;
  ngram.draft.max = 4;
  vkspec_context_params with_model = Ctx::greedy();
  with_model.draft.model = draft_path.c_str();
  with_model.draft.max = 4;
  return {{"greedy", Ctx::greedy()}, {"sampled, seed 5", sampled}, {"greedy, n-gram", ngram}, {"greedy, draft model", with_model}};
}

// VKSPEC_MEMORY=discrete (CI's second run): weights reach the device through recorded copies, so a load
// submits (elsewhere lavapipe's memory is mapped and written directly).
bool staged_uploads() {
  const char* memory = getenv("VKSPEC_MEMORY");
  return memory && std::string(memory) == "discrete";
}

vkspec_model* load(const std::string& path, const vkspec_external_device* x) {
  vkspec_model_params p = vkspec_model_default_params();
  p.n_ubatch = 16;   // the prompt in several parts
  p.external = x;
  vkspec_model* m = nullptr;
  EXPECT_EQ(vkspec_model_load(path.c_str(), &p, &m), VKSPEC_OK) << vkspec_last_error();
  return m;
}

// Blocking (vkspec_generate) and asynchronous (vkspec_step_submit + poll) generation with the engine
// submitting equal generation on vkspec's own device: greedy, sampled with a seed, n-gram and a draft model.
TEST(CApiExternal, EngineSubmitsModeGivesTheSameTokens) {
  const std::string target = shared("models/pycode-target-f16.gguf"), draft = shared("models/pycode-draft-f16.gguf");
  AppDevice app;
  ASSERT_EQ(app.req.timeline_semaphore, 1);
  const char* validation = getenv("VKSPEC_VALIDATION");
  if (validation && std::string(validation) == "1") {
    ASSERT_TRUE(app.validated) << "the suites run with the validation layer";
  }
  TestEngine engine(app);
  const vkspec_external_device x = engine.handoff();
  vkspec_model* own = load(target, nullptr);
  vkspec_model* theirs = load(target, &x);
  ASSERT_TRUE(own && theirs);
  if (staged_uploads()) {
    EXPECT_GT(engine.submitted.load(), 0) << "the weights' upload goes through the engine too";
  }
  const std::vector<int32_t> prompt =
      tokenize(own, "for i in range(10):\n    print(i)\nfor j in range(20):\n    print(j)\nfor k in range(30):\n    print(k)\n");
  for (const Setting& s : settings(draft)) {
    for (int speculative : {0, 1}) {
      if (speculative && !s.p.draft.ngram && !s.p.draft.model) continue;
      Streamed reference, blocking, async;
      {
        Ctx ctx(own, s.p);
        ASSERT_EQ(generate(ctx.c, prompt, 32, reference, speculative), VKSPEC_OK) << vkspec_last_error();
      }
      Ctx ctx(theirs, s.p);
      ASSERT_EQ(generate(ctx.c, prompt, 32, blocking, speculative), VKSPEC_OK) << s.name << ": " << vkspec_last_error();
      EXPECT_EQ(blocking.ids, reference.ids) << s.name << ", speculative " << speculative;
      const vkspec_generate_params g = streamed_params(32, async, speculative);
      ASSERT_EQ(vkspec_context_clear(ctx.c), VKSPEC_OK);
      ASSERT_EQ(vkspec_begin(ctx.c, prompt.data(), prompt.size(), &g), VKSPEC_OK) << vkspec_last_error();
      int units = 0, polls = 0;
      ASSERT_EQ(run_async(ctx.c, true, &units, &polls), VKSPEC_OK) << s.name << ": " << vkspec_last_error();
      EXPECT_EQ(async.ids, reference.ids) << s.name << ", speculative " << speculative << ", asynchronous";
      EXPECT_GT(units, 2);
    }
  }
  EXPECT_EQ(vkspec_model_free(theirs), VKSPEC_OK);
  EXPECT_EQ(vkspec_model_free(own), VKSPEC_OK);
  EXPECT_GT(engine.taken.load(), 100);   // every unit of every generation on `theirs`
  EXPECT_EQ(engine.taken.load(), engine.submitted.load());
  EXPECT_GT(engine.frames.load(), 0);
  EXPECT_EQ(engine.failures.load(), 0);
  EXPECT_EQ(app.validation_messages.load(), 0) << app.last_message;
}

// The engine-submits mode's refusals: no timelineSemaphore (named), lock callbacks beside a submit callback;
// a callback that does not take a recording ends that load or generation with an error (never a hang) and
// the next one, taken, gives the right tokens.
TEST(CApiExternal, EngineSubmitsModeRefusals) {
  AppDevice app;
  TestEngine engine(app);
  vkspec_external_device x = engine.handoff();
  x.timeline_semaphore = 0;
  vkspec_model_params p = vkspec_model_default_params();
  p.external = &x;
  vkspec_model* m = nullptr;
  EXPECT_EQ(vkspec_model_load(kStories.c_str(), &p, &m), VKSPEC_ERROR_DEVICE);
  EXPECT_NE(std::string(vkspec_last_error()).find("timelineSemaphore"), std::string::npos) << vkspec_last_error();
  x.timeline_semaphore = 1;
  x.lock_queue = [](void*) {};
  x.unlock_queue = [](void*) {};
  EXPECT_EQ(vkspec_model_load(kStories.c_str(), &p, &m), VKSPEC_ERROR_DEVICE);
  EXPECT_NE(std::string(vkspec_last_error()).find("not both"), std::string::npos) << vkspec_last_error();
  EXPECT_EQ(m, nullptr);
  x.lock_queue = x.unlock_queue = nullptr;
  if (staged_uploads()) {
    engine.refuse = true;
    EXPECT_NE(vkspec_model_load(kStories.c_str(), &p, &m), VKSPEC_OK);   // the upload is refused
    EXPECT_NE(std::string(vkspec_last_error()).find("submit callback"), std::string::npos) << vkspec_last_error();
    EXPECT_EQ(m, nullptr);
    engine.refuse = false;
  }
  ASSERT_EQ(vkspec_model_load(kStories.c_str(), &p, &m), VKSPEC_OK) << vkspec_last_error();
  const std::vector<int32_t> prompt = tokenize(m, "Once upon a time");
  Streamed want;
  {
    Ctx ctx(m);
    ASSERT_EQ(generate(ctx.c, prompt, 16, want), VKSPEC_OK) << vkspec_last_error();
    Streamed refused, again;
    engine.refuse = true;
    EXPECT_NE(generate(ctx.c, prompt, 16, refused), VKSPEC_OK);
    EXPECT_NE(std::string(vkspec_last_error()).find("submit callback"), std::string::npos) << vkspec_last_error();
    engine.refuse = false;
    ASSERT_EQ(vkspec_context_clear(ctx.c), VKSPEC_OK);
    ASSERT_EQ(generate(ctx.c, prompt, 16, again), VKSPEC_OK) << vkspec_last_error();
    EXPECT_EQ(again.ids, want.ids);
  }
  EXPECT_EQ(vkspec_model_free(m), VKSPEC_OK);
  EXPECT_EQ(want.ids.size(), 16u);
  EXPECT_EQ(app.validation_messages.load(), 0) << app.last_message;
}

// The frame-loop example (apps/examples/frame_loop.cpp) in both modes: the text of `vkspec run`, with and
// without a budget of 1 ms (a decoding pass costs several here); with it, the steps are released over more
// frames, no release costlier than the budget and the costliest group of kernels (with a margin: lavapipe's
// timestamps measure CPU threads that the frame's copies share).
TEST(CApiExternal, FrameLoopExampleKeepsTheBudgetAndTheTokens) {
  if (std::string(EXAMPLE_FRAME_LOOP).empty()) GTEST_SKIP() << "the examples are Linux programs here";
  const std::string target = shared("models/pycode-target-f16.gguf");
  std::string prompt;
  for (int i = 0; i < 20; ++i) prompt += "    total_" + std::to_string(i) + " += values[" + std::to_string(i) + "]\n";
  const auto cli = vkspec::test::run_binary(VKSPEC_BIN, {"run", "-m", target, "-p", prompt, "-n", "16", "--temp", "0"});
  ASSERT_EQ(cli.code, 0) << cli.err;
  for (const char* mode : {"lock", "engine"}) {
    nlohmann::json free, held;
    for (const char* budget : {"0", "1"}) {
      const auto r = vkspec::test::run_binary(EXAMPLE_FRAME_LOOP, {target, prompt, "16", mode, budget});
      ASSERT_EQ(r.code, 0) << mode << ": " << r.err;
      const size_t figures = r.out.rfind("\n{");   // the text, then a line of JSON
      ASSERT_NE(figures, std::string::npos) << r.out;
      EXPECT_EQ(r.out.substr(0, figures + 1), cli.out) << mode << ", budget " << budget;
      (std::string(budget) == "0" ? free : held) = nlohmann::json::parse(r.out.substr(figures + 1));
    }
    EXPECT_EQ(held["tokens"], 16);
    EXPECT_GT(held["frames"].get<int>(), free["frames"].get<int>()) << mode;
    if (held["max_unit_device_ms"].get<double>() <= 0) continue;   // (no timestamps)
    const double release = held["max_release_device_ms"].get<double>(), group = held["max_group_device_ms"].get<double>();
    EXPECT_LT(release, held["max_unit_device_ms"].get<double>()) << mode << ": " << held.dump();
    EXPECT_LE(release, 2 * (1 + group)) << mode << ": " << held.dump();
  }
}

// What a device must offer and enable (vkspec_device_requirements_get: lavapipe has all, and the push
// descriptors vkspec uses), and a device created without bufferDeviceAddress is refused with a message that
// names it; a device without a queue or a submit callback is refused.
TEST(CApiExternal, DeviceRequirementsAndARefusal) {
  AppDevice app(/*enable=*/false);
  vkspec_device_requirements req{};
  EXPECT_EQ(vkspec_device_requirements_get(app.instance, nullptr, nullptr, &req), VKSPEC_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(vkspec_device_requirements_get(app.instance, app.physical, reinterpret_cast<void (*)(void)>(app.gipa), &req), VKSPEC_OK)
      << vkspec_last_error();
  EXPECT_EQ(req.api_version, uint32_t(VK_API_VERSION_1_2));
  EXPECT_EQ(req.buffer_device_address, 1);
  EXPECT_EQ(req.timeline_semaphore, 1);
  EXPECT_STREQ(req.missing, "");
  ASSERT_GE(req.n_extensions, 1u);
  EXPECT_STREQ(req.extensions[0], VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
  vkspec_external_device x = app.handoff();
  x.buffer_device_address = 0;   // not enabled
  x.subgroup_size_control = x.timeline_semaphore = x.push_descriptor = 0;
  vkspec_model_params p = vkspec_model_default_params();
  p.external = &x;
  vkspec_model* m = nullptr;
  EXPECT_EQ(vkspec_model_load(kStories.c_str(), &p, &m), VKSPEC_ERROR_DEVICE);
  EXPECT_NE(std::string(vkspec_last_error()).find("bufferDeviceAddress"), std::string::npos) << vkspec_last_error();
  x.buffer_device_address = 1;
  x.queue = nullptr;
  EXPECT_EQ(vkspec_model_load(kStories.c_str(), &p, &m), VKSPEC_ERROR_DEVICE);
  EXPECT_NE(std::string(vkspec_last_error()).find("submit callback"), std::string::npos) << vkspec_last_error();
  EXPECT_EQ(m, nullptr);
}

}  // namespace

// The matmul paths' features on an application's device: vkspec_device_requirements_get lists the
// integer-dot extension where the device has it (lavapipe does); declared enabled, VKSPEC_MATMUL=int8dot runs
// on the application's device (a Q8_0 model, whose matmuls take that path) with the tokens it gives on
// vkspec's own; undeclared, the path is refused, naming the feature (vkspec uses no feature the application
// did not declare), and the default path loads.
TEST(CApiExternal, MatmulPathFeaturesOnlyWhereDeclared) {
  if (std::string(VKSPEC_SHAPE_BIN).empty()) GTEST_SKIP() << "the model maker is a Linux program here";
  AppDevice app;
  if (!app.req.shader_integer_dot_product) GTEST_SKIP() << "the device has no integer dot products";
  const std::string q8 = ::testing::TempDir() + "/vkspec-external-" + std::to_string(vkspec::platform::process_id()) + "-q8_0.gguf";
  const auto made = vkspec::test::run_binary(VKSPEC_SHAPE_BIN, {q8, shared("tokenizer-tests/ggml-vocab-llama-spm.gguf"), "tiny", "q8_0", "3"});
  ASSERT_EQ(made.code, 0) << made.err;
  bool listed = false;
  for (uint32_t i = 0; i < app.req.n_extensions; ++i)
    listed |= strcmp(app.req.extensions[i], VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME) == 0;
  EXPECT_TRUE(listed);
  vkspec_external_device x = app.handoff();
  ASSERT_EQ(x.shader_integer_dot_product, 1);
  struct Forced {   // VKSPEC_MATMUL=int8dot until the refusal below, or a failed assertion, is done with it
    Forced() { vkspec::platform::set_env("VKSPEC_MATMUL", "int8dot"); }
    ~Forced() { vkspec::platform::unset_env("VKSPEC_MATMUL"); }
  };
  auto forced = std::make_unique<Forced>();
  vkspec_model* own = load(q8, nullptr);
  vkspec_model* theirs = load(q8, &x);
  ASSERT_TRUE(own && theirs);
  std::vector<std::vector<int32_t>> ids;
  for (vkspec_model* m : {own, theirs}) {
    vkspec_model_info info{};
    ASSERT_EQ(vkspec_model_get_info(m, &info), VKSPEC_OK);
    EXPECT_STREQ(info.matmul_path, "int8dot");
    Ctx ctx(m, Ctx::greedy());
    Streamed out;
    ASSERT_EQ(generate(ctx.c, tokenize(m, "Once upon a time, there was a little dog"), 24, out, 0), VKSPEC_OK) << vkspec_last_error();
    ids.push_back(out.ids);
  }
  EXPECT_EQ(ids[0].size(), 24u);
  EXPECT_EQ(ids[1], ids[0]);
  EXPECT_EQ(vkspec_model_free(theirs), VKSPEC_OK);
  EXPECT_EQ(vkspec_model_free(own), VKSPEC_OK);

  x.shader_integer_dot_product = 0;   // enabled, but not declared
  vkspec_model_params p = vkspec_model_default_params();
  p.external = &x;
  vkspec_model* m = nullptr;
  EXPECT_NE(vkspec_model_load(q8.c_str(), &p, &m), VKSPEC_OK);
  EXPECT_NE(std::string(vkspec_last_error()).find("shaderIntegerDotProduct"), std::string::npos) << vkspec_last_error();
  EXPECT_EQ(m, nullptr);
  forced.reset();
  ASSERT_EQ(vkspec_model_load(q8.c_str(), &p, &m), VKSPEC_OK) << vkspec_last_error();
  vkspec_model_info info{};
  ASSERT_EQ(vkspec_model_get_info(m, &info), VKSPEC_OK);
  EXPECT_STREQ(info.matmul_path, "fma");
  EXPECT_EQ(vkspec_model_free(m), VKSPEC_OK);
  std::remove(q8.c_str());
  EXPECT_EQ(app.validation_messages.load(), 0) << app.last_message;
}
