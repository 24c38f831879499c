#pragma once
// JSON text as the CLI and the server read it (the library's own reader is core/json_text.h; both nest at most
// VKSPEC_MAX_JSON_DEPTH levels, include/vkspec.h).
#include <cstdint>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "vkspec.h"

namespace vkspec::cli {

// JSON text -> value, nested at most max_depth deep: nlohmann's copy, dump and comparison recurse, so a deeper
// value must never exist. nullopt when the text is not JSON or nests deeper (*too_deep says which). Every JSON
// text the CLI and the server read goes through here (bodies, tool-call arguments, replies, conversation files).
std::optional<nlohmann::ordered_json> parse_json_text(std::string_view text, uint32_t max_depth = VKSPEC_MAX_JSON_DEPTH,
                                                      bool* too_deep = nullptr);

}  // namespace vkspec::cli
