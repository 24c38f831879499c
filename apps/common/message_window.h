#pragma once
// A conversation that has outgrown the context, cut as Ollama cuts it (and LM Studio's rolling window): the
// oldest messages are left out until the rendered prompt leaves room for a reply, every system message stays,
// and the latest message is always kept. `vkspec chat` keeps its cut (fit_messages); Ollama's /api/chat in
// `vkspec serve` gets the whole conversation every turn and cuts it where the turns before cut it
// (fit_messages_chained). OpenAI's endpoints answer context_length_exceeded instead, as OpenAI does.
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

// The cut for a conversation that arrives whole with every turn (Ollama's /api/chat: the server keeps no
// conversation, only a prompt cache keyed by tokens). fit_messages' longest window moves with every turn once
// the conversation is full, so every turn would prefill its whole window again. Here the cut points form a
// chain fixed by the messages themselves: the conversation's start, then each time the first user message at
// least half the budget after the cut before (by `estimate`, a message's own tokens; system messages, kept
// whatever the cut, are not counted). The window is the one from the first cut of the chain whose prompt
// (`prompt_tokens`) fits the budget, else from the last user message. A later turn appends messages, so it
// keeps the cut, and its prompt extends the cached one, until the window outgrows the budget; the cut then
// moves at least half a budget on at once (as llama.cpp's context shift discards half). Estimates choose
// cuts and spare renderings (only windows estimated to fit, `template_tokens` plus their messages' estimates,
// are rendered); `prompt_tokens` decides what fits. Both estimates must not depend on the other messages.
MessageWindow fit_messages_chained(const nlohmann::ordered_json& messages, size_t budget, size_t template_tokens,
                                   const std::function<size_t(const nlohmann::ordered_json& message)>& estimate,
                                   const std::function<size_t(const nlohmann::ordered_json&)>& prompt_tokens);

}  // namespace vkspec::cli
