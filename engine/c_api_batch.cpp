// The C API's continuous batching (include/vkspec.h, vkspec_batch_*) over the BatchEngine
// (engine/batch_engine.h). A request is named by an id; the batch keeps a weak reference per running id so
// that vkspec_batch_cancel() from any thread reaches it, and forgets it when the request ends.
#include <unordered_map>

#include "engine/batch_engine.h"
#include "engine/c_api_internal.h"

using namespace vkspec;
using namespace vkspec::capi;

struct vkspec_batch {
  vkspec_model* model = nullptr;
  std::unique_ptr<BatchEngine> engine;
  std::atomic<bool> stop{false};
  std::mutex ids_mutex;   // guards next_id and running
  uint64_t next_id = 1;
  std::unordered_map<uint64_t, std::weak_ptr<BatchRequest>> running;
};

namespace {

// A batch for the scope of a call. submit/cancel/metrics/stop may run on any thread next to the stepping
// one; only vkspec_batch_free must be alone, which the header states.
vkspec_batch* live_batch(const vkspec_batch* b) {
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  check_live(g_batches, b, "batch");
  return const_cast<vkspec_batch*>(b);
}

void fill_result(vkspec_request_result& out, const SequenceResult& r) {
  out = vkspec_request_result{};
  copy_field(out.stop_reason, stop_reason_name(r.stop));
  copy_field(out.error, r.error);
  out.prompt_tokens = r.prompt_tokens;
  out.prefilled_tokens = r.prefilled;
  out.shared_tokens = r.reused;
  out.completion_tokens = uint32_t(r.ids.size());
  out.speculative = r.speculative;
  out.drafted = r.spec.drafted;
  out.accepted = r.spec.accepted;
  out.verify_passes = r.spec.verify_passes;
  out.tree_rounds = r.spec.tree_rounds;
  out.round_tokens = r.spec.tokens;
  out.queued_seconds = r.queued_s;
  out.prefill_seconds = r.prefill_s;
  out.decode_seconds = r.decode_s;
}

// The request's prompt, checked against the vocabulary.
std::vector<uint32_t> prompt_ids(const vkspec_batch* b, const int32_t* prompt, size_t n_prompt) {
  require(n_prompt > 0, "the prompt is empty");
  return checked_ids(prompt, n_prompt, b->model->target->tok->n_vocab(), "a prompt token");
}
uint64_t new_id(vkspec_batch* b) {
  std::lock_guard<std::mutex> lock(b->ids_mutex);
  return b->next_id++;
}
// Queues r as request `rid` (cancellable by id while it runs); the engine's refusal is an invalid argument.
void enqueue(vkspec_batch* b, uint64_t rid, const std::shared_ptr<BatchRequest>& r) {
  {
    std::lock_guard<std::mutex> lock(b->ids_mutex);
    b->running[rid] = r;
  }
  try {
    b->engine->submit(r);
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lock(b->ids_mutex);
    b->running.erase(rid);
    throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, e.what()};
  }
}

}  // namespace

extern "C" {

vkspec_batch_params vkspec_batch_default_params(void) {
  vkspec_batch_params p{};
  p.parallel = 4;
  p.cached_sequences = 0;
  p.draft = default_draft();
  return p;
}

vkspec_request_params vkspec_request_default_params(void) {
  vkspec_request_params p{};
  p.sampling = default_sampling();
  p.max_tokens = 16;
  p.speculative = 1;
  p.draft_tree = -1;
  return p;
}

vkspec_status vkspec_batch_create(vkspec_model* model, const vkspec_batch_params* params, vkspec_batch** out) {
  return api_call([&] {
    ModelUse use(model);
    require(params && out, "a null argument");
    *out = nullptr;
    if (!model->target->model)
      throw Failure{VKSPEC_ERROR_NOT_SUPPORTED, "the model was loaded vocab_only: it has no batches"};
    require(params->parallel >= 1 && params->parallel <= 64, "parallel must be 1..64");
    if (params->parallel + params->cached_sequences > model->max_contexts)
      throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT,
                    "the batch needs parallel + cached_sequences = " +
                        std::to_string(params->parallel + params->cached_sequences) +
                        " sequences; the model was loaded with max_contexts = " + std::to_string(model->max_contexts)};
    const DraftOptions o = draft_options(params->draft);   // (an invalid argument, not a load failure)
    auto b = std::make_unique<vkspec_batch>();
    b->model = model;
    b->engine = std::make_unique<BatchEngine>(model->target, o,
                                              BatchEngine::Options{params->parallel, 64, params->cached_sequences});
    model->contexts++;
    std::lock_guard<std::mutex> lock(g_handles_mutex);
    g_batches.insert(b.get());
    *out = b.release();
  }, VKSPEC_ERROR_LOAD);
}

vkspec_status vkspec_batch_submit(vkspec_batch* batch, const int32_t* prompt, size_t n_prompt,
                                  const vkspec_request_params* params, uint64_t* id) {
  return api_call([&] {
    vkspec_batch* b = live_batch(batch);
    require(prompt && params && id, "a null argument");
    const Tokenizer& tok = *b->model->target->tok;
    auto r = std::make_shared<BatchRequest>();
    r->prompt = prompt_ids(b, prompt, n_prompt);
    r->sp = sampling_params(params->sampling, tok.n_vocab());
    r->max_tokens = params->max_tokens;
    r->ignore_eos = params->ignore_eos != 0;
    r->speculate = params->speculative != 0;
    require(params->draft_tree >= -1 && params->draft_tree <= 2,
            "draft_tree must be -1 (the batch's), 0 (off), 1 (auto) or 2 (wide)");
    if (params->draft_tree >= 0) r->draft_tree = DraftTree(params->draft_tree);
    r->logits = params->logits != 0;
    const uint64_t rid = *id = new_id(b);
    const vkspec_request_params p = *params;
    const uint32_t n_vocab = tok.n_vocab();
    auto utf8 = std::make_shared<Utf8Stream>();
    // The callbacks run on the stepping thread; the C callback's return value says stop.
    r->on_token = [p, rid, utf8, &tok, n_vocab](uint32_t t, bool from_draft, const float* row) {
      if (!p.on_token) return true;
      const std::string piece = utf8->push(tok.piece(t));
      return p.on_token(rid, int32_t(t), piece.c_str(), piece.size(), from_draft, row, row ? n_vocab : 0, p.user) == 0;
    };
    r->on_done = [p, rid, utf8, b](const SequenceResult& res) {
      {
        std::lock_guard<std::mutex> lock(b->ids_mutex);
        b->running.erase(rid);
      }
      const std::string tail = utf8->finish();
      if (!tail.empty() && p.on_token) p.on_token(rid, -1, tail.c_str(), tail.size(), 0, nullptr, 0, p.user);
      vkspec_request_result out;
      fill_result(out, res);
      if (p.on_done) p.on_done(rid, &out, p.user);
    };
    enqueue(b, rid, r);
  });
}

vkspec_status vkspec_batch_embed(vkspec_batch* batch, const int32_t* tokens, size_t n_tokens, int32_t pooling,
                                 int32_t normalize, vkspec_embedding_fn on_embedding, vkspec_request_done_fn on_done,
                                 void* user, uint64_t* id) {
  return api_call([&] {
    vkspec_batch* b = live_batch(batch);
    require(tokens && id, "a null argument");
    require(pooling == VKSPEC_POOLING_LAST || pooling == VKSPEC_POOLING_MEAN, "pooling must be VKSPEC_POOLING_LAST or _MEAN");
    require(normalize == 0 || normalize == 1, "normalize must be 0 or 1");
    auto r = std::make_shared<BatchRequest>();
    r->prompt = prompt_ids(b, tokens, n_tokens);
    r->embed = pooling == VKSPEC_POOLING_MEAN ? LlamaModel::Pooling::Mean : LlamaModel::Pooling::Last;
    r->normalize = normalize == 1;
    const uint64_t rid = *id = new_id(b);
    r->on_embedding = [rid, on_embedding, user](std::vector<float> v) {
      if (on_embedding) on_embedding(rid, v.data(), uint32_t(v.size()), user);
    };
    r->on_done = [rid, on_done, user, b](const SequenceResult& res) {
      {
        std::lock_guard<std::mutex> lock(b->ids_mutex);
        b->running.erase(rid);
      }
      vkspec_request_result out;
      fill_result(out, res);
      if (on_done) on_done(rid, &out, user);
    };
    enqueue(b, rid, r);
  });
}

vkspec_status vkspec_batch_cancel(vkspec_batch* batch, uint64_t id) {
  return api_call([&] {
    vkspec_batch* b = live_batch(batch);
    std::lock_guard<std::mutex> lock(b->ids_mutex);
    const auto it = b->running.find(id);
    if (it == b->running.end()) return;
    if (auto r = it->second.lock()) r->cancelled = true;
  });
}

vkspec_status vkspec_batch_warm_up(vkspec_batch* batch) {
  return api_call([&] { live_batch(batch)->engine->warm_up(); });
}

vkspec_status vkspec_batch_step(vkspec_batch* batch, int32_t* worked) {
  return api_call([&] {
    vkspec_batch* b = live_batch(batch);
    require(worked != nullptr, "worked is null");
    *worked = b->engine->step();
  });
}

vkspec_status vkspec_batch_step_submit(vkspec_batch* batch, int32_t* in_flight, int32_t* worked) {
  return api_call([&] {
    vkspec_batch* b = live_batch(batch);
    require(in_flight != nullptr && worked != nullptr, "in_flight or worked is null");
    if (b->engine->step_in_flight())
      throw Failure{VKSPEC_ERROR_BUSY, "a step is in flight: collect it first (vkspec_batch_step_poll, vkspec_batch_step_wait)"};
    const BatchEngine::Submitted s = b->engine->submit_step();
    *in_flight = s == BatchEngine::Submitted::Pass;
    *worked = s != BatchEngine::Submitted::Idle;
  });
}

namespace {
void collect_batch_step(vkspec_batch* batch, uint64_t timeout_ns, int32_t* ready) {
  vkspec_batch* b = live_batch(batch);
  require(ready != nullptr, "ready is null");
  if (!b->engine->step_in_flight())
    throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, "no step was submitted on this batch (vkspec_batch_step_submit)"};
  *ready = b->engine->collect_step(timeout_ns) ? 1 : 0;
}
}  // namespace

vkspec_status vkspec_batch_step_poll(vkspec_batch* batch, int32_t* ready) {
  return api_call([&] { collect_batch_step(batch, 0, ready); });
}

vkspec_status vkspec_batch_step_wait(vkspec_batch* batch, uint64_t timeout_ns, int32_t* ready) {
  return api_call([&] { collect_batch_step(batch, timeout_ns, ready); });
}

vkspec_status vkspec_batch_run(vkspec_batch* batch) {
  return api_call([&] { live_batch(batch)->engine->run(batch->stop); });
}

vkspec_status vkspec_batch_stop(vkspec_batch* batch) {
  return api_call([&] {
    vkspec_batch* b = live_batch(batch);
    b->stop = true;
    b->engine->wake();
  });
}

vkspec_status vkspec_batch_shutdown(vkspec_batch* batch) {
  return api_call([&] { live_batch(batch)->engine->shutdown(); });
}

vkspec_status vkspec_batch_get_metrics(const vkspec_batch* batch, vkspec_batch_metrics* out) {
  return api_call([&] {
    vkspec_batch* b = live_batch(batch);
    require(out != nullptr, "out is null");
    const BatchMetrics m = b->engine->metrics();
    *out = vkspec_batch_metrics{m.requests, m.requests_done, m.prompt_tokens, m.prefilled_tokens, m.shared_tokens,
                                m.generated_tokens, m.drafted, m.accepted, m.steps, m.step_rows,
                                m.kv_blocks_allocated, m.cache_evictions, m.active, m.queued, m.kv_blocks_in_use,
                                m.kv_blocks_total, m.parallel, m.cached_sequences, m.draft_kv_blocks_allocated,
                                m.draft_kv_blocks_in_use, m.draft_kv_blocks_total};
  });
}

vkspec_status vkspec_batch_free(vkspec_batch* batch) {
  return api_call([&] {
    if (!batch) return;
    {
      std::lock_guard<std::mutex> lock(g_handles_mutex);
      check_live(g_batches, batch, "batch");
      g_batches.erase(batch);
    }
    batch->engine.reset();   // shuts down: what is left ends "cancelled"
    batch->model->contexts--;
    delete batch;
  });
}

}  // extern "C"
