#include "constrain/json_pattern.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "constrain/gbnf.h"
#include "core/core.h"

namespace vkspec {

namespace {

// Sets of code points as sorted, disjoint, non-adjacent inclusive ranges.
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

Ranges normalized(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) out.back().second = std::max(out.back().second, hi);
    else out.push_back({lo, hi});
  }
  return out;
}
Ranges unite(Ranges a, const Ranges& b) {
  a.insert(a.end(), b.begin(), b.end());
  return normalized(std::move(a));
}
Ranges complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}
Ranges intersect(const Ranges& a, const Ranges& b) { return complement(unite(complement(a), complement(b))); }
bool contains(const Ranges& r, uint32_t c) {
  return std::any_of(r.begin(), r.end(), [c](const auto& x) { return x.first <= c && c <= x.second; });
}

// A character class as the two engines read it: `sure` holds the characters both match, `maybe` those either
// may match (sure is a subset of maybe). Negation swaps the roles; only `sure` is ever generated.
struct CharSet {
  Ranges sure, maybe;
};
CharSet single(uint32_t c) { return {{{c, c}}, {{c, c}}}; }
CharSet negated(const CharSet& s) { return {complement(s.maybe), complement(s.sure)}; }
CharSet united(const CharSet& a, const CharSet& b) { return {unite(a.sure, b.sure), unite(a.maybe, b.maybe)}; }

const Ranges kNonAscii = {{0x80, kMaxCodePoint}};
// \d and \w: ASCII in ECMA-262, Unicode in Python's str patterns. \s: the two engines' whitespace differ outside ASCII.
const CharSet kDigit = {{{'0', '9'}}, unite({{'0', '9'}}, kNonAscii)};
const Ranges kWordAscii = normalized({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
const CharSet kWord = {kWordAscii, unite(kWordAscii, kNonAscii)};
const Ranges kSpaceAscii = {{'\t', '\r'}, {' ', ' '}};
const CharSet kSpace = {kSpaceAscii, unite(kSpaceAscii, {{0x1C, 0x1F}, {0x85, 0x85}, {0xA0, 0xA0}, {0x1680, 0x1680},
                                                         {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                                                         {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}})};
// `.`: not a line terminator (ECMA-262: \n \r U+2028 U+2029; Python: \n)
const CharSet kDot = {complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}), complement({{'\n', '\n'}})};

std::string gbnf_class(const Ranges& r, bool negate) {
  std::string out = negate ? "[^" : "[";
  for (const auto& [lo, hi] : r) out += hi == lo ? gbnf_escape(lo) : gbnf_escape(lo) + "-" + gbnf_escape(hi);
  return out + "]";
}

// The characters of a set as JSON string content: raw where JSON allows them raw (not " \ or a control
// character; not DEL, as json.gbnf; never a surrogate), escaped otherwise.
std::string json_chars(const Ranges& set) {
  static const Ranges raw_ok = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7E}, {0x80, 0xD7FF}, {0xE000, kMaxCodePoint}};
  std::vector<std::string> alts;
  const Ranges raw = intersect(set, raw_ok);
  if (raw.size() == 1 && raw[0].first == raw[0].second) {   // one character: a literal
    const uint32_t c = raw[0].first;   // (never " or \: those are escaped below)
    alts.push_back("\"" + (c >= 0x20 && c < 0x7F ? std::string(1, char(c)) : gbnf_escape(c)) + "\"");
  } else if (!raw.empty()) {
    const Ranges rest = complement(raw);   // a negated class when that is the shorter one
    alts.push_back(rest.size() < raw.size() ? gbnf_class(rest, true) : gbnf_class(raw, false));
  }
  if (contains(set, '"')) alts.push_back(R"("\\\"")");
  if (contains(set, '\\')) alts.push_back(R"("\\\\")");
  const auto hex_digit = [](uint32_t d) {   // either case, as JSON allows
    static const char* digits = "0123456789abcdef";
    return d < 10 ? std::string("[") + digits[d] + "]" : std::string("[") + digits[d] + char(digits[d] - 'a' + 'A') + "]";
  };
  if (intersect(set, {{0, 0x1F}}) == Ranges{{0, 0x1F}}) {
    alts.push_back(R"("\\u00" [01] [0-9a-fA-F])");
  } else {
    for (uint32_t c = 0; c < 0x20; ++c) {
      if (!contains(set, c)) continue;
      const char* shorter = c == '\n' ? "n" : c == '\t' ? "t" : c == '\r' ? "r" : c == '\b' ? "b" : c == '\f' ? "f" : nullptr;
      alts.push_back(shorter ? std::string(R"("\\)") + shorter + "\"" : R"("\\u00" )" + hex_digit(c >> 4) + " " + hex_digit(c & 15));
    }
  }
  if (contains(set, 0x7F)) alts.push_back(R"("\\u007" [fF])");
  if (alts.empty()) return "";
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

// A piece of a pattern: its expression and the lengths of what it matches.
struct Piece {
  std::string gbnf;
  uint64_t min = 0;
  std::optional<uint64_t> max = 0;
};
constexpr uint64_t kMaxRepeat = 1024, kMaxDepth = 64, kLongest = uint64_t(1) << 40;

class PatternParser {
 public:
  explicit PatternParser(std::string_view p) : src_(p) {}
  JsonStringPattern run() {
    Piece top = alternatives(0);
    if (!done()) fail("unbalanced ')'");
    return {top.gbnf, top.min, top.max};
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    const std::string shown = src_.size() > 120 ? std::string(src_.substr(0, 120)) + "..." : std::string(src_);
    throw Error("JSON schema: pattern '" + shown + "': " + what);
  }
  bool done() const { return at_ >= src_.size(); }
  char peek(size_t ahead = 0) const { return at_ + ahead < src_.size() ? src_[at_ + ahead] : '\0'; }
  uint32_t code_point() {   // the next character of the pattern, decoded from UTF-8
    const uint8_t c = uint8_t(src_[at_]);
    const size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || at_ + n > src_.size()) fail("malformed UTF-8");
    uint32_t v = n == 1 ? c : c & (0x7F >> n);
    for (size_t i = 1; i < n; ++i) {
      if ((uint8_t(src_[at_ + i]) & 0xC0) != 0x80) fail("malformed UTF-8");
      v = (v << 6) | (uint8_t(src_[at_ + i]) & 0x3F);
    }
    at_ += n;
    return v;
  }
  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail("\\x takes 2 hex digits, \\u 4");
      v = v * 16 + uint32_t(d);
      ++at_;
    }
    return v;
  }
  // After a backslash: one character, or a class (\d \w \s and their negations).
  CharSet escape(bool in_class) {
    if (done()) fail("a trailing backslash");
    const char e = peek();
    if (uint8_t(e) >= 0x80) return single(code_point());
    ++at_;
    switch (e) {
      case 'd': return kDigit;
      case 'D': return negated(kDigit);
      case 'w': return kWord;
      case 'W': return negated(kWord);
      case 's': return kSpace;
      case 'S': return negated(kSpace);
      case 't': return single('\t');
      case 'n': return single('\n');
      case 'r': return single('\r');
      case 'f': return single('\f');
      case 'v': return single('\v');
      case 'x': return single(hex(2));
      case 'u':
        if (peek() == '{') fail("\\u{...} is not supported");
        return single(hex(4));
      case '0':
        if (peek() >= '0' && peek() <= '9') fail("octal escapes are not supported");
        return single(0);
      case 'b':
        if (in_class) return single('\b');
        fail("word boundaries (\\b) are not supported");
      default: break;
    }
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '1' && e <= '9'))
      fail(std::string("the escape \\") + e + " is not supported (backreferences, \\p, \\B, \\c, \\k: none are)");
    return single(uint8_t(e));   // escaped punctuation: itself
  }
  CharSet char_class() {   // after '['
    const bool negate = peek() == '^';
    if (negate) ++at_;
    if (peek() == ']') fail("'[]' and '[^]' are read differently by ECMA-262 and Python");
    CharSet set;
    while (peek() != ']') {
      if (done()) fail("an unterminated character class");
      const auto item = [&](bool* is_class) {
        if (peek() != '\\') return single(code_point());
        ++at_;
        const char e = peek();
        CharSet s = escape(true);
        *is_class = e == 'd' || e == 'D' || e == 'w' || e == 'W' || e == 's' || e == 'S';
        return s;
      };
      bool lo_class = false, hi_class = false;
      CharSet lo = item(&lo_class);
      if (peek() == '-' && peek(1) != ']' && at_ + 1 < src_.size()) {
        ++at_;
        const CharSet hi = item(&hi_class);
        if (lo_class || hi_class) fail("a range with a class escape (\\d, \\w, \\s) at an end");
        const uint32_t a = lo.sure[0].first, b = hi.sure[0].first;
        if (a > b) fail("a character range out of order");
        lo = {{{a, b}}, {{a, b}}};
      }
      set = united(set, lo);
    }
    ++at_;
    return negate ? negated(set) : set;
  }
  // One atom: a character, a class, `.` or a group.
  Piece atom(int depth) {
    const char c = peek();
    if (c == '(') {
      ++at_;
      if (peek() == '?') {
        if (peek(1) != ':') fail("lookaround, named groups and inline flags ((?=, (?!, (?<, (?i) ...) are not supported");
        at_ += 2;
      }
      if (depth + 1 > int(kMaxDepth)) fail("groups nested more than 64 deep");
      Piece inner = alternatives(depth + 1);
      if (peek() != ')') fail("an unterminated group");
      ++at_;
      inner.gbnf = "(" + inner.gbnf + ")";
      return inner;
    }
    CharSet set;
    if (c == '[') {
      ++at_;
      set = char_class();
    } else if (c == '.') {
      ++at_;
      set = kDot;
    } else if (c == '\\') {
      ++at_;
      set = escape(false);
    } else if (c == '*' || c == '+' || c == '?') {
      fail("nothing to repeat");
    } else if (c == '{') {
      fail("a '{' that is no quantifier (write \\{)");
    } else if (c == '^' || c == '$') {
      fail("'^' and '$' are supported only at the ends of the pattern's alternatives");
    } else {
      set = single(code_point());
    }
    std::string chars = json_chars(set.sure);
    if (chars.empty()) fail("a character class that matches no character both ECMA-262 and Python match");
    return {chars, 1, 1};
  }
  uint64_t number() {
    if (!(peek() >= '0' && peek() <= '9')) fail("a quantifier needs a number");
    uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + uint64_t(peek() - '0');
      if (v > kMaxRepeat) fail("a repetition count above 1024");
      ++at_;
    }
    return v;
  }
  // An atom and its quantifier.
  Piece quantified(int depth) {
    Piece p = atom(depth);
    uint64_t lo = 1;
    std::optional<uint64_t> hi = 1;
    const char q = peek();
    if (q == '*' || q == '+' || q == '?') {
      ++at_;
      lo = q == '+' ? 1 : 0;
      hi = q == '?' ? std::optional<uint64_t>(1) : std::nullopt;
    } else if (q == '{') {
      ++at_;
      lo = number();
      hi = lo;
      if (peek() == ',') {
        ++at_;
        hi = peek() == '}' ? std::nullopt : std::optional<uint64_t>(number());
      }
      if (peek() != '}') fail("an unterminated {n,m} quantifier");
      ++at_;
      if (hi && *hi < lo) fail("a {n,m} quantifier with m below n");
    } else {
      return p;
    }
    if (!hi && p.min == 0)   // (its grammar would loop on the empty match)
      fail("an unbounded repetition (*, +, {n,}) of what may match nothing");
    if (peek() == '?') ++at_;   // lazy: the same language
    if (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{') fail("a quantifier after a quantifier");
    const std::string count = q == '{' ? "{" + std::to_string(lo) + "," + (hi ? std::to_string(*hi) : "") + "}" : std::string(1, q);
    p.gbnf = "(" + p.gbnf + ")" + count;
    if (hi == 0) p.max = 0;
    else if (p.max != 0)   // (a length past 2^40 counts as unbounded: it only ever meets maxLength's 1024)
      p.max = hi && p.max && *p.max <= kLongest / *hi ? std::optional<uint64_t>(*p.max * *hi) : std::nullopt;
    if (p.min > kLongest / std::max<uint64_t>(lo, 1)) fail("matches longer than any string");
    p.min *= lo;
    return p;
  }
  // A sequence up to '|' or ')'; at the top level, with its anchors (none: anything may come before or after).
  Piece sequence(int depth) {
    const bool top = depth == 0;
    const bool anchored_start = top && peek() == '^';
    if (anchored_start) ++at_;
    Piece seq{"", 0, 0};
    bool anchored_end = false;
    while (!done() && peek() != '|' && peek() != ')') {
      if (top && peek() == '$' && (at_ + 1 == src_.size() || peek(1) == '|')) {
        ++at_;
        anchored_end = true;
        break;
      }
      const Piece p = quantified(depth);
      seq.gbnf += (seq.gbnf.empty() ? "" : " ") + p.gbnf;
      seq.min += p.min;
      seq.max = seq.max && p.max && *seq.max + *p.max <= kLongest ? std::optional<uint64_t>(*seq.max + *p.max) : std::nullopt;
      if (seq.min > kLongest) fail("matches longer than any string");
    }
    if (top && !anchored_start) seq.gbnf = "char* " + seq.gbnf, seq.max = std::nullopt;
    if (top && !anchored_end) seq.gbnf += " char*", seq.max = std::nullopt;
    if (seq.gbnf.empty()) seq.gbnf = "\"\"";
    return seq;
  }
  Piece alternatives(int depth) {
    Piece all = sequence(depth);
    if (peek() != '|') return all;
    all.gbnf = "(" + all.gbnf;
    while (peek() == '|') {
      ++at_;
      const Piece p = sequence(depth);
      all.gbnf += " | " + p.gbnf;
      all.min = std::min(all.min, p.min);
      all.max = all.max && p.max ? std::optional<uint64_t>(std::max(*all.max, *p.max)) : std::nullopt;
    }
    all.gbnf += ")";
    return all;
  }

  std::string_view src_;
  size_t at_ = 0;
};

// The formats, written once as patterns (so they go through the same converter and its checks).
constexpr const char* kYear = "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)";   // 0001-9999
// Leap years: divisible by 4, centuries only when divisible by 400.
constexpr const char* kLeapYear = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)";
std::string date_pattern() {
  return std::string("(?:") + kYear + "-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)" +
         "|02-(?:0[1-9]|1[0-9]|2[0-8]))|" + kLeapYear + "-02-29)";
}
constexpr const char* kTime = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";

}  // namespace

JsonStringPattern json_string_pattern(std::string_view pattern) { return PatternParser(pattern).run(); }

JsonStringPattern json_string_format(const std::string& format) {
  std::string p;
  if (format == "date") p = date_pattern();
  else if (format == "time") p = kTime;
  else if (format == "date-time") p = date_pattern() + "T" + kTime;
  else if (format == "uuid") p = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  else if (format == "ipv4") p = "(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
  else if (format == "email")
    p = "[A-Za-z0-9_%+-]{1,32}(?:\\.[A-Za-z0-9_%+-]{1,32}){0,3}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,30}[A-Za-z0-9])?\\.){1,3}[A-Za-z]{2,12}";
  else
    throw Error("JSON schema: the format '" + format + "' is not supported (date, time, date-time, uuid, ipv4 and email are)");
  return json_string_pattern("^" + p + "$");
}

}  // namespace vkspec
