// The C API (include/vkspec.h) over the Engine: contexts, generation, scoring and embeddings (the library,
// devices and models: engine/c_api_model.cpp; batches: engine/c_api_batch.cpp). No C++ type or exception
// crosses it. Every entry point runs inside api_call(), which turns exceptions into a status and the
// thread's last error message.
#include "engine/c_api_internal.h"
#include "text/prompt.h"

using namespace vkspec;
using namespace vkspec::capi;

struct vkspec_context {
  vkspec_model* model = nullptr;
  std::unique_ptr<Engine> engine;
  Session session;
  SamplingParams sp;
  std::atomic<bool> cancel{false};
  std::atomic<bool> in_use{false};   // one thread at a time; a second gets VKSPEC_ERROR_BUSY
  vkspec_metrics metrics{};
  vkspec_generate_params params{};   // of the generation in progress (its callback)
  Utf8Stream utf8;                   // its text pieces
};

namespace vkspec::capi {
thread_local std::string t_last_error;
std::mutex g_handles_mutex;
std::unordered_set<const void*> g_models, g_contexts, g_batches;
}  // namespace vkspec::capi

namespace {
// Claims a context for the calling thread for the scope (one thread at a time).
struct Claim {
  vkspec_context* c;
  explicit Claim(vkspec_context* ctx) : c(ctx) {
    std::lock_guard<std::mutex> lock(g_handles_mutex);
    check_live(g_contexts, c, "context");
    if (c->in_use.exchange(true)) throw Failure{VKSPEC_ERROR_BUSY, "the context is in use by another thread"};
  }
  ~Claim() { c->in_use.store(false); }
};
}  // namespace

namespace vkspec::capi {
static_assert(VKSPEC_MAX_JSON_DEPTH == kMaxJsonDepth, "include/vkspec.h and core/json_text.h");
static_assert(VKSPEC_MAX_LOGIT_BIAS == SamplingParams::kMaxLogitBias &&
                  VKSPEC_LOGIT_BIAS_BOUND == SamplingParams::kLogitBiasBound,
              "the C API's logit bias bounds are the sampler's");
vkspec_sampling_params default_sampling() {
  vkspec_sampling_params s{};
  s.temperature = 0.8f;
  s.top_k = 40;
  s.top_p = 0.95f;
  s.min_p = 0.05f;
  s.repeat_penalty = 1.0f;
  s.repeat_last_n = 64;
  s.seed = 0;
  s.frequency_penalty = 0.0f;
  s.presence_penalty = 0.0f;
  s.logit_bias_tokens = nullptr;
  s.logit_bias = nullptr;
  s.n_logit_bias = 0;
  s.json_object = 0;
  s.grammar = nullptr;
  s.json_schema = nullptr;
  s.grammar_trigger = nullptr;
  s.spec_sampling = VKSPEC_SPEC_SAMPLING_COUPLED;
  return s;
}
vkspec_draft_params default_draft() {
  vkspec_draft_params d{};
  d.model = nullptr;
  d.ngram = 0;
  d.max = 5;
  d.adaptive = 1;
  d.min = 0;
  d.p_min = 0.0f;
  d.tree = 1;
  return d;
}
}  // namespace vkspec::capi

extern "C" {

vkspec_context_params vkspec_context_default_params(void) {
  vkspec_context_params p{};
  p.draft = default_draft();
  p.sampling = default_sampling();
  return p;
}

vkspec_status vkspec_context_create(vkspec_model* model, const vkspec_context_params* params, vkspec_context** out) {
  return api_call([&] {
    ModelUse use(model);
    require(params && out, "a null argument");
    *out = nullptr;
    if (!model->target->model)
      throw Failure{VKSPEC_ERROR_NOT_SUPPORTED, "the model was loaded vocab_only: it has no contexts"};
    const DraftOptions o = draft_options(params->draft);
    auto c = std::make_unique<vkspec_context>();
    c->model = model;
    c->sp = sampling_params(params->sampling, model->target->tok->n_vocab());
    c->engine = std::make_unique<Engine>(model->target, o);
    c->engine->set_cancel_flag(&c->cancel);
    try {
      c->session = c->engine->open_session();
    } catch (const Error&) {
      throw Failure{VKSPEC_ERROR_BUSY, "the model's contexts are all in use (vkspec_model_params.max_contexts = " +
                                           std::to_string(model->max_contexts) + ")"};
    }
    model->contexts++;
    std::lock_guard<std::mutex> lock(g_handles_mutex);
    g_contexts.insert(c.get());
    *out = c.release();
  }, VKSPEC_ERROR_LOAD);
}

vkspec_status vkspec_context_free(vkspec_context* ctx) {
  return api_call([&] {
    if (!ctx) return;
    {
      Claim claim(ctx);
      {
        std::lock_guard<std::mutex> lock(g_handles_mutex);
        g_contexts.erase(ctx);   // from here on, other calls see a dead handle
      }
      ctx->engine->close_session(ctx->session);
      ctx->engine.reset();
      ctx->model->contexts--;
    }
    delete ctx;
  });
}

vkspec_status vkspec_context_get_info(const vkspec_context* ctx, vkspec_context_info* out) {
  return api_call([&] {
    require(out != nullptr, "out is null");
    Claim claim(const_cast<vkspec_context*>(ctx));
    *out = vkspec_context_info{};
    const Engine& e = *ctx->engine;
    copy_field(out->drafter, drafter_name(e.drafter_kind()));
    out->load_seconds = e.load_s();
    out->cached_tokens = uint32_t(ctx->session.tokens.size());
  });
}

vkspec_status vkspec_context_warm_up(vkspec_context* ctx) {
  return api_call([&] {
    Claim claim(ctx);
    if (ctx->engine->running()) throw Failure{VKSPEC_ERROR_BUSY, "a generation is in progress on this context"};
    ctx->engine->warm_up(ctx->session);
  });
}

vkspec_status vkspec_context_clear(vkspec_context* ctx) {
  return api_call([&] {
    Claim claim(ctx);
    if (ctx->engine->running()) throw Failure{VKSPEC_ERROR_BUSY, "a generation is in progress on this context"};
    ctx->engine->clear_session(ctx->session);
  });
}

vkspec_status vkspec_context_save(vkspec_context* ctx, const char* path) {
  return api_call([&] {
    Claim claim(ctx);
    require(path != nullptr, "a null path");
    if (ctx->engine->running()) throw Failure{VKSPEC_ERROR_BUSY, "a generation is in progress on this context"};
    ctx->engine->save_session(ctx->session, path);
  });
}

vkspec_status vkspec_context_load(vkspec_context* ctx, const char* path) {
  return api_call([&] {
    Claim claim(ctx);
    require(path != nullptr, "a null path");
    if (ctx->engine->running()) throw Failure{VKSPEC_ERROR_BUSY, "a generation is in progress on this context"};
    try {
      ctx->engine->load_session(ctx->session, path);
    } catch (const Error& e) {
      throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, e.what()};
    }
  });
}

vkspec_generate_params vkspec_generate_default_params(void) {
  vkspec_generate_params p{};
  p.n_predict = -1;
  p.ignore_eos = 0;
  p.speculative = 1;
  return p;
}

namespace {

// Sets a generation up on a claimed context (vkspec_begin, vkspec_generate).
void begin_generation(vkspec_context* ctx, const int32_t* prompt, size_t n_prompt, const vkspec_generate_params* params) {
  require(params && prompt && n_prompt > 0, "a null argument or an empty prompt");
  Engine& e = *ctx->engine;
  if (e.running()) throw Failure{VKSPEC_ERROR_BUSY, "a generation is in progress on this context: step it to the end"};
  const uint32_t n_vocab = e.tokenizer().n_vocab(), n_ctx = e.model().n_ctx();
  const std::vector<uint32_t> ids = checked_ids(prompt, n_prompt, n_vocab, "a prompt token");
  if (n_prompt >= n_ctx)
    throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, "the prompt is " + std::to_string(n_prompt) +
                                                     " tokens and the context holds " + std::to_string(n_ctx)};
  ctx->params = *params;
  ctx->utf8 = Utf8Stream();
  e.set_prefill_one_submission(params->prefill_one_submission != 0);
  e.set_device_budget(double(params->max_device_us) * 1e-6);
  const vkspec_generate_params& p = ctx->params;
  const int n = p.n_predict > 0 ? p.n_predict : int(n_ctx);
  e.begin(ctx->session, ids, ctx->sp, n, p.ignore_eos != 0, p.speculative != 0, [ctx](uint32_t id, bool from_draft) {
    const vkspec_generate_params& q = ctx->params;
    if (!q.on_token) return true;
    const std::string piece = ctx->utf8.push(ctx->engine->tokenizer().piece(id));
    return q.on_token(int32_t(id), piece.c_str(), piece.size(), from_draft, q.user) == 0;
  });
}

void end_generation(vkspec_context* ctx);

// One step on a claimed context (a step submitted asynchronously is collected first); at the end, the
// metrics (and CANCELLED when vkspec_cancel stopped it).
void step_generation(vkspec_context* ctx, int32_t* done) {
  Engine& e = *ctx->engine;
  if (!e.running()) throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, "no generation was begun on this context"};
  *done = 0;
  if (e.step_pending()) e.collect(UINT64_MAX);
  else if (!e.step()) {
    *done = 1;
    end_generation(ctx);
  }
}

// The generation has ended: its result, the last piece, the metrics (and CANCELLED when vkspec_cancel
// stopped it).
void end_generation(vkspec_context* ctx) {
  Engine& e = *ctx->engine;
  const SequenceResult c = e.finish();
  const std::string tail = ctx->utf8.finish();   // an unfinished UTF-8 sequence at the end: U+FFFD
  if (!tail.empty() && ctx->params.on_token) ctx->params.on_token(-1, tail.c_str(), tail.size(), 0, ctx->params.user);
  ctx->cancel.store(false);
  vkspec_metrics& m = ctx->metrics;
  m = vkspec_metrics{};
  m.prompt_tokens = c.reused + c.prefilled;
  m.reused_tokens = c.reused;
  m.prefilled_tokens = c.prefilled;
  m.generated_tokens = c.ids.size();
  m.prefill_seconds = c.prefill_s;
  m.decode_seconds = c.decode_s;
  m.prefill_tokens_per_second = c.prefill_s > 0 ? double(c.prefilled) / c.prefill_s : 0.0;
  m.decode_tokens_per_second = c.decode_tok_s();
  m.drafted = c.spec.drafted;
  m.accepted = c.spec.accepted;
  m.verify_passes = c.spec.verify_passes;
  m.acceptance_rate = c.spec.acceptance_rate();
  m.host_waits = c.decode_submissions;
  m.dispatches = c.decode_dispatches;
  m.queue_submissions = c.decode_parts;
  m.device_seconds = c.decode_gpu_s;
  m.round_tokens = c.spec.tokens;
  m.tree_rounds = c.spec.tree_rounds;
  static_assert(std::size(vkspec_metrics{}.drafted_at_depth) == std::tuple_size_v<decltype(SpeculativeStats::drafted_at)>);
  for (size_t d = 0; d < std::size(m.drafted_at_depth); ++d)
    m.drafted_at_depth[d] = c.spec.drafted_at[d], m.accepted_at_depth[d] = c.spec.accepted_at[d];
  m.max_step_device_seconds = c.max_unit_gpu_s;
  m.max_release_device_seconds = c.max_release_gpu_s;
  m.max_group_device_seconds = c.max_group_gpu_s;
  m.prefill_pipeline_seconds = c.prefill_pipelines_s;
  m.decode_pipeline_seconds = c.decode_pipelines_s;
  copy_field(m.stop_reason, stop_reason_name(c.stop));
  if (c.stop == StopReason::Cancelled) throw Failure{VKSPEC_ERROR_CANCELLED, "cancelled by vkspec_cancel()"};
}

// Collects a submitted step within timeout_ns: *ready = 1 when it was (its tokens delivered).
void collect_step(vkspec_context* ctx, uint64_t timeout_ns, int32_t* ready) {
  Engine& e = *ctx->engine;
  if (!e.running() || !e.step_pending())
    throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, "no step was submitted on this context (vkspec_step_submit)"};
  *ready = e.collect(timeout_ns) ? 1 : 0;
}

}  // namespace

vkspec_status vkspec_begin(vkspec_context* ctx, const int32_t* prompt, size_t n_prompt, const vkspec_generate_params* params) {
  return api_call([&] {
    Claim claim(ctx);
    begin_generation(ctx, prompt, n_prompt, params);
  });
}

vkspec_status vkspec_step(vkspec_context* ctx, int32_t* done) {
  return api_call([&] {
    require(done != nullptr, "done is null");
    Claim claim(ctx);
    step_generation(ctx, done);
  });
}

vkspec_status vkspec_step_submit(vkspec_context* ctx, int32_t* done) {
  return api_call([&] {
    require(done != nullptr, "done is null");
    Claim claim(ctx);
    Engine& e = *ctx->engine;
    if (!e.running()) throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, "no generation was begun on this context"};
    if (e.step_pending())
      throw Failure{VKSPEC_ERROR_BUSY, "a step is in flight: collect it first (vkspec_step_poll, vkspec_step_wait)"};
    *done = 0;
    if (!e.submit(/*wait_for_model=*/false)) {
      *done = 1;
      end_generation(ctx);
    }
  });
}

vkspec_status vkspec_step_poll(vkspec_context* ctx, int32_t* ready) {
  return api_call([&] {
    require(ready != nullptr, "ready is null");
    Claim claim(ctx);
    collect_step(ctx, 0, ready);
  });
}

vkspec_status vkspec_step_wait(vkspec_context* ctx, uint64_t timeout_ns, int32_t* ready) {
  return api_call([&] {
    require(ready != nullptr, "ready is null");
    Claim claim(ctx);
    collect_step(ctx, timeout_ns, ready);
  });
}

vkspec_status vkspec_generate(vkspec_context* ctx, const int32_t* prompt, size_t n_prompt,
                              const vkspec_generate_params* params) {
  return api_call([&] {
    Claim claim(ctx);
    begin_generation(ctx, prompt, n_prompt, params);
    for (int32_t done = 0; !done;) step_generation(ctx, &done);
  });
}

vkspec_status vkspec_cancel(vkspec_context* ctx) {
  return api_call([&] {
    std::lock_guard<std::mutex> lock(g_handles_mutex);   // (the context cannot be freed meanwhile)
    check_live(g_contexts, ctx, "context");
    ctx->cancel.store(true);
  });
}

vkspec_status vkspec_score(vkspec_context* ctx, const int32_t* tokens, size_t n_tokens, size_t first, double* logprobs) {
  return api_call([&] {
    Claim claim(ctx);
    require(tokens && logprobs, "a null argument");
    Engine& e = *ctx->engine;
    if (e.running()) throw Failure{VKSPEC_ERROR_BUSY, "a generation is in progress on this context"};
    const uint32_t n_vocab = e.tokenizer().n_vocab(), n_ctx = e.model().n_ctx();
    require(first >= 1 && first < n_tokens && n_tokens <= n_ctx, "score needs 1 <= first < n_tokens <= the context");
    const auto lp = e.score(ctx->session, checked_ids(tokens, n_tokens, n_vocab), first);
    ctx->cancel.store(false);
    if (!lp) throw Failure{VKSPEC_ERROR_CANCELLED, "cancelled by vkspec_cancel()"};
    std::copy(lp->begin(), lp->end(), logprobs);
  });
}

vkspec_status vkspec_embed(vkspec_context* ctx, const int32_t* tokens, size_t n_tokens, int32_t pooling,
                           int32_t normalize, float* out, size_t capacity) {
  return api_call([&] {
    Claim claim(ctx);
    require(tokens && out, "a null argument");
    Engine& e = *ctx->engine;
    if (e.running()) throw Failure{VKSPEC_ERROR_BUSY, "a generation is in progress on this context"};
    require(pooling == VKSPEC_POOLING_LAST || pooling == VKSPEC_POOLING_MEAN, "pooling must be VKSPEC_POOLING_LAST or _MEAN");
    require(normalize == 0 || normalize == 1, "normalize must be 0 or 1");
    const uint32_t n_vocab = e.tokenizer().n_vocab(), n_embd = e.model().hparams().dim;
    require(capacity >= n_embd, "out holds fewer floats than vkspec_model_n_embd()");
    require(n_tokens >= 1 && n_tokens <= e.model().n_ctx(), "an embedding needs 1 <= n_tokens <= the context");
    const auto v = e.embed(ctx->session, checked_ids(tokens, n_tokens, n_vocab), pooling == VKSPEC_POOLING_MEAN ? LlamaModel::Pooling::Mean : LlamaModel::Pooling::Last,
                           normalize == 1);
    std::copy(v.begin(), v.end(), out);
  });
}

vkspec_status vkspec_get_metrics(const vkspec_context* ctx, vkspec_metrics* out) {
  return api_call([&] {
    require(out != nullptr, "out is null");
    Claim claim(const_cast<vkspec_context*>(ctx));
    *out = ctx->metrics;
  });
}

}  // extern "C"
