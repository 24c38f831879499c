#pragma once
// Every VKSPEC_* environment variable, read and checked in one place (a bad value is an Error naming the
// variable). read_settings() reads them each time it is called: components read them where they are made, so
// a test may set one and make a new component. `vkspec devices --json` prints them (vkspec_environment_json).
// No Vulkan here: the loader reads VKSPEC_TODAY through it too.
#include <cstdint>
#include <optional>
#include <string>

namespace vkspec {

// The matmul kernel family (runtime/kernels.h): a row per lane, or a subgroup's lanes along a row.
enum class KernelFamily : uint8_t { Auto, RowPerLane, Subgroup };
// How a step's recording is submitted (DeviceFacts::submit_split): whole, in parts the device runs while the
// host records, or after every barrier (a test mode).
enum class SubmitSplit : uint8_t { Whole, Parts, EveryBarrier };
const char* submit_split_name(SubmitSplit s);   // "whole", "parts", "barriers"
enum class Profiling : uint8_t { Off, PerKernel, PerDispatch };
// The arithmetic of quantized weights' matmuls (runtime/kernels.h choose_kernels decides Auto): the kernel
// family's float multiply-adds, packed 8-bit integer dot products, or matrix units (cooperative matrices;
// emulated: the same kernel with the tile product done in shared memory, for devices without them).
enum class MatmulPath : uint8_t { Auto, Fma, Int8Dot, Coopmat, CoopmatEmulated };
const char* matmul_path_name(MatmulPath p);   // "auto", "fma", "int8dot", "coopmat", "coopmat-emulated"

struct Settings {
  int device = -1;                            // VKSPEC_DEVICE: the device index when none is asked for
  bool validation = false;                    // VKSPEC_VALIDATION=1: the Khronos validation layer
  Profiling profile = Profiling::Off;         // VKSPEC_PROFILE=1 | each: GPU timestamps per kernel / dispatch
  KernelFamily kernels = KernelFamily::Auto;  // VKSPEC_KERNELS=row | subgroup: instead of the device's choice
  MatmulPath matmul = MatmulPath::Auto;       // VKSPEC_MATMUL=fma | int8dot | coopmat | coopmat-emulated: likewise
  std::optional<SubmitSplit> submit;          // VKSPEC_SUBMIT=whole | parts | barriers: instead of the device's
  bool discrete_memory = false;               // VKSPEC_MEMORY=discrete: never map device memory (as on a dGPU)
  std::string today;                          // VKSPEC_TODAY=YYYY-MM-DD: chat templates' date (tests)
};

Settings read_settings();
std::string settings_json(const Settings& s);   // one JSON object, keyed by variable

}  // namespace vkspec
