#pragma once
// Values of the Jinja interpreter (text/chat_template.h), with Python's semantics where templates can see
// them: str() and repr() of every kind, json.dumps(ensure_ascii=False) for `tojson`, truthiness, equality
// and ordering, and strings measured and indexed in code points.
//
// Invariants:
//   - lists and dicts are immutable once built (jinja2's ImmutableSandboxedEnvironment), so no value can
//     contain itself; a namespace is the one mutable container and may not be stored inside a namespace,
//     which keeps every value a finite tree;
//   - a container records its nesting depth, bounded by kMaxDepth at construction: printing, comparing,
//     serializing and destroying a value never recurse deeper than that;
//   - a container records its weight (Value::weight), what visiting all of it costs, shared parts counted as
//     often as they are reached: the interpreter charges it to the render's work budget (Limits::max_work)
//     before an operation visits a value, so [x, x] doubled 60 times is refused, not compared for ever;
//   - serializing (repr, str, tojson) stops with an error past kMaxStringBytes.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/core.h"

namespace vkspec::jinja {

constexpr uint32_t kMaxDepth = 256;
constexpr size_t kMaxStringBytes = 64u << 20;   // any one string a template builds (Limits::max_output_bytes)
constexpr size_t kMaxItems = 1'000'000;          // any one list or dict (a Value is ~100 bytes)

struct Value;
struct List;
struct Dict;
struct Callable;
class Interpreter;

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

struct Value {
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, Str, List, Dict, Namespace, Func };
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                    // Str; Undefined: the name that was looked up (for error messages)
  std::shared_ptr<const List> list;
  std::shared_ptr<Dict> dict;       // Dict (never mutated after construction) and Namespace (mutable)
  std::shared_ptr<Callable> fn;

  static Value undefined(std::string hint = {}) { Value v; v.s = std::move(hint); return v; }
  static Value none() { Value v; v.kind = Kind::None; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::Bool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = Kind::Int; v.i = x; return v; }
  static Value number(double x) { Value v; v.kind = Kind::Float; v.f = x; return v; }
  static Value str(std::string x) { Value v; v.kind = Kind::Str; v.s = std::move(x); return v; }
  static Value make_list(std::vector<Value> items, bool tuple = false);
  static Value make_dict(Dict d);
  static Value make_namespace(Dict d);
  static Value func(std::shared_ptr<Callable> f) { Value v; v.kind = Kind::Func; v.fn = std::move(f); return v; }
  static Value from_json(const nlohmann::ordered_json& j, uint32_t depth = 0);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_str() const { return kind == Kind::Str; }
  bool is_int() const { return kind == Kind::Int || kind == Kind::Bool; }   // Python: bool is an int
  bool is_number() const { return is_int() || kind == Kind::Float; }
  bool is_list() const { return kind == Kind::List; }
  bool is_mapping() const { return kind == Kind::Dict; }
  bool is_callable() const { return kind == Kind::Func; }
  int64_t as_int() const { return kind == Kind::Bool ? int64_t(b) : i; }
  double as_double() const { return kind == Kind::Float ? f : double(as_int()); }
  uint32_t depth() const;
  // 1 per element reachable (a shared one each time it is reached), a string 1 + its bytes / 64; saturates.
  uint64_t weight() const;
  const std::vector<Value>& items() const;   // List only

  bool truthy() const;
  std::string type_name() const;   // Python's name of the type, for error messages
};

struct List {
  std::vector<Value> items;
  bool tuple = false;   // printed as (a, b) like Python
  uint32_t depth = 1;
  uint64_t weight = 1;
  bool has_namespace = false;
};

// Python dict semantics: insertion order, hashable keys (None, bool, int, float, str), last write wins.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  std::unordered_map<std::string, size_t> index;   // hash_key(key) -> position in items
  uint32_t depth = 1;
  uint64_t weight = 1;   // (a namespace's, which changes, is counted when asked: Value::weight)
  bool has_namespace = false;

  const Value* find(const Value& key) const;
  void set(Value key, Value value);
  static std::string hash_key(const Value& key);   // throws for unhashable keys, as Python does
};

struct Callable {
  virtual ~Callable() = default;
  virtual Value call(Interpreter& in, CallArgs& args) = 0;
  std::string name;
};

// Python's str() and repr().
std::string to_str(const Value& v);
std::string repr(const Value& v);
std::string float_repr(double x);
// json.dumps(v, ensure_ascii=False, indent=indent) (indent < 0: none); throws for values JSON cannot hold.
std::string to_json(const Value& v, int indent);
// ==, and Python's ordering (throws Error for types Python cannot order).
bool equal(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);

// One UTF-8 sequence at s[i]: its length (1 for an invalid byte) and code point (the byte itself then).
size_t utf8_at(std::string_view s, size_t i, uint32_t* cp);
// Strings in code points (UTF-8 inside; invalid bytes count as one code point each, like surrogateescape).
size_t utf8_length(std::string_view s);
std::vector<std::string_view> utf8_chars(std::string_view s);
bool is_py_space(uint32_t cp);   // str.isspace()
bool is_space_char(std::string_view c);   // one character of utf8_chars() that is whitespace (invalid bytes never)
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);

}  // namespace vkspec::jinja
