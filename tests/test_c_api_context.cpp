// The C API's contexts: prompt-cache reuse, speculation, cancellation (before and during a prefill), steps,
// the threading rules (BUSY for a context used twice at once, two contexts on one model from two threads),
// freed handles and bad files, the chat template and bad input.
#include "tests/c_api_helpers.h"

namespace {

TEST(CApi, ReusesTheCacheAcrossCalls) {
  Model model(kStories, 2);
  Ctx a(model.m), fresh(model.m);
  const std::vector<int32_t> p1 = tokenize(model.m, "Once upon a time");
  Streamed s1;
  ASSERT_EQ(generate(a.c, p1, 8, s1), VKSPEC_OK);
  std::vector<int32_t> p2 = p1;
  p2.insert(p2.end(), s1.ids.begin(), s1.ids.end());
  const std::vector<int32_t> more = tokenize(model.m, "And then");
  p2.insert(p2.end(), more.begin() + 1, more.end());   // (without its BOS)
  Streamed s2, s2_fresh;
  ASSERT_EQ(generate(a.c, p2, 8, s2), VKSPEC_OK);
  vkspec_metrics m{};
  ASSERT_EQ(vkspec_get_metrics(a.c, &m), VKSPEC_OK);
  EXPECT_EQ(m.reused_tokens, p1.size() + s1.ids.size() - 1);   // the last generated token was never fed back
  EXPECT_EQ(m.prefilled_tokens, p2.size() - m.reused_tokens);
  ASSERT_EQ(generate(fresh.c, p2, 8, s2_fresh), VKSPEC_OK);
  EXPECT_EQ(s2.ids, s2_fresh.ids);
}

// Speculation through the API is lossless and says which tokens were verified drafts; sampled with a seed,
// it gives the tokens of sampling without it.
TEST(CApi, SpeculativeMarksDraftsAndMatchesPlain) {
  Model model(shared("models/pycode-target-f16.gguf"));
  const std::vector<int32_t> prompt = tokenize(model.m, "for i in range(10):\n    print(i)\nfor i in range(10):\n    print(i)\n");
  {
    vkspec_context_params sampled = vkspec_context_default_params();
    sampled.sampling.temperature = 0.8f;
    sampled.sampling.seed = 11;
    sampled.draft.ngram = 1;
    Ctx ctx(model.m, sampled);
    Streamed plain, spec;
    ASSERT_EQ(generate(ctx.c, prompt, 48, plain, /*speculative=*/0), VKSPEC_OK);
    ASSERT_EQ(generate(ctx.c, prompt, 48, spec, /*speculative=*/1), VKSPEC_OK);
    EXPECT_EQ(spec.ids, plain.ids) << "sampled, seed 11";
    EXPECT_GT(spec.drafts, 0);
  }
  vkspec_context_params sp = Ctx::greedy();
  sp.draft.ngram = 1;
  Ctx ctx(model.m, sp);
  Streamed plain, spec;
  ASSERT_EQ(generate(ctx.c, prompt, 48, plain, /*speculative=*/0), VKSPEC_OK);
  ASSERT_EQ(generate(ctx.c, prompt, 48, spec, /*speculative=*/1), VKSPEC_OK);
  EXPECT_EQ(spec.ids, plain.ids);
  vkspec_metrics m{};
  ASSERT_EQ(vkspec_get_metrics(ctx.c, &m), VKSPEC_OK);
  EXPECT_GT(m.verify_passes, 0u);
  // Every delivered draft was accepted; `accepted` also counts drafts the last verify pass accepted past the
  // 48th token (which K adaptive K picks there depends on measured timings): at most one round's K.
  EXPECT_GT(spec.drafts, 0);
  EXPECT_LE(uint64_t(spec.drafts), m.accepted);
  EXPECT_LE(m.accepted - uint64_t(spec.drafts), uint64_t(sp.draft.max));
}

TEST(CApi, CancelStopsGenerationAndPrefill) {
  Model model(shared("models/pycode-target-f16.gguf"), 1, 4096);
  Ctx ctx(model.m);
  const std::vector<int32_t> prompt = tokenize(model.m, "x = 1\n");
  // cancelled before it starts: nothing runs
  ASSERT_EQ(vkspec_cancel(ctx.c), VKSPEC_OK);
  Streamed s;
  EXPECT_EQ(generate(ctx.c, prompt, 8, s), VKSPEC_ERROR_CANCELLED);
  EXPECT_TRUE(s.ids.empty());
  // the flag is consumed: the next call runs
  ASSERT_EQ(generate(ctx.c, prompt, 4, s), VKSPEC_OK);
  EXPECT_EQ(s.ids.size(), 4u);

  // during a long prefill (1500 tokens): another thread cancels it; it stops after a whole forward pass
  // (16 tokens), whose K/V stay in the cache
  std::vector<int32_t> long_prompt;
  while (long_prompt.size() < 1500) {
    const auto part = tokenize(model.m, "def f(a, b):\n    return a * b + 1\n");
    long_prompt.insert(long_prompt.end(), part.begin() + 1, part.end());
  }
  long_prompt.resize(1500);
  Streamed l;
  std::atomic<bool> started{false};
  std::thread canceller([&] {
    while (!started) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    vkspec_cancel(ctx.c);
  });
  started = true;
  const vkspec_status st = generate(ctx.c, long_prompt, 8, l);
  canceller.join();
  if (st == VKSPEC_OK) GTEST_SKIP() << "the device prefilled 1500 tokens before the cancel arrived";
  ASSERT_EQ(st, VKSPEC_ERROR_CANCELLED);
  EXPECT_TRUE(l.ids.empty());
  vkspec_metrics m{};
  ASSERT_EQ(vkspec_get_metrics(ctx.c, &m), VKSPEC_OK);
  EXPECT_STREQ(m.stop_reason, "cancelled");
  EXPECT_LT(m.prefilled_tokens, long_prompt.size());
  EXPECT_EQ(m.prefilled_tokens % 16, 0u) << m.prefilled_tokens;
  // what ran is reused by the next call
  Streamed again;
  const std::vector<int32_t> head(long_prompt.begin(), long_prompt.begin() + long(m.reused_tokens + m.prefilled_tokens + 1));
  const uint64_t done = m.reused_tokens + m.prefilled_tokens;
  ASSERT_EQ(generate(ctx.c, head, 1, again), VKSPEC_OK);
  ASSERT_EQ(vkspec_get_metrics(ctx.c, &m), VKSPEC_OK);
  EXPECT_EQ(m.reused_tokens, done);
}

// vkspec_step: one submission per call, at most one token per call when decoding plainly (at most K + 1 per
// speculative round), the same tokens as vkspec_generate.
TEST(CApi, StepsAreBoundedAndGiveGenerateTokens) {
  Model model(shared("models/pycode-target-f16.gguf"), 1, 0, 16);   // 16-token prompt chunks on every device
  vkspec_model_info info{};
  ASSERT_EQ(vkspec_model_get_info(model.m, &info), VKSPEC_OK);
  ASSERT_EQ(info.n_ubatch, 16u);
  EXPECT_STREQ(info.architecture, "llama");
  vkspec_context_params p = Ctx::greedy();
  p.draft.ngram = 1;
  p.draft.max = 4;
  Ctx ctx(model.m, p);
  const std::vector<int32_t> prompt =
      tokenize(model.m, "for i in range(10):\n    print(i)\nfor j in range(20):\n    print(j)\nfor k in range(30):\n    print(k)\n");
  ASSERT_GT(prompt.size(), 40u);
  int32_t done = 0;
  EXPECT_EQ(vkspec_step(ctx.c, &done), VKSPEC_ERROR_INVALID_ARGUMENT);   // nothing begun
  for (int speculative : {0, 1}) {
    Streamed all;
    ASSERT_EQ(generate(ctx.c, prompt, 40, all, speculative), VKSPEC_OK);
    Streamed stepped;
    const vkspec_generate_params g = streamed_params(40, stepped, speculative);
    // another prompt in between, so that the stepped run prefills (all but BOS) in several steps
    Streamed flush;
    ASSERT_EQ(generate(ctx.c, tokenize(model.m, "x = 1"), 2, flush), VKSPEC_OK);
    ASSERT_EQ(vkspec_begin(ctx.c, prompt.data(), prompt.size(), &g), VKSPEC_OK) << vkspec_last_error();
    Streamed other;
    EXPECT_EQ(generate(ctx.c, prompt, 4, other), VKSPEC_ERROR_BUSY);   // one generation at a time
    int steps = 0, prefill_steps = 0;
    size_t most = 0;
    for (done = 0; !done;) {
      const size_t before = stepped.ids.size();
      ASSERT_EQ(vkspec_step(ctx.c, &done), VKSPEC_OK) << vkspec_last_error();
      ++steps;
      most = std::max(most, stepped.ids.size() - before);
      if (stepped.ids.empty()) ++prefill_steps;
    }
    EXPECT_EQ(stepped.ids, all.ids) << "speculative " << speculative;
    EXPECT_LE(most, speculative ? 5u : 1u);
    EXPECT_GE(steps, speculative ? 2 : 40);
    vkspec_metrics m{};
    ASSERT_EQ(vkspec_get_metrics(ctx.c, &m), VKSPEC_OK);
    EXPECT_GE(prefill_steps, int((m.prefilled_tokens + 15) / 16));   // one 16-token chunk per step
    EXPECT_EQ(vkspec_step(ctx.c, &done), VKSPEC_ERROR_INVALID_ARGUMENT);   // ended
  }
}

// vkspec_context_warm_up (a loading screen's call) keeps the context's cached tokens and the drafter's: a
// conversation's next turn after it reuses the cache as it would without it, with the same tokens, with a
// draft model too; it is refused during a generation.
TEST(CApi, WarmUpKeepsTheCachesAndTheTokens) {
  Model model(shared("models/pycode-target-f16.gguf"), 2);
  const std::string draft_path = shared("models/pycode-draft-f16.gguf");
  vkspec_context_params p = Ctx::greedy();
  p.draft.model = draft_path.c_str();
  p.draft.max = 4;
  const std::vector<int32_t> turn = tokenize(model.m, "def total(values):\n");
  // Two turns (the second's prompt extends the first's text); warm-ups before and between them, or none.
  auto conversation = [&](bool warm) {
    Ctx ctx(model.m, p);
    if (warm) {
      EXPECT_EQ(vkspec_context_warm_up(ctx.c), VKSPEC_OK) << vkspec_last_error();
    }
    Streamed first, second;
    EXPECT_EQ(generate(ctx.c, turn, 12, first, 1), VKSPEC_OK) << vkspec_last_error();
    if (warm) {
      EXPECT_EQ(vkspec_context_warm_up(ctx.c), VKSPEC_OK) << vkspec_last_error();
    }
    std::vector<int32_t> next = turn;
    next.insert(next.end(), first.ids.begin(), first.ids.end());
    EXPECT_EQ(generate(ctx.c, next, 12, second, 1), VKSPEC_OK) << vkspec_last_error();
    vkspec_metrics m{};
    EXPECT_EQ(vkspec_get_metrics(ctx.c, &m), VKSPEC_OK);
    first.ids.insert(first.ids.end(), second.ids.begin(), second.ids.end());
    return std::tuple{first.ids, m.reused_tokens, m.drafted, m.accepted};
  };
  const auto cold = conversation(false), warm = conversation(true);
  EXPECT_EQ(std::get<0>(warm), std::get<0>(cold));
  EXPECT_EQ(std::get<1>(warm), std::get<1>(cold));
  EXPECT_GE(std::get<1>(warm), turn.size());   // the first turn's tokens were kept through the warm-up
  EXPECT_EQ(std::get<2>(warm), std::get<2>(cold));   // and the drafter's: the same drafts, the same verdicts
  EXPECT_EQ(std::get<3>(warm), std::get<3>(cold));
  Ctx busy(model.m, p);
  Streamed s;
  const vkspec_generate_params g = streamed_params(4, s, 0);
  ASSERT_EQ(vkspec_begin(busy.c, turn.data(), turn.size(), &g), VKSPEC_OK);
  EXPECT_EQ(vkspec_context_warm_up(busy.c), VKSPEC_ERROR_BUSY);
  for (int32_t done = 0; !done;) ASSERT_EQ(vkspec_step(busy.c, &done), VKSPEC_OK);
}

// Submit now, collect later (vkspec_step_submit / poll / wait): the tokens are exactly the blocking
// generation's, plain and speculative (n-gram, draft model), greedy and sampled with a seed, collected by
// polling or by waiting; the calls' misuse is refused; a second context of the model cannot submit while a
// unit is in flight, and can once it is collected; a cancel between prompt parts ends the generation and
// leaves the model free (run_async: tests/c_api_helpers.h).
TEST(CApi, AsynchronousStepsGiveTheBlockingTokens) {
  Model model(shared("models/pycode-target-f16.gguf"), 2, 0, 16);
  const std::vector<int32_t> prompt =
      tokenize(model.m, "for i in range(10):\n    print(i)\nfor j in range(20):\n    print(j)\nfor k in range(30):\n    print(k)\n");
  vkspec_context_params sampled = vkspec_context_default_params();
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.seed = 5;
  struct Setting {
    const char* name;
    vkspec_context_params p;
  };
  std::vector<Setting> settings = {{"greedy", Ctx::greedy()}, {"sampled", sampled}};
  for (const vkspec_context_params& base : {Ctx::greedy(), sampled}) {
    vkspec_context_params ngram = base;
    ngram.draft.ngram = 1;
    ngram.draft.max = 4;
    settings.push_back({base.sampling.temperature > 0 ? "sampled, n-gram" : "greedy, n-gram", ngram});
  }
  const std::string draft_path = shared("models/pycode-draft-f16.gguf");
  vkspec_context_params with_model = Ctx::greedy();
  with_model.draft.model = draft_path.c_str();
  with_model.draft.max = 4;
  settings.push_back({"greedy, draft model", with_model});
  for (const Setting& setting : settings) {
    Ctx ctx(model.m, setting.p);
    for (int speculative : {0, 1}) {
      Streamed blocking;
      ASSERT_EQ(generate(ctx.c, prompt, 40, blocking, speculative), VKSPEC_OK) << vkspec_last_error();
      for (bool poll_only : {true, false}) {
        Streamed async;
        const vkspec_generate_params g = streamed_params(40, async, speculative);
        Streamed flush;   // another prompt first, so that the prompt is prefilled again, in parts
        ASSERT_EQ(generate(ctx.c, tokenize(model.m, "x = 1"), 2, flush), VKSPEC_OK);
        ASSERT_EQ(vkspec_begin(ctx.c, prompt.data(), prompt.size(), &g), VKSPEC_OK) << vkspec_last_error();
        int units = 0, polls = 0;
        ASSERT_EQ(run_async(ctx.c, poll_only, &units, &polls), VKSPEC_OK) << setting.name << ": " << vkspec_last_error();
        EXPECT_EQ(async.ids, blocking.ids) << setting.name << ", speculative " << speculative << ", poll " << poll_only;
        EXPECT_GE(units, speculative ? 4 : 40) << setting.name;   // prompt parts and one unit per step
        EXPECT_GE(polls, units);
        vkspec_metrics m{};
        ASSERT_EQ(vkspec_get_metrics(ctx.c, &m), VKSPEC_OK);
        EXPECT_EQ(m.generated_tokens, 40u);
      }
    }
  }
}

TEST(CApi, AsynchronousStepsMisuseBusyAndCancel) {
  Model model(shared("models/pycode-target-f16.gguf"), 3, 0, 16);
  std::string text;
  for (int i = 0; i < 12; ++i) text += "total_" + std::to_string(i) + " = compute(values[" + std::to_string(i) + "])\n";
  const std::vector<int32_t> prompt = tokenize(model.m, text);
  ASSERT_GT(prompt.size(), 64u);
  Ctx a(model.m), b(model.m);
  int32_t done = 0, ready = 0;
  EXPECT_EQ(vkspec_step_submit(a.c, &done), VKSPEC_ERROR_INVALID_ARGUMENT);   // nothing begun
  Streamed sa, sb;
  vkspec_generate_params ga = vkspec_generate_default_params();
  ga.n_predict = 8;
  ga.on_token = collect;
  ga.user = &sa;
  vkspec_generate_params gb = ga;
  gb.user = &sb;
  ASSERT_EQ(vkspec_begin(a.c, prompt.data(), prompt.size(), &ga), VKSPEC_OK);
  EXPECT_EQ(vkspec_step_poll(a.c, &ready), VKSPEC_ERROR_INVALID_ARGUMENT);   // nothing submitted
  ASSERT_EQ(vkspec_step_submit(a.c, &done), VKSPEC_OK);
  ASSERT_EQ(done, 0);
  EXPECT_EQ(vkspec_step_submit(a.c, &done), VKSPEC_ERROR_BUSY);   // the unit is not collected yet
  // the other context shares the model's buffers: nothing on it until a's unit is collected (this thread
  // submitted that unit: a wait would never end)
  EXPECT_EQ(vkspec_begin(b.c, prompt.data(), prompt.size(), &gb), VKSPEC_ERROR_BUSY);
  Streamed blocked;
  EXPECT_EQ(generate(b.c, prompt, 4, blocked), VKSPEC_ERROR_BUSY);
  // a cancel between prompt parts: the part in flight is collected, the next submit ends the generation
  ASSERT_EQ(vkspec_cancel(a.c), VKSPEC_OK);
  ASSERT_EQ(vkspec_step_wait(a.c, UINT64_MAX, &ready), VKSPEC_OK);
  EXPECT_EQ(ready, 1);
  EXPECT_EQ(vkspec_step_submit(a.c, &done), VKSPEC_ERROR_CANCELLED);
  EXPECT_TRUE(sa.ids.empty());
  EXPECT_EQ(vkspec_step_submit(a.c, &done), VKSPEC_ERROR_INVALID_ARGUMENT);   // ended
  ASSERT_EQ(vkspec_begin(b.c, prompt.data(), prompt.size(), &gb), VKSPEC_OK) << vkspec_last_error();
  // b runs to its end, asynchronously, and gives what a blocking generation gives
  int units = 0, polls = 0;
  ASSERT_EQ(run_async(b.c, false, &units, &polls), VKSPEC_OK) << vkspec_last_error();
  Streamed again;
  ASSERT_EQ(generate(a.c, prompt, 8, again, 0), VKSPEC_OK) << vkspec_last_error();
  EXPECT_EQ(sb.ids.size(), 8u);
  EXPECT_EQ(sb.ids, again.ids);
  // a context freed with a unit in flight waits for it: the model is then free for the other
  ASSERT_EQ(vkspec_begin(b.c, prompt.data(), prompt.size(), &gb), VKSPEC_OK);
  {
    Ctx c(model.m);
    vkspec_generate_params gc = ga;
    Streamed sc;
    gc.user = &sc;
    ASSERT_EQ(vkspec_begin(c.c, prompt.data(), prompt.size(), &gc), VKSPEC_OK);
    ASSERT_EQ(vkspec_step_submit(c.c, &done), VKSPEC_OK);
  }
  EXPECT_EQ(vkspec_step(b.c, &done), VKSPEC_OK) << vkspec_last_error();
}

// A device-time budget per call (vkspec_generate_params.max_device_us) changes no token (plain, and n-gram
// speculation) and cuts each step into releases: no release's device time (the recorder's timestamps, in
// vkspec_metrics) exceeds the budget by more than the costliest group of kernels between two barriers; the
// steps are those without a budget, each in several command buffers. The
// budget is a third of a decoding pass, so that every step is cut. lavapipe's device time moves with the load
// of the suites beside it (ctest -j): the bound is checked with a factor of 2.
TEST(CApi, DeviceBudgetSplitsStepsAndKeepsTheTokens) {
  Model model(shared("models/pycode-target-f16.gguf"), 1, 0, 128);
  std::string text;
  for (int i = 0; i < 30; ++i) text += "    total_" + std::to_string(i) + " += values[" + std::to_string(i) + "]\n";
  const std::vector<int32_t> prompt = tokenize(model.m, text);
  ASSERT_GT(prompt.size(), 256u);
  vkspec_context_params p = Ctx::greedy();
  p.draft.ngram = 1;
  p.draft.max = 8;
  Ctx ctx(model.m, p);
  // Runs the prompt from an empty cache a step at a time: the tokens, the steps before the first one, the metrics.
  struct Run {
    Streamed s;
    int prompt_steps = 0;
    vkspec_metrics m{};
  };
  auto run = [&](int speculative, uint32_t budget_us) {
    Run r;
    EXPECT_EQ(vkspec_context_clear(ctx.c), VKSPEC_OK);
    vkspec_generate_params g = streamed_params(32, r.s, speculative);
    g.max_device_us = budget_us;
    EXPECT_EQ(vkspec_begin(ctx.c, prompt.data(), prompt.size(), &g), VKSPEC_OK) << vkspec_last_error();
    for (int32_t done = 0; !done;) {
      EXPECT_EQ(vkspec_step(ctx.c, &done), VKSPEC_OK) << vkspec_last_error();
      if (r.s.ids.empty()) ++r.prompt_steps;
    }
    EXPECT_EQ(vkspec_get_metrics(ctx.c, &r.m), VKSPEC_OK);
    return r;
  };
  const double one_pass = run(0, 0).m.device_seconds / 31;   // a decoding step's pass (31 after the first token)
  if (one_pass <= 0) GTEST_SKIP() << "the device has no timestamps";
  const double budget = one_pass / 3;
  for (int speculative : {0, 1}) {
    const Run free = run(speculative, 0), held = run(speculative, uint32_t(budget * 1e6));
    EXPECT_EQ(held.s.ids, free.s.ids) << "speculative " << speculative;
    EXPECT_EQ(held.prompt_steps, free.prompt_steps) << "speculative " << speculative;   // the same steps, cut:
    EXPECT_GT(held.m.queue_submissions, held.m.host_waits) << "speculative " << speculative;   // (cbs > steps)
    EXPECT_EQ(free.m.max_release_device_seconds, 0.0);
    const double release = held.m.max_release_device_seconds, group = held.m.max_group_device_seconds;
    EXPECT_GT(group, 0.0);
    EXPECT_LT(release, held.m.max_step_device_seconds) << "speculative " << speculative;
    EXPECT_LE(release, 2 * (budget + group))
        << "speculative " << speculative << ": budget " << budget << " s, costliest group " << group << " s";
  }
}

TEST(CApi, ThreadingRules) {
  Model model(kStories, 2);
  const std::vector<int32_t> prompt = tokenize(model.m, "Once upon a time");
  std::vector<int32_t> want;
  {
    Ctx c(model.m);
    Streamed s;
    ASSERT_EQ(generate(c.c, prompt, 32, s), VKSPEC_OK);
    want = s.ids;
  }
  // Two contexts on one model, two threads at once: each gets the single-threaded result.
  {
    Ctx a(model.m), b(model.m);
    Streamed sa, sb;
    vkspec_status ra = VKSPEC_ERROR_FAILED, rb = VKSPEC_ERROR_FAILED;
    std::thread ta([&] { ra = generate(a.c, prompt, 32, sa); }), tb([&] { rb = generate(b.c, prompt, 32, sb); });
    ta.join();
    tb.join();
    EXPECT_EQ(ra, VKSPEC_OK);
    EXPECT_EQ(rb, VKSPEC_OK);
    EXPECT_EQ(sa.ids, want);
    EXPECT_EQ(sb.ids, want);
    // a third context does not fit max_contexts = 2
    vkspec_context* c3 = nullptr;
    vkspec_context_params p = Ctx::greedy();
    EXPECT_EQ(vkspec_context_create(model.m, &p, &c3), VKSPEC_ERROR_BUSY);
    EXPECT_EQ(c3, nullptr);
    // the model cannot go while contexts live
    EXPECT_EQ(vkspec_model_free(model.m), VKSPEC_ERROR_BUSY);
  }
  // One context from two threads: the second caller gets BUSY, never a shared context.
  Ctx c(model.m);
  struct Gate { std::atomic<bool> inside{false}, release{false}; };
  Gate gate;
  vkspec_generate_params g = vkspec_generate_default_params();
  g.n_predict = 4;
  g.ignore_eos = 1;
  g.user = &gate;
  g.on_token = [](int32_t, const char*, size_t, int32_t, void* u) {
    auto* gt = static_cast<Gate*>(u);
    gt->inside = true;
    while (!gt->release) std::this_thread::yield();
    return 0;
  };
  vkspec_status first = VKSPEC_ERROR_FAILED;
  std::thread t([&] { first = vkspec_generate(c.c, prompt.data(), prompt.size(), &g); });
  while (!gate.inside) std::this_thread::yield();
  Streamed s;
  EXPECT_EQ(generate(c.c, prompt, 4, s), VKSPEC_ERROR_BUSY);
  EXPECT_NE(std::string(vkspec_last_error()).find("in use"), std::string::npos);
  vkspec_metrics m{};
  EXPECT_EQ(vkspec_get_metrics(c.c, &m), VKSPEC_ERROR_BUSY);
  gate.release = true;
  t.join();
  EXPECT_EQ(first, VKSPEC_OK);
}

// Calls on freed handles are errors, not crashes; so are a file that is not GGUF and a draft with another
// vocabulary.
TEST(CApi, FreedHandlesAndBadFilesAreErrors) {
  vkspec_model_params mp = vkspec_model_default_params();
  vkspec_model* m = nullptr;
  const std::string not_gguf = shared("models/README.md");
  EXPECT_EQ(vkspec_model_load(not_gguf.c_str(), &mp, &m), VKSPEC_ERROR_LOAD);
  EXPECT_EQ(m, nullptr);
  ASSERT_EQ(vkspec_model_load(kStories.c_str(), &mp, &m), VKSPEC_OK);
  vkspec_context_params cp = Ctx::greedy();
  const std::string other_vocab = shared("models/pycode-draft-f16.gguf");
  cp.draft.model = other_vocab.c_str();
  vkspec_context* c = nullptr;
  EXPECT_EQ(vkspec_context_create(m, &cp, &c), VKSPEC_ERROR_LOAD);
  EXPECT_NE(std::string(vkspec_last_error()).find("vocabular"), std::string::npos) << vkspec_last_error();
  cp.draft.model = nullptr;
  ASSERT_EQ(vkspec_context_create(m, &cp, &c), VKSPEC_OK);
  ASSERT_EQ(vkspec_context_free(c), VKSPEC_OK);
  const int32_t prompt[] = {1};
  vkspec_generate_params g = vkspec_generate_default_params();
  int32_t done = 0;
  vkspec_metrics met{};
  EXPECT_EQ(vkspec_generate(c, prompt, 1, &g), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("not live"), std::string::npos) << vkspec_last_error();
  EXPECT_EQ(vkspec_step(c, &done), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_cancel(c), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_get_metrics(c, &met), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_context_free(c), VKSPEC_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(vkspec_model_free(m), VKSPEC_OK);
  size_t n = 0;
  EXPECT_EQ(vkspec_tokenize(m, "a", 1, 1, 1, nullptr, 0, &n), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_context_create(m, &cp, &c), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_model_free(m), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_model_n_ctx(m), 0u);
  EXPECT_EQ(vkspec_tokenize(nullptr, "a", 1, 1, 1, nullptr, 0, &n), VKSPEC_ERROR_INVALID_ARGUMENT);
}

TEST(CApi, ChatTemplateAndBadInput) {
  Model model(kStories);
  const char* msgs = R"([{"role": "user", "content": "hi"}])";
  size_t len = 0;
  EXPECT_EQ(vkspec_apply_chat_template(model.m, nullptr, msgs, 1, nullptr, 0, &len), VKSPEC_ERROR_NOT_SUPPORTED);
  std::ifstream in(shared("chat-templates/google-gemma-2-2b-it.jinja"));
  const std::string gemma((std::istreambuf_iterator<char>(in)), {});
  ASSERT_EQ(vkspec_apply_chat_template(model.m, gemma.c_str(), msgs, 1, nullptr, 0, &len), VKSPEC_OK) << vkspec_last_error();
  std::string out(len, '\0');
  char small[8];
  ASSERT_EQ(vkspec_apply_chat_template(model.m, gemma.c_str(), msgs, 1, small, sizeof small, &len), VKSPEC_OK);
  EXPECT_STREQ(small, "<s><sta");   // cut like snprintf, NUL-terminated
  ASSERT_EQ(vkspec_apply_chat_template(model.m, gemma.c_str(), msgs, 1, out.data(), len + 1, &len), VKSPEC_OK);
  EXPECT_EQ(out, "<s><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(vkspec_apply_chat_template(model.m, gemma.c_str(), "not json", 1, nullptr, 0, &len), VKSPEC_ERROR_FAILED);
  EXPECT_NE(std::string(vkspec_last_error()).find("JSON"), std::string::npos);
  // JSON text nested past VKSPEC_MAX_JSON_DEPTH (here 100,000 levels, which would overflow the stack where the
  // value is copied, dumped or destroyed) is refused where it enters: messages, and a schema's const
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string deep_msgs = R"([{"role": "user", "content": "hi", "x": )" + deep + "}]";
  EXPECT_EQ(vkspec_apply_chat_template(model.m, gemma.c_str(), deep_msgs.c_str(), 1, nullptr, 0, &len), VKSPEC_ERROR_FAILED);
  EXPECT_NE(std::string(vkspec_last_error()).find("nests deeper than 64 levels"), std::string::npos) << vkspec_last_error();
  vkspec_context_params deep_schema = vkspec_context_default_params();
  const std::string schema = R"({"const": )" + deep + "}";
  deep_schema.sampling.json_schema = schema.c_str();
  vkspec_context* refused = nullptr;
  EXPECT_EQ(vkspec_context_create(model.m, &deep_schema, &refused), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("the JSON schema: the JSON nests deeper"), std::string::npos) << vkspec_last_error();

  Ctx ctx(model.m);
  const int32_t bad[] = {1, 999999};
  vkspec_generate_params g = vkspec_generate_default_params();
  EXPECT_EQ(vkspec_generate(ctx.c, bad, 2, &g), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_generate(ctx.c, bad, 0, &g), VKSPEC_ERROR_INVALID_ARGUMENT);
  std::vector<int32_t> too_long(vkspec_model_n_ctx(model.m), 1);
  EXPECT_EQ(vkspec_generate(ctx.c, too_long.data(), too_long.size(), &g), VKSPEC_ERROR_INVALID_ARGUMENT);
  vkspec_context* c2 = nullptr;
  vkspec_context_params p = vkspec_context_default_params();
  p.sampling.top_p = 2.0f;
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c2), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("top-p"), std::string::npos);
  p = vkspec_context_default_params();
  EXPECT_EQ(p.sampling.frequency_penalty, 0.0f);   // API version 4's fields default to off
  EXPECT_EQ(p.sampling.presence_penalty, 0.0f);
  p.sampling.presence_penalty = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c2), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("presence-penalty"), std::string::npos);
  p.sampling.presence_penalty = 0.0f;
  p.sampling.frequency_penalty = 1000.0f;
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c2), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("frequency-penalty"), std::string::npos);
  p.sampling.frequency_penalty = 0.0f;
  EXPECT_EQ(p.sampling.n_logit_bias, 0u);
  const int32_t outside[] = {1 << 30};
  const float bias[] = {1.0f};
  p.sampling.logit_bias_tokens = outside;
  p.sampling.logit_bias = bias;
  p.sampling.n_logit_bias = 1;
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c2), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("vocabulary"), std::string::npos);
  p.sampling.logit_bias_tokens = nullptr;   // a count without its arrays
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c2), VKSPEC_ERROR_INVALID_ARGUMENT);
  p.sampling.n_logit_bias = VKSPEC_MAX_LOGIT_BIAS + 1;
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c2), VKSPEC_ERROR_INVALID_ARGUMENT);
  p = vkspec_context_default_params();
  p.draft.model = "/nonexistent-draft.gguf";
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c2), VKSPEC_ERROR_LOAD);
  const int32_t out_of_vocab = 1 << 30;
  EXPECT_EQ(vkspec_detokenize(model.m, &out_of_vocab, 1, nullptr, 0, &len), VKSPEC_ERROR_INVALID_ARGUMENT);
}

}  // namespace
