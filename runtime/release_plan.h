#pragma once
// Where a recording held under a device-time budget (Recorder::set_budget) is cut into parts, and which
// parts go in each release. The kernels between two barriers form a group; a held recording writes a
// timestamp at every barrier, so each group's device time is measured, and a group's cost is estimated as the
// last measured time of a group of the same pipelines and grids (the layers of a pass repeat theirs), else
// from its pipelines' seconds per workgroup, else it is unknown. A part ends at a barrier once its estimate
// reaches a quarter of the budget, or after a group of unknown cost; a release takes the parts whose estimates
// fit the budget, at least one, and a part of unknown cost goes alone. So a release exceeds the budget by
// about one group at most, give or take the estimates' error.
// Invariants: groups and parts are numbered in recording order and cover it; a part's groups are contiguous
// and its timestamps (queries) are contiguous and increasing, from its first group's start to its last
// group's end; every part has both.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "runtime/pipelines.h"

namespace vkspec {

class ReleasePlan {
 public:
  explicit ReleasePlan(VulkanDevice& ctx);   // needs device timestamps (DeviceFacts::timestamps)
  ~ReleasePlan();
  ReleasePlan(const ReleasePlan&) = delete;
  ReleasePlan& operator=(const ReleasePlan&) = delete;

  // Recording: begin() in the first command buffer (resets the timestamps, opens part 0); dispatch() for
  // each dispatch; at each barrier, close_group() says whether the part ends there (the caller then ends
  // the command buffer and calls open_part() in the next one); close_part() ends the last one.
  void begin(VkCommandBuffer cmd, double budget_s);
  void dispatch(const Pipeline& p, uint32_t workgroups);
  bool close_group(VkCommandBuffer cmd);
  void open_part(VkCommandBuffer cmd);
  void close_part(VkCommandBuffer cmd);
  uint32_t parts() const { return uint32_t(parts_.size()); }

  // Releasing: how many parts from `first` the next release takes; completed() once it ran (reads its
  // timestamps, learns the costs).
  uint32_t release_size(uint32_t first) const;
  void completed(uint32_t first, uint32_t n);

  // Once a part completed: its start and end timestamps (the device's ticks).
  uint64_t part_start_ticks(uint32_t part) const { return ticks_[groups_[parts_[part].first_group].start_query]; }
  uint64_t part_end_ticks(uint32_t part) const { return ticks_[groups_[last_group(part)].end_query]; }
  // Of this recording so far: the device time of its costliest release and group.
  double max_release_seconds() const { return max_release_s_; }
  double max_group_seconds() const { return max_group_s_; }

 private:
  struct Group {
    uint64_t key = 0;                 // its dispatches' pipelines and grids, hashed
    uint32_t first_dispatch = 0;      // into dispatches_
    uint32_t start_query = 0, end_query = 0;
  };
  struct Dispatch {
    const Pipeline* pipeline;
    uint32_t workgroups;
  };
  struct Part {
    uint32_t first_group = 0;
  };
  static constexpr uint32_t kMaxQueries = 4096;   // (past them, the last group takes the rest)

  VulkanDevice& ctx_;
  VkQueryPool pool_ = VK_NULL_HANDLE;
  uint32_t queries_ = 0;
  double budget_s_ = 0;
  double part_estimate_s_ = 0;   // of the part being recorded, its closed groups
  std::vector<Group> groups_;
  std::vector<Dispatch> dispatches_;
  std::vector<Part> parts_;
  std::vector<uint64_t> ticks_;   // by query, read as releases complete
  std::unordered_map<uint64_t, double> group_seconds_;             // by Group::key: the last time measured
  std::unordered_map<const Pipeline*, double> seconds_per_workgroup_;
  double max_release_s_ = 0, max_group_s_ = 0;

  uint32_t timestamp(VkCommandBuffer cmd);
  void open_group(uint32_t start_query);
  uint32_t last_group(uint32_t part) const {
    return part + 1 < parts_.size() ? parts_[part + 1].first_group - 1 : uint32_t(groups_.size() - 1);
  }
  uint32_t group_end(uint32_t group) const {   // one past its last dispatch
    return group + 1 < groups_.size() ? groups_[group + 1].first_dispatch : uint32_t(dispatches_.size());
  }
  double estimate(uint32_t group) const;        // seconds; < 0: unknown
  double part_estimate(uint32_t part) const;    // seconds; < 0: unknown
};

}  // namespace vkspec
