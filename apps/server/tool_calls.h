#pragma once
// Function calling ("tools") in the format Llama 3.1 and 3.2 Instruct are trained on and their chat templates
// teach: a reply that calls a tool is one JSON object {"name": NAME, "parameters": {ARGUMENTS}}, and nothing
// else. The tools come in OpenAI's shape and go to the chat template as they are (it lists them in the
// prompt); this module checks them, makes the JSON schema of a call (each tool's arguments as its parameters
// schema allows), and reads a finished reply back as a call or as text.
//
// As llama.cpp does for these models, the library holds the reply to that schema (the C API's json_schema):
// from the first token with tool_choice "required" or a named function; lazily with "auto" (the C API's
// grammar_trigger, kToolCallTrigger): the reply is free until it begins like a call, and a valid call from there.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace vkspec::cli {

struct ToolFunction {
  std::string name;                    // [A-Za-z0-9_-]{1,64}, unique among the tools (OpenAI's rule)
  nlohmann::ordered_json parameters;   // a JSON schema of the arguments object
};

// OpenAI's `tools`: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}, ...]
// (1..kMaxTools of them). Throws std::invalid_argument naming what is wrong. (A parameters schema with a
// keyword the library cannot honour is refused when the request is submitted, by name.)
inline constexpr size_t kMaxTools = 128;
std::vector<ToolFunction> parse_tools(const nlohmann::ordered_json& tools);

// The JSON schema of a reply that calls one of `tools`: {"name": NAME, "parameters": ARGUMENTS}, the name
// first. Each tool's local $refs (#/$defs/..., #/definitions/...) are renamed apart.
nlohmann::ordered_json tool_call_schema(const std::vector<ToolFunction>& tools);

// GBNF of the beginning of a call, {"name": " with the whitespace the library's JSON grammars allow
// (constrain/json_schema.cpp's ws): the lazy grammar's trigger.
extern const char* const kToolCallTrigger;

struct ToolCall {
  std::string name;
  std::string arguments;   // JSON text of the arguments object (OpenAI's `arguments`)
};
// A finished reply read as a call of one of `tools`: the whole text (outer whitespace aside) is one JSON
// object with a string "name" naming a tool and an object "parameters" (or "arguments"); nullopt otherwise,
// and the reply is text.
std::optional<ToolCall> parse_tool_call(std::string_view text, const std::vector<ToolFunction>& tools);

}  // namespace vkspec::cli
