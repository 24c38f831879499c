// Tokenizers against llama.cpp's own test vectors (id for id), plus cases those miss.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"
#include "tests/gguf_writer.h"
#include "tests/run_program.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    size_t at = s.find(sep, pos);
    if (at == std::string::npos) { out.push_back(s.substr(pos)); break; }
    out.push_back(s.substr(pos, at - pos));
    pos = at + sep.size();
  }
  return out;
}

// llama.cpp's cases for a vocabulary in `dir` (default: ../shared/tokenizer-tests/).
void check_vectors(const std::string& vocab, std::string dir = "") {
  if (dir.empty()) dir = shared_path("tokenizer-tests");
  GgufFile f(dir + "/" + vocab);
  auto tok = Tokenizer::from_gguf(f);
  auto cases = split(slurp(dir + "/" + vocab + ".inp"), "\n__ggml_vocab_test__\n");
  std::string out = slurp(dir + "/" + vocab + ".out");
  if (!out.empty() && out.back() == '\n') out.pop_back();
  auto expected = split(out, "\n");
  // the .inp file ends with a trailing separator line
  if (!cases.empty() && cases.back().empty()) cases.pop_back();
  if (cases.size() == expected.size() + 1 && cases.back() == "__ggml_vocab_test__") cases.pop_back();
  for (auto& c : cases)
    if (c.size() >= 20 && c.compare(c.size() - 20, 20, "\n__ggml_vocab_test__") == 0) c.resize(c.size() - 20);
  ASSERT_EQ(cases.size(), expected.size());
  ASSERT_GE(cases.size(), 40u);   // llama.cpp ships 46 cases per vocabulary
  int failures = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<uint32_t> want;
    std::istringstream ids(expected[i]);
    for (uint32_t id; ids >> id;) want.push_back(id);
    auto got = tok->encode(cases[i], false, false);
    if (got != want) {
      ++failures;
      std::string g;
      for (auto id : got) g += std::to_string(id) + " ";
      ADD_FAILURE() << vocab << " case " << i << " '" << cases[i] << "'\n  want: " << expected[i] << "\n  got:  " << g;
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(Tokenizer, LlamaSpmMatchesLlamaCppVectors) { check_vectors("ggml-vocab-llama-spm.gguf"); }
TEST(Tokenizer, Llama3BpeMatchesLlamaCppVectors) { check_vectors("ggml-vocab-llama-bpe.gguf"); }

// Other families' pre-tokenizers, with llama.cpp's own vocabularies and cases (scripts/install-peer.sh takes
// them out of the peer's source bundle): Qwen2's (single digits), StarCoder's and Refact's (digits apart, then
// GPT-2's words: SmolLM's pre-tokenizer), and Phi-3's SentencePiece vocabulary.
TEST(Tokenizer, OtherFamiliesMatchLlamaCppVectors) {
  const char* peer = getenv("VKSPEC_PEER");
  const std::string dir = peer ? std::string(peer) + "/vocab" : "";
  if (dir.empty() || !std::ifstream(dir + "/ggml-vocab-qwen2.gguf")) GTEST_SKIP() << "no llama.cpp peer (scripts/install-peer.sh)";
  for (const char* vocab : {"ggml-vocab-qwen2.gguf", "ggml-vocab-starcoder.gguf", "ggml-vocab-refact.gguf", "ggml-vocab-phi-3.gguf"}) {
    SCOPED_TRACE(vocab);
    check_vectors(vocab, dir);
  }
}

// Rules whose own vocabularies are not at hand, checked against llama.cpp on a vocabulary made for them:
// Mistral Nemo's pre-tokenizer (tekken) over Llama 3's BPE vocabulary, and Gemma 2/3's SentencePiece rule (no
// space prefix) over Llama 2's. llama.cpp (the peer's tokcheck.mjs) tokenizes llama.cpp's 46 cases and a few
// of the letters, digits and line ends these rules split differently.
TEST(Tokenizer, TekkenAndNoSpacePrefixMatchLlamaCpp) {
  const char* peer = getenv("VKSPEC_PEER");
  if (!peer || !std::ifstream(std::string(peer) + "/tokcheck.mjs") || run_program({"node", "--version"}).code != 0)
    GTEST_SKIP() << "no llama.cpp peer (scripts/install-peer.sh)";
  const std::string dir = shared_path("tokenizer-tests"), sep = "\n__ggml_vocab_test__\n";
  std::string texts = slurp(dir + "/ggml-vocab-llama-bpe.gguf.inp");
  for (const char* extra : {"ÉcoleNormale SupÉRieure CamelCase HTTPServer iPhone", "día ÀÉÎ ñandú straße ΑΒΓαβγ",
                            "x=12345.678/9\r\n\r\npath/to/file\n\n  indented\ttab", "MixedCASEWords and ÜBER-Öl"})
    texts += std::string(extra) + sep;
  const std::string texts_file = ::testing::TempDir() + "/vkspec-rule-cases.inp";
  std::ofstream(texts_file, std::ios::binary) << texts;
  struct Rule { const char* name; const char* base; const char* key; bool is_string; };
  for (const Rule& rule : {Rule{"tekken", "ggml-vocab-llama-bpe.gguf", "tokenizer.ggml.pre", true},
                           Rule{"no space prefix", "ggml-vocab-llama-spm.gguf", "tokenizer.ggml.add_space_prefix", false}}) {
    SCOPED_TRACE(rule.name);
    GgufFile base(dir + "/" + rule.base);
    GgufWriter w;
    w.copy_metadata(base, [&](const std::string& k) { return k == rule.key; });
    if (rule.is_string) w.str(rule.key, "tekken");
    else w.boolean(rule.key, false);
    const std::string vocab = ::testing::TempDir() + "/vkspec-rule-" + std::string(rule.base);
    w.write(vocab);
    Result r = run_program({"node", std::string(peer) + "/tokcheck.mjs", vocab, "--text-file", texts_file});
    ASSERT_EQ(r.code, 0) << r.err;
    GgufFile f(vocab);
    auto tok = Tokenizer::from_gguf(f);
    std::istringstream lines(r.out);
    int cases = 0, differ_from_base = 0;
    auto base_tok = Tokenizer::from_gguf(base);
    for (std::string line; std::getline(lines, line);) {
      const auto j = nlohmann::json::parse(line);
      const std::string text = j["text"];
      const auto want = j["ids"].get<std::vector<uint32_t>>();
      EXPECT_EQ(tok->encode(text, false, true), want) << "'" << text << "'";
      differ_from_base += base_tok->encode(text, false, true) != want;
      ++cases;
    }
    EXPECT_EQ(cases, 49);   // (llama.cpp's 46 but the empty one, and ours)
    EXPECT_GT(differ_from_base, 5);   // the rule matters for these cases (the test would see it ignored)
  }
}

// Round trip and id checks for what the vectors miss: emoji, CJK, long whitespace, digits, code.
TEST(Tokenizer, RoundTripsHardCases) {
  const char* cases[] = {"🦙 llamas 🤗 emoji 👩‍👩‍👧", "日本語のテキストと中文", "     lots    of\t\t\twhitespace\n\n\n",
                         "1234567890 3.14159 1e-9", "def f(x):\n    return x ** 2  # square\n", "ÀÉÎÕÜ ß ø"};
  for (const char* vocab : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-llama-bpe.gguf"}) {
    GgufFile f(shared_path(std::string("tokenizer-tests/") + vocab));
    auto tok = Tokenizer::from_gguf(f);
    for (const char* c : cases) {
      auto ids = tok->encode(c, false, false);
      std::string back;
      for (auto id : ids) back += tok->piece(id);
      const bool spm = tok->model_name() == "llama";
      EXPECT_EQ(back, spm ? std::string(" ") + c : std::string(c)) << vocab;
      for (auto id : ids) EXPECT_NE(tok->type(id), TokenType::Control) << "plain text produced a control token";
    }
  }
}

TEST(Tokenizer, Llama3DigitsSplitInThrees) {
  GgufFile f(shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf"));
  auto tok = Tokenizer::from_gguf(f);
  auto ids = tok->encode("1234567", false, false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(tok->piece(ids[0]) + "|" + tok->piece(ids[1]) + "|" + tok->piece(ids[2]), "123|456|7");
}

TEST(Tokenizer, SpecialTokensParsedOnlyWhenAsked) {
  GgufFile f(shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf"));
  auto tok = Tokenizer::from_gguf(f);
  auto with = tok->encode("<|start_header_id|>user<|end_header_id|>", false, true);
  ASSERT_FALSE(with.empty());
  EXPECT_EQ(tok->text(with.front()), "<|start_header_id|>");
  EXPECT_EQ(tok->type(with.front()), TokenType::Control);
  auto without = tok->encode("<|start_header_id|>", false, false);
  EXPECT_GT(without.size(), 1u);
  for (auto id : without) EXPECT_NE(tok->type(id), TokenType::Control);
  EXPECT_TRUE(tok->is_eog(with.back()) == false);
  auto eot = tok->encode("<|eot_id|>", false, true);
  ASSERT_EQ(eot.size(), 1u);
  EXPECT_TRUE(tok->is_eog(eot[0]));

  GgufFile s(shared_path("tokenizer-tests/ggml-vocab-llama-spm.gguf"));
  auto spm = Tokenizer::from_gguf(s);
  auto ids = spm->encode("Hello</s>world", true, true);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids[0], uint32_t(spm->bos()));
  EXPECT_NE(std::find(ids.begin(), ids.end(), uint32_t(spm->eos())), ids.end());
}

TEST(Tokenizer, Utf8StreamHoldsBackPartialSequences) {
  Utf8Stream s;
  const std::string llama = "🦙";   // 4 bytes
  EXPECT_EQ(s.push(llama.substr(0, 1)), "");
  EXPECT_EQ(s.push(llama.substr(1, 2)), "");
  EXPECT_EQ(s.push(llama.substr(3) + "a"), llama + "a");
  EXPECT_EQ(s.push("\xE6\x97"), "");
  EXPECT_EQ(s.finish(), "\xEF\xBF\xBD");   // an unfinished tail becomes U+FFFD, never lost silently
}

// Streamed token bytes against Python's bytes.decode("utf-8", errors="replace") (an independent decoder:
// one U+FFFD per maximal ill-formed subpart, no overlongs, surrogates or code points past U+10FFFF), on
// random byte strings built from the edges of Unicode's table 3-7, pushed in random pieces.
TEST(Tokenizer, Utf8StreamDecodesLikePython) {
  const std::vector<std::string> atoms = {
      "a", "\n", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\xA6\x99",         // valid: e-acute, euro, llama
      "\x80", "\xBF", "\x9F", "\xA0", "\x8F", "\x90",                            // continuation bytes
      "\xC0", "\xC1", "\xC2", "\xDF", "\xE0", "\xED", "\xEF", "\xF0", "\xF4", "\xF5", "\xFF"};   // leads
  std::mt19937 rng(7);
  std::vector<std::string> cases;
  for (int i = 0; i < 400; ++i) {
    std::string s;
    for (int n = int(rng() % 9); n > 0; --n) s += atoms[rng() % atoms.size()];
    cases.push_back(s);
  }
  const auto hex = [](const std::string& s) {
    std::string h;
    char b[3];
    for (unsigned char c : s) snprintf(b, sizeof b, "%02x", c), h += b;
    return h;
  };
  const std::string in = ::testing::TempDir() + "/vkspec-utf8-cases.txt";
  {
    std::ofstream f(in);
    for (const std::string& c : cases) f << hex(c) << "\n";
  }
  const Result py = run_program({"/usr/bin/python3", "-c",
                                 "import sys\nfor l in open(sys.argv[1]): "
                                 "print(bytes.fromhex(l.strip()).decode('utf-8', 'replace').encode().hex())", in});
  ASSERT_EQ(py.code, 0) << py.err;
  std::istringstream want(py.out);
  for (const std::string& c : cases) {
    Utf8Stream stream;
    std::string got;
    for (size_t i = 0; i < c.size();) {
      const size_t piece = 1 + rng() % 4;
      got += stream.push(c.substr(i, piece));
      i += piece;
    }
    got += stream.finish();
    std::string expected;
    std::getline(want, expected);
    EXPECT_EQ(hex(got), expected) << "bytes " << hex(c);
  }
}

TEST(Tokenizer, SharedModelPromptsMatchReference) {
  for (const char* name : {"stories260K", "pycode-target"}) {
    std::string model = std::string("models/") + name + (std::string(name) == "stories260K" ? ".gguf" : "-f32.gguf");
    GgufFile f(shared_path(model));
    auto tok = Tokenizer::from_gguf(f);
    std::ifstream in(shared_path(std::string("models/reference/") + name + "-greedy.jsonl"));
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      EXPECT_EQ(tok->encode(j["prompt"].get<std::string>(), true), j["prompt_ids"].get<std::vector<uint32_t>>());
      ++n;
    }
    EXPECT_GT(n, 0);
  }
}

}  // namespace
}  // namespace vkspec::test

namespace vkspec::test {
namespace {

double seconds_to_encode(const Tokenizer& tok, const std::string& text) {
  double best = 1e9;
  for (int rep = 0; rep < 3; ++rep) {   // the fastest of three: these machines are noisy
    const auto t0 = std::chrono::steady_clock::now();
    auto ids = tok.encode(text, true, true);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    EXPECT_FALSE(ids.empty());
  }
  return best;
}

std::string repeat_to(const std::string& unit, size_t bytes) {
  std::string s;
  while (s.size() < bytes) s += unit;
  s.resize(bytes);
  return s;
}

// Tokenizing is linear in the text: 4x the input takes at most ~8x the time (10x asserted, for noise: a bound that
// quadratic behaviour breaks at once: it was 18x for 4x on 100 KB of text, and a 100,000-byte word or
// 10,000 special tokens did not finish). Inputs small enough to run under the sanitizers.
TEST(Tokenizer, EncodingIsLinearInTheText) {
  std::ifstream in(shared_path("models/reference/heldout-code.txt"));
  const std::string code((std::istreambuf_iterator<char>(in)), {});
  struct Case { const char* vocab; std::string unit; size_t bytes; };
  const std::vector<Case> cases = {
      {"ggml-vocab-llama-bpe.gguf", code, 500000},
      {"ggml-vocab-llama-bpe.gguf", "a", 100000},               // one very long word
      {"ggml-vocab-llama-bpe.gguf", "<|eot_id|>", 300000},      // a run of special tokens
      {"ggml-vocab-llama-bpe.gguf", "ok \xff ", 200000},        // invalid UTF-8 throughout
      {"ggml-vocab-llama-spm.gguf", code, 100000},
      {"ggml-vocab-llama-spm.gguf", "</s>", 400000},
  };
  for (const Case& c : cases) {
    GgufFile f(shared_path(std::string("tokenizer-tests/") + c.vocab));
    auto tok = Tokenizer::from_gguf(f);
    const double t1 = seconds_to_encode(*tok, repeat_to(c.unit, c.bytes));
    const double t4 = seconds_to_encode(*tok, repeat_to(c.unit, 4 * c.bytes));
    printf("%s, %zu x '%.12s': %.4f s, 4x: %.4f s (x%.1f)\n", c.vocab, c.bytes, c.unit.c_str(), t1, t4, t4 / t1);
    if (t4 > 0.02) {   // below that, timer and allocator noise decide the ratio
      EXPECT_LE(t4, 10 * t1) << c.vocab << " '" << c.unit.substr(0, 12) << "'";
    }
  }
}

// An invalid byte changes only its own tokens: the text before it tokenizes as it does alone, and the
// byte itself becomes a byte token, never dropped.
TEST(Tokenizer, InvalidUtf8StaysLocal) {
  GgufFile f(shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf"));
  auto tok = Tokenizer::from_gguf(f);
  const std::string before = "def main():\n    return 42 ", after = " and more text here";
  const auto a = tok->encode(before, false, true), b = tok->encode(after, false, true);
  const auto all = tok->encode(before + "\xff" + after, false, true);
  ASSERT_GE(all.size(), a.size() + b.size() + 1);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), all.begin()));
  EXPECT_TRUE(std::equal(b.rbegin(), b.rend(), all.rbegin()));
  std::string text;
  for (uint32_t id : all) text += tok->piece(id);
  EXPECT_EQ(text, before + "\xff" + after) << "every byte comes back";
}

}  // namespace
}  // namespace vkspec::test

namespace vkspec::test {
namespace {

// Vocabulary metadata is checked before use: a BOS id that is NaN (a float where an integer id belongs)
// would be cast to int (undefined behaviour); a token text ending in a truncated UTF-8 sequence made the
// BPE detokenizer read past its buffer.
TEST(Tokenizer, VocabularyMetadataIsValidatedAtLoad) {
  GgufFile good(shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf"));
  auto error_of = [](const GgufWriter& w) {
    const auto bytes = w.bytes();
    try {
      GgufFile f(bytes.data(), bytes.size(), "crafted.gguf");
      Tokenizer::from_gguf(f);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -1.0f, 1.5f, 1e30f}) {
    GgufWriter w;
    w.copy_metadata(good, [](const std::string& k) { return k == "tokenizer.ggml.bos_token_id"; });
    w.f32("tokenizer.ggml.bos_token_id", bad);
    EXPECT_NE(error_of(w).find("tokenizer.ggml.bos_token_id' is not a token id"), std::string::npos) << bad << ": " << error_of(w);
  }
  GgufWriter w;
  w.copy_metadata(good, [](const std::string& k) { return k == "tokenizer.ggml.tokens"; });
  std::vector<std::string> tokens = good.metadata().at("tokenizer.ggml.tokens").strings;
  tokens[1000] = "ab\xe2\x82";   // a 3-byte sequence cut after 2
  w.strs("tokenizer.ggml.tokens", tokens);
  EXPECT_NE(error_of(w).find("tokenizer.ggml.tokens[1000] is not valid UTF-8"), std::string::npos) << error_of(w);
}

}  // namespace
}  // namespace vkspec::test

#include <sentencepiece_processor.h>

namespace vkspec::test {
namespace {

// Long SPM text is encoded in pieces cut after bytes that never merge (text/tokenizer_spm.cpp): the ids
// must equal one libsentencepiece call over the whole text with Llama 2's own tokenizer.model (the
// reference; its normalizer adds the dummy prefix itself). The text has lines longer than a piece, runs of
// newlines, indentation, non-ASCII text and characters outside the vocabulary (byte fallback).
TEST(Tokenizer, SpmLongTextInPiecesEqualsOneSentencePieceCall) {
  sentencepiece::SentencePieceProcessor reference;
  ASSERT_TRUE(reference.Load(shared_path("tokenizer-tests/llama2-tokenizer.model")).ok());
  GgufFile f(shared_path("tokenizer-tests/ggml-vocab-llama-spm.gguf"));
  auto tok = Tokenizer::from_gguf(f);
  std::ifstream in(shared_path("models/reference/heldout-code.txt"));
  const std::string code((std::istreambuf_iterator<char>(in)), {});
  std::string text;
  for (int i = 0; text.size() < 300000; ++i) {
    text += code.substr(size_t(i) * 7919 % code.size(), 3000);
    text += i % 3 == 0 ? "\n\n\n" : "\n";
    if (i % 5 == 0) text += std::string(9000, "xy.=("[i % 5]) + " Grüße, 日本語のテキスト 🦙\n";
    if (i % 7 == 0) text += "    " + std::string(5000, 'a') + "\t\n";
  }
  std::vector<int> want;
  ASSERT_TRUE(reference.Encode(text, &want).ok());
  const auto got = tok->encode(text, false, false);
  ASSERT_EQ(got.size(), want.size());
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i] != uint32_t(want[i]);
  EXPECT_EQ(differ, 0u);
}

}  // namespace
}  // namespace vkspec::test
