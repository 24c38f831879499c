#pragma once
// Grammars in llama.cpp's GBNF (its grammars/README.md: rules `name ::= ...`, "literals", [character
// classes], `.`, ( groups ), | alternatives, * + ? {m} {m,} {m,n}, # comments; `root` is the start), parsed
// into rules of flat elements and run as a set of pushdown stacks over Unicode code points, as llama.cpp
// runs them, so that a grammar allows the tokens llama.cpp's allows (tests/test_presets.cpp compares the
// greedy ids). A token's bytes are decoded as UTF-8 across token boundaries: a token may end inside a
// character when some character the grammar allows next could complete it (llama.cpp's partial match).
// Left recursion, undefined rules and syntax errors are refused when parsing, with the line. Limits bound
// what a hostile grammar costs: kMaxRules rules (repetitions count theirs), kMaxNesting nested groups, and
// while generating kMaxStacks parse stacks: a token after which the grammar would need more is not allowed.
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "constrain/token_constraint.h"

namespace vkspec {

struct GbnfElement {
  enum Type : uint8_t {
    End,        // the end of a rule
    Alt,        // the start of the next alternative
    RuleRef,    // value: rule id
    Char,       // value: a code point; CharRangeUpper / CharAlt elements may follow
    CharNot,    // the same, negated: [^...]
    CharRangeUpper,   // value: the inclusive upper bound of the range started by the element before
    CharAlt,    // value: another code point of the class
    CharAny,    // `.`: any code point
  };
  Type type;
  uint32_t value;
};

class Gbnf {
 public:
  static constexpr uint32_t kMaxRules = 8192, kMaxNesting = 256, kMaxStacks = 512;
  // Rule expansions one operation (a mask, an accepted token) may make: past it the grammar is refused as
  // too costly (nested repetitions grow exponentially; ordinary grammars use a few thousand).
  static constexpr uint64_t kMaxExpansions = 4'000'000;
  // Elements of the parsed grammar, its repetitions' copies included (a small text can ask for hundreds of
  // millions): past it the grammar is refused. Each is 8 bytes.
  static constexpr uint64_t kMaxElements = 1'000'000;
  // Throws Error naming the line for text that is not a grammar (or one with left recursion, an undefined
  // rule, no root rule).
  static std::shared_ptr<const Gbnf> parse(std::string_view text);
  const std::vector<std::vector<GbnfElement>>& rules() const { return rules_; }
  uint32_t root() const { return root_; }
  size_t bytes() const {   // what the parsed grammar holds
    size_t n = 0;
    for (const auto& r : rules_) n += r.size() * sizeof(GbnfElement);
    return n;
  }

 private:
  std::vector<std::vector<GbnfElement>> rules_;   // alternatives separated by Alt, ended by End
  uint32_t root_ = 0;
  friend class GbnfParser;
};

// Code point c as a GBNF escape (\xNN, \uNNNN or \UNNNNNNNN), for writers of grammar text (JSON schemas,
// patterns).
std::string gbnf_escape(uint32_t c);

// Where a generation stands in a grammar: the stacks of element positions that the text so far can be
// continued from, and an unfinished UTF-8 character.
struct GbnfState {
  using Stack = std::vector<const GbnfElement*>;
  std::vector<Stack> stacks;
  uint32_t partial_value = 0;   // the bits of an unfinished character so far
  int partial_remain = 0;       // its bytes still to come (0: none)
};

// Masks of one grammar over one vocabulary by state, shared by the requests that run that grammar (a mask
// depends on nothing but the state). A state repeats at every token inside a string or free text (a `char*`
// loop), and a server's requests repeat their grammars, where a walk over a large vocabulary with most tokens
// allowed is costly. Invariant (checked at each put): at most `max_entries` masks, `order_` holding each
// key once, oldest first (the oldest goes when full). Thread-safe.
class GbnfMaskCache {
 public:
  explicit GbnfMaskCache(size_t max_entries = 128) : max_(max_entries) {}
  bool find(const std::string& key, std::span<uint32_t> bits) const;   // a hit copies the mask into bits
  void put(const std::string& key, std::span<const uint32_t> bits);
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::vector<uint32_t>> masks_;
  std::vector<std::string> order_;   // keys, oldest first
  size_t max_;
};

// A generation constrained by a grammar: allowed tokens per step (end of generation when the text so far is
// a sentence of the grammar), the state advanced by each chosen token.
class GbnfConstraint : public TokenConstraint {
 public:
  // `masks`: a cache for this grammar and vocabulary (nullptr: none).
  GbnfConstraint(std::shared_ptr<const Gbnf> grammar, std::shared_ptr<const VocabBytes> vocab,
                 std::shared_ptr<GbnfMaskCache> masks = nullptr);
  void allowed(std::span<uint32_t> bits) const override;
  uint32_t draft_masks(std::span<const uint32_t> drafts,
                       const std::function<std::span<uint32_t>(uint32_t row)>& mask) const override;
  void accept(uint32_t token) override;
  bool complete() const override;

  // The expansion budget of one operation (Gbnf::kMaxExpansions), shared by the operations inside it.
  class Budget {
   public:
    Budget();
    ~Budget();
    Budget(const Budget&) = delete;
    Budget& operator=(const Budget&) = delete;

   private:
    uint64_t used_ = 0;
    bool owner_;
  };

  // One token from `s` (false: the grammar does not allow it there; s is then unspecified).
  bool feed(GbnfState& s, uint32_t token) const;
  bool feed_bytes(GbnfState& s, std::string_view bytes) const;   // a token's bytes: feed_byte each, then ends
  bool feed_byte(GbnfState& s, uint8_t byte) const;   // false: no text of the grammar continues so
  // A token may end in `s`: outside a character, or inside one that a character allowed next can complete.
  static bool ends(const GbnfState& s);
  // The mask of `s`: the vocabulary walked over interned states (a byte from a state met before is a table
  // lookup), or, past `max_states` of them, over the stacks themselves (the same mask, slower).
  static constexpr size_t kMaxWalkStates = 4096;
  void allowed(const GbnfState& s, std::span<uint32_t> bits, size_t max_states = kMaxWalkStates) const;
  const GbnfState& state() const { return state_; }
  static bool may_end(const GbnfState& s);   // the text so far is a sentence of the grammar
  // The state as bytes, equal for states that allow the same continuations (its stacks as a set).
  static std::string key(const GbnfState& s);

 private:
  std::shared_ptr<const Gbnf> grammar_;
  std::shared_ptr<const VocabBytes> vocab_;
  std::shared_ptr<GbnfMaskCache> masks_;
  GbnfState state_;
};

// llama.cpp's lazy grammar: every token is allowed until the text so far is a sentence of `trigger`; from that
// byte on, `grammar` holds the whole text to its language. Leading whitespace (space, tab, CR, LF) is no part
// of the text for either (a model may start its reply with a space token). Text that leaves the trigger's
// language before matching it, or that the grammar does not accept up to the match, stays unconstrained.
// (Tool calls with tool_choice "auto": apps/server/tool_calls.h.)
class TriggeredGbnfConstraint : public TokenConstraint {
 public:
  TriggeredGbnfConstraint(std::shared_ptr<const Gbnf> trigger, std::shared_ptr<const Gbnf> grammar,
                          std::shared_ptr<const VocabBytes> vocab, std::shared_ptr<GbnfMaskCache> masks = nullptr);
  void allowed(std::span<uint32_t> bits) const override;
  uint32_t draft_masks(std::span<const uint32_t> drafts,
                       const std::function<std::span<uint32_t>(uint32_t row)>& mask) const override;
  void accept(uint32_t token) override;
  bool complete() const override;
  bool active() const { return phase_ == Phase::Active; }

 private:
  enum class Phase { Waiting, Active, Off };
  bool allows(uint32_t token) const;
  GbnfConstraint trigger_, grammar_;   // (their rules; the states are these:)
  GbnfState trigger_state_, grammar_state_;
  Phase phase_ = Phase::Waiting;
  std::string text_;                   // while waiting: the text so far, from its first non-whitespace byte
  std::shared_ptr<const VocabBytes> vocab_;
};

}  // namespace vkspec
