#pragma once
// Chat on top of the Engine: the model's chat template (loader/chat_template.h) and a Conversation that
// keeps its KV cache between turns, so that each turn prefills only what is new. Shared by `vkspec chat`,
// `vkspec run --chat` and `vkspec apply-template` (and later the C API and the server).
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/engine.h"
#include "apps/prompt.h"
#include "loader/chat_template.h"

namespace vkspec::cli {

// One conversation on one Session. Each turn renders the whole conversation; the tokens are the previous
// turn's tokens (prompt and reply, exactly as generated) followed by the tokenized rest of the new text, so
// the cache's common prefix covers every earlier turn and only the new turn is prefilled. When a template
// rewrites earlier text (some put the system message into the last user turn), the text is tokenized whole
// and the cache still keeps the longest common prefix.
class Conversation {
 public:
  Conversation(Engine& engine, const ChatFormatter& fmt, std::string system);
  ~Conversation();
  Conversation(const Conversation&) = delete;
  Conversation& operator=(const Conversation&) = delete;

  struct Turn {
    std::string prompt;   // the rendered conversation this turn continued
    std::vector<uint32_t> prompt_ids;   // its tokens: earlier turns as generated, then the new text
    std::string reply;    // the reply text (also added to the conversation)
    Completion c;
  };
  // Adds the user message and generates the reply; `on_text` receives it as it comes (valid UTF-8 pieces)
  // and returns false to stop it (the reply so far stays in the conversation). Throws Error when the
  // conversation no longer fits the context (then nothing was added).
  Turn reply(const std::string& user_text, const SamplingParams& sp, int n,
             const std::function<bool(const std::string&)>& on_text);
  void clear();   // a new conversation (same system message); the cache is reused where it matches
  uint32_t cached_tokens() const { return uint32_t(session_.tokens.size()); }
  const nlohmann::ordered_json& messages() const { return messages_; }

  // Totals over the conversation, for /stats.
  struct Totals {
    uint64_t turns = 0, generated = 0, prefilled = 0, reused = 0;
    double prefill_s = 0, decode_s = 0;
    SpeculativeStats spec;
  };
  const Totals& totals() const { return totals_; }

 private:
  Engine& engine_;
  const ChatFormatter& fmt_;
  std::string system_;
  Session session_;
  nlohmann::ordered_json messages_;
  std::string last_text_;                // the text last_tokens_ stand for
  std::vector<uint32_t> last_tokens_;    // the last turn's prompt and reply tokens
  Totals totals_;
};

}  // namespace vkspec::cli
