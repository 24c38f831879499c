// The server's HTTP layer alone (apps/server/http_server.h), in process, over loopback with raw sockets: the
// attacks of issue 58 each get a bounded answer while a normal request beside them is answered at once, and
// the process's resident memory stays bounded under each (read from /proc). Slow clients (slowloris, one byte
// at a time) hold no worker and are closed at the request deadline; headers and bodies (chunked ones too) over
// their limits get 431/413 without being kept; pipelined requests are answered in order; a stream whose client
// left ends; a full queue answers 503; stop() lets a running handler finish and closes idle connections.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include <gtest/gtest.h>

#include "server/http_server.h"
#include "tests/raw_http.h"

namespace vkspec::http {
namespace {
using namespace std::chrono_literals;
using namespace vkspec::test::raw_http;

size_t resident_bytes() { return resident_bytes_of(getpid()); }

// A server on a free loopback port, running on its own thread, with a GET /health, a POST /echo and the
// routes a test adds.
class Running {
 public:
  explicit Running(const Limits& limits, const std::function<void(Server&)>& more = {}) : server_(limits) {
    server_.route(Method::Get, "/health", [](const Request&, Response& res) { res.set(200, R"({"status":"ok"})"); });
    server_.route(Method::Post, "/echo", [](const Request& req, Response& res) { res.set(200, req.body, "text/plain"); });
    if (more) more(server_);
    port_ = server_.bind("127.0.0.1", 0);
    thread_ = std::thread([this] { server_.run(); });
  }
  ~Running() { stop(); }
  void stop() {
    if (!thread_.joinable()) return;
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  Server& server() { return server_; }

 private:
  Server server_;
  int port_ = 0;
  std::thread thread_;
};

const std::string kHealth = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

// /health on a fresh connection: its status line, and how long it took.
std::pair<std::string, double> health(int port) {
  const auto t0 = Clock::now();
  const std::string r = exchange(port, kHealth);
  return {r.substr(0, r.find("\r\n")), std::chrono::duration<double>(Clock::now() - t0).count()};
}

TEST(HttpServer, RoutesMethodsHooksAndErrors) {
  Running s(Limits{}, [](Server& srv) {
    srv.route(Method::Get, "/boom", [](const Request&, Response&) { throw std::runtime_error("kaput"); });
    srv.before = [](const Request& req, Response& res) {
      if (req.header("authorization") != "Bearer k" && req.path != "/health") {
        res.set(401, "no key", "text/plain");
        return true;
      }
      return false;
    };
    srv.on_exception = [](const Request&, Response& res, std::exception_ptr ep) {
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        res.set(500, std::string("caught ") + e.what(), "text/plain");
      }
    };
    srv.on_error = [](const Request* req, Response& res, const std::string& message) {
      res.set(res.status, (req ? req->path + ": " : std::string("?: ")) + message, "text/plain");
    };
  });
  EXPECT_EQ(health(s.port()).first, "HTTP/1.1 200 OK");
  const std::string key = "Authorization: Bearer k\r\n";
  EXPECT_NE(exchange(s.port(), "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello")
                .find("401 Unauthorized"),
            std::string::npos);
  const std::string echo = exchange(s.port(), "POST /echo?x=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + key +
                                                  "Content-Length: 5\r\n\r\nhello");
  EXPECT_EQ(echo.substr(0, 15), "HTTP/1.1 200 OK");
  EXPECT_EQ(echo.substr(echo.size() - 5), "hello");
  const std::string no_route = exchange(s.port(), "GET /nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + key + "\r\n");
  EXPECT_NE(no_route.find("404 Not Found"), std::string::npos);
  EXPECT_NE(no_route.find("/nothing: no route for GET /nothing"), std::string::npos) << no_route;
  const std::string wrong = exchange(s.port(), "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + key + "\r\n");
  EXPECT_NE(wrong.find("405 Method Not Allowed"), std::string::npos);
  EXPECT_NE(wrong.find("Allow: POST"), std::string::npos) << wrong;
  EXPECT_NE(exchange(s.port(), "GET /boom HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + key + "\r\n").find("caught kaput"),
            std::string::npos);
  const std::string junk = exchange(s.port(), "NOT HTTP AT ALL\r\n\r\n");
  EXPECT_NE(junk.find("400 Bad Request"), std::string::npos) << junk;
  EXPECT_NE(junk.find("?: malformed HTTP request"), std::string::npos) << junk;
}

// Slowloris: 300 connections that send a request line and then one byte every 300 ms, each within any
// per-read timeout, would hold every thread of a thread-per-connection server. Here they hold no worker (2):
// /health is answered at once beside them, and the request deadline (2 s) closes every one of them.
TEST(HttpServer, SlowClientsHoldNoWorkerAndMeetTheDeadline) {
  Limits lim;
  lim.workers = 2;
  lim.request_timeout_s = 2;
  Running s(lim);
  const size_t rss0 = resident_bytes();
  std::vector<int> slow;
  for (int i = 0; i < 300; ++i) {
    const int fd = connect_to(s.port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, "GET /health HTTP/1.1\r\n"));
    slow.push_back(fd);
  }
  std::atomic<bool> trickling{true};
  std::thread trickle([&] {
    for (int round = 0; trickling && round < 20; ++round) {
      for (const int fd : slow) send_all(fd, "X-Slow: " + std::to_string(round) + "\r\n");
      std::this_thread::sleep_for(300ms);
    }
  });
  std::this_thread::sleep_for(500ms);
  const auto [status, seconds] = health(s.port());
  EXPECT_EQ(status, "HTTP/1.1 200 OK");
  EXPECT_LT(seconds, 1.0);
  std::this_thread::sleep_for(2500ms);   // past the deadline of every slow request
  int closed = 0;
  for (const int fd : slow) {
    bool timed_out = false;
    read_until_closed(fd, 100ms, &timed_out);
    closed += !timed_out;
  }
  trickling = false;
  trickle.join();
  EXPECT_EQ(closed, 300) << "slow requests still open after the deadline";
  EXPECT_LT(resident_bytes(), rss0 + (32u << 20));
  for (const int fd : slow) close(fd);
  EXPECT_EQ(health(s.port()).first, "HTTP/1.1 200 OK");
}

// 8 clients each send 25 MB of header lines: each gets a 431 after 64 KiB and its connection ends; memory does
// not grow with what they sent.
TEST(HttpServer, HeaderFloodsAre431AndNotKept) {
  Running s(Limits{});
  const size_t rss0 = resident_bytes();
  std::vector<std::string> answers(8);
  std::vector<std::thread> floods;
  for (int c = 0; c < 8; ++c)
    floods.emplace_back([&, c] {
      const int fd = connect_to(s.port());
      std::string line = "X-Flood: " + std::string(1000, 'a') + "\r\n", block;
      for (int i = 0; i < 100; ++i) block += line;
      send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\n");
      for (int i = 0; i < 250 && send_all(fd, block); ++i) {
      }
      answers[c] = read_until_closed(fd, 5000ms);
      close(fd);
    });
  const auto [status, seconds] = health(s.port());
  for (auto& f : floods) f.join();
  for (const auto& a : answers) EXPECT_EQ(a.substr(0, 12), "HTTP/1.1 431") << a.substr(0, 200);
  EXPECT_EQ(status, "HTTP/1.1 200 OK");
  EXPECT_LT(seconds, 1.0);
  EXPECT_LT(resident_bytes(), rss0 + (32u << 20));
}

// Bodies over max_body_bytes (1 MiB): with a length, refused before it is sent; in chunks (64 MiB sent), refused
// once the chunks pass the limit. The handler never runs and memory stays bounded.
TEST(HttpServer, BodiesOverTheLimitAre413ChunkedOnesToo) {
  Limits lim;
  lim.max_body_bytes = 1u << 20;
  std::atomic<int> handled{0};
  Running s(lim, [&](Server& srv) {
    srv.route(Method::Post, "/count", [&](const Request&, Response& res) {
      ++handled;
      res.set(200, "{}");
    });
  });
  const size_t rss0 = resident_bytes();
  const std::string with_length = exchange(s.port(), "POST /count HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\nabc");
  EXPECT_EQ(with_length.substr(0, 12), "HTTP/1.1 413") << with_length;
  std::vector<std::string> answers(4);
  std::vector<std::thread> uploads;
  for (int c = 0; c < 4; ++c)
    uploads.emplace_back([&, c] {
      const int fd = connect_to(s.port());
      send_all(fd, "POST /count HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
      const std::string chunk = "10000\r\n" + std::string(0x10000, 'b') + "\r\n";
      for (int i = 0; i < 1024 && send_all(fd, chunk); ++i) {
      }
      answers[c] = read_until_closed(fd, 5000ms);
      close(fd);
    });
  for (auto& u : uploads) u.join();
  for (const auto& a : answers) EXPECT_EQ(a.substr(0, 12), "HTTP/1.1 413") << a.substr(0, 200);
  EXPECT_EQ(handled.load(), 0);
  EXPECT_LT(resident_bytes(), rss0 + (32u << 20));
  // within the limit, chunked: handled
  const std::string ok = exchange(s.port(), "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
                                            "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  EXPECT_EQ(ok.substr(ok.size() - 11), "hello world") << ok;
}

// Requests sent back to back on one connection, before any answer, are each answered, in order.
TEST(HttpServer, PipelinedRequestsAreAnsweredInOrder) {
  Running s(Limits{});
  const std::string r = exchange(s.port(),
                                 "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nfirst"
                                 "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                                 "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\nthird");
  const size_t a = r.find("first"), b = r.find(R"({"status":"ok"})"), c = r.find("third");
  ASSERT_NE(a, std::string::npos) << r;
  ASSERT_NE(b, std::string::npos) << r;
  ASSERT_NE(c, std::string::npos) << r;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
}

// A streamed answer whose client leaves: the stream's next writes fail and the handler returns; one whose
// client stays gets every chunk and the end of the body.
TEST(HttpServer, StreamsEndWhenTheirClientLeaves) {
  std::atomic<bool> ended{false};
  Running s(Limits{}, [&](Server& srv) {
    srv.route(Method::Get, "/forever", [&](const Request&, Response& res) {
      res.content_type = "text/event-stream";
      res.stream = [&](Sink& sink) {
        for (int i = 0; i < 100000 && sink.write("data: tick\n\n"); ++i) std::this_thread::sleep_for(5ms);
        ended = true;
      };
    });
    srv.route(Method::Get, "/three", [](const Request&, Response& res) {
      res.stream = [](Sink& sink) {
        for (const char* part : {"a", "bb", "ccc"}) sink.write(part);
      };
    });
  });
  const int fd = connect_to(s.port());
  send_all(fd, "GET /forever HTTP/1.1\r\nHost: x\r\n\r\n");
  char buf[256];
  ASSERT_GT(recv(fd, buf, sizeof buf, 0), 0);
  close(fd);
  for (int i = 0; i < 200 && !ended; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(ended) << "the stream went on writing to a client that left";
  const std::string three = exchange(s.port(), "GET /three HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(three.find("Transfer-Encoding: chunked"), std::string::npos);
  EXPECT_EQ(three.substr(three.find("\r\n\r\n") + 4), "1\r\na\r\n2\r\nbb\r\n3\r\nccc\r\n0\r\n\r\n");
  // HTTP/1.0 has no chunks: the body is the bytes, ended by the connection
  const std::string old = exchange(s.port(), "GET /three HTTP/1.0\r\n\r\n");
  EXPECT_EQ(old.substr(old.find("\r\n\r\n") + 4), "abbccc");
}

// With every worker busy and the queue full, a further request is answered 503 at once; those queued are
// answered when a worker frees.
TEST(HttpServer, AFullQueueAnswers503) {
  Limits lim;
  lim.workers = 1;
  lim.max_queued = 1;
  std::atomic<bool> release{false};
  Running s(lim, [&](Server& srv) {
    srv.route(Method::Get, "/slow", [&](const Request&, Response& res) {
      while (!release) std::this_thread::sleep_for(5ms);
      res.set(200, "done", "text/plain");
    });
  });
  const std::string slow = "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  std::string first, second;
  std::thread a([&] { first = exchange(s.port(), slow); });
  std::this_thread::sleep_for(200ms);
  std::thread b([&] { second = exchange(s.port(), slow); });
  std::this_thread::sleep_for(200ms);
  const std::string third = exchange(s.port(), slow, 2000ms);
  EXPECT_EQ(third.substr(0, 12), "HTTP/1.1 503") << third;
  release = true;
  a.join();
  b.join();
  EXPECT_EQ(first.substr(0, 15), "HTTP/1.1 200 OK");
  EXPECT_EQ(second.substr(0, 15), "HTTP/1.1 200 OK");
}

// At the connection cap, a new connection is closed at once; those open are served.
TEST(HttpServer, ConnectionsAreCapped) {
  Limits lim;
  lim.max_connections = 8;
  Running s(lim);
  EXPECT_EQ(s.server().max_connections(), 8u);
  std::vector<int> open;
  for (int i = 0; i < 8; ++i) open.push_back(connect_to(s.port()));
  std::this_thread::sleep_for(200ms);
  bool timed_out = false;
  const int extra = connect_to(s.port());
  send_all(extra, kHealth);
  EXPECT_EQ(read_until_closed(extra, 2000ms, &timed_out), "");
  EXPECT_FALSE(timed_out);
  close(extra);
  send_all(open[0], kHealth);
  EXPECT_EQ(read_until_closed(open[0], 2000ms).substr(0, 15), "HTTP/1.1 200 OK");
  for (const int fd : open) close(fd);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(health(s.port()).first, "HTTP/1.1 200 OK");
}

// stop(): a running handler's answer is sent whole (with Connection: close), an idle connection is closed, and
// run() returns.
TEST(HttpServer, StopLetsHandlersFinishAndClosesIdleConnections) {
  std::atomic<bool> started{false};
  Running s(Limits{}, [&](Server& srv) {
    srv.route(Method::Get, "/work", [&](const Request&, Response& res) {
      started = true;
      std::this_thread::sleep_for(300ms);
      res.set(200, "finished", "text/plain");
    });
  });
  const int idle = connect_to(s.port());
  std::string answer;
  std::thread client([&] { answer = exchange(s.port(), "GET /work HTTP/1.1\r\nHost: x\r\n\r\n"); });
  while (!started) std::this_thread::sleep_for(5ms);
  const auto t0 = Clock::now();
  s.stop();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  client.join();
  EXPECT_EQ(answer.substr(0, 15), "HTTP/1.1 200 OK");
  EXPECT_NE(answer.find("Connection: close"), std::string::npos);
  EXPECT_EQ(answer.substr(answer.size() - 8), "finished");
  bool timed_out = false;
  EXPECT_EQ(read_until_closed(idle, 1000ms, &timed_out), "");
  EXPECT_FALSE(timed_out);
  close(idle);
}

}  // namespace
}  // namespace vkspec::http
