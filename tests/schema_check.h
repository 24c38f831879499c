#pragma once
// Whether `text` is a sentence of the grammar a JSON schema converts to (loader/json_schema.h, as the library
// runs a request's json_schema): fed byte by byte through a vocabulary of single bytes. 1: complete at its
// end; 0: a prefix of a sentence; -1: refused.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loader/gbnf.h"
#include "loader/json_schema.h"

namespace vkspec::test {

inline int schema_accepts(const std::string& schema, const std::string& text) {
  static const auto bytes = [] {
    std::vector<std::string> pieces = {""};
    for (int b = 1; b < 256; ++b) pieces.push_back(std::string(1, char(b)));
    return std::make_shared<const VocabBytes>(std::move(pieces), std::vector<uint32_t>{0});
  }();
  const GbnfConstraint g(Gbnf::parse(json_schema_to_gbnf(nlohmann::ordered_json::parse(schema))), bytes);
  GbnfState s = g.state();
  return g.feed_bytes(s, text) ? (GbnfConstraint::may_end(s) ? 1 : 0) : -1;
}

}  // namespace vkspec::test
