// platform.h on Linux and the other POSIX systems.
#include <dlfcn.h>
#include <fcntl.h>
#include <locale.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wctype.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>

#include "platform/platform.h"

extern char** environ;

namespace vkspec::platform {

std::FILE* open_file(const std::string& path, const char* mode) { return std::fopen(path.c_str(), mode); }

std::FILE* create_new_file(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return nullptr;
  std::FILE* f = fdopen(fd, "wb");
  if (!f) close(fd);
  return f;
}

FileInfo file_info(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return {};
  if (S_ISREG(st.st_mode)) return {FileType::Regular, uint64_t(st.st_size)};
  return {S_ISDIR(st.st_mode) ? FileType::Directory : FileType::Other, 0};
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (the type check below refuses it)
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open '" + path + "': " + strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    throw std::runtime_error("'" + path + "' is not a regular file");
  }
  if (st.st_size == 0) {
    close(fd);
    throw std::runtime_error("'" + path + "' is empty");
  }
  void* m = mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  if (m == MAP_FAILED) {
    const std::string why = strerror(errno);
    close(fd);
    throw std::runtime_error("cannot map '" + path + "': " + why);
  }
  data_ = static_cast<const uint8_t*>(m);
  size_ = size_t(st.st_size);
  file_ = fd;
}

MappedFile::~MappedFile() {
  munmap(const_cast<uint8_t*>(data_), size_);
  close(int(file_));
}

void MappedFile::read(uint64_t offset, uint8_t* out, size_t n) const {
  for (size_t done = 0; done < n;) {
    const ssize_t r = pread(int(file_), out + done, n - done, off_t(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw std::runtime_error(r < 0 ? std::string(strerror(errno)) : "the file was truncated while loading");
    done += size_t(r);
  }
}

int process_id() { return int(getpid()); }

std::string cache_dir() {
  if (const char* x = getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/vkspec";
  if (const char* h = getenv("HOME"); h && *h) return std::string(h) + "/.cache/vkspec";
  return "";
}

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

std::string last_error() { return strerror(errno); }

std::tm utc_time(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  return tm;
}

std::tm local_time(std::time_t t) {
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

bool complete_utc_date(std::tm& tm) { return timegm(&tm) != time_t(-1); }

namespace {
locale_t utf8_ctype() {
  static const locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", locale_t(0));
  return loc;
}
}  // namespace

uint32_t to_upper(uint32_t cp) {
  if (locale_t loc = utf8_ctype()) return uint32_t(towupper_l(wint_t(cp), loc));
  return cp < 0x80 ? uint32_t(toupper(int(cp))) : cp;
}

uint32_t to_lower(uint32_t cp) {
  if (locale_t loc = utf8_ctype()) return uint32_t(towlower_l(wint_t(cp), loc));
  return cp < 0x80 ? uint32_t(tolower(int(cp))) : cp;
}

std::vector<std::string> utf8_arguments(int argc, char** argv) { return std::vector<std::string>(argv, argv + argc); }

void init_console() {}

bool is_terminal(Stream s) { return isatty(s == Stream::In ? STDIN_FILENO : s == Stream::Out ? STDOUT_FILENO : STDERR_FILENO); }

bool read_line(std::string& line) { return bool(std::getline(std::cin, line)); }

void set_env(const std::string& name, const std::string& value) { setenv(name.c_str(), value.c_str(), 1); }
void unset_env(const std::string& name) { unsetenv(name.c_str()); }

namespace {
struct sigaction g_before_interrupt_scope;
void on_sigint(int) { InterruptScope::notify(); }
}  // namespace

InterruptScope::InterruptScope() {
  clear();
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_before_interrupt_scope);
}

InterruptScope::~InterruptScope() { sigaction(SIGINT, &g_before_interrupt_scope, nullptr); }

namespace {
sigset_t stop_signals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  sigaddset(&s, SIGUSR1);   // request_stop()
  return s;
}
}  // namespace

StopSignal::StopSignal() {
  const sigset_t s = stop_signals();
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
}

StopSignal::~StopSignal() {}

StopSignal::Cause StopSignal::wait() {
  const sigset_t s = stop_signals();
  int sig = 0;
  while (sigwait(&s, &sig) != 0) {
  }
  return sig == SIGINT ? Cause::Interrupt : sig == SIGTERM ? Cause::Terminate : Cause::Requested;
}

void StopSignal::request_stop() { kill(getpid(), SIGUSR1); }

const char* StopSignal::name(Cause c) {
  return c == Cause::Interrupt ? "SIGINT" : c == Cause::Terminate ? "SIGTERM" : "stopped by vkspec";
}

void set_listen_socket_options(std::intptr_t socket) {
  int yes = 1;
  setsockopt(int(socket), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
}

size_t peak_resident_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return size_t(u.ru_maxrss) * 1024;   // (Linux: kilobytes)
}

uint64_t raise_open_file_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return 1024;
  const rlim_t want = r.rlim_max == RLIM_INFINITY ? rlim_t(65536) : std::min<rlim_t>(r.rlim_max, 65536);
  if (r.rlim_cur != RLIM_INFINITY && r.rlim_cur < want) {
    r.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &r) != 0) getrlimit(RLIMIT_NOFILE, &r);
  }
  return r.rlim_cur == RLIM_INFINITY ? 65536 : uint64_t(r.rlim_cur);
}

ChildOutput run_capturing_stdout(const std::vector<std::string>& args, const std::string& stdin_path) {
  ChildOutput r;
  int pipe_fds[2];
  if (args.empty()) return {"", "no program to run"};
  if (pipe(pipe_fds) != 0) return {"", std::string("cannot create a pipe: ") + strerror(errno)};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, pipe_fds[0]);
  posix_spawn_file_actions_addclose(&fa, pipe_fds[1]);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, stdin_path.empty() ? "/dev/null" : stdin_path.c_str(), O_RDONLY, 0);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  const int err = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(pipe_fds[1]);
  if (err != 0) {
    close(pipe_fds[0]);
    return {"", "cannot start " + args[0] + ": " + strerror(err)};
  }
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR);)
    if (n > 0) r.out.append(buf, size_t(n));
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) r.failure = WEXITSTATUS(status) == 0 ? "" : "exit " + std::to_string(WEXITSTATUS(status));
  else if (WIFSIGNALED(status)) r.failure = "killed by signal " + std::to_string(WTERMSIG(status));
  else r.failure = "ended abnormally";
  return r;
}

void* open_vulkan_loader() {
  void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  return lib ? lib : dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
}

void* library_symbol(void* library, const char* name) { return dlsym(library, name); }

const char* vulkan_loader_advice() {
  return "no Vulkan loader found (libvulkan.so.1). Install it, e.g. `apt install libvulkan1 mesa-vulkan-drivers` "
         "(Debian/Ubuntu), or your GPU vendor's Vulkan driver";
}

void pin_vulkan_driver_modules() {
  // LeakSanitizer attributes a leak by the module that allocated it, and the Vulkan loader unloads the
  // driver and the layers when an instance is destroyed: lavapipe's process-wide caches then show as a leak
  // from an "unknown module" that scripts/lsan.supp cannot name. RTLD_NODELETE keeps them mapped until exit.
  for (const char* lib : {"libvulkan_lvp.so", "libVkLayer_khronos_validation.so"}) dlopen(lib, RTLD_NOW | RTLD_NODELETE);
}

}  // namespace vkspec::platform
