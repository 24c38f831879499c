#pragma once
// A conversation that has outgrown the context, cut as Ollama cuts it (and LM Studio's rolling window): the
// oldest messages are left out until the rendered prompt leaves room for a reply, every system message stays,
// and the latest message is always kept. Used by `vkspec chat` and by Ollama's /api/chat in `vkspec serve`
// (OpenAI's endpoints answer context_length_exceeded instead, as OpenAI does).
#include <cstddef>
#include <cstdint>
#include <functional>

#include <nlohmann/json.hpp>

namespace vkspec::cli {

// Tokens kept free for the reply when a conversation is cut: the reply's limit when one is given (below the
// context; a limit of the context or more means none), else a quarter of the context; at most half of it (a
// cut never leaves the conversation less than half).
uint32_t reply_reserve(uint32_t n_ctx, int64_t max_tokens);

struct MessageWindow {
  nlohmann::ordered_json messages;   // the system messages before the cut, then every message from it on
  size_t dropped = 0;                // messages left out
};

// The longest window of `messages` (an array of {role, content, ...}) whose prompt is at most `budget`
// tokens; `prompt_tokens` counts a candidate's prompt (the caller renders and tokenizes it). A window begins
// at a user message, so that templates which require user/assistant alternation, and tool calls with their
// results, stay whole. When even the last user message onward does not fit, that smallest window is returned
// (the caller's own length check then refuses it). Candidates are bisected (a prompt does not shrink when
// earlier messages are added), so a conversation of n messages costs about log2(n) renderings.
MessageWindow fit_messages(const nlohmann::ordered_json& messages, size_t budget,
                           const std::function<size_t(const nlohmann::ordered_json&)>& prompt_tokens);

}  // namespace vkspec::cli
