#pragma once
// Compute pipelines built from the embedded SPIR-V, keyed by (shader variant, specialization constants).
// Every pipeline has one push-constant range (buffers are passed by device address); kernels that read
// through texel buffers also have set 0 = kTexelBindings uniform texel buffers, bound per dispatch with
// push descriptors (no descriptor pools or sets to manage). The VkPipelineCache is persisted under
// $XDG_CACHE_HOME/vkspec (or ~/.cache/vkspec), one file per device UUID, so a second start does not recompile;
// or in the file the model's options name, or nowhere.
#include <atomic>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/vulkan_device.h"

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

  // cache_file: where the VkPipelineCache is kept (nullopt: the platform's cache folder, per device; "": none).
  explicit Pipelines(VulkanDevice& ctx, const std::optional<std::string>& cache_file = std::nullopt);
  ~Pipelines();   // saves the pipeline cache
  Pipelines(const Pipelines&) = delete;
  Pipelines& operator=(const Pipelines&) = delete;

  // spec[0] is the workgroup size; spec[i] is constant_id i. subgroup: the subgroup size the pipeline must run
  // in (0: the device's default; else DeviceFacts::runs_subgroups_of; a shader always takes the same).
  // Finding a pipeline that exists allocates nothing: it runs for every dispatch a step records.
  const Pipeline& get(std::string_view shader, std::initializer_list<uint32_t> spec,
                      Layout layout = Layout::PushConstants, uint32_t subgroup = 0);
  const std::string& cache_path() const { return cache_path_; }
  size_t created() const { return pipelines_.size(); }
  // Seconds the process has spent creating shader modules and pipelines (a driver compiles them: a first
  // run's first passes are mostly this), so that a step's time can be told apart from it.
  static double total_creation_seconds() { return double(creation_ns_.load()) * 1e-9; }

 private:
  VulkanDevice& ctx_;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout texel_set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout texel_layout_ = VK_NULL_HANDLE;   // only when the device has push descriptors
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  std::string cache_path_;
  // (shader, specialization constants), ordered by name then constants; looked up by KeyRef without a copy
  struct Key {
    std::string shader;
    std::vector<uint32_t> spec;
  };
  struct KeyRef {
    std::string_view shader;
    std::span<const uint32_t> spec;
    KeyRef(std::string_view s, std::span<const uint32_t> c) : shader(s), spec(c) {}
    KeyRef(const Key& k) : shader(k.shader), spec(k.spec) {}
  };
  struct KeyLess {
    using is_transparent = void;
    bool operator()(KeyRef a, KeyRef b) const;
  };
  std::map<std::string, VkShaderModule, std::less<>> modules_;
  std::map<Key, Pipeline, KeyLess> pipelines_;
  static inline std::atomic<uint64_t> creation_ns_{0};
};

}  // namespace vkspec
