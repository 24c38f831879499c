#include "common/json_text.h"

namespace vkspec::cli {
using ojson = nlohmann::ordered_json;

std::optional<ojson> parse_json_text(std::string_view text, uint32_t max_depth, bool* too_deep) {
  struct TooDeep {};
  if (too_deep) *too_deep = false;
  ojson v;
  try {
    v = ojson::parse(text, [&](int depth, ojson::parse_event_t, ojson&) {
      if (uint32_t(depth) >= max_depth) throw TooDeep{};   // (depth 0 is the outermost level) at once: nothing deeper is built
      return true;
    }, false);
  } catch (const TooDeep&) {
    if (too_deep) *too_deep = true;
    return std::nullopt;
  }
  if (v.is_discarded()) return std::nullopt;
  return v;
}

}  // namespace vkspec::cli
