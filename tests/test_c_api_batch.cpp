// The C API's continuous batching (vkspec_batch_*) through libvkspec.so only: a request gets the tokens a
// context's own generation of it gives (batch invariance), greedy, sampled and with rejection sampling;
// cancelling, shutting down, errors, and submitters on many threads. The model-level calls:
// test_c_api_model_io.cpp (the same executable).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/c_api_batch_helpers.h"
#include "vkspec.h"

namespace {

struct Request {
  std::vector<int32_t> ids;
  vkspec_request_result result{};
  int done = 0;
};
int on_token(uint64_t, int32_t token, const char*, size_t, int32_t, const float*, uint32_t, void* user) {
  if (token >= 0) static_cast<Request*>(user)->ids.push_back(token);
  return 0;
}
void on_done(uint64_t, const vkspec_request_result* r, void* user) {
  static_cast<Request*>(user)->result = *r;
  static_cast<Request*>(user)->done++;
}
vkspec_request_params request(const vkspec_sampling_params& s, uint32_t n, Request& out) {
  vkspec_request_params p = vkspec_request_default_params();
  p.sampling = s;
  p.max_tokens = n;
  p.ignore_eos = 1;
  p.on_token = on_token;
  p.on_done = on_done;
  p.user = &out;
  return p;
}
void drain(vkspec_batch* b) {
  for (int32_t worked = 1, guard = 0; worked && guard < 100000; ++guard) ASSERT_EQ(vkspec_batch_step(b, &worked), VKSPEC_OK);
}
// The same with each step in two halves (vkspec_batch_step_submit, then polls until it is collected); a second
// submit before the collection is BUSY, a poll with nothing submitted an invalid argument.
void drain_async(vkspec_batch* b) {
  int32_t in_flight = 0, worked = 1, ready = 0;
  EXPECT_EQ(vkspec_batch_step_poll(b, &ready), VKSPEC_ERROR_INVALID_ARGUMENT);
  for (int guard = 0; worked && guard < 100000; ++guard) {
    ASSERT_EQ(vkspec_batch_step_submit(b, &in_flight, &worked), VKSPEC_OK) << vkspec_last_error();
    if (!in_flight) continue;
    int32_t again = 0, again_worked = 0;
    EXPECT_EQ(vkspec_batch_step_submit(b, &again, &again_worked), VKSPEC_ERROR_BUSY);
    for (ready = 0; !ready;) ASSERT_EQ(vkspec_batch_step_poll(b, &ready), VKSPEC_OK) << vkspec_last_error();
  }
}

// Three requests on two sequences (one waits for admission), greedy and sampled: each gets exactly the
// tokens a context gives it alone, stepped whole or in halves (submitted, then polled), and the batch ends
// idle with no KV block held.
TEST(CApiBatch, RequestsGetTheTokensOfTheirContextRuns) {
  vkspec_model* m = load(kStories, 3);
  const char* prompts[] = {"Once upon a time", "The little dog", "She was happy because"};
  for (const auto& [temp, async] : {std::pair{0.0f, false}, {0.9f, false}, {0.0f, true}, {0.9f, true}}) {
    SCOPED_TRACE(std::to_string(temp) + (async ? " async" : ""));
    vkspec_batch_params bp = vkspec_batch_default_params();
    bp.parallel = 2;
    vkspec_batch* b = nullptr;
    ASSERT_EQ(vkspec_batch_create(m, &bp, &b), VKSPEC_OK) << vkspec_last_error();
    if (temp > 0) {   // a warmed-up batch gives the same tokens
      ASSERT_EQ(vkspec_batch_warm_up(b), VKSPEC_OK) << vkspec_last_error();
    }
    std::vector<Request> runs(3);
    std::vector<std::vector<int32_t>> want;
    for (size_t i = 0; i < 3; ++i) {
      vkspec_context_params cp = vkspec_context_default_params();   // the request's sampling and seed
      cp.sampling.temperature = temp;
      cp.sampling.seed = 40 + i;
      vkspec_context* c = nullptr;
      ASSERT_EQ(vkspec_context_create(m, &cp, &c), VKSPEC_OK) << vkspec_last_error();
      const std::vector<int32_t> prompt = tokenize(m, prompts[i]);
      want.push_back(solo(c, prompt, 12 + int(i)));
      EXPECT_EQ(vkspec_context_free(c), VKSPEC_OK);
      const vkspec_request_params rp = request(cp.sampling, 12 + uint32_t(i), runs[i]);
      uint64_t id = 0;
      ASSERT_EQ(vkspec_batch_submit(b, prompt.data(), prompt.size(), &rp, &id), VKSPEC_OK) << vkspec_last_error();
      EXPECT_GT(id, 0u);
    }
    if (async) drain_async(b);
    else drain(b);
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_EQ(runs[i].done, 1) << i;
      EXPECT_STREQ(runs[i].result.stop_reason, "length") << runs[i].result.error;
      EXPECT_EQ(runs[i].ids, want[i]) << "request " << i;
      EXPECT_EQ(runs[i].result.completion_tokens, want[i].size());
    }
    vkspec_batch_metrics bm;
    ASSERT_EQ(vkspec_batch_get_metrics(b, &bm), VKSPEC_OK);
    EXPECT_EQ(bm.requests_done, 3u);
    EXPECT_EQ(bm.active + bm.queued, 0u);
    EXPECT_EQ(bm.kv_blocks_in_use, 0u);
    EXPECT_EQ(bm.draft_kv_blocks_total, 0u) << "no draft model, no draft pool";
    EXPECT_EQ(vkspec_model_free(m), VKSPEC_ERROR_BUSY) << "a batch is live";
    EXPECT_EQ(vkspec_batch_free(b), VKSPEC_OK);
  }
  EXPECT_EQ(vkspec_model_free(m), VKSPEC_OK);
}

// Rejection sampling (spec_sampling) through the API: a batched request with the batch's draft model gets
// the tokens its context run gives with the same drafter and K (the drafts, and so the tokens, are the same:
// batch invariance), which are not coupled sampling's; a value out of range is an invalid argument.
TEST(CApiBatch, RejectionSamplingRequestsGetTheTokensOfTheirContextRuns) {
  const std::string target = shared("models/pycode-target-f16.gguf"), draft = shared("models/pycode-draft-f16.gguf");
  vkspec_model* m = load(target, 3);
  const char* prompts[] = {"def fibonacci(n):", "class Stack:\n", "for i in range("};
  vkspec_draft_params dp = vkspec_batch_default_params().draft;
  dp.model = draft.c_str();
  dp.adaptive = 0;   // a fixed K: the context and the batch draft alike
  dp.max = 4;
  vkspec_batch_params bp = vkspec_batch_default_params();
  bp.parallel = 2;
  bp.draft = dp;
  vkspec_batch* b = nullptr;
  ASSERT_EQ(vkspec_batch_create(m, &bp, &b), VKSPEC_OK) << vkspec_last_error();
  std::vector<Request> runs(3);
  std::vector<std::vector<int32_t>> want;
  size_t differ = 0;
  for (size_t i = 0; i < 3; ++i) {
    vkspec_context_params cp = vkspec_context_default_params();
    cp.sampling.seed = 70 + i;
    cp.draft = dp;
    vkspec_context* c = nullptr;
    ASSERT_EQ(vkspec_context_create(m, &cp, &c), VKSPEC_OK) << vkspec_last_error();
    const std::vector<int32_t> prompt = tokenize(m, prompts[i]);
    const std::vector<int32_t> coupled = solo(c, prompt, 40);
    EXPECT_EQ(vkspec_context_free(c), VKSPEC_OK);
    cp.sampling.spec_sampling = 2;
    EXPECT_EQ(vkspec_context_create(m, &cp, &c), VKSPEC_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(vkspec_last_error()).find("spec_sampling"), std::string::npos) << vkspec_last_error();
    cp.sampling.spec_sampling = VKSPEC_SPEC_SAMPLING_REJECTION;
    ASSERT_EQ(vkspec_context_create(m, &cp, &c), VKSPEC_OK) << vkspec_last_error();
    want.push_back(solo(c, prompt, 40));
    differ += want.back() != coupled;
    EXPECT_EQ(vkspec_context_free(c), VKSPEC_OK);
    const vkspec_request_params rp = request(cp.sampling, 40, runs[i]);
    uint64_t id = 0;
    ASSERT_EQ(vkspec_batch_submit(b, prompt.data(), prompt.size(), &rp, &id), VKSPEC_OK) << vkspec_last_error();
  }
  drain(b);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(runs[i].done, 1) << i;
    EXPECT_EQ(runs[i].ids, want[i]) << "request " << i;
    EXPECT_GT(runs[i].result.drafted, 0u);
  }
  EXPECT_GT(differ, 0u) << "rejection sampling gave coupled sampling's tokens for every request";
  EXPECT_EQ(vkspec_batch_free(b), VKSPEC_OK);
  EXPECT_EQ(vkspec_model_free(m), VKSPEC_OK);
}

// Cancel (a running request, an unknown id), a prompt that can never run, shutdown with work left (each
// request still gets its on_done once), submissions after it, and bad parameters.
TEST(CApiBatch, CancelShutdownAndErrors) {
  vkspec_model* m = load(kStories, 2, 64);
  vkspec_batch_params bp = vkspec_batch_default_params();
  bp.parallel = 1;
  vkspec_batch* b = nullptr;
  ASSERT_EQ(vkspec_batch_create(m, &bp, &b), VKSPEC_OK) << vkspec_last_error();
  bp.parallel = 2;
  bp.cached_sequences = 1;
  vkspec_batch* too_big = nullptr;
  EXPECT_EQ(vkspec_batch_create(m, &bp, &too_big), VKSPEC_ERROR_INVALID_ARGUMENT) << "3 sequences on max_contexts 2";
  EXPECT_NE(std::string(vkspec_last_error()).find("max_contexts"), std::string::npos) << vkspec_last_error();
  bp.parallel = 1;
  bp.cached_sequences = 0;
  bp.draft.model = kStories.c_str();
  bp.draft.max = 99;   // drafter settings out of range: an invalid argument, not a load failure
  vkspec_batch* bad = nullptr;
  EXPECT_EQ(vkspec_batch_create(m, &bp, &bad), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("--draft-max"), std::string::npos) << vkspec_last_error();
  bp.draft = vkspec_batch_default_params().draft;
  bp.draft.tree = 3;
  EXPECT_EQ(vkspec_batch_create(m, &bp, &bad), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("--draft-tree"), std::string::npos) << vkspec_last_error();
  bp.draft = vkspec_batch_default_params().draft;

  const std::vector<int32_t> prompt = tokenize(m, "Once upon a time");
  vkspec_sampling_params greedy = vkspec_request_default_params().sampling;
  greedy.temperature = 0.0f;
  Request running, queued, refused;
  uint64_t id_running = 0, id_queued = 0, id = 0;
  vkspec_request_params rp = request(greedy, 40, running);
  ASSERT_EQ(vkspec_batch_submit(b, prompt.data(), prompt.size(), &rp, &id_running), VKSPEC_OK);
  rp = request(greedy, 40, queued);
  ASSERT_EQ(vkspec_batch_submit(b, prompt.data(), prompt.size(), &rp, &id_queued), VKSPEC_OK);
  EXPECT_NE(id_running, id_queued);
  int32_t worked = 0;
  for (int i = 0; i < 3; ++i) ASSERT_EQ(vkspec_batch_step(b, &worked), VKSPEC_OK);
  EXPECT_NE(vkspec_batch_warm_up(b), VKSPEC_OK) << "a warm-up while a request runs";
  EXPECT_NE(std::string(vkspec_last_error()).find("before its first request"), std::string::npos) << vkspec_last_error();
  EXPECT_EQ(vkspec_batch_cancel(b, id_running), VKSPEC_OK);
  EXPECT_EQ(vkspec_batch_cancel(b, 999999), VKSPEC_OK) << "an unknown id is no error";
  for (int i = 0; i < 2 && !running.done; ++i) ASSERT_EQ(vkspec_batch_step(b, &worked), VKSPEC_OK);
  ASSERT_EQ(running.done, 1);
  EXPECT_STREQ(running.result.stop_reason, "cancelled");
  EXPECT_LT(running.ids.size(), 40u);

  const std::vector<int32_t> long_prompt(64, prompt[1]);
  rp = request(greedy, 4, refused);
  EXPECT_EQ(vkspec_batch_submit(b, long_prompt.data(), long_prompt.size(), &rp, &id), VKSPEC_ERROR_INVALID_ARGUMENT);
  const int32_t bad_token = 1 << 20;
  EXPECT_EQ(vkspec_batch_submit(b, &bad_token, 1, &rp, &id), VKSPEC_ERROR_INVALID_ARGUMENT);
  rp.draft_tree = 3;
  EXPECT_EQ(vkspec_batch_submit(b, prompt.data(), prompt.size(), &rp, &id), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("draft_tree"), std::string::npos) << vkspec_last_error();
  rp.draft_tree = -1;
  rp.sampling.top_p = 3.0f;
  EXPECT_EQ(vkspec_batch_submit(b, prompt.data(), prompt.size(), &rp, &id), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("top-p"), std::string::npos) << vkspec_last_error();
  EXPECT_EQ(refused.done, 0) << "a refused request has no callbacks";

  EXPECT_EQ(vkspec_batch_shutdown(b), VKSPEC_OK);
  EXPECT_EQ(queued.done, 1);
  EXPECT_STREQ(queued.result.stop_reason, "cancelled");
  rp = request(greedy, 4, refused);
  EXPECT_NE(vkspec_batch_submit(b, prompt.data(), prompt.size(), &rp, &id), VKSPEC_OK) << "submitted after shutdown";
  EXPECT_EQ(vkspec_batch_free(b), VKSPEC_OK);
  EXPECT_EQ(running.done + queued.done, 2) << "on_done exactly once each";
  EXPECT_EQ(vkspec_batch_free(nullptr), VKSPEC_OK);
  EXPECT_EQ(vkspec_batch_step(b, &worked), VKSPEC_ERROR_INVALID_ARGUMENT) << "a freed batch";
  EXPECT_EQ(vkspec_batch_warm_up(b), VKSPEC_ERROR_INVALID_ARGUMENT) << "a freed batch";
  EXPECT_EQ(vkspec_model_free(m), VKSPEC_OK);
}

// The threading rules of a batch (scripts/tsan.sh runs this under ThreadSanitizer): submitters on four
// threads and a cancel from another while one thread runs the batch; vkspec_batch_stop ends the run.
TEST(CApiBatch, SubmittersOnManyThreadsWhileOneRuns) {
  vkspec_model* m = load(kStories, 3);
  vkspec_batch_params bp = vkspec_batch_default_params();
  bp.parallel = 3;
  vkspec_batch* b = nullptr;
  ASSERT_EQ(vkspec_batch_create(m, &bp, &b), VKSPEC_OK) << vkspec_last_error();
  const std::vector<int32_t> prompt = tokenize(m, "Once upon a time");
  struct Counted {
    std::atomic<int> done{0}, cancelled{0};
  } counted;
  vkspec_request_params rp = vkspec_request_default_params();
  rp.sampling.temperature = 0.0f;
  rp.max_tokens = 8;
  rp.ignore_eos = 1;
  rp.user = &counted;
  rp.on_done = [](uint64_t, const vkspec_request_result* r, void* user) {
    auto* c = static_cast<Counted*>(user);
    if (std::string(r->stop_reason) == "cancelled") c->cancelled++;
    c->done++;
  };
  std::thread runner([b] { EXPECT_EQ(vkspec_batch_run(b), VKSPEC_OK) << vkspec_last_error(); });
  std::vector<std::thread> submitters;
  std::atomic<uint64_t> long_id{0};
  for (int t = 0; t < 4; ++t)
    submitters.emplace_back([&, t] {
      for (int i = 0; i < 2; ++i) {
        vkspec_request_params p = rp;
        if (t == 0 && i == 0) p.max_tokens = 200;   // long: cancelled from the main thread
        uint64_t id = 0;
        EXPECT_EQ(vkspec_batch_submit(b, prompt.data(), prompt.size(), &p, &id), VKSPEC_OK) << vkspec_last_error();
        if (t == 0 && i == 0) long_id = id;
      }
    });
  for (auto& t : submitters) t.join();
  EXPECT_EQ(vkspec_batch_cancel(b, long_id), VKSPEC_OK);
  for (int i = 0; i < 6000 && counted.done < 8; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(counted.done, 8);
  EXPECT_LE(counted.cancelled, 1);
  vkspec_batch_metrics bm;
  ASSERT_EQ(vkspec_batch_get_metrics(b, &bm), VKSPEC_OK);
  EXPECT_EQ(bm.requests_done, 8u);
  EXPECT_EQ(vkspec_batch_stop(b), VKSPEC_OK);
  runner.join();
  EXPECT_EQ(vkspec_batch_free(b), VKSPEC_OK);
  EXPECT_EQ(vkspec_model_free(m), VKSPEC_OK);
}

}  // namespace
