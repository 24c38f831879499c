#include "text/jinja_value.h"

#include "core/utf8.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace vkspec::jinja {

size_t utf8_at(std::string_view s, size_t i, uint32_t* cp) {
  const size_t n = utf8::valid_len(s, i);
  if (n == 0) {   // an invalid byte is one code point of its own, like Python's surrogateescape
    *cp = static_cast<unsigned char>(s[i]);
    return 1;
  }
  *cp = utf8::decode(s, i, n);
  return n;
}

namespace {

// Python's str.isprintable() for one code point, approximately: ASCII exactly; outside ASCII the
// separators, format and control characters and private use areas that repr() escapes.
bool py_printable(uint32_t cp) {
  if (cp < 0x20 || cp == 0x7f) return false;
  if (cp < 0x7f) return true;
  if (cp <= 0xa0 || cp == 0xad) return false;
  if ((cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f) || (cp >= 0x205f && cp <= 0x206f)) return false;
  if (cp == 0x1680 || cp == 0x3000 || cp == 0xfeff || (cp >= 0xe000 && cp <= 0xf8ff) || cp >= 0xf0000) return false;
  return true;
}

std::string repr_str(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos, has_double = s.find('"') != std::string_view::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const size_t n = utf8_at(s, i, &cp);
    if (cp == uint32_t(q) || cp == '\\') { out += '\\'; out += char(cp); }
    else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (cp == '\t') out += "\\t";
    else if (n == 1 && cp >= 0x80) { snprintf(buf, sizeof buf, "\\udc%02x", cp); out += buf; }   // surrogateescape
    else if (py_printable(cp)) out.append(s.substr(i, n));
    else {
      snprintf(buf, sizeof buf, cp <= 0xff ? "\\x%02x" : cp <= 0xffff ? "\\u%04x" : "\\U%08x", cp);
      out += buf;
    }
    i += n;
  }
  out += q;
  return out;
}

void json_str(std::string_view s, std::string& out) {
  out += '"';
  char buf[8];
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) { snprintf(buf, sizeof buf, "\\u%04x", c); out += buf; }
        else out += ch;
    }
  }
  out += '"';
}

void check_serialized(const std::string& out) {
  if (out.size() > kMaxStringBytes)
    throw Error("the value's text exceeds " + std::to_string(kMaxStringBytes) + " bytes");
}

void json_value(const Value& v, int indent, int level, std::string& out) {
  using K = Value::Kind;
  check_serialized(out);
  auto newline = [&](int lvl) { out += '\n'; out.append(size_t(indent) * size_t(lvl), ' '); };
  switch (v.kind) {
    case K::None: out += "null"; return;
    case K::Bool: out += v.b ? "true" : "false"; return;
    case K::Int: out += std::to_string(v.i); return;
    case K::Float:
      out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity") : float_repr(v.f);
      return;
    case K::Str: json_str(v.s, out); return;
    case K::List: {
      const auto& items = v.list->items;
      if (items.empty()) { out += "[]"; return; }
      out += '[';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(level + 1);
        json_value(items[k], indent, level + 1, out);
      }
      if (indent >= 0) newline(level);
      out += ']';
      return;
    }
    case K::Dict: {
      const auto& items = v.dict->items;
      if (items.empty()) { out += "{}"; return; }
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(level + 1);
        const Value& key = items[k].first;
        if (key.is_str()) {
          json_str(key.s, out);
        } else {   // Python writes other keys' JSON in quotes: {1: x} -> {"1": x}, {None: x} -> {"null": x}
          out += '"';
          json_value(key, -1, 0, out);
          out += '"';
        }
        out += ": ";
        json_value(items[k].second, indent, level + 1, out);
      }
      if (indent >= 0) newline(level);
      out += '}';
      return;
    }
    default: throw Error("Object of type " + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  uint32_t cp;
  for (size_t i = 0; i < s.size(); ++n) i += utf8_at(s, i, &cp);
  return n;
}

std::vector<std::string_view> utf8_chars(std::string_view s) {
  std::vector<std::string_view> out;
  uint32_t cp;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_at(s, i, &cp);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

bool is_py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
         cp == 0x3000;
}

bool is_space_char(std::string_view c) {
  uint32_t cp;
  utf8_at(c, 0, &cp);
  return (c.size() > 1 || cp < 0x80) && is_py_space(cp);
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<std::string_view> cs = utf8_chars(s);
  auto strip_it = [&](std::string_view c) { return chars ? chars->find(c) != std::string::npos : is_space_char(c); };
  size_t b = 0, e = cs.size();
  if (left) while (b < e && strip_it(cs[b])) ++b;
  if (right) while (e > b && strip_it(cs[e - 1])) --e;
  if (b == e) return {};
  const char* first = cs[b].data();
  const char* last = cs[e - 1].data() + cs[e - 1].size();
  return std::string(first, size_t(last - first));
}

namespace {
uint64_t add_saturating(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }
}  // namespace

uint64_t Value::weight() const {
  switch (kind) {
    case Kind::Str: return 1 + s.size() / 64;
    case Kind::List: return list->weight;
    case Kind::Dict: return dict->weight;
    case Kind::Namespace: {
      uint64_t w = 1;
      for (const auto& [k, v] : dict->items) w = add_saturating(w, add_saturating(k.weight(), v.weight()));
      return w;
    }
    default: return 1;
  }
}

Value Value::make_list(std::vector<Value> items, bool tuple) {
  if (items.size() > kMaxItems) throw Error("a list of more than " + std::to_string(kMaxItems) + " items");
  auto l = std::make_shared<List>();
  for (const Value& v : items) {
    l->depth = std::max(l->depth, v.depth() + 1);
    l->weight = add_saturating(l->weight, v.weight());
    l->has_namespace |= v.kind == Kind::Namespace || (v.list && v.list->has_namespace) ||
                        (v.kind == Kind::Dict && v.dict->has_namespace);
  }
  if (l->depth > kMaxDepth) throw Error("values nested more than " + std::to_string(kMaxDepth) + " deep");
  l->items = std::move(items);
  l->tuple = tuple;
  Value v;
  v.kind = Kind::List;
  v.list = std::move(l);
  return v;
}

Value Value::make_dict(Dict d) {
  if (d.items.size() > kMaxItems) throw Error("a dict of more than " + std::to_string(kMaxItems) + " items");
  d.weight = 1;
  for (const auto& [k, v] : d.items) {
    d.depth = std::max(d.depth, v.depth() + 1);
    d.weight = add_saturating(d.weight, add_saturating(k.weight(), v.weight()));
    d.has_namespace |= v.kind == Kind::Namespace || (v.list && v.list->has_namespace) ||
                       (v.kind == Kind::Dict && v.dict->has_namespace);
  }
  if (d.depth > kMaxDepth) throw Error("values nested more than " + std::to_string(kMaxDepth) + " deep");
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::make_namespace(Dict d) {
  Value v = make_dict(std::move(d));
  if (v.dict->has_namespace) throw Error("a namespace cannot hold another namespace");
  v.kind = Kind::Namespace;
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j, uint32_t depth) {
  if (depth > kMaxDepth) throw Error("JSON nested more than " + std::to_string(kMaxDepth) + " deep");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > uint64_t(INT64_MAX)) throw Error("JSON integer " + std::to_string(u) + " is out of range");
      return integer(int64_t(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, e] : j.items()) d.set(str(k), from_json(e, depth + 1));
      return make_dict(std::move(d));
    }
    default: throw Error("unsupported JSON value");
  }
}

uint32_t Value::depth() const {
  if (kind == Kind::List) return list->depth;
  if (kind == Kind::Dict || kind == Kind::Namespace) return dict->depth;
  return 0;
}

const std::vector<Value>& Value::items() const { return list->items; }

bool Value::truthy() const {
  switch (kind) {
    case Kind::Undefined: case Kind::None: return false;
    case Kind::Bool: return b;
    case Kind::Int: return i != 0;
    case Kind::Float: return f != 0.0;
    case Kind::Str: return !s.empty();
    case Kind::List: return !list->items.empty();
    case Kind::Dict: return !dict->items.empty();
    default: return true;
  }
}

std::string Value::type_name() const {
  switch (kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::Str: return "str";
    case Kind::List: return list->tuple ? "tuple" : "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Func: return "function";
  }
  return "?";
}

const Value* Dict::find(const Value& key) const {
  auto it = index.find(hash_key(key));
  return it == index.end() ? nullptr : &items[it->second].second;
}

void Dict::set(Value key, Value value) {
  auto [it, fresh] = index.emplace(hash_key(key), items.size());
  if (fresh) items.emplace_back(std::move(key), std::move(value));
  else items[it->second].second = std::move(value);
}

std::string Dict::hash_key(const Value& key) {
  using K = Value::Kind;
  // A one-letter kind prefix, then the value ("i" covers bool, int and integral floats: 1 == 1.0 == True).
  std::string h(1, 'i');
  switch (key.kind) {
    case K::None: h[0] = 'n'; return h;
    case K::Bool: case K::Int: h.append(std::to_string(key.as_int())); return h;
    case K::Float:
      if (std::isfinite(key.f) && key.f == std::floor(key.f) && std::fabs(key.f) < 9.2e18) {
        h.append(std::to_string(int64_t(key.f)));
        return h;
      }
      h[0] = 'f';
      h.append(float_repr(key.f));
      return h;
    case K::Str: h[0] = 's'; h.append(key.s); return h;
    default: throw Error("unhashable type: '" + key.type_name() + "'");
  }
}

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  // The shortest digit string that reads back as x, as Python's repr.
  char buf[40];
  int prec = 1;
  for (; prec <= 17; ++prec) {
    snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
    if (strtod(buf, nullptr) == x) break;
  }
  std::string m(buf);
  const size_t epos = m.find('e');
  const int exp = atoi(m.c_str() + epos + 1);
  std::string digits;
  for (size_t k = 0; k < epos; ++k) if (m[k] >= '0' && m[k] <= '9') digits += m[k];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const std::string sign = x < 0 || (x == 0 && std::signbit(x)) ? "-" : "";
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) out = "0." + std::string(size_t(-exp - 1), '0') + digits;
    else if (size_t(exp) + 1 >= digits.size()) out = digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
    else out = digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
    return sign + out;
  }
  std::string mant = digits.substr(0, 1);
  if (digits.size() > 1) mant += "." + digits.substr(1);
  snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return sign + mant + buf;
}

std::string to_str(const Value& v) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::Undefined: return "";
    case K::Str: return v.s;
    case K::None: return "None";
    case K::Bool: return v.b ? "True" : "False";
    case K::Int: return std::to_string(v.i);
    case K::Float: return float_repr(v.f);
    default: return repr(v);
  }
}

namespace {
void repr_into(const Value& v, std::string& out) {
  using K = Value::Kind;
  check_serialized(out);
  switch (v.kind) {
    case K::Str: out += repr_str(v.s); return;
    case K::List: {
      const bool t = v.list->tuple;
      out += t ? "(" : "[";
      for (size_t k = 0; k < v.list->items.size(); ++k) {
        if (k) out += ", ";
        repr_into(v.list->items[k], out);
      }
      if (t && v.list->items.size() == 1) out += ",";
      out += t ? ")" : "]";
      return;
    }
    case K::Dict: case K::Namespace: {
      out += v.kind == K::Namespace ? "<Namespace {" : "{";
      for (size_t k = 0; k < v.dict->items.size(); ++k) {
        if (k) out += ", ";
        repr_into(v.dict->items[k].first, out);
        out += ": ";
        repr_into(v.dict->items[k].second, out);
      }
      out += v.kind == K::Namespace ? "}>" : "}";
      return;
    }
    case K::Func: out += "<function " + v.fn->name + ">"; return;
    default: out += to_str(v);
  }
}
}  // namespace

std::string repr(const Value& v) {
  std::string out;
  repr_into(v, out);
  check_serialized(out);
  return out;
}

std::string to_json(const Value& v, int indent) {
  std::string out;
  json_value(v, indent, 0, out);
  check_serialized(out);
  return out;
}

bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::Undefined: case K::None: return true;
    case K::Str: return a.s == b.s;
    case K::List: {
      if (a.list->tuple != b.list->tuple || a.list->items.size() != b.list->items.size()) return false;
      for (size_t k = 0; k < a.list->items.size(); ++k)
        if (!equal(a.list->items[k], b.list->items[k])) return false;
      return true;
    }
    case K::Dict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* o = b.dict->find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    }
    case K::Namespace: return a.dict == b.dict;
    case K::Func: return a.fn == b.fn;
    default: return false;
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_str() && b.is_str()) return a.s.compare(b.s) < 0 ? -1 : a.s == b.s ? 0 : 1;   // code point order
  if (a.is_list() && b.is_list()) {
    const auto &x = a.list->items, &y = b.list->items;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k)
      if (!equal(x[k], y[k])) return compare(x[k], y[k]);
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  throw Error("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

}  // namespace vkspec::jinja
