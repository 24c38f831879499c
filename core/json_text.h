#pragma once
// JSON text from outside the library (the C API's messages and schemas, and through them files and requests)
// parsed with a nesting limit. nlohmann's copy, dump and comparison recurse, so a value nested deeper than the
// stack allows must never exist: it is refused here, where the text enters, with the reason.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/core.h"

namespace vkspec {

constexpr int kMaxJsonDepth = 64;   // = VKSPEC_MAX_JSON_DEPTH (include/vkspec.h; checked in engine/c_api.cpp)

// `what` names the text in the message ("the messages", "the JSON schema"); throws Error.
inline nlohmann::ordered_json parse_json_text(std::string_view text, const std::string& what) {
  try {
    // (depth 0 is the outermost level)
    return nlohmann::ordered_json::parse(text, [&](int depth, nlohmann::ordered_json::parse_event_t, nlohmann::ordered_json&) {
      if (depth >= kMaxJsonDepth) throw Error(what + ": the JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
      return true;
    });
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + ": not valid JSON: " + e.what());
  }
}

}  // namespace vkspec
