// `vkspec serve`: an OpenAI-compatible HTTP server (server/http_server.h) on the C API's continuous batching
// (vkspec_batch, through common/api.h): a request's job, its responses and the server's life. The endpoints
// are server_routes.cpp.
#include "server/server.h"

namespace vkspec::cli {
namespace serve {

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
    json x = {{"queued_s", r.queued_seconds}, {"prefill_s", r.prefill_seconds}, {"decode_s", r.decode_seconds},
              {"stop_reason", std::string(r.stop_reason)}};
    if (j.report_cache) {   // (off by default: the counts are an oracle for other clients' prompts)
      x["prefilled_tokens"] = r.prefilled_tokens;
      x["shared_prompt_tokens"] = r.shared_tokens;
    }
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

bool equal_constant_time(const std::string& a, const std::string& b) {
  unsigned diff = unsigned(a.size() ^ b.size());
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    diff |= unsigned(uint8_t(i < a.size() ? a[i] : 0) ^ uint8_t(i < b.size() ? b[i] : 0));
  return diff == 0;
}

void send_json(http::Response& res, int status, const json& body) { res.set(status, dump(body)); }

std::shared_ptr<Job> Server::start_job(CompletionSpec spec) {
  auto job = std::make_shared<Job>();
  job->spec = std::move(spec);
  char id[48];
  snprintf(id, sizeof id, "%s-%llx%08x", job->spec.chat ? "chatcmpl" : "cmpl",
           (unsigned long long)ids_.fetch_add(1), unsigned(std::random_device{}()));
  job->id = id;
  job->model = model_id_;
  job->drafter = drafter_;
  job->report_cache = so_.report_cache;
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
    r.draft_tree = job->spec.draft_tree;
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

void Server::respond(http::Response& res, std::shared_ptr<Job> job, const Dialect& dialect) {
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
    answer_when_done(res, job, [answer, drafter](const Job& j) {
      return std::pair<int, json>{j.error.empty() ? 200 : 500, answer(j, drafter)};
    });
    return;
  }
  res.headers.emplace_back("Cache-Control", "no-cache");
  res.content_type = dialect.stream_type;
  res.stream = [job, dialect](http::Sink& sink) {
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
        if (!sink.write(dialect.frame ? dialect.frame(e) : "data: " + e + "\n\n")) return job->cancel();
        last_write = Clock::now();
        if (e == "[DONE]") return;
      }
      // An SSE comment every two seconds also notices a client that left (NDJSON has no comments: its
      // client is noticed at the next line).
      if (dialect.sse && Clock::now() - last_write > std::chrono::seconds(2)) {
        if (!sink.write(": keep-alive\n\n")) return job->cancel();
        last_write = Clock::now();
      }
    }
  };
}

int Server::run() {
  // Ctrl-C and termination go to the main thread's wait only (made before any thread starts here).
  platform::StopSignal signals;

  http::Limits limits;
  limits.max_body_bytes = lim_.max_body = so_.max_body;
  limits.body_budget_bytes = std::max<size_t>(size_t(256) << 20, 16 * so_.max_body);
  limits.request_timeout_s = so_.timeout_s;
  limits.workers = so_.http_threads;
  limits.max_queued = 4 * so_.http_threads;
  http_ = std::make_unique<http::Server>(limits);
  routes();
  int port = 0;
  try {
    port = http_->bind(so_.host, so_.port);
  } catch (const std::exception& e) {
    throw Error(e.what());   // (it names the address and why)
  }
  fprintf(stderr, "vkspec: listening on http://%s:%d\n", so_.host.c_str(), port);
  std::thread listener([this] { http_->run(); });

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
      mp.progress = [](float fraction, void* self) {
        static_cast<Server*>(self)->load_fraction_ = fraction;
        return 0;
      };
      mp.progress_user = this;
      model_ = std::make_unique<api::Model>(o_.model, mp);
      const vkspec_model_info& mi = model_->info();
      lim_.n_ctx = mi.n_ctx;
      lim_.n_vocab = mi.n_vocab;
      lim_.spec_sampling = spec_sampling_value(o_.spec_sampling);
      n_embd_ = vkspec_model_n_embd(model_->get());
      architecture_ = mi.architecture;
      model_id_ = so_.alias.empty() ? platform::utf8_string(platform::utf8_path(o_.model).filename()) : so_.alias;
      const api::Model& model = *model_;
      enc_.prompt = [&model](const std::string& text) { return encode_prompt(model, text); };
      enc_.chat = [&model](const std::string& text) { return encode_chat(model, text); };
      try {
        template_ = chat_template_source(model, so_.chat_template);
        template_text_ = template_ ? *template_ : model.chat_template().value_or("");
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
  http_->stop();
  listener.join();
  batch_.reset();
  model_.reset();
  if (!load_error.empty()) throw Error(load_error);
  fprintf(stderr, "vkspec: stopped (%s)\n", platform::StopSignal::name(cause));
  return 0;
}

}  // namespace serve

int cmd_serve(const RunOptions& o, const ServeOptions& so) {
  if (so.parallel < 1 || so.parallel > 64) throw Error("--parallel must be 1..64");
  if (so.port < 0 || so.port > 65535) throw Error("--port must be 0..65535 (0: any free port)");
  serve::Server s(o, so);
  return s.run();
}

}  // namespace vkspec::cli
