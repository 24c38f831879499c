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

class SchemaCheck {
 public:
  explicit SchemaCheck(const std::string& schema)
      : g_(Gbnf::parse(json_schema_to_gbnf(nlohmann::ordered_json::parse(schema))), bytes()) {}
  int accepts(const std::string& text) const {
    GbnfState s = g_.state();
    return g_.feed_bytes(s, text) ? (GbnfConstraint::may_end(s) ? 1 : 0) : -1;
  }

 private:
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
