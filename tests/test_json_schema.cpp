// JSON Schema -> GBNF (constrain/json_schema.h, constrain/json_pattern.h): which texts a schema's grammar accepts,
// against independent references: the obvious arithmetic for integer bounds, the C++ calendar for dates,
// and python3-jsonschema (tests/json_schema_reference.py: Python's `re` for patterns, Python's own date, time,
// uuid, ipaddress and email parsers for formats) for random candidate strings and for random sentences the
// grammars generate. No Vulkan involved.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "platform/platform.h"
#include "constrain/json_schema.h"
#include "core/core.h"
#include "tests/run_command.h"
#include "tests/schema_check.h"

using namespace vkspec;
using vkspec::test::schema_accepts;
using vkspec::test::SchemaCheck;
using json = nlohmann::json;

namespace {
// Each schema is refused by the converter with an Error that says it is about the schema.
void expect_refused(std::initializer_list<const char*> schemas) {
  for (const char* bad : schemas) {
    try {
      json_schema_to_gbnf(nlohmann::ordered_json::parse(bad));
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("JSON schema"), std::string::npos) << e.what();
    }
  }
}
}  // namespace

TEST(JsonSchema, GrammarAcceptsWhatTheSchemaDoes) {
  const char* obj = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 3},
      "n": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", 2, null]}, "minItems": 1, "maxItems": 2}},
      "required": ["name"]})";
  EXPECT_EQ(schema_accepts(obj, R"({"name": "bob"})"), 1);
  EXPECT_EQ(schema_accepts(obj, R"({"name": "bob", "n": -12, "tags": ["a", null]})"), 1);
  EXPECT_EQ(schema_accepts(obj, R"({"name": "bob", "tags": [2]})"), 1);        // optional ones in order, any subset
  EXPECT_EQ(schema_accepts(obj, R"({"name": "bobby"})"), -1);                  // maxLength
  EXPECT_EQ(schema_accepts(obj, R"({"n": 1})"), -1);                           // required first
  EXPECT_EQ(schema_accepts(obj, R"({"name": "b", "n": 1.5})"), -1);            // an integer
  EXPECT_EQ(schema_accepts(obj, R"({"name": "b", "tags": []})"), -1);          // minItems
  EXPECT_EQ(schema_accepts(obj, R"({"name": "b", "tags": [2, 2, 2]})"), -1);   // maxItems
  EXPECT_EQ(schema_accepts(obj, R"({"name": "b", "tags": ["b"]})"), -1);       // enum
  EXPECT_EQ(schema_accepts(obj, R"({"name": "b", "other": 1})"), -1);          // no other properties
  EXPECT_EQ(schema_accepts(obj, R"({"name": "b")"), 0);
  const char* opt = R"({"properties": {"a": {"type": "boolean"}, "b": {"type": "null"}}})";   // nothing required
  for (const char* ok : {"{}", R"({"a": true})", R"({"b": null})", R"({"a": false, "b": null})"}) EXPECT_EQ(schema_accepts(opt, ok), 1) << ok;
  EXPECT_EQ(schema_accepts(opt, R"({, "b": null})"), -1);
  const char* tree = R"({"$defs": {"t": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/t"}}}}},
                          "anyOf": [{"$ref": "#/$defs/t"}, {"type": ["string", "null"]}]})";
  for (const char* ok : {R"({"kids": [{}, {"kids": [{"kids": []}]}]})", R"("x")", "null"}) EXPECT_EQ(schema_accepts(tree, ok), 1) << ok;
  EXPECT_EQ(schema_accepts(tree, "3"), -1);
  EXPECT_EQ(schema_accepts(R"({"const": {"k": [1, "\"q\""]}})", R"({"k":[1,"\"q\""]})"), 1);   // const as written by dump()
  EXPECT_EQ(schema_accepts("{}", R"([1, {"a": "b"}, false])"), 1);                          // any value
  expect_refused({R"j({"type": "string", "pattern": "(?=x)"})j", R"({"minimum": 1})", R"({"not": {}})", R"(false)",
                  R"({"$ref": "#/$defs/missing"})", R"({"type": "widget"})", R"({"maxItems": 2000})"});
}


// Integer bounds, digit by digit: against the obvious reference (lo <= v <= hi) for every integer in a window
// around the bounds, and for the largest numbers; no leading zeros, no "-0"; the exclusive forms of both drafts.
TEST(JsonSchema, IntegerBoundsAcceptExactlyTheirRange) {
  using Bound = std::optional<int64_t>;
  const std::pair<const char*, std::pair<Bound, Bound>> cases[] = {
      {R"({"type": "integer", "minimum": 0})", {0, {}}}, {R"({"type": "integer", "minimum": 1})", {1, {}}},
      {R"({"type": "integer", "maximum": 0})", {{}, 0}}, {R"({"type": "integer", "maximum": -1})", {{}, -1}},
      {R"({"type": "integer", "minimum": -5, "maximum": 5})", {-5, 5}},
      {R"({"type": "integer", "minimum": -120, "maximum": 37})", {-120, 37}},
      {R"({"type": "integer", "minimum": 7, "maximum": 7})", {7, 7}}, {R"({"type": "integer", "minimum": 10, "maximum": 99})", {10, 99}},
      {R"({"type": "integer", "minimum": 95, "maximum": 1005})", {95, 1005}},
      {R"({"type": "integer", "minimum": -1005, "maximum": -95})", {-1005, -95}},
      {R"({"type": "integer", "minimum": 13, "maximum": 4000})", {13, 4000}}, {R"({"type": "integer", "minimum": -7})", {-7, {}}},
      {R"({"type": "integer", "maximum": 250})", {{}, 250}}, {R"({"type": "integer", "minimum": 109})", {109, {}}},
      {R"({"type": "integer", "maximum": -109})", {{}, -109}}, {R"({"type": "integer", "minimum": 1.5, "maximum": 9.5})", {2, 9}},
      {R"({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10})", {1, 9}},
      {R"({"type": "integer", "minimum": 0, "exclusiveMinimum": true, "maximum": 10, "exclusiveMaximum": true})", {1, 9}},
      {R"({"type": ["integer", "null"], "minimum": 3, "maximum": 30})", {3, 30}},
  };
  for (const auto& [schema, range] : cases) {
    SCOPED_TRACE(schema);
    const auto [lo, hi] = range;
    const vkspec::test::SchemaCheck check(schema);
    for (int64_t v = -1300; v <= 4100; ++v) {
      const bool in = (!lo || v >= *lo) && (!hi || v <= *hi);
      ASSERT_EQ(check.accepts(std::to_string(v)) == 1, in) << v;   // (outside, it may be a prefix: 10 of 100)
    }
    for (const int64_t v : {int64_t(9999999999999999), int64_t(1000000000000000), int64_t(-9999999999999999), int64_t(123456789)}) {
      const bool in = (!lo || v >= *lo) && (!hi || v <= *hi);
      EXPECT_EQ(check.accepts(std::to_string(v)) == 1, in) << v;
    }
    for (const char* bad : {"007", "-0", "00", "1.0", "+5", "--3"}) EXPECT_NE(check.accepts(bad), 1) << bad;
  }
  EXPECT_EQ(schema_accepts(R"({"type": ["integer", "null"], "minimum": 3})", "null"), 1);
  expect_refused({R"({"type": "number", "minimum": 1})", R"({"minimum": 1})", R"({"type": "integer", "minimum": 5, "maximum": 4})",
                  R"({"type": "integer", "minimum": "1"})", R"({"type": "integer", "minimum": 1e20})",
                  R"({"type": "integer", "exclusiveMinimum": true})"});
}


// ---- patterns and formats against Python ----

namespace {
// tests/json_schema_reference.py's verdicts on [{"schema", "text"}]; none when python3-jsonschema is missing.
std::optional<std::vector<bool>> python_valid(const json& cases) {
  const std::string path = ::testing::TempDir() + "/schema-cases-" + std::to_string(platform::process_id()) + ".json";
  std::ofstream(path) << cases.dump();
  vkspec::test::Result r;
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    r = vkspec::test::run_command(std::string(py) + " " + VKSPEC_SOURCE_DIR + "/tests/json_schema_reference.py < " + path);
    if (r.code == 0) break;
  }
  if (r.code != 0) return std::nullopt;
  std::vector<bool> out;
  for (const json& v : json::parse(r.out)) out.push_back(v["valid"].get<bool>());
  EXPECT_EQ(out.size(), cases.size());
  return out;
}
std::string random_text(std::mt19937& rng, const std::vector<std::string>& alphabet, size_t max_chars) {
  std::string s;
  for (size_t n = rng() % (max_chars + 1); n > 0; --n) s += alphabet[rng() % alphabet.size()];
  return s;
}
}  // namespace

// Each pattern against Python's re.search (through python3-jsonschema): on random ASCII strings over the
// pattern's own characters the grammar accepts exactly what Python matches; on strings with characters the
// engines read differently (non-ASCII digits, letters and spaces, line terminators) nothing it accepts is
// refused by Python; and every random sentence the grammar generates is valid for Python.
TEST(JsonSchema, PatternsAcceptWhatPythonsReMatches) {
  const char* patterns[] = {
      "^[a-c]+$", "^a(b|cd)*e?$", "ab", "^x{2,3}y??$", R"(^\d{3}-\d{2}$)", "^[^abc]{1,3}$",
      R"(^(?:[A-Z][a-z]*\s?)+$)", R"(^\w+@\w+\.(com|org)$)", "a|^b", "c$|^d", R"(^[-.a]\.+$)",
      R"(^[\x41-\x43\u0078]*$)", R"(^\S\s\W\D$)", "^.{2}$", R"(^"q\\"$)", R"(^[\]\[]{2}[}]$)", "^$", "",
      R"(^(a|b?c)+d{0}e{1,}$)", R"(^[\t ]a\n?$)", R"(^[^\d\s]\w*$)", "^(ab|a)(bc|c)?$",
  };
  std::mt19937 rng(7);
  json cases = json::array();
  struct Verdict { size_t pattern; std::string text; int ours; bool exact; };
  std::vector<Verdict> verdicts;
  for (size_t i = 0; i < std::size(patterns); ++i) {
    const json schema = {{"type", "string"}, {"pattern", patterns[i]}};
    const SchemaCheck check(schema.dump());
    std::set<std::string> chars = {"a", "b", "1", "-", " ", "\"", "\\", "Z", "x", "."};
    for (const char c : std::string(patterns[i]))
      if (c >= 0x20 && c < 0x7F) chars.insert(std::string(1, c));
    std::vector<std::string> ascii(chars.begin(), chars.end()), wide = ascii;
    for (const char* c : {"\xC3\xA9", "\xD9\xA3", "\xC2\xA0", "\n", "\r", "\t", "\xE2\x80\xA8", "\x0B", "\xC3\x97"}) wide.push_back(c);
    const auto add = [&](const std::string& text, bool exact) {   // text: the JSON document
      cases.push_back({{"schema", schema}, {"text", text}});
      verdicts.push_back({i, text, check.accepts(text), exact});
    };
    for (int k = 0; k < 400; ++k) add(json(random_text(rng, ascii, 7)).dump(), true);
    for (int k = 0; k < 100; ++k) add(json(random_text(rng, wide, 7)).dump(), false);
    int sampled = 0;
    for (int k = 0; k < 200 && sampled < 40; ++k)
      if (const auto s = check.sample(rng, patterns[i])) add(*s, false), ++sampled;
    EXPECT_EQ(sampled, 40) << patterns[i];
  }
  const auto python = python_valid(cases);
  if (!python) GTEST_SKIP() << "python3-jsonschema is not installed";
  size_t accepted = 0;
  for (size_t k = 0; k < verdicts.size(); ++k) {
    const Verdict& v = verdicts[k];
    SCOPED_TRACE(std::string("pattern ") + patterns[v.pattern] + " on " + v.text);
    if (v.ours == 1) {
      ASSERT_TRUE((*python)[k]) << "accepted what Python does not match";
    }
    if (v.exact) {
      ASSERT_EQ(v.ours == 1, (*python)[k]);
    }
    accepted += v.ours == 1;
  }
  EXPECT_GT(accepted, verdicts.size() / 8) << "the candidates should not be almost all refused";
}

// Dates: exactly the calendar's (std::chrono), years 0001 to 9999, leap days by the Gregorian rule.
TEST(JsonSchema, DatesAreTheCalendarsDates) {
  const SchemaCheck check(R"({"type": "string", "format": "date"})");
  std::vector<int> years = {0, 1, 4, 99, 100, 104, 200, 400, 1600, 1700, 1800, 1999, 2000, 2023, 2024, 2100, 2400, 9996, 9999};
  for (int y = 1896; y <= 1905; ++y) years.push_back(y);
  for (const int y : years)
    for (unsigned m = 0; m <= 13; ++m)
      for (unsigned d = 0; d <= 32; ++d) {
        char text[32];
        snprintf(text, sizeof text, "\"%04d-%02u-%02u\"", y, m, d);
        const bool real = y >= 1 && std::chrono::year_month_day(std::chrono::year(y), std::chrono::month(m), std::chrono::day(d)).ok();
        ASSERT_EQ(check.accepts(text) == 1, real) << text;
      }
  for (const char* bad : {R"("12024-01-01")", R"("2024-1-01")", R"("2024-01-1")", R"("2024/01/01")"}) EXPECT_NE(check.accepts(bad), 1) << bad;
}

// Every format: random sentences of its grammar are valid for Python's parsers, and hand-written texts on both
// sides of each format's edges get the same verdict from the grammar and from Python.
TEST(JsonSchema, FormatsGenerateWhatPythonsParsersAccept) {
  const std::pair<const char*, std::vector<const char*>> formats[] = {
      {"date", {"2024-02-29", "2023-02-29", "2000-02-29", "1900-02-29", "2024-04-31", "2024-12-31", "0000-01-01"}},
      {"time", {"00:00:00Z", "23:59:59.123456+05:30", "12:30:00-08:00", "24:00:00Z", "12:00:60Z", "12:00:00", "1:00:00Z", "12:00:00+24:00"}},
      {"date-time", {"2024-02-29T23:59:59Z", "1999-12-31T00:00:00.5+01:00", "2023-02-29T00:00:00Z", "2024-02-29 00:00:00Z"}},
      {"uuid", {"123e4567-e89b-12d3-a456-426614174000", "ABCDEF01-2345-6789-ABCD-EF0123456789", "123e4567e89b12d3a456426614174000",
                "123e4567-e89b-12d3-a456-42661417400g"}},
      {"ipv4", {"0.0.0.0", "255.255.255.255", "192.168.1.10", "256.0.0.1", "01.2.3.4", "1.2.3"}},
      {"email", {"first.last@mail.example.org", "a+b@x.io", "a_1@b-c.co.uk", "a@b", "a..b@x.com", "@x.com", "a b@x.com"}},
  };
  std::mt19937 rng(11);
  json cases = json::array();
  std::vector<std::pair<int, bool>> ours;   // (accepts, hand-written)
  for (const auto& [format, hand] : formats) {
    const json schema = {{"type", "string"}, {"format", format}};
    const SchemaCheck check(schema.dump());
    for (const char* text : hand) {
      cases.push_back({{"schema", schema}, {"text", json(text).dump()}});
      ours.push_back({check.accepts(json(text).dump()), true});
    }
    int sampled = 0;
    for (int k = 0; k < 200 && sampled < 60; ++k)
      if (const auto s = check.sample(rng)) {
        cases.push_back({{"schema", schema}, {"text", *s}});
        ours.push_back({check.accepts(*s), false});
        ++sampled;
      }
    EXPECT_EQ(sampled, 60) << format;
  }
  const auto python = python_valid(cases);
  if (!python) GTEST_SKIP() << "python3-jsonschema is not installed";
  size_t valid_hand = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(cases[k].dump());
    if (ours[k].second) {
      EXPECT_EQ(ours[k].first == 1, (*python)[k]);
      valid_hand += (*python)[k];
    } else {
      EXPECT_EQ(ours[k].first, 1);
      EXPECT_TRUE((*python)[k]) << "generated what Python's parser refuses";
    }
  }
  EXPECT_GE(valid_hand, 14u);
}

// A pattern or format with length bounds is accepted where the bounds do not cut into its own lengths; what
// the grammar cannot generate exactly is refused with an Error about the schema.
TEST(JsonSchema, RefusesPatternsItCannotGenerateExactly) {
  EXPECT_EQ(schema_accepts(R"({"type": "string", "pattern": "^a{2,4}$", "minLength": 2, "maxLength": 4})", R"("aaaa")"), 1);
  EXPECT_EQ(schema_accepts(R"({"format": "date", "minLength": 10, "maxLength": 10})", R"("2024-01-31")"), 1);   // typeless: a string
  EXPECT_EQ(schema_accepts(R"({"type": "integer", "format": "int64"})", "12"), 1);   // formats constrain strings only
  EXPECT_EQ(schema_accepts(R"({"type": ["string", "null"], "pattern": "^[0-9]+$"})", "null"), 1);
  expect_refused({R"({"type": "string", "pattern": "^a{2,4}$", "maxLength": 3})", R"({"type": "string", "pattern": "a", "maxLength": 30})",
                  R"({"type": "string", "pattern": "^a{2,4}$", "minLength": 3})", R"({"type": "string", "format": "date", "maxLength": 5})",
                  R"({"type": "string", "format": "ipv6"})", R"({"type": "string", "format": 3})",
                  R"({"type": "string", "pattern": "a", "format": "date"})"});
  const std::string deep(70, '(');
  for (const char* bad : {"(?=a)b", "(?<n>a)", "(a)\\1", "\\bfoo", "[]a]", "[^]", "a{,3}", "a**", "(a", "a)", "[z-a]", "\\p{L}", "a^b",
                          "(a*)*", "a{2000}", "[\\d-z]", "\\", "*a", "\\u{41}", deep.c_str()})
    expect_refused({json({{"type", "string"}, {"pattern", bad}}).dump().c_str()});
}

// oneOf where no value can match two branches (types, consts, a discriminating property: Pydantic's unions),
// allOf over object schemas, prefixItems (tuples).
TEST(JsonSchema, OneOfAllOfAndTuples) {
  const char* pets = R"({"$defs": {"Cat": {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}}, "required": ["kind", "lives"]},
                                   "Dog": {"type": "object", "properties": {"kind": {"enum": ["dog"]}, "name": {"type": "string"}}, "required": ["kind"]}},
                         "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}], "discriminator": {"propertyName": "kind"}})";
  EXPECT_EQ(schema_accepts(pets, R"({"kind": "cat", "lives": 9})"), 1);
  EXPECT_EQ(schema_accepts(pets, R"({"kind": "dog", "name": "Rex"})"), 1);
  EXPECT_EQ(schema_accepts(pets, R"({"kind": "cat", "name": "Rex"})"), -1);
  EXPECT_EQ(schema_accepts(R"({"oneOf": [{"type": "string"}, {"type": "integer"}, {"const": true}]})", "true"), 1);
  const char* merged = R"({"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]}, {"$ref": "#/$defs/B"}],
                           "$defs": {"B": {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}}})";
  EXPECT_EQ(schema_accepts(merged, R"({"a": 1, "b": "x"})"), 1);
  EXPECT_EQ(schema_accepts(merged, R"({"a": 1})"), -1);
  EXPECT_EQ(schema_accepts(R"({"allOf": [{"type": "string", "maxLength": 2}], "title": "t"})", R"("ab")"), 1);   // one member: itself
  const char* pair = R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "minItems": 1})";
  for (const char* ok : {"[1]", R"([1, "a"])", R"([1, "a", true, null])"}) EXPECT_EQ(schema_accepts(pair, ok), 1) << ok;
  for (const char* bad : {"[]", R"(["a"])", R"([1, 2])"}) EXPECT_EQ(schema_accepts(pair, bad), -1) << bad;
  const char* closed = R"({"prefixItems": [{"type": "integer"}, {"type": "string"}], "items": false})";
  for (const char* ok : {"[]", "[1]", R"([1, "a"])"}) EXPECT_EQ(schema_accepts(closed, ok), 1) << ok;
  EXPECT_EQ(schema_accepts(closed, R"([1, "a", 2])"), -1);
  const char* tail = R"({"prefixItems": [{"type": "integer"}], "items": {"type": "null"}, "minItems": 3, "maxItems": 3})";
  EXPECT_EQ(schema_accepts(tail, "[1, null, null]"), 1);
  for (const char* bad : {"[1, null]", "[1, null, null, null]", "[1, 2, null]"}) EXPECT_EQ(schema_accepts(tail, bad), -1) << bad;
  expect_refused({R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})", R"({"oneOf": [{"type": "object"}, {"type": "object"}]})",
                  R"({"oneOf": [{"enum": [1, 2]}, {"enum": [2, 3]}]})", R"({"oneOf": [{"const": 1}, {"const": 1.0}]})",
                  R"({"oneOf": [{"const": {"a": 1, "b": 2}}, {"const": {"b": 2, "a": 1}}]})", R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})",
                  R"({"allOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"a": {"type": "string"}}}]})",
                  R"({"prefixItems": [{}], "items": false, "minItems": 2})", R"({"oneOf": []})", R"({"allOf": {}})"});
}

// `const` and `enum` beside `type` (as Pydantic writes Literal fields and discriminators) or each other: the
// grammar takes exactly the listed values python3-jsonschema finds valid under the whole schema; any other
// keyword beside them is refused, as is a schema that leaves no listed value.
TEST(JsonSchema, ConstAndEnumAreHeldToTheTypeBesideThem) {
  const char* schemas[] = {R"({"type": "string", "enum": ["a", 1, null, "b c"]})",
                           R"({"type": ["integer", "null"], "enum": [1, 1.5, "x", null, 2.0, true]})",
                           R"({"type": "number", "enum": [1, 2.5, "2.5"]})",
                           R"({"const": "a", "enum": ["a", "b"]})",
                           R"({"const": 1, "enum": [1.0, 2, "1"]})",
                           R"({"const": "cat", "type": "string", "title": "Pet Type"})",
                           R"({"type": "boolean", "enum": [true, 0, false]})"};
  const char* values[] = {"\"a\"", "\"b\"", "\"b c\"", "1", "1.0", "1.5", "2.0", "2", "2.5", "\"2.5\"", "\"x\"",
                          "null", "true", "false", "0", "\"1\"", "\"cat\""};
  json cases = json::array();
  for (const char* schema : schemas)
    for (const char* v : values) cases.push_back({{"schema", json::parse(schema)}, {"text", v}});
  const auto valid = python_valid(cases);
  if (!valid) GTEST_SKIP() << "python3-jsonschema is not installed";
  size_t i = 0, taken = 0;
  for (const char* schema : schemas) {
    const SchemaCheck check(schema);
    for (const char* v : values) {
      const json sj = json::parse(schema);
      const json list = sj.contains("const") ? json::array({sj["const"]}) : sj["enum"];
      const bool listed_as_written =
          std::any_of(list.begin(), list.end(), [&](const json& e) { return e.dump() == json::parse(v).dump(); });
      const bool accepted = check.accepts(v) == 1;
      if (accepted) ++taken;
      // valid for Python and written as the const (or else in the enum): generated; anything else: not
      EXPECT_EQ(accepted, (*valid)[i] && listed_as_written) << schema << " " << v;
      ++i;
    }
  }
  EXPECT_GE(taken, 12u);
  expect_refused({R"({"type": "string", "enum": [1, null]})", R"({"enum": ["a"], "minLength": 3})",
                  R"({"const": "a", "pattern": "b"})", R"({"const": "x", "enum": ["y"]})",
                  R"({"type": "integer", "enum": [1.5]})", R"({"enum": ["a"], "properties": {}})"});
}

// The grammars take well-formed UTF-8 only (Unicode's table 3-7), where llama.cpp's engine also takes
// overlong forms, surrogates and code points past U+10FFFF inside a string: a JSON value's text stays valid
// UTF-8. The edges of every range on both sides.
TEST(JsonSchema, StringsAreWellFormedUtf8) {
  const SchemaCheck check(R"({"type": "string"})");
  const auto quoted = [](const std::string& s) { return "\"" + s + "\""; };
  for (const std::string ok : {"\xC2\x80", "\xDF\xBF", "\xE0\xA0\x80", "\xED\x9F\xBF", "\xEE\x80\x80", "\xEF\xBF\xBF",
                               "\xF0\x90\x80\x80", "\xF0\x9F\x98\x80", "\xF4\x8F\xBF\xBF", "caf\xC3\xA9"})
    EXPECT_EQ(check.accepts(quoted(ok)), 1) << testing::PrintToString(ok);
  for (const std::string bad : {"\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xE0\x9F\xBF", "\xED\xA0\x80", "\xED\xBF\xBF",
                                "\xF0\x80\x80\x80", "\xF0\x8F\xBF\xBF", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF",
                                "\x80", "\xE2\x82"})
    EXPECT_EQ(check.accepts(quoted(bad)), -1) << testing::PrintToString(bad);
}
