#include "engine/batch_engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace vkspec {
namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
}  // namespace

// One sequence slot: its token chooser (allocated once) and the request it serves.
struct BatchEngine::Slot {
  uint32_t index = 0;                  // in slots_ (its row of logits_host_)
  std::shared_ptr<BatchRequest> req;   // null: free
  int seq = -1;
  std::unique_ptr<TokenChooser> chooser;
  std::unique_ptr<Drafter> drafter;         // per request (a ModelDrafter holds a draft sequence)
  std::unique_ptr<SpeculativeDecoder> spec;
  std::unique_ptr<TokenConstraint> constraint;   // JSON mode or a grammar (the tokens so far, the next mask)
  std::vector<uint32_t> context;   // the prompt, then every token fed back (the penalty history)
  uint32_t prefilled = 0;          // prompt tokens in the cache
  bool decoding = false;
  uint32_t reserved = 0, draft_reserved = 0;
  std::string stop_reason;         // set by emit() when it ends the request
  BatchResult result;
  Clock::time_point admitted, first_token;
  // this step
  // PlainRound: a speculative sequence's round without drafts (K = 0), run as a decode row among the
  // plain ones (their ids embedded in one dispatch, their choices made with the step's others) with its choice
  // in the verify slot
  enum class Part { None, Prefill, PrefillLast, Decode, Verify, PlainRound } part = Part::None;
  uint32_t rows = 0;   // in this step's pass
  LlamaModel::EmbeddingPart embedding;   // an embedding request's progress (run_embedding)
};

BatchEngine::BatchEngine(std::shared_ptr<TargetModel> target, const EngineOptions& o, const Options& opts)
    : t_(std::move(target)), o_(o), opts_(opts) {
  LlamaModel& m = *t_->model;
  if (opts.parallel == 0) throw Error("--parallel must be at least 1");
  if (m.kv().max_sequences() < opts.parallel + opts.cached_sequences)
    throw Error("internal: the target's KV cache has too few sequences for the batch and its prompt cache");
  check_engine_options(o);
  if (!o.draft_model.empty()) {
    draft_file_ = std::make_unique<GgufFile>(o.draft_model);
    check_same_vocabulary(*t_->tok, *Tokenizer::from_gguf(*draft_file_));
    ModelOptions dmo;
    dmo.n_ctx = m.n_ctx();
    dmo.max_sequences = opts.parallel + opts.cached_sequences;   // cached sequences keep their drafters
    dmo.kv_pool_sequences = opts.parallel;
    dmo.ubatch = m.ubatch();
    draft_model_ = std::make_unique<LlamaModel>(*t_->ctx, *t_->pipelines, *draft_file_, dmo);
    draft_kind_ = o.draft == "ngram" ? "ngram+model" : "draft-model";
  } else if (o.draft == "ngram") {
    draft_kind_ = "ngram";
  } else if (!o.draft.empty()) {
    throw Error("unknown drafter '" + o.draft + "' (--draft ngram, or -md DRAFT.gguf)");
  }
  const uint32_t V = m.hparams().n_vocab;
  rec_ = std::make_unique<Recorder>(*t_->ctx, profiling_requested());
  // A step's logits rows: one per sequence (its decode row or its prompt's last), K + 1 when it speculates.
  const VkDeviceSize rows = VkDeviceSize(opts.parallel) * (has_drafter() ? uint32_t(o.draft_max) + 1 : 1);
  logits_arena_ = std::make_unique<Arena>(*t_->ctx, MemoryKind::Device, rows * V * 4 + 4096);
  logits_ = logits_arena_->alloc(rows * V * 4, "batch logits");
  logits_readback_arena_ = std::make_unique<Arena>(*t_->ctx, MemoryKind::Readback, VkDeviceSize(opts.parallel) * V * 4 + 4096);
  logits_host_ = logits_readback_arena_->alloc(VkDeviceSize(opts.parallel) * V * 4, "batch logits read back");
  if (draft_model_) {   // one row per sequence for each batched draft step
    const VkDeviceSize bytes = VkDeviceSize(opts.parallel) * draft_model_->hparams().n_vocab * 4;
    draft_logits_arena_ = std::make_unique<Arena>(*t_->ctx, MemoryKind::Device, bytes + 4096);
    draft_logits_ = draft_logits_arena_->alloc(bytes, "batched draft logits");
  }
  choices_ = std::make_unique<BatchedChoices>(*t_->ctx, *t_->pipelines, V, opts.parallel);
  for (uint32_t i = 0; i < opts.parallel; ++i) {
    auto s = std::make_unique<Slot>();
    s->index = i;
    s->chooser = std::make_unique<TokenChooser>(*t_->ctx, *t_->pipelines, V, m.n_ctx() + LlamaModel::kMaxBatch);
    slots_.push_back(std::move(s));
  }
  metrics_.parallel = opts.parallel;
  metrics_.kv_blocks_total = m.kv().total_blocks();
  if (draft_model_) metrics_.draft_kv_blocks_total = draft_model_->kv().total_blocks();
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
  if (draft_model_) draft_model_->warm_up();
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
  for (auto& s : slots_)
    if (s->req) end(*s, "cancelled");
  while (!cache_.empty()) evict(0);
  std::deque<std::shared_ptr<BatchRequest>> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    queued.swap(queue_);
    queued_at_.clear();
    metrics_.queued = 0;
  }
  for (auto& r : queued) {
    BatchResult res;
    res.stop_reason = "cancelled";
    res.prompt_tokens = uint32_t(r->prompt.size());
    if (r->on_done) r->on_done(res);
  }
}

// The blocks a request may hold at most: its prompt, max_tokens and a round's drafts, within the context.
uint32_t BatchEngine::reservation(const BatchRequest& r, uint32_t block_size) const {
  const uint64_t longest = r.embed ? r.prompt.size()
                                   : std::min<uint64_t>(uint64_t(r.prompt.size()) + r.max_tokens + LlamaModel::kMaxBatch,
                                                        t_->model->n_ctx());
  return uint32_t((longest + block_size - 1) / block_size);
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
  r->constraint = t_->constraint(r->sp);     // here, so that a grammar that cannot start is refused now
  if (reservation(*r, m.kv().block_size()) > m.kv().total_blocks())
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
        if (s->req == r) s->result.queued_s = seconds(queued_at, Clock::now());
    } else {
      BatchResult res;
      res.stop_reason = "cancelled";
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

// Blocks counted for the prompt cache: each cached sequence's length in blocks (shared ones included, so the
// count is an upper bound of what evicting them all would free).
uint32_t BatchEngine::cached_blocks() const {
  uint32_t n = 0;
  for (const CachedSequence& c : cache_) n += t_->model->kv().blocks_for(t_->model->kv().length(c.seq));
  return n;
}

// The draft pool's blocks held by cached sequences' drafters (their own sequences: the draft pool shares no
// prefixes).
uint32_t BatchEngine::cached_draft_blocks() const {
  uint32_t n = 0;
  for (const CachedSequence& c : cache_)
    if (ModelDrafter* d = c.drafter ? c.drafter->model_drafter() : nullptr)
      n += d->model().kv().blocks_for(d->model().kv().length(d->sequence()));
  return n;
}

void BatchEngine::update_kv_metrics() {
  metrics_.kv_blocks_in_use = t_->model->kv().blocks_in_use();
  metrics_.kv_blocks_allocated = t_->model->kv().blocks_allocated();
  if (draft_model_) {
    metrics_.draft_kv_blocks_in_use = draft_model_->kv().blocks_in_use();
    metrics_.draft_kv_blocks_allocated = draft_model_->kv().blocks_allocated();
  }
}

void BatchEngine::evict(size_t i) {
  t_->model->kv().free_sequence(cache_[i].seq);
  cache_.erase(cache_.begin() + long(i));   // (its drafter frees its draft sequence)
  std::lock_guard<std::mutex> lock(mu_);
  metrics_.cached_sequences = uint32_t(cache_.size());
  update_kv_metrics();
  metrics_.cache_evictions++;
}

void BatchEngine::retire(int seq, std::vector<uint32_t> tokens, std::unique_ptr<Drafter> drafter) {
  PagedKvCache& kv = t_->model->kv();
  if (opts_.cached_sequences == 0 || tokens.empty()) {
    kv.free_sequence(seq);
    return;   // (and the drafter goes, with its draft sequence)
  }
  // an entry whose tokens the new one starts with is subsumed by it
  for (size_t i = cache_.size(); i-- > 0;) {
    const auto& t = cache_[i].tokens;
    if (t.size() <= tokens.size() && std::equal(t.begin(), t.end(), tokens.begin())) evict(i);
  }
  cache_.push_back({seq, std::move(tokens), ++cache_clock_, std::move(drafter)});
  if (cache_.size() > opts_.cached_sequences) {
    size_t lru = 0;
    for (size_t i = 1; i < cache_.size(); ++i)
      if (cache_[i].last_used < cache_[lru].last_used) lru = i;
    evict(lru);
  }
  std::lock_guard<std::mutex> lock(mu_);
  metrics_.cached_sequences = uint32_t(cache_.size());
}

bool BatchEngine::admit_one(const std::shared_ptr<BatchRequest>& r) {
  LlamaModel& m = *t_->model;
  PagedKvCache& kv = m.kv();
  auto free_slot = std::find_if(slots_.begin(), slots_.end(), [](const auto& s) { return !s->req; });
  if (free_slot == slots_.end()) return false;
  const uint32_t need = reservation(*r, kv.block_size());
  const uint32_t draft_need = draft_model_ ? reservation(*r, draft_model_->kv().block_size()) : 0;
  if (reserved_ + need > kv.total_blocks()) return false;
  if (draft_model_ && draft_reserved_ + draft_need > draft_model_->kv().total_blocks()) return false;
  // The longest prefix of the prompt another sequence holds in its cache, running or cached (at least one
  // prompt token is left to run: its logits choose the first token); wait while a sequence is still
  // prefilling one worth sharing.
  const std::vector<uint32_t>& p = r->prompt;
  const auto useful_prefix = [&p](const std::vector<uint32_t>& c) {
    uint32_t common = 0;
    while (common < c.size() && common < p.size() && c[common] == p[common]) ++common;
    return std::min(common, uint32_t(p.size()) - 1);
  };
  int source = -1, cached_source = -1;   // sequences; cached_source: the source when it is a cached one
  uint32_t shared = 0;
  for (const auto& s : slots_) {
    if (!s->req || r->embed || s->req->embed) continue;   // (an embedding's sequence is not a source)
    const uint32_t useful = useful_prefix(s->decoding ? s->context : s->req->prompt);
    const uint32_t held = std::min(useful, kv.length(s->seq));
    if (!s->decoding && held < useful && useful >= kv.block_size()) return false;
    if (held > shared) shared = held, source = s->seq;
  }
  for (const CachedSequence& c : cache_) {
    if (r->embed) break;
    const uint32_t held = std::min(useful_prefix(c.tokens), kv.length(c.seq));
    if (held > shared) shared = held, source = cached_source = c.seq;
  }
  // Make room: cached sequences give way to the reservation, least recently used first (in both pools: they
  // hold their drafters' draft sequences). The source goes last: when only it is in the way, the request takes
  // it over (it shares the prefix, then the source is evicted: the shared blocks are the request's, within its
  // reservation, and the rest is freed), so that a chat's next turn near the context still starts from the
  // turn before instead of prefilling it all again.
  bool take_over = false;
  const auto source_blocks = [&](bool draft_pool) -> uint32_t {
    if (!take_over) return 0;
    for (const CachedSequence& c : cache_) {
      if (c.seq != cached_source) continue;
      if (!draft_pool) return kv.blocks_for(kv.length(c.seq));
      ModelDrafter* d = c.drafter ? c.drafter->model_drafter() : nullptr;
      return d ? d->model().kv().blocks_for(d->model().kv().length(d->sequence())) : 0;
    }
    return 0;
  };
  const auto over = [&] {
    return reserved_ + need + cached_blocks() - source_blocks(false) > kv.total_blocks() ||
           (draft_model_ && draft_reserved_ + draft_need + cached_draft_blocks() - source_blocks(true) >
                                draft_model_->kv().total_blocks());
  };
  while (over() && !cache_.empty() && !take_over) {
    size_t victim = cache_.size();
    for (size_t i = 0; i < cache_.size(); ++i)
      if (cache_[i].seq != cached_source && (victim == cache_.size() || cache_[i].last_used < cache_[victim].last_used))
        victim = i;
    if (victim == cache_.size()) take_over = true;   // only the source is left
    else evict(victim);
  }
  if (over()) return false;   // (unreachable: reserved + need fit, in both pools)
  std::unique_ptr<Drafter> kept_drafter;   // the cached source's, which the new request takes if it speculates
  for (CachedSequence& c : cache_)
    if (c.seq == cached_source) {
      c.last_used = ++cache_clock_;
      if (r->speculate && !r->logits && !r->sp.constrained() && c.drafter && c.drafter->model_drafter())
        kept_drafter = std::move(c.drafter);
    }
  Slot& s = **free_slot;
  s.req = r;
  s.seq = kv.new_sequence();
  if (source >= 0) kv.share_prefix(s.seq, source, shared);
  if (take_over)
    for (size_t i = 0; i < cache_.size(); ++i)
      if (cache_[i].seq == cached_source) evict(i--);
  s.context = p;
  s.prefilled = shared;
  s.decoding = false;
  s.stop_reason.clear();
  s.result = BatchResult{};
  s.result.prompt_tokens = uint32_t(p.size());
  s.result.shared = shared;
  s.reserved = need;
  s.draft_reserved = draft_need;
  reserved_ += need;
  draft_reserved_ += draft_need;
  s.admitted = Clock::now();
  s.constraint = std::move(r->constraint);
  s.chooser->start(r->sp, s.constraint.get());
  // (constrained generation speculates with prompt lookup only: each verify row's mask depends on the drafts
  // before it, which a draft model chooses on the device)
  const bool speculate = r->speculate && has_drafter() && !r->logits && (!r->sp.constrained() || draft_kind_ == "ngram");
  s.result.speculative = speculate;
  if (speculate) {
    if (kept_drafter) {   // its draft sequence within this request's reservation: no longer than the prompt
      kept_drafter->model_drafter()->keep_prefix(p);
      s.drafter = std::move(kept_drafter);
    } else if (draft_model_ && o_.draft == "ngram") s.drafter = std::make_unique<LookupThenModelDrafter>(*draft_model_, o_.draft_p_min);
    else if (draft_model_) s.drafter = std::make_unique<ModelDrafter>(*draft_model_, o_.draft_p_min);
    else s.drafter = std::make_unique<NgramDrafter>();
  }
  std::lock_guard<std::mutex> lock(mu_);
  metrics_.prompt_tokens += p.size();
  metrics_.shared_tokens += shared;
  metrics_.active++;
  return true;
}

// Takes one generated token of `s`; false ends the request (stop_reason says why).
bool BatchEngine::emit(Slot& s, uint32_t t, bool from_draft, const float* row) {
  BatchRequest& r = *s.req;
  if (r.cancelled.load()) {
    s.stop_reason = "cancelled";
    return false;
  }
  if (s.constraint) s.constraint->accept(t);
  if (!r.ignore_eos && t_->tok->is_eog(t)) {
    s.stop_reason = "eos";
    return false;
  }
  if (s.result.completion_tokens == 0) s.first_token = Clock::now();
  s.result.completion_tokens++;
  {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.generated_tokens++;
  }
  if (r.on_token && !r.on_token(t, from_draft, row)) {
    s.stop_reason = "stopped";
    return false;
  }
  if (s.result.completion_tokens >= r.max_tokens) {
    s.stop_reason = "length";
    return false;
  }
  return true;
}

void BatchEngine::end(Slot& s, const std::string& reason, const std::string& error) {
  const auto now = Clock::now();
  BatchResult& res = s.result;
  res.stop_reason = reason;
  res.error = error;
  if (s.spec) res.spec = s.spec->stats();
  if (res.completion_tokens) {
    res.prefill_s = seconds(s.admitted, s.first_token);
    res.decode_s = seconds(s.first_token, now);
  } else {
    res.prefill_s = seconds(s.admitted, now);
  }
  s.spec.reset();
  s.constraint.reset();
  // the cache holds the first length(seq) tokens of the context (the last chosen token is never fed back);
  // after a failed step it may not, and is not kept. The drafter goes with it (or is freed, with its draft
  // sequence).
  const size_t held = std::min<size_t>(t_->model->kv().length(s.seq), s.context.size());
  retire(s.seq, reason == "error" ? std::vector<uint32_t>{} : std::vector<uint32_t>(s.context.begin(), s.context.begin() + long(held)),
         std::move(s.drafter));
  s.seq = -1;
  reserved_ -= s.reserved;
  draft_reserved_ -= s.draft_reserved;
  std::shared_ptr<BatchRequest> r = std::move(s.req);
  s.req.reset();
  s.part = Slot::Part::None;
  s.embedding = {};
  {
    std::lock_guard<std::mutex> lock(mu_);
    update_kv_metrics();
    metrics_.active--;
    metrics_.requests_done++;
    metrics_.drafted += res.spec.drafted;
    metrics_.accepted += res.spec.accepted;
  }
  if (r->on_done) r->on_done(res);
}

uint32_t BatchEngine::run_embedding(Slot& s, uint32_t max_tokens) {
  const BatchRequest& r = *s.req;
  const uint32_t n = uint32_t(r.prompt.size()), before = s.embedding.done;
  std::vector<float> v;
  try {
    t_->model->embed_part(s.seq, r.prompt, *r.embed, s.embedding, max_tokens);
    if (s.embedding.done < n) return s.embedding.done - before;
    v = t_->model->embedding_of(s.embedding, n, *r.embed);
  } catch (const std::exception& e) {
    end(s, "error", e.what());
    return max_tokens;
  }
  if (r.normalize) Engine::normalize_embedding(v);
  s.prefilled = n;
  s.result.prefilled = s.prefilled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.prefilled_tokens += s.prefilled;
  }
  if (s.req->on_embedding) s.req->on_embedding(std::move(v));
  end(s, "embedded");
  return n - before;
}

// A step: one pass over rows from every running sequence. Decoding sequences first (a step's latency is
// every running stream's): speculative ones draft (a draft model's steps batched across sequences) and then
// verify, plain ones decode one row; prefill fills the rest of the row budget (at least one chunk, so that a
// new request always makes progress). One submission, one wait; then each sequence takes its result.
bool BatchEngine::step() {
  admit();
  for (auto& s : slots_)
    if (s->req && s->req->cancelled.load()) end(*s, "cancelled");

  Recorder& rec = *rec_;
  rec.begin();   // (waits for what a failed recording left running: embeddings share the activations)
  // Embeddings first, in parts of at most a step's rows (a chunk at least), so that a long text delays the
  // other sequences' steps by a part at a time, not by its whole prefill.
  uint32_t embedded = 0, embed_budget = std::max(opts_.step_rows, t_->model->ubatch());
  for (auto& s : slots_)
    if (s->req && s->req->embed && embed_budget > 0) embed_budget -= std::min(embed_budget, run_embedding(*s, embed_budget)), ++embedded;
  StepRows plan;
  uint32_t pass_begin = 0, pass_end = 0;   // marks around the target pass
  try {
    plan_speculative_rows(plan);
    plan_decode_rows(plan);
    plan_prefill_rows(plan);
    if (plan.rows.empty()) return embedded > 0;
    pass_begin = rec.mark();
    t_->model->record_batch(rec, plan.rows, logits_);
    record_choices(plan);
    pass_end = rec.mark();
  } catch (const std::exception& e) {
    // Recording failed: the sequences of this step end with the error. Parts of the recording may have run
    // (Recorder's parts; the next begin() waits for them): they wrote only these sequences' KV and slots.
    t_->model->kv().drop_pending_copies();
    for (Slot* s : plan.drafted)
      if (s->req) end(*s, "error", e.what());
    for (Slot* s : plan.plain_rounds)
      if (s->req) end(*s, "error", e.what());
    for (Slot* s : plan.in_step)
      if (s->req) end(*s, "error", e.what());
    return true;
  }
  rec.submit_and_wait();
  // This step's costs (seconds_between is -1 without timestamps, or where the recording ran out of marks)
  if (const double pass_s = rec.seconds_between(pass_begin, pass_end); pass_s > 0 && plan.prefill_rows == 0) {
    pass_costs_.add(plan.n_rows, pass_s);
    const double draft_s = plan.draft_steps ? rec.seconds_between(plan.draft_begin, plan.draft_end) : -1.0;
    if (draft_s > 0) draft_step_costs_.add(double(plan.draft_rows) / plan.draft_steps, draft_s / plan.draft_steps);
  }

  {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.steps++;
    metrics_.step_rows += plan.n_rows;
  }
  for (Slot* s : plan.in_step) {
    if (s->req) {
      try {
        take_result(*s);
      } catch (const std::exception& e) {   // non-finite logits: this request fails, the others go on
        if (s->req) end(*s, "error", e.what());
      }
    }
    s->part = Slot::Part::None;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    update_kv_metrics();
  }
  return true;
}

void BatchEngine::plan_speculative_rows(StepRows& plan) {
  std::vector<BatchedDraft> batched;
  // the decoding sequences, whose rows share this step's pass (greedy ones price their drafts at their share
  // of it; a prompt chunk in the same pass is left out: it costs the pass whatever the drafts do)
  const uint32_t decoding = uint32_t(std::count_if(slots_.begin(), slots_.end(), [](const auto& sp) {
    return sp->req && sp->decoding;
  }));
  std::optional<SharedCosts> costs = SharedCosts::measured(pass_costs_, draft_step_costs_, decoding);
  uint32_t model_steps = 0;   // the batched draft steps that the sequences planned so far run
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.req || !s.decoding || !s.spec) continue;
    if (!s.spec->start()) {
      end(s, s.stop_reason.empty() ? "context" : s.stop_reason);
      continue;
    }
    if (costs) costs->joined_steps = model_steps;
    const uint32_t k_max = s.spec->drafts_planned(decoding, costs);
    if (k_max == 0) {
      s.spec->drafts_recorded(0);
      s.part = Slot::Part::PlainRound;   // its row: plan_decode_rows
      plan.plain_rounds.push_back(&s);
      continue;
    }
    uint32_t drafted = 0;
    ModelDrafter* model = k_max ? s.drafter->draft_unless_model(s.context, k_max, s.spec->draft_round(), drafted) : nullptr;
    if (model) {
      batched.push_back({model, s.context, k_max, &s.spec->draft_round()});
      model_steps = std::max(model_steps, k_max);
    }
    else s.rows = s.spec->drafts_recorded(drafted);
    plan.drafted.push_back(&s);
  }
  if (!batched.empty()) {
    plan.draft_begin = rec_->mark();
    plan.draft_rows = record_batched_drafts(*draft_model_, batched, draft_logits_, *choices_);
    plan.draft_end = rec_->mark();
    for (const BatchedDraft& d : batched) plan.draft_steps = std::max(plan.draft_steps, d.k);
    size_t j = 0;
    for (Slot* s : plan.drafted)   // the batched ones, in the order they were added
      if (j < batched.size() && &s->spec->draft_round() == batched[j].round)
        s->rows = s->spec->drafts_recorded(batched[j++].k);
  }
  for (Slot* s : plan.drafted) {
    plan.rows.push_back({s->seq, s->spec->verify_input(), s->rows, Logits::All});
    s->part = Slot::Part::Verify;
    plan.n_rows += s->rows;
    plan.in_step.push_back(s);
  }
}

void BatchEngine::plan_decode_rows(StepRows& plan) {
  LlamaModel& m = *t_->model;
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.req || !s.decoding || (s.spec && s.part != Slot::Part::PlainRound)) continue;
    // the token chosen last step (context.back() == its slot 0; a speculative round's g), host-written: the
    // decode rows' ids are then contiguous, and the pass embeds them in one dispatch
    plan.rows.push_back({s.seq, m.write_tokens(std::span(s.context).last(1)), 1, Logits::Last});
    if (!s.spec) s.part = Slot::Part::Decode;
    s.rows = 1;
    plan.n_rows += 1;
    plan.in_step.push_back(&s);
  }
}

void BatchEngine::plan_prefill_rows(StepRows& plan) {
  LlamaModel& m = *t_->model;
  const uint32_t budget = std::max(opts_.step_rows, plan.n_rows + LlamaModel::kMaxBatch);
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.req || s.decoding || s.req->embed || plan.n_rows >= budget) continue;   // (embeddings: run_embedding)
    const uint32_t take = std::min<uint32_t>(budget - plan.n_rows, uint32_t(s.context.size()) - s.prefilled);
    const bool last = s.prefilled + take == s.context.size();
    plan.rows.push_back({s.seq, m.write_tokens(std::span(s.context).subspan(s.prefilled, take)), take,
                         last ? Logits::Last : Logits::None});
    s.part = last ? Slot::Part::PrefillLast : Slot::Part::Prefill;
    s.rows = take;
    plan.n_rows += take;
    plan.prefill_rows += take;
    plan.in_step.push_back(&s);
  }
}

// Each sequence's choice or verification from its logits rows (in the order of the pass's rows). The choices
// are recorded together (BatchedChoices): one argmax for consecutive greedy rows, one sample_rows dispatch
// for every sampled row, instead of a dispatch and a barrier per sequence (on lavapipe a one-row dispatch
// is one workgroup on one core, then a barrier idles the other).
void BatchEngine::record_choices(const StepRows& plan) {
  LlamaModel& m = *t_->model;
  Recorder& rec = *rec_;
  const VkDeviceSize row_bytes = VkDeviceSize(m.hparams().n_vocab) * 4;
  uint32_t at = 0;
  for (Slot* s : plan.in_step) {
    const Slice logits = logits_.sub(at * row_bytes, logits_.size - at * row_bytes);
    if (s->part == Slot::Part::Verify) {
      s->spec->record_verify(logits);
      at += s->rows;
    } else if (s->part == Slot::Part::Decode || s->part == Slot::Part::PrefillLast || s->part == Slot::Part::PlainRound) {
      TokenChooser& ch = *s->chooser;
      if (s->req->logits)   // read back (before sampling penalizes the row in place: choices_ orders them)
        rec.copy(logits.sub(0, row_bytes), logits_host_.sub(s->index * row_bytes, row_bytes));
      // (a plain round's history was set when it was planned; its choice goes where SpeculativeDecoder::finish
      // reads its verdict)
      const bool plain_round = s->part == Slot::Part::PlainRound;
      const uint32_t history = plain_round ? s->spec->history_len()
                               : ch.mode() == ChoiceMode::Device ? ch.set_history(s->context) : 0;
      const uint32_t slot = plain_round ? TokenChooser::kVerifySlot : 0;
      choices_->add(rec, m.kernels(), ch, logits.sub(0, row_bytes), slot, history, s->context.size());
      at += 1;
    }
  }
  choices_->record(rec, m.kernels());
}

// After the step's wait: what its part of the pass gave this sequence (may end the request).
void BatchEngine::take_result(Slot& s) {
  LlamaModel& m = *t_->model;
  const float* row = s.req->logits ? logits_host_.host<float>() + size_t(s.index) * m.hparams().n_vocab : nullptr;
  if (s.part == Slot::Part::Prefill || s.part == Slot::Part::PrefillLast) {
    s.prefilled += s.rows;
    s.result.prefilled += s.rows;
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.prefilled_tokens += s.rows;
  }
  switch (s.part) {
    case Slot::Part::Prefill:
    case Slot::Part::None:
      break;
    case Slot::Part::PrefillLast:
      s.decoding = true;
      if (s.drafter) {
        SpeculativeOptions so{uint32_t(o_.draft_max), uint32_t(o_.draft_min),
                              o_.draft_policy == "adaptive", /*timing_free=*/true};
        s.spec = std::make_unique<SpeculativeDecoder>(m, s.seq, *s.drafter, *s.chooser, *rec_, s.context, so,
                                                      [this, &s](uint32_t t, bool d) { return emit(s, t, d, nullptr); });
        break;   // the decoder emits the first token at its first round
      }
      [[fallthrough]];
    case Slot::Part::Decode: {
      const uint32_t t = s.chooser->token(0);
      if (!emit(s, t, false, row)) {
        end(s, s.stop_reason);
        break;
      }
      s.context.push_back(t);
      if (s.context.size() >= m.n_ctx()) end(s, "context");
      break;
    }
    case Slot::Part::Verify:
    case Slot::Part::PlainRound:
      if (!s.spec->finish()) end(s, s.stop_reason.empty() ? "context" : s.stop_reason);
      break;
  }
}

}  // namespace vkspec
