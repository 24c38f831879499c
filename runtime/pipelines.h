#pragma once
// Compute pipelines built from the embedded SPIR-V, keyed by (shader variant, specialization constants).
// Every pipeline has one push-constant range (buffers are passed by device address); kernels that read
// through texel buffers also have set 0 = kTexelBindings uniform texel buffers, bound per dispatch with
// push descriptors (no descriptor pools or sets to manage). The VkPipelineCache is persisted under $XDG_CACHE_HOME/vkspec (or ~/.cache/vkspec),
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
  bool texel_bindings = false;   // set 0 holds Pipelines::kTexelBindings uniform texel buffers
  std::string name;
};

class Pipelines {
 public:
  static constexpr uint32_t kPushConstantBytes = 128;   // the minimum every Vulkan device guarantees
  static constexpr uint32_t kTexelBindings = 4;
  enum class Layout { PushConstants, Texels };

  explicit Pipelines(Context& ctx);
  ~Pipelines();   // saves the pipeline cache
  Pipelines(const Pipelines&) = delete;
  Pipelines& operator=(const Pipelines&) = delete;

  // spec[0] is the workgroup size; spec[i] is constant_id i.
  const Pipeline& get(const std::string& shader, const std::vector<uint32_t>& spec,
                      Layout layout = Layout::PushConstants);
  const std::string& cache_path() const { return cache_path_; }
  size_t created() const { return pipelines_.size(); }

 private:
  Context& ctx_;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout texel_set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout texel_layout_ = VK_NULL_HANDLE;   // only when the device has push descriptors
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  std::string cache_path_;
  std::map<std::string, VkShaderModule> modules_;
  std::map<std::pair<std::string, std::vector<uint32_t>>, Pipeline> pipelines_;
};

}  // namespace vkspec
