// The transport behind http_server.h. Threads: the I/O thread (run()) owns every socket and timer and makes
// every read; workers run the handlers and hand each write to the I/O thread, waiting for it, so a socket is
// only ever used by one thread at a time. A connection's life (Session): read the headers (within the request
// deadline) -> [100 Continue] -> read the body (within as long again; its bytes counted against the body
// budget) -> queued -> a worker: the handler, its writes -> the next request (keep-alive, pipelined bytes
// included) or a graceful close.
#include "server/http_server.h"

#define BOOST_BEAST_USE_STD_STRING_VIEW
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <cstdio>
#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "platform/platform.h"

namespace vkspec::http {
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

std::string percent_decoded(std::string_view s) {
  const auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += char(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string Request::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (beast::iequals(k, name)) return v;
  return "";
}

namespace {

std::string status_line(int status) {
  const std::string_view reason = bhttp::obsolete_reason(bhttp::int_to_status(unsigned(status)));
  return "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) + "\r\n";
}

Method method_of(bhttp::verb v) {
  switch (v) {
    case bhttp::verb::get: return Method::Get;
    case bhttp::verb::post: return Method::Post;
    case bhttp::verb::options: return Method::Options;
    default: return Method::Other;
  }
}

const char* method_name(Method m) {
  switch (m) {
    case Method::Get: return "GET";
    case Method::Post: return "POST";
    case Method::Options: return "OPTIONS";
    case Method::Other: break;
  }
  return "?";
}

class Session;

}  // namespace

struct Server::Impl {
  explicit Impl(Server& o, const Limits& l) : owner(o), lim(l) {}
  Server& owner;
  Limits lim;
  uint32_t max_connections = 0;
  std::map<std::string, std::vector<std::pair<Method, Handler>>, std::less<>> routes;
  std::atomic<uint32_t> connections{0};

  std::mutex mu;   // guards the members up to `workers`
  std::condition_variable cv;
  std::deque<std::shared_ptr<Session>> queue;                      // complete requests waiting for a worker
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;   // for stop()
  size_t body_bytes = 0;                                           // reserved by requests' bodies
  bool stopping = false;
  std::vector<std::thread> workers;

  // Last, so destroyed first: the sessions its handlers still hold end while the members above exist.
  net::io_context io{1};
  tcp::acceptor acceptor{io};
  net::steady_timer accept_pause{io};   // after an accept error (out of descriptors): not a busy loop
  // run() goes on while nothing is pending on the I/O thread (a handler running, all else idle) until stop()
  net::executor_work_guard<net::io_context::executor_type> keep_running = net::make_work_guard(io);

  void accept();
  void work();
  Response answer(Request& req);
  Response refusal(const Request* req, int status, const std::string& message);
  void report(const Response& r);   // the `after` hook
  void decorate(const Request& req, Response& r);   // the `decorate` hook
  bool is_stopping() {
    std::lock_guard<std::mutex> lock(mu);
    return stopping;
  }
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Server::Impl& s, tcp::socket socket) : s_(s), stream_(std::move(socket)) {}
  ~Session() {
    std::lock_guard<std::mutex> lock(s_.mu);
    s_.sessions.erase(this);
    s_.body_bytes -= reserved_;
    s_.connections--;
  }

  void start() {   // I/O thread
    {
      std::lock_guard<std::mutex> lock(s_.mu);
      s_.sessions[this] = weak_from_this();
    }
    read_request();
  }

  // An idle or reading connection at shutdown: closed (one being answered finishes first). I/O thread.
  void stop_reading() {
    if (reading_) close_now();
  }

  void close_now() {
    reading_ = false;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  // The handler and the answer, on a worker; then the next request or the end, on the I/O thread.
  void serve() {
    Request req = request(true);
    Response res = s_.answer(req);
    s_.decorate(req, res);
    const bool ok = write_response(res, req.method_name == "HEAD");
    s_.report(res);
    release_body();
    net::post(s_.io, [self = shared_from_this(), ok] {
      if (ok && self->keep_alive_ && !self->s_.is_stopping()) self->read_request();
      else self->close_gracefully();
    });
  }

 private:
  void read_request() {
    reading_ = true;
    parser_.emplace();
    parser_->header_limit(uint32_t(std::min<size_t>(s_.lim.max_header_bytes, UINT32_MAX)));
    parser_->body_limit(s_.lim.max_body_bytes);
    stream_.expires_after(std::chrono::seconds(s_.lim.request_timeout_s));
    bhttp::async_read_header(stream_, buf_, *parser_,
                             [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  static bool malformed(const beast::error_code& ec) {   // the client's bytes are not HTTP (not: it left)
    return ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
           ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
  }

  void on_header(beast::error_code ec) {
    if (ec == bhttp::error::header_limit)
      return refuse(nullptr, 431, "the request's headers are larger than " + std::to_string(s_.lim.max_header_bytes) + " bytes");
    if (ec == bhttp::error::body_limit) return refuse_body_too_large();   // its Content-Length
    if (malformed(ec)) return refuse(nullptr, 400, "malformed HTTP request");
    if (ec) return close_now();   // the client left, or sent nothing whole before the deadline, or stop()
    const auto& h = parser_->get();
    keep_alive_ = h.keep_alive();
    http10_ = h.version() < 11;
    if (parser_->is_done()) return enqueue();
    const size_t want = parser_->content_length() ? size_t(*parser_->content_length()) : s_.lim.max_body_bytes;
    {
      std::lock_guard<std::mutex> lock(s_.mu);
      if (s_.body_bytes + want <= s_.lim.body_budget_bytes) {
        s_.body_bytes += want;
        reserved_ = want;
      }
    }
    if (reserved_ != want) {
      const Request r = request(false);
      return refuse(&r, 503, "the server is receiving too many request bodies at once; retry later");
    }
    if (beast::iequals(h[bhttp::field::expect], "100-continue")) {
      static const std::string_view go_on = "HTTP/1.1 100 Continue\r\n\r\n";
      return net::async_write(stream_, net::buffer(go_on.data(), go_on.size()),
                              [self = shared_from_this()](beast::error_code e, size_t) {
                                if (e) return self->close_now();
                                self->read_body();
                              });
    }
    read_body();
  }

  void read_body() {
    stream_.expires_after(std::chrono::seconds(s_.lim.request_timeout_s));
    bhttp::async_read(stream_, buf_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec == bhttp::error::body_limit) return self->refuse_body_too_large();
      if (self->malformed(ec)) {
        const Request r = self->request(false);
        return self->refuse(&r, 400, "malformed HTTP request body");
      }
      if (ec) return self->close_now();
      self->enqueue();
    });
  }

  void refuse_body_too_large() {
    const Request r = request(false);
    refuse(&r, 413, "the request body is larger than " + std::to_string(s_.lim.max_body_bytes) + " bytes");
  }

  void enqueue() {
    reading_ = false;
    {
      std::lock_guard<std::mutex> lock(s_.mu);
      if (!s_.stopping && s_.queue.size() < s_.lim.max_queued) {
        s_.queue.push_back(shared_from_this());
        s_.cv.notify_one();
        return;
      }
    }
    const Request r = request(false);
    refuse(&r, 503, s_.is_stopping() ? "the server is stopping" : "the server is busy; retry later");
  }

  // The request read so far (its body moved out of the parser when asked).
  Request request(bool with_body) {
    auto& h = parser_->get();
    Request r;
    r.method = method_of(h.method());
    r.method_name = std::string(h.method_string());
    const std::string_view target = h.target();
    r.path = std::string(target.substr(0, target.find('?')));
    for (const auto& f : h) r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    if (with_body) r.body = std::move(h.body());
    return r;
  }

  // An answer the transport makes itself, then the end of the connection. I/O thread.
  void refuse(const Request* req, int status, const std::string& message) {
    reading_ = false;
    Response res = s_.refusal(req, status, message);
    if (req) s_.decorate(*req, res);
    s_.report(res);
    out_ = status_line(res.status) + "Content-Type: " + res.content_type + "\r\nContent-Length: " +
           std::to_string(res.body.size()) + "\r\nConnection: close\r\n";
    for (const auto& [k, v] : res.headers) out_ += k + ": " + v + "\r\n";
    out_ += "\r\n" + res.body;
    stream_.expires_after(std::chrono::seconds(s_.lim.request_timeout_s));
    net::async_write(stream_, net::buffer(out_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close_now();
      self->close_gracefully();
    });
  }

  // Worker thread: the head and body (or stream); false when the client did not take them.
  bool write_response(Response& res, bool head_only) {
    if (s_.is_stopping()) keep_alive_ = false;
    const bool chunked = res.stream && !http10_;
    if (res.stream && http10_) keep_alive_ = false;   // (HTTP/1.0 has no chunks: the body ends with the connection)
    std::string head = status_line(res.status) + "Content-Type: " + res.content_type + "\r\n";
    for (const auto& [k, v] : res.headers) head += k + ": " + v + "\r\n";
    if (chunked) head += "Transfer-Encoding: chunked\r\n";
    else if (!res.stream) head += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
    if (!keep_alive_) head += "Connection: close\r\n";
    head += "\r\n";
    if (!res.stream) {
      if (!head_only) head += res.body;
      return send(head);
    }
    if (!send(head)) return false;
    struct ChunkSink : Sink {
      Session& s;
      bool chunked, failed = false;
      ChunkSink(Session& se, bool c) : s(se), chunked(c) {}
      bool write(std::string_view data) override {
        if (failed) return false;
        if (data.empty()) return true;   // (an empty chunk would end the body)
        if (!chunked) return !(failed = !s.send(data));
        char size[24];
        snprintf(size, sizeof size, "%zx\r\n", data.size());
        std::string chunk = size;
        chunk.append(data).append("\r\n");
        return !(failed = !s.send(chunk));
      }
    } sink(*this, chunked);
    res.stream(sink);
    if (sink.failed) return false;
    return !chunked || send("0\r\n\r\n");
  }

  // Worker thread: one write, made by the I/O thread within the write timeout; waits for it.
  bool send(std::string_view data) {
    auto done = std::make_shared<std::promise<bool>>();
    std::future<bool> written = done->get_future();
    net::post(s_.io, [this, data, done] {
      stream_.expires_after(std::chrono::seconds(s_.lim.request_timeout_s));
      net::async_write(stream_, net::buffer(data.data(), data.size()),
                       [done](beast::error_code ec, size_t) { done->set_value(!ec); });
    });
    // (bounded: were the I/O thread gone, the write counts as failed instead of waiting for ever)
    if (written.wait_for(std::chrono::seconds(s_.lim.request_timeout_s + 5)) != std::future_status::ready) return false;
    return written.get();
  }

  void release_body() {
    std::lock_guard<std::mutex> lock(s_.mu);
    s_.body_bytes -= reserved_;
    reserved_ = 0;
  }

  // After an answer that ends the connection: what the client still sends (the rest of a refused body) is read
  // and dropped for a moment, so that closing with unread bytes does not reset the connection before the client
  // has read the answer.
  void close_gracefully() {
    reading_ = false;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(2));
    drain();
  }
  void drain() {
    stream_.async_read_some(net::buffer(discard_), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ > (1u << 20)) return self->close_now();
      self->drain();
    });
  }

  Server::Impl& s_;
  beast::tcp_stream stream_;
  beast::flat_buffer buf_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bool reading_ = false;      // waiting for (or reading) a request: stop() may close it
  bool keep_alive_ = false;
  bool http10_ = false;
  size_t reserved_ = 0;       // body bytes counted against the budget
  std::string out_;           // a refusal being written
  std::array<char, 4096> discard_{};
  size_t drained_ = 0;
};

}  // namespace

void Server::Impl::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (ec) {   // e.g. out of descriptors: try again shortly
      accept_pause.expires_after(std::chrono::milliseconds(50));
      accept_pause.async_wait([this](beast::error_code) { accept(); });
      return;
    }
    if (connections.load() >= max_connections) {
      socket.close(ec);   // at the cap, the newest connection is closed at once
    } else {
      ++connections;
      socket.set_option(tcp::no_delay(true), ec);   // a stream's small events go out as they are made
      std::make_shared<Session>(*this, std::move(socket))->start();
    }
    accept();
  });
}

void Server::Impl::work() {
  for (;;) {
    std::shared_ptr<Session> s;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;   // stopping, and nothing left to answer
      s = std::move(queue.front());
      queue.pop_front();
    }
    try {
      s->serve();
    } catch (...) {   // a stream that threw (or no memory): the connection ends, the server goes on
    }
  }
}

Response Server::Impl::refusal(const Request* req, int status, const std::string& message) {
  Response r;
  r.status = status;
  try {
    if (owner.on_error) owner.on_error(req, r, message);
    else r.set(status, message + "\n", "text/plain");
  } catch (...) {   // (a hook that fails still leaves an answer)
    r = Response{};
    r.set(status, message + "\n", "text/plain");
  }
  r.status = status;
  return r;
}

void Server::Impl::decorate(const Request& req, Response& r) {
  try {
    if (owner.decorate) owner.decorate(req, r);
  } catch (...) {
  }
}

void Server::Impl::report(const Response& r) {
  try {
    if (owner.after) owner.after(r);
  } catch (...) {
  }
}

Response Server::Impl::answer(Request& req) {
  Response res;
  try {
    if (owner.before && owner.before(req, res)) return res;
    auto route = routes.find(req.path);
    if (route == routes.end()) {
      size_t longest = 0;
      for (auto r = routes.begin(); r != routes.end(); ++r) {
        if (r->first.empty() || r->first.back() != '*') continue;
        const std::string_view prefix(r->first.data(), r->first.size() - 1);
        if (prefix.size() >= longest && std::string_view(req.path).substr(0, prefix.size()) == prefix) {
          longest = prefix.size();
          route = r;
        }
      }
    }
    if (route == routes.end()) return refusal(&req, 404, "no route for " + req.method_name + " " + req.path);
    std::string allowed;
    for (const auto& [method, handler] : route->second) {
      if (method == req.method) {
        handler(req, res);
        return res;
      }
      allowed += std::string(allowed.empty() ? "" : ", ") + method_name(method);
    }
    Response r = refusal(&req, 405, req.method_name + " is not allowed on " + req.path + " (" + allowed + ")");
    r.headers.emplace_back("Allow", allowed);
    return r;
  } catch (...) {
    res = Response{};
    try {
      if (!owner.on_exception) throw;
      owner.on_exception(req, res, std::current_exception());
    } catch (...) {
      res = Response{};
      res.set(500, "internal error\n", "text/plain");
    }
    return res;
  }
}

Server::Server(const Limits& limits) : impl_(std::make_unique<Impl>(*this, limits)) {
  uint64_t cap = limits.max_connections;
  if (cap == 0) {   // descriptors for the model, the device and the process's own files stay free
    const uint64_t files = platform::raise_open_file_limit();
    cap = files > 128 ? std::min<uint64_t>(files - 96, 10000) : 32;
  }
  impl_->max_connections = uint32_t(cap);
}

Server::~Server() {
  stop();
}

uint32_t Server::max_connections() const { return impl_->max_connections; }

void Server::route(Method method, const std::string& path, Handler handler) {
  impl_->routes[path].emplace_back(method, std::move(handler));
}

int Server::bind(const std::string& host, int port) {
  Impl& s = *impl_;
  const std::string where = host + ":" + std::to_string(port);
  try {
    tcp::resolver resolver(s.io);
    const auto found = resolver.resolve(host, std::to_string(port), tcp::resolver::numeric_service);
    if (found.empty()) throw std::runtime_error("no such address");
    const tcp::endpoint ep = found.begin()->endpoint();
    s.acceptor.open(ep.protocol());
    platform::set_listen_socket_options(std::intptr_t(s.acceptor.native_handle()));   // a port in use is an error
    s.acceptor.bind(ep);
    s.acceptor.listen(net::socket_base::max_listen_connections);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot listen on " + where + " (" + e.what() + ")");
  }
  for (uint32_t i = 0; i < std::max(1u, s.lim.workers); ++i) s.workers.emplace_back([&s] { s.work(); });
  s.accept();
  return s.acceptor.local_endpoint().port();
}

void Server::run() {
  for (;;) {
    try {
      impl_->io.run();
      return;
    } catch (const std::exception& e) {   // one connection's failure (out of memory...): the others go on
      fprintf(stderr, "vkspec: HTTP: %s\n", e.what());
    }
  }
}

void Server::stop() {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.stopping && s.workers.empty()) return;
    s.stopping = true;
  }
  s.cv.notify_all();
  net::post(s.io, [&s] {
    beast::error_code ec;
    s.acceptor.close(ec);
    s.accept_pause.cancel();
    std::vector<std::shared_ptr<Session>> open;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      for (auto& [p, weak] : s.sessions)
        if (auto session = weak.lock()) open.push_back(std::move(session));
    }
    for (auto& session : open) session->stop_reading();
  });
  for (auto& w : s.workers) w.join();   // (their writes need the I/O thread, which runs until here)
  s.workers.clear();
  net::post(s.io, [&s] {   // what is still open (answered connections closing) ends now, then run() returns
    std::vector<std::shared_ptr<Session>> open;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      for (auto& [p, weak] : s.sessions)
        if (auto session = weak.lock()) open.push_back(std::move(session));
    }
    for (auto& session : open) session->close_now();
    s.io.stop();
  });
}

}  // namespace vkspec::http
