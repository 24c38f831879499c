#pragma once
// From request text to prompt tokens, shared by the CLI, the C API and the server (no device involved): the
// prompt encodings and the chat template of a model (text/chat_template.h).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/chat_template.h"
#include "gguf/gguf.h"
#include "text/tokenizer.h"

namespace vkspec {

// How tokenize() adds BOS (the C API's add_bos values).
enum class AddBos { Never = 0, IfWanted = 1, IfWantedUnlessPresent = 2 };
// The token ids of `text`. IfWanted: BOS first when the model wants one; IfWantedUnlessPresent: also, unless
// the text already begins with BOS's text (a chat template that wrote it).
std::vector<uint32_t> tokenize(const Tokenizer& tok, std::string_view text, AddBos bos, bool parse_special);

// A chat template (the GGUF's or the user's) with the model's BOS and EOS texts.
class ChatFormatter {
 public:
  // From Jinja source (nullopt: none, which is a clear error naming --chat-template).
  ChatFormatter(const Tokenizer& tok, const std::optional<std::string>& source);
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const std::optional<nlohmann::ordered_json>& tools = std::nullopt) const;

 private:
  std::unique_ptr<ChatTemplate> t_;
  std::string bos_, eos_;
};

}  // namespace vkspec
