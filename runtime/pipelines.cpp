#include "runtime/pipelines.h"

#include <chrono>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "platform/platform.h"
#include "runtime/shader_registry.h"

namespace vkspec {
namespace fs = std::filesystem;

Pipelines::Pipelines(VulkanDevice& ctx, const std::optional<std::string>& cache_file) : ctx_(ctx) {
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushConstantBytes};
  VkPipelineLayoutCreateInfo li{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  li.pushConstantRangeCount = 1;
  li.pPushConstantRanges = &range;
  vk_check(vk::vkCreatePipelineLayout(ctx.device(), &li, nullptr, &layout_), "vkCreatePipelineLayout");
  if (ctx.facts().push_descriptor) {
    VkDescriptorSetLayoutBinding b[kTexelBindings];
    for (uint32_t i = 0; i < kTexelBindings; ++i)
      b[i] = {i, VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
    VkDescriptorSetLayoutCreateInfo di{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    di.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR;
    di.bindingCount = kTexelBindings;
    di.pBindings = b;
    vk_check(vk::vkCreateDescriptorSetLayout(ctx.device(), &di, nullptr, &texel_set_layout_),
             "vkCreateDescriptorSetLayout");
    li.setLayoutCount = 1;
    li.pSetLayouts = &texel_set_layout_;
    vk_check(vk::vkCreatePipelineLayout(ctx.device(), &li, nullptr, &texel_layout_), "vkCreatePipelineLayout");
  }

  std::vector<char> initial;
  if (cache_file) cache_path_ = *cache_file;
  else if (std::string dir = platform::cache_dir(); !dir.empty()) cache_path_ = dir + "/pipelines-" + ctx.facts().uuid_hex + ".bin";
  if (!cache_path_.empty()) {
    // Only a regular file of plausible size is read (a FIFO placed there would block, /dev/zero never end);
    // anything else is ignored like a missing cache.
    const platform::FileInfo st = platform::file_info(cache_path_);
    if (st.type == platform::FileType::Regular && st.size <= (256 << 20)) {
      std::ifstream in(platform::utf8_path(cache_path_), std::ios::binary);
      if (in) initial.assign(std::istreambuf_iterator<char>(in), {});
    }
  }
  VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  ci.initialDataSize = initial.size();   // the driver ignores data whose header does not match it
  ci.pInitialData = initial.empty() ? nullptr : initial.data();
  if (vk::vkCreatePipelineCache(ctx.device(), &ci, nullptr, &cache_) != VK_SUCCESS) {
    ci.initialDataSize = 0;
    ci.pInitialData = nullptr;
    vk_check(vk::vkCreatePipelineCache(ctx.device(), &ci, nullptr, &cache_), "vkCreatePipelineCache");
  }
}

Pipelines::~Pipelines() {
  if (!cache_path_.empty()) {
    size_t size = 0;
    if (vk::vkGetPipelineCacheData(ctx_.device(), cache_, &size, nullptr) == VK_SUCCESS && size > 0) {
      std::vector<char> data(size);
      if (vk::vkGetPipelineCacheData(ctx_.device(), cache_, &size, data.data()) == VK_SUCCESS) {
        std::error_code ec;
        const fs::path path = platform::utf8_path(cache_path_);
        fs::create_directories(path.parent_path(), ec);
        // a new file beside the cache, renamed over it once whole: concurrent runs never see half a file, and a
        // link planted in the cache folder is never followed (platform::create_temp_beside)
        std::string tmp;
        if (std::FILE* out = platform::create_temp_beside(cache_path_, &tmp)) {
          const bool written = std::fwrite(data.data(), 1, size, out) == size;
          const bool closed = std::fclose(out) == 0;
          if (written && closed) fs::rename(platform::utf8_path(tmp), path, ec);
          if (!written || !closed || ec) fs::remove(platform::utf8_path(tmp), ec);
        }
      }
    }
  }
  for (auto& [key, p] : pipelines_) vk::vkDestroyPipeline(ctx_.device(), p.pipeline, nullptr);
  for (auto& [name, m] : modules_) vk::vkDestroyShaderModule(ctx_.device(), m, nullptr);
  vk::vkDestroyPipelineCache(ctx_.device(), cache_, nullptr);
  vk::vkDestroyPipelineLayout(ctx_.device(), layout_, nullptr);
  if (texel_layout_) vk::vkDestroyPipelineLayout(ctx_.device(), texel_layout_, nullptr);
  if (texel_set_layout_) vk::vkDestroyDescriptorSetLayout(ctx_.device(), texel_set_layout_, nullptr);
}

bool Pipelines::KeyLess::operator()(KeyRef a, KeyRef b) const {
  if (a.shader != b.shader) return a.shader < b.shader;
  return std::lexicographical_compare(a.spec.begin(), a.spec.end(), b.spec.begin(), b.spec.end());
}

const Pipeline& Pipelines::get(std::string_view shader, std::initializer_list<uint32_t> spec_list, Layout layout,
                               uint32_t subgroup) {
  const std::span<const uint32_t> spec(spec_list.begin(), spec_list.size());
  if (auto it = pipelines_.find(KeyRef(shader, spec)); it != pipelines_.end()) return it->second;

  const auto started = std::chrono::steady_clock::now();
  auto mit = modules_.find(shader);
  if (mit == modules_.end()) mit = modules_.emplace(std::string(shader), VkShaderModule(VK_NULL_HANDLE)).first;
  VkShaderModule& module = mit->second;
  if (!module) {
    const shaders::EmbeddedShader* found = nullptr;
    for (size_t i = 0; i < shaders::kShaderCount; ++i)
      if (shader == shaders::kShaders[i].name) found = &shaders::kShaders[i];
    if (!found) throw Error("internal: no embedded shader named " + std::string(shader));
    VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    mi.codeSize = found->size_bytes;
    mi.pCode = found->words;
    vk_check(vk::vkCreateShaderModule(ctx_.device(), &mi, nullptr, &module), "vkCreateShaderModule");
  }
  std::vector<VkSpecializationMapEntry> entries(spec.size());
  for (uint32_t i = 0; i < spec.size(); ++i) entries[i] = {i, i * 4u, 4};
  VkSpecializationInfo si{uint32_t(entries.size()), entries.data(), spec.size_bytes(), spec.data()};
  VkComputePipelineCreateInfo pi{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  pi.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  pi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  pi.stage.module = module;
  pi.stage.pName = "main";
  pi.stage.pSpecializationInfo = &si;
  VkPipelineShaderStageRequiredSubgroupSizeCreateInfo required{VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO};
  if (subgroup && subgroup != ctx_.facts().subgroup_size) {
    if (!ctx_.facts().runs_subgroups_of(subgroup))
      throw Error("internal: " + std::string(shader) + " needs subgroups of " + std::to_string(subgroup));
    required.requiredSubgroupSize = subgroup;
    pi.stage.pNext = &required;
  }
  if (layout == Layout::Texels && !texel_layout_) throw Error("internal: " + std::string(shader) + " needs push descriptors");
  pi.layout = layout == Layout::Texels ? texel_layout_ : layout_;
  Pipeline p;
  vk_check(vk::vkCreateComputePipelines(ctx_.device(), cache_, 1, &pi, nullptr, &p.pipeline),
           ("creating pipeline " + std::string(shader)).c_str());
  p.layout = pi.layout;
  p.texel_bindings = layout == Layout::Texels;
  p.workgroup_size = spec.empty() ? 1 : spec[0];
  p.name = shader;
  creation_ns_ += uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count());
  return pipelines_.emplace(Key{std::string(shader), std::vector<uint32_t>(spec.begin(), spec.end())}, p).first->second;
}

}  // namespace vkspec
