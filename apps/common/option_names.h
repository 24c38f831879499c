#pragma once
// Option values that the CLI's flags and the server's request fields both spell, named once.
#include <cstdint>
#include <iterator>
#include <string_view>

#include "vkspec.h"

namespace vkspec::cli {

// --spec-sampling and the server's spec_sampling: the VKSPEC_SPEC_SAMPLING_* values in order.
inline const char* const kSpecSamplingNames[] = {"coupled", "rejection"};
static_assert(VKSPEC_SPEC_SAMPLING_COUPLED == 0 && VKSPEC_SPEC_SAMPLING_REJECTION == 1);
// The value of a name; -1 for another.
inline int32_t spec_sampling_value(std::string_view name) {
  for (int32_t i = 0; i < int32_t(std::size(kSpecSamplingNames)); ++i)
    if (name == kSpecSamplingNames[i]) return i;
  return -1;
}

}  // namespace vkspec::cli
