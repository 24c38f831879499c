// libFuzzer target for constrained generation's host side: the input is a GBNF grammar, a NUL byte and a
// text. The grammar is parsed (an Error is fine); when it parses, the text is fed byte by byte and a mask is
// computed over a small vocabulary after every accepted byte (single bytes, UTF-8 characters and their halves,
// words); the text also goes through JSON mode's recognizer with the same masks. When the grammar part is JSON,
// it is also taken as a JSON schema, and the grammar part as a schema's `pattern`: a schema or pattern the
// converter accepts must become a grammar that parses (only the rule limit may refuse it). Any exception
// other than vkspec::Error, a crash, ASan/UBSan finding, a hang (libFuzzer's -timeout) or one mask that
// takes more than 3 s (the expansion budget, Gbnf::kMaxExpansions, bounds each far under that) is a bug.
// Seeds: tests/fuzz/grammar-seeds.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "constrain/gbnf.h"
#include "constrain/json_grammar.h"
#include "constrain/json_pattern.h"
#include "constrain/json_schema.h"
#include "core/core.h"

namespace {
std::shared_ptr<const vkspec::VocabBytes> vocab() {
  static const auto v = [] {
    std::vector<std::string> pieces = {""};   // token 0: end of generation
    for (int b = 1; b < 256; ++b) pieces.push_back(std::string(1, char(b)));
    for (const char* p : {"\xC3\xA9", "\xE2\x80", "\xE2\x80\xA8", "\xF0\x9F\x98\x80", "\x9F\x98", "{\"", "\":", " \"",
                          "true", "null", "12", ".5e", "\\u00", "root", "- ", "\n  "})
      pieces.push_back(p);
    return std::make_shared<const vkspec::VocabBytes>(std::move(pieces), std::vector<uint32_t>{0});
  }();
  return v;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t split = in.find('\0');
  const std::string grammar = in.substr(0, split), text = split == std::string::npos ? "" : in.substr(split + 1);
  std::vector<uint32_t> bits((vocab()->n_vocab() + 31) / 32);
  const auto schema = nlohmann::ordered_json::parse(grammar, nullptr, /*allow_exceptions=*/false);
  if (!schema.is_discarded()) {
    std::string converted;
    try {
      converted = vkspec::json_schema_to_gbnf(schema);
    } catch (const vkspec::Error&) {
    }
    if (!converted.empty()) {
      try {
        vkspec::Gbnf::parse(converted);
      } catch (const vkspec::Error& e) {
        if (std::string(e.what()).find("more than") == std::string::npos) abort();   // the converter wrote a bad grammar
      }
    }
  }
  try {   // the grammar part as a JSON Schema pattern: one the converter accepts must become a grammar that parses
    const vkspec::JsonStringPattern p = vkspec::json_string_pattern(grammar.substr(0, 512));
    try {
      vkspec::Gbnf::parse("root ::= \"\\\"\" " + p.gbnf + " \"\\\"\"\nchar ::= [^\"\\\\]\n");
    } catch (const vkspec::Error& e) {
      if (std::string(e.what()).find("more than") == std::string::npos) abort();
    }
  } catch (const vkspec::Error&) {
  }
  try {
    const vkspec::GbnfConstraint g(vkspec::Gbnf::parse(grammar), vocab());
    vkspec::GbnfState s = g.state();
    for (size_t i = 0; i < text.size() && i < 256; ++i) {
      if (!g.feed_byte(s, uint8_t(text[i]))) break;
      const auto t0 = std::chrono::steady_clock::now();
      g.allowed(s, bits);
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(3)) abort();   // the mask's work was not bounded
    }
  } catch (const vkspec::Error&) {
  }
  const vkspec::JsonGrammar json(vocab());
  vkspec::JsonState j;
  for (size_t i = 0; i < in.size() && i < 512; ++i) {
    if (!j.feed(uint8_t(in[i]))) break;
    json.allowed(j, bits);
  }
  return 0;
}
