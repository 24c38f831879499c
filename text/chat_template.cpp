#include "text/chat_template.h"

#include "core/json_text.h"

namespace vkspec {

ChatTemplate::ChatTemplate(const std::string& source, jinja::Limits limits) : limits_(limits) {
  try {
    t_ = jinja::parse(source);
  } catch (const Error& e) {
    throw Error(std::string("chat template: ") + e.what());
  }
}

std::optional<std::string> ChatTemplate::from_gguf(const GgufFile& f) {
  const GgufValue* v = f.find("tokenizer.chat_template");
  if (!v) return std::nullopt;
  if (v->type != GgufType::STRING) throw Error("tokenizer.chat_template is not a string");
  return v->str;
}

std::string ChatTemplate::apply(const ChatInputs& in) const {
  std::map<std::string, jinja::Value> vars;
  try {
    vars["messages"] = jinja::Value::from_json(in.messages);
    if (in.tools) vars["tools"] = jinja::Value::from_json(*in.tools);
  } catch (const Error& e) {
    throw Error(std::string("chat messages: ") + e.what());
  }
  vars["add_generation_prompt"] = jinja::Value::boolean(in.add_generation_prompt);
  vars["bos_token"] = jinja::Value::str(in.bos_token);
  vars["eos_token"] = jinja::Value::str(in.eos_token);
  try {
    return jinja::render(*t_, vars, limits_);
  } catch (const Error& e) {
    throw Error(std::string("chat template: ") + e.what());
  }
}

ChatInputs parse_chat_request(const std::string& json_text) {
  nlohmann::ordered_json j = parse_json_text(json_text, "the messages");
  ChatInputs in;
  if (j.is_object()) {
    if (!j.contains("messages")) throw Error("the request has no \"messages\" array");
    if (j.contains("tools") && !j["tools"].is_null()) {
      if (!j["tools"].is_array()) throw Error("\"tools\" must be an array");
      in.tools = j["tools"];
    }
    j = j["messages"];
  }
  if (!j.is_array()) throw Error("the messages must be a JSON array of {\"role\": ..., \"content\": ...} objects");
  for (size_t k = 0; k < j.size(); ++k) {
    const auto& m = j[k];
    const std::string where = "message " + std::to_string(k + 1);
    if (!m.is_object()) throw Error(where + " is not an object");
    if (!m.contains("role") || !m["role"].is_string()) throw Error(where + " has no string \"role\"");
  }
  in.messages = std::move(j);
  return in;
}

}  // namespace vkspec
