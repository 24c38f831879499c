#pragma once
// The C API suites' helpers (tests/test_c_api*.cpp): the shared models, owning handles, tokenizing and
// collecting a generation's stream.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <thread>

#include <nlohmann/json.hpp>

#include <vulkan/vulkan.h>

#include "platform/platform.h"
#include "tests/c_api_basics.h"
#include "tests/run_program.h"
#include "vkspec.h"


namespace {



struct Model {
  vkspec_model* m = nullptr;
  explicit Model(const std::string& path, uint32_t max_contexts = 1, uint32_t n_ctx = 0, uint32_t n_ubatch = 0) {
    vkspec_model_params p = vkspec_model_default_params();
    p.max_contexts = max_contexts;
    p.n_ctx = n_ctx;
    p.n_ubatch = n_ubatch;
    EXPECT_EQ(vkspec_model_load(path.c_str(), &p, &m), VKSPEC_OK) << vkspec_last_error();
  }
  ~Model() { EXPECT_EQ(vkspec_model_free(m), VKSPEC_OK) << vkspec_last_error(); }
};

struct Ctx {
  vkspec_context* c = nullptr;
  explicit Ctx(vkspec_model* m, vkspec_context_params p = greedy()) {
    EXPECT_EQ(vkspec_context_create(m, &p, &c), VKSPEC_OK) << vkspec_last_error();
  }
  ~Ctx() { EXPECT_EQ(vkspec_context_free(c), VKSPEC_OK) << vkspec_last_error(); }
  static vkspec_context_params greedy() {
    vkspec_context_params p = vkspec_context_default_params();
    p.sampling.temperature = 0.0f;
    return p;
  }
};

struct Streamed {
  std::vector<int32_t> ids;
  std::string text;
  int drafts = 0;
  int stop_after = -1;
};
inline int collect(int32_t token, const char* piece, size_t len, int32_t from_draft, void* user) {
  auto* s = static_cast<Streamed*>(user);
  s->ids.push_back(token);
  s->text.append(piece, len);
  s->drafts += from_draft;
  return s->stop_after >= 0 && int(s->ids.size()) >= s->stop_after;
}
// Up to n tokens after `prompt` on a new context with `p`: what was streamed and why it stopped.
struct Generated {
  Streamed s;
  std::string stop;
};
inline Generated generate_on_new_context(vkspec_model* m, const std::vector<int32_t>& prompt, const vkspec_context_params& p, int n) {
  Ctx ctx(m, p);
  Generated o;
  vkspec_generate_params g = vkspec_generate_default_params();
  g.n_predict = n;
  g.on_token = collect;
  g.user = &o.s;
  EXPECT_EQ(vkspec_generate(ctx.c, prompt.data(), prompt.size(), &g), VKSPEC_OK) << vkspec_last_error();
  vkspec_metrics metrics;
  EXPECT_EQ(vkspec_get_metrics(ctx.c, &metrics), VKSPEC_OK);
  o.stop = metrics.stop_reason;
  return o;
}

// n tokens (EOS ignored) streamed into `out`, speculating when the context has a drafter and `speculative`.
inline vkspec_generate_params streamed_params(int n, Streamed& out, int speculative = 1) {
  vkspec_generate_params g = vkspec_generate_default_params();
  g.n_predict = n;
  g.ignore_eos = 1;
  g.speculative = speculative;
  g.on_token = collect;
  g.user = &out;
  return g;
}

inline vkspec_status generate(vkspec_context* c, const std::vector<int32_t>& prompt, int n, Streamed& out, int speculative = 1) {
  const vkspec_generate_params g = streamed_params(n, out, speculative);
  return vkspec_generate(c, prompt.data(), prompt.size(), &g);
}

// Runs a begun generation to its end with submit + poll (poll_only) or submit + wait; counts the polls.
inline vkspec_status run_async(vkspec_context* c, bool poll_only, int* units, int* polls) {
  for (int32_t done = 0;;) {
    vkspec_status s = vkspec_step_submit(c, &done);
    if (s != VKSPEC_OK || done) return s;
    ++*units;
    for (int32_t ready = 0; !ready;) {
      s = poll_only ? vkspec_step_poll(c, &ready) : vkspec_step_wait(c, 1'000'000, &ready);
      if (s != VKSPEC_OK) return s;
      ++*polls;
    }
  }
}

}  // namespace
