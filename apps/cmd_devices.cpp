#include <cstdio>

#include <nlohmann/json.hpp>

#include "apps/cli_common.h"
#include "runtime/context.h"

namespace vkspec::cli {

int cmd_devices(bool json) {
  auto devices = Context::list_devices();
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : devices) {
    nlohmann::json d = {
        {"index", f.index}, {"name", f.name}, {"type", f.type_name()}, {"driver", f.driver},
        {"api_version", std::to_string(VK_API_VERSION_MAJOR(f.api_version)) + "." +
                            std::to_string(VK_API_VERSION_MINOR(f.api_version)) + "." +
                            std::to_string(VK_API_VERSION_PATCH(f.api_version))},
        {"subgroup_size", f.subgroup_size}, {"subgroup_size_range", {f.min_subgroup_size, f.max_subgroup_size}},
        {"subgroup_size_control", f.subgroup_size_control}, {"subgroup_arithmetic", f.subgroup_arithmetic},
        {"shader_float16", f.shader_float16}, {"shader_int8", f.shader_int8},
        {"storage_16bit", f.storage_16bit}, {"storage_8bit", f.storage_8bit},
        {"buffer_device_address", f.buffer_device_address},
        {"max_storage_buffer_range", f.max_storage_buffer_range},
        {"max_compute_shared_memory", f.max_shared_memory},
        {"max_memory_allocation_size", f.max_allocation_size},
        {"timestamps", f.timestamps}, {"memory_model", f.discrete_memory ? "discrete" : "mapped"}, {"device_local_bytes", f.device_local_bytes},
        {"kernel_family", f.prefers_row_per_lane() ? "row-per-lane" : "subgroup"}};
    out.push_back(d);
  }
  if (json) {
    printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  for (const auto& d : out) {
    printf("device %d: %s (%s)\n", d["index"].get<int>(), d["name"].get<std::string>().c_str(),
           d["type"].get<std::string>().c_str());
    for (auto it = d.begin(); it != d.end(); ++it)
      if (it.key() != "index" && it.key() != "name" && it.key() != "type")
        printf("  %-28s %s\n", it.key().c_str(), it.value().dump().c_str());
  }
  return 0;
}

}  // namespace vkspec::cli
