#pragma once
// A JSON Schema `pattern` (an ECMA-262 regular expression, found anywhere in a string unless anchored by ^ and
// $) as a GBNF expression whose sentences are the contents of the JSON strings it matches: the text between
// the quotes, escaped as JSON requires (" \ and control characters). Validators run patterns in two engines,
// ECMA-262 (ajv, JavaScript) and Python's `re` (jsonschema); where they differ (\d \w \s on non-ASCII text,
// `.` on \r), only characters both match are generated, so every sentence matches in both. The string formats
// that structured outputs use (date, time, date-time, uuid, ipv4, email) are patterns here too.
//
// Supported: literals; escapes \d \D \w \W \s \S \t \n \r \f \v \0 \xHH \uHHHH and escaped punctuation;
// classes with ranges, negation and those escapes; `.`; groups ( ) and (?: ); |; * + ? {n} {n,} {n,m}, lazy
// or not (the same language); ^ and $ at the ends of the top-level alternatives. Refused with an Error that
// names the pattern and what: backreferences, lookaround, word boundaries, named groups, \p{...}, anchors
// elsewhere, [] and [^] (Python and ECMA-262 read them differently), and text that is not a regular
// expression.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vkspec {

struct JsonStringPattern {
  std::string gbnf;                   // a GBNF expression; it refers to the rule `char` (one JSON string character)
  uint64_t min_chars = 0;             // the lengths of its matches in characters (as minLength counts them)
  std::optional<uint64_t> max_chars;  // (none: unbounded)
};

JsonStringPattern json_string_pattern(std::string_view pattern);
// A `format` as a pattern: date, time, date-time (RFC 3339, real calendar dates, seconds 00-59), uuid, ipv4
// (no leading zeros), email (a dot-atom address at a domain name). Others are refused with an Error.
JsonStringPattern json_string_format(const std::string& format);

}  // namespace vkspec
