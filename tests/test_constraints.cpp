// Constrained generation's host side. JSON mode's recognizer (constrain/json_grammar.h): the language of
// llama.cpp's grammars/json.gbnf, checked on hand-written cases, on random documents written by
// nlohmann::json (an independent writer), against nlohmann's parser for mutated documents (everything the
// recognizer accepts is a JSON object), and the vocabulary mask against feeding every token's piece on its
// own. GBNF grammars (constrain/gbnf.h): parse errors, and json.gbnf run by the grammar interpreter against the
// hand-written recognizer byte for byte and token mask for token mask (two independent implementations of
// one language). Lazy grammars (TriggeredGbnfConstraint): free before the trigger, the grammar's masks after.
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include <nlohmann/json.hpp>

#include "constrain/gbnf.h"
#include "gguf/gguf.h"
#include "constrain/json_grammar.h"
#include "text/tokenizer.h"
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

// ---- GBNF ----

namespace {
// json.gbnf's language as GBNF (the grammar JsonState implements by hand; constrain/json_grammar.h).
const char* kJsonGbnf = R"(root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# whitespace
ws ::= | " " | "\n" [ \t]{0,20}
)";

std::string parse_error(const std::string& text) {
  try {
    Gbnf::parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Gbnf, RefusesWhatIsNotAGrammar) {
  const std::pair<const char*, const char*> cases[] = {
      {"root ::= foo\n", "'foo' is used but not defined"},
      {"item ::= \"a\"\n", "no 'root' rule"},
      {"root ::= root \"a\"\n", "'root' is left-recursive"},
      {"root ::= x* root\nx ::= \"a\"?\n", "left-recursive"},   // through rules that may be empty
      {"root ::= \"a\\q\"\n", "line 1: unknown escape"},
      {"root ::= \"a\"\n\nb ::= [ab\n", "line 3: an unterminated character class"},
      {"root ::= \"abc\n", "line 1: an unterminated literal"},
      {"root ::= \"a\"{3,2}\n", "maximum is below its minimum"},
      {"root = \"a\"\n", "expecting ::="},
      {"root ::= ( \"a\"\n", "expecting ')'"},
      {"root ::= *\n", "expecting an item before a repetition operator"},
      {"root ::= \"a\" @\n", "unexpected '@'"},
      {"root ::= \"a\"{9000}\n", "a repetition count above 8192"},
      {"root ::= \"a\"{0,5000} \"b\"{0,5000}\n", "more than 8192 rules"},
  };
  EXPECT_NE(parse_error("root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')') + "\n").find("nested more than 256"),
            std::string::npos);
  for (const auto& [text, want] : cases) {
    const std::string got = parse_error(text);
    EXPECT_NE(got.find(want), std::string::npos) << text << " gave: " << got;
  }
  // a 48 KB grammar whose repetition copies a character class of 8000 characters into 8000 rules (half a GB
  // of elements before the bound; it stays under the rule count) is refused by its expanded size, at once
  std::string big_class = "[";
  for (int i = 0; i < 8000; ++i) {
    char c[8];
    snprintf(c, sizeof c, "\\u%04x", 0x100 + 2 * i);
    big_class += c;
  }
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NE(parse_error("root ::= " + big_class + "]{0,8000}\n").find("expands to more than 1000000 elements"),
            std::string::npos);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_EQ(parse_error(kJsonGbnf), "");
  EXPECT_EQ(parse_error("root ::= [a-z]{2,5} (\"-\" [0-9]+)? . # a comment\n"), "");
}

// The interpreter running json.gbnf and the hand-written JsonState agree on every prefix of random
// documents and of mutated ones (accepted or not, complete or not).
TEST(Gbnf, JsonGbnfAgreesWithJsonStateByteForByte) {
  GgufFile f(shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf"));
  auto tok = Tokenizer::from_gguf(f);
  const auto vocab = std::make_shared<const VocabBytes>(*tok);
  const GbnfConstraint gbnf(Gbnf::parse(kJsonGbnf), vocab);
  std::mt19937 rng(11);
  int compared = 0;
  for (int i = 0; i < 300; ++i) {
    nlohmann::json doc = nlohmann::json::object();
    for (int n = int(rng() % 4); n > 0; --n) doc[std::string(1, char(0x6B)) + char(0x30 + n)] = random_value(rng, 1);
    std::string text = doc.dump(int(rng() % 3) - 1);
    if (rng() % 2) {
      const size_t at = rng() % text.size();
      text[at] = char(rng() % 128);
    }
    GbnfState g = gbnf.state();
    JsonState j;
    for (size_t b = 0; b < text.size(); ++b) {
      const bool ok_j = j.feed(uint8_t(text[b]));
      const bool ok_g = gbnf.feed_bytes(g, std::string_view(text).substr(b, 1));
      ASSERT_EQ(ok_g, ok_j) << "byte " << b << " of " << text;
      if (!ok_j) break;
      ASSERT_EQ(GbnfConstraint::may_end(g), j.complete()) << "byte " << b << " of " << text;
      ++compared;
    }
  }
  EXPECT_GT(compared, 8000);
}

// The same two implementations give the same token masks over the 128k Llama 3 vocabulary, except for
// tokens that are a lone byte >= 0x80 (the interpreter decodes UTF-8 as llama.cpp does, which lets lead bytes
// of characters past U+10FFFF and overlong forms start; JsonState does not).
TEST(Gbnf, JsonGbnfMasksEqualJsonModesMasks) {
  GgufFile f(shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf"));
  auto tok = Tokenizer::from_gguf(f);
  const auto vocab = std::make_shared<const VocabBytes>(*tok);
  const GbnfConstraint gbnf(Gbnf::parse(kJsonGbnf), vocab);
  const JsonGrammar json(vocab);
  const uint32_t V = tok->n_vocab();
  std::vector<uint32_t> a((V + 31) / 32), b(a.size());
  for (const char* prefix : {"", "{", "{\"a", "{\"a\":", "{\"a\": -1", "{\"a\": [tr", "{\"k\":\"\xE6\xBC", "{\"k\":\"\\u0",
                             "{\"a\":{\"b\":[]", "{}", "{}\n  "}) {
    SCOPED_TRACE(prefix);
    GbnfState g = gbnf.state();
    JsonState j;
    ASSERT_TRUE(gbnf.feed_bytes(g, prefix));
    ASSERT_TRUE(j.feed(prefix));
    gbnf.allowed(g, a);
    json.allowed(j, b);
    int differ = 0, allowed = 0;
    for (uint32_t t = 0; t < V; ++t) {
      const bool x = (a[t / 32] >> (t % 32)) & 1, y = (b[t / 32] >> (t % 32)) & 1;
      allowed += y;
      const std::string& p = vocab->pieces[t];
      if (x != y && !(p.size() == 1 && uint8_t(p[0]) >= 0x80)) {
        if (++differ < 5) ADD_FAILURE() << "token " << t << " '" << p << "': grammar " << x << ", JSON mode " << y;
      }
    }
    EXPECT_EQ(differ, 0);
    EXPECT_GT(allowed, 0);
  }
}

// A grammar's mask (the byte-order walk) equals feeding every token alone, over the 128k Llama 3 vocabulary:
// a class that excludes characters beyond ASCII (tokens that end inside a character are decided by
// llama.cpp's partial match, tokens holding all of one by the character), digits with a bounded repetition,
// alternatives of literals.
TEST(Gbnf, MaskEqualsEachTokenFedAlone) {
  GgufFile f(shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf"));
  auto tok = Tokenizer::from_gguf(f);
  const auto vocab = std::make_shared<const VocabBytes>(*tok);
  const uint32_t V = tok->n_vocab();
  std::vector<uint32_t> bits((V + 31) / 32);
  const std::pair<const char*, std::vector<const char*>> cases[] = {
      {"root ::= item+\nitem ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n",
       {"", "- ", "- a", "- a\n", "- \xE2\x80"}},
      {"root ::= (\"x = \" [0-9]{1,3} (\"; \" | \".\"))+\n", {"", "x = ", "x = 12", "x = 123", "x = 1; "}},
      {"root ::= \"yes\" | \"no\" | \"maybe\" \" \"? [A-Z]\n", {"", "y", "ma", "maybe"}},
  };
  for (const auto& [text, prefixes] : cases) {
    const GbnfConstraint g(Gbnf::parse(text), vocab);
    for (const char* prefix : prefixes) {
      SCOPED_TRACE(std::string(text) + " after '" + prefix + "'");
      GbnfState s = g.state();
      ASSERT_TRUE(g.feed_bytes(s, prefix) || std::string(prefix).find('\xE2') != std::string::npos);
      if (std::string(prefix).find('\xE2') != std::string::npos) {   // the partial character, fed raw
        s = g.state();
        for (const char c : std::string_view(prefix)) ASSERT_TRUE(g.feed_byte(s, uint8_t(c)));
      }
      g.allowed(s, bits);
      uint32_t n = 0;
      for (uint32_t t = 0; t < V; ++t) {
        GbnfState c = s;
        const bool want = g.feed(c, t), got = (bits[t / 32] >> (t % 32)) & 1;
        ASSERT_EQ(got, want) << "token " << t << " '" << vocab->pieces[t] << "'";
        n += got;
      }
      EXPECT_GT(n, 0u);
    }
  }
}

// The fast paths of a grammar's mask against its reference, the stacks walked directly (max_states 0): the
// walk over interned states, and the cache of masks by state (with what it is for: inside a string the state
// repeats, whatever character came last).
TEST(Gbnf, InternedWalkAndMaskCacheGiveTheStacksMasks) {
  GgufFile f(shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf"));
  auto tok = Tokenizer::from_gguf(f);
  const auto vocab = std::make_shared<const VocabBytes>(*tok);
  const auto grammar = Gbnf::parse(kJsonGbnf);
  auto cache = std::make_shared<GbnfMaskCache>();
  GbnfConstraint cached(grammar, vocab, cache);
  const GbnfConstraint plain(grammar, vocab);
  std::vector<uint32_t> fast(TOKEN_MASK_WORDS(tok->n_vocab())), slow(fast.size()), again(fast.size());
  const std::vector<uint32_t> ids = tok->encode("{\"name\": \"Zoë Ångström\", \"n\": [1, 22.5, -3e4], \"s\": \"a b c d\"}", false);
  for (size_t i = 0; i < ids.size(); ++i) {
    cached.allowed(fast);
    plain.allowed(cached.state(), slow, 0);
    ASSERT_EQ(fast, slow) << "after " << i << " tokens";
    cached.allowed(again);   // from the cache now
    ASSERT_EQ(again, slow);
    cached.accept(ids[i]);
  }
  EXPECT_LT(cache->size(), ids.size() - 4) << "states inside strings repeat";
  GbnfState a = plain.state(), b = plain.state();
  ASSERT_TRUE(plain.feed_bytes(a, "{\"k\": \"x\xC3\xA9"));
  ASSERT_TRUE(plain.feed_bytes(b, "{\"k\": \"xy"));
  EXPECT_EQ(GbnfConstraint::key(a), GbnfConstraint::key(b));
  ASSERT_TRUE(plain.feed_bytes(b, "\""));
  EXPECT_NE(GbnfConstraint::key(a), GbnfConstraint::key(b));
  GbnfMaskCache small(2);   // bounded: the oldest goes
  small.put("a", fast);
  small.put("b", fast);
  small.put("c", fast);
  EXPECT_EQ(small.size(), 2u);
  EXPECT_FALSE(small.find("a", again));
  EXPECT_TRUE(small.find("c", again));
}
// ---- lazy grammars (a trigger, then the grammar) ----

TEST(Gbnf, TriggeredGrammarHoldsFromItsTrigger) {
  GgufFile f(shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf"));
  auto tok = Tokenizer::from_gguf(f);
  const auto vocab = std::make_shared<const VocabBytes>(*tok);
  const uint32_t V = tok->n_vocab();
  const auto trigger = Gbnf::parse("root ::= \"{\" \" \"? \"\\\"k\\\"\" \" \"? \":\"\n");
  const auto grammar = Gbnf::parse("root ::= \"{\" \" \"? \"\\\"k\\\"\" \" \"? \":\" \" \"? [0-9]{1,3} \"}\"\n");
  const GbnfConstraint strict(grammar, vocab);
  const std::vector<uint32_t> all(TOKEN_MASK_WORDS(V), ~0u);
  std::vector<uint32_t> bits(all.size()), want(all.size());
  auto feed = [&](TriggeredGbnfConstraint& c, const std::string& text) {
    for (uint32_t t : tok->encode(text, false)) c.accept(t);
  };
  {   // text that never begins like the trigger: every token stays allowed, and it may end anywhere
    TriggeredGbnfConstraint c(trigger, grammar, vocab);
    for (uint32_t t : tok->encode("Hello {\"k\": 1} world", false)) {
      c.allowed(bits);
      EXPECT_EQ(bits, all);
      EXPECT_TRUE(c.complete());
      c.accept(t);
    }
    EXPECT_FALSE(c.active());
  }
  {   // leading whitespace, then the trigger: from there the grammar's masks (fed the text without it)
    TriggeredGbnfConstraint c(trigger, grammar, vocab);
    feed(c, "  \n{\"k\"");
    EXPECT_FALSE(c.active());
    c.allowed(bits);
    EXPECT_EQ(bits, all);
    feed(c, ": ");
    ASSERT_TRUE(c.active());
    EXPECT_FALSE(c.complete());
    GbnfState s = strict.state();
    ASSERT_TRUE(strict.feed_bytes(s, "{\"k\": "));
    strict.allowed(s, want);
    c.allowed(bits);
    EXPECT_EQ(bits, want);
    EXPECT_NE(bits, all);
    TriggeredGbnfConstraint copy = c;
    EXPECT_THROW(copy.accept(tok->encode("x", false).at(0)), Error);   // outside the grammar now
    feed(c, "42}");
    EXPECT_TRUE(c.complete());
    c.allowed(bits);
    for (uint32_t t = 0; t < V; ++t)   // only the end is left
      EXPECT_EQ((bits[TOKEN_MASK_WORD(t)] & TOKEN_MASK_BIT(t)) != 0, tok->is_eog(t)) << t;
  }
  {   // a text that leaves the trigger's language stays free, even if the trigger's text follows
    TriggeredGbnfConstraint c(trigger, grammar, vocab);
    feed(c, "{\"j\": 1} {\"k\": ");
    EXPECT_FALSE(c.active());
    c.allowed(bits);
    EXPECT_EQ(bits, all);
  }
  {   // the trigger matches where the grammar refuses the text: free
    TriggeredGbnfConstraint c(trigger, Gbnf::parse("root ::= \"{\\\"k\\\":\" [0-9]\n"), vocab);
    feed(c, "{ \"k\":");
    EXPECT_FALSE(c.active());
    c.allowed(bits);
    EXPECT_EQ(bits, all);
  }
  {   // drafts: the masks after each, as accepting them one by one gives, across the trigger
    const TriggeredGbnfConstraint c(trigger, grammar, vocab);
    std::vector<uint32_t> drafts = tok->encode("{\"k\": 7", false);
    const uint32_t n_ok = uint32_t(drafts.size());
    drafts.push_back(tok->encode("x", false).at(0));   // refused once the grammar holds
    drafts.push_back(tok->encode("}", false).at(0));
    std::vector<std::vector<uint32_t>> rows(drafts.size() + 1, std::vector<uint32_t>(all.size(), 0u));
    EXPECT_EQ(c.draft_masks(drafts, [&](uint32_t row) { return std::span<uint32_t>(rows.at(row)); }), n_ok);
    TriggeredGbnfConstraint one = c;
    for (uint32_t i = 0; i < n_ok; ++i) {
      one.accept(drafts[i]);
      one.allowed(want);
      EXPECT_EQ(rows[i + 1], want) << "row " << i + 1;
    }
    EXPECT_TRUE(one.active());
    EXPECT_EQ(rows[n_ok + 1], std::vector<uint32_t>(all.size(), 0u));   // untouched past the refused draft
  }
}

// Nested repetitions multiply a grammar's work by their depth: four levels of {0,5} never finished a mask
// (minutes at a 128k vocabulary, every other stream stalled on the engine thread). The work of one operation is
// bounded (Gbnf::kMaxExpansions): such a grammar is refused at its first mask, quickly, and one level less,
// within the budget, still gives the same mask as each token fed alone.
TEST(Gbnf, NestedRepetitionsAreRefusedWithinABudget) {
  GgufFile f(shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf"));
  auto tok = Tokenizer::from_gguf(f);
  const auto vocab = std::make_shared<const VocabBytes>(*tok);
  std::vector<uint32_t> bits(TOKEN_MASK_WORDS(tok->n_vocab()));
  const auto deep = Gbnf::parse("root ::= (((( \"a\" \"b\"?){0,5} \"c\"?){0,5} \"d\"?){0,5} \"e\"?){0,5}\n");
  const auto t0 = std::chrono::steady_clock::now();
  try {
    GbnfConstraint c(deep, vocab);
    c.allowed(bits);
    FAIL() << "a grammar past the expansion budget was followed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too costly"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  const auto shallow = Gbnf::parse("root ::= (( \"a\" \"b\"?){0,5} \"c\"?){0,5}\n");
  GbnfConstraint c(shallow, vocab);
  c.allowed(bits);
  const auto allowed = [&](uint32_t t) { return (bits[TOKEN_MASK_WORD(t)] >> (t % 32)) & 1; };
  for (const char* text : {"a", "ab", "abc", "b", "x"}) {
    const std::vector<uint32_t> ids = tok->encode(text, false);
    if (ids.size() != 1) continue;
    GbnfState s = c.state();
    EXPECT_EQ(bool(allowed(ids[0])), c.feed(s, ids[0])) << text;
  }
}
