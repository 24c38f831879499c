#include "core/settings.h"

#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/core.h"

namespace vkspec {
namespace {

std::string env(const char* name) {
  const char* v = getenv(name);
  return v ? v : "";
}

constexpr std::pair<SubmitSplit, const char*> kSubmitSplitNames[] = {
    {SubmitSplit::Whole, "whole"}, {SubmitSplit::Parts, "parts"}, {SubmitSplit::EveryBarrier, "barriers"}};

constexpr std::pair<MatmulPath, const char*> kMatmulPathNames[] = {
    {MatmulPath::Auto, "auto"},       {MatmulPath::Fma, "fma"}, {MatmulPath::Int8Dot, "int8dot"},
    {MatmulPath::Coopmat, "coopmat"}, {MatmulPath::CoopmatEmulated, "coopmat-emulated"}};

}  // namespace

const char* matmul_path_name(MatmulPath p) {
  for (const auto& [v, name] : kMatmulPathNames)
    if (v == p) return name;
  return "?";
}

const char* submit_split_name(SubmitSplit s) {
  for (const auto& [v, name] : kSubmitSplitNames)
    if (v == s) return name;
  return "?";
}

Settings read_settings() {
  Settings s;
  if (const std::string v = env("VKSPEC_DEVICE"); !v.empty()) {
    char* end = nullptr;
    const long i = strtol(v.c_str(), &end, 10);
    if (*end || i < 0 || i > 1024) throw Error("VKSPEC_DEVICE must be a device index, got '" + v + "'");
    s.device = int(i);
  }
  s.validation = env("VKSPEC_VALIDATION") == "1";
  if (const std::string v = env("VKSPEC_PROFILE"); v == "1") s.profile = Profiling::PerKernel;
  else if (v == "each") s.profile = Profiling::PerDispatch;
  else if (v != "" && v != "0") throw Error("VKSPEC_PROFILE must be 0, 1 or each (or unset), got '" + v + "'");
  if (const std::string v = env("VKSPEC_KERNELS"); v == "row") s.kernels = KernelFamily::RowPerLane;
  else if (v == "subgroup") s.kernels = KernelFamily::Subgroup;
  else if (!v.empty()) throw Error("VKSPEC_KERNELS must be 'row' or 'subgroup' (or unset), got '" + v + "'");
  if (const std::string v = env("VKSPEC_MATMUL"); !v.empty()) {
    bool known = false;
    for (const auto& [path, name] : kMatmulPathNames)
      if (v == name) s.matmul = path, known = true;
    if (!known) throw Error("VKSPEC_MATMUL must be fma, int8dot, coopmat or coopmat-emulated (or unset), got '" + v + "'");
  }
  if (const std::string v = env("VKSPEC_SUBMIT"); !v.empty()) {
    for (const auto& [split, name] : kSubmitSplitNames)
      if (v == name) s.submit = split;
    if (!s.submit) throw Error("VKSPEC_SUBMIT must be whole, parts or barriers (or unset), got '" + v + "'");
  }
  if (const std::string v = env("VKSPEC_MEMORY"); !v.empty() && v != "discrete")
    throw Error("VKSPEC_MEMORY must be 'discrete' (or unset), got '" + v + "'");
  s.discrete_memory = env("VKSPEC_MEMORY") == "discrete";
  s.today = env("VKSPEC_TODAY");
  return s;
}

std::string settings_json(const Settings& s) {
  nlohmann::json j;
  j["VKSPEC_DEVICE"] = s.device;
  j["VKSPEC_VALIDATION"] = s.validation;
  j["VKSPEC_PROFILE"] = s.profile == Profiling::Off ? "0" : s.profile == Profiling::PerKernel ? "1" : "each";
  j["VKSPEC_KERNELS"] = s.kernels == KernelFamily::Auto ? "auto" : s.kernels == KernelFamily::RowPerLane ? "row" : "subgroup";
  j["VKSPEC_MATMUL"] = matmul_path_name(s.matmul);
  j["VKSPEC_SUBMIT"] = s.submit ? submit_split_name(*s.submit) : "auto";
  j["VKSPEC_MEMORY"] = s.discrete_memory ? "discrete" : "auto";
  j["VKSPEC_TODAY"] = s.today;
  return j.dump();
}

}  // namespace vkspec
