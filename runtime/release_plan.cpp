#include "runtime/release_plan.h"

#include <algorithm>

namespace vkspec {

ReleasePlan::ReleasePlan(VulkanDevice& ctx) : ctx_(ctx) {
  if (!ctx.facts().timestamps) throw Error("internal: a release plan needs device timestamps");
  VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
  qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
  qi.queryCount = kMaxQueries;
  vk_check(vk::vkCreateQueryPool(ctx.device(), &qi, nullptr, &pool_), "vkCreateQueryPool");
  ticks_.resize(kMaxQueries);
}

ReleasePlan::~ReleasePlan() { vk::vkDestroyQueryPool(ctx_.device(), pool_, nullptr); }

// Bottom of pipe: written once every earlier command is done, so a part's first timestamp leaves out the
// application's work submitted before it on the queue.
uint32_t ReleasePlan::timestamp(VkCommandBuffer cmd) {
  vk::vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, queries_);
  return queries_++;
}

void ReleasePlan::open_group(uint32_t start_query) {
  groups_.push_back({0, uint32_t(dispatches_.size()), start_query, start_query});
}

void ReleasePlan::begin(VkCommandBuffer cmd, double budget_s) {
  vk::vkCmdResetQueryPool(cmd, pool_, 0, kMaxQueries);
  queries_ = 0;
  budget_s_ = budget_s;
  groups_.clear();
  dispatches_.clear();
  parts_.clear();
  max_release_s_ = max_group_s_ = 0;
  open_part(cmd);
}

void ReleasePlan::open_part(VkCommandBuffer cmd) {
  parts_.push_back({uint32_t(groups_.size())});
  part_estimate_s_ = 0;
  open_group(timestamp(cmd));
}

void ReleasePlan::dispatch(const Pipeline& p, uint32_t workgroups) {
  dispatches_.push_back({&p, workgroups});
  uint64_t& key = groups_.back().key;   // (FNV-1a over the pipeline and the grid)
  for (const uint64_t v : {uint64_t(reinterpret_cast<uintptr_t>(&p)), uint64_t(workgroups)})
    key = (key ^ v) * 0x100000001b3ull;
}

bool ReleasePlan::close_group(VkCommandBuffer cmd) {
  if (queries_ + 3 > kMaxQueries || groups_.back().first_dispatch == dispatches_.size()) return false;
  const uint32_t end = timestamp(cmd);
  groups_.back().end_query = end;
  const double e = estimate(uint32_t(groups_.size() - 1));
  part_estimate_s_ += std::max(e, 0.0);
  if (e < 0 || part_estimate_s_ >= budget_s_ / 4) return true;   // (the caller opens the next part)
  open_group(end);
  return false;
}

void ReleasePlan::close_part(VkCommandBuffer cmd) { groups_.back().end_query = timestamp(cmd); }

double ReleasePlan::estimate(uint32_t group) const {
  const Group& g = groups_[group];
  if (const auto it = group_seconds_.find(g.key); it != group_seconds_.end()) return it->second;
  double s = 0;
  for (uint32_t d = g.first_dispatch; d < group_end(group); ++d) {
    const auto it = seconds_per_workgroup_.find(dispatches_[d].pipeline);
    if (it == seconds_per_workgroup_.end()) return -1;
    s += it->second * dispatches_[d].workgroups;
  }
  return s;
}

double ReleasePlan::part_estimate(uint32_t part) const {
  double s = 0;
  for (uint32_t g = parts_[part].first_group; g <= last_group(part); ++g) {
    const double e = estimate(g);
    if (e < 0) return -1;
    s += e;
  }
  return s;
}

// (estimated again now: the releases before may have timed this recording's groups)
uint32_t ReleasePlan::release_size(uint32_t first) const {
  double cost = part_estimate(first);
  if (cost < 0) return 1;
  uint32_t n = 1;
  for (; first + n < parts_.size(); ++n) {
    const double e = part_estimate(first + n);
    if (e < 0 || cost + e > budget_s_) break;
    cost += e;
  }
  return n;
}

// A group's time becomes its key's estimate; a pipeline's seconds per workgroup come from groups of one
// dispatch, or (while it has none) from its share of a group's workgroups.
void ReleasePlan::completed(uint32_t first, uint32_t n) {
  const uint32_t q0 = groups_[parts_[first].first_group].start_query, q1 = groups_[last_group(first + n - 1)].end_query;
  vk_check(vk::vkGetQueryPoolResults(ctx_.device(), pool_, q0, q1 - q0 + 1, (q1 - q0 + 1) * sizeof(uint64_t),
                                     &ticks_[q0], sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
           "vkGetQueryPoolResults");
  const double tick_s = ctx_.facts().timestamp_period_ns * 1e-9;
  max_release_s_ = std::max(max_release_s_, double(ticks_[q1] - ticks_[q0]) * tick_s);
  for (uint32_t g = parts_[first].first_group; g <= last_group(first + n - 1); ++g) {
    const Group& group = groups_[g];
    const double s = double(ticks_[group.end_query] - ticks_[group.start_query]) * tick_s;
    max_group_s_ = std::max(max_group_s_, s);
    group_seconds_[group.key] = s;
    const uint32_t end = group_end(g);
    uint64_t workgroups = 0;
    for (uint32_t d = group.first_dispatch; d < end; ++d) workgroups += dispatches_[d].workgroups;
    for (uint32_t d = group.first_dispatch; d < end; ++d) {
      const auto [it, fresh] = seconds_per_workgroup_.try_emplace(dispatches_[d].pipeline, 0.0);
      if (fresh || end - group.first_dispatch == 1) it->second = s / double(workgroups);
    }
  }
}

}  // namespace vkspec
