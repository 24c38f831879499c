#pragma once
// `vkspec serve`'s HTTP/1.1 transport: exact-path routes whose handlers run on a pool of worker threads.
// Connections are not threads: one I/O thread (Boost.Beast and Asio, inside http_server.cpp only) reads every
// connection's request, headers and body, within deadlines and size limits, and only a complete request takes
// a worker. So clients that connect and trickle bytes (slowloris) hold a socket and at most max_header_bytes
// each, for at most request_timeout_s, never a worker; a body is bounded whether it has a length or comes in
// chunks; pipelined requests are answered in order; and the connections at once are capped below the process's
// open-file limit. Why Beast: docs/SERVER.md, "The HTTP layer".
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vkspec::http {

enum class Method { Get, Post, Options, Other };

struct Request {
  Method method = Method::Other;
  std::string method_name;   // as sent ("GET", ...)
  std::string path;          // the target without its query
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string header(std::string_view name) const;   // case-insensitive; "" when absent
};

// The writer of a streamed body: each write is sent (as one chunk) before it returns; false once the client
// is gone or has not taken the bytes within the write timeout; then nothing more reaches it.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual bool write(std::string_view data) = 0;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;   // besides Content-Type and the framing ones
  // Set: the body is this function's writes (chunked), made on the worker thread after the head is sent.
  std::function<void(Sink&)> stream;
  void set(int s, std::string b, std::string type = "application/json") {
    status = s;
    body = std::move(b);
    content_type = std::move(type);
  }
};

using Handler = std::function<void(const Request&, Response&)>;

struct Limits {
  size_t max_header_bytes = 64u << 10;    // the request line and headers together (431 beyond)
  size_t max_body_bytes = 4u << 20;       // 413 beyond, chunked bodies included
  size_t body_budget_bytes = 256u << 20;  // bodies held at once, received or being handled (503 beyond)
  int request_timeout_s = 30;             // for a request's headers to arrive (from when the connection waits
                                          // for it), as long again for its body, and for each write
  uint32_t workers = 64;                  // requests handled at once
  uint32_t max_queued = 256;              // complete requests waiting for a worker (503 beyond)
  uint32_t max_connections = 0;           // 0: what the process's open-file limit allows
};

class Server {
 public:
  explicit Server(const Limits& limits);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // A path ending in '*' takes every path that begins with what precedes it, when no exact path matches
  // (the longest such prefix wins): /v1/models/* for /v1/models/{id}.
  void route(Method method, const std::string& path, Handler handler);
  // Hooks (set before bind): `before` sees every routed request first (true: it answered it); `on_exception`
  // answers a handler's exception; `on_error` fills the answer to a request the transport refuses (400, 404,
  // 405, 413, 431, 503; request null when it could not be read); `after` sees every answer's status.
  std::function<bool(const Request&, Response&)> before;
  std::function<void(const Request&, Response&, std::exception_ptr)> on_exception;
  std::function<void(const Request*, Response&, const std::string& message)> on_error;
  std::function<void(const Response&)> after;
  // Sees every answer to a request that was read, last, to add headers (CORS).
  std::function<void(const Request&, Response&)> decorate;

  // Listens on host:port (0: any free port) and returns the port; throws std::runtime_error naming it.
  int bind(const std::string& host, int port);
  void run();    // serves until stop(), on the calling thread
  void stop();   // any thread: stops accepting, ends idle connections, lets handlers finish; run() returns
  uint32_t max_connections() const;

  struct Impl;   // (http_server.cpp's)

 private:
  std::unique_ptr<Impl> impl_;
};

// A path segment with its %XX escapes decoded (a malformed escape is kept as it is).
std::string percent_decoded(std::string_view s);

}  // namespace vkspec::http
