// jinja2's filters, tests and global functions as chat templates use them (plus transformers' globals
// raise_exception and strftime_now, and its tojson, which keeps non-ASCII text as it is).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <functional>

#include "text/jinja_interp.h"
#include "core/settings.h"
#include "platform/platform.h"

namespace vkspec::jinja {
namespace {

using K = Value::Kind;
const Value kUndef = Value::undefined();
const Value kNone = Value::none();
const Value kFalse = Value::boolean(false);

std::string soft_str(const Value& v) { return to_str(v); }

Value filtered(Interpreter& in, const Value& seq, const std::function<bool(const Value&)>& keep) {
  std::vector<Value> out;
  for (const Value& v : iterate(seq)) {
    in.step();
    if (keep(v)) out.push_back(v);
  }
  return Value::make_list(std::move(out));
}

// select/reject/selectattr/rejectattr: args[first] names the test (none: truthiness), the rest are its args.
std::function<bool(const Value&)> test_from(Interpreter& in, const CallArgs& a, size_t first) {
  if (a.pos.size() <= first) return [](const Value& v) { return v.truthy(); };
  if (!a.pos[first].is_str()) throw Error("the test name must be a string");
  const std::string name = a.pos[first].s;
  CallArgs rest;
  rest.pos.assign(a.pos.begin() + long(first) + 1, a.pos.end());
  return [&in, name, rest](const Value& v) mutable { return apply_test(in, name, v, rest); };
}

Value sorted(Interpreter& in, std::vector<Value> items, bool reverse, bool case_sensitive, const Value& attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& v : items) keyed.emplace_back(sort_key(v, attribute, case_sensitive), std::move(v));
  in.check_size(keyed.size());
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    in.charge(x.first.weight() + y.first.weight());
    return reverse ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
  });
  std::vector<Value> out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return Value::make_list(std::move(out));
}

Value range(Interpreter&, CallArgs& a) {
  if (a.pos.empty() || a.pos.size() > 3 || !a.kw.empty()) throw Error("range expected 1 to 3 integer arguments");
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) stop = int_arg(a.pos[0], "range()'s argument");
  else start = int_arg(a.pos[0], "range()'s start"), stop = int_arg(a.pos[1], "range()'s stop");
  if (a.pos.size() == 3) step = int_arg(a.pos[2], "range()'s step");
  if (step == 0) throw Error("range() arg 3 must not be zero");
  const double n = std::ceil((double(stop) - double(start)) / double(step));
  if (n > double(kMaxRange))
    throw Error("range too big: the sandbox blocks ranges larger than " + std::to_string(kMaxRange));
  std::vector<Value> out;
  for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) out.push_back(Value::integer(k));
  return Value::make_list(std::move(out));
}

struct Builtin : Callable {
  Value (*fn)(Interpreter&, CallArgs&);
  Value call(Interpreter& in, CallArgs& a) override { return fn(in, a); }
};

void add(Scope& s, const char* name, Value (*fn)(Interpreter&, CallArgs&)) {
  auto b = std::make_shared<Builtin>();
  b->name = name;
  b->fn = fn;
  s.vars[name] = Value::func(b);
}

Dict dict_from_args(const CallArgs& a) {
  Dict d;
  if (!a.pos.empty()) {
    if (a.pos.size() > 1 || !a.pos[0].is_mapping()) throw Error("expected a mapping or keyword arguments");
    d = *a.pos[0].dict;
  }
  for (const auto& [k, v] : a.kw) d.set(Value::str(k), v);
  return d;
}

}  // namespace

std::string strftime_today(const std::string& format) {
  std::tm tm{};
  const std::string today_setting = read_settings().today;
  const char* today = today_setting.c_str();
  if (*today) {
    int y, m, d;
    char tail;
    if (sscanf(today, "%d-%d-%d%c", &y, &m, &d, &tail) != 3 || m < 1 || m > 12 || d < 1 || d > 31)
      throw Error(std::string("VKSPEC_TODAY must be a date YYYY-MM-DD, got '") + today + "'");
    tm.tm_year = y - 1900, tm.tm_mon = m - 1, tm.tm_mday = d, tm.tm_hour = 12;
    if (!platform::complete_utc_date(tm)) throw Error(std::string("VKSPEC_TODAY is out of range: '") + today + "'");
    tm.tm_hour = 0;
  } else {
    tm = platform::local_time(time(nullptr));
  }
  char buf[512];
  const size_t n = strftime(buf, sizeof buf, format.c_str(), &tm);
  if (n == 0 && !format.empty()) throw Error("strftime_now: the format gives nothing or more than 512 bytes");
  return std::string(buf, n);
}

void add_globals(Scope& s) {
  add(s, "range", range);
  add(s, "namespace", [](Interpreter&, CallArgs& a) { return Value::make_namespace(dict_from_args(a)); });
  add(s, "dict", [](Interpreter&, CallArgs& a) { return Value::make_dict(dict_from_args(a)); });
  add(s, "raise_exception", [](Interpreter&, CallArgs& a) -> Value {
    throw Error("the template raised an error: " + to_str(arg(a, 0, "message", kUndef)));
  });
  add(s, "strftime_now", [](Interpreter&, CallArgs& a) {
    const Value& f = arg(a, 0, "format", kUndef);
    if (!f.is_str()) throw Error("strftime_now() takes a format string");
    return Value::str(strftime_today(f.s));
  });
}

Value apply_filter(Interpreter& in, const std::string& f, const Value& v, CallArgs& a) {
  if (f != "default" && f != "d" && f != "safe" && f != "length" && f != "count" && f != "first" && f != "last")
    in.charge(v.weight());   // (the others look at the value without visiting all of it)
  if (f == "default" || f == "d") {
    const bool boolean = arg(a, 1, "boolean", kFalse).truthy();
    return v.is_undefined() || (boolean && !v.truthy()) ? arg(a, 0, "default_value", Value::str("")) : v;
  }
  if (f == "safe") return v;
  if (f == "string") return Value::str(soft_str(v));
  if (f == "trim") {
    const Value& chars = arg(a, 0, "chars", kNone);
    return Value::str(py_strip(soft_str(v), chars.is_str() ? &chars.s : nullptr, true, true));
  }
  if (f == "lower" || f == "upper") return Value::str(change_case(soft_str(v), f == "upper"));
  if (f == "capitalize") return Value::str(title_case(change_case(soft_str(v), false), true));
  if (f == "title") return Value::str(title_case(soft_str(v), false));
  if (f == "escape" || f == "e" || f == "forceescape") return Value::str(html_escape(soft_str(v)));
  if (f == "replace") {
    const Value &x = arg(a, 0, "old", kUndef), &y = arg(a, 1, "new", kUndef);
    const Value& count = arg(a, 2, "count", kNone);
    std::string r = replace(soft_str(v), soft_str(x), soft_str(y), count.is_none() ? -1 : int_arg(count, "count"));
    in.check_size(r.size());
    return Value::str(std::move(r));
  }
  if (f == "length" || f == "count") {
    if (v.is_str()) return Value::integer(int64_t(utf8_length(v.s)));
    if (v.is_list() || v.is_mapping() || v.is_undefined()) return Value::integer(int64_t(iterate(v).size()));
    throw Error("object of type '" + v.type_name() + "' has no len()");
  }
  if (f == "tojson") {
    const Value& indent = arg(a, 0, "indent", kNone);
    std::string s = to_json(v, indent.is_none() ? -1 : int(std::clamp<int64_t>(int_arg(indent, "indent"), 0, 64)));
    in.check_size(s.size());
    return Value::str(std::move(s));
  }
  if (f == "list") return Value::make_list(iterate(v));
  if (f == "first" || f == "last") {
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined();
    return f == "first" ? items.front() : items.back();
  }
  if (f == "join") {
    const std::string sep = soft_str(arg(a, 0, "d", Value::str("")));
    const Value& attribute = arg(a, 1, "attribute", kNone);
    std::string out;
    bool first = true;
    for (const Value& x : iterate(v)) {
      if (!first) out += sep;
      out += soft_str(attribute.is_none() ? x : attribute_of(x, attribute));
      first = false;
      in.check_size(out.size());
    }
    return Value::str(std::move(out));
  }
  if (f == "items") {
    if (v.is_undefined()) return Value::make_list({});
    if (!v.is_mapping()) throw Error("can only get item pairs from a mapping");
    std::vector<Value> out;
    for (const auto& [k, x] : v.dict->items) out.push_back(Value::make_list({k, x}, true));
    return Value::make_list(std::move(out));
  }
  if (f == "map") {
    std::vector<Value> out;
    if (!a.pos.empty()) {
      if (!a.pos[0].is_str()) throw Error("map() needs a filter name or attribute=");
      const std::string name = a.pos[0].s;
      CallArgs rest;
      rest.pos.assign(a.pos.begin() + 1, a.pos.end());
      rest.kw = a.kw;
      for (const Value& x : iterate(v)) { in.step(); out.push_back(apply_filter(in, name, x, rest)); }
    } else {
      const Value& attribute = arg(a, 99, "attribute", kUndef);
      const Value& def = arg(a, 99, "default", kUndef);
      if (attribute.is_undefined()) throw Error("map() needs a filter name or attribute=");
      for (const Value& x : iterate(v)) {
        in.step();
        Value y = attribute_of(x, attribute);
        out.push_back(y.is_undefined() && !def.is_undefined() ? def : y);
      }
    }
    return Value::make_list(std::move(out));
  }
  if (f == "select" || f == "reject") {
    auto test = test_from(in, a, 0);
    const bool want = f == "select";
    return filtered(in, v, [&](const Value& x) { return test(x) == want; });
  }
  if (f == "selectattr" || f == "rejectattr") {
    if (a.pos.empty()) throw Error(f + "() needs an attribute name");
    const Value attribute = a.pos[0];
    auto test = test_from(in, a, 1);
    const bool want = f == "selectattr";
    return filtered(in, v, [&](const Value& x) { return test(attribute_of(x, attribute)) == want; });
  }
  if (f == "unique") {
    const bool cs = arg(a, 0, "case_sensitive", kFalse).truthy();
    const Value& attribute = arg(a, 1, "attribute", kNone);
    std::vector<Value> out, seen;
    for (const Value& x : iterate(v)) {
      in.step();
      Value key = sort_key(x, attribute, cs);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) {
            in.charge(s.weight() + key.weight());
            return equal(s, key);
          }))
        seen.push_back(key), out.push_back(x);
    }
    return Value::make_list(std::move(out));
  }
  if (f == "sort")
    return sorted(in, iterate(v), arg(a, 0, "reverse", kFalse).truthy(), arg(a, 1, "case_sensitive", kFalse).truthy(),
                  arg(a, 2, "attribute", kNone));
  if (f == "dictsort") {
    if (!v.is_mapping()) throw Error("dictsort needs a mapping");
    const bool cs = arg(a, 0, "case_sensitive", kFalse).truthy();
    const std::string by = soft_str(arg(a, 1, "by", Value::str("key")));
    if (by != "key" && by != "value") throw Error("You can only sort by either 'key' or 'value'");
    std::vector<Value> pairs;
    for (const auto& [k, x] : v.dict->items) pairs.push_back(Value::make_list({k, x}, true));
    return sorted(in, std::move(pairs), arg(a, 2, "reverse", kFalse).truthy(), cs, Value::integer(by == "key" ? 0 : 1));
  }
  if (f == "reverse") {
    if (v.is_str()) {
      std::vector<std::string_view> cs = utf8_chars(v.s);
      std::string out;
      for (auto it = cs.rbegin(); it != cs.rend(); ++it) out += *it;
      return Value::str(std::move(out));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::make_list(std::move(items));
  }
  if (f == "min" || f == "max") {
    const bool cs = arg(a, 0, "case_sensitive", kFalse).truthy();
    const Value& attribute = arg(a, 1, "attribute", kNone);
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined();
    size_t best = 0;
    for (size_t k = 1; k < items.size(); ++k) {
      in.charge(items[k].weight() + items[best].weight());
      const int c = compare(sort_key(items[k], attribute, cs), sort_key(items[best], attribute, cs));
      if (f == "min" ? c < 0 : c > 0) best = k;
    }
    return items[best];
  }
  if (f == "sum") {
    const Value& attribute = arg(a, 0, "attribute", kNone);
    Value total = arg(a, 1, "start", Value::integer(0));
    for (const Value& x : iterate(v)) total = binary_op(in, "+", total, attribute.is_none() ? x : attribute_of(x, attribute));
    return total;
  }
  if (f == "abs") {
    if (v.kind == K::Float) return Value::number(std::fabs(v.f));
    const int64_t x = int_arg(v, "abs()'s argument");
    if (x == INT64_MIN) throw Error("integer overflow");
    return Value::integer(x < 0 ? -x : x);
  }
  if (f == "int") {
    const Value& def = arg(a, 0, "default", Value::integer(0));
    if (v.is_int()) return Value::integer(v.as_int());
    if (v.kind == K::Float) return std::isfinite(v.f) && std::fabs(v.f) < 9.2e18 ? Value::integer(int64_t(v.f)) : def;
    if (v.is_str()) {
      const std::string t = py_strip(v.s, nullptr, true, true);
      char* end = nullptr;
      errno = 0;
      const long long x = strtoll(t.c_str(), &end, 10);
      if (!t.empty() && *end == 0 && errno == 0) return Value::integer(x);
      const double d = strtod(t.c_str(), &end);
      if (!t.empty() && *end == 0 && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::integer(int64_t(d));
    }
    return def;
  }
  if (f == "float") {
    const Value& def = arg(a, 0, "default", Value::number(0.0));
    if (v.is_number()) return Value::number(v.as_double());
    if (v.is_str()) {
      const std::string t = py_strip(v.s, nullptr, true, true);
      char* end = nullptr;
      const double d = strtod(t.c_str(), &end);
      if (!t.empty() && *end == 0) return Value::number(d);
    }
    return def;
  }
  if (f == "round") {
    if (!v.is_number()) throw Error("round() needs a number");
    const int64_t precision = int_arg(arg(a, 0, "precision", Value::integer(0)), "precision");
    const std::string method = soft_str(arg(a, 1, "method", Value::str("common")));
    const double scale = std::pow(10.0, double(precision)), x = v.as_double() * scale;
    const double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
    if (method != "common" && method != "ceil" && method != "floor") throw Error("method must be common, ceil or floor");
    return Value::number(r / scale);
  }
  if (f == "indent") {
    const Value& width = arg(a, 0, "width", Value::integer(4));
    const std::string pad = width.is_str() ? width.s : std::string(size_t(std::clamp<int64_t>(int_arg(width, "width"), 0, 256)), ' ');
    const bool first = arg(a, 1, "first", kFalse).truthy(), blank = arg(a, 2, "blank", kFalse).truthy();
    CallArgs none;
    Value lines_v = get_attr(Value::str(soft_str(v) + "\n"), "splitlines");
    std::vector<Value> lines = in.call(lines_v, none).list->items;
    std::string out;
    for (size_t k = 0; k < lines.size(); ++k) {
      if (k) out += "\n";
      if (k && (blank || !lines[k].s.empty())) out += pad;
      out += lines[k].s;
      in.check_size(out.size());
    }
    return Value::str(first ? pad + out : out);
  }
  if (f == "wordcount") return Value::integer(int64_t(split(soft_str(v), kNone, -1).size()));
  throw Error("no filter named '" + f + "'");
}

bool apply_test(Interpreter& in, const std::string& t, const Value& v, CallArgs& a) {
  const Value& x = arg(a, 0, "other", kUndef);
  if (t == "eq" || t == "equalto" || t == "==" || t == "ne" || t == "!=" || t == "lt" || t == "lessthan" ||
      t == "<" || t == "le" || t == "<=" || t == "gt" || t == "greaterthan" || t == ">" || t == "ge" || t == ">=" ||
      t == "sameas")
    in.charge(v.weight() + x.weight());   // compared ("in" is charged by binary_op)
  if (t == "defined") return !v.is_undefined();
  if (t == "undefined") return v.is_undefined();
  if (t == "none") return v.is_none();
  if (t == "boolean") return v.kind == K::Bool;
  if (t == "true") return v.kind == K::Bool && v.b;
  if (t == "false") return v.kind == K::Bool && !v.b;
  if (t == "integer") return v.kind == K::Int;
  if (t == "float") return v.kind == K::Float;
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_str();
  if (t == "mapping") return v.is_mapping();
  if (t == "iterable" || t == "sequence") return v.is_str() || v.is_list() || v.is_mapping() || v.is_undefined();
  if (t == "callable") return v.is_callable();
  if (t == "escaped") return false;
  if (t == "sameas") {   // identity: containers by reference, scalars by value (as Python's small ints)
    if (v.kind != x.kind) return false;
    if (v.list || v.dict || v.fn) return v.list == x.list && v.dict == x.dict && v.fn == x.fn;
    return equal(v, x);
  }
  if (t == "even" || t == "odd") {
    const int64_t n = int_arg(v, "the value");
    return (n % 2 == 0) == (t == "even");
  }
  if (t == "divisibleby") {
    const int64_t d = int_arg(x, "divisibleby's argument");
    if (d == 0) throw Error("integer division or modulo by zero");
    return int_arg(v, "the value") % d == 0;
  }
  if (t == "eq" || t == "equalto" || t == "==") return equal(v, x);
  if (t == "ne" || t == "!=") return !equal(v, x);
  if (t == "lt" || t == "lessthan" || t == "<") return compare(v, x) < 0;
  if (t == "le" || t == "<=") return compare(v, x) <= 0;
  if (t == "gt" || t == "greaterthan" || t == ">") return compare(v, x) > 0;
  if (t == "ge" || t == ">=") return compare(v, x) >= 0;
  if (t == "in") return binary_op(in, "in", v, arg(a, 0, "seq", kUndef)).b;
  if (t == "lower" || t == "upper") return v.is_str() && !v.s.empty() && change_case(v.s, t == "upper") == v.s &&
                                           change_case(v.s, t != "upper") != v.s;
  throw Error("no test named '" + t + "'");
}

}  // namespace vkspec::jinja
