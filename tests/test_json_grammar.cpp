// JSON mode's recognizer (loader/json_grammar.h): the language of llama.cpp's grammars/json.gbnf, checked
// on hand-written cases, on random documents written by nlohmann::json (an independent writer), against
// nlohmann's parser for mutated documents (everything the recognizer accepts is a JSON object), and the
// vocabulary mask against feeding every token's piece on its own.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "loader/gguf.h"
#include "loader/json_grammar.h"
#include "loader/tokenizer.h"
#include "tests/vk_test_env.h"

using namespace vkspec;
using vkspec::test::shared_path;

namespace {
// -1: the whole text is accepted and complete; -2: accepted, incomplete; else the index of the failing byte.
int run(std::string_view text) {
  JsonState s;
  for (size_t i = 0; i < text.size(); ++i)
    if (!s.feed(uint8_t(text[i]))) return int(i);
  return s.complete() ? -1 : -2;
}
}  // namespace

TEST(JsonGrammar, AcceptsJsonGbnfDocuments) {
  for (const char* doc : {
           "{}", "{} ", "{}\n\t ", R"({"a":1})", R"({"a": 1, "b" : [true, false, null], "c":{}})",
           "{\n  \"k\": \"v\",\n  \"n\": -0.5e+3\n}", R"({"s":"\" \\ \b \f \n \r \t \u00e9 \uD83D"})",
           "{\"u\":\"h\xC3\xA9 \xE6\xBC\xA2 \xF0\x9F\x98\x80\"}", R"({"x":[[],[[]],{"y":[1,2.25,-3]}]})",
           R"({"big":1234567890123456,"e":1e9,"E":2E-19,"z":0,"neg":-0})", "{\n\t\t\"tab\": 1}",
           R"({"a" :1 , "b":2})"}) {
    SCOPED_TRACE(doc);
    EXPECT_EQ(run(doc), -1);
    // every strict prefix up to the closing brace continues, incomplete
    const std::string d = doc;
    for (size_t n = 0; n < d.rfind('}'); ++n) EXPECT_EQ(run(d.substr(0, n)), -2) << n;
  }
}

TEST(JsonGrammar, RejectsWhatJsonGbnfDoes) {
  const std::pair<const char*, int> cases[] = {
      {" {}", 0},                      // no whitespace before the root
      {"[]", 0},                       // the root is an object
      {"{}{", 2}, {"{} }", 3},         // nothing after the root but one whitespace run
      {"{  }", 2},                     // one run of whitespace between tokens
      {"{\t}", 1},                     // a tab only after a newline
      {"{\r\n}", 1},
      {R"({"a":01})", 6},              // no leading zeros
      {R"({"a":1.})", 7},              // a fraction needs a digit
      {R"({"a":1e10})", 8},            // exponent digits after the first are [1-9] (json.gbnf)
      {R"({"a":12345678901234567})", 21},   // at most 16 integer digits
      {R"({"a":+1})", 5}, {R"({"a":.5})", 5}, {R"({"a":-})", 6},
      {R"({"a":tru})", 8}, {R"({"a":nul})", 8}, {R"({"a":True})", 5},
      {R"({"a\/":1})", 4},             // no \/ escape in json.gbnf
      {R"({"a\u12g4":1})", 7},
      {"{\"a\x01\":1}", 3}, {"{\"a\x7F\":1}", 3},   // control characters and DEL in strings
      {"{\"\xC3\x28\":1}", 3},         // a lead byte without its continuation
      {"{\"\xC0\x80\":1}", 2},         // overlong forms
      {"{\"\xED\xA0\x80\":1}", 3},     // a surrogate encoded in UTF-8
      {"{\"\xF4\x90\x80\x80\":1}", 3}, // past U+10FFFF
      {"{\"\x80\":1}", 2},             // a stray continuation byte
      {R"({"a":1,})", 7},              // no trailing comma
      {R"({"a":[1,]})", 8},
      {R"({"a" 1})", 5}, {R"({1:2})", 1}, {R"({"a":1])", 6}, {R"({"a":[1}})", 7},
  };
  for (const auto& [text, at] : cases) EXPECT_EQ(run(text), at) << text;
  // nesting stops at kMaxDepth open containers
  std::string deep = "{\"a\":";
  for (uint32_t d = 1; d < JsonState::kMaxDepth; ++d) deep += "[";
  EXPECT_EQ(run(deep), -2);
  EXPECT_EQ(run(deep + "["), int(deep.size()));
  // an indent of at most kMaxIndent after a newline
  EXPECT_EQ(run("{\n" + std::string(JsonState::kMaxIndent, ' ') + "}"), -1);
  EXPECT_EQ(run("{\n" + std::string(JsonState::kMaxIndent + 1, ' ') + "}"), int(JsonState::kMaxIndent) + 2);
}

namespace {
// A random value whose nlohmann dump lies in json.gbnf's language: strings without DEL, integers of at
// most 16 digits, doubles printed without an exponent, shallow enough for an indent of <= 20.
nlohmann::json random_value(std::mt19937& rng, int depth) {
  const int kind = std::uniform_int_distribution<int>(0, depth >= 4 ? 5 : 7)(rng);
  switch (kind) {
    case 0: return nullptr;
    case 1: return bool(rng() & 1);
    case 2: return int64_t(rng() % 2000000000000000ull) - 1000000000000000ll;
    case 3: return double(int(rng() % 20001) - 10000) / 64.0;
    case 4: case 5: {
      static const char* pieces[] = {"a", "Z", " ", "\"", "\\", "/", "\n", "\t", "\x01", "\x1F", "~", "\xC3\xA9",
                                     "\xE6\xBC\xA2", "\xF0\x9F\x98\x80", "\xEF\xBF\xBF", "\xF4\x8F\xBF\xBF"};
      std::string s;
      for (int n = int(rng() % 8); n > 0; --n) s += pieces[rng() % std::size(pieces)];
      return s;
    }
    case 6: {
      nlohmann::json a = nlohmann::json::array();
      for (int n = int(rng() % 4); n > 0; --n) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      nlohmann::json o = nlohmann::json::object();
      for (int n = int(rng() % 4); n > 0; --n) o[random_value(rng, 4).dump() + std::to_string(n)] = random_value(rng, depth + 1);
      return o;
    }
  }
}
}  // namespace

TEST(JsonGrammar, AcceptsRandomDocumentsAndOnlyJsonObjects) {
  std::mt19937 rng(7);
  int mutated_accepted = 0;
  for (int i = 0; i < 400; ++i) {
    nlohmann::json doc = nlohmann::json::object();
    for (int n = int(rng() % 5); n > 0; --n) doc[std::string(1, char(0x6B)) + char(0x30 + n)] = random_value(rng, 1);
    for (int indent : {-1, 1, 2, 4}) {
      const std::string text = doc.dump(indent);
      ASSERT_EQ(run(text), -1) << text;
      // One byte changed, dropped or doubled: whatever the recognizer still accepts as complete, nlohmann
      // parses as an object (the language is a subset of JSON objects).
      std::string m = text;
      const size_t at = rng() % m.size();
      switch (rng() % 3) {
        case 0: m[at] = char(rng() % 128); break;
        case 1: m.erase(at, 1); break;
        default: m = m.substr(0, at + 1) + m.substr(at); break;
      }
      if (run(m) == -1) {
        ++mutated_accepted;
        nlohmann::json parsed;
        ASSERT_NO_THROW(parsed = nlohmann::json::parse(m)) << m;
        EXPECT_TRUE(parsed.is_object()) << m;
      }
    }
  }
  EXPECT_GT(mutated_accepted, 50);   // the mutation check compared something
}

TEST(JsonGrammar, MaskEqualsEachTokenFedAlone) {
  GgufFile f(shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf"));
  auto tok = Tokenizer::from_gguf(f);
  const JsonGrammar g(*tok);
  const uint32_t V = tok->n_vocab();
  std::vector<uint32_t> bits((V + 31) / 32);
  for (const char* prefix : {"", "{", "{\"a", "{\"a\":", "{\"a\": 1", "{\"a\": 12.", "{\"a\": [tr", "{\"k\":\"\xE6\xBC",
                             "{\"k\":\"\\u0", "{\"a\":{\"b\":[]", "{}", "{}\n  ", "{} "}) {
    SCOPED_TRACE(prefix);
    JsonState s;
    ASSERT_TRUE(s.feed(prefix));
    g.allowed(s, bits);
    uint32_t n_allowed = 0, n_eog = 0;
    for (uint32_t t = 0; t < V; ++t) {
      const bool bit = (bits[t / 32] >> (t % 32)) & 1;
      bool expect;
      if (tok->is_eog(t)) {
        expect = s.complete();
        n_eog += bit;
      } else {
        const std::string p = tok->piece(t);
        JsonState c = s;
        expect = !p.empty() && c.feed(p);
      }
      ASSERT_EQ(bit, expect) << "token " << t << " '" << tok->piece(t) << "'";
      n_allowed += bit;
    }
    EXPECT_GT(n_allowed, 0u);
    EXPECT_EQ(n_eog > 0, s.complete());
  }
}

TEST(JsonGrammar, ConstraintFollowsChosenTokens) {
  GgufFile f(shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf"));
  auto tok = Tokenizer::from_gguf(f);
  JsonConstraint c(std::make_shared<JsonGrammar>(*tok));
  for (uint32_t t : tok->encode("{\"name\": \"vkspec\", \"tags\": [1, 2]}", false)) c.accept(t);
  EXPECT_TRUE(c.complete());
  c.accept(uint32_t(tok->eos()));   // end of generation once complete
  JsonConstraint d(std::make_shared<JsonGrammar>(*tok));
  EXPECT_THROW(d.accept(uint32_t(tok->eos())), Error);   // not before
  EXPECT_THROW(d.accept(tok->encode("[", false).at(0)), Error);
  // Drafts: the mask after each leading draft the grammar allows, and how many that is.
  const std::vector<uint32_t> drafts = {tok->encode("{\"", false).at(0), tok->encode("a", false).at(0),
                                        uint32_t(tok->eos()), tok->encode("b", false).at(0)};
  std::vector<std::vector<uint32_t>> rows(5, std::vector<uint32_t>((tok->n_vocab() + 31) / 32, 0xFFFFFFFFu));
  EXPECT_EQ(d.draft_masks(drafts, [&](uint32_t row) { return std::span<uint32_t>(rows.at(row)); }), 2u);   // no end in a key
  const JsonGrammar g(*tok);
  std::vector<uint32_t> want(rows[0].size());
  JsonState s;
  for (uint32_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(g.feed(s, drafts[i]));
    g.allowed(s, want);
    EXPECT_EQ(rows[i + 1], want) << "row " << i + 1;
  }
  EXPECT_EQ(rows[3], std::vector<uint32_t>(want.size(), 0xFFFFFFFFu));   // untouched past the refused draft
}
