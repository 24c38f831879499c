#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/cli_common.h"

namespace vkspec::cli {

int cmd_version() {
  std::string text = std::string("vkspec ") + VKSPEC_VERSION_STRING + " (C API " + std::to_string(vkspec_api_version()) + ")\n";
  for (const vkspec_device_info& f : api::list_devices())
    text += "device " + std::to_string(f.index) + ": " + f.name + " (" + f.type + ", Vulkan " + f.api_version + ")\n";
  write_stdout(text);
  return 0;
}

int cmd_devices(bool json) {
  nlohmann::json out = nlohmann::json::array();
  for (const vkspec_device_info& f : api::list_devices()) {
    nlohmann::json d = {
        {"index", f.index}, {"name", f.name}, {"type", f.type}, {"driver", f.driver}, {"api_version", f.api_version},
        {"subgroup_size", f.subgroup_size}, {"subgroup_size_range", {f.min_subgroup_size, f.max_subgroup_size}},
        {"subgroup_size_control", bool(f.subgroup_size_control)}, {"subgroup_arithmetic", bool(f.subgroup_arithmetic)},
        {"shader_float16", bool(f.shader_float16)}, {"shader_int8", bool(f.shader_int8)},
        {"storage_16bit", bool(f.storage_16bit)}, {"storage_8bit", bool(f.storage_8bit)},
        {"buffer_device_address", bool(f.buffer_device_address)},
        {"max_storage_buffer_range", f.max_storage_buffer_range},
        {"max_compute_shared_memory", f.max_shared_memory},
        {"max_memory_allocation_size", f.max_allocation_size},
        {"timestamps", bool(f.timestamps)}, {"memory_model", f.memory_model}, {"device_local_bytes", f.device_local_bytes},
        {"integer_dot_product", bool(f.integer_dot_product)}, {"integer_dot_accelerated", bool(f.integer_dot_accelerated)},
        {"cooperative_matrix", bool(f.cooperative_matrix)}, {"cooperative_matrix_khr", bool(f.cooperative_matrix_khr)},
        {"cooperative_matrix_nv", bool(f.cooperative_matrix_nv)}, {"vulkan_memory_model", bool(f.vulkan_memory_model)},
        {"uuid", f.uuid}, {"kernel_family", f.kernel_family}, {"matmul_path", f.matmul_path}, {"submit", f.submit}};
    out.push_back(d);
  }
  const nlohmann::json environment = nlohmann::json::parse(api::environment_json());
  if (json) {
    write_stdout(nlohmann::json{{"devices", out}, {"environment", environment}}.dump(2) + "\n");
    return 0;
  }
  std::string text;
  for (const auto& d : out) {
    text += "device " + std::to_string(d["index"].get<int>()) + ": " + d["name"].get<std::string>() + " (" +
            d["type"].get<std::string>() + ")\n";
    for (auto it = d.begin(); it != d.end(); ++it)
      if (it.key() != "index" && it.key() != "name" && it.key() != "type") {
        char line[512];
        snprintf(line, sizeof line, "  %-28s %s\n", it.key().c_str(), it.value().dump().c_str());
        text += line;
      }
  }
  text += "environment (VKSPEC_*)\n";
  for (auto it = environment.begin(); it != environment.end(); ++it) {
    char line[512];
    snprintf(line, sizeof line, "  %-28s %s\n", it.key().c_str(), it.value().dump().c_str());
    text += line;
  }
  write_stdout(text);
  return 0;
}

}  // namespace vkspec::cli
