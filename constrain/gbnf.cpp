// Running a Gbnf: stacks of rule positions fed code points and bytes, masks over a vocabulary, lazy grammars.
#include "constrain/gbnf.h"

#include <algorithm>
#include <array>
#include <map>

#include "core/core.h"

namespace vkspec {

using E = GbnfElement;


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

// The work a grammar may do (rule expansions in `advance`) for one operation: a mask, an accepted token, the
// start. Nested repetitions make it exponential in their depth, and it runs on the engine thread, so a grammar
// past the budget is refused (at its first mask, which submission computes: a 400 in the server) instead of
// stalling every stream beside it. Operations inside one share its budget; `advance` alone (outside any
// operation) has the budget to itself.
thread_local uint64_t* t_expansions = nullptr;
[[noreturn]] void too_costly() {
  throw Error("the grammar is too costly to follow: one step takes more than " + std::to_string(Gbnf::kMaxExpansions) +
              " rule expansions (nested repetitions multiply: write them flatter)");
}
}  // namespace

GbnfConstraint::Budget::Budget() : owner_(t_expansions == nullptr) {
  if (owner_) t_expansions = &used_;
}
GbnfConstraint::Budget::~Budget() {
  if (owner_) t_expansions = nullptr;
}

namespace {
void add_unique(std::vector<GbnfState::Stack>& out, GbnfState::Stack s) {
  if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
}

// Expands the rule references on top of `stack` until every resulting stack has a character element on top
// (or is empty: the text may end there), into `out`; false when they would be more than Gbnf::kMaxStacks.
bool advance(const Gbnf& g, GbnfState::Stack stack, std::vector<GbnfState::Stack>& out) {
  std::vector<GbnfState::Stack> todo{std::move(stack)};
  uint64_t steps = 0;
  while (!todo.empty()) {
    if (++steps > Gbnf::kMaxExpansions || (t_expansions && ++*t_expansions > Gbnf::kMaxExpansions)) too_costly();
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
  const Budget budget;
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
  const Budget budget;
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
  const Budget budget;
  GbnfState s = state_;
  for (uint32_t i = 0; i < drafts.size(); ++i) {
    if (!feed(s, drafts[i])) return i;
    allowed(s, mask(i + 1));
  }
  return uint32_t(drafts.size());
}

void GbnfConstraint::accept(uint32_t token) {
  const Budget budget;
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
  const GbnfConstraint::Budget budget;
  TriggeredGbnfConstraint c = *this;
  for (uint32_t i = 0; i < drafts.size(); ++i) {
    if (!c.allows(drafts[i])) return i;
    c.accept(drafts[i]);
    c.allowed(mask(i + 1));
  }
  return uint32_t(drafts.size());
}

void TriggeredGbnfConstraint::accept(uint32_t token) {
  const GbnfConstraint::Budget budget;
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
