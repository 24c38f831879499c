// What differs between POSIX systems and Windows, in one place: every call of the operating system that is not
// standard C++ goes through here (platform_posix.cpp or platform_windows.cpp, chosen by the build; no other
// file tests _WIN32 but the export macro in include/vkspec.h). Paths are UTF-8 everywhere in vkspec; on
// Windows they are opened with the wide-character API, so a model under C:\Users\Zoë\モデル\ loads.
#pragma once

// Errors are std::runtime_error: this layer is below core/core.h's vkspec::Error.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace vkspec::platform {

// ---- files -----------------------------------------------------------------------------------------------

// A UTF-8 path as the system's path type (std::filesystem converts it to UTF-16 on Windows).
inline std::filesystem::path utf8_path(std::string_view p) {
  return std::filesystem::path(std::u8string_view(reinterpret_cast<const char8_t*>(p.data()), p.size()));
}
// A path as UTF-8 text (path::string() is the ANSI code page's on Windows, which loses characters).
inline std::string utf8_string(const std::filesystem::path& p) {
  const std::u8string s = p.u8string();
  return std::string(s.begin(), s.end());
}
// fopen of a UTF-8 path (_wfopen on Windows).
std::FILE* open_file(const std::string& path, const char* mode);

// A new file opened for writing ("wb"), created exclusively: nullptr when anything is at the path already, a
// symbolic link included (never followed: a link planted there cannot redirect the write).
std::FILE* create_new_file(const std::string& path);
// A new temporary file beside `path` (same folder, so that a rename can replace `path` atomically), named
// path + ".tmp-" + a random suffix and created as create_new_file does; its name in *tmp_path. nullptr when
// none can be created (the reason in last_error()).
std::FILE* create_temp_beside(const std::string& path, std::string* tmp_path);

enum class FileType { Missing, Regular, Directory, Other };   // Other: a FIFO, a device, a socket
struct FileInfo {
  FileType type = FileType::Missing;
  uint64_t size = 0;   // of a regular file
};
// What is at a path, without opening it (a FIFO or a device must not be opened: the open or the read blocks).
FileInfo file_info(const std::string& path);

// A whole file mapped read-only. Only a regular, non-empty file maps; anything else throws
// std::runtime_error with the reason. Invariant: data() != nullptr && size() > 0 for the object's whole life.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Copies n bytes at offset with the file's own reads, not through the mapping (a loader that streams tensors
  // to the device then does not leave the whole file in the page cache's mapped pages). Throws on a short read.
  void read(uint64_t offset, uint8_t* out, size_t n) const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::intptr_t file_ = -1;      // descriptor (POSIX) or HANDLE (Windows)
  std::intptr_t mapping_ = 0;    // the file-mapping HANDLE (Windows)
  std::string path_;
};

int process_id();
// Where vkspec keeps its pipeline cache: $XDG_CACHE_HOME/vkspec or ~/.cache/vkspec; %LOCALAPPDATA%\vkspec on
// Windows. Empty when none can be named.
std::string cache_dir();
// The machine's physical memory in bytes (0 if unknown).
uint64_t physical_memory_bytes();
// The last system error as text (errno's on POSIX, GetLastError's on Windows), for messages.
std::string last_error();

// ---- time and text ---------------------------------------------------------------------------------------

std::tm utc_time(std::time_t t);
std::tm local_time(std::time_t t);
// Fills tm_wday and tm_yday of a UTC calendar date (timegm's side effect); returns false if it is out of range.
bool complete_utc_date(std::tm& tm);
// Unicode simple case mapping of one code point (the C library's tables: C.UTF-8 on POSIX, the invariant
// locale's on Windows); code points without a mapping come back unchanged.
uint32_t to_upper(uint32_t cp);
uint32_t to_lower(uint32_t cp);

// ---- the console and the process -------------------------------------------------------------------------

// The command line as UTF-8 (Windows passes main() the ANSI code page's bytes; the wide command line is read).
std::vector<std::string> utf8_arguments(int argc, char** argv);
// Called first in main(): stdout and stderr write bytes as they are (no \n -> \r\n on Windows, so that outputs
// equal Linux's), a Windows console shows them as UTF-8, and Windows shows no error dialogs.
void init_console();
enum class Stream { In, Out, Err };
bool is_terminal(Stream s);
// One line of standard input without its '\n', as UTF-8 (std::getline; from a Windows console, the UTF-16
// that ReadConsoleW gives, since the console's code-page input drops what is not ASCII); false at its end.
bool read_line(std::string& line);
void set_env(const std::string& name, const std::string& value);   // for tests and children
void unset_env(const std::string& name);

// Ctrl-C while one of these lives sets interrupted() instead of ending the process (SIGINT's handler on POSIX,
// the console control handler on Windows). Not nested; the handler before it comes back at destruction.
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
  static bool interrupted() { return flag_.load(); }
  static void clear() { flag_ = false; }
  static void notify() { flag_ = true; }   // what the handler does (async-signal-safe: a lock-free store)

 private:
  static inline std::atomic<bool> flag_{false};
};

// A server's way to stop: construct it on the main thread before starting others (on POSIX the threads started
// afterwards inherit SIGINT and SIGTERM blocked, so only wait() takes them); wait() blocks until Ctrl-C, a
// termination request (SIGTERM; on Windows a console close or logoff) or request_stop() from any thread.
class StopSignal {
 public:
  enum class Cause { Interrupt, Terminate, Requested };
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;
  Cause wait();
  void request_stop();
  static const char* name(Cause c);
};

// A listening socket's options, before it is bound: a port already in use must be an error, never shared
// (POSIX: SO_REUSEADDR alone, so that a restarted server binds at once; Windows: SO_EXCLUSIVEADDRUSE).
void set_listen_socket_options(std::intptr_t socket);
// Raises the process's limit of open descriptors to what the system allows it (at most 65536) and returns it
// (Windows, whose sockets have no such limit: 65536).
uint64_t raise_open_file_limit();

// The most memory the process has had resident so far, in bytes.
size_t peak_resident_bytes();

// Runs a program (argv[0] looked up on the PATH; never through a shell: arguments may hold quotes or `$(...)`)
// with stderr discarded and stdin read from stdin_path (empty: nothing), and returns its standard output and,
// unless it exited 0, how it ended ("exit 3", "killed by signal 9", "cannot start node: ...").
struct ChildOutput {
  std::string out;
  std::string failure;   // empty: exit status 0
};
ChildOutput run_capturing_stdout(const std::vector<std::string>& argv, const std::string& stdin_path = "");

// ---- shared libraries ------------------------------------------------------------------------------------

// The Vulkan loader (vulkan-1.dll / libvulkan.so.1) and a symbol in it; nullptr when absent.
void* open_vulkan_loader();
void* library_symbol(void* library, const char* name);
// What to install when open_vulkan_loader() fails.
const char* vulkan_loader_advice();
// Sanitizer builds keep the driver and the validation layer loaded until exit so LeakSanitizer can name them.
void pin_vulkan_driver_modules();

}  // namespace vkspec::platform
