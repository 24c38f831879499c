#include "constrain/json_schema.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "constrain/gbnf.h"
#include "constrain/json_pattern.h"
#include "core/core.h"

namespace vkspec {

namespace {
using json = nlohmann::ordered_json;

// The values of JSON, in json.gbnf's layout (whitespace after every value; see constrain/json_grammar.h).
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
                                            "writeOnly", "deprecated", "$defs", "definitions", "discriminator",
                                            "contentEncoding", "contentMediaType"};
// (minimum, maximum and their exclusive forms: for integers)
const std::set<std::string> kBounds = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
const std::set<std::string> kKeywords = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                         "type", "properties", "required", "items", "minItems", "maxItems",
                                         "minLength", "maxLength", "pattern", "format", "enum", "const", "anyOf",
                                         "oneOf", "allOf", "$ref", "prefixItems"};

// A GBNF literal matching exactly `text`.
std::string literal(const std::string& text) {
  std::string out = "\"";
  for (const unsigned char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += char(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      out += gbnf_escape(c);
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
  // The definition a local $ref names (#/$defs/KEY or #/definitions/KEY), and its KEY.
  const json& definition(const std::string& path, std::string* key = nullptr) const {
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (path.rfind(p, 0) != 0) continue;
      const std::string k = path.substr(p.size()), where = p.substr(2, p.size() - 3);
      if (!root_.contains(where) || !root_[where].is_object() || !root_[where].contains(k))
        fail("$ref '" + path + "' names no definition");
      if (key) *key = k;
      return root_[where][k];
    }
    fail("$ref '" + path + "' is not a local #/$defs/ or #/definitions/ reference");
  }
  std::string ref(const std::string& path, int depth) {
    if (auto it = refs_.find(path); it != refs_.end()) return it->second;
    std::string key;
    const json& def = definition(path, &key);
    const std::string name = fresh(key);
    refs_[path] = name;   // before visiting: a definition may refer to itself
    rules_[name] = visit(def, key, depth + 1);
    return name;
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
  // An array: prefixItems' schemas first (a tuple), then `items` (false: nothing more), within minItems and
  // maxItems. A shorter array ends after any prefix item at or past minItems.
  std::string array(const json& s, const std::string& hint, int depth) {
    const json prefix = s.value("prefixItems", json::array());
    if (!prefix.is_array()) fail("'prefixItems' must be an array");
    const bool closed = s.contains("items") && s["items"] == false;
    const std::string item = closed ? "" : s.contains("items") ? visit(s["items"], hint + "-item", depth + 1) : "value";
    int64_t min = std::max<int64_t>(0, count(s, "minItems")), max = count(s, "maxItems");
    const int64_t n = int64_t(prefix.size());
    if (closed) max = max < 0 ? n : std::min(max, n);
    if (max >= 0 && max < min) fail(closed && min > n ? "'minItems' beyond prefixItems with items false" : "'maxItems' is below 'minItems'");
    if (max == 0) return "\"[\" ws \"]\" ws";
    if (n == 0) {
      std::string list = item + " (\",\" ws " + item + ")" + bounds(min > 0 ? min - 1 : 0, max < 0 ? -1 : max - 1);
      if (min == 0) list = "(" + list + ")?";
      return add(hint, "\"[\" ws " + list + " \"]\" ws");
    }
    const int64_t used = max < 0 ? n : std::min(max, n);   // prefix items that may be present
    std::string rest;                                      // after the last prefix item: the tail of `items`
    if (used == n && !closed && (max < 0 || max > n))
      rest = "(\",\" ws " + item + ")" + bounds(std::max<int64_t>(0, min - n), max < 0 ? -1 : max - n);
    for (int64_t i = used - 1; i >= 0; --i) {
      const std::string element = visit(prefix[size_t(i)], hint + "-" + std::to_string(i), depth + 1);
      rest = std::string(i ? "\",\" ws " : "") + element + (rest.empty() ? "" : " " + rest);
      if (i >= min) rest = "(" + rest + ")?";   // the array may end before item i
    }
    return add(hint, "\"[\" ws " + rest + " \"]\" ws");
  }
  // A string: any, of bounded length, or matching a pattern or format (constrain/json_pattern.h), whose own
  // lengths the bounds must then not cut into (the grammar cannot intersect the two).
  std::string string(const json& s, const std::string& hint) {
    const int64_t min = count(s, "minLength"), max = count(s, "maxLength");
    if (max >= 0 && max < std::max<int64_t>(0, min)) fail("'maxLength' is below 'minLength'");
    const bool pattern = s.contains("pattern"), format = s.contains("format");
    if (pattern && format) fail("'pattern' with 'format' beside it is not supported");
    if (pattern || format) {
      const json& v = s[pattern ? "pattern" : "format"];
      if (!v.is_string()) fail(std::string("'") + (pattern ? "pattern" : "format") + "' must be a string");
      const JsonStringPattern p = pattern ? json_string_pattern(v.get<std::string>()) : json_string_format(v.get<std::string>());
      if (int64_t(p.min_chars) < min || (max >= 0 && (!p.max_chars || *p.max_chars > uint64_t(max)))) {
        std::string lengths = std::to_string(p.min_chars);
        lengths += " to ";
        lengths += p.max_chars ? std::to_string(*p.max_chars) : std::string("any");
        fail(std::string("'minLength' or 'maxLength' that cut into a ") + (pattern ? "pattern" : "format") + "'s own lengths (" +
             lengths + " characters) are not supported");
      }
      return add(hint, "\"\\\"\" " + p.gbnf + " \"\\\"\" ws");
    }
    if (min < 0 && max < 0) return "string";
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
  // A schema with its $ref followed (to the definition, through chains of $refs).
  const json& resolved(const json& s) const {
    const json* at = &s;
    for (int hops = 0; at->is_object() && at->contains("$ref") && (*at)["$ref"].is_string(); ++hops) {
      if (hops > 64) fail("$ref chains longer than 64");
      at = &definition((*at)["$ref"].get<std::string>());
    }
    return *at;
  }
  // A value's JSON type ("integer" for a number without a fraction, as JSON Schema counts 1.0).
  static std::string type_of(const json& v) {
    return v.is_object() ? "object" : v.is_array() ? "array" : v.is_string() ? "string" : v.is_boolean() ? "boolean"
           : v.is_null() ? "null" : v.is_number_integer() || v.is_number_unsigned() || std::floor(v.get<double>()) == v.get<double>()
               ? "integer" : "number";
  }
  // The values a `const` or `enum` allows (nullopt: neither is there), as the other keywords beside them
  // leave them: both together allow what they share, and a `type` keeps the values of its types. Any other
  // keyword beside them is refused (no value is generated that the schema would reject).
  static std::optional<std::vector<json>> listed(const json& s) {
    if (!s.is_object() || (!s.contains("const") && !s.contains("enum"))) return std::nullopt;
    for (const auto& [key, v] : s.items())
      if (key != "const" && key != "enum" && key != "type" && kKeywords.count(key))
        fail(std::string(s.contains("const") ? "'const'" : "'enum'") + " with '" + key + "' beside it is not supported");
    std::vector<json> out;
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) fail("'enum' must be a non-empty array");
      out.assign(s["enum"].begin(), s["enum"].end());
    }
    if (s.contains("const")) {   // (beside an enum: the const, when the enum lists it)
      const std::string c = canonical(s["const"]).dump();
      const bool in_enum = !s.contains("enum") || std::any_of(out.begin(), out.end(), [&](const json& v) { return canonical(v).dump() == c; });
      out.clear();
      if (in_enum) out.push_back(s["const"]);
    }
    if (s.contains("type")) {
      std::set<std::string> allowed;
      const json& t = s["type"];
      for (const json& one : t.is_array() ? t : json::array({t})) {
        if (!one.is_string()) fail("'type' must be a string or a non-empty array of strings");
        allowed.insert(one.get<std::string>());
      }
      std::erase_if(out, [&](const json& v) {
        const std::string vt = type_of(v);
        return !allowed.count(vt) && !(vt == "integer" && allowed.count("number"));
      });
    }
    if (out.empty()) fail("no value of 'const'/'enum' is allowed by the keywords beside it");
    return out;
  }
  // The JSON types a schema admits as far as its type, const or enum say (empty: unknown). "integer" counts as
  // "number" too.
  static std::set<std::string> types(const json& s) {
    std::set<std::string> out;
    if (!s.is_object()) return out;
    if (const auto vs = listed(s)) for (const json& v : *vs) out.insert(type_of(v));
    else if (s.contains("type") && s["type"].is_string()) out.insert(s["type"].get<std::string>());
    else if (s.contains("type") && s["type"].is_array()) for (const json& t : s["type"]) out.insert(t.is_string() ? t.get<std::string>() : "");
    if (out.count("integer")) out.insert("number");
    return out;
  }
  // A value as text that is equal for equal JSON values (JSON Schema's equality: keys in any order, 1 == 1.0).
  static nlohmann::json canonical(const json& v) {
    if (v.is_number()) return v.get<double>();
    nlohmann::json out = v.is_array() ? nlohmann::json::array() : v.is_object() ? nlohmann::json::object() : nlohmann::json::parse(v.dump());
    if (v.is_array())
      for (const json& x : v) out.push_back(canonical(x));
    if (v.is_object())
      for (const auto& [k, x] : v.items()) out[k] = canonical(x);   // (nlohmann::json sorts its keys)
    return out;
  }
  static std::optional<std::set<std::string>> values(const json& s) {   // a const's or an enum's values, as text
    if (!s.is_object()) return std::nullopt;
    const auto vs = listed(s);
    if (!vs) return std::nullopt;
    std::set<std::string> out;
    for (const json& v : *vs) out.insert(canonical(v).dump());
    return out;
  }
  static bool disjoint(const std::set<std::string>& a, const std::set<std::string>& b) {
    return std::none_of(a.begin(), a.end(), [&](const std::string& x) { return b.count(x) > 0; });
  }
  // Whether no value matches both schemas: different values, different types, or objects that both require a
  // property whose values differ (a discriminated union, as Pydantic writes them).
  bool disjoint(const json& a, const json& b) const {
    const auto va = values(a), vb = values(b);
    if (va && vb && disjoint(*va, *vb)) return true;
    const auto ta = types(a), tb = types(b);
    if (!ta.empty() && !tb.empty() && disjoint(ta, tb)) return true;
    if (!a.is_object() || !b.is_object() || !a.contains("properties") || !b.contains("properties")) return false;
    const json ra = a.value("required", json::array()), rb = b.value("required", json::array());
    for (const json& key : ra) {
      if (!key.is_string() || std::find(rb.begin(), rb.end(), key) == rb.end()) continue;
      const std::string k = key.get<std::string>();
      if (!a["properties"].is_object() || !b["properties"].is_object() || !a["properties"].contains(k) || !b["properties"].contains(k)) continue;
      const auto pa = values(resolved(a["properties"][k])), pb = values(resolved(b["properties"][k]));
      if (pa && pb && disjoint(*pa, *pb)) return true;
    }
    return false;
  }
  // allOf over object schemas (properties and required, $refs followed): one object schema with their
  // properties and required merged; a property two of them define must be the same schema in both.
  std::string all_of(const json& s, const std::string& hint, int depth) {
    const json& all = s["allOf"];
    if (!all.is_array() || all.empty()) fail("'allOf' must be a non-empty array");
    std::vector<const json*> members;
    for (const json& m : all) members.push_back(&resolved(m));
    json rest = s;   // the schema beside allOf is one more member
    rest.erase("allOf");
    bool rest_constrains = false;
    for (const auto& [key, v] : rest.items()) rest_constrains |= kKeywords.count(key) > 0;
    if (!rest_constrains && members.size() == 1) return visit(*members[0], hint, depth + 1);
    if (rest_constrains) members.push_back(&rest);
    json merged = {{"type", "object"}, {"properties", json::object()}, {"required", json::array()}};
    for (const json* m : members) {
      if (!m->is_object()) fail("'allOf' is supported over object schemas (properties, required)");
      for (const auto& [key, v] : m->items()) {
        if (!kKeywords.count(key)) continue;
        if (key == "type" && v == "object") continue;
        if (key != "properties" && key != "required") fail("'allOf' is supported over object schemas (properties, required), not '" + key + "'");
        if (!v.is_object() && !v.is_array()) fail("'" + key + "' must be an object or an array");
        for (const auto& [k, sub] : v.items()) {
          if (key == "required") {
            if (std::find(merged["required"].begin(), merged["required"].end(), sub) == merged["required"].end()) merged["required"].push_back(sub);
          } else if (merged["properties"].contains(k) && merged["properties"][k] != sub) {
            fail("'allOf' members define the property '" + k + "' differently");
          } else {
            merged["properties"][k] = sub;
          }
        }
      }
    }
    return object(merged, hint, depth);
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
    if (const auto vs = listed(s)) {
      std::string alts;
      for (const json& v : *vs) alts += (alts.empty() ? "" : " | ") + literal(v.dump());
      return "((" + alts + ") ws)";
    }
    for (const char* any : {"anyOf", "oneOf"}) {
      if (!s.contains(any)) continue;
      const json& branches = s[any];
      if (!branches.is_array() || branches.empty()) fail(std::string("'") + any + "' must be a non-empty array");
      for (const auto& [key, v] : s.items())
        if (key != any && kKeywords.count(key)) fail(std::string("'") + any + "' with '" + key + "' beside it is not supported");
      if (any == std::string("oneOf"))   // exactly one branch: as anyOf when no value can match two
        for (size_t i = 0; i < branches.size(); ++i)
          for (size_t j = i + 1; j < branches.size(); ++j)
            if (!disjoint(resolved(branches[i]), resolved(branches[j])))
              fail("'oneOf' whose branches may match one value is not supported (branches of different types, consts "
                   "or enums are, and objects with a required property whose const differs; or use anyOf)");
      std::string alts;
      for (const json& sub : branches) alts += (alts.empty() ? "" : " | ") + visit(sub, hint, depth + 1);
      return "(" + alts + ")";
    }
    if (s.contains("allOf")) return all_of(s, hint, depth);
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
    if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems")) return array(s, hint, depth);
    if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern") || s.contains("format")) return string(s, hint);
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
