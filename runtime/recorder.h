#pragma once
// One recording by its owner (a decode step, a speculative round, an upload), submitted once: the host waits
// once per recording. barrier() separates dependent kernels (compute writes -> compute/transfer reads). Where
// the device's facts say so (DeviceFacts::submit_split: GPUs), a barrier also ends a part: the command buffer
// so far is submitted without a wait and the barrier opens the next one, so that the device runs the first
// parts while the host records the rest (a barrier's first scope is every command earlier in submission
// order, so parts need no other synchronization). Parts grow 8, 16, 32, ... dispatches. Invariant: data the
// host writes for a command is written before that command's part is submitted, i.e. while or before it is
// recorded (never after recording it: an earlier part may be running).
// In the engine-submits mode (VulkanDevice::engine_submits) a recording is one command buffer, handed to the
// application at submit(); wait() watches the device's timeline semaphore instead of a fence.
// Under a device-time budget (set_budget: the C API's max_device_us) a recording is held instead, cut at
// barriers into parts and released a budget's worth per call: submit() releases the first parts, and each
// wait() that finds the last release done releases the next (ReleasePlan decides where to cut and what goes).
// With VKSPEC_PROFILE=1 each dispatch is bracketed by timestamps and per-kernel times are accumulated.
// mark() timestamps the boundaries between sections of a recording (the draft steps and the verify pass of
// a round), for the adaptive draft policy.
// Process-wide counters of recordings submitted (host waits), parts and dispatches let tests and `bench`
// check "one wait per step".
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/memory.h"
#include "runtime/pipelines.h"
#include "runtime/release_plan.h"

namespace vkspec {

// True when VKSPEC_PROFILE=1 or =each: recorders are then created with profiling on and print their report
// when destroyed (profile_report()). With =each (Recorder::profiling_each) the report has a line per
// dispatch position of a recording ("007 matmul_rows_f16 5x1": the 7th dispatch, its workgroup grid)
// instead of per kernel, and a speculative round prints the device time of its drafts and of its verify pass.
// Any other value than 0, 1 or each is an Error.
bool profiling_requested();

class Recorder {
 public:
  Recorder(VulkanDevice& ctx, bool profile);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  void begin();
  void dispatch(const Pipeline& p, const void* push, uint32_t push_size, uint32_t gx, uint32_t gy = 1,
                uint32_t gz = 1);
  // Texel-buffer kernels: views for set 0 (Pipelines::kTexelBindings of them) pushed before the dispatch.
  void dispatch(const Pipeline& p, const VkBufferView* texels, const void* push, uint32_t push_size, uint32_t gx,
                uint32_t gy = 1, uint32_t gz = 1);
  void barrier();
  void copy(const Slice& src, const Slice& dst);
  // The recording's end: submitted, then waited for. submit() returns at once; wait() waits up to
  // timeout_ns (0: a look without waiting) and says whether the device has finished it, after which its
  // results (mapped memory, marks) can be read. Invariant: nothing is recorded while one is in flight.
  void submit();
  bool wait(uint64_t timeout_ns);
  bool in_flight() const { return in_flight_; }
  void submit_and_wait() {
    submit();
    wait(UINT64_MAX);
  }

  // The device-time budget per release for the recordings begun after (0: none, they go whole). Held
  // recordings need timestamps: without them recordings go whole.
  void set_budget(double seconds) { budget_s_ = seconds; }
  // Of the last held recording once waited for (else 0): the device time of its costliest release, and of
  // its costliest group of kernels between two barriers.
  double max_release_seconds() const { return held_ ? plan_->max_release_seconds() : 0.0; }
  double max_group_seconds() const { return held_ ? plan_->max_group_seconds() : 0.0; }

  // Timestamp after everything recorded so far; its index. seconds_between(a, b) after the wait: the time
  // from mark a to mark b, or -1 when the device has no timestamps.
  uint32_t mark();
  bool can_mark() const { return marks_pool_ != VK_NULL_HANDLE; }
  double seconds_between(uint32_t a, uint32_t b) const;

  // The recording begun last, unique in the process (across recorders, also one created where another
  // was destroyed): host-written data that a submission reads must not be rewritten within one recording.
  uint64_t recording() const { return recording_; }

  static uint64_t total_submissions() { return submissions_.load(); }   // recordings submitted (host waits)
  static uint64_t total_parts() { return parts_.load(); }                // command buffers submitted
  static uint64_t total_dispatches() { return dispatches_.load(); }

  bool profiling() const { return query_pool_ != VK_NULL_HANDLE; }
  bool profiling_each() const { return each_ && profiling(); }   // per dispatch position (VKSPEC_PROFILE=each)
  struct KernelTime { double total_ms = 0; uint64_t calls = 0; };
  const std::map<std::string, KernelTime>& profile() const { return profile_; }
  std::string profile_report() const;

 private:
  VulkanDevice& ctx_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;   // the part being recorded: cmds_[part_]
  std::vector<VkCommandBuffer> cmds_;      // one per part of a recording, allocated as a recording needs them
  uint32_t part_ = 0;
  uint32_t part_dispatches_ = 0;           // dispatches recorded into the current part
  uint32_t split_after_ = 0;               // a barrier after this many of them ends the part
  bool unwaited_ = false;                  // parts submitted that no fence wait has covered yet
  bool in_flight_ = false;                 // submitted (with fence_), not yet waited for
  VkFence fence_ = VK_NULL_HANDLE;
  uint64_t handed_value_ = 0;              // the engine-submits mode: the timeline value of the one in flight
  VkQueryPool query_pool_ = VK_NULL_HANDLE;
  static constexpr uint32_t kMaxQueries = 4096;
  uint64_t recording_ = 0;
  uint32_t queries_used_ = 0;
  std::vector<std::string> query_labels_;   // one per dispatch (queries 2i, 2i+1)
  std::map<std::string, KernelTime> profile_;
  bool each_ = false;   // profiling per dispatch position (VKSPEC_PROFILE=each), read once at construction
  static constexpr uint32_t kMaxMarks = 8;
  VkQueryPool marks_pool_ = VK_NULL_HANDLE;
  uint32_t marks_used_ = 0;
  uint64_t mark_ticks_[kMaxMarks] = {};
  static inline std::atomic<uint64_t> submissions_{0}, parts_{0}, dispatches_{0}, recordings_{0};

  // Held recordings. Invariant: parts [0, released_) were released, the last release beginning at
  // release_first_; the next is released only once that one completed.
  double budget_s_ = 0;
  bool held_ = false;
  std::unique_ptr<ReleasePlan> plan_;
  uint32_t released_ = 0, release_first_ = 0;
  uint32_t mark_part_[kMaxMarks] = {};   // the part each mark was written in

  void release();                           // the next parts the plan says fit the budget
  bool release_done(uint64_t timeout_ns);   // the last submission completed (waiting up to timeout_ns)
  void begin_part(uint32_t part);
  void submit_part(VkFence fence);
  void wait_unwaited();   // after an exception between parts: the submitted parts finish before reuse
};

}  // namespace vkspec
