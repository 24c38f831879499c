#include "runtime/recorder.h"
#include "core/settings.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace vkspec {

bool profiling_requested() { return read_settings().profile != Profiling::Off; }

Recorder::Recorder(VulkanDevice& ctx, bool profile) : ctx_(ctx), each_(profile && read_settings().profile == Profiling::PerDispatch) {
  VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pi.queueFamilyIndex = ctx.queue_family();
  vk_check(vk::vkCreateCommandPool(ctx.device(), &pi, nullptr, &pool_), "vkCreateCommandPool");
  VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  vk_check(vk::vkCreateFence(ctx.device(), &fi, nullptr, &fence_), "vkCreateFence");
  if (ctx.facts().timestamps) {
    VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qi.queryCount = kMaxMarks;
    vk_check(vk::vkCreateQueryPool(ctx.device(), &qi, nullptr, &marks_pool_), "vkCreateQueryPool");
  }
  if (profile && ctx.facts().timestamps) {
    VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qi.queryCount = kMaxQueries;
    vk_check(vk::vkCreateQueryPool(ctx.device(), &qi, nullptr, &query_pool_), "vkCreateQueryPool");
  }
}

Recorder::~Recorder() {
  try {
    if (in_flight_) wait(UINT64_MAX);
    wait_unwaited();
  } catch (...) {   // device lost: nothing left to wait for
  }
  if (query_pool_) vk::vkDestroyQueryPool(ctx_.device(), query_pool_, nullptr);
  if (marks_pool_) vk::vkDestroyQueryPool(ctx_.device(), marks_pool_, nullptr);
  vk::vkDestroyFence(ctx_.device(), fence_, nullptr);
  vk::vkDestroyCommandPool(ctx_.device(), pool_, nullptr);
}

void Recorder::begin_part(uint32_t part) {
  if (part == cmds_.size()) {
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VkCommandBuffer c = VK_NULL_HANDLE;
    vk_check(vk::vkAllocateCommandBuffers(ctx_.device(), &ai, &c), "vkAllocateCommandBuffers");
    cmds_.push_back(c);
  }
  part_ = part;
  cmd_ = cmds_[part];
  part_dispatches_ = 0;
  vk_check(vk::vkResetCommandBuffer(cmd_, 0), "vkResetCommandBuffer");
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  vk_check(vk::vkBeginCommandBuffer(cmd_, &bi), "vkBeginCommandBuffer");
}

void Recorder::submit_part(VkFence fence) {
  vk_check(vk::vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cmd_;
  vk_check(ctx_.submit(&si, fence), "vkQueueSubmit");
  unwaited_ = fence == VK_NULL_HANDLE;   // (a failed submission leaves it: earlier parts may still run)
  parts_++;
}

void Recorder::wait_unwaited() {
  if (!unwaited_) return;
  unwaited_ = false;
  vk_check(ctx_.submit(nullptr, fence_), "vkQueueSubmit");
  vk_check(vk::vkWaitForFences(ctx_.device(), 1, &fence_, VK_TRUE, UINT64_MAX), "vkWaitForFences");
  vk_check(vk::vkResetFences(ctx_.device(), 1, &fence_), "vkResetFences");
}

void Recorder::begin() {
  if (in_flight_) throw Error("internal: a recording begun while the last one is in flight");
  wait_unwaited();
  begin_part(0);
  using Split = DeviceFacts::SubmitSplit;
  const Split split = ctx_.facts().submit_split;
  // (handed to an application whole: it submits a recording when it chooses, so parts would not overlap)
  split_after_ = split == Split::Whole || ctx_.engine_submits() ? UINT32_MAX : split == Split::Parts ? 8 : 1;
  recording_ = ++recordings_;
  queries_used_ = 0;
  query_labels_.clear();
  if (query_pool_) vk::vkCmdResetQueryPool(cmd_, query_pool_, 0, kMaxQueries);
  marks_used_ = 0;
  if (marks_pool_) vk::vkCmdResetQueryPool(cmd_, marks_pool_, 0, kMaxMarks);
  held_ = budget_s_ > 0 && ctx_.facts().timestamps;
  if (!held_) return;
  if (!plan_) plan_ = std::make_unique<ReleasePlan>(ctx_);
  split_after_ = UINT32_MAX;   // (the plan cuts held parts)
  plan_->begin(cmd_, budget_s_);
}

uint32_t Recorder::mark() {
  if (!marks_pool_ || marks_used_ == kMaxMarks) return kMaxMarks;
  vk::vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, marks_pool_, marks_used_);
  mark_part_[marks_used_] = part_;
  return marks_used_++;
}

// A held recording's releases ran with the host's time between them: between marks in different parts,
// only the parts' own times count.
double Recorder::seconds_between(uint32_t a, uint32_t b) const {
  if (a >= marks_used_ || b >= marks_used_) return -1.0;
  const uint32_t pa = mark_part_[a], pb = mark_part_[b];
  uint64_t ticks = mark_ticks_[b] - mark_ticks_[a];
  if (held_ && pa < pb) {
    ticks = (plan_->part_end_ticks(pa) - mark_ticks_[a]) + (mark_ticks_[b] - plan_->part_start_ticks(pb));
    for (uint32_t p = pa + 1; p < pb; ++p) ticks += plan_->part_end_ticks(p) - plan_->part_start_ticks(p);
  }
  return double(ticks) * ctx_.facts().timestamp_period_ns * 1e-9;
}

void Recorder::dispatch(const Pipeline& p, const void* push, uint32_t push_size, uint32_t gx, uint32_t gy,
                        uint32_t gz) {
  if (gx == 0 || gy == 0 || gz == 0) return;
  if (push_size > Pipelines::kPushConstantBytes) throw Error("internal: push constants too large for " + p.name);
  bool timed = query_pool_ && queries_used_ + 2 <= kMaxQueries;
  if (timed) vk::vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, query_pool_, queries_used_++);
  vk::vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
  vk::vkCmdPushConstants(cmd_, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_size, push);
  vk::vkCmdDispatch(cmd_, gx, gy, gz);
  if (held_) plan_->dispatch(p, gx * gy * gz);
  dispatches_++;
  part_dispatches_++;
  if (timed) {
    vk::vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, query_pool_, queries_used_++);
    char label[160];
    if (each_) snprintf(label, sizeof label, "%03u %s %ux%u", queries_used_ / 2, p.name.c_str(), gx, gy);
    query_labels_.push_back(each_ ? label : p.name);
  }
}

void Recorder::dispatch(const Pipeline& p, const VkBufferView* texels, const void* push, uint32_t push_size,
                        uint32_t gx, uint32_t gy, uint32_t gz) {
  if (!p.texel_bindings) throw Error("internal: " + p.name + " has no texel bindings");
  VkWriteDescriptorSet w[Pipelines::kTexelBindings];
  for (uint32_t i = 0; i < Pipelines::kTexelBindings; ++i) {
    w[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w[i].dstBinding = i;
    w[i].descriptorCount = 1;
    w[i].descriptorType = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER;
    w[i].pTexelBufferView = &texels[i];
  }
  vk::vkCmdPushDescriptorSetKHR(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, Pipelines::kTexelBindings, w);
  dispatch(p, push, push_size, gx, gy, gz);
}

void Recorder::barrier() {
  if (held_ && plan_->close_group(cmd_)) {
    vk_check(vk::vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
    begin_part(part_ + 1);
    plan_->open_part(cmd_);
  } else if (part_dispatches_ >= split_after_) {   // the parts so far run while the rest is recorded
    submit_part(VK_NULL_HANDLE);
    begin_part(part_ + 1);
    if (split_after_ > 1) split_after_ = std::min(split_after_ * 2, 1024u);
  }
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                     VK_ACCESS_TRANSFER_WRITE_BIT;
  vk::vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                           VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0,
                           nullptr, 0, nullptr);
}

void Recorder::copy(const Slice& src, const Slice& dst) {
  VkBufferCopy region{src.offset, dst.offset, src.size};
  vk::vkCmdCopyBuffer(cmd_, src.buffer, dst.buffer, 1, &region);
}

void Recorder::submit() {
  // Make device writes visible to host reads of mapped memory after the wait.
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vk::vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                           VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
  if (held_) {
    plan_->close_part(cmd_);
    vk_check(vk::vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
    released_ = 0;
    release();
  } else if (ctx_.engine_submits()) {
    vk_check(vk::vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
    handed_value_ = ctx_.hand_over(&cmd_, 1);
    parts_++;
  } else {
    submit_part(fence_);   // its completion is every part's: each part began with a barrier on the ones before
  }
  submissions_++;
  in_flight_ = true;
}

// The first part of a release needs no other synchronization than the barrier it opens with (see above).
void Recorder::release() {
  const uint32_t first = released_, n = plan_->release_size(first);
  if (ctx_.engine_submits()) {
    handed_value_ = ctx_.hand_over(&cmds_[first], n);
  } else {
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = n;
    si.pCommandBuffers = &cmds_[first];
    vk_check(ctx_.submit(&si, fence_), "vkQueueSubmit");
  }
  parts_ += n;
  release_first_ = first;
  released_ = first + n;
}

bool Recorder::release_done(uint64_t timeout_ns) {
  if (ctx_.engine_submits()) return ctx_.reached(handed_value_, timeout_ns);
  const VkResult r = vk::vkWaitForFences(ctx_.device(), 1, &fence_, VK_TRUE, timeout_ns);
  if (r == VK_TIMEOUT) return false;
  vk_check(r, "vkWaitForFences");
  vk_check(vk::vkResetFences(ctx_.device(), 1, &fence_), "vkResetFences");
  return true;
}

bool Recorder::wait(uint64_t timeout_ns) {
  if (!in_flight_) throw Error("internal: a wait with no recording in flight");
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::nanoseconds(std::min<uint64_t>(timeout_ns, INT64_MAX / 2));
  while (true) {
    if (!release_done(timeout_ns)) return false;
    if (!held_) break;
    plan_->completed(release_first_, released_ - release_first_);
    if (released_ == plan_->parts()) break;
    try {
      release();
    } catch (...) {   // nothing is in flight: the rest of the recording is dropped
      in_flight_ = false;
      throw;
    }
    if (timeout_ns == 0) return false;
    if (timeout_ns != UINT64_MAX)
      timeout_ns = uint64_t(std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - Clock::now()).count()));
  }
  in_flight_ = false;
  if (marks_used_ > 0)
    vk_check(vk::vkGetQueryPoolResults(ctx_.device(), marks_pool_, 0, marks_used_, sizeof mark_ticks_, mark_ticks_, 8,
                                       VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
             "vkGetQueryPoolResults");
  if (query_pool_ && queries_used_ > 0) {
    std::vector<uint64_t> ts(queries_used_);
    vk_check(vk::vkGetQueryPoolResults(ctx_.device(), query_pool_, 0, queries_used_, ts.size() * 8, ts.data(), 8,
                                       VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
             "vkGetQueryPoolResults");
    for (size_t i = 0; i < query_labels_.size(); ++i) {
      auto& k = profile_[query_labels_[i]];
      k.total_ms += double(ts[2 * i + 1] - ts[2 * i]) * ctx_.facts().timestamp_period_ns * 1e-6;
      k.calls++;
    }
  }
  return true;
}

std::string Recorder::profile_report() const {
  std::string out = each_ ? "kernel profile per dispatch (VKSPEC_PROFILE=each):\n" : "kernel profile (VKSPEC_PROFILE=1):\n";
  char line[256];
  for (auto& [name, k] : profile_) {
    snprintf(line, sizeof line, "  %-28s %10.3f ms total %8llu calls %9.4f ms/call\n", name.c_str(), k.total_ms,
             (unsigned long long)k.calls, k.total_ms / double(k.calls ? k.calls : 1));
    out += line;
  }
  return out;
}

}  // namespace vkspec
