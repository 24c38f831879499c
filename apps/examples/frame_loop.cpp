// frame_loop MODEL PROMPT N [lock|engine] [BUDGET_MS]: a game's frame loop on its own Vulkan device that
// renders a frame (an offscreen 1024x1024 image cleared and read back) every turn while vkspec generates N
// tokens after PROMPT on the same device, one unit a frame within BUDGET_MS of device time (default 4):
//   lock    vkspec submits each unit on the application's queue inside its queue lock;
//   engine  vkspec hands each unit to the application (vkspec_external_device.submit), which submits it on
//           its queue after its own frame (while loading, at once: the load waits for what it hands over).
// The frame never waits for vkspec: vkspec_step_submit records and submits (or hands over) a unit and
// vkspec_step_poll collects it in a later frame. Prints the generated text (greedy: `vkspec run`'s), then
// one JSON line of figures: frame-time percentiles without and with generation, tokens per second, and the
// costliest unit's device time against the budget.
//   c++ -std=c++17 frame_loop.cpp $(pkg-config --cflags --libs vkspec) -lvulkan
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "app_device.h"
#include "vkspec.h"

namespace {

using Clock = std::chrono::steady_clock;

// The frame the game renders: an image cleared to a colour and copied into a host-visible buffer (what a
// screenshot or a readback pass does), recorded once and submitted each frame with a fence.
struct Frame {
  AppDevice& d;
  VkImage image = VK_NULL_HANDLE;
  VkBuffer readback = VK_NULL_HANDLE;
  VkDeviceMemory image_memory = VK_NULL_HANDLE, readback_memory = VK_NULL_HANDLE;
  VkCommandPool pool = VK_NULL_HANDLE;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  static constexpr uint32_t kSize = 1024;

  uint32_t memory_type(uint32_t bits, VkMemoryPropertyFlags want) const {
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(d.physical, &mp);
    for (uint32_t i = 0; i < mp.memoryTypeCount; ++i)
      if ((bits & (1u << i)) && (mp.memoryTypes[i].propertyFlags & want) == want) return i;
    vk_or_exit(VK_ERROR_FEATURE_NOT_PRESENT, "finding a memory type");
    return 0;
  }
  VkDeviceMemory bind(VkMemoryRequirements mr, VkMemoryPropertyFlags want) {
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = mr.size;
    ai.memoryTypeIndex = memory_type(mr.memoryTypeBits, want);
    VkDeviceMemory m = VK_NULL_HANDLE;
    vk_or_exit(vkAllocateMemory(d.device, &ai, nullptr, &m), "vkAllocateMemory");
    return m;
  }

  explicit Frame(AppDevice& dev) : d(dev) {
    VkImageCreateInfo ii{VK_STRUCTURE_TYPE_IMAGE_CREATE_INFO};
    ii.imageType = VK_IMAGE_TYPE_2D;
    ii.format = VK_FORMAT_R8G8B8A8_UNORM;
    ii.extent = {kSize, kSize, 1};
    ii.mipLevels = ii.arrayLayers = 1;
    ii.samples = VK_SAMPLE_COUNT_1_BIT;
    ii.usage = VK_IMAGE_USAGE_TRANSFER_DST_BIT | VK_IMAGE_USAGE_TRANSFER_SRC_BIT;
    vk_or_exit(vkCreateImage(d.device, &ii, nullptr, &image), "vkCreateImage");
    VkMemoryRequirements mr;
    vkGetImageMemoryRequirements(d.device, image, &mr);
    image_memory = bind(mr, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    vk_or_exit(vkBindImageMemory(d.device, image, image_memory, 0), "vkBindImageMemory");
    VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bi.size = VkDeviceSize(kSize) * kSize * 4;
    bi.usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    vk_or_exit(vkCreateBuffer(d.device, &bi, nullptr, &readback), "vkCreateBuffer");
    vkGetBufferMemoryRequirements(d.device, readback, &mr);
    readback_memory = bind(mr, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
    vk_or_exit(vkBindBufferMemory(d.device, readback, readback_memory, 0), "vkBindBufferMemory");

    VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pi.queueFamilyIndex = d.family;
    vk_or_exit(vkCreateCommandPool(d.device, &pi, nullptr, &pool), "vkCreateCommandPool");
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool;
    ai.commandBufferCount = 1;
    vk_or_exit(vkAllocateCommandBuffers(d.device, &ai, &cmd), "vkAllocateCommandBuffers");
    VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    vkBeginCommandBuffer(cmd, &begin);
    const VkImageSubresourceRange range{VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1};
    VkImageMemoryBarrier to_clear{VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER};
    to_clear.srcAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
    to_clear.dstAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    to_clear.oldLayout = VK_IMAGE_LAYOUT_UNDEFINED;
    to_clear.newLayout = VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL;
    to_clear.srcQueueFamilyIndex = to_clear.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
    to_clear.image = image;
    to_clear.subresourceRange = range;
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 0, nullptr, 0, nullptr, 1, &to_clear);
    const VkClearColorValue colour{{0.1f, 0.2f, 0.4f, 1.0f}};
    vkCmdClearColorImage(cmd, image, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, &colour, 1, &range);
    VkImageMemoryBarrier to_copy = to_clear;
    to_copy.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    to_copy.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
    to_copy.oldLayout = VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL;
    to_copy.newLayout = VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL;
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 0, nullptr, 0, nullptr, 1, &to_copy);
    VkBufferImageCopy region{};
    region.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1};
    region.imageExtent = {kSize, kSize, 1};
    vkCmdCopyImageToBuffer(cmd, image, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, readback, 1, &region);
    vk_or_exit(vkEndCommandBuffer(cmd), "vkEndCommandBuffer");
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    vk_or_exit(vkCreateFence(d.device, &fi, nullptr, &fence), "vkCreateFence");
  }
  ~Frame() {
    vkQueueWaitIdle(d.queue);   // the application's own queue
    vkDestroyFence(d.device, fence, nullptr);
    vkDestroyCommandPool(d.device, pool, nullptr);
    vkDestroyBuffer(d.device, readback, nullptr);
    vkDestroyImage(d.device, image, nullptr);
    vkFreeMemory(d.device, readback_memory, nullptr);
    vkFreeMemory(d.device, image_memory, nullptr);
  }
  void submit() {
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cmd;
    std::lock_guard<std::mutex> lock(d.queue_lock);
    vk_or_exit(vkQueueSubmit(d.queue, 1, &si, fence), "vkQueueSubmit (frame)");
  }
  void wait() {   // (a game waits for its frame at present)
    vk_or_exit(vkWaitForFences(d.device, 1, &fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    vk_or_exit(vkResetFences(d.device, 1, &fence), "vkResetFences");
  }
};

// The engine-submits mode's side of the application: what vkspec hands over waits here until the frame loop
// submits it after its own frame. While `immediate` (loading), a recording is submitted at once.
struct Handed {
  AppDevice& d;
  bool immediate = true;
  struct Unit {
    std::vector<VkCommandBuffer> cmds;
    VkSemaphore semaphore;
    uint64_t wait, signal;
  };
  std::vector<Unit> pending;

  static int32_t take(const vkspec_submission* s, void* user) {
    auto* self = static_cast<Handed*>(user);
    Unit u{{}, static_cast<VkSemaphore>(s->semaphore), s->wait_value, s->signal_value};
    for (uint32_t i = 0; i < s->n_command_buffers; ++i) u.cmds.push_back(static_cast<VkCommandBuffer>(s->command_buffers[i]));
    self->pending.push_back(std::move(u));
    if (self->immediate) self->submit_pending();
    return 0;
  }
  void submit_pending() {
    for (const Unit& u : pending) {
      VkTimelineSemaphoreSubmitInfo ts{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
      ts.waitSemaphoreValueCount = ts.signalSemaphoreValueCount = 1;
      ts.pWaitSemaphoreValues = &u.wait;
      ts.pSignalSemaphoreValues = &u.signal;
      const VkPipelineStageFlags stage = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
      VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
      si.pNext = &ts;
      si.waitSemaphoreCount = si.signalSemaphoreCount = 1;
      si.pWaitSemaphores = si.pSignalSemaphores = &u.semaphore;
      si.pWaitDstStageMask = &stage;
      si.commandBufferCount = uint32_t(u.cmds.size());
      si.pCommandBuffers = u.cmds.data();
      std::lock_guard<std::mutex> lock(d.queue_lock);
      vk_or_exit(vkQueueSubmit(d.queue, 1, &si, VK_NULL_HANDLE), "vkQueueSubmit (vkspec's unit)");
    }
    pending.clear();
  }
};

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))];
}

int fail(const char* what, vkspec_status s) {
  fprintf(stderr, "frame_loop: %s: %s: %s\n", what, vkspec_status_name(s), vkspec_last_error());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool engine = argc > 4 && strcmp(argv[4], "engine") == 0;
  const double budget_ms = argc > 5 ? atof(argv[5]) : 4.0;
  if (argc < 4 || argc > 6 || (argc > 4 && !engine && strcmp(argv[4], "lock") != 0) || budget_ms < 0) {
    fprintf(stderr, "usage: frame_loop MODEL.gguf PROMPT N [lock|engine] [BUDGET_MS]\n");
    return 2;
  }
  AppDevice d;
  Handed handed{d};
  vkspec_external_device x = d.handoff;
  if (engine) {
    x.lock_queue = x.unlock_queue = nullptr;
    x.queue = nullptr;   // vkspec never touches the queue
    x.submit = &Handed::take;
    x.submit_user = &handed;
  }
  vkspec_model_params mp = vkspec_model_default_params();
  mp.external = &x;
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
  if ((s = vkspec_context_warm_up(ctx)) != VKSPEC_OK) return fail("warm-up", s);   // (a loading screen's work)
  handed.immediate = false;   // from here on the frame loop submits vkspec's units

  Frame frame(d);
  std::vector<double> idle, busy;
  for (int i = 0; i < 60; ++i) {   // frames without generation
    const Clock::time_point t = Clock::now();
    frame.submit();
    frame.wait();
    idle.push_back(ms_since(t));
  }

  std::string text;
  vkspec_generate_params gp = vkspec_generate_default_params();
  gp.n_predict = atoi(argv[3]);
  gp.max_device_us = uint32_t(budget_ms * 1000);
  gp.user = &text;
  gp.on_token = [](int32_t, const char* piece, size_t len, int32_t, void* user) {   // (inside vkspec_step_poll)
    static_cast<std::string*>(user)->append(piece, len);
    return 0;
  };
  if ((s = vkspec_begin(ctx, prompt.data(), prompt.size(), &gp)) != VKSPEC_OK) return fail("begin", s);
  const Clock::time_point started = Clock::now();
  int units = 0;
  for (int32_t done = 0, in_flight = 0; !done || in_flight;) {
    const Clock::time_point t = Clock::now();
    if (!in_flight && !done) {   // the next unit: recorded and submitted (lock) or handed over (engine)
      if ((s = vkspec_step_submit(ctx, &done)) != VKSPEC_OK) return fail("step_submit", s);
      in_flight = !done;
      units += in_flight;
    }
    frame.submit();
    handed.submit_pending();   // the engine submits vkspec's unit after its frame (nothing in the lock mode)
    frame.wait();
    if (in_flight) {
      int32_t ready = 0;
      if ((s = vkspec_step_poll(ctx, &ready)) != VKSPEC_OK) return fail("step_poll", s);
      in_flight = !ready;
    }
    busy.push_back(ms_since(t));
  }
  const double seconds = ms_since(started) / 1000;
  vkspec_metrics m{};
  vkspec_get_metrics(ctx, &m);
  printf("%s\n", text.c_str());
  printf(
          "{\"mode\": \"%s\", \"budget_ms\": %.3f, \"idle_frames\": %zu, \"idle_p50_ms\": %.3f, \"idle_p99_ms\": %.3f, "
          "\"frames\": %zu, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"max_ms\": %.3f, \"units\": %d, \"tokens\": %llu, "
          "\"tokens_per_s\": %.2f, \"max_unit_device_ms\": %.3f, \"max_release_device_ms\": %.3f, "
          "\"max_group_device_ms\": %.3f, \"device_ms\": %.3f}\n",
          engine ? "engine" : "lock", budget_ms, idle.size(), percentile(idle, 0.5), percentile(idle, 0.99), busy.size(),
          percentile(busy, 0.5), percentile(busy, 0.99), percentile(busy, 1.0), units,
          (unsigned long long)m.generated_tokens, double(m.generated_tokens) / seconds, m.max_step_device_seconds * 1e3,
          m.max_release_device_seconds * 1e3, m.max_group_device_seconds * 1e3,
          m.device_seconds * 1e3);
  vkspec_context_free(ctx);
  vkspec_model_free(model);
  return 0;
}
