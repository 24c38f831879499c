// Continuous batching (engine/batch_engine.h): requests decoded together, queued past --parallel, give each
// exactly the tokens of its run alone (Engine::generate, one sequence), greedy and sampled, plain and
// speculative with both drafters; n completions of one prompt share its prefix; cancelled and failing
// requests free their blocks; admission waits for KV blocks instead of failing.
#include "tests/batch_engine_test_env.h"

namespace vkspec::test {
namespace {

TEST_F(BatchEngineTest, EveryRequestGetsTheTokensOfItsRunAlone) {
  auto t = target(5);
  struct Mode { const char* name; std::string draft_model, draft; float temp; };
#ifdef VKSPEC_SANITIZED   // the sanitizer job (several times slower): the plain greedy and the richest mode
  const Mode modes[] = {{"greedy", "", "", 0.0f},
                        {"sampled + draft model", shared_path("models/pycode-draft-f16.gguf"), "", 0.9f}};
#else
  const Mode modes[] = {{"greedy", "", "", 0.0f},
                        {"sampled", "", "", 0.9f},
                        {"mixed settings", "", "", -1.0f},   // greedy, top-k, top-p, penalties side by side
                        {"greedy + ngram", "", "ngram", 0.0f},
                        {"greedy + draft model", shared_path("models/pycode-draft-f16.gguf"), "", 0.0f},
                        {"mixed settings + draft model", shared_path("models/pycode-draft-f16.gguf"), "", -1.0f},
                        {"greedy + lookup, then draft model", shared_path("models/pycode-draft-f16.gguf"), "ngram", 0.0f},
                        {"sampled + draft model", shared_path("models/pycode-draft-f16.gguf"), "", 0.9f},
                        {"sampled + lookup, then draft model", shared_path("models/pycode-draft-f16.gguf"), "ngram", 0.9f}};
#endif
  for (const Mode& mode : modes) {
    SCOPED_TRACE(mode.name);
    DraftOptions o;
    o.model_path = mode.draft_model;
    o.ngram = mode.draft == "ngram";
    o.max = 4;
    Engine solo(t, o);
    BatchEngine batch(t, o, {4, 24});   // 4 at once (6 requests: two wait), small steps: prefill spans steps
    std::vector<Outcome> runs(std::size(kPrompts));
    std::vector<std::vector<uint32_t>> want;
    for (size_t i = 0; i < std::size(kPrompts); ++i) {
      SamplingParams sp;
      sp.temperature = mode.temp;
      sp.seed = 100 + i;
      if (mode.temp < 0) {   // one step samples rows of several settings in one dispatch (and argmax beside)
        sp.temperature = i % 3 == 0 ? 0.0f : 0.7f + 0.1f * float(i);
        sp.top_k = i % 3 == 2 ? 0 : 40;
        sp.top_p = i % 2 ? 0.9f : 1.0f;
        sp.min_p = i == 4 ? 0.05f : 0.0f;
        if (i % 2) { sp.repeat_penalty = 1.2f; sp.repeat_last_n = 16; }   // i = 3: greedy with penalties
        if (i == 3 || i == 5) { sp.frequency_penalty = 0.25f * float(i); sp.presence_penalty = -0.5f; }
      }
      const auto prompt = encode(*t, kPrompts[i]);
      // speculation changes no token, greedy or sampled: half the requests are compared with their run alone
      // speculating, half with their run alone without it
      const bool solo_speculates = solo.drafter() != nullptr && i % 2 == 0;
      want.push_back(solo.generate(prompt, sp, 20 + int(i), true, solo_speculates).ids);
      batch.submit(request(prompt, sp, 20 + uint32_t(i), runs[i]));
    }
    drain(batch);
    for (size_t i = 0; i < runs.size(); ++i) {
      ASSERT_TRUE(runs[i].done) << i;
      EXPECT_EQ(runs[i].result.stop, StopReason::Length) << runs[i].result.error;
      EXPECT_EQ(runs[i].ids, want[i]) << "prompt " << i;
      EXPECT_EQ(runs[i].result.speculative, !mode.draft_model.empty() || !mode.draft.empty());
    }
    const BatchMetrics m = batch.metrics();
    EXPECT_EQ(m.requests_done, runs.size());
    EXPECT_EQ(m.active, 0u);
    EXPECT_EQ(m.kv_blocks_in_use, 0u);   // every block back in the pool
    if (!mode.draft_model.empty() || !mode.draft.empty()) {
      EXPECT_GT(m.drafted, 0u);
    }
    if (auto* both = dynamic_cast<const LookupThenModelDrafter*>(solo.drafter())) {
      // the runs alone drafted from both sources, and the batch's tokens (sampled ones too) are theirs
      EXPECT_GT(both->lookup_rounds(), 0u);
      EXPECT_GT(both->model_rounds(), 0u);
    }
    t->model->kv().check_invariants();
  }
}

// An embedding of a long text runs in parts of a step's rows between the steps of a streaming generation:
// the stream keeps getting tokens while the text is embedded, the generation's tokens are its solo ones,
// and the vectors (last token's and mean) equal a whole embedding on a context of its own, bit for bit; one
// cancelled between its parts ends without a vector and gives its blocks back.
TEST_F(BatchEngineTest, EmbeddingsRunInPartsBesideTheStreams) {
  auto t = target(3);
  Engine solo(t, DraftOptions{});
  std::string text;
  for (int i = 0; text.size() < 420; ++i) text += "def f" + std::to_string(i) + "(x):\n    return x * " + std::to_string(i) + "\n";
  const std::vector<uint32_t> long_text = encode(*t, text);
  ASSERT_GT(long_text.size(), 160u);
  ASSERT_LT(long_text.size(), 256u);
  Session session = solo.open_session();
  const std::vector<float> want_last = solo.embed(session, long_text, LlamaModel::Pooling::Last, false);
  const std::vector<float> want_mean = solo.embed(session, long_text, LlamaModel::Pooling::Mean, false);
  solo.close_session(session);
  SamplingParams greedy;
  const std::vector<uint32_t> prompt = encode(*t, kPrompts[0]);
  const std::vector<uint32_t> want_ids = solo.generate(prompt, greedy, 60, true, false).ids;

  BatchEngine batch(t, DraftOptions{}, {3, 24});   // embeddings: max(24 rows, a chunk) tokens per step
  std::vector<char> events;   // 'g': a generated token, 'L' / 'M': an embedding delivered
  Outcome gen;
  auto g = request(prompt, greedy, 60, gen);
  g->on_token = [&](uint32_t id, bool, const float*) {
    gen.ids.push_back(id);
    events.push_back('g');
    return true;
  };
  batch.submit(g);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(batch.step());   // the generation is decoding
  std::vector<float> got_last, got_mean;
  std::vector<SequenceResult> embed_results;
  for (const auto pooling : {LlamaModel::Pooling::Last, LlamaModel::Pooling::Mean}) {
    auto e = std::make_shared<BatchRequest>();
    e->prompt = long_text;
    e->embed = pooling;
    e->on_embedding = [&, pooling](std::vector<float> v) {
      (pooling == LlamaModel::Pooling::Last ? got_last : got_mean) = std::move(v);
      events.push_back(pooling == LlamaModel::Pooling::Last ? 'L' : 'M');
    };
    e->on_done = [&](const SequenceResult& r) { embed_results.push_back(r); };
    batch.submit(e);
  }
  const size_t submitted_at = events.size();
  drain(batch);
  ASSERT_TRUE(gen.done);
  EXPECT_EQ(gen.ids, want_ids);
  ASSERT_EQ(embed_results.size(), 2u);
  for (const SequenceResult& r : embed_results) EXPECT_EQ(r.stop, StopReason::Embedded) << r.error;
  EXPECT_EQ(got_last, want_last);
  EXPECT_EQ(got_mean, want_mean);
  // both texts (~2 x 200 tokens at 24 per step) took several steps, each of which decoded a token
  const auto first_vector = std::find_if(events.begin() + long(submitted_at), events.end(), [](char c) { return c != 'g'; });
  EXPECT_GE(first_vector - (events.begin() + long(submitted_at)), 5) << std::string(events.begin(), events.end());
  EXPECT_EQ(batch.metrics().kv_blocks_in_use, 0u);
  t->model->kv().check_invariants();

  // Cancelled between two parts: no vector, "cancelled", its blocks back in the pool.
  auto e = std::make_shared<BatchRequest>();
  e->prompt = long_text;
  e->embed = LlamaModel::Pooling::Last;
  bool delivered = false;
  StopReason reason = StopReason::None;
  e->on_embedding = [&](std::vector<float>) { delivered = true; };
  e->on_done = [&](const SequenceResult& r) { reason = r.stop; };
  batch.submit(e);
  ASSERT_TRUE(batch.step());
  ASSERT_TRUE(batch.step());
  EXPECT_EQ(reason, StopReason::None);   // (two parts of 24 tokens: still running)
  e->cancelled = true;
  drain(batch);
  EXPECT_EQ(reason, StopReason::Cancelled);
  EXPECT_FALSE(delivered);
  EXPECT_EQ(batch.metrics().kv_blocks_in_use, 0u);
  t->model->kv().check_invariants();
}

TEST_F(BatchEngineTest, CompletionsOfOnePromptPrefillItOnceAndShareItsBlocks) {
  auto t = target(4);
  BatchEngine batch(t, {}, {4, 64});
  const auto& tok = batch.tokenizer();
  std::string text;
  for (int i = 0; i < 12; ++i) text += "    value_" + std::to_string(i) + " = compute(items[" + std::to_string(i) + "])\n";
  const std::vector<uint32_t> prompt = tok.encode(text, true, true);
  ASSERT_GT(prompt.size(), 100u);
  const uint32_t L = uint32_t(prompt.size()), bs = t->model->kv().block_size();
  std::vector<Outcome> runs(4);
  for (uint32_t i = 0; i < 4; ++i) {
    SamplingParams sp;
    sp.seed = i;   // different draws, one prompt
    batch.submit(request(prompt, sp, 8, runs[i]));
  }
  drain(batch);
  const BatchMetrics m = batch.metrics();
  // The prompt once, then only each completion's last prompt token (its logits choose its first token).
  EXPECT_EQ(m.prefilled_tokens, L + 3);
  EXPECT_EQ(m.shared_tokens, 3 * (L - 1));
  // Blocks: the prompt's once; each sharer copies the partial block it writes into (or starts a new one)
  // and takes the blocks its 8 tokens need.
  const uint32_t prompt_blocks = (L + bs - 1) / bs;
  EXPECT_LE(m.kv_blocks_allocated, prompt_blocks + 3 * (1 + (8 + bs - 1) / bs) + 1);
  for (const Outcome& r : runs) {
    EXPECT_EQ(r.result.stop, StopReason::Length);
    EXPECT_EQ(r.ids.size(), 8u);
  }
  EXPECT_EQ(runs[1].result.reused, L - 1);
  EXPECT_EQ(m.kv_blocks_in_use, 0u);
}

// After warm_up no step creates a pipeline: greedy and sampled requests on both models, speculative rounds
// of every K the policy picks, prompts prefilled in chunks beside them (passes of many widths). The
// warm-up's scratch sequences are gone again.
TEST_F(BatchEngineTest, WarmUpCreatesEveryPipelineTheStepsUse) {
  auto t = target(4);
  DraftOptions o;
  o.model_path = shared_path("models/pycode-draft-f16.gguf");
  o.ngram = true;
  o.max = 6;
  BatchEngine batch(t, o, {4, 24});
  const size_t loaded = t->pipelines->created();
  batch.warm_up();
  const size_t warm = t->pipelines->created();
  // How many pipelines that is depends on the family: the row-per-lane family builds one per tile width (1..8
  // tokens, two models: more than 16), a GPU's subgroup tiles one width for every multi-token pass (9 on an
  // H200). That every pipeline the steps use was among them is the check after the run.
  EXPECT_GT(warm, loaded) << "the warm-up ran passes of several widths";
  EXPECT_EQ(t->model->kv().blocks_in_use(), 0u);
  std::vector<Outcome> runs(std::size(kPrompts));
  for (size_t i = 0; i < std::size(kPrompts); ++i) {
    SamplingParams sp;
    sp.temperature = i % 2 ? 0.8f : 0.0f;
    sp.seed = i;
    batch.submit(request(encode(*t, kPrompts[i]), sp, 24 + 4 * uint32_t(i), runs[i]));
  }
  drain(batch);
  for (const Outcome& r : runs) EXPECT_EQ(r.result.stop, StopReason::Length) << r.result.error;
  EXPECT_GT(batch.metrics().drafted, 0u);
  EXPECT_EQ(t->pipelines->created(), warm);
  EXPECT_EQ(batch.metrics().kv_blocks_in_use, 0u);
  t->model->kv().check_invariants();
}

TEST_F(BatchEngineTest, AdmissionWaitsForBlocksAndCancelledRequestsFreeThem) {
  // A pool of 40 blocks (640 tokens) with 4 sequences: requests reserving 17 blocks each run two at a time.
  auto t = target(4, 40);
  BatchEngine batch(t, {}, {4, 64});
  SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<Outcome> runs(5);
  const auto prompt = batch.tokenizer().encode("def f(x):\n", true, true);
  for (size_t i = 0; i < runs.size(); ++i) batch.submit(request(prompt, greedy, 240, runs[i]));
  batch.step();
  BatchMetrics m = batch.metrics();
  EXPECT_EQ(m.active, 2u);
  EXPECT_EQ(m.queued, 3u);
  drain(batch);
  for (const Outcome& r : runs) {
    EXPECT_TRUE(r.done);
    EXPECT_EQ(r.result.stop, StopReason::Length);
    EXPECT_EQ(r.ids, runs[0].ids);   // the same prompt alone or with others: the same tokens
  }
  Outcome a, b;
  auto ra = request(prompt, greedy, 240, a), rb = request(prompt, greedy, 240, b);
  batch.submit(ra);
  batch.submit(rb);
  batch.step();
  batch.step();
  ra->cancelled = true;
  batch.step();
  EXPECT_TRUE(a.done);
  EXPECT_EQ(a.result.stop, StopReason::Cancelled);
  EXPECT_LT(a.ids.size(), 240u);
  drain(batch);
  EXPECT_EQ(b.result.stop, StopReason::Length);
  m = batch.metrics();
  EXPECT_EQ(m.kv_blocks_in_use, 0u);
  EXPECT_EQ(m.active, 0u);
  // A request that can never fit is refused at once.
  Outcome c;
  EXPECT_THROW(batch.submit(request(std::vector<uint32_t>(300, 5), greedy, 4, c)), Error);
  auto huge = request(prompt, greedy, 4, c);
  huge->prompt.assign(200, 5);
  huge->max_tokens = 1000;   // 200 + up to the context: 16 blocks, fits
  EXPECT_NO_THROW(batch.submit(huge));
  drain(batch);
  EXPECT_EQ(c.result.stop, StopReason::Context);
}

// The threading contract (engine/batch_engine.h): submit() and metrics() from any thread while the engine
// thread runs; cancel from another thread; callbacks on the engine thread. Run under ThreadSanitizer by
// scripts/tsan.sh.
TEST_F(BatchEngineTest, SubmittersOnManyThreadsWhileTheEngineRuns) {
  auto t = target(4);
  BatchEngine batch(t, {}, {4, 32});
  SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<std::vector<uint32_t>> prompts;
  for (const char* p : kPrompts) prompts.push_back(batch.tokenizer().encode(p, true, true));
  // Alone first (the engine stepped on this thread), then from four threads at once.
  std::vector<Outcome> alone(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    batch.submit(request(prompts[i], greedy, 10, alone[i]));
    drain(batch);
  }
  std::atomic<bool> stop{false};
  std::thread engine([&] { batch.run(stop); });
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Outcome> together(prompts.size() * 2);
  std::atomic<int> finished{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c)
    clients.emplace_back([&, c] {
      for (size_t k = size_t(c); k < together.size(); k += 4) {
        Outcome& out = together[k];
        auto r = std::make_shared<BatchRequest>();
        r->prompt = prompts[k % prompts.size()];
        r->sp = greedy;
        r->max_tokens = 10;
        r->ignore_eos = true;
        r->on_token = [&out](uint32_t tok, bool, const float*) {
          out.ids.push_back(tok);   // engine thread; read after on_done under mu
          return true;
        };
        r->on_done = [&](const SequenceResult& res) {
          std::lock_guard<std::mutex> lock(mu);
          out.result = res;
          out.done = true;
          finished++;
          cv.notify_all();
        };
        batch.submit(r);
        (void)batch.metrics();
      }
    });
  // A request cancelled from this thread while the others run.
  Outcome cancelled;
  auto victim = request(prompts[0], greedy, 200, cancelled);
  auto done = victim->on_done;
  victim->on_done = [&](const SequenceResult& res) {
    std::lock_guard<std::mutex> lock(mu);
    done(res);
    cv.notify_all();
  };
  batch.submit(victim);
  victim->cancelled = true;
  for (auto& c : clients) c.join();
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(300), [&] { return finished == int(together.size()) && cancelled.done; }));
  }
  stop = true;
  batch.wake();
  engine.join();
  for (size_t k = 0; k < together.size(); ++k) {
    EXPECT_EQ(together[k].result.stop, StopReason::Length);
    EXPECT_EQ(together[k].ids, alone[k % prompts.size()].ids) << k;
  }
  EXPECT_EQ(cancelled.result.stop, StopReason::Cancelled);
  EXPECT_EQ(batch.metrics().kv_blocks_in_use, 0u);
}

}  // namespace
}  // namespace vkspec::test
