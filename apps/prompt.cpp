#include "apps/prompt.h"

#include <cstdio>

#include "apps/cli_common.h"

namespace vkspec::cli {

std::vector<uint32_t> encode_prompt(const Tokenizer& tok, const std::string& text) {
  std::vector<uint32_t> ids = tok.encode(text, tok.add_bos(), true);
  if (ids.empty()) throw Error("the prompt is empty and the model adds no BOS token");
  if (tok.add_bos() && ids.size() >= 2 && int(ids[0]) == tok.bos() && int(ids[1]) == tok.bos())   // as llama.cpp
    fprintf(stderr, "vkspec: warning: the prompt starts with a BOS token and the model adds one too: it now starts "
                    "with two (leave BOS out of the prompt text)\n");
  return ids;
}

std::vector<uint32_t> encode_chat(const Tokenizer& tok, const std::string& text) {
  const int bos = tok.bos();
  const bool has_bos = bos >= 0 && !tok.text(uint32_t(bos)).empty() && text.rfind(tok.text(uint32_t(bos)), 0) == 0;
  std::vector<uint32_t> ids = tok.encode(text, tok.add_bos() && !has_bos, true);
  if (ids.empty()) throw Error("the chat template rendered an empty prompt");
  return ids;
}

ChatFormatter::ChatFormatter(const GgufFile& f, const Tokenizer& tok, const std::string& template_file)
    : ChatFormatter(tok, template_file.empty() ? ChatTemplate::from_gguf(f)
                                               : read_text_file(template_file, 1u << 20, "chat template file")) {}

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

}  // namespace vkspec::cli
