// Raw HTTP over loopback for the server tests (tests/test_http_server.cpp, tests/test_server.cpp): bytes as an
// attacker or an old client sends them, which a client library would not (trickled headers, floods, pipelined
// requests), and a process's resident memory.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

namespace vkspec::test::raw_http {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A connection to 127.0.0.1:port; -1 when refused.
inline int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& data) {
  for (size_t at = 0; at < data.size();) {
    const ssize_t n = send(fd, data.data() + at, data.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += size_t(n);
  }
  return true;
}

// What the server sends until it closes the connection, or until `within` passes ("" + timed_out).
inline std::string read_until_closed(int fd, std::chrono::milliseconds within, bool* timed_out = nullptr) {
  std::string out;
  const auto end = Clock::now() + within;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, int(left)) <= 0) {
      if (timed_out) *timed_out = true;
      return out;
    }
    char buf[65536];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return out;
    out.append(buf, size_t(n));
  }
}

// One request on a fresh connection, answered and closed within `within`; the whole response.
inline std::string exchange(int port, const std::string& request, std::chrono::milliseconds within = 5000ms) {
  const int fd = connect_to(port);
  if (fd < 0) return "";
  send_all(fd, request);
  std::string r = read_until_closed(fd, within);
  close(fd);
  return r;
}

// A process's resident memory in bytes (/proc/PID/statm).
inline size_t resident_bytes_of(pid_t pid) {
  std::ifstream statm("/proc/" + std::to_string(pid) + "/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * size_t(sysconf(_SC_PAGESIZE));
}

}  // namespace vkspec::test::raw_http
