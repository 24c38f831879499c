#pragma once
// From request text to prompt tokens, shared by the CLI, the C API and the server (no device involved): the
// prompt encodings and the chat template of a model (loader/chat_template.h).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loader/chat_template.h"
#include "loader/gguf.h"
#include "loader/tokenizer.h"

namespace vkspec::cli {

// A prompt's token ids (BOS added when the model wants it); throws when it is empty.
std::vector<uint32_t> encode_prompt(const Tokenizer& tok, const std::string& text);
// A prompt rendered by a chat template: special tokens parsed, BOS added only when the model wants one and
// the template did not write it.
std::vector<uint32_t> encode_chat(const Tokenizer& tok, const std::string& text);

// The template of the GGUF, or of `template_file` when given; throws a clear error when there is none.
class ChatFormatter {
 public:
  ChatFormatter(const GgufFile& f, const Tokenizer& tok, const std::string& template_file);
  // From Jinja source (nullopt: none, which is the clear error above).
  ChatFormatter(const Tokenizer& tok, const std::optional<std::string>& source);
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const std::optional<nlohmann::ordered_json>& tools = std::nullopt) const;

 private:
  std::unique_ptr<ChatTemplate> t_;
  std::string bos_, eos_;
};

}  // namespace vkspec::cli
