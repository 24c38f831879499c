// `vkspec serve`'s endpoints: every route, each dialect's handler, embeddings and /metrics.
#include "server/server.h"

#include <cstring>

extern const char kChatPage[];   // (generated from apps/server/webui/chat.html by cmake/embed_file.cmake)
extern const size_t kChatPageSize;

namespace vkspec::cli::serve {

void Server::completion(const http::Request& req, http::Response& res, bool chat) {
  const nlohmann::ordered_json body = llamacpp_openai_extensions(parse_body(req.body, lim_), lim_.n_ctx);
  respond(res, start_job(parse_completion(body, chat, lim_, enc_, model_id_)), Dialect{});
}

void Server::llamacpp_completion(const http::Request& req, http::Response& res) {
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

void Server::ollama(const http::Request& req, http::Response& res, OllamaEndpoint ep) {
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

struct Server::EmbedJob {
  api::Batch* batch = nullptr;   // outlives every handler (freed after the HTTP server stopped)
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<float>> vectors;   // the inputs' vectors, in order
  std::vector<uint64_t> ids;                 // their requests in the batch
  size_t done = 0;
  std::string error;
  bool all_done() const { return done == ids.size(); }
  void cancel() {   // (an id that has ended is no error)
    for (const uint64_t id : ids) batch->cancel(id);
  }
};

void Server::embeddings(const http::Request& req, http::Response& res, EmbedEndpoint ep) {
  try {
    const EmbedSpec spec = parse_embeddings(parse_body(req.body, lim_), ep, lim_, enc_, model_id_, n_embd_);
    const auto t0 = Clock::now();
    const std::shared_ptr<EmbedJob> job = start_embed(spec);
    // the answer in the endpoint's dialect (job->mu held)
    auto answer = [spec, ep, t0, model = model_id_](const EmbedJob& j) -> std::pair<int, json> {
      if (!j.error.empty()) {
        const ApiError e(500, "embedding failed: " + j.error, {}, {}, "server_error");
        return {e.status, ep == EmbedEndpoint::OpenAi ? json(e.body()) : json(ollama_error(e))};
      }
      return {200, embeddings_response(spec, j.vectors, model, std::chrono::duration<double>(Clock::now() - t0).count())};
    };
    answer_when_done(res, job, answer);
  } catch (const ApiError& e) {
    if (ep == EmbedEndpoint::OpenAi) throw;
    send_json(res, e.status, ollama_error(e));
  }
}

std::shared_ptr<Server::EmbedJob> Server::start_embed(const EmbedSpec& spec) {
  struct Ref {
    std::shared_ptr<EmbedJob> job;
    size_t index;
  };
  auto job = std::make_shared<EmbedJob>();
  job->batch = batch_.get();
  job->vectors.resize(spec.inputs.size());
  const vkspec_pooling pooling = so_.pooling == "mean" ? VKSPEC_POOLING_MEAN : VKSPEC_POOLING_LAST;
  const auto on_embedding = [](uint64_t, const float* v, uint32_t n, void* user) {
    const Ref& r = *static_cast<Ref*>(user);
    std::lock_guard<std::mutex> lock(r.job->mu);
    r.job->vectors[r.index].assign(v, v + n);
  };
  const auto on_done = [](uint64_t, const vkspec_request_result* res, void* user) {
    std::unique_ptr<Ref> r(static_cast<Ref*>(user));
    std::lock_guard<std::mutex> lock(r->job->mu);
    if (std::string(res->stop_reason) != "embedded" && r->job->error.empty())
      r->job->error = res->error[0] ? res->error : res->stop_reason;
    r->job->done++;
    r->job->cv.notify_all();
  };
  std::lock_guard<std::mutex> lock(job->mu);   // (a request may end before the next is submitted)
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    auto ref = std::make_unique<Ref>(Ref{job, i});
    try {
      job->ids.push_back(batch_->embed(spec.inputs[i], pooling, spec.normalize, on_embedding, on_done, ref.get()));
      ref.release();   // its on_done deletes it
    } catch (const std::exception& e) {
      job->cancel();
      throw ApiError(400, e.what());
    }
  }
  return job;
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
  auto post = [this](const char* path, http::Handler h) { http_->route(http::Method::Post, path, std::move(h)); };
  auto get = [this](const char* path, http::Handler h) { http_->route(http::Method::Get, path, std::move(h)); };
  // (every route but /health and /metrics needs the model: the pre-routing handler answers 503 while it loads)
  post("/v1/completions", [this](const http::Request& req, http::Response& res) { completion(req, res, false); });
  post("/v1/chat/completions", [this](const http::Request& req, http::Response& res) { completion(req, res, true); });
  // Ollama's API (apps/server/ollama_api.h): generation, and the model as its listings describe one
  post("/api/generate", [this](const http::Request& req, http::Response& res) { ollama(req, res, OllamaEndpoint::Generate); });
  post("/api/chat", [this](const http::Request& req, http::Response& res) { ollama(req, res, OllamaEndpoint::Chat); });
  for (const char* path : {"/completion", "/completions"})
    post(path, [this](const http::Request& req, http::Response& res) { llamacpp_completion(req, res); });
  get("/props", [this](const http::Request&, http::Response& res) {
    send_json(res, 200, llamacpp_props(lim_.n_ctx, so_.parallel, o_.model, template_text_, !drafter_.empty()));
  });
  // Embeddings (apps/server/embeddings_api.h): OpenAI's (also under llama-server's /embeddings), Ollama's two
  for (const char* path : {"/v1/embeddings", "/embeddings"})
    post(path, [this](const http::Request& req, http::Response& res) { embeddings(req, res, EmbedEndpoint::OpenAi); });
  post("/api/embed", [this](const http::Request& req, http::Response& res) { embeddings(req, res, EmbedEndpoint::OllamaEmbed); });
  post("/api/embeddings", [this](const http::Request& req, http::Response& res) {
    embeddings(req, res, EmbedEndpoint::OllamaEmbeddings);
  });
  auto ollama_model = [this] {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(o_.model, ec);
    return json{{"name", model_id_}, {"model", model_id_}, {"size", ec ? 0 : size}, {"digest", ""},
                {"modified_at", "1970-01-01T00:00:00Z"},
                {"details", {{"parent_model", ""}, {"format", "gguf"}, {"family", architecture_}, {"families", {architecture_}},
                             {"parameter_size", ""}, {"quantization_level", ""}}}};
  };
  get("/api/tags", [ollama_model](const http::Request&, http::Response& res) {
    send_json(res, 200, {{"models", json::array({ollama_model()})}});
  });
  get("/api/ps", [ollama_model](const http::Request&, http::Response& res) {
    json m = ollama_model();
    m["expires_at"] = "2999-01-01T00:00:00Z";   // loaded for the server's life
    m["size_vram"] = m["size"];
    send_json(res, 200, {{"models", json::array({m})}});
  });
  post("/api/show", [this, ollama_model](const http::Request& req, http::Response& res) {
    try {
      const nlohmann::ordered_json body = parse_body(req.body, lim_);
      const auto name = body.find(body.contains("model") ? "model" : "name");
      if (name == body.end() || !name->is_string()) throw ApiError(400, "'model' must be a string", "model");
      if (*name != model_id_ && *name != model_id_ + ":latest")
        throw ApiError(404, "model '" + name->get<std::string>() + "' not found");
      const json m = ollama_model();
      json caps = json::array({"completion"});
      if (enc_.render_chat) caps.push_back("tools");   // (chat needs a template)
      send_json(res, 200, {{"modelfile", ""}, {"parameters", ""}, {"template", template_text_},
                           {"details", m["details"]}, {"model_info", {{"general.architecture", architecture_},
                                                                      {architecture_ + ".context_length", lim_.n_ctx}}},
                           {"capabilities", caps}});
    } catch (const ApiError& e) {
      send_json(res, e.status, ollama_error(e));
    }
  });
  // llama.cpp's server utilities
  post("/tokenize", [this](const http::Request& req, http::Response& res) {
    const TokenizeSpec t = parse_tokenize(parse_body(req.body, lim_));
    const std::vector<int32_t> ids = model_->tokenize(t.content, t.add_special ? VKSPEC_ADD_BOS : 0, t.parse_special);
    json tokens = json::array();
    for (const int32_t id : ids)
      if (t.with_pieces) tokens.push_back({{"id", id}, {"piece", token_piece(model_->detokenize(std::span<const int32_t>(&id, 1)))}});
      else tokens.push_back(id);
    send_json(res, 200, {{"tokens", tokens}});
  });
  post("/detokenize", [this](const http::Request& req, http::Response& res) {
    send_json(res, 200, {{"content", model_->detokenize(parse_detokenize(parse_body(req.body, lim_), lim_))}});
  });
  post("/apply-template", [this](const http::Request& req, http::Response& res) {
    send_json(res, 200, {{"prompt", apply_template(parse_body(req.body, lim_), enc_)}});
  });
  // the Ollama API version whose endpoints these are (clients check it for features such as tools)
  get("/api/version", [](const http::Request&, http::Response& res) { send_json(res, 200, {{"version", "0.6.0"}}); });
  get("/v1/models", [this](const http::Request&, http::Response& res) {
    send_json(res, 200, {{"object", "list"},
                         {"data", json::array({{{"id", model_id_}, {"object", "model"}, {"created", started_},
                                                {"owned_by", "vkspec"}}})}});
  });
  // OpenAI's model retrieval: the one model, or model_not_found
  get("/v1/models/*", [this](const http::Request& req, http::Response& res) {
    const std::string id = http::percent_decoded(req.path.substr(std::strlen("/v1/models/")));
    if (id != model_id_) throw ApiError(404, "the model '" + id + "' does not exist", "model", "model_not_found");
    send_json(res, 200, {{"id", model_id_}, {"object", "model"}, {"created", started_}, {"owned_by", "vkspec"}});
  });
  if (!so_.no_webui)   // the chat page (apps/server/webui/chat.html, embedded at build time)
    get("/", [](const http::Request&, http::Response& res) { res.set(200, std::string(kChatPage, kChatPageSize), "text/html; charset=utf-8"); });
  get("/health", [this](const http::Request&, http::Response& res) {
    if (ready_) send_json(res, 200, {{"status", "ok"}});
    else send_json(res, 503, {{"status", "loading"}, {"progress", load_fraction_.load()}});   // (weights uploaded, 0..1)
  });
  get("/metrics", [this](const http::Request&, http::Response& res) {
    res.set(200, metrics_text(), "text/plain; version=0.0.4");
  });
  // errors in the shape of the request's API: Ollama's under /api/ (its client prints only that), OpenAI's elsewhere
  auto error_body = [](const http::Request* req, const ApiError& e) {
    return req && req->path.rfind("/api/", 0) == 0 ? ollama_error(e) : e.body();
  };
  http_->before = [this, error_body](const http::Request& req, http::Response& res) {
    auto refuse = [&](const ApiError& e) {
      send_json(res, e.status, error_body(&req, e));
      return true;
    };
    // a browser page's request (server/cors.h): its origin first; a preflight is answered here (before the API
    // key, which browsers do not send with it)
    if (const std::string origin = req.header("Origin"); !origin.empty() && !same_origin_by_address(origin, req.header("Host"))) {
      if (!cors_origin_allowed(origin, so_.cors_origins))
        return refuse(ApiError(403, "origin '" + origin + "' may not call this server (vkspec serve --cors-origin ORIGIN)"));
      if (req.method == http::Method::Options) {
        res.status = 204;
        res.content_type = "text/plain";
        res.headers = cors_preflight_headers(origin, req.header("Access-Control-Request-Headers"), so_.cors_origins);
        return true;
      }
    }
    const bool page = req.path == "/" && req.method == http::Method::Get && !so_.no_webui;   // (holds no data)
    if (!so_.api_key.empty() && req.path != "/health" && !page) {
      const std::string auth = req.header("Authorization");
      const std::string prefix = "Bearer ";
      const std::string given = auth.rfind(prefix, 0) == 0 ? auth.substr(prefix.size()) : std::string();
      if (!equal_constant_time(given, so_.api_key))
        return refuse(ApiError(401, "invalid or missing API key (Authorization: Bearer KEY)", {}, "invalid_api_key"));
    }
    if (!ready_ && req.path != "/health" && req.path != "/metrics" && !page)   // (the model and its name are being made)
      return refuse(ApiError(503, "the model is still loading", {}, {}, "server_error"));
    return false;
  };
  http_->on_exception = [error_body](const http::Request& req, http::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& e) {
      send_json(res, e.status, error_body(&req, e));
    } catch (const std::exception& e) {
      send_json(res, 500, error_body(&req, ApiError(500, e.what(), {}, {}, "server_error")));
    } catch (...) {
      send_json(res, 500, error_body(&req, ApiError(500, "unknown error", {}, {}, "server_error")));
    }
  };
  // What the HTTP layer refuses itself (no route, a wrong method, a body or headers too large, a malformed
  // request, too busy) in the same shapes.
  http_->on_error = [error_body](const http::Request* req, http::Response& res, const std::string& message) {
    send_json(res, res.status, error_body(req, ApiError(res.status, message)));
  };
  // every answer to an allowed page's request says so (errors too, so that the page can read them)
  http_->decorate = [this](const http::Request& req, http::Response& res) {
    const std::string origin = req.header("Origin");
    if (origin.empty() || !cors_origin_allowed(origin, so_.cors_origins)) return;
    for (const auto& [name, value] : res.headers)
      if (name == "Access-Control-Allow-Origin") return;
    for (auto& h : cors_answer_headers(origin, so_.cors_origins)) res.headers.push_back(std::move(h));
  };
  http_->after = [this](const http::Response& res) {
    if (res.status >= 500) ++http_5xx_;
    else if (res.status >= 400) ++http_4xx_;
  };
}

}  // namespace vkspec::cli::serve
