#include "constrain/gbnf.h"

#include <algorithm>
#include <array>
#include <map>

#include "core/core.h"

namespace vkspec {

using E = GbnfElement;

// ---- parsing ----

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
  void add_rule(uint32_t id, std::vector<E> rule) {
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
    if (min == 0) out.resize(item);
    for (uint32_t i = 1; i < min; ++i) out.insert(out.end(), prev.begin(), prev.end());
    const int64_t optional = max < 0 ? 1 : max - int64_t(min);
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

// ---- running ----

std::string gbnf_escape(uint32_t c) {
  static const char* digits = "0123456789ABCDEF";
  const int n = c < 0x100 ? 2 : c < 0x10000 ? 4 : 8;
  std::string out = n == 2 ? "\\x" : n == 4 ? "\\u" : "\\U";
  for (int i = n - 1; i >= 0; --i) out += digits[(c >> (4 * i)) & 15];
  return out;
}

namespace {
bool is_end(const E* p) { return p->type == E::End || p->type == E::Alt; }

// Whether code point c matches the character element at p (and its alternatives), and the element after them.
std::pair<bool, const E*> match_char(const E* p, uint32_t c) {
  if (p->type == E::CharAny) return {true, p + 1};
  const bool positive = p->type == E::Char;
  bool found = false;
  do {
    if (p[1].type == E::CharRangeUpper) {
      found = found || (p->value <= c && c <= p[1].value);
      p += 2;
    } else {
      found = found || p->value == c;
      p += 1;
    }
  } while (p->type == E::CharAlt);
  return {found == positive, p};
}

// Whether an unfinished character (its bits so far and how many bytes remain) may complete to one the
// element at p matches: llama.cpp's llama_grammar_match_partial_char, whose answer decides the same tokens.
bool match_partial(const E* p, uint32_t value, int remain) {
  const bool positive = p->type == E::Char || p->type == E::CharAny;
  if (remain < 0 || (remain == 1 && value < 2)) return false;
  uint32_t low = value << (remain * 6);
  const uint32_t high = low | ((1u << (remain * 6)) - 1);
  if (low == 0) low = remain == 2 ? 1u << 11 : remain == 3 ? 1u << 16 : low;
  do {
    if (p->type == E::CharAny) return true;
    if (p[1].type == E::CharRangeUpper) {
      if (p->value <= high && low <= p[1].value) return positive;
      p += 2;
    } else {
      if (low <= p->value && p->value <= high) return positive;
      p += 1;
    }
  } while (p->type == E::CharAlt);
  return !positive;
}

void add_unique(std::vector<GbnfState::Stack>& out, GbnfState::Stack s) {
  if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
}

// Expands the rule references on top of `stack` until every resulting stack has a character element on top
// (or is empty: the text may end there), into `out`; false when they would be more than Gbnf::kMaxStacks.
bool advance(const Gbnf& g, GbnfState::Stack stack, std::vector<GbnfState::Stack>& out) {
  std::vector<GbnfState::Stack> todo{std::move(stack)};
  while (!todo.empty()) {
    GbnfState::Stack cur = std::move(todo.back());
    todo.pop_back();
    if (cur.empty() || cur.back()->type != E::RuleRef) {
      add_unique(out, std::move(cur));
      if (out.size() > Gbnf::kMaxStacks) return false;
      continue;
    }
    const E* pos = cur.back();
    const E* sub = g.rules()[pos->value].data();
    while (true) {
      GbnfState::Stack next(cur.begin(), cur.end() - 1);
      if (!is_end(pos + 1)) next.push_back(pos + 1);
      if (!is_end(sub)) next.push_back(sub);
      todo.push_back(std::move(next));
      while (!is_end(sub)) ++sub;
      if (sub->type != E::Alt) break;
      ++sub;
    }
  }
  return true;
}

bool accept_char(const Gbnf& g, GbnfState& s, uint32_t c) {
  std::vector<GbnfState::Stack> next;
  for (const GbnfState::Stack& stack : s.stacks) {
    if (stack.empty()) continue;
    const auto [ok, after] = match_char(stack.back(), c);
    if (!ok) continue;
    GbnfState::Stack rest(stack.begin(), stack.end() - 1);
    if (!is_end(after)) rest.push_back(after);
    if (!advance(g, std::move(rest), next)) return false;
  }
  s.stacks = std::move(next);
  return !s.stacks.empty();
}

}  // namespace

bool GbnfConstraint::may_end(const GbnfState& s) {
  return std::any_of(s.stacks.begin(), s.stacks.end(), [](const GbnfState::Stack& k) { return k.empty(); });
}

bool GbnfMaskCache::find(const std::string& key, std::span<uint32_t> bits) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = masks_.find(key);
  if (it == masks_.end() || it->second.size() != bits.size()) return false;
  std::copy(it->second.begin(), it->second.end(), bits.begin());
  return true;
}

void GbnfMaskCache::put(const std::string& key, std::span<const uint32_t> bits) {
  std::lock_guard<std::mutex> lock(mu_);
  if (max_ == 0 || masks_.count(key)) return;
  if (masks_.size() >= max_) {
    masks_.erase(order_.front());
    order_.erase(order_.begin());
  }
  masks_.emplace(key, std::vector<uint32_t>(bits.begin(), bits.end()));
  order_.push_back(key);
  if (masks_.size() != order_.size() || masks_.size() > max_) throw Error("internal: the grammar mask cache lost count");
}

size_t GbnfMaskCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return masks_.size();
}

std::string GbnfConstraint::key(const GbnfState& s) {
  std::vector<GbnfState::Stack> stacks = s.stacks;   // (few: a set, in a canonical order)
  std::sort(stacks.begin(), stacks.end());
  std::string k;
  auto put = [&k](const void* p, size_t n) { k.append(static_cast<const char*>(p), n); };
  const uint32_t partial = s.partial_remain > 0 ? s.partial_value : 0;   // (a finished character's is stale)
  put(&partial, sizeof partial);
  put(&s.partial_remain, sizeof s.partial_remain);
  for (const GbnfState::Stack& st : stacks) {
    const uint32_t n = uint32_t(st.size());
    put(&n, sizeof n);
    put(st.data(), st.size() * sizeof(st[0]));
  }
  return k;
}

GbnfConstraint::GbnfConstraint(std::shared_ptr<const Gbnf> grammar, std::shared_ptr<const VocabBytes> vocab,
                               std::shared_ptr<GbnfMaskCache> masks)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), masks_(std::move(masks)) {
  if (vocab_->eog.empty()) throw Error("constrained generation needs an end-of-generation token, and this vocabulary has none");
  const E* alt = grammar_->rules()[grammar_->root()].data();
  while (true) {
    GbnfState::Stack stack;
    if (!is_end(alt)) stack.push_back(alt);
    if (!advance(*grammar_, std::move(stack), state_.stacks))
      throw Error("grammar: more than " + std::to_string(Gbnf::kMaxStacks) + " ways to begin");
    while (!is_end(alt)) ++alt;
    if (alt->type != E::Alt) break;
    ++alt;
  }
}

bool GbnfConstraint::feed_byte(GbnfState& s, uint8_t b) const {
  if (s.partial_remain > 0) {
    if ((b >> 6) != 2) return false;
    // Only well-formed UTF-8 (Unicode's table 3-7), where llama.cpp would also take overlong forms,
    // surrogates and code points past U+10FFFF (a JSON string of them is not valid UTF-8): the second byte
    // after E0, ED, F0 and F4 has a narrower range. The state says which byte this is: a 3-byte lead leaves
    // its 4 bits (below 0x10) with 2 bytes to come, where a 4-byte sequence's first two bytes leave 0x10 or
    // more; a 4-byte lead leaves 3 to come.
    const uint32_t lead = s.partial_value;
    if (s.partial_remain == 2 && lead < 0x10 && ((lead == 0x0 && b < 0xA0) || (lead == 0xD && b > 0x9F))) return false;
    if (s.partial_remain == 3 && ((lead == 0 && b < 0x90) || (lead == 4 && b > 0x8F))) return false;
    s.partial_value = (s.partial_value << 6) | (b & 0x3F);
    return --s.partial_remain > 0 || accept_char(*grammar_, s, s.partial_value);
  }
  const int n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;   // llama.cpp's lead bytes
  if (n == 0 || b == 0 || b == 0xC0 || b == 0xC1 || b > 0xF4) return false;   // (C0, C1, F5..FF: never well formed)
  if (n == 1) return accept_char(*grammar_, s, b);
  s.partial_value = b & ((1u << (8 - n)) - 1);
  s.partial_remain = n - 1;
  return true;
}

bool GbnfConstraint::ends(const GbnfState& s) {
  if (s.partial_remain == 0) return true;
  // inside a character: some character allowed next must be able to complete it
  return std::any_of(s.stacks.begin(), s.stacks.end(), [&](const GbnfState::Stack& k) {
    return !k.empty() && match_partial(k.back(), s.partial_value, s.partial_remain);
  });
}

bool GbnfConstraint::feed_bytes(GbnfState& s, std::string_view bytes) const {
  for (const char ch : bytes)
    if (!feed_byte(s, uint8_t(ch))) return false;
  return ends(s);
}

bool GbnfConstraint::feed(GbnfState& s, uint32_t token) const {
  if (vocab_->is_eog(token)) return may_end(s);
  const std::string& p = vocab_->pieces.at(token);
  return !p.empty() && feed_bytes(s, p);
}

namespace {
// One vocabulary walk's states, interned (ids; equal states by GbnfConstraint::key) with their transitions by
// byte: a byte fed from a state seen before is a table lookup. Inside a string or free text a character
// leads back to the same state, so a walk over 128k tokens meets a few dozen states, where feeding every
// byte of every token through the stacks costs ~100 ms. Past max_states (a grammar of many literals, say)
// the walk gives up and the caller walks the stacks directly.
class InternedWalk {
 public:
  InternedWalk(const GbnfConstraint& g, const GbnfState& start, size_t max_states) : g_(g), max_(max_states) {
    intern(start);
  }
  bool step(int32_t& id, uint8_t byte) {
    int32_t& next = next_[size_t(id)][byte];
    if (next == kUnknown) {
      GbnfState s = states_[size_t(id)];
      const int32_t to = g_.feed_byte(s, byte) ? intern(std::move(s)) : kDead;
      next_[size_t(id)][byte] = to;   // (intern may have moved the tables)
      id_ok_ = id_ok_ && to != kOverflow;
      return to >= 0 && (id = to, true);
    }
    return next >= 0 && (id = next, true);
  }
  bool ends(int32_t id) const { return ends_[size_t(id)]; }
  bool overflowed() const { return !id_ok_; }

 private:
  static constexpr int32_t kUnknown = -3, kOverflow = -2, kDead = -1;
  int32_t intern(GbnfState s) {
    std::string k = GbnfConstraint::key(s);
    if (const auto it = ids_.find(k); it != ids_.end()) return it->second;
    if (!states_.empty() && states_.size() >= max_) return kOverflow;   // (the start is always interned)
    const int32_t id = int32_t(states_.size());
    ends_.push_back(GbnfConstraint::ends(s));
    states_.push_back(std::move(s));
    next_.emplace_back();
    next_.back().fill(kUnknown);
    ids_.emplace(std::move(k), id);
    return id;
  }
  const GbnfConstraint& g_;
  size_t max_;
  std::vector<GbnfState> states_;
  std::vector<bool> ends_;
  std::vector<std::array<int32_t, 256>> next_;
  std::unordered_map<std::string, int32_t> ids_;
  bool id_ok_ = true;
};
}  // namespace

void GbnfConstraint::allowed(const GbnfState& s, std::span<uint32_t> bits, size_t max_states) const {
  if (bits.size() != TOKEN_MASK_WORDS(vocab_->n_vocab())) throw Error("internal: a grammar mask of the wrong size");
  std::string k;
  if (masks_) {
    k = key(s);
    if (masks_->find(k, bits)) return;
  }
  std::fill(bits.begin(), bits.end(), 0u);
  InternedWalk w(*this, s, max_states);
  walk_sorted(*vocab_, vocab_->with_piece, int32_t(0), [&w](int32_t& id, uint8_t b) { return w.step(id, b); },
              [&w](int32_t id) { return w.ends(id); }, bits);
  if (w.overflowed()) {   // too many states to intern: the stacks themselves
    std::fill(bits.begin(), bits.end(), 0u);
    walk_sorted(*vocab_, vocab_->with_piece, s, [this](GbnfState& c, uint8_t b) { return feed_byte(c, b); }, ends, bits);
  }
  if (may_end(s))
    for (uint32_t t : vocab_->eog) bits[TOKEN_MASK_WORD(t)] |= TOKEN_MASK_BIT(t);
  if (masks_) masks_->put(k, bits);
}

void GbnfConstraint::allowed(std::span<uint32_t> bits) const { allowed(state_, bits); }

uint32_t GbnfConstraint::draft_masks(std::span<const uint32_t> drafts,
                                     const std::function<std::span<uint32_t>(uint32_t row)>& mask) const {
  GbnfState s = state_;
  for (uint32_t i = 0; i < drafts.size(); ++i) {
    if (!feed(s, drafts[i])) return i;
    allowed(s, mask(i + 1));
  }
  return uint32_t(drafts.size());
}

void GbnfConstraint::accept(uint32_t token) {
  if (!feed(state_, token)) throw Error("internal: a token outside the grammar's mask was chosen");
}

bool GbnfConstraint::complete() const { return may_end(state_); }

TriggeredGbnfConstraint::TriggeredGbnfConstraint(std::shared_ptr<const Gbnf> trigger, std::shared_ptr<const Gbnf> grammar,
                                                 std::shared_ptr<const VocabBytes> vocab,
                                                 std::shared_ptr<GbnfMaskCache> masks)
    : trigger_(std::move(trigger), vocab), grammar_(std::move(grammar), vocab, std::move(masks)), trigger_state_(trigger_.state()),
      grammar_state_(grammar_.state()), vocab_(std::move(vocab)) {}

void TriggeredGbnfConstraint::allowed(std::span<uint32_t> bits) const {
  if (phase_ == Phase::Active) return grammar_.allowed(grammar_state_, bits);
  if (bits.size() != TOKEN_MASK_WORDS(vocab_->n_vocab())) throw Error("internal: a grammar mask of the wrong size");
  std::fill(bits.begin(), bits.end(), ~0u);
}

bool TriggeredGbnfConstraint::allows(uint32_t token) const {
  if (phase_ != Phase::Active) return true;
  GbnfState s = grammar_state_;
  return grammar_.feed(s, token);
}

uint32_t TriggeredGbnfConstraint::draft_masks(std::span<const uint32_t> drafts,
                                              const std::function<std::span<uint32_t>(uint32_t row)>& mask) const {
  TriggeredGbnfConstraint c = *this;
  for (uint32_t i = 0; i < drafts.size(); ++i) {
    if (!c.allows(drafts[i])) return i;
    c.accept(drafts[i]);
    c.allowed(mask(i + 1));
  }
  return uint32_t(drafts.size());
}

void TriggeredGbnfConstraint::accept(uint32_t token) {
  if (phase_ == Phase::Active) {
    if (!grammar_.feed(grammar_state_, token)) throw Error("internal: a token outside the grammar's mask was chosen");
    return;
  }
  if (phase_ == Phase::Off || vocab_->is_eog(token)) return;
  const std::string& p = vocab_->pieces.at(token);
  for (size_t i = 0; i < p.size(); ++i) {
    if (text_.empty() && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r')) continue;   // leading
    text_ += p[i];
    if (!trigger_.feed_byte(trigger_state_, uint8_t(p[i]))) {   // the text left the trigger's language
      phase_ = Phase::Off;
      text_.clear();
      return;
    }
    if (GbnfConstraint::may_end(trigger_state_)) {   // matched: the grammar takes the text so far
      text_.append(p, i + 1);
      phase_ = grammar_.feed_bytes(grammar_state_, text_) ? Phase::Active : Phase::Off;
      text_.clear();
      return;
    }
  }
}

bool TriggeredGbnfConstraint::complete() const {
  return phase_ != Phase::Active || GbnfConstraint::may_end(grammar_state_);
}

}  // namespace vkspec
