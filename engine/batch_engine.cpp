#include "engine/batch_engine.h"

#include "engine/engine.h"   // Engine::normalize_embedding

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace vkspec {
namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
}  // namespace

BatchEngine::BatchEngine(std::shared_ptr<TargetModel> target, const DraftOptions& o, const Options& opts)
    : t_(std::move(target)), o_(o), opts_(opts) {
  LlamaModel& m = *t_->model;
  if (opts.parallel == 0) throw Error("--parallel must be at least 1");
  if (m.kv().max_sequences() < opts.parallel + opts.cached_sequences)
    throw Error("internal: the target's KV cache has too few sequences for the batch and its prompt cache");
  check_draft_options(o);
  // cached sequences keep their drafters, with their draft sequences
  draft_model_ = load_draft_model(*t_, o, opts.parallel + opts.cached_sequences, opts.parallel);
  const uint32_t V = m.hparams().n_vocab;
  rec_ = std::make_unique<Recorder>(*t_->ctx, profiling_requested());
  // A step's logits rows: one per sequence (its decode row or its prompt's last), K + 1 when it speculates,
  // a tree's nodes when a draft model drafts trees (DraftTree).
  const uint32_t verify_rows = draft_model_ ? std::max(o.max + 1, TokenTree::kMaxNodes) : o.max + 1;
  const VkDeviceSize rows = VkDeviceSize(opts.parallel) * (has_drafter() ? verify_rows : 1);
  logits_arena_ = std::make_unique<Arena>(*t_->ctx, MemoryKind::Device, rows * V * 4 + 4096);
  logits_ = logits_arena_->alloc(rows * V * 4, "batch logits");
  logits_readback_arena_ = std::make_unique<Arena>(*t_->ctx, MemoryKind::Readback, VkDeviceSize(opts.parallel) * V * 4 + 4096);
  logits_host_ = logits_readback_arena_->alloc(VkDeviceSize(opts.parallel) * V * 4, "batch logits read back");
  if (draft_model_) {   // a batched draft step's rows: one per sequence, a tree's running nodes at one depth
    const VkDeviceSize bytes =
        VkDeviceSize(opts.parallel) * DraftTreeShape::kMaxRunning * draft_model_->model->hparams().n_vocab * 4;
    draft_logits_arena_ = std::make_unique<Arena>(*t_->ctx, MemoryKind::Device, bytes + 4096);
    draft_logits_ = draft_logits_arena_->alloc(bytes, "batched draft logits");
  }
  choices_ = std::make_unique<BatchedChoices>(*t_->ctx, *t_->pipelines, V, opts.parallel * DraftTreeShape::kMaxRunning);
  for (uint32_t i = 0; i < opts.parallel; ++i) {
    auto s = std::make_unique<RequestSlot>();
    s->index = i;
    s->chooser = std::make_unique<TokenChooser>(*t_->ctx, *t_->pipelines, V, m.n_ctx() + LlamaModel::kMaxBatch);
    slots_.push_back(std::move(s));
  }
  admission_ = std::make_unique<KvAdmission>(m.kv(), draft_model_ ? &draft_model_->model->kv() : nullptr, m.n_ctx(),
                                             opts.cached_sequences);
  metrics_.parallel = opts.parallel;
  metrics_.kv_blocks_total = m.kv().total_blocks();
  if (draft_model_) metrics_.draft_kv_blocks_total = draft_model_->model->kv().total_blocks();
}

BatchEngine::~BatchEngine() {
  shutdown();
  if (rec_ && rec_->profiling()) fprintf(stderr, "batched steps %s", rec_->profile_report().c_str());
}

void BatchEngine::warm_up() {
  LlamaModel& m = *t_->model;
  // it borrows a free sequence of each model and slot 0's chooser
  if (std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->req != nullptr; }))
    throw Error("a batch warms up before its first request, not while requests run");
  m.warm_up();
  if (draft_model_) draft_model_->model->warm_up();
  // The sampling kernel, as a sampled request's step records it: a draw from a logits row the warm-up left
  // in the model's rows, copied to the batch's.
  const VkDeviceSize row_bytes = VkDeviceSize(m.hparams().n_vocab) * 4;
  TokenChooser& ch = *slots_[0]->chooser;   // free (no request yet); admission starts it anew
  ch.start(SamplingParams{});
  Recorder& rec = *rec_;
  rec.begin();
  rec.copy(m.logits_rows().sub(0, row_bytes), logits_.sub(0, row_bytes));
  rec.barrier();
  choices_->add(rec, m.kernels(), ch, logits_.sub(0, row_bytes), 0, ch.set_history({}), 0);
  choices_->record(rec, m.kernels());
  rec.submit_and_wait();
}

void BatchEngine::shutdown() {
  if (pending_) collect_step(UINT64_MAX);   // (its tokens delivered, then every request ends)
  for (auto& s : slots_)
    if (s->req) end(*s, StopReason::Cancelled);
  if (admission_) admission_->evict_all();
  std::deque<std::shared_ptr<BatchRequest>> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (admission_) update_kv_metrics();
    closed_ = true;
    queued.swap(queue_);
    queued_at_.clear();
    metrics_.queued = 0;
  }
  for (auto& r : queued) {
    SequenceResult res;
    res.stop = StopReason::Cancelled;
    res.prompt_tokens = uint32_t(r->prompt.size());
    if (r->on_done) r->on_done(res);
  }
}

void BatchEngine::submit(std::shared_ptr<BatchRequest> r) {
  LlamaModel& m = *t_->model;
  if (r->prompt.empty()) throw Error("the prompt is empty");
  if (r->embed && r->prompt.size() > m.n_ctx())
    throw Error("the text is " + std::to_string(r->prompt.size()) + " tokens, more than the context of " + std::to_string(m.n_ctx()));
  if (r->embed) {   // (no generation: nothing to sample, speculate or bound)
    r->speculate = false;
    r->sp = SamplingParams{};
    r->max_tokens = 1;
  }
  if (!r->embed && r->prompt.size() >= m.n_ctx())
    throw Error("the prompt is " + std::to_string(r->prompt.size()) + " tokens, which does not fit the context of " +
                std::to_string(m.n_ctx()));
  for (uint32_t id : r->prompt)
    if (id >= m.hparams().n_vocab) throw Error("token id " + std::to_string(id) + " is outside the vocabulary");
  if (r->max_tokens == 0) throw Error("max_tokens must be at least 1");
  choice_mode(r->sp, m.hparams().n_vocab);   // throws for parameters the device cannot run
  r->constraint = t_->startable_constraint(r->sp);   // here, so that a grammar that cannot start is refused now
  if (!admission_->could_ever_fit(admission_->reservation(uint32_t(r->prompt.size()), r->max_tokens, bool(r->embed))))
    throw Error("the request needs more KV cache than the server has (" +
                std::to_string(m.kv().total_blocks() * m.kv().block_size()) + " tokens)");
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) throw Error("the server is shutting down");
  queue_.push_back(std::move(r));
  queued_at_.push_back(Clock::now());
  metrics_.requests++;
  metrics_.queued = uint32_t(queue_.size());
  cv_.notify_all();
}

void BatchEngine::wake() {
  std::lock_guard<std::mutex> lock(mu_);
  wake_ = true;
  cv_.notify_all();
}

BatchMetrics BatchEngine::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_;
}

void BatchEngine::run(const std::atomic<bool>& stop) {
  while (!stop.load()) {
    if (step()) continue;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty() || wake_ || stop.load(); });
    wake_ = false;
  }
}

void BatchEngine::admit() {
  for (;;) {
    std::shared_ptr<BatchRequest> r;
    Clock::time_point queued_at;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) return;
      r = queue_.front();
      queued_at = queued_at_.front();
    }
    if (!r->cancelled.load()) {
      if (!admit_one(r)) return;   // waits (blocks, a free slot, or a prefix being prefilled)
      for (auto& s : slots_)
        if (s->req == r) s->sequence->result.queued_s = seconds(queued_at, Clock::now());
    } else {
      SequenceResult res;
      res.stop = StopReason::Cancelled;
      res.prompt_tokens = uint32_t(r->prompt.size());
      if (r->on_done) r->on_done(res);
      std::lock_guard<std::mutex> lock(mu_);
      metrics_.requests_done++;
    }
    std::lock_guard<std::mutex> lock(mu_);
    queue_.pop_front();
    queued_at_.pop_front();
    metrics_.queued = uint32_t(queue_.size());
  }
}

bool BatchEngine::admit_one(const std::shared_ptr<BatchRequest>& r) {
  auto free_slot = std::find_if(slots_.begin(), slots_.end(), [](const auto& s) { return !s->req; });
  if (free_slot == slots_.end()) return false;
  std::vector<KvAdmission::Held> held;   // (an embedding's sequence is no source)
  for (const auto& s : slots_)
    if (s->req && !s->req->embed) held.push_back({s->seq, s->sequence->context, !s->decoding});
  const DrafterKind kind = o_.kind();
  const bool speculate = r->speculate && !r->logits && can_speculate(kind, r->sp.constrained());
  const bool model_drafts = kind == DrafterKind::Model || kind == DrafterKind::NgramThenModel;
  std::optional<KvAdmission::Grant> grant =
      admission_->admit(r->prompt, r->max_tokens, bool(r->embed), held, speculate && model_drafts);
  if (!grant) return false;

  RequestSlot& s = **free_slot;
  s.req = r;
  s.seq = grant->seq;
  s.reserved = grant->reserved;
  s.decoding = false;
  s.admitted = Clock::now();
  // the request's callback, after the engine's count of generated tokens
  TokenSink sink = [this, &s](uint32_t t, bool from_draft, const float* row) {
    if (s.sequence->result.ids.size() == 1) s.first_token = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      metrics_.generated_tokens++;
    }
    return !s.req->on_token || s.req->on_token(t, from_draft, row);
  };
  s.sequence = std::make_unique<Sequence>(r->prompt, r->max_tokens, r->ignore_eos, *t_->tok, &r->cancelled, std::move(sink));
  Sequence& q = *s.sequence;
  q.cached = grant->reused;
  q.result.reused = grant->reused;
  q.result.speculative = speculate;
  q.constraint = std::move(r->constraint);
  s.chooser->start(r->sp, q.constraint.get());
  if (speculate) {
    if (grant->drafter) {   // its draft sequence within this request's reservation: no longer than the prompt
      grant->drafter->model_drafter()->keep_prefix(r->prompt);
      q.drafter = std::move(grant->drafter);
    } else {
      q.drafter = make_drafter(kind, draft_model_ ? draft_model_->model.get() : nullptr, o_.p_min);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  metrics_.prompt_tokens += r->prompt.size();
  metrics_.shared_tokens += grant->reused;
  metrics_.active++;
  update_kv_metrics();
  return true;
}

void BatchEngine::update_kv_metrics() {
  const PagedKvCache& kv = t_->model->kv();
  metrics_.kv_blocks_in_use = kv.blocks_in_use();
  metrics_.kv_blocks_allocated = kv.blocks_allocated();
  if (draft_model_) {
    metrics_.draft_kv_blocks_in_use = draft_model_->model->kv().blocks_in_use();
    metrics_.draft_kv_blocks_allocated = draft_model_->model->kv().blocks_allocated();
  }
  metrics_.cached_sequences = admission_->cached();
  metrics_.cache_evictions = admission_->evictions();
}

void BatchEngine::end(RequestSlot& s, StopReason reason, const std::string& error) {
  const auto now = Clock::now();
  Sequence& q = *s.sequence;
  q.end(reason);
  SequenceResult& res = q.result;
  res.error = error;
  if (q.spec) res.spec = q.spec->stats();
  if (!res.ids.empty()) {
    res.prefill_s = seconds(s.admitted, s.first_token);
    res.decode_s = seconds(s.first_token, now);
  } else {
    res.prefill_s = seconds(s.admitted, now);
  }
  q.spec.reset();
  q.constraint.reset();
  // the cache holds the first length(seq) tokens of the context (the last chosen token is never fed back);
  // after a failed step it may not, and is not kept. The drafter goes with it (or is freed, with its draft
  // sequence).
  const size_t held = std::min<size_t>(t_->model->kv().length(s.seq), q.context.size());
  admission_->release(s.seq, s.reserved,
                      res.stop == StopReason::Error ? std::vector<uint32_t>{}
                                                    : std::vector<uint32_t>(q.context.begin(), q.context.begin() + long(held)),
                      std::move(q.drafter));
  s.seq = -1;
  s.reserved = {};
  std::shared_ptr<BatchRequest> r = std::move(s.req);
  const SequenceResult done = std::move(res);
  s.sequence.reset();
  s.embedding = {};
  {
    std::lock_guard<std::mutex> lock(mu_);
    update_kv_metrics();
    metrics_.active--;
    metrics_.requests_done++;
    metrics_.drafted += done.spec.drafted;
    metrics_.accepted += done.spec.accepted;
  }
  if (r->on_done) r->on_done(done);
}

uint32_t BatchEngine::run_embedding(RequestSlot& s, uint32_t max_tokens) {
  const BatchRequest& r = *s.req;
  const uint32_t n = uint32_t(r.prompt.size()), before = s.embedding.done;
  std::vector<float> v;
  try {
    t_->model->embed_part(s.seq, r.prompt, *r.embed, s.embedding, max_tokens);
    if (s.embedding.done < n) return s.embedding.done - before;
    v = t_->model->embedding_of(s.embedding, n, *r.embed);
  } catch (const std::exception& e) {
    end(s, StopReason::Error, e.what());
    return max_tokens;
  }
  if (r.normalize) Engine::normalize_embedding(v);
  Sequence& q = *s.sequence;
  q.cached = n;
  q.result.prefilled = n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.prefilled_tokens += n;
  }
  if (s.req->on_embedding) s.req->on_embedding(std::move(v));
  end(s, StopReason::Embedded);
  return n - before;
}

// A step: admit, plan, record, submit, commit (engine/batch_engine.h). Recording and committing live in
// engine/batch_step.cpp.
bool BatchEngine::step() {
  if (step_in_flight()) return collect_step(UINT64_MAX);
  const Submitted s = submit_step();
  if (s == Submitted::Pass) collect_step(UINT64_MAX);
  return s != Submitted::Idle;
}

BatchEngine::Submitted BatchEngine::submit_step() {
  if (step_in_flight()) throw Error("internal: submit_step() while a step is in flight");
  admit();
  for (auto& s : slots_)
    if (s->req && s->sequence->cancelled()) end(*s, StopReason::Cancelled);

  Recorder& rec = *rec_;
  rec.begin();   // (waits for what a failed recording left running: embeddings share the activations)
  // Embeddings first, in parts of at most a step's rows (a chunk at least), so that a long text delays the
  // other sequences' steps by a part at a time, not by its whole prefill.
  uint32_t embedded = 0, embed_budget = std::max(opts_.step_rows, t_->model->ubatch());
  for (auto& s : slots_)
    if (s->req && s->req->embed && embed_budget > 0) embed_budget -= std::min(embed_budget, run_embedding(*s, embed_budget)), ++embedded;

  std::vector<StepDemand> demand(slots_.size());
  StepPlan plan;
  DraftSteps drafts;
  uint32_t pass_begin = 0, pass_end = 0;   // marks around the target pass
  try {
    draft_and_demand(demand, drafts);
    plan = build_plan(demand, opts_.step_rows, LlamaModel::kMaxBatch);
    if (plan.empty()) return embedded > 0 ? Submitted::Worked : Submitted::Idle;
    const std::vector<SeqRows> rows = pass_rows(plan);
    pass_begin = rec.mark();
    t_->model->record_batch(rec, rows, logits_);
    record_choices(plan);
    pass_end = rec.mark();
  } catch (const std::exception& e) {
    // Recording failed: the sequences of this step end with the error. Parts of the recording may have run
    // (Recorder's parts; the next begin() waits for them): they wrote only these sequences' KV and slots.
    t_->model->kv().drop_pending_copies();
    std::vector<bool> in_step(slots_.size(), false);
    for (const PlannedRows& p : plan.rows) in_step[p.sequence] = true;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const StepPart d = demand[i].part;
      if (slots_[i]->req && (in_step[i] || d == StepPart::Verify || d == StepPart::PlainRound || d == StepPart::Decode))
        end(*slots_[i], StopReason::Error, e.what());
    }
    return Submitted::Worked;
  }
  rec.submit();
  pending_ = PendingStep{std::move(plan), drafts, pass_begin, pass_end};
  return Submitted::Pass;
}

bool BatchEngine::step_in_flight() const { return pending_.has_value(); }

bool BatchEngine::collect_step(uint64_t timeout_ns) {
  if (!pending_) throw Error("internal: collect_step() with no step in flight");
  Recorder& rec = *rec_;
  if (!rec.wait(timeout_ns)) return false;
  const PendingStep p = std::move(*pending_);
  pending_.reset();
  const StepPlan& plan = p.plan;
  const DraftSteps& drafts = p.drafts;
  const uint32_t pass_begin = p.pass_begin, pass_end = p.pass_end;
  // This step's costs (seconds_between is -1 without timestamps, or where the recording ran out of marks)
  if (const double pass_s = rec.seconds_between(pass_begin, pass_end); pass_s > 0 && plan.prefill_rows == 0) {
    pass_costs_.add(plan.n_rows, pass_s);
    const double draft_s = drafts.steps ? rec.seconds_between(drafts.begin, drafts.end) : -1.0;
    if (draft_s > 0) draft_step_costs_.add(double(drafts.rows) / drafts.steps, draft_s / drafts.steps);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.steps++;
    metrics_.step_rows += plan.n_rows;
  }
  for (const PlannedRows& p : plan.rows) {
    RequestSlot& s = *slots_[p.sequence];
    if (!s.req) continue;
    try {
      commit(s, p.part, p.rows);
    } catch (const std::exception& e) {   // non-finite logits: this request fails, the others go on
      if (s.req) end(s, StopReason::Error, e.what());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  update_kv_metrics();
  admission_->check();
  return true;
}

}  // namespace vkspec
