#pragma once
// The server's request parser on a real tokenizer (tests/test_server_api*.cpp): parse a body as an endpoint
// would, and read the status and parameter of a refusal.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "apps/server/server_api.h"
#include "gguf/gguf.h"
#include "text/prompt.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {

class ServerApiParse : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = std::make_unique<GgufFile>(shared_path("models/pycode-target-f16.gguf"));
    tok_ = Tokenizer::from_gguf(*file_);
    lim_.n_ctx = 512;
    lim_.n_vocab = tok_->n_vocab();
    // the server's encodings, on the tokenizer directly (no template: chat requests are refused)
    enc_.prompt = [this](const std::string& text) { return ids(tokenize(*tok_, text, AddBos::IfWanted, true)); };
    enc_.chat = [this](const std::string& text) { return ids(tokenize(*tok_, text, AddBos::IfWantedUnlessPresent, true)); };
  }
  static std::vector<int32_t> ids(const std::vector<uint32_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); }
  int status_of(const std::string& body, bool chat = false, std::string* param = nullptr) {
    try {
      cli::parse_completion(cli::parse_body(body, lim_), chat, lim_, enc_, "m");
      return 200;
    } catch (const cli::ApiError& e) {
      if (param) *param = e.param;
      EXPECT_FALSE(e.message.empty());
      EXPECT_EQ(e.body()["error"]["message"], e.message);
      return e.status;
    }
  }
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tok_;
  cli::ServerLimits lim_;
  cli::PromptEncoder enc_;
};

}  // namespace vkspec::test
