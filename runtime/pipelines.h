#pragma once
// Compute pipelines built from the embedded SPIR-V, keyed by (shader variant, specialization constants).
// Every pipeline has the same layout: no descriptor sets, one push-constant range (buffers are passed by
// device address). The VkPipelineCache is persisted under $XDG_CACHE_HOME/vkspec (or ~/.cache/vkspec),
// one file per device UUID, so a second start does not recompile.
#include <map>
#include <string>
#include <vector>

#include "runtime/context.h"

namespace vkspec {

struct Pipeline {
  VkPipeline pipeline = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  uint32_t workgroup_size = 0;   // specialization constant 0
  std::string name;
};

class Pipelines {
 public:
  static constexpr uint32_t kPushConstantBytes = 128;   // the minimum every Vulkan device guarantees

  explicit Pipelines(Context& ctx);
  ~Pipelines();   // saves the pipeline cache
  Pipelines(const Pipelines&) = delete;
  Pipelines& operator=(const Pipelines&) = delete;

  // spec[0] is the workgroup size; spec[i] is constant_id i.
  const Pipeline& get(const std::string& shader, const std::vector<uint32_t>& spec);
  const std::string& cache_path() const { return cache_path_; }
  size_t created() const { return pipelines_.size(); }

 private:
  Context& ctx_;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  std::string cache_path_;
  std::map<std::string, VkShaderModule> modules_;
  std::map<std::pair<std::string, std::vector<uint32_t>>, Pipeline> pipelines_;
};

}  // namespace vkspec
