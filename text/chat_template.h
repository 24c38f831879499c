#pragma once
// Chat formatting with the model's own Jinja template (GGUF key tokenizer.chat_template), rendered as
// Hugging Face transformers renders it (text/jinja.h), for `vkspec apply-template`, `vkspec chat` and
// `vkspec run --chat`.
//
// Messages are JSON as OpenAI's chat API and transformers take them: an array of objects with a string
// "role" and a "content" (a string, null, or whatever the template understands), optionally "tool_calls"
// and other keys, passed to the template untouched.
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "text/jinja.h"

namespace vkspec {

struct ChatInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::optional<nlohmann::ordered_json> tools;   // the `tools` variable, only when given
  bool add_generation_prompt = true;
  std::string bos_token, eos_token;              // the vocabulary's texts of its BOS / EOS tokens
};

class ChatTemplate {
 public:
  // Parses the template; throws Error("chat template: line L, column C: ...") on a syntax error.
  explicit ChatTemplate(const std::string& source, jinja::Limits limits = {});
  // The template a GGUF carries, if any.
  static std::optional<std::string> from_gguf(const GgufFile& f);

  // The prompt text; throws Error("chat template: ...") when the template fails or raises.
  std::string apply(const ChatInputs& in) const;

 private:
  std::shared_ptr<const jinja::Template> t_;
  jinja::Limits limits_;
};

// A messages file: a JSON array of messages, or an object {"messages": [...], "tools": [...]} (a chat
// completion request). Checks that every message is an object with a string "role"; throws Error naming
// what is wrong.
ChatInputs parse_chat_request(const std::string& json_text);

}  // namespace vkspec
