#pragma once
// Option values that the CLI's flags and the server's request fields both spell, named once.
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>

#include "vkspec.h"

namespace vkspec::cli {

// --spec-sampling and the server's spec_sampling: the VKSPEC_SPEC_SAMPLING_* values in order.
inline const char* const kSpecSamplingNames[] = {"coupled", "rejection"};
static_assert(VKSPEC_SPEC_SAMPLING_COUPLED == 0 && VKSPEC_SPEC_SAMPLING_REJECTION == 1);
// --draft-tree and the server's draft_tree: vkspec_draft_params.tree's values 0, 1, 2 in order.
inline const char* const kDraftTreeNames[] = {"off", "auto", "wide"};

// The index of `name` among `names` (the option's value); -1 for another.
template <std::size_t N>
int32_t option_value(const char* const (&names)[N], std::string_view name) {
  for (int32_t i = 0; i < int32_t(N); ++i)
    if (name == names[i]) return i;
  return -1;
}
inline int32_t spec_sampling_value(std::string_view name) { return option_value(kSpecSamplingNames, name); }
inline int32_t draft_tree_value(std::string_view name) { return option_value(kDraftTreeNames, name); }

}  // namespace vkspec::cli
