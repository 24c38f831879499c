#pragma once
// What every C API suite needs (tests/test_c_api*.cpp): the shared models and tokenizing through vkspec.h.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "vkspec.h"

namespace {

inline std::string shared(const std::string& rel) {
  const char* s = getenv("VKSPEC_SHARED");
  return std::string(s ? s : "../shared") + "/" + rel;
}
const std::string kStories = shared("models/stories260K.gguf");

inline std::vector<int32_t> tokenize(vkspec_model* m, const std::string& text, int32_t add_bos = VKSPEC_ADD_BOS) {
  size_t n = 0;
  EXPECT_EQ(vkspec_tokenize(m, text.data(), text.size(), add_bos, 1, nullptr, 0, &n), VKSPEC_OK);
  std::vector<int32_t> ids(n);
  EXPECT_EQ(vkspec_tokenize(m, text.data(), text.size(), add_bos, 1, ids.data(), ids.size(), &n), VKSPEC_OK);
  return ids;
}

}  // namespace
