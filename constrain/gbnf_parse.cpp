// GBNF text -> Gbnf (rules of elements), with its checks: undefined rules, left recursion, the bounds.
#include "constrain/gbnf.h"

#include <algorithm>
#include <array>
#include <map>

#include "core/core.h"

namespace vkspec {

using E = GbnfElement;


class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : src_(text) {}
  std::shared_ptr<Gbnf> run();

 private:
  [[noreturn]] void fail(const std::string& what) const {
    const size_t line = 1 + size_t(std::count(src_.begin(), src_.begin() + long(std::min(at_, src_.size())), '\n'));
    throw Error("grammar, line " + std::to_string(line) + ": " + what);
  }
  [[noreturn]] void unterminated(size_t start, const char* what) {
    at_ = start;
    fail(std::string("an unterminated ") + what);
  }
  char peek(size_t ahead = 0) const { return at_ + ahead < src_.size() ? src_[at_ + ahead] : '\0'; }
  bool done() const { return at_ >= src_.size(); }
  void space(bool newlines) {
    while (!done()) {
      const char c = peek();
      if (c == '#') {
        while (!done() && peek() != '\n' && peek() != '\r') ++at_;
      } else if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++at_;
      } else {
        break;
      }
    }
  }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  std::string_view name() {
    const size_t start = at_;
    while (!done() && name_char(peek())) ++at_;
    if (at_ == start) fail("expecting a rule name");
    return src_.substr(start, at_ - start);
  }
  uint32_t symbol(std::string_view n) {
    auto it = ids_.find(std::string(n));
    if (it != ids_.end()) return it->second;
    const uint32_t id = uint32_t(ids_.size());
    if (id >= Gbnf::kMaxRules) fail("more than " + std::to_string(Gbnf::kMaxRules) + " rules");
    ids_.emplace(std::string(n), id);
    return id;
  }
  uint32_t new_symbol(std::string_view base) {
    const uint32_t id = uint32_t(ids_.size());
    if (id >= Gbnf::kMaxRules) fail("more than " + std::to_string(Gbnf::kMaxRules) + " rules (repetitions count theirs)");
    ids_.emplace(std::string(base) + "_" + std::to_string(id), id);
    return id;
  }
  // Counts `n` more elements against Gbnf::kMaxElements (before they are made).
  void grow(uint64_t n) {
    elements_ += n;
    if (elements_ > Gbnf::kMaxElements)
      fail("the grammar expands to more than " + std::to_string(Gbnf::kMaxElements) +
           " elements (a repetition copies what it repeats)");
  }
  void add_rule(uint32_t id, std::vector<E> rule) {
    grow(rule.size());
    if (g_->rules_.size() <= id) g_->rules_.resize(id + 1);
    g_->rules_[id] = std::move(rule);
  }
  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail("expecting " + std::to_string(digits) + " hex digits");
      v = v * 16 + uint32_t(d);
      ++at_;
    }
    return v;
  }
  // One character of a literal or a class: an escape, or one UTF-8 encoded code point.
  uint32_t character() {
    if (done()) fail("unexpected end of the grammar");
    const uint8_t c = uint8_t(peek());
    if (c == '\\') {
      ++at_;
      const char e = peek();
      ++at_;
      switch (e) {
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        case 't': return '\t';
        case 'r': return '\r';
        case 'n': return '\n';
        case '\\': case '"': case '[': case ']': return uint32_t(e);
        default: fail(std::string("unknown escape \\") + e);
      }
    }
    const int n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (n == 0 || at_ + size_t(n) > src_.size()) fail("malformed UTF-8");
    uint32_t v = n == 1 ? c : c & ((1u << (7 - n)) - 1);
    for (int i = 1; i < n; ++i) v = (v << 6) | (uint8_t(src_[at_ + size_t(i)]) & 0x3F);
    at_ += size_t(n);
    return v;
  }
  uint32_t count() {
    const size_t start = at_;
    uint64_t v = 0;
    while (!done() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + uint64_t(peek() - '0');
      if (v > Gbnf::kMaxRules) fail("a repetition count above " + std::to_string(Gbnf::kMaxRules));
      ++at_;
    }
    if (at_ == start) fail("expecting a number");
    return uint32_t(v);
  }
  // The last item of `out` (from `item`) repeated min..max times (max < 0: unbounded), as llama.cpp
  // rewrites it: the mandatory copies in place, then nested optional rules.
  void repeat(std::string_view rule_name, std::vector<E>& out, size_t item, uint32_t min, int64_t max) {
    if (item == out.size()) fail("expecting an item before a repetition operator");
    const std::vector<E> prev(out.begin() + long(item), out.end());
    const int64_t optional = max < 0 ? 1 : max - int64_t(min);
    // what the copies will hold, counted before any is made (the rule holding `out` counts it again when
    // it is added: the bound errs on the safe side)
    grow(uint64_t(min > 1 ? min - 1 : 0) * prev.size() + uint64_t(optional) * (prev.size() + 3));
    if (min == 0) out.resize(item);
    for (uint32_t i = 1; i < min; ++i) out.insert(out.end(), prev.begin(), prev.end());
    uint32_t last = 0;
    for (int64_t i = 0; i < optional; ++i) {
      std::vector<E> rec = prev;
      const uint32_t id = new_symbol(rule_name);
      if (i > 0 || max < 0) rec.push_back({E::RuleRef, max < 0 ? id : last});
      rec.push_back({E::Alt, 0});
      rec.push_back({E::End, 0});
      add_rule(id, std::move(rec));
      last = id;
    }
    if (optional > 0) out.push_back({E::RuleRef, last});
  }
  void sequence(std::string_view rule_name, std::vector<E>& out, bool nested) {
    size_t item = out.size();   // where the last item starts (what a repetition operator repeats)
    while (!done()) {
      const char c = peek();
      if (c == '"') {
        const size_t start = at_++;
        item = out.size();
        while (peek() != '"') {
          if (done()) unterminated(start, "literal");
          out.push_back({E::Char, character()});
        }
        ++at_;
      } else if (c == '[') {
        const size_t start = at_++;
        item = out.size();
        E::Type first = E::Char;
        if (peek() == '^') {
          ++at_;
          first = E::CharNot;
        }
        while (peek() != ']') {
          if (done()) unterminated(start, "character class");
          out.push_back({out.size() > item ? E::CharAlt : first, character()});
          if (peek() == '-' && peek(1) != ']') {
            ++at_;
            out.push_back({E::CharRangeUpper, character()});
          }
        }
        ++at_;
      } else if (name_char(c)) {
        item = out.size();
        out.push_back({E::RuleRef, symbol(name())});
      } else if (c == '(') {
        ++at_;
        space(true);
        if (++depth_ > Gbnf::kMaxNesting) fail("groups nested more than " + std::to_string(Gbnf::kMaxNesting) + " deep");
        const uint32_t sub = new_symbol(rule_name);
        alternates(rule_name, sub, true);
        --depth_;
        item = out.size();
        out.push_back({E::RuleRef, sub});
        if (peek() != ')') fail("expecting ')'");
        ++at_;
      } else if (c == '.') {
        ++at_;
        item = out.size();
        out.push_back({E::CharAny, 0});
      } else if (c == '*' || c == '+' || c == '?') {
        ++at_;
        repeat(rule_name, out, item, c == '+' ? 1 : 0, c == '?' ? 1 : -1);
      } else if (c == '{') {
        ++at_;
        space(nested);
        const uint32_t min = count();
        space(nested);
        int64_t max = min;
        if (peek() == ',') {
          ++at_;
          space(nested);
          max = peek() >= '0' && peek() <= '9' ? int64_t(count()) : -1;
          space(nested);
        }
        if (peek() != '}') fail("expecting '}'");
        ++at_;
        if (max >= 0 && max < int64_t(min)) fail("a repetition whose maximum is below its minimum");
        repeat(rule_name, out, item, min, max);
      } else {
        break;
      }
      space(nested);
    }
  }
  void alternates(std::string_view rule_name, uint32_t id, bool nested) {
    std::vector<E> rule;
    sequence(rule_name, rule, nested);
    while (peek() == '|') {
      rule.push_back({E::Alt, 0});
      ++at_;
      space(true);
      sequence(rule_name, rule, nested);
    }
    rule.push_back({E::End, 0});
    add_rule(id, std::move(rule));
  }
  bool left_recursive(uint32_t r, std::vector<uint8_t>& mark, const std::vector<bool>& nullable) const;

  std::string_view src_;
  size_t at_ = 0;
  uint64_t elements_ = 0;   // counted by grow()
  uint32_t depth_ = 0;   // nested groups
  std::map<std::string, uint32_t> ids_;
  std::shared_ptr<Gbnf> g_ = std::make_shared<Gbnf>();
};

// Whether rule r can derive itself at its left edge (through rules that may be empty): the stacks would never
// stop growing. mark: 0 unvisited, 1 on the current path, 2 done.
bool GbnfParser::left_recursive(uint32_t r, std::vector<uint8_t>& mark, const std::vector<bool>& nullable) const {
  if (mark[r] == 1) return true;
  if (mark[r] == 2) return false;
  mark[r] = 1;
  bool leftmost = true;
  for (const E& e : g_->rules_[r]) {
    if (e.type == E::End || e.type == E::Alt) {
      leftmost = true;
    } else if (leftmost && e.type == E::RuleRef) {
      if (left_recursive(e.value, mark, nullable)) return true;
      leftmost = nullable[e.value];
    } else {
      leftmost = false;
    }
  }
  mark[r] = 2;
  return false;
}

std::shared_ptr<Gbnf> GbnfParser::run() {
  space(true);
  while (!done()) {
    const std::string_view n = name();
    const uint32_t id = symbol(n);
    space(false);
    if (src_.substr(at_, 3) != "::=") fail("expecting ::= after '" + std::string(n) + "'");
    at_ += 3;
    space(true);
    alternates(n, id, false);
    if (peek() == '\r') ++at_;
    if (peek() == '\n') ++at_;
    else if (!done()) fail(std::string("unexpected '") + peek() + "'");
    space(true);
  }
  g_->rules_.resize(ids_.size());
  for (const auto& [n, id] : ids_)
    if (g_->rules_[id].empty()) throw Error("grammar: the rule '" + n + "' is used but not defined");
  const auto root = ids_.find("root");
  if (root == ids_.end()) throw Error("grammar: no 'root' rule");
  g_->root_ = root->second;
  // rules that may derive the empty text (a fixpoint), then left recursion through them
  const size_t n_rules = g_->rules_.size();
  std::vector<bool> nullable(n_rules, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n_rules; ++r) {
      if (nullable[r]) continue;
      bool all = true;   // every element of the current alternative so far may be empty
      for (const E& e : g_->rules_[r]) {
        if (e.type == E::End || e.type == E::Alt) {
          if (all) { nullable[r] = changed = true; break; }
          all = true;
        } else if (!(e.type == E::RuleRef && nullable[e.value])) {
          all = false;
        }
      }
    }
  }
  std::vector<uint8_t> mark(n_rules, 0);
  for (const auto& [n, id] : ids_)
    if (left_recursive(id, mark, nullable)) throw Error("grammar: the rule '" + n + "' is left-recursive");
  return g_;
}

std::shared_ptr<const Gbnf> Gbnf::parse(std::string_view text) { return GbnfParser(text).run(); }

}  // namespace vkspec
