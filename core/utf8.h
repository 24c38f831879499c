// UTF-8, defined once for the tokenizers, streamed output (Utf8Stream) and the template interpreter.
// Well formed means Unicode's table 3-7: no overlong forms, no surrogates (U+D800..U+DFFF), nothing past
// U+10FFFF. Ill-formed input is split into "maximal subparts" (Unicode 15, section 3.9, U+FFFD substitution):
// the longest prefix of a well-formed sequence, or one byte — what Python's bytes.decode(errors="replace")
// turns into one U+FFFD each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vkspec::utf8 {

struct Sequence {
  enum Kind { Valid, Invalid, Truncated } kind;
  // Valid: the sequence's bytes (1..4). Invalid: the maximal subpart (1..3 bytes; one U+FFFD).
  // Truncated: the bytes up to the end of the text, a prefix that more bytes could still complete.
  size_t len;
};

// The sequence at s[i]; i < s.size().
inline Sequence scan(std::string_view s, size_t i) {
  const uint8_t c = uint8_t(s[i]);
  if (c < 0x80) return {Sequence::Valid, 1};
  size_t n;
  uint8_t lo = 0x80, hi = 0xBF;   // the second byte's range; the others are always 80..BF
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return {Sequence::Invalid, 1};   // a continuation byte, C0, C1 or F5..FF
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) return {Sequence::Truncated, k};
    const uint8_t b = uint8_t(s[i + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return {Sequence::Invalid, k};
  }
  return {Sequence::Valid, n};
}

// The length of the well-formed sequence at s[i], or 0 (ill formed or cut off by the end of s).
inline size_t valid_len(std::string_view s, size_t i) {
  const Sequence q = scan(s, i);
  return q.kind == Sequence::Valid ? q.len : 0;
}

// The code point of the well-formed sequence of n bytes at s[i].
inline uint32_t decode(std::string_view s, size_t i, size_t n) {
  const uint8_t c = uint8_t(s[i]);
  uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1Fu : n == 3 ? c & 0x0Fu : c & 0x07u;
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3Fu);
  return cp;
}

// Appends code point cp (<= U+10FFFF) as UTF-8.
inline void append(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";   // U+FFFD

}  // namespace vkspec::utf8
