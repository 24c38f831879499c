#include "engine/engine.h"
#include "engine/session_file.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace vkspec {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// One completion in progress: the prompt's passes, then decoding steps or speculative rounds.
struct Engine::Run {
  Session* session = nullptr;
  std::unique_ptr<Sequence> seq;
  bool prefilling = true, done = false;
  bool prefill_passes = false;     // the prompt in passes of a chunk, one per step (cancellable)
  uint32_t next = 0;               // plain decoding: the choice not yet fed back
  uint64_t submissions0 = 0, parts0 = 0, dispatches0 = 0;
  // The step submitted and not yet collected (Unit::None: none), what it covers and when it began.
  enum class Unit { None, PromptPart, PromptEnd, Decode, Round };
  Unit pending = Unit::None;
  uint32_t tokens = 0;             // PromptPart, PromptEnd: the prompt tokens it prefills
  StepMarks marks{};               // PromptPart, PromptEnd, Decode: its device time
  double budget_s = 0;             // Engine::set_device_budget when it began
  std::chrono::steady_clock::time_point t0;
  double pipelines_s0 = 0;   // Pipelines::total_creation_seconds() at t0
};

Engine::Engine(std::shared_ptr<TargetModel> target, const DraftOptions& o) : o_(o), t_(std::move(target)) {
  check_draft_options(o);
  const auto t_load = std::chrono::steady_clock::now();
  const auto lock = t_->claim(this);   // the draft's upload uses the shared queue
  draft_model_ = load_draft_model(*t_, o_, 1);
  if (o_.kind() != DrafterKind::None)
    drafter_ = make_drafter(o_.kind(), draft_model_ ? draft_model_->model.get() : nullptr, o_.p_min);
  load_s_ = t_->load_s + seconds_since(t_load);
}

Engine::~Engine() {
  if (rec_ && rec_->profiling()) fprintf(stderr, "decoding steps %s", rec_->profile_report().c_str());
  const auto lock = t_->claim(this);   // other Engines may be submitting on the shared device
  if (run_ && step_pending()) abandon_run();   // (waits for the device)
  run_.reset();
  chooser_.reset();
  rec_.reset();
  drafter_.reset();
  draft_model_.reset();
}

Session Engine::open_session() {
  const auto lock = t_->claim(this);
  return Session{t_->model->kv().new_sequence(), {}};
}

void Engine::close_session(Session& s) {
  const auto lock = t_->claim(this);
  if (run_ && run_->session == &s && step_pending()) abandon_run();   // the device is done with it first
  if (s.seq >= 0) t_->model->kv().free_sequence(s.seq);
  s = Session{};
}

void Engine::clear_session(Session& s) {
  if (run_) throw Error("internal: clear_session() during a completion");
  const auto lock = t_->claim(this);
  t_->model->kv().truncate(s.seq, 0);
  s.tokens.clear();
}

void Engine::warm_up(Session& s) {
  if (run_) throw Error("internal: warm_up() during a completion");
  const auto lock = t_->claim(this);
  t_->model->warm_up(s.seq);
  if (ModelDrafter* d = drafter_ ? drafter_->model_drafter() : nullptr) draft_model_->model->warm_up(d->sequence());
}

void Engine::save_session(const Session& s, const std::string& path) {
  if (run_) throw Error("internal: save_session() during a completion");
  const auto lock = t_->claim(this);
  vkspec::save_session(*t_, s, path);
}

void Engine::load_session(Session& s, const std::string& path) {
  if (run_) throw Error("internal: load_session() during a completion");
  const auto lock = t_->claim(this);
  vkspec::load_session(*t_, s, path);
}

namespace {
// log softmax(logits)[target], in double
double log_prob(const float* logits, uint32_t n_vocab, uint32_t target) {
  double mx = logits[0];
  for (uint32_t i = 1; i < n_vocab; ++i) mx = std::max(mx, double(logits[i]));
  double sum = 0;
  for (uint32_t i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i]) - mx);
  const double lp = double(logits[target]) - mx - std::log(sum);
  if (!std::isfinite(lp)) throw Error("the model produced non-finite logits");
  return lp;
}
}  // namespace

std::optional<std::vector<double>> Engine::score(Session& session, std::span<const uint32_t> tokens, size_t first) {
  LlamaModel& m = *t_->model;
  if (first < 1 || first >= tokens.size() || tokens.size() > m.n_ctx())
    throw Error("score needs 1 <= first < n_tokens <= n_ctx (" + std::to_string(m.n_ctx()) + ")");
  const uint32_t V = m.hparams().n_vocab;   // (ids are checked by write_tokens)
  clear_session(session);
  const auto lock = t_->claim(this);
  auto cancelled = [&] { return cancel_ && cancel_->load(std::memory_order_relaxed); };
  std::vector<double> out;
  out.reserve(tokens.size() - first);
  // The tokens before first - 1 only fill the cache (one submission, no logits); then the logits at
  // positions first-1 .. n-2, a pass of kMaxBatch rows at a time, predict tokens first .. n-1.
  if (first > 1) m.forward(session.seq, tokens.first(first - 1), Logits::None);
  for (size_t j = first - 1; j + 1 < tokens.size(); j += LlamaModel::kMaxBatch) {
    if (cancelled()) {
      m.kv().truncate(session.seq, 0);
      return std::nullopt;
    }
    const size_t n = std::min<size_t>(LlamaModel::kMaxBatch, tokens.size() - 1 - j);
    m.forward(session.seq, tokens.subspan(j, n), Logits::All);
    for (size_t r = 0; r < n; ++r) out.push_back(log_prob(m.logits(uint32_t(r)), V, tokens[j + r + 1]));
  }
  session.tokens.assign(tokens.begin(), tokens.end() - 1);
  if (m.kv().length(session.seq) != session.tokens.size()) throw Error("internal: the KV cache and the session disagree");
  return out;
}

std::vector<float> Engine::embed(Session& session, std::span<const uint32_t> tokens, LlamaModel::Pooling pooling, bool normalize) {
  LlamaModel& m = *t_->model;
  if (tokens.empty() || tokens.size() > m.n_ctx())
    throw Error("an embedding needs 1 to n_ctx (" + std::to_string(m.n_ctx()) + ") tokens, not " + std::to_string(tokens.size()));
  clear_session(session);
  const auto lock = t_->claim(this);
  std::vector<float> out = m.embed(session.seq, tokens, pooling);
  session.tokens.assign(tokens.begin(), tokens.end());
  if (normalize) normalize_embedding(out);
  return out;
}

void Engine::normalize_embedding(std::span<float> v) {
  double ss = 0;
  for (const float x : v) ss += double(x) * x;
  if (ss > 0)
    for (float& x : v) x = float(x / std::sqrt(ss));
}

SequenceResult Engine::generate(std::span<const uint32_t> prompt, const SamplingParams& sp, int n, bool ignore_eos,
                            bool speculate, const TokenCallback& on_token) {
  struct Scoped {   // the sequence goes back to the pool however generation ends
    Engine& e;
    Session s;
    ~Scoped() { e.close_session(s); }
  } scoped{*this, open_session()};
  return generate(scoped.s, prompt, sp, n, ignore_eos, speculate, on_token);
}

SequenceResult Engine::generate(Session& session, std::span<const uint32_t> prompt, const SamplingParams& sp, int n,
                            bool ignore_eos, bool speculate, const TokenCallback& on_token) {
  begin(session, prompt, sp, n, ignore_eos, speculate, on_token);
  while (step()) {
  }
  return finish();
}

void Engine::begin(Session& session, std::span<const uint32_t> prompt, const SamplingParams& sp, int n, bool ignore_eos,
                   bool speculate, const TokenCallback& on_token) {
  if (n <= 0) throw Error("-n must be positive (got " + std::to_string(n) + ")");
  LlamaModel& m = *t_->model;
  if (prompt.empty()) throw Error("the prompt is empty");
  if (prompt.size() >= m.n_ctx())
    throw Error("the prompt is " + std::to_string(prompt.size()) + " tokens, which does not fit the context of " +
                std::to_string(m.n_ctx()) + " (use --ctx)");
  const auto lock = t_->claim(this);
  auto r = std::make_unique<Run>();
  r->session = &session;
  TokenSink sink;
  if (on_token) sink = [on_token](uint32_t t, bool from_draft, const float*) { return on_token(t, from_draft); };
  r->seq = std::make_unique<Sequence>(prompt, uint32_t(n), ignore_eos, *t_->tok, cancel_, std::move(sink));
  Sequence& q = *r->seq;
  r->budget_s = budget_s_;
  r->prefill_passes = (cancel_ && !prefill_whole_) || budget_s_ > 0;
  q.result.speculative = speculate && can_speculate(o_.kind(), sp.constrained());
  q.constraint = t_->startable_constraint(sp);
  const uint32_t V = m.hparams().n_vocab, max_history = m.n_ctx() + LlamaModel::kMaxBatch;
  if (!chooser_) chooser_ = std::make_unique<TokenChooser>(*t_->ctx, *t_->pipelines, V, max_history);
  if (!rec_) rec_ = std::make_unique<Recorder>(*t_->ctx, profiling_requested());
  chooser_->start(sp, q.constraint.get());

  // Keep the cached K/V of the longest common prefix.
  const uint32_t common = reusable_prefix(session.tokens, prompt);
  m.kv().truncate(session.seq, common);
  session.tokens.resize(common);
  q.result.reused = common;
  q.cached = common;
  run_ = std::move(r);
}

bool Engine::step() {
  if (submit(true)) collect(UINT64_MAX);
  return !run_->done;
}

bool Engine::step_pending() const { return run_ && run_->pending != Run::Unit::None; }

// The end: the cache holds the context's tokens that were fed back (the last choice never is; a verify pass
// may have kept accepted drafts after the one that stopped generation).
void Engine::end_run(size_t fed) {
  Run& r = *run_;
  Sequence& q = *r.seq;
  SequenceResult& c = q.result;
  PagedKvCache& kv = t_->model->kv();
  const int seq = r.session->seq;
  const size_t held = std::min<size_t>(kv.length(seq), fed);
  kv.truncate(seq, uint32_t(held));
  r.session->tokens.assign(q.context.begin(), q.context.begin() + long(held));
  if (kv.length(seq) != r.session->tokens.size()) throw Error("internal: the KV cache and the session disagree");
  c.decode_submissions = Recorder::total_submissions() - r.submissions0;
  c.decode_parts = Recorder::total_parts() - r.parts0;
  c.decode_dispatches = Recorder::total_dispatches() - r.dispatches0;
  if (q.spec) c.spec = q.spec->stats();
  q.spec.reset();
  if (q.drafter) drafter_ = std::move(q.drafter);
  r.done = true;
}

// After an exception: the completion ends and leaves the session empty (and consistent), the device done with
// anything submitted, the model free for others. The caller holds the model.
void Engine::abandon_run() {
  if (rec_ && rec_->in_flight()) rec_->wait(UINT64_MAX);
  if (t_->in_flight == this) {
    t_->in_flight = nullptr;
    t_->collected.notify_all();
  }
  if (run_->session->seq >= 0) t_->model->kv().truncate(run_->session->seq, 0);
  run_->session->tokens.clear();
  if (run_->seq->drafter) drafter_ = std::move(run_->seq->drafter);   // lent for the completion
  run_.reset();
}

bool Engine::submit(bool wait_for_model) {
  if (!run_) throw Error("internal: submit() without begin()");
  Run& r = *run_;
  if (r.done) return false;
  if (r.pending != Run::Unit::None) throw Error("internal: submit() while a step is in flight");
  const auto lock = t_->claim(this, wait_for_model);
  try {
    LlamaModel& m = *t_->model;
    Sequence& q = *r.seq;
    const int seq = r.session->seq;
    r.t0 = std::chrono::steady_clock::now();
    rec_->set_budget(r.budget_s);
    r.pipelines_s0 = Pipelines::total_creation_seconds();
    if (r.prefilling) {
      // The prompt: one chunk (ubatch tokens) per step, without logits, while more than a chunk remains;
      // then the last part and the choice of the first token. A cancel request is seen between chunks.
      const uint32_t chunk = m.ubatch();
      if (q.cancelled()) {
        q.end(StopReason::Cancelled);
        end_run(q.cached);
        return false;
      }
      if (q.context.size() - q.cached > chunk && r.prefill_passes) {
        rec_->begin();
        r.marks.begin = rec_->mark();
        m.record_forward(*rec_, seq, m.write_tokens(std::span(q.context).subspan(q.cached, chunk)), chunk, Logits::None);
        r.marks.end = rec_->mark();
        rec_->submit();
        r.pending = Run::Unit::PromptPart;
        r.tokens = chunk;
      } else {   // not cancellable: the whole rest in one submission
        r.tokens = uint32_t(q.context.size() - q.cached);
        r.marks = submit_decode_step(m, seq, *chooser_, *rec_, m.write_tokens(std::span(q.context).subspan(q.cached)),
                                     r.tokens, q.context);
        r.pending = Run::Unit::PromptEnd;
      }
    } else if (q.spec) {
      if (!q.spec->submit_round()) {   // the sequence ended before a round (its last token emitted)
        q.end(StopReason::Context);   // (unless the stop rule ended it first)
        end_run(q.context.size());
        return false;
      }
      r.pending = Run::Unit::Round;
    } else {
      if (!q.take(r.next, false) || !q.feed_back(r.next, m.n_ctx())) {
        end_run(q.context.size());
        return false;
      }
      r.marks = submit_decode_step(m, seq, *chooser_, *rec_, chooser_->input(0), 1, q.context);
      r.pending = Run::Unit::Decode;
    }
    t_->in_flight = this;
    t_->in_flight_thread = std::this_thread::get_id();
    return true;
  } catch (...) {
    abandon_run();
    throw;
  }
}

bool Engine::collect(uint64_t timeout_ns) {
  if (!run_ || run_->pending == Run::Unit::None) throw Error("internal: collect() with no step in flight");
  Run& r = *run_;
  if (!rec_->wait(timeout_ns)) return false;   // (its own fence: the model's lock is not needed to look)
  const auto lock = t_->claim(this);
  try {
    LlamaModel& m = *t_->model;
    Sequence& q = *r.seq;
    SequenceResult& c = q.result;
    const Run::Unit unit = r.pending;
    r.pending = Run::Unit::None;
    t_->in_flight = nullptr;
    t_->collected.notify_all();
    const double wall_s = seconds_since(r.t0);
    const double pipelines_s = Pipelines::total_creation_seconds() - r.pipelines_s0;   // (while it was recorded)
    const double unit_s = unit == Run::Unit::Round ? -1 : rec_->seconds_between(r.marks.begin, r.marks.end);
    c.max_unit_gpu_s = std::max(c.max_unit_gpu_s, unit_s);
    c.max_release_gpu_s = std::max(c.max_release_gpu_s, rec_->max_release_seconds());
    c.max_group_gpu_s = std::max(c.max_group_gpu_s, rec_->max_group_seconds());
    switch (unit) {
      case Run::Unit::PromptPart:
        q.cached += r.tokens;
        c.prefilled += r.tokens;
        c.prefill_s += wall_s;
        c.prefill_pipelines_s += pipelines_s;
        break;
      case Run::Unit::PromptEnd:
        r.next = chooser_->token(0);
        q.cached = uint32_t(q.context.size());
        c.prefilled += r.tokens;
        c.prefill_s += wall_s;
        c.prefill_pipelines_s += pipelines_s;
        r.prefilling = false;
        r.submissions0 = Recorder::total_submissions();
        r.parts0 = Recorder::total_parts();
        r.dispatches0 = Recorder::total_dispatches();
        if (c.speculative) {
          q.drafter = std::move(drafter_);   // lent to the sequence until the completion ends
          q.start_speculating(m, r.session->seq, *chooser_, *rec_, {o_.max, o_.min, o_.policy, false, o_.tree});
        }
        break;
      case Run::Unit::Decode:
        r.next = chooser_->token(0);
        c.decode_gpu_s += std::max(0.0, rec_->seconds_between(r.marks.begin, r.marks.end));
        c.decode_s += wall_s;
        c.decode_pipelines_s += pipelines_s;
        break;
      case Run::Unit::Round:
        if (!q.spec->collect_round()) q.end(StopReason::Context);   // (unless the stop rule ended it first)
        c.max_unit_gpu_s = std::max(c.max_unit_gpu_s, q.spec->last_round_seconds());
        c.spec = q.spec->stats();
        c.decode_gpu_s = c.spec.gpu_s;
        c.decode_s += wall_s;
        c.decode_pipelines_s += pipelines_s;
        if (q.stop() != StopReason::None) end_run(q.context.size());
        break;
      case Run::Unit::None: break;
    }
    return true;
  } catch (...) {
    abandon_run();
    throw;
  }
}

SequenceResult Engine::finish() {
  if (!run_ || !run_->done) throw Error("internal: finish() before the completion ended");
  SequenceResult c = std::move(run_->seq->result);
  run_.reset();
  return c;
}

}  // namespace vkspec
