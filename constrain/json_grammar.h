#pragma once
// JSON mode (OpenAI's response_format {"type": "json_object"}, llama.cpp's grammars/json.gbnf): the
// generated text is always a prefix of one JSON object, and generation may end only once it is complete.
// The language is exactly json.gbnf's, so that llama.cpp's JSON grammar and vkspec choose the same tokens
// (tests/test_presets.cpp compares the greedy ids):
//   root   ::= object
//   value  ::= object | array | string | number | ("true" | "false" | "null") ws
//   object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
//   array  ::= "[" ws ( value ("," ws value)* )? "]" ws
//   string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
//   number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
//   ws     ::= | " " | "\n" [ \t]{0,20}
// So whitespace is bounded (one such run between two tokens of JSON, none before the root): a model that
// would pad forever cannot. Two deliberate differences: characters above U+007F must be well-formed UTF-8
// (llama.cpp's decoder accepts overlong forms and does not check continuation bytes inside one token), and
// containers nest at most kMaxDepth deep. Control tokens (empty pieces) are never allowed; end-of-generation
// tokens only when the object is complete.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "constrain/token_constraint.h"

namespace vkspec {

// The recognizer's state after some bytes: 16 bytes, copied freely (JsonGrammar::allowed keeps one per
// byte of the token it is checking).
class JsonState {
 public:
  static constexpr uint32_t kMaxDepth = 64;   // open containers (one bit each in `stack_`)
  static constexpr uint32_t kMaxIndent = 20;  // [ \t] after a "\n" of whitespace

  // Consumes one byte; false (and the state is then unspecified) when no text of the language continues
  // with it.
  bool feed(uint8_t byte);
  bool feed(std::string_view bytes);   // every byte; false at the first that fails
  // The root object is closed: the text is a complete document (only whitespace may follow).
  bool complete() const { return mode_ == Mode::Done; }
  // Inside a string, between characters (not in an escape or a UTF-8 sequence).
  bool in_string() const { return mode_ == Mode::String; }

 private:
  enum class Mode : uint8_t {
    Start,         // nothing yet: "{" only
    ObjectOpen,    // after "{": a key or "}"
    Key,           // after "," in an object: a key
    Colon,         // after a key
    Value,         // after ":" or "," in an array
    ArrayOpen,     // after "[": a value or "]"
    AfterValue,    // after a value in a container: "," or its closer
    Done,          // the root is closed
    String, Escape, Hex, Utf8,
    Minus,         // after "-": a digit
    Zero,          // an integer part "0": ".", an exponent or the end
    Int,           // an integer part [1-9][0-9]{count}
    Dot, Frac,     // after ".": a digit; fraction digits
    E, ESign, Exp, // after [eE]: a sign or digit; after the sign: a digit; exponent digits
    Literal,       // inside true / false / null
  };
  // Whitespace between two tokens: one run of json.gbnf's ws, then none until the next token.
  enum class Ws : uint8_t { Open, Indent, Closed };

  bool gap(uint8_t byte);          // a byte where whitespace may come before the next token
  bool token(uint8_t byte);        // the first byte of the next token in the current gap mode
  bool value_start(uint8_t byte);
  bool close_value();              // a value ended: the container's gap, or Done at the root
  bool push(bool object);
  void enter(Mode m) { mode_ = m; ws_ = Ws::Open; count_ = 0; }

  uint64_t stack_ = 0;    // bit d: the container at depth d + 1 is an object (1) or an array (0)
  uint8_t depth_ = 0;     // open containers
  Mode mode_ = Mode::Start;
  Ws ws_ = Ws::Closed;    // no whitespace before the root
  uint8_t count_ = 0;     // indent run, digits, hex digits left, UTF-8 bytes left, literal position
  uint8_t sub_ = 0;       // the literal (0 true, 1 false, 2 null), or the next UTF-8 byte's range
  bool key_ = false;      // the string being read is a key
};

// A vocabulary prepared for JSON mode once per model: its masks walk the tokens in byte order (walk_sorted).
class JsonGrammar {
 public:
  explicit JsonGrammar(std::shared_ptr<const VocabBytes> vocab);
  explicit JsonGrammar(const Tokenizer& tok) : JsonGrammar(std::make_shared<const VocabBytes>(tok)) {}
  // Bit t of `bits` ([ceil(n_vocab / 32)] words, all written): token t may follow `state`. An
  // end-of-generation token may when the state is complete; some token always may.
  void allowed(const JsonState& state, std::span<uint32_t> bits) const;
  bool is_eog(uint32_t token) const { return vocab_->is_eog(token); }
  // Advances `state` past one token; false when the token may not follow it (the state is then unspecified).
  bool feed(JsonState& state, uint32_t token) const;

 private:
  std::shared_ptr<const VocabBytes> vocab_;
  uint32_t n_vocab_;
  // Inside a string most tokens are plain text (printable ASCII but '"' and '\\', whole UTF-8 characters):
  // their bits (text_words_) are allowed at once there, and only the rest are walked.
  std::vector<uint32_t> text_words_;
  SortedTokens not_text_;
};

// One generation's constraint: the state after the tokens accepted so far.
class JsonConstraint : public TokenConstraint {
 public:
  explicit JsonConstraint(std::shared_ptr<const JsonGrammar> grammar) : grammar_(std::move(grammar)) {}
  void allowed(std::span<uint32_t> bits) const override { grammar_->allowed(state_, bits); }
  uint32_t draft_masks(std::span<const uint32_t> drafts,
                       const std::function<std::span<uint32_t>(uint32_t row)>& mask) const override;
  void accept(uint32_t token) override;
  bool complete() const override { return state_.complete(); }

 private:
  std::shared_ptr<const JsonGrammar> grammar_;
  JsonState state_;
};

}  // namespace vkspec
