#include "constrain/json_grammar.h"

#include <algorithm>

#include "text/tokenizer.h"
#include "core/core.h"

namespace vkspec {

namespace {
constexpr std::string_view kLiterals[3] = {"true", "false", "null"};
bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
bool is_hex(uint8_t b) { return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }
// The range of the byte after a UTF-8 lead byte (Unicode's table 3-7): 0 any continuation byte, then the
// narrower second bytes of E0, ED, F0 and F4 that exclude overlong forms, surrogates and values past U+10FFFF.
constexpr uint8_t kUtf8Lo[5] = {0x80, 0xA0, 0x80, 0x90, 0x80}, kUtf8Hi[5] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};
}  // namespace

bool JsonState::push(bool object) {
  if (depth_ == kMaxDepth) return false;
  stack_ = (stack_ & ~(uint64_t(1) << depth_)) | (uint64_t(object) << depth_);
  ++depth_;
  enter(object ? Mode::ObjectOpen : Mode::ArrayOpen);
  return true;
}

bool JsonState::close_value() {
  enter(depth_ == 0 ? Mode::Done : Mode::AfterValue);
  return true;
}

bool JsonState::value_start(uint8_t b) {
  switch (b) {
    case '{': return push(true);
    case '[': return push(false);
    case '"': mode_ = Mode::String; key_ = false; return true;
    case '-': mode_ = Mode::Minus; return true;
    case '0': mode_ = Mode::Zero; return true;
    case 't': case 'f': case 'n':
      mode_ = Mode::Literal;
      sub_ = b == 't' ? 0 : b == 'f' ? 1 : 2;
      count_ = 1;
      return true;
    default:
      if (b < '1' || b > '9') return false;
      mode_ = Mode::Int;
      count_ = 0;
      return true;
  }
}

bool JsonState::token(uint8_t b) {
  const bool in_object = depth_ > 0 && ((stack_ >> (depth_ - 1)) & 1);
  switch (mode_) {
    case Mode::Start: return b == '{' && push(true);
    case Mode::ObjectOpen:
      if (b == '}') { --depth_; return close_value(); }
      [[fallthrough]];
    case Mode::Key:
      if (b != '"') return false;
      mode_ = Mode::String;
      key_ = true;
      return true;
    case Mode::Colon:
      if (b != ':') return false;
      enter(Mode::Value);
      return true;
    case Mode::ArrayOpen:
      if (b == ']') { --depth_; return close_value(); }
      [[fallthrough]];
    case Mode::Value: return value_start(b);
    case Mode::AfterValue:
      if (b == ',') { enter(in_object ? Mode::Key : Mode::Value); return true; }
      if (b != (in_object ? '}' : ']')) return false;
      --depth_;
      return close_value();
    default: return false;   // Done
  }
}

bool JsonState::gap(uint8_t b) {
  if (ws_ == Ws::Open && (b == ' ' || b == '\n')) {
    ws_ = b == ' ' ? Ws::Closed : Ws::Indent;
    count_ = 0;
    return true;
  }
  if (ws_ == Ws::Indent && (b == ' ' || b == '\t')) return count_ < kMaxIndent && ++count_;
  if (b == ' ' || b == '\n' || b == '\t' || b == '\r') return false;
  return token(b);
}

bool JsonState::feed(uint8_t b) {
  switch (mode_) {
    case Mode::String:
      if (b == '"') {
        if (!key_) return close_value();
        enter(Mode::Colon);
        return true;
      }
      if (b == '\\') { mode_ = Mode::Escape; return true; }
      if (b < 0x20 || b == 0x7F) return false;
      if (b < 0x80) return true;
      if (b >= 0xC2 && b <= 0xDF) { count_ = 1; sub_ = 0; }
      else if (b >= 0xE0 && b <= 0xEF) { count_ = 2; sub_ = b == 0xE0 ? 1 : b == 0xED ? 2 : 0; }
      else if (b >= 0xF0 && b <= 0xF4) { count_ = 3; sub_ = b == 0xF0 ? 3 : b == 0xF4 ? 4 : 0; }
      else return false;
      mode_ = Mode::Utf8;
      return true;
    case Mode::Utf8:
      if (b < kUtf8Lo[sub_] || b > kUtf8Hi[sub_]) return false;
      sub_ = 0;
      if (--count_ == 0) mode_ = Mode::String;
      return true;
    case Mode::Escape:
      if (b == 'u') { mode_ = Mode::Hex; count_ = 4; return true; }
      if (b != '"' && b != '\\' && b != 'b' && b != 'f' && b != 'n' && b != 'r' && b != 't') return false;
      mode_ = Mode::String;
      return true;
    case Mode::Hex:
      if (!is_hex(b)) return false;
      if (--count_ == 0) mode_ = Mode::String;
      return true;
    case Mode::Literal: {
      const std::string_view lit = kLiterals[sub_];
      if (b != uint8_t(lit[count_])) return false;
      return ++count_ < lit.size() || close_value();
    }
    case Mode::Minus:
      if (!is_digit(b)) return false;
      mode_ = b == '0' ? Mode::Zero : Mode::Int;
      count_ = 0;
      return true;
    case Mode::Dot:
      if (!is_digit(b)) return false;
      mode_ = Mode::Frac;
      return true;
    case Mode::E:
      if (b == '+' || b == '-') { mode_ = Mode::ESign; return true; }
      [[fallthrough]];
    case Mode::ESign:
      if (!is_digit(b)) return false;
      mode_ = Mode::Exp;
      count_ = 0;
      return true;
    // A number may end in these modes: a byte that does not continue it starts the container's gap.
    case Mode::Int:
      if (is_digit(b) && count_ < 15) { ++count_; return true; }
      [[fallthrough]];
    case Mode::Zero:
    case Mode::Frac:
      if (mode_ == Mode::Frac && is_digit(b)) return true;
      if (b == '.' && mode_ != Mode::Frac) { mode_ = Mode::Dot; return true; }
      if (b == 'e' || b == 'E') { mode_ = Mode::E; return true; }
      close_value();
      return gap(b);
    case Mode::Exp:
      if (b >= '1' && b <= '9' && count_ < 15) { ++count_; return true; }
      close_value();
      return gap(b);
    default:   // the gap modes
      return gap(b);
  }
}

bool JsonState::feed(std::string_view bytes) {
  for (char c : bytes)
    if (!feed(uint8_t(c))) return false;
  return true;
}

JsonGrammar::JsonGrammar(std::shared_ptr<const VocabBytes> vocab)
    : vocab_(std::move(vocab)), n_vocab_(vocab_->n_vocab()), text_words_(TOKEN_MASK_WORDS(n_vocab_), 0u) {
  if (vocab_->eog.empty()) throw Error("constrained generation needs an end-of-generation token, and this vocabulary has none");
  JsonState in_string;
  in_string.feed("{\"");
  std::vector<uint32_t> not_text;
  for (uint32_t t : vocab_->with_piece.tokens) {
    const std::string& p = vocab_->pieces[t];
    JsonState s = in_string;   // plain text: still inside the string after it, having neither ended nor escaped
    if (p.find_first_of("\"\\") == std::string::npos && s.feed(p) && s.in_string())
      text_words_[TOKEN_MASK_WORD(t)] |= TOKEN_MASK_BIT(t);
    else
      not_text.push_back(t);
  }
  not_text_ = vocab_->sorted(std::move(not_text));
}

void JsonGrammar::allowed(const JsonState& state, std::span<uint32_t> bits) const {
  if (bits.size() != TOKEN_MASK_WORDS(n_vocab_)) throw Error("internal: a JSON mask of the wrong size");
  std::fill(bits.begin(), bits.end(), 0u);
  if (state.complete())
    for (uint32_t t : vocab_->eog) bits[TOKEN_MASK_WORD(t)] |= TOKEN_MASK_BIT(t);
  const auto feed = [](JsonState& s, uint8_t b) { return s.feed(b); };
  const auto ends = [](const JsonState&) { return true; };
  if (state.in_string()) {
    for (size_t w = 0; w < bits.size(); ++w) bits[w] |= text_words_[w];
    walk_sorted(*vocab_, not_text_, state, feed, ends, bits);
  } else {
    walk_sorted(*vocab_, vocab_->with_piece, state, feed, ends, bits);
  }
}

bool JsonGrammar::feed(JsonState& state, uint32_t token) const {
  if (is_eog(token)) return state.complete();
  const std::string& p = vocab_->pieces.at(token);
  return !p.empty() && state.feed(p);
}

void JsonConstraint::accept(uint32_t token) {
  if (!grammar_->feed(state_, token)) throw Error("internal: a token outside the JSON mask was chosen");
}

uint32_t JsonConstraint::draft_masks(std::span<const uint32_t> drafts,
                                     const std::function<std::span<uint32_t>(uint32_t row)>& mask) const {
  JsonState s = state_;
  for (uint32_t i = 0; i < drafts.size(); ++i) {
    if (!grammar_->feed(s, drafts[i])) return i;
    grammar_->allowed(s, mask(i + 1));
  }
  return uint32_t(drafts.size());
}

}  // namespace vkspec
