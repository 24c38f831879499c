#include "loader/json_schema.h"

#include <cmath>
#include <map>
#include <optional>
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
// (minimum, maximum and their exclusive forms: for integers)
const std::set<std::string> kBounds = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
const std::set<std::string> kKeywords = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                         "type", "properties", "required", "items", "minItems", "maxItems",
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

// Integers as decimal text (no leading zero, at most 16 digits as json.gbnf's numbers), range by range: the
// alternatives whose sentences are exactly the integers in [a, b] of one digit count, first digit first.
void same_length(const std::string& a, const std::string& b, const std::string& prefix, std::vector<std::string>& out) {
  const size_t n = a.size();
  const auto digits = [](size_t k) { return k ? " [0-9]{" + std::to_string(k) + "}" : std::string(); };
  const auto cls = [](char x, char y) { return x == y ? std::string("\"") + x + "\"" : std::string("[") + x + "-" + y + "]"; };
  if (a == b) {
    out.push_back(prefix + (prefix.empty() ? "" : " ") + literal(a));
    return;
  }
  const std::string head = prefix + (prefix.empty() ? "" : " ");
  if (a[0] == b[0]) return same_length(a.substr(1), b.substr(1), head + cls(a[0], a[0]), out);
  const bool a_low = a.find_first_not_of('0', 1) == std::string::npos, b_high = b.find_first_not_of('9', 1) == std::string::npos;
  if (!a_low) same_length(a.substr(1), std::string(n - 1, '9'), head + cls(a[0], a[0]), out);
  const char lo = a_low ? a[0] : char(a[0] + 1), hi = b_high ? b[0] : char(b[0] - 1);
  if (lo <= hi) out.push_back(head + cls(lo, hi) + digits(n - 1));
  if (!b_high) same_length(std::string(n - 1, '0'), b.substr(1), head + cls(b[0], b[0]), out);
}
constexpr uint64_t kMaxInteger = 9999999999999999ull;   // 16 digits
std::string integers(uint64_t a, std::optional<uint64_t> b) {   // [a, b]; no b: [a, 16 digits]
  std::vector<std::string> alts;
  const std::string A = std::to_string(a), B = std::to_string(b.value_or(kMaxInteger));
  uint64_t low = a;
  for (size_t n = A.size(); n <= B.size(); ++n) {
    const uint64_t top = n == B.size() ? b.value_or(kMaxInteger) : std::stoull(std::string(n, '9'));
    same_length(std::to_string(low), std::to_string(top), "", alts);
    low = top + 1;
  }
  std::string out;
  for (const std::string& alt : alts) out += (out.empty() ? "" : " | ") + alt;
  return "(" + out + ")";
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
  // An integer bound (minimum, maximum, their exclusive forms: numbers in draft 6 and later, booleans beside
  // minimum/maximum in draft 4) as the inclusive integer one.
  static std::optional<int64_t> bound(const json& s, bool lower) {
    std::optional<int64_t> b;
    const char* key = lower ? "minimum" : "maximum";
    const char* exclusive = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    auto number = [](const json& v, const char* k) {
      if (!v.is_number() || !(std::fabs(v.get<double>()) <= double(kMaxInteger))) fail(std::string("'") + k + "' must be a number within 16 digits");
      return v.get<double>();
    };
    if (s.contains(key)) {
      const double v = number(s[key], key);
      const bool excl = s.contains(exclusive) && s[exclusive].is_boolean() && s[exclusive].get<bool>();
      b = lower ? int64_t(excl ? std::floor(v) + 1 : std::ceil(v)) : int64_t(excl ? std::ceil(v) - 1 : std::floor(v));
    }
    if (s.contains(exclusive) && !s[exclusive].is_boolean()) {
      const double v = number(s[exclusive], exclusive);
      const int64_t e = lower ? int64_t(std::floor(v)) + 1 : int64_t(std::ceil(v)) - 1;
      b = !b ? e : lower ? std::max(*b, e) : std::min(*b, e);
    } else if (s.contains(exclusive) && !s.contains(key)) {
      fail(std::string("'") + exclusive + "' as a boolean needs '" + key + "'");
    }
    return b;
  }
  // Integers within their bounds, digit by digit: exactly the integers of the range are sentences.
  std::string integer(const json& s, const std::string& hint) {
    const std::optional<int64_t> lo = bound(s, true), hi = bound(s, false);
    if (!lo && !hi) return "integer";
    if (lo && hi && *lo > *hi) fail("no integer is within 'minimum' and 'maximum'");
    std::string alts;
    if (!hi || *hi >= 0)
      alts = integers(uint64_t(std::max<int64_t>(lo.value_or(0), 0)), hi ? std::optional<uint64_t>(uint64_t(*hi)) : std::nullopt);
    if (!lo || *lo < 0) {
      const uint64_t nearest = hi && *hi < 0 ? uint64_t(-*hi) : 1;   // -x for x in [nearest, -lo]
      alts += (alts.empty() ? "" : " | ") + std::string("\"-\" ") +
              integers(nearest, lo ? std::optional<uint64_t>(uint64_t(-*lo)) : std::nullopt);
    }
    return add(hint, "(" + alts + ") ws");
  }
  std::string typed(const json& s, const std::string& type, const std::string& hint, int depth) {
    if (type == "number")   // (bounds constrain numbers only: beside other types they change nothing)
      for (const std::string& k : kBounds)
        if (s.contains(k)) fail("'" + k + "' is supported for integers only (\"type\": \"integer\")");
    if (type == "object") return object(s, hint, depth);
    if (type == "array") return array(s, hint, depth);
    if (type == "string") return string(s, hint);
    if (type == "integer") return integer(s, hint);
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
    for (const std::string& k : kBounds)   // (any value, whose numbers the bound would constrain)
      if (s.contains(k)) fail("'" + k + "' needs \"type\": \"integer\"");
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
