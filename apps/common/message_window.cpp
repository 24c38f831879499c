#include "common/message_window.h"

#include <algorithm>
#include <vector>

namespace vkspec::cli {

uint32_t reply_reserve(uint32_t n_ctx, int64_t max_tokens) {
  const int64_t want = max_tokens > 0 && max_tokens < int64_t(n_ctx) ? max_tokens : int64_t(n_ctx / 4);
  return uint32_t(std::min<int64_t>(want, n_ctx / 2));
}

namespace {
bool is_role(const nlohmann::ordered_json& m, const char* role) {
  return m.is_object() && m.contains("role") && m["role"] == role;
}

nlohmann::ordered_json window_from(const nlohmann::ordered_json& messages, size_t cut) {
  nlohmann::ordered_json w = nlohmann::ordered_json::array();
  for (size_t i = 0; i < cut; ++i)
    if (is_role(messages[i], "system")) w.push_back(messages[i]);
  for (size_t i = cut; i < messages.size(); ++i) w.push_back(messages[i]);
  return w;
}
}  // namespace

MessageWindow fit_messages(const nlohmann::ordered_json& messages, size_t budget,
                           const std::function<size_t(const nlohmann::ordered_json&)>& prompt_tokens) {
  // Cut points: the whole conversation (0), and each later user message; the last message is always kept.
  std::vector<size_t> cuts = {0};
  for (size_t i = 1; i < messages.size(); ++i)
    if (is_role(messages[i], "user")) cuts.push_back(i);
  // The first cut whose window fits: fits(cuts[k]) is false then true as k grows (windows only shrink).
  size_t lo = 0, hi = cuts.size() - 1;   // invariant: every cut before lo does not fit; the answer is <= hi
  if (prompt_tokens(window_from(messages, cuts[hi])) <= budget) {
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (prompt_tokens(window_from(messages, cuts[mid])) <= budget) hi = mid;
      else lo = mid + 1;
    }
  }
  const size_t cut = cuts[hi];
  MessageWindow w;
  w.messages = window_from(messages, cut);
  w.dropped = messages.size() - w.messages.size();
  return w;
}

MessageWindow fit_messages_chained(const nlohmann::ordered_json& messages, size_t budget, size_t template_tokens,
                                   const std::function<size_t(const nlohmann::ordered_json& message)>& estimate,
                                   const std::function<size_t(const nlohmann::ordered_json&)>& prompt_tokens) {
  const size_t n = messages.size();
  std::vector<size_t> est(n);
  size_t last_user = 0;
  for (size_t i = 0; i < n; ++i) {
    est[i] = estimate(messages[i]);
    if (i > 0 && is_role(messages[i], "user")) last_user = i;
  }
  // estimated tokens of the window from cut c: the system messages before it and every message from it on
  std::vector<size_t> from(n + 1, 0), system_before(n + 1, 0);
  for (size_t i = n; i-- > 0;) from[i] = from[i + 1] + est[i];
  for (size_t i = 0; i < n; ++i) system_before[i + 1] = system_before[i] + (is_role(messages[i], "system") ? est[i] : 0);
  const auto estimated = [&](size_t c) { return template_tokens + system_before[c] + from[c]; };
  // the cut after c in the chain: the first user message at least budget/2 of non-system messages on
  const auto next = [&](size_t c) {
    size_t dropped = 0;
    for (size_t i = c; i < last_user; ++i) {
      if (i > c && dropped >= budget / 2 && is_role(messages[i], "user")) return i;
      if (!is_role(messages[i], "system")) dropped += est[i];
    }
    return last_user;
  };
  size_t cut = 0;
  while (cut < last_user) {
    if (estimated(cut) <= budget && prompt_tokens(window_from(messages, cut)) <= budget) break;
    cut = next(cut);
  }
  MessageWindow w;
  w.messages = window_from(messages, cut);
  w.dropped = n - w.messages.size();
  return w;
}

}  // namespace vkspec::cli
