#pragma once
// Whether `text` is a sentence of the grammar a JSON schema converts to (constrain/json_schema.h, as the library
// runs a request's json_schema): fed byte by byte through a vocabulary of single bytes. 1: complete at its
// end; 0: a prefix of a sentence; -1: refused.
#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "constrain/gbnf.h"
#include "constrain/json_schema.h"

namespace vkspec::test {

class SchemaCheck {
 public:
  explicit SchemaCheck(const std::string& schema)
      : g_(Gbnf::parse(json_schema_to_gbnf(nlohmann::ordered_json::parse(schema))), bytes()) {}
  int accepts(const std::string& text) const {
    GbnfState s = g_.state();
    return g_.feed_bytes(s, text) ? (GbnfConstraint::may_end(s) ? 1 : 0) : -1;
  }
  // A random sentence: each step a byte the grammar allows there, uniformly (so mostly the lead bytes of
  // multi-byte characters where any character goes); with probability p_end the end where the text may end,
  // else a closing quote where one is allowed (a string would rarely end otherwise); half the other steps
  // a byte of `prefer` where one is allowed (a pattern's own characters: an unanchored pattern's match would
  // rarely come up otherwise). None when no sentence ended within max_bytes.
  std::optional<std::string> sample(std::mt19937& rng, const std::string& prefer = "", double p_end = 0.15,
                                    size_t max_bytes = 400) const {
    GbnfState s = g_.state();
    std::string text;
    std::vector<uint32_t> bits(8);
    Utf8 utf8;   // the grammar allows no byte that well-formed UTF-8 does not (checked at every step)
    while (text.size() < max_bytes) {
      g_.allowed(s, bits);
      std::vector<uint8_t> next;
      for (int b = 1; b < 256; ++b) {
        if (!(bits[size_t(b) / 32] >> (b % 32) & 1)) continue;
        EXPECT_TRUE(utf8.allows(uint8_t(b))) << "byte " << b << " allowed after " << testing::PrintToString(text);
        next.push_back(uint8_t(b));
      }
      const bool lean = std::uniform_real_distribution<double>(0, 1)(rng) < p_end;
      if ((bits[0] & 1) && utf8.need == 0 && (next.empty() || lean)) return text;
      if (next.empty()) return std::nullopt;
      const bool quote = lean && std::find(next.begin(), next.end(), uint8_t('"')) != next.end();
      std::vector<uint8_t> preferred;
      for (const uint8_t b : next)
        if (prefer.find(char(b)) != std::string::npos) preferred.push_back(b);
      const std::vector<uint8_t>& from = !preferred.empty() && rng() % 2 ? preferred : next;
      const uint8_t b = quote ? uint8_t('"') : from[rng() % from.size()];
      if (!g_.feed_bytes(s, std::string(1, char(b)))) return std::nullopt;
      text += char(b);
      utf8.feed(b);
    }
    return std::nullopt;
  }

 private:
  // Which byte may come next in well-formed UTF-8 (Unicode's table 3-7): `need` continuation bytes are due,
  // the next within [lo, hi].
  struct Utf8 {
    int need = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    bool allows(uint8_t b) const { return need ? b >= lo && b <= hi : b < 0x80 || (b >= 0xC2 && b <= 0xF4); }
    void feed(uint8_t b) {
      if (need) {
        --need, lo = 0x80, hi = 0xBF;
      } else if (b >= 0x80) {
        need = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : 1;
        lo = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
        hi = b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
      }
    }
  };
  static std::shared_ptr<const VocabBytes> bytes() {
    static const auto v = [] {
      std::vector<std::string> pieces = {""};
      for (int b = 1; b < 256; ++b) pieces.push_back(std::string(1, char(b)));
      return std::make_shared<const VocabBytes>(std::move(pieces), std::vector<uint32_t>{0});
    }();
    return v;
  }
  GbnfConstraint g_;
};

inline int schema_accepts(const std::string& schema, const std::string& text) { return SchemaCheck(schema).accepts(text); }

}  // namespace vkspec::test
