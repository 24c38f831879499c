#pragma once
// The batch and model suites' helpers (tests/test_c_api_batch.cpp, test_c_api_model_io.cpp): a model loaded
// as the test asks, and a context's generation as the reference a batched request must equal.
#include "tests/c_api_basics.h"

namespace {

inline vkspec_model* load(const std::string& path, uint32_t max_contexts, uint32_t n_ctx = 256, int vocab_only = 0) {
  vkspec_model_params p = vkspec_model_default_params();
  p.max_contexts = max_contexts;
  p.n_ctx = n_ctx;
  p.vocab_only = vocab_only;
  vkspec_model* m = nullptr;
  EXPECT_EQ(vkspec_model_load(path.c_str(), &p, &m), VKSPEC_OK) << vkspec_last_error();
  return m;
}

inline int append_token(int32_t token, const char*, size_t, int32_t, void* user) {
  if (token >= 0) static_cast<std::vector<int32_t>*>(user)->push_back(token);
  return 0;
}

// n tokens after `prompt` on context c (from what its cache holds), and the generation's metrics.
inline std::vector<int32_t> generate_ids(vkspec_context* c, const std::vector<int32_t>& prompt, int n, vkspec_metrics* m = nullptr) {
  std::vector<int32_t> ids;
  vkspec_generate_params g = vkspec_generate_default_params();
  g.n_predict = n;
  g.ignore_eos = 1;
  g.on_token = append_token;
  g.user = &ids;
  EXPECT_EQ(vkspec_generate(c, prompt.data(), prompt.size(), &g), VKSPEC_OK) << vkspec_last_error();
  if (m) {
    EXPECT_EQ(vkspec_get_metrics(c, m), VKSPEC_OK);
  }
  return ids;
}

// A context's generation from an empty cache: the reference a batched request must equal.
inline std::vector<int32_t> solo(vkspec_context* c, const std::vector<int32_t>& prompt, int n) {
  EXPECT_EQ(vkspec_context_clear(c), VKSPEC_OK);
  return generate_ids(c, prompt, n);
}

}  // namespace
