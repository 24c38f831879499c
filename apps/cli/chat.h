#pragma once
// `vkspec chat`'s conversation on one context of the C API (apps/common/api.h), whose KV cache is kept between
// turns, so that each turn prefills only what is new.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/cli_common.h"

namespace vkspec::cli {

// One conversation on one context. Each turn renders the whole conversation; the tokens are the previous
// turn's tokens (prompt and reply, exactly as generated) followed by the tokenized rest of the new text, so
// the cache's common prefix covers every earlier turn and only the new turn is prefilled. When a template
// rewrites earlier text (some put the system message into the last user turn), the text is tokenized whole
// and the cache still keeps the longest common prefix.
class Conversation {
 public:
  // template_source: --chat-template's, or nullopt for the model's own
  Conversation(const api::Model& model, api::Context& ctx, std::optional<std::string> template_source, std::string system);

  struct Turn {
    std::string prompt;                 // the rendered conversation this turn continued
    std::vector<int32_t> prompt_ids;    // its tokens: earlier turns as generated, then the new text
    std::vector<int32_t> ids;           // the reply's tokens
    std::string reply;                  // the reply text (also added to the conversation)
    size_t dropped_messages = 0;        // the oldest messages left out to fit the context (message_window.h)
    vkspec_metrics m{};
  };
  // Adds the user message and generates the reply; `on_text` receives it as it comes (valid UTF-8 pieces)
  // and returns false to stop it (the reply so far stays in the conversation). A conversation that would
  // leave less than reply_reserve(n_ctx, n) tokens for the reply first loses its oldest exchanges, for good,
  // until it is at most half the context (the system message stays). Throws Error when even the new message does not fit (then nothing was added).
  // on_prompt (optional): called between the chunks of the prompt's new tokens with the fraction read so
  // far; false stops the reply there (Ctrl-C while a pasted page is read).
  Turn reply(const std::string& user_text, int n, const std::function<bool(const std::string&)>& on_text,
             const std::function<bool(float)>& on_prompt = {});
  void clear();   // a new conversation (same system message); the cache is reused where it matches
  // Takes the last exchange back (llama-cli's /regen): its user message, to be sent again; nullopt when the
  // conversation does not end with a reply.
  std::optional<std::string> take_back_last_exchange();
  // The conversation as messages ({role, content}: apply-template's --messages format), and a saved one
  // taken back (the next turn continues it; the cache is reused where it matches). load() throws Error for
  // anything but an array of objects with a string role (system, user, assistant) and a string content.
  const nlohmann::ordered_json& messages() const { return messages_; }
  void load(const nlohmann::ordered_json& messages);
  uint32_t cached_tokens() const { return ctx_.info().cached_tokens; }

  // Totals over the conversation, for /stats.
  struct Totals {
    uint64_t turns = 0, generated = 0, prefilled = 0, reused = 0;
    double prefill_s = 0, decode_s = 0;
    SpecTotals spec;
  };
  const Totals& totals() const { return totals_; }

 private:
  const api::Model& model_;
  api::Context& ctx_;
  std::optional<std::string> template_;
  std::string system_;
  nlohmann::ordered_json messages_;
  std::string last_text_;               // the text last_tokens_ stand for
  std::vector<int32_t> last_tokens_;    // the last turn's prompt and reply tokens
  uint32_t n_ctx_;
  Totals totals_;
};

}  // namespace vkspec::cli
