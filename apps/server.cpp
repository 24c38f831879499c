// `vkspec serve`: an OpenAI-compatible HTTP server (cpp-httplib) on the C API's continuous batching
// (vkspec_batch, through apps/api.h). Threads: httplib's pool serves connections; one engine thread runs the
// batch; the requests' callbacks (on the engine thread) only append to their Job under its mutex, so a slow
// or stalled client never blocks the engine or other clients (its connection times out, its sequence is
// cancelled and freed).
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <optional>
#include <random>
#include <thread>

#include <httplib.h>

#include "cli_common.h"
#include "embeddings_api.h"
#include "llamacpp_api.h"
#include "ollama_api.h"
#include "server_api.h"
#include "platform/platform.h"

namespace vkspec::cli {
namespace {
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// One HTTP request's n choices, shared by its handler and the engine's callbacks.
struct Job {
  struct Choice {
    // A running request's callbacks own the Job (through their ChoiceRef): a Job outlives its handler (a
    // stream that ended early) until its last request has ended.
    std::unique_ptr<TextStream> text;
    std::string content;               // what was produced (non-streamed responses)
    json logprobs = json::array();     // token_logprob entries (non-streamed responses)
    size_t logprob_offset = 0;         // completions' text_offset of the next token (streamed)
    std::string finish_reason;         // set when the choice ends
    // With tools: the reply is held back while it may still become a call (may_become_tool_call), and is
    // read as one at the end.
    bool holding = false;
    std::string held;
    std::optional<ToolCall> call;
    std::string call_id;
    vkspec_request_result result{};
  };
  api::Batch* batch = nullptr;         // outlives every handler (freed after the HTTP server stopped)
  CompletionSpec spec;
  std::string id, model, drafter;
  int64_t created = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Choice> choices;
  std::unique_ptr<std::atomic<uint64_t>[]> ids;   // each choice's request id in the batch (0: not submitted)
  std::deque<std::string> events;      // SSE payloads not yet sent
  uint32_t done = 0;
  std::string error;                   // a choice failed
  bool all_done() const { return done == choices.size(); }
  void cancel() {   // (an id that has ended is no error)
    for (size_t i = 0; i < choices.size(); ++i)
      if (const uint64_t id = ids[i].load()) vkspec_batch_cancel(batch->get(), id);
  }
};

// The user pointer of one choice's request: created at submission, deleted by its on_done (called once).
struct ChoiceRef {
  std::shared_ptr<Job> job;
  uint32_t index;
  const api::Model* model;   // token texts for logprobs
};

std::string tool_call_id() {
  std::random_device rd;
  char id[32];
  snprintf(id, sizeof id, "call_%08x%08x%08x", unsigned(rd()), unsigned(rd()), unsigned(rd()));
  return id;
}

std::string finish_reason(const std::string& stop_reason) {
  return stop_reason == "length" || stop_reason == "context" ? "length" : "stop";
}

json chunk(const Job& j, uint32_t index, const json& delta_or_text, const json& logprobs, const json& finish) {
  json c = {{"id", j.id}, {"object", j.spec.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", j.created}, {"model", j.model}};
  json choice = {{"index", index}};
  if (j.spec.chat) choice["delta"] = delta_or_text;
  else choice["text"] = delta_or_text;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish;
  c["choices"] = json::array({choice});
  return c;
}

json usage(const Job& j) {
  uint64_t completion = 0;
  for (const auto& c : j.choices) completion += c.result.completion_tokens;
  return {{"prompt_tokens", j.spec.prompt.size()}, {"completion_tokens", completion},
          {"total_tokens", j.spec.prompt.size() + completion}};
}

// vkspec's own figures per response: speculation, prefix sharing, timings.
json vkspec_fields(const Job& j, const std::string& drafter) {
  json per = json::array();
  for (const auto& c : j.choices) {
    const vkspec_request_result& r = c.result;
    json x = {{"prefilled_tokens", r.prefilled_tokens}, {"shared_prompt_tokens", r.shared_tokens},
              {"queued_s", r.queued_seconds}, {"prefill_s", r.prefill_seconds}, {"decode_s", r.decode_seconds},
              {"stop_reason", std::string(r.stop_reason)}};
    if (c.text && c.text->stopped()) x["stop_string"] = c.text->stop_string();
    if (r.speculative)
      x["speculative"] = {{"drafter", drafter}, {"drafted", r.drafted}, {"accepted", r.accepted},
                          {"acceptance_rate", r.drafted ? double(r.accepted) / double(r.drafted) : 0.0},
                          {"verify_passes", r.verify_passes},
                          {"tokens_per_verify", r.verify_passes ? double(r.round_tokens) / double(r.verify_passes) : 0.0}};
    per.push_back(x);
  }
  return {{"choices", per}};
}

json full_response(const Job& j, const std::string& drafter) {
  json choices = json::array();
  for (uint32_t i = 0; i < j.choices.size(); ++i) {
    const auto& c = j.choices[i];
    json ch = {{"index", i}};
    if (j.spec.chat) {
      ch["message"] = {{"role", "assistant"}, {"content", c.call ? json(nullptr) : json(c.content)}};
      if (c.call) ch["message"]["tool_calls"] = json::array({tool_call_json(*c.call, c.call_id)});
      ch["logprobs"] = j.spec.logprobs ? json{{"content", c.logprobs}} : json(nullptr);
    } else {
      ch["text"] = c.content;
      ch["logprobs"] = j.spec.logprobs ? completion_logprobs(c.logprobs, 0) : json(nullptr);
    }
    ch["finish_reason"] = c.finish_reason;
    choices.push_back(ch);
  }
  return {{"id", j.id}, {"object", j.spec.chat ? "chat.completion" : "text_completion"}, {"created", j.created},
          {"model", j.model}, {"choices", choices}, {"usage", usage(j)}, {"vkspec", vkspec_fields(j, drafter)}};
}

// How a response is written: OpenAI's (the empty functions), or another API's shapes over the same job
// events (Ollama's, llama-server's native ones).
struct Dialect {
  std::function<json(const json& openai)> whole;                  // a whole response
  std::function<std::string(const std::string& payload)> frame;   // one stream event's bytes (stateful)
  std::function<json(const ApiError&)> error;
  const char* stream_type = "text/event-stream";
  bool sse = true;   // SSE comments keep checking the connection while nothing is sent
};

bool equal_constant_time(const std::string& a, const std::string& b) {
  unsigned diff = unsigned(a.size() ^ b.size());
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    diff |= unsigned(uint8_t(i < a.size() ? a[i] : 0) ^ uint8_t(i < b.size() ? b[i] : 0));
  return diff == 0;
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

class Server {
 public:
  Server(const RunOptions& o, const ServeOptions& so) : o_(o), so_(so) {}

  int run();

 private:
  void routes();
  void completion(const httplib::Request& req, httplib::Response& res, bool chat);
  void ollama(const httplib::Request& req, httplib::Response& res, OllamaEndpoint ep);
  void llamacpp_completion(const httplib::Request& req, httplib::Response& res);   // llama-server's /completion
  void embeddings(const httplib::Request& req, httplib::Response& res, EmbedEndpoint ep);
  std::vector<std::vector<float>> embed(const EmbedSpec& spec);   // the inputs' vectors, in order
  // The job's answer: one JSON body, or its stream as it is made (OpenAI's SSE, or Ollama's NDJSON lines).
  void respond(httplib::Response& res, std::shared_ptr<Job> job, const Dialect& dialect);
  std::shared_ptr<Job> start_job(CompletionSpec spec);
  std::string metrics_text() const;

  RunOptions o_;
  ServeOptions so_;
  httplib::Server http_;
  std::atomic<bool> ready_{false};
  std::mutex stop_mutex_;   // guards stop_ and the batch's creation against a signal meanwhile
  bool stop_ = false;
  std::string model_id_, drafter_;
  std::unique_ptr<api::Model> model_;
  std::optional<std::string> template_;   // --chat-template's source; nullopt: the model's own
  PromptEncoder enc_;
  std::unique_ptr<api::Batch> batch_;
  ServerLimits lim_;
  uint32_t n_embd_ = 0;
  std::atomic<uint64_t> ids_{0}, http_4xx_{0}, http_5xx_{0};
  int64_t started_ = std::time(nullptr);
};

std::shared_ptr<Job> Server::start_job(CompletionSpec spec) {
  auto job = std::make_shared<Job>();
  job->spec = std::move(spec);
  char id[48];
  snprintf(id, sizeof id, "%s-%llx%08x", job->spec.chat ? "chatcmpl" : "cmpl",
           (unsigned long long)ids_.fetch_add(1), unsigned(std::random_device{}()));
  job->id = id;
  job->model = model_id_;
  job->drafter = drafter_;
  job->created = std::time(nullptr);
  job->batch = batch_.get();
  job->choices.resize(job->spec.n);
  job->ids = std::make_unique<std::atomic<uint64_t>[]>(job->spec.n);
  for (auto& c : job->choices) {
    c.text = std::make_unique<TextStream>(job->spec.stop);
    c.holding = !job->spec.tools.empty();
  }
  for (uint32_t i = 0; i < job->spec.n; ++i) {
    if (job->spec.stream && job->spec.chat)
      job->events.push_back(dump(chunk(*job, i, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr)));
  }
  for (uint32_t i = 0; i < job->spec.n; ++i) {
    vkspec_request_params r = vkspec_request_default_params();
    r.sampling = job->spec.sp;
    r.sampling.seed = job->spec.sp.seed + i;   // n choices: seeds s, s + 1, ...
    r.sampling.logit_bias_tokens = job->spec.bias_tokens.data();   // copied by the submission
    r.sampling.logit_bias = job->spec.bias_values.data();
    r.sampling.n_logit_bias = uint32_t(job->spec.bias_tokens.size());
    r.sampling.grammar = job->spec.grammar.empty() ? nullptr : job->spec.grammar.c_str();   // parsed there
    r.sampling.json_schema = job->spec.json_schema.empty() ? nullptr : job->spec.json_schema.c_str();
    r.sampling.grammar_trigger = job->spec.grammar_trigger.empty() ? nullptr : job->spec.grammar_trigger.c_str();
    r.max_tokens = job->spec.max_tokens;
    r.ignore_eos = job->spec.ignore_eos;
    r.logits = job->spec.logprobs;
    r.on_token = [](uint64_t, int32_t t, const char* piece, size_t len, int32_t, const float* row, uint32_t n_vocab,
                    void* user) -> int {
      const ChoiceRef& ref = *static_cast<ChoiceRef*>(user);
      Job* jp = ref.job.get();
      const uint32_t i = ref.index;
      std::lock_guard<std::mutex> lock(jp->mu);
      Job::Choice& c = jp->choices[i];
      std::string text = c.text->push(std::string(piece, len));
      if (c.holding) {
        c.held += text;
        text.clear();
        if (!may_become_tool_call(c.held)) {
          text.swap(c.held);
          c.holding = false;
        }
      }
      json lp = nullptr;
      if (jp->spec.logprobs && row) {
        const api::Model& model = *ref.model;
        auto piece_of = [&model](int32_t id) { return model.detokenize(std::span<const int32_t>(&id, 1)); };
        json e = token_logprob(piece_of, t, row, n_vocab, jp->spec.top_logprobs);
        if (!jp->spec.stream) {
          c.logprobs.push_back(std::move(e));
        } else if (jp->spec.chat) {
          lp = {{"content", json::array({e})}};
        } else {
          lp = completion_logprobs(json::array({e}), c.logprob_offset);
          c.logprob_offset += e["token"].get<std::string>().size();
        }
      }
      if (jp->spec.stream) {
        if (!text.empty() || !lp.is_null())
          jp->events.push_back(dump(chunk(*jp, i, jp->spec.chat ? json{{"content", text}} : json(text), lp, nullptr)));
      } else {
        c.content += text;
      }
      jp->cv.notify_all();
      return c.text->stopped() ? 1 : 0;
    };
    r.on_done = [](uint64_t, const vkspec_request_result* res, void* user) {
      std::unique_ptr<ChoiceRef> ref(static_cast<ChoiceRef*>(user));
      Job* job = ref->job.get();
      const uint32_t i = ref->index;
      std::lock_guard<std::mutex> lock(job->mu);
      Job::Choice& c = job->choices[i];
      c.result = *res;
      std::string tail = c.text->finish();
      const std::string reason = res->stop_reason;
      c.finish_reason = finish_reason(reason);
      if (reason == "error") job->error = res->error;
      if (c.holding) {   // a call only if the reply ended by itself (a cut one is text)
        tail = c.held + tail;
        if (c.finish_reason == "stop" && !c.text->stopped()) c.call = parse_tool_call(tail, job->spec.tools);
        if (c.call) {
          tail.clear();
          c.finish_reason = "tool_calls";
          c.call_id = tool_call_id();
        }
      }
      if (job->spec.stream) {
        if (c.call) {
          json tc = tool_call_json(*c.call, c.call_id);
          tc["index"] = 0;
          job->events.push_back(dump(chunk(*job, i, {{"tool_calls", json::array({tc})}}, nullptr, nullptr)));
        }
        if (!tail.empty())
          job->events.push_back(dump(chunk(*job, i, job->spec.chat ? json{{"content", tail}} : json(tail), nullptr, nullptr)));
        job->events.push_back(dump(chunk(*job, i, job->spec.chat ? json::object() : json(""), nullptr, c.finish_reason)));
      } else {
        c.content += tail;
      }
      if (++job->done == job->choices.size() && job->spec.stream) {
        if (!job->error.empty())
          job->events.push_back(dump(ApiError(500, "generation failed: " + job->error, {}, {}, "server_error").body()));
        if (job->spec.include_usage) {
          json u = {{"id", job->id}, {"object", job->spec.chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", job->created}, {"model", job->model}, {"choices", json::array()}, {"usage", usage(*job)},
                    {"vkspec", vkspec_fields(*job, job->drafter)}};
          job->events.push_back(dump(u));
        }
        job->events.push_back("[DONE]");
      }
      job->cv.notify_all();
    };
    auto ref = std::make_unique<ChoiceRef>(ChoiceRef{job, i, model_.get()});
    r.user = ref.get();
    try {
      job->ids[i] = batch_->submit(job->spec.prompt, r);
      ref.release();   // its on_done deletes it
    } catch (const std::exception& e) {
      job->cancel();
      throw ApiError(400, e.what());
    }
  }
  return job;
}

void Server::completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  const nlohmann::ordered_json body = llamacpp_openai_extensions(parse_body(req.body, lim_), lim_.n_ctx);
  respond(res, start_job(parse_completion(body, chat, lim_, enc_, model_id_)), Dialect{});
}

void Server::llamacpp_completion(const httplib::Request& req, httplib::Response& res) {
  try {
    const LlamaCppRequest l = llamacpp_request(parse_body(req.body, lim_), lim_.n_ctx);
    auto stream = std::make_shared<LlamaCppStream>(model_id_, l.settings);
    Dialect d;
    d.whole = [model = model_id_, settings = l.settings](const json& o) { return llamacpp_response(o, model, settings); };
    d.frame = [stream](const std::string& payload) { return stream->translate(payload); };
    d.error = llamacpp_error;
    respond(res, start_job(parse_completion(l.openai, false, lim_, enc_, model_id_)), d);
  } catch (const ApiError& e) {
    send_json(res, e.status, llamacpp_error(e));
  }
}

void Server::ollama(const httplib::Request& req, httplib::Response& res, OllamaEndpoint ep) {
  try {
    const OllamaRequest o = ollama_request(parse_body(req.body, lim_), ep, bool(enc_.render_chat), model_id_);
    if (o.load_only) return send_json(res, 200, ollama_loaded(ep, model_id_));
    auto stream = std::make_shared<OllamaStream>(ep, model_id_);
    Dialect d;
    d.whole = [ep, model = model_id_](const json& openai) { return ollama_response(openai, ep, model); };
    d.frame = [stream](const std::string& payload) { return stream->translate(payload); };
    d.error = ollama_error;
    d.stream_type = "application/x-ndjson";
    d.sse = false;
    respond(res, start_job(parse_completion(o.openai, o.chat, lim_, enc_, model_id_, o.fit_messages)), d);
  } catch (const ApiError& e) {
    send_json(res, e.status, ollama_error(e));
  }
}

void Server::embeddings(const httplib::Request& req, httplib::Response& res, EmbedEndpoint ep) {
  try {
    const EmbedSpec spec = parse_embeddings(parse_body(req.body, lim_), ep, lim_, enc_, model_id_, n_embd_);
    const auto t0 = Clock::now();
    const std::vector<std::vector<float>> vectors = embed(spec);
    send_json(res, 200, embeddings_response(spec, vectors, model_id_, std::chrono::duration<double>(Clock::now() - t0).count()));
  } catch (const ApiError& e) {
    if (ep == EmbedEndpoint::OpenAi) throw;
    send_json(res, e.status, ollama_error(e));
  }
}

// Each input an embedding request on the batch (run between steps, beside the generations); the handler
// waits for all of them. The callbacks hold the shared state, so a failed submission can leave at once.
std::vector<std::vector<float>> Server::embed(const EmbedSpec& spec) {
  struct Pending {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::vector<float>> vectors;
    size_t done = 0;
    std::string error;
  };
  struct Ref {
    std::shared_ptr<Pending> p;
    size_t index;
  };
  auto p = std::make_shared<Pending>();
  p->vectors.resize(spec.inputs.size());
  const vkspec_pooling pooling = so_.pooling == "mean" ? VKSPEC_POOLING_MEAN : VKSPEC_POOLING_LAST;
  const auto on_embedding = [](uint64_t, const float* v, uint32_t n, void* user) {
    const Ref& r = *static_cast<Ref*>(user);
    std::lock_guard<std::mutex> lock(r.p->mu);
    r.p->vectors[r.index].assign(v, v + n);
  };
  const auto on_done = [](uint64_t, const vkspec_request_result* res, void* user) {
    std::unique_ptr<Ref> r(static_cast<Ref*>(user));
    std::lock_guard<std::mutex> lock(r->p->mu);
    if (std::string(res->stop_reason) != "embedded" && r->p->error.empty())
      r->p->error = res->error[0] ? res->error : res->stop_reason;
    r->p->done++;
    r->p->cv.notify_all();
  };
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    auto ref = std::make_unique<Ref>(Ref{p, i});
    try {
      ids.push_back(batch_->embed(spec.inputs[i], pooling, spec.normalize, on_embedding, on_done, ref.get()));
      ref.release();   // its on_done deletes it
    } catch (const std::exception& e) {
      for (const uint64_t id : ids) batch_->cancel(id);
      throw ApiError(400, e.what());
    }
  }
  std::unique_lock<std::mutex> lock(p->mu);
  p->cv.wait(lock, [&] { return p->done == ids.size(); });
  if (!p->error.empty()) throw ApiError(500, "embedding failed: " + p->error, {}, {}, "server_error");
  return std::move(p->vectors);
}

void Server::respond(httplib::Response& res, std::shared_ptr<Job> job, const Dialect& dialect) {
  const std::string drafter = drafter_;
  // the whole response, in the request's dialect
  auto answer = [dialect](const Job& j, const std::string& drafter) {
    if (!j.error.empty()) {
      const ApiError e(500, "generation failed: " + j.error, {}, {}, "server_error");
      return dialect.error ? dialect.error(e) : e.body();
    }
    return dialect.whole ? dialect.whole(full_response(j, drafter)) : full_response(j, drafter);
  };
  if (!job->spec.stream) {
    // Wait a little for the answer; a longer one is sent by a content provider that writes a space (JSON
    // allows leading whitespace) every two seconds meanwhile, so that a client that left is noticed and its
    // choices cancelled. Its status is then 200 even if generation fails (the body is the error object).
    {
      std::unique_lock<std::mutex> lock(job->mu);
      if (job->cv.wait_for(lock, std::chrono::seconds(1), [&] { return job->all_done(); })) {
        send_json(res, job->error.empty() ? 200 : 500, answer(*job, drafter));
        return;
      }
    }
    res.set_chunked_content_provider(
        "application/json",
        [job, drafter, answer](size_t, httplib::DataSink& sink) {
          std::unique_lock<std::mutex> lock(job->mu);
          while (!job->cv.wait_for(lock, std::chrono::seconds(2), [&] { return job->all_done(); })) {
            lock.unlock();
            const bool ok = sink.write(" ", 1);
            lock.lock();
            if (!ok) {
              job->cancel();
              return false;
            }
          }
          const std::string body = dump(answer(*job, drafter));
          lock.unlock();
          if (!sink.write(body.data(), body.size())) return false;
          sink.done();
          return true;
        },
        [job](bool success) {
          if (!success) job->cancel();
        });
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      dialect.stream_type,
      [job, dialect](size_t, httplib::DataSink& sink) {
        // Sends what is ready; a write that fails (the client left) cancels every choice of the job.
        auto last_write = Clock::now();
        for (;;) {
          std::deque<std::string> ready;
          {
            std::unique_lock<std::mutex> lock(job->mu);
            job->cv.wait_for(lock, std::chrono::milliseconds(250), [&] { return !job->events.empty(); });
            ready.swap(job->events);
          }
          for (const std::string& e : ready) {
            const std::string frame = dialect.frame ? dialect.frame(e) : "data: " + e + "\n\n";
            if (!frame.empty() && !sink.write(frame.data(), frame.size())) {
              job->cancel();
              return false;
            }
            last_write = Clock::now();
            if (e == "[DONE]") {
              sink.done();
              return true;
            }
          }
          // An SSE comment every two seconds also notices a client that left (NDJSON has no comments: its
          // client is noticed at the next line).
          if (dialect.sse && Clock::now() - last_write > std::chrono::seconds(2)) {
            static const char ping[] = ": keep-alive\n\n";
            if (!sink.write(ping, sizeof ping - 1)) {
              job->cancel();
              return false;
            }
            last_write = Clock::now();
          }
        }
      },
      [job](bool success) {
        if (!success) job->cancel();
      });
}

std::string Server::metrics_text() const {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    char line[512];
    snprintf(line, sizeof line, "# HELP vkspec_%s %s\n# TYPE vkspec_%s %s\nvkspec_%s %.17g\n", name, help, name, type, name, v);
    out += line;
  };
  metric("ready", "gauge", "1 once the model is loaded", ready_ ? 1 : 0);
  if (batch_ && ready_) {
    const vkspec_batch_metrics m = batch_->metrics();
    metric("requests_total", "counter", "Sequences (choices) submitted", double(m.requests));
    metric("requests_done_total", "counter", "Sequences ended", double(m.requests_done));
    metric("requests_active", "gauge", "Sequences being decoded", m.active);
    metric("requests_queued", "gauge", "Sequences waiting for admission", m.queued);
    metric("prompt_tokens_total", "counter", "Prompt tokens of admitted sequences", double(m.prompt_tokens));
    metric("prompt_tokens_prefilled_total", "counter", "Prompt tokens run through the model", double(m.prefilled_tokens));
    metric("prompt_tokens_shared_total", "counter", "Prompt tokens taken from another sequence's KV blocks",
           double(m.shared_tokens));
    metric("generated_tokens_total", "counter", "Tokens generated", double(m.generated_tokens));
    metric("draft_tokens_total", "counter", "Draft tokens verified", double(m.drafted));
    metric("draft_tokens_accepted_total", "counter", "Draft tokens accepted", double(m.accepted));
    metric("acceptance_rate", "gauge", "Accepted / verified draft tokens", m.drafted ? double(m.accepted) / double(m.drafted) : 0);
    metric("steps_total", "counter", "Batched steps (one submission each)", double(m.steps));
    metric("step_rows_total", "counter", "Rows run by the batched steps", double(m.step_rows));
    metric("kv_blocks_in_use", "gauge", "KV cache blocks held by sequences (running and cached)", m.kv_blocks_in_use);
    metric("prompt_cache_sequences", "gauge", "Finished sequences kept for their prefix", m.cached_sequences);
    metric("prompt_cache_evictions_total", "counter", "Cached sequences dropped", double(m.cache_evictions));
    metric("kv_blocks_total", "gauge", "KV cache blocks in the pool", m.kv_blocks_total);
    metric("kv_blocks_allocated_total", "counter", "KV blocks taken from the pool", double(m.kv_blocks_allocated));
    metric("parallel", "gauge", "Sequences decoded together at most", m.parallel);
    metric("draft_kv_blocks_in_use", "gauge", "The draft model's KV blocks held by sequences (running and cached)",
           m.draft_kv_blocks_in_use);
    metric("draft_kv_blocks_total", "gauge", "KV blocks in the draft model's pool (0 without a draft model)",
           m.draft_kv_blocks_total);
    metric("draft_kv_blocks_allocated_total", "counter", "Draft KV blocks taken from the pool",
           double(m.draft_kv_blocks_allocated));
  }
  metric("http_client_errors_total", "counter", "HTTP responses with a 4xx status", double(http_4xx_));
  metric("http_server_errors_total", "counter", "HTTP responses with a 5xx status", double(http_5xx_));
  return out;
}

void Server::routes() {
  // (every route but /health and /metrics needs the model: the pre-routing handler answers 503 while it loads)
  http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, false); });
  http_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, true); });
  // Ollama's API (apps/ollama_api.h): generation, and the model as its listings describe one
  http_.Post("/api/generate", [this](const httplib::Request& req, httplib::Response& res) { ollama(req, res, OllamaEndpoint::Generate); });
  http_.Post("/api/chat", [this](const httplib::Request& req, httplib::Response& res) { ollama(req, res, OllamaEndpoint::Chat); });
  for (const char* path : {"/completion", "/completions"})
    http_.Post(path, [this](const httplib::Request& req, httplib::Response& res) { llamacpp_completion(req, res); });
  http_.Get("/props", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, llamacpp_props(lim_.n_ctx, so_.parallel, o_.model, template_ ? *template_ : "", !drafter_.empty()));
  });
  // Embeddings (apps/embeddings_api.h): OpenAI's (also under llama-server's /embeddings), Ollama's two
  for (const char* path : {"/v1/embeddings", "/embeddings"})
    http_.Post(path, [this](const httplib::Request& req, httplib::Response& res) { embeddings(req, res, EmbedEndpoint::OpenAi); });
  http_.Post("/api/embed", [this](const httplib::Request& req, httplib::Response& res) { embeddings(req, res, EmbedEndpoint::OllamaEmbed); });
  http_.Post("/api/embeddings", [this](const httplib::Request& req, httplib::Response& res) {
    embeddings(req, res, EmbedEndpoint::OllamaEmbeddings);
  });
  auto ollama_model = [this] {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(o_.model, ec);
    return json{{"name", model_id_}, {"model", model_id_}, {"size", ec ? 0 : size}, {"digest", ""},
                {"modified_at", "1970-01-01T00:00:00Z"},
                {"details", {{"parent_model", ""}, {"format", "gguf"}, {"family", "llama"}, {"families", {"llama"}},
                             {"parameter_size", ""}, {"quantization_level", ""}}}};
  };
  http_.Get("/api/tags", [ollama_model](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"models", json::array({ollama_model()})}});
  });
  http_.Get("/api/ps", [ollama_model](const httplib::Request&, httplib::Response& res) {
    json m = ollama_model();
    m["expires_at"] = "2999-01-01T00:00:00Z";   // loaded for the server's life
    m["size_vram"] = m["size"];
    send_json(res, 200, {{"models", json::array({m})}});
  });
  http_.Post("/api/show", [this, ollama_model](const httplib::Request& req, httplib::Response& res) {
    try {
      const nlohmann::ordered_json body = parse_body(req.body, lim_);
      const auto name = body.find(body.contains("model") ? "model" : "name");
      if (name == body.end() || !name->is_string()) throw ApiError(400, "'model' must be a string", "model");
      if (*name != model_id_ && *name != model_id_ + ":latest")
        throw ApiError(404, "model '" + name->get<std::string>() + "' not found");
      const json m = ollama_model();
      json caps = json::array({"completion"});
      if (enc_.render_chat) caps.push_back("tools");   // (chat needs a template)
      send_json(res, 200, {{"modelfile", ""}, {"parameters", ""}, {"template", template_ ? *template_ : ""},
                           {"details", m["details"]}, {"model_info", {{"general.architecture", "llama"},
                                                                      {"llama.context_length", lim_.n_ctx}}},
                           {"capabilities", caps}});
    } catch (const ApiError& e) {
      send_json(res, e.status, ollama_error(e));
    }
  });
  // llama.cpp's server utilities
  http_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    const TokenizeSpec t = parse_tokenize(parse_body(req.body, lim_));
    const std::vector<int32_t> ids = model_->tokenize(t.content, t.add_special ? VKSPEC_ADD_BOS : 0, t.parse_special);
    json tokens = json::array();
    for (const int32_t id : ids)
      if (t.with_pieces) tokens.push_back({{"id", id}, {"piece", token_piece(model_->detokenize(std::span<const int32_t>(&id, 1)))}});
      else tokens.push_back(id);
    send_json(res, 200, {{"tokens", tokens}});
  });
  http_.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    send_json(res, 200, {{"content", model_->detokenize(parse_detokenize(parse_body(req.body, lim_), lim_))}});
  });
  http_.Post("/apply-template", [this](const httplib::Request& req, httplib::Response& res) {
    send_json(res, 200, {{"prompt", apply_template(parse_body(req.body, lim_), enc_)}});
  });
  // the Ollama API version whose endpoints these are (clients check it for features such as tools)
  http_.Get("/api/version", [](const httplib::Request&, httplib::Response& res) { send_json(res, 200, {{"version", "0.6.0"}}); });
  http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"object", "list"},
                         {"data", json::array({{{"id", model_id_}, {"object", "model"}, {"created", started_},
                                                {"owned_by", "vkspec"}}})}});
  });
  http_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (ready_) send_json(res, 200, {{"status", "ok"}});
    else send_json(res, 503, {{"status", "loading"}});
  });
  http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(), "text/plain; version=0.0.4");
  });
  http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // errors in the shape of the request's API: Ollama's under /api/, OpenAI's elsewhere
    auto refuse = [&](const ApiError& e) {
      send_json(res, e.status, req.path.rfind("/api/", 0) == 0 ? ollama_error(e) : e.body());
      return httplib::Server::HandlerResponse::Handled;
    };
    if (!so_.api_key.empty() && req.path != "/health") {
      const std::string auth = req.get_header_value("Authorization");
      const std::string prefix = "Bearer ";
      const std::string given = auth.rfind(prefix, 0) == 0 ? auth.substr(prefix.size()) : std::string();
      if (!equal_constant_time(given, so_.api_key))
        return refuse(ApiError(401, "invalid or missing API key (Authorization: Bearer KEY)", {}, "invalid_api_key"));
    }
    if (!ready_ && req.path != "/health" && req.path != "/metrics")   // (the model and its name are being made)
      return refuse(ApiError(503, "the model is still loading", {}, {}, "server_error"));
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& e) {
      send_json(res, e.status, e.body());
    } catch (const std::exception& e) {
      send_json(res, 500, ApiError(500, e.what(), {}, {}, "server_error").body());
    } catch (...) {
      send_json(res, 500, ApiError(500, "unknown error", {}, {}, "server_error").body());
    }
  });
  // Errors httplib answers itself (unknown path, body too large, bad request line) in OpenAI's shape too.
  http_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = "HTTP error " + std::to_string(res.status);
    if (res.status == 404) message = "no route for " + req.method + " " + req.path;
    if (res.status == 413) message = "the request body is too large";
    if (res.status == 400) message = "malformed HTTP request";
    send_json(res, res.status, ApiError(res.status, message).body());
  });
  http_.set_logger([this](const httplib::Request&, const httplib::Response& res) {
    if (res.status >= 500) ++http_5xx_;
    else if (res.status >= 400) ++http_4xx_;
  });
}

int Server::run() {
  // Ctrl-C and termination go to the main thread's wait only (made before any thread starts here).
  platform::StopSignal signals;

  http_.new_task_queue = [n = so_.http_threads] { return new httplib::ThreadPool(n); };
  http_.set_payload_max_length(lim_.max_body = so_.max_body);
  http_.set_read_timeout(so_.timeout_s, 0);
  http_.set_write_timeout(so_.timeout_s, 0);
  http_.set_keep_alive_timeout(5);
  routes();
  // httplib listens with a backlog of 5: a burst of clients connecting at once (32 streams) overflowed it and
  // some connections were reset. The listening socket is captured here and its backlog raised after bind.
  // SO_REUSEADDR only (httplib's default adds SO_REUSEPORT, with which a second server could bind the same
  // port and silently take half of the connections): a port in use is an error.
  socket_t listen_fd = INVALID_SOCKET;
  http_.set_socket_options([&listen_fd](socket_t sock) {
    platform::set_listen_socket_options(std::intptr_t(sock));
    listen_fd = sock;
  });
  int port = so_.port;
  if (port == 0) {
    port = http_.bind_to_any_port(so_.host);
    if (port < 0) throw Error("cannot listen on " + so_.host);
  } else if (!http_.bind_to_port(so_.host, port)) {
    throw Error("cannot listen on " + so_.host + ":" + std::to_string(port) + " (in use, or not an address of this machine)");
  }
  if (listen_fd != INVALID_SOCKET) platform::raise_listen_backlog(std::intptr_t(listen_fd));
  fprintf(stderr, "vkspec: listening on http://%s:%d\n", so_.host.c_str(), port);
  std::thread listener([this] { http_.listen_after_bind(); });

  // Load (/health answers 503 meanwhile), then step the engine until a signal.
  std::string load_error;
  std::thread worker([&] {
    try {
      if (o_.ctx < 0) throw Error("--ctx must be positive");
      vkspec_model_params mp = vkspec_model_default_params();
      mp.device = o_.device;
      mp.n_ctx = uint32_t(o_.ctx);
      mp.max_contexts = so_.parallel + so_.prompt_cache;   // the cached ones share the pool of `parallel`
      mp.kv_contexts = so_.parallel;
      model_ = std::make_unique<api::Model>(o_.model, mp);
      const vkspec_model_info& mi = model_->info();
      lim_.n_ctx = mi.n_ctx;
      lim_.n_vocab = mi.n_vocab;
      n_embd_ = vkspec_model_n_embd(model_->get());
      model_id_ = so_.alias.empty() ? platform::utf8_string(platform::utf8_path(o_.model).filename()) : so_.alias;
      const api::Model& model = *model_;
      enc_.prompt = [&model](const std::string& text) { return encode_prompt(model, text); };
      enc_.chat = [&model](const std::string& text) { return encode_chat(model, text); };
      try {
        template_ = chat_template_source(model, so_.chat_template);
        // a template file that cannot render a plain conversation is an error now, not at each request
        if (template_) model.apply_chat_template(template_, R"([{"role": "user", "content": "hi"}])", true);
        enc_.render_chat = [this](const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools) {
          if (tools.is_null()) return model_->apply_chat_template(template_, messages.dump(), true);
          const nlohmann::ordered_json request = {{"messages", messages}, {"tools", tools}};
          return model_->apply_chat_template(template_, request.dump(), true);
        };
      } catch (const std::exception& e) {
        if (!so_.chat_template.empty()) throw Error("--chat-template " + so_.chat_template + ": " + e.what());
        fprintf(stderr, "vkspec: warning: %s: /v1/chat/completions will answer 400\n", e.what());
      }
      vkspec_batch_params bp = vkspec_batch_default_params();
      bp.parallel = so_.parallel;
      bp.cached_sequences = so_.prompt_cache;
      bp.draft = draft_params(o_);
      drafter_ = drafter_name(o_);
      {
        std::lock_guard<std::mutex> lock(stop_mutex_);
        batch_ = std::make_unique<api::Batch>(model, bp);
        if (stop_) batch_->stop();   // a signal came while loading
      }
      batch_->warm_up();   // every pass width's pipelines now, not in the first requests' steps
      ready_ = true;
      fprintf(stderr, "vkspec: model %s loaded (%s, context %u, %u sequences)\n", model_id_.c_str(), mi.device,
              lim_.n_ctx, so_.parallel);
      batch_->run();
    } catch (const std::exception& e) {
      load_error = e.what();
      signals.request_stop();
    }
  });
  const platform::StopSignal::Cause cause = signals.wait();
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stop_ = true;
    if (batch_) batch_->stop();
  }
  worker.join();
  if (batch_) batch_->shutdown();   // ends what is left: waiting handlers answer, streams end
  http_.stop();
  listener.join();
  batch_.reset();
  model_.reset();
  if (!load_error.empty()) throw Error(load_error);
  fprintf(stderr, "vkspec: stopped (%s)\n", platform::StopSignal::name(cause));
  return 0;
}

}  // namespace

int cmd_serve(const RunOptions& o, const ServeOptions& so) {
  if (so.parallel < 1 || so.parallel > 64) throw Error("--parallel must be 1..64");
  if (so.port < 0 || so.port > 65535) throw Error("--port must be 0..65535 (0: any free port)");
  Server s(o, so);
  return s.run();
}

}  // namespace vkspec::cli
