#pragma once
// `vkspec serve`'s insides, shared by server.cpp (jobs, responses, the server's life) and server_routes.cpp
// (the endpoints). Threads: the HTTP layer's I/O thread reads requests and its workers run the handlers
// (server/http_server.h); one engine thread runs the batch; the requests' callbacks (on the engine thread) only
// append to their Job under its mutex, so a slow or stalled client never blocks the engine or other clients
// (its writes time out, its sequence is cancelled and freed).
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "common/cli_common.h"
#include "server/cors.h"
#include "server/embeddings_api.h"
#include "server/http_server.h"
#include "server/llamacpp_api.h"
#include "server/ollama_api.h"
#include "server/server_api.h"
#include "platform/platform.h"


namespace vkspec::cli::serve {
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
  bool report_cache = false;           // --report-cache: per-request prompt-cache counts in the responses
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

// How a response is written: OpenAI's (the empty functions), or another API's shapes over the same job
// events (Ollama's, llama-server's native ones).
struct Dialect {
  std::function<json(const json& openai)> whole;                  // a whole response
  std::function<std::string(const std::string& payload)> frame;   // one stream event's bytes (stateful)
  std::function<json(const ApiError&)> error;
  const char* stream_type = "text/event-stream";
  bool sse = true;   // SSE comments keep checking the connection while nothing is sent
};

// OpenAI's response shapes over a job (server.cpp).
std::string tool_call_id();
std::string finish_reason(const std::string& stop_reason);
json chunk(const Job& j, uint32_t index, const json& delta_or_text, const json& logprobs, const json& finish);
json usage(const Job& j);
json vkspec_fields(const Job& j, const std::string& drafter);   // vkspec's own figures per response
json full_response(const Job& j, const std::string& drafter);
bool equal_constant_time(const std::string& a, const std::string& b);
void send_json(http::Response& res, int status, const json& body);

// A whole JSON answer that may take a while (a completion, embeddings): sent with its status when it is ready
// within a second; else a space (JSON allows leading whitespace) every two seconds until it is, so that a
// client that left is noticed and `job` cancelled, and then the answer with status 200 whatever it says (an
// error is its body). J has mu, cv, all_done() and cancel(); answer(const J&) -> {status, body}, mu held.
template <class J, class Answer>
void answer_when_done(http::Response& res, const std::shared_ptr<J>& job, Answer answer) {
  {
    std::unique_lock<std::mutex> lock(job->mu);
    if (job->cv.wait_for(lock, std::chrono::seconds(1), [&] { return job->all_done(); })) {
      const auto [status, body] = answer(*job);
      send_json(res, status, body);
      return;
    }
  }
  res.content_type = "application/json";
  res.stream = [job, answer](http::Sink& sink) {
    std::unique_lock<std::mutex> lock(job->mu);
    while (!job->cv.wait_for(lock, std::chrono::seconds(2), [&] { return job->all_done(); })) {
      lock.unlock();
      const bool ok = sink.write(" ");
      lock.lock();
      if (!ok) return job->cancel();
    }
    const std::string body = dump(answer(*job).second);
    lock.unlock();
    sink.write(body);
  };
}

class Server {
 public:
  Server(const RunOptions& o, const ServeOptions& so) : o_(o), so_(so) {}

  int run();

 private:
  void routes();
  void completion(const http::Request& req, http::Response& res, bool chat);
  void ollama(const http::Request& req, http::Response& res, OllamaEndpoint ep);
  void llamacpp_completion(const http::Request& req, http::Response& res);   // llama-server's /completion
  void embeddings(const http::Request& req, http::Response& res, EmbedEndpoint ep);
  // The inputs of an embeddings request on the batch, one request each (run between steps, beside the
  // generations); the callbacks hold the shared state.
  struct EmbedJob;
  std::shared_ptr<EmbedJob> start_embed(const EmbedSpec& spec);
  // The job's answer: one JSON body, or its stream as it is made (OpenAI's SSE, or Ollama's NDJSON lines).
  void respond(http::Response& res, std::shared_ptr<Job> job, const Dialect& dialect);
  std::shared_ptr<Job> start_job(CompletionSpec spec);
  std::string metrics_text() const;

  RunOptions o_;
  ServeOptions so_;
  std::unique_ptr<http::Server> http_;   // made by run(), with the limits of the options
  std::atomic<bool> ready_{false};
  std::atomic<float> load_fraction_{0};   // the weights uploaded so far (/health while loading)
  std::mutex stop_mutex_;   // guards stop_ and the batch's creation against a signal meanwhile
  bool stop_ = false;
  std::string model_id_, drafter_;
  std::string architecture_ = "llama";   // the model file's general.architecture (Ollama's family)
  std::unique_ptr<api::Model> model_;
  std::optional<std::string> template_;   // --chat-template's source; nullopt: the model's own
  std::string template_text_;             // the template chats render with (/props, /api/show); "": none
  PromptEncoder enc_;
  std::unique_ptr<api::Batch> batch_;
  ServerLimits lim_;
  uint32_t n_embd_ = 0;
  std::atomic<uint64_t> ids_{0}, http_4xx_{0}, http_5xx_{0};
  int64_t started_ = std::time(nullptr);
};

}  // namespace vkspec::cli::serve
