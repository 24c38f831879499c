#include "text/prompt.h"
#include "core/core.h"

namespace vkspec {

std::vector<uint32_t> tokenize(const Tokenizer& tok, std::string_view text, AddBos bos, bool parse_special) {
  bool add = bos != AddBos::Never && tok.add_bos();
  if (bos == AddBos::IfWantedUnlessPresent && tok.bos() >= 0) {
    const std::string& bos_text = tok.text(uint32_t(tok.bos()));
    add = add && !(!bos_text.empty() && text.substr(0, bos_text.size()) == bos_text);
  }
  return tok.encode(text, add, parse_special);
}

ChatFormatter::ChatFormatter(const Tokenizer& tok, const std::optional<std::string>& source) {
  if (!source)
    throw Error("the model has no chat template (tokenizer.chat_template); give one with --chat-template FILE");
  t_ = std::make_unique<ChatTemplate>(*source);
  if (tok.bos() >= 0) bos_ = tok.text(uint32_t(tok.bos()));
  if (tok.eos() >= 0) eos_ = tok.text(uint32_t(tok.eos()));
}

std::string ChatFormatter::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                  const std::optional<nlohmann::ordered_json>& tools) const {
  ChatInputs in;
  in.messages = messages;
  in.tools = tools;
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = bos_;
  in.eos_token = eos_;
  return t_->apply(in);
}

}  // namespace vkspec
