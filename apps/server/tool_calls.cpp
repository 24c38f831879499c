#include "server/tool_calls.h"

#include <set>
#include <stdexcept>

#include "server/server_api.h"

namespace vkspec::cli {
namespace {
using json = nlohmann::ordered_json;

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (const char c : n)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  return true;
}

// `s` with its local references renamed apart: "#/$defs/X" and "#/definitions/X" become "#/$defs/<prefix>X".
json rename_refs(const json& s, const std::string& prefix) {
  if (s.is_array()) {
    json out = json::array();
    for (const json& v : s) out.push_back(rename_refs(v, prefix));
    return out;
  }
  if (!s.is_object()) return s;
  json out = json::object();
  for (const auto& [key, v] : s.items()) {
    if (key == "$ref" && v.is_string()) {
      std::string ref = v.get<std::string>();
      for (const std::string from : {"#/$defs/", "#/definitions/"})
        if (ref.rfind(from, 0) == 0) ref = "#/$defs/" + prefix + ref.substr(from.size());
      out[key] = ref;
    } else if (key == "enum" || key == "const") {   // values, not schemas
      out[key] = v;
    } else {
      out[key] = rename_refs(v, prefix);
    }
  }
  return out;
}

// A tool's schema with its definitions renamed apart (rename_refs) and moved into `defs`.
json relocate(const json& schema, const std::string& prefix, json& defs) {
  json top = rename_refs(schema, prefix);
  if (top.is_object())
    for (const char* where : {"$defs", "definitions"}) {
      if (!top.contains(where)) continue;
      if (!top[where].is_object()) throw std::invalid_argument(std::string("JSON schema: '") + where + "' must be an object");
      for (const auto& [key, def] : top[where].items()) defs[prefix + key] = def;
      top.erase(where);
    }
  return top;
}

}  // namespace

const char* const kToolCallTrigger =
    "root ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws \"\\\"\"\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

std::vector<ToolFunction> parse_tools(const json& tools) {
  if (!tools.is_array() || tools.empty() || tools.size() > kMaxTools)
    throw std::invalid_argument("'tools' must be an array of 1.." + std::to_string(kMaxTools) + " tools");
  std::vector<ToolFunction> out;
  std::set<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) throw std::invalid_argument("'" + where + "' must be an object");
    if (t.contains("type") && t["type"] != "function") throw std::invalid_argument("'" + where + ".type' must be \"function\"");
    if (!t.contains("function") || !t["function"].is_object())
      throw std::invalid_argument("'" + where + ".function' must be an object {\"name\", \"description\", \"parameters\"}");
    const json& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || !valid_name(f["name"].get<std::string>()))
      throw std::invalid_argument("'" + where + ".function.name' must be 1..64 letters, digits, '_' or '-'");
    if (f.contains("description") && !f["description"].is_string() && !f["description"].is_null())
      throw std::invalid_argument("'" + where + ".function.description' must be a string");
    ToolFunction fn{f["name"].get<std::string>(), json{{"type", "object"}, {"properties", json::object()}}};
    if (!names.insert(fn.name).second) throw std::invalid_argument("'" + where + "': two tools are named '" + fn.name + "'");
    if (f.contains("parameters") && !f["parameters"].is_null()) {
      if (!f["parameters"].is_object()) throw std::invalid_argument("'" + where + ".function.parameters' must be a JSON schema object");
      fn.parameters = f["parameters"];
    }
    out.push_back(std::move(fn));
  }
  return out;
}

json tool_call_schema(const std::vector<ToolFunction>& tools) {
  if (tools.empty()) throw std::invalid_argument("internal: a tool-call schema without tools");
  json calls = json::array(), defs = json::object();
  for (size_t i = 0; i < tools.size(); ++i) {
    std::string prefix = std::to_string(i);   // (not "t" + to_string: GCC 12's -Wrestrict)
    prefix.insert(prefix.begin(), 't');
    prefix += '-';
    const json args = relocate(tools[i].parameters, prefix, defs);
    calls.push_back({{"type", "object"},
                     {"properties", {{"name", {{"const", tools[i].name}}}, {"parameters", args}}},
                     {"required", {"name", "parameters"}}});
  }
  json schema = calls.size() == 1 ? calls[0] : json{{"anyOf", calls}};
  if (!defs.empty()) schema["$defs"] = defs;
  return schema;
}

std::optional<ToolCall> parse_tool_call(std::string_view text, const std::vector<ToolFunction>& tools) {
  const size_t b = text.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos || text[b] != '{') return std::nullopt;
  const std::optional<nlohmann::ordered_json> parsed = parse_json_text(text.substr(b));   // (a reply may nest deep)
  if (!parsed) return std::nullopt;
  const json& j = *parsed;
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  const std::string name = j["name"].get<std::string>();
  bool known = false;
  for (const ToolFunction& t : tools) known = known || t.name == name;
  if (!known) return std::nullopt;
  for (const char* key : {"parameters", "arguments"})
    if (j.contains(key) && j[key].is_object()) return ToolCall{name, j[key].dump()};
  return std::nullopt;
}

}  // namespace vkspec::cli
