// Jinja builtins with jinja2's (and Python's) behaviour: operators, attribute and item access, the filters,
// tests, string/dict methods and global functions that chat templates use.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>

#include "text/jinja_interp.h"
#include "platform/platform.h"
#include "core/utf8.h"

namespace vkspec::jinja {

[[noreturn]] void undefined_error(const Value& v) {
  throw Error(v.s.empty() ? std::string("a value is undefined") : "'" + v.s + "' is undefined");
}

Value arg(const CallArgs& a, size_t index, const char* name, const Value& def) {
  for (const auto& [k, v] : a.kw)
    if (k == name) return v;
  return index < a.pos.size() ? a.pos[index] : def;
}

namespace {

using K = Value::Kind;

const Value kUndef = Value::undefined();
const Value kNone = Value::none();
const Value kFalse = Value::boolean(false);
const Value kEmpty = Value::str("");

}  // namespace

int64_t int_arg(const Value& v, const char* what) {
  if (!v.is_int()) throw Error(std::string(what) + " must be an integer, got '" + v.type_name() + "'");
  return v.as_int();
}

// 64-bit integer arithmetic that says when Python's integers would leave int64 (GCC's __builtin_*_overflow,
// written out so that MSVC compiles it too); *r is set only when the result fits.
bool add_overflows(int64_t a, int64_t b, int64_t* r) {
  if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) return true;
  *r = a + b;
  return false;
}
bool sub_overflows(int64_t a, int64_t b, int64_t* r) {
  if ((b < 0 && a > INT64_MAX + b) || (b > 0 && a < INT64_MIN + b)) return true;
  *r = a - b;
  return false;
}
bool mul_overflows(int64_t a, int64_t b, int64_t* r) {
  if (a != 0 && b != 0) {
    if ((a == -1 && b == INT64_MIN) || (b == -1 && a == INT64_MIN)) return true;
    if (a > 0 ? (b > 0 ? a > INT64_MAX / b : b < INT64_MIN / a) : (b > 0 ? a < INT64_MIN / b : a < INT64_MAX / b)) return true;
  }
  *r = a * b;
  return false;
}

// Python's str.lower()/upper() through the C library's Unicode tables (platform/).
std::string change_case(const std::string& s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const size_t n = utf8_at(s, i, &cp);
    if (n == 1 && cp >= 0x80) {   // an invalid byte stays as it is
      out += s[i++];
      continue;
    }
    utf8::append(upper ? platform::to_upper(cp) : platform::to_lower(cp), out);
    i += n;
  }
  return out;
}

std::string title_case(const std::string& s, bool only_first) {
  std::string out;
  bool prev_cased = false;
  for (std::string_view c : utf8_chars(s)) {
    const bool alpha = c.size() > 1 || isalpha(static_cast<unsigned char>(c[0]));
    std::string piece(c);
    if (only_first) piece = change_case(piece, out.empty());
    else piece = change_case(piece, !prev_cased);
    prev_cased = alpha;
    out += piece;
  }
  return out;
}

std::vector<std::string> split(const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep.is_none() || sep.is_undefined()) {   // runs of whitespace, no empty strings
    std::vector<std::string_view> cs = utf8_chars(s);
    auto space = is_space_char;
    size_t k = 0;
    while (k < cs.size()) {
      while (k < cs.size() && space(cs[k])) ++k;
      if (k == cs.size()) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        const char* b = cs[k].data();
        std::string rest(b, size_t(s.data() + s.size() - b));
        out.push_back(py_strip(rest, nullptr, false, true));
        return out;
      }
      std::string w;
      while (k < cs.size() && !space(cs[k])) w += cs[k++];
      out.push_back(w);
    }
    return out;
  }
  if (!sep.is_str()) throw Error("must be str or None, not " + sep.type_name());
  if (sep.s.empty()) throw Error("empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
    const size_t f = s.find(sep.s, pos);
    if (f == std::string::npos) break;
    out.push_back(s.substr(pos, f - pos));
    pos = f + sep.s.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

std::string replace(const std::string& s, const std::string& a, const std::string& b, int64_t count) {
  std::string out;
  if (a.empty()) {   // Python inserts `b` between code points
    int64_t n = 0;
    for (std::string_view c : utf8_chars(s)) {
      if (count < 0 || n < count) out += b, ++n;
      out += c;
    }
    if (count < 0 || n < count) out += b;
    return out;
  }
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t f = s.find(a, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += b;
    pos = f + a.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

namespace {

Value str_list(const std::vector<std::string>& v) {
  std::vector<Value> items;
  for (const auto& s : v) items.push_back(Value::str(s));
  return Value::make_list(std::move(items));
}

// A method bound to its object: `s.strip()`, `d.items()`.
struct Method : Callable {
  Value self;
  Value call(Interpreter& in, CallArgs& a) override;
};

bool is_method(const Value& obj, const std::string& name) {
  static const char* str_methods[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper",
                                      "lower", "replace", "title", "capitalize", "find", "count", "join", "splitlines",
                                      "isdigit", "isalpha", "isspace", "format"};
  static const char* dict_methods[] = {"items", "keys", "values", "get", "copy"};
  if (obj.is_str()) return std::find_if(std::begin(str_methods), std::end(str_methods), [&](const char* m) { return name == m; }) != std::end(str_methods);
  if (obj.is_mapping()) return std::find_if(std::begin(dict_methods), std::end(dict_methods), [&](const char* m) { return name == m; }) != std::end(dict_methods);
  return false;
}

bool starts_or_ends(const std::string& s, const Value& x, bool start) {
  auto one = [&](const Value& p) {
    if (!p.is_str()) throw Error("startswith/endswith take a str or a tuple of str");
    if (p.s.size() > s.size()) return false;
    return start ? s.compare(0, p.s.size(), p.s) == 0 : s.compare(s.size() - p.s.size(), p.s.size(), p.s) == 0;
  };
  if (x.is_list()) {
    for (const Value& p : x.items()) if (one(p)) return true;
    return false;
  }
  return one(x);
}

Value Method::call(Interpreter& in, CallArgs& a) {
  const std::string& m = name;
  if (self.is_mapping()) {
    const Dict& d = *self.dict;
    if (m == "get") {
      const Value* v = d.find(arg(a, 0, "key", kUndef));
      return v ? *v : arg(a, 1, "default", kNone);
    }
    if (m == "copy") return self;
    std::vector<Value> out;
    for (const auto& [k, v] : d.items) {
      if (m == "keys") out.push_back(k);
      else if (m == "values") out.push_back(v);
      else out.push_back(Value::make_list({k, v}, true));
    }
    return Value::make_list(std::move(out));
  }
  const std::string& s = self.s;
  auto strip_chars = [&](bool l, bool r) {
    const Value& c = arg(a, 0, "chars", kNone);
    return Value::str(c.is_str() ? py_strip(s, &c.s, l, r) : py_strip(s, nullptr, l, r));
  };
  if (m == "strip") return strip_chars(true, true);
  if (m == "lstrip") return strip_chars(true, false);
  if (m == "rstrip") return strip_chars(false, true);
  if (m == "split" || m == "rsplit") {
    const int64_t maxsplit = int_arg(arg(a, 1, "maxsplit", Value::integer(-1)), "maxsplit");
    if (m == "rsplit" && maxsplit >= 0) throw Error("rsplit with maxsplit is not supported");
    return str_list(split(s, arg(a, 0, "sep", kNone), maxsplit));
  }
  if (m == "startswith" || m == "endswith") return Value::boolean(starts_or_ends(s, arg(a, 0, "prefix", kNone), m == "startswith"));
  if (m == "upper" || m == "lower") return Value::str(change_case(s, m == "upper"));
  if (m == "title" || m == "capitalize") return Value::str(title_case(m == "capitalize" ? change_case(s, false) : s, m == "capitalize"));
  if (m == "replace") {
    const Value &x = arg(a, 0, "old", kUndef), &y = arg(a, 1, "new", kUndef);
    if (!x.is_str() || !y.is_str()) throw Error("replace() arguments must be str");
    const std::string r = replace(s, x.s, y.s, int_arg(arg(a, 2, "count", Value::integer(-1)), "count"));
    in.check_size(r.size());
    return Value::str(r);
  }
  if (m == "find" || m == "count") {
    const Value& x = arg(a, 0, "sub", kUndef);
    if (!x.is_str()) throw Error(m + "() argument must be str");
    if (m == "find") {
      const size_t f = s.find(x.s);
      return Value::integer(f == std::string::npos ? -1 : int64_t(utf8_length(std::string_view(s).substr(0, f))));
    }
    if (x.s.empty()) return Value::integer(int64_t(utf8_length(s)) + 1);
    int64_t n = 0;
    for (size_t p = s.find(x.s); p != std::string::npos; p = s.find(x.s, p + x.s.size())) ++n;
    return Value::integer(n);
  }
  if (m == "join") {
    std::string out;
    bool first = true;
    for (const Value& v : iterate(arg(a, 0, "iterable", kUndef))) {
      if (!v.is_str()) throw Error("sequence item: expected str instance, " + v.type_name() + " found");
      if (!first) out += s;
      out += v.s;
      first = false;
      in.check_size(out.size());
    }
    return Value::str(out);
  }
  if (m == "splitlines") {
    std::vector<std::string> lines;
    std::string cur;
    for (size_t k = 0; k < s.size(); ++k) {
      if (s[k] == '\n' || s[k] == '\r') {
        lines.push_back(cur);
        cur.clear();
        if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
      } else {
        cur += s[k];
      }
    }
    if (!cur.empty()) lines.push_back(cur);
    return str_list(lines);
  }
  if (m == "isdigit" || m == "isalpha" || m == "isspace") {
    if (s.empty()) return kFalse;
    for (unsigned char c : s) {
      const bool ok = m == "isdigit" ? isdigit(c) : m == "isalpha" ? (isalpha(c) || c >= 0x80) : is_py_space(c);
      if (!ok) return kFalse;
    }
    return Value::boolean(true);
  }
  throw Error("str." + m + "() is not supported");
}

}  // namespace

// sort/unique/min/max: jinja2 compares strings case-insensitively unless case_sensitive.
Value sort_key(const Value& v, const Value& attribute, bool case_sensitive) {
  Value x = v;
  if (attribute.is_str()) {
    for (const std::string& part : split(attribute.s, Value::str("."), -1)) {
      const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
      x = digits ? get_item(x, Value::integer(atoll(part.c_str()))) : get_item(x, Value::str(part));
    }
  } else if (attribute.is_int()) {
    x = get_item(x, attribute);
  }
  if (!case_sensitive && x.is_str()) return Value::str(change_case(x.s, false));
  return x;
}

Value attribute_of(const Value& v, const Value& attribute) { return sort_key(v, attribute, true); }

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind) {
    case K::Undefined: return {};
    case K::List: return v.list->items;
    case K::Dict: {
      std::vector<Value> keys;
      for (const auto& [k, x] : v.dict->items) keys.push_back(k);
      return keys;
    }
    case K::Str: {
      std::vector<Value> out;
      for (std::string_view c : utf8_chars(v.s)) out.push_back(Value::str(std::string(c)));
      return out;
    }
    default: throw Error("'" + v.type_name() + "' object is not iterable");
  }
}

Value get_attr(const Value& obj, const std::string& name) {
  if (is_method(obj, name)) {
    auto m = std::make_shared<Method>();
    m->name = name;
    m->self = obj;
    return Value::func(m);
  }
  if (obj.kind == K::Namespace) {
    const Value* v = obj.dict->find(Value::str(name));
    return v ? *v : Value::undefined(name);
  }
  if (obj.is_mapping()) {   // a dict method name that is not safe here (pop, update, ...) is undefined too
    static const char* unsafe[] = {"pop", "popitem", "update", "setdefault", "clear", "fromkeys"};
    for (const char* u : unsafe) if (name == u) return Value::undefined(name);
    const Value* v = obj.dict->find(Value::str(name));
    return v ? *v : Value::undefined(name);
  }
  return Value::undefined(name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_mapping() || obj.kind == K::Namespace) {
    if (obj.is_mapping() && (key.is_none() || key.is_number() || key.is_str())) {
      const Value* v = obj.dict->find(key);
      if (v) return *v;
    }
    return key.is_str() ? get_attr(obj, key.s) : Value::undefined(key.is_str() ? key.s : repr(key));
  }
  if ((obj.is_list() || obj.is_str()) && key.is_int()) {
    std::vector<std::string_view> chars;
    if (obj.is_str()) chars = utf8_chars(obj.s);
    const int64_t n = obj.is_list() ? int64_t(obj.items().size()) : int64_t(chars.size());
    int64_t k = key.as_int();
    if (k < 0) k += n;
    if (k < 0 || k >= n) return Value::undefined();
    return obj.is_list() ? obj.items()[size_t(k)] : Value::str(std::string(chars[size_t(k)]));
  }
  return key.is_str() ? get_attr(obj, key.s) : Value::undefined();
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step_v) {
  if (!obj.is_list() && !obj.is_str()) throw Error("'" + obj.type_name() + "' object is not subscriptable");
  std::vector<std::string_view> chars;
  if (obj.is_str()) chars = utf8_chars(obj.s);
  const int64_t n = obj.is_list() ? int64_t(obj.items().size()) : int64_t(chars.size());
  const int64_t step = step_v.is_none() ? 1 : int_arg(step_v, "slice step");
  if (step == 0) throw Error("slice step cannot be zero");
  auto bound = [&](const Value& v, int64_t def) {
    if (v.is_none()) return def;
    int64_t k = int_arg(v, "slice index");
    if (k < 0) k += n;
    return step > 0 ? std::clamp<int64_t>(k, 0, n) : std::clamp<int64_t>(k, -1, n - 1);
  };
  const int64_t b = bound(start, step > 0 ? 0 : n - 1), e = bound(stop, step > 0 ? n : -1);
  std::vector<Value> items;
  std::string s;
  for (int64_t k = b; step > 0 ? k < e : k > e; k += step) {
    if (obj.is_list()) items.push_back(obj.items()[size_t(k)]);
    else s += chars[size_t(k)];
  }
  return obj.is_list() ? Value::make_list(std::move(items), obj.list->tuple) : Value::str(std::move(s));
}

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  if (op != "~" && op != "*") in.charge(a.weight() + b.weight());   // compared, searched or copied
  if (op == "==") return Value::boolean(equal(a, b));
  if (op == "!=") return Value::boolean(!equal(a, b));
  if (op == "~") {
    std::string s = to_str(a) + to_str(b);
    in.check_size(s.size());
    return Value::str(std::move(s));
  }
  if (op == "in" || op == "notin") {
    bool found = false;
    if (b.is_str()) {
      if (!a.is_str()) throw Error("'in <string>' requires string as left operand, not " + a.type_name());
      found = b.s.find(a.s) != std::string::npos;
    } else if (b.is_mapping()) {
      found = b.dict->find(a) != nullptr;
    } else if (b.is_list() || b.is_undefined()) {
      for (const Value& x : iterate(b)) if (equal(a, x)) { found = true; break; }
    } else {
      throw Error("argument of type '" + b.type_name() + "' is not iterable");
    }
    return Value::boolean(found == (op == "in"));
  }
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (op == "<") return Value::boolean(compare(a, b) < 0);
  if (op == "<=") return Value::boolean(compare(a, b) <= 0);
  if (op == ">") return Value::boolean(compare(a, b) > 0);
  if (op == ">=") return Value::boolean(compare(a, b) >= 0);
  const std::string mismatch = "unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'";
  if (op == "+" && a.is_str() && b.is_str()) {
    in.check_size(a.s.size() + b.s.size());
    return Value::str(a.s + b.s);
  }
  if (op == "+" && a.is_list() && b.is_list()) {
    std::vector<Value> items = a.items();
    items.insert(items.end(), b.items().begin(), b.items().end());
    in.check_size(items.size());
    return Value::make_list(std::move(items), a.list->tuple);
  }
  if (op == "*" && ((a.is_str() || a.is_list()) && b.is_int())) {
    const int64_t n = std::max<int64_t>(0, b.as_int());
    const size_t unit = a.is_str() ? a.s.size() : a.items().size();
    if (unit && uint64_t(n) > (uint64_t(1) << 40) / unit) in.check_size(~size_t(0));
    in.check_size(unit * size_t(n));
    if (a.is_list() && unit * size_t(n) > kMaxItems) throw Error("a list of more than " + std::to_string(kMaxItems) + " items");
    in.charge(a.weight() > UINT64_MAX / uint64_t(std::max<int64_t>(n, 1)) ? UINT64_MAX : a.weight() * uint64_t(n));
    if (a.is_str()) {
      std::string s;
      for (int64_t k = 0; k < n; ++k) s += a.s;
      return Value::str(std::move(s));
    }
    std::vector<Value> items;
    for (int64_t k = 0; k < n; ++k) items.insert(items.end(), a.items().begin(), a.items().end());
    return Value::make_list(std::move(items), a.list->tuple);
  }
  if (op == "*" && a.is_int() && (b.is_str() || b.is_list())) return binary_op(in, op, b, a);
  if (!a.is_number() || !b.is_number()) {
    if (op == "+" && (a.is_str() || b.is_str())) throw Error("can only concatenate str (not \"" + (a.is_str() ? b : a).type_name() + "\") to str");
    throw Error(mismatch);
  }
  const bool ints = a.is_int() && b.is_int();
  const double x = a.as_double(), y = b.as_double();
  if (op == "/") {
    if (y == 0) throw Error("division by zero");
    return Value::number(x / y);
  }
  if (ints) {
    const int64_t p = a.as_int(), q = b.as_int();
    int64_t r = 0;
    if (op == "+" && !add_overflows(p, q, &r)) return Value::integer(r);
    if (op == "-" && !sub_overflows(p, q, &r)) return Value::integer(r);
    if (op == "*" && !mul_overflows(p, q, &r)) return Value::integer(r);
    if (op == "//" || op == "%") {
      if (q == 0) throw Error("integer division or modulo by zero");
      if (p == INT64_MIN && q == -1) throw Error("integer overflow");
      int64_t d = p / q, m = p % q;
      if (m != 0 && ((m < 0) != (q < 0))) --d, m += q;   // Python floors
      return Value::integer(op == "//" ? d : m);
    }
    if (op == "**") {
      if (q < 0) return Value::number(std::pow(x, y));
      int64_t acc = 1;
      for (int64_t k = 0; k < q; ++k)
        if (mul_overflows(acc, p, &acc)) throw Error("integer overflow");
        else if (acc == 0 || acc == 1) break;
      if (acc == 1 && p == -1 && q % 2 == 1) acc = -1;
      return Value::integer(acc);
    }
    throw Error("integer overflow");
  }
  if (op == "+") return Value::number(x + y);
  if (op == "-") return Value::number(x - y);
  if (op == "*") return Value::number(x * y);
  if (op == "**") return Value::number(std::pow(x, y));
  if (y == 0) throw Error("float division by zero");
  if (op == "//") return Value::number(std::floor(x / y));
  if (op == "%") {
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::number(m);
  }
  throw Error(mismatch);
}

}  // namespace vkspec::jinja
