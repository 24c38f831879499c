#include "loader/json_schema.h"

#include <map>
#include <set>
#include <vector>

#include "runtime/core.h"

namespace vkspec {

namespace {
using json = nlohmann::ordered_json;

// The values of JSON, in json.gbnf's layout (whitespace after every value; see loader/json_grammar.h).
constexpr const char* kPrimitives = R"(ws ::= | " " | "\n" [ \t]{0,20}
char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4})
string ::= "\"" char* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
integer ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ws
boolean ::= ("true" | "false") ws
null ::= "null" ws
value ::= object | array | string | number | boolean | null
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array ::= "[" ws ( value ("," ws value)* )? "]" ws
)";

// Keywords that only describe (or that the grammar satisfies by generating less: additionalProperties).
const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema", "$id",
                                            "$comment", "additionalProperties", "strict", "name", "readOnly",
                                            "writeOnly", "deprecated", "$defs", "definitions"};
const std::set<std::string> kKeywords = {"type", "properties", "required", "items", "minItems", "maxItems",
                                         "minLength", "maxLength", "enum", "const", "anyOf", "$ref"};

// A GBNF literal matching exactly `text`.
std::string literal(const std::string& text) {
  std::string out = "\"";
  for (const unsigned char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += char(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789ABCDEF";
      out += "\\x", out += hex[c >> 4], out += hex[c & 15];
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) {}
  std::string run() {
    const std::string top = visit(root_, "root", 0);
    std::string out = "root ::= " + top + "\n" + kPrimitives;
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  [[noreturn]] static void fail(const std::string& what) { throw Error("JSON schema: " + what); }
  std::string fresh(const std::string& hint) {
    std::string base;
    for (const char c : hint)
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) base += c;
    if (base.size() > 24) base.resize(24);
    std::string name(1, 's');
    name += std::to_string(++n_);
    name += '-';
    return name + base;
  }
  std::string add(const std::string& hint, const std::string& body) {
    const std::string name = fresh(hint);
    rules_[name] = body;
    return name;
  }
  std::string ref(const std::string& path, int depth) {
    if (auto it = refs_.find(path); it != refs_.end()) return it->second;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (path.rfind(p, 0) != 0) continue;
      const std::string key = path.substr(p.size()), where = p.substr(2, p.size() - 3);
      if (!root_.contains(where) || !root_[where].is_object() || !root_[where].contains(key))
        fail("$ref '" + path + "' names no definition");
      const std::string name = fresh(key);
      refs_[path] = name;   // before visiting: a definition may refer to itself
      rules_[name] = visit(root_[where][key], key, depth + 1);
      return name;
    }
    fail("$ref '" + path + "' is not a local #/$defs/ or #/definitions/ reference");
  }
  std::string object(const json& s, const std::string& hint, int depth) {
    const json props = s.value("properties", json::object());
    if (!props.is_object()) fail("'properties' must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail("'required' must be an array");
      for (const json& r : s["required"]) {
        if (!r.is_string()) fail("'required' must list property names");
        required.insert(r.get<std::string>());
      }
    }
    if (props.empty() && required.empty()) return "object";
    std::vector<std::string> req, opt;
    const auto kv = [&](const std::string& key, const json& sub) {
      return literal(json(key).dump()) + " ws \":\" ws " + visit(sub, hint + "-" + key, depth + 1);
    };
    for (const auto& [key, sub] : props.items()) (required.count(key) ? req : opt).push_back(kv(key, sub));
    for (const std::string& key : required)
      if (!props.contains(key)) req.push_back(kv(key, json::object()));
    std::string body = "\"{\" ws ";
    if (!req.empty()) {
      for (size_t i = 0; i < req.size(); ++i) body += (i ? "\",\" ws " : "") + req[i] + " ";
      for (const std::string& o : opt) body += "(\",\" ws " + o + ")? ";
    } else {   // the first optional property present has no comma before it
      std::string alts;
      for (size_t i = 0; i < opt.size(); ++i) {
        std::string alt = opt[i];
        for (size_t j = i + 1; j < opt.size(); ++j) alt += " (\",\" ws " + opt[j] + ")?";
        alts += (i ? " | " : "") + alt;
      }
      body += "(" + alts + ")? ";
    }
    return add(hint, body + "\"}\" ws");
  }
  static int64_t count(const json& s, const char* key) {
    if (!s.contains(key)) return -1;
    if (!s[key].is_number_unsigned() || s[key].get<uint64_t>() > 1024)
      fail(std::string("'") + key + "' must be an integer in 0..1024");
    return int64_t(s[key].get<uint64_t>());
  }
  static std::string bounds(int64_t min, int64_t max) {
    std::string b(1, '{');
    b += std::to_string(min);
    b += ',';
    if (max >= 0) b += std::to_string(max);
    return b + '}';
  }
  std::string array(const json& s, const std::string& hint, int depth) {
    const std::string item = s.contains("items") ? visit(s["items"], hint + "-item", depth + 1) : "value";
    const int64_t min = std::max<int64_t>(0, count(s, "minItems")), max = count(s, "maxItems");
    if (max >= 0 && max < min) fail("'maxItems' is below 'minItems'");
    if (max == 0) return "\"[\" ws \"]\" ws";
    std::string list = item + " (\",\" ws " + item + ")" + bounds(min > 0 ? min - 1 : 0, max < 0 ? -1 : max - 1);
    if (min == 0) list = "(" + list + ")?";
    return add(hint, "\"[\" ws " + list + " \"]\" ws");
  }
  std::string string(const json& s, const std::string& hint) {
    const int64_t min = count(s, "minLength"), max = count(s, "maxLength");
    if (min < 0 && max < 0) return "string";
    if (max >= 0 && max < std::max<int64_t>(0, min)) fail("'maxLength' is below 'minLength'");
    return add(hint, "\"\\\"\" char" + bounds(std::max<int64_t>(0, min), max) + " \"\\\"\" ws");
  }
  std::string typed(const json& s, const std::string& type, const std::string& hint, int depth) {
    if (type == "object") return object(s, hint, depth);
    if (type == "array") return array(s, hint, depth);
    if (type == "string") return string(s, hint);
    if (type == "number" || type == "integer" || type == "boolean" || type == "null") return type;
    fail("unknown type '" + type + "'");
  }
  std::string visit(const json& s, const std::string& hint, int depth) {
    if (depth > 64) fail("nested deeper than 64");
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail("'false' accepts no value");
      return "value";
    }
    if (!s.is_object()) fail("a schema must be an object or a boolean");
    for (const auto& [key, v] : s.items())
      if (!kKeywords.count(key) && !kAnnotations.count(key)) fail("the keyword '" + key + "' is not supported");
    if (s.contains("$ref")) {
      for (const auto& [key, v] : s.items())
        if (key != "$ref" && kKeywords.count(key)) fail("'$ref' with '" + key + "' beside it is not supported");
      if (!s["$ref"].is_string()) fail("'$ref' must be a string");
      return ref(s["$ref"].get<std::string>(), depth);
    }
    if (s.contains("const")) return "(" + literal(s["const"].dump()) + " ws)";
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) fail("'enum' must be a non-empty array");
      std::string alts;
      for (const json& v : s["enum"]) alts += (alts.empty() ? "" : " | ") + literal(v.dump());
      return "((" + alts + ") ws)";
    }
    if (s.contains("anyOf")) {
      if (!s["anyOf"].is_array() || s["anyOf"].empty()) fail("'anyOf' must be a non-empty array");
      for (const auto& [key, v] : s.items())
        if (key != "anyOf" && kKeywords.count(key)) fail("'anyOf' with '" + key + "' beside it is not supported");
      std::string alts;
      for (const json& sub : s["anyOf"]) alts += (alts.empty() ? "" : " | ") + visit(sub, hint, depth + 1);
      return "(" + alts + ")";
    }
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) return typed(s, t.get<std::string>(), hint, depth);
      if (!t.is_array() || t.empty()) fail("'type' must be a string or a non-empty array of strings");
      std::string alts;
      for (const json& one : t) {
        if (!one.is_string()) fail("'type' must be a string or a non-empty array of strings");
        alts += (alts.empty() ? "" : " | ") + typed(s, one.get<std::string>(), hint, depth);
      }
      return "(" + alts + ")";
    }
    if (s.contains("properties") || s.contains("required")) return object(s, hint, depth);
    if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) return array(s, hint, depth);
    if (s.contains("minLength") || s.contains("maxLength")) return string(s, hint);
    return "value";
  }

  const json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
  int n_ = 0;
};
}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) { return Converter(schema).run(); }

}  // namespace vkspec
