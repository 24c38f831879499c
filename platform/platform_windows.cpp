// platform.h on Windows (MinGW-w64 and MSVC). Text crosses the API as UTF-16 and is UTF-8 everywhere else.
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <winsock2.h>
#include <windows.h>
#include <fcntl.h>
#include <io.h>
#include <shellapi.h>
#include <psapi.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <stdexcept>

#include "platform/platform.h"

namespace vkspec::platform {

namespace {

std::wstring wide(const std::string& s) {
  if (s.empty()) return {};
  const int n = MultiByteToWideChar(CP_UTF8, 0, s.data(), int(s.size()), nullptr, 0);
  std::wstring w(size_t(n), L'\0');
  MultiByteToWideChar(CP_UTF8, 0, s.data(), int(s.size()), w.data(), n);
  return w;
}

std::string narrow(const wchar_t* w, int len = -1) {
  const int n = WideCharToMultiByte(CP_UTF8, 0, w, len, nullptr, 0, nullptr, nullptr);
  if (n <= 0) return {};
  std::string s(size_t(n), '\0');
  WideCharToMultiByte(CP_UTF8, 0, w, len, s.data(), n, nullptr, nullptr);
  if (len < 0) s.pop_back();   // the terminating NUL
  return s;
}

std::string error_text(DWORD code) {
  wchar_t* buf = nullptr;
  const DWORD n = FormatMessageW(FORMAT_MESSAGE_ALLOCATE_BUFFER | FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS,
                                 nullptr, code, 0, reinterpret_cast<wchar_t*>(&buf), 0, nullptr);
  std::string s = n ? narrow(buf, int(n)) : "error " + std::to_string(code);
  LocalFree(buf);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '.')) s.pop_back();
  return s;
}

}  // namespace

std::FILE* open_file(const std::string& path, const char* mode) { return _wfopen(wide(path).c_str(), wide(mode).c_str()); }

std::FILE* create_new_file(const std::string& path) {
  // CREATE_NEW fails on any existing entry, a symbolic link or junction included
  HANDLE h = CreateFileW(wide(path).c_str(), GENERIC_WRITE, 0, nullptr, CREATE_NEW, FILE_ATTRIBUTE_NORMAL, nullptr);
  if (h == INVALID_HANDLE_VALUE) return nullptr;
  const int fd = _open_osfhandle(reinterpret_cast<intptr_t>(h), _O_WRONLY | _O_BINARY);
  if (fd < 0) {
    CloseHandle(h);
    return nullptr;
  }
  std::FILE* f = _fdopen(fd, "wb");
  if (!f) _close(fd);
  return f;
}

FileInfo file_info(const std::string& path) {
  WIN32_FILE_ATTRIBUTE_DATA a;
  if (!GetFileAttributesExW(wide(path).c_str(), GetFileExInfoStandard, &a)) {
    const DWORD e = GetLastError();   // something is there that has no attributes: a pipe, a device
    return {e == ERROR_FILE_NOT_FOUND || e == ERROR_PATH_NOT_FOUND || e == ERROR_INVALID_NAME ? FileType::Missing : FileType::Other, 0};
  }
  if (a.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY) return {FileType::Directory, 0};
  if (a.dwFileAttributes & FILE_ATTRIBUTE_DEVICE) return {FileType::Other, 0};
  // a named pipe or a console device (\\.\pipe\x, CON, NUL) is not a disk file
  HANDLE h = CreateFileW(wide(path).c_str(), FILE_READ_ATTRIBUTES, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                         nullptr, OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS, nullptr);
  if (h != INVALID_HANDLE_VALUE) {
    const DWORD type = GetFileType(h);
    CloseHandle(h);
    if (type != FILE_TYPE_DISK) return {FileType::Other, 0};
  }
  return {FileType::Regular, (uint64_t(a.nFileSizeHigh) << 32) | a.nFileSizeLow};
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  HANDLE f = CreateFileW(wide(path).c_str(), GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_DELETE, nullptr, OPEN_EXISTING,
                         FILE_ATTRIBUTE_NORMAL, nullptr);
  if (f == INVALID_HANDLE_VALUE) throw std::runtime_error("cannot open '" + path + "': " + error_text(GetLastError()));
  LARGE_INTEGER size{};
  if (GetFileType(f) != FILE_TYPE_DISK || !GetFileSizeEx(f, &size)) {
    CloseHandle(f);
    throw std::runtime_error("'" + path + "' is not a regular file");
  }
  if (size.QuadPart == 0) {
    CloseHandle(f);
    throw std::runtime_error("'" + path + "' is empty");
  }
  HANDLE m = CreateFileMappingW(f, nullptr, PAGE_READONLY, 0, 0, nullptr);
  const void* view = m ? MapViewOfFile(m, FILE_MAP_READ, 0, 0, 0) : nullptr;
  if (!view) {
    const std::string why = error_text(GetLastError());
    if (m) CloseHandle(m);
    CloseHandle(f);
    throw std::runtime_error("cannot map '" + path + "': " + why);
  }
  data_ = static_cast<const uint8_t*>(view);
  size_ = size_t(size.QuadPart);
  file_ = reinterpret_cast<std::intptr_t>(f);
  mapping_ = reinterpret_cast<std::intptr_t>(m);
}

MappedFile::~MappedFile() {
  UnmapViewOfFile(data_);
  CloseHandle(reinterpret_cast<HANDLE>(mapping_));
  CloseHandle(reinterpret_cast<HANDLE>(file_));
}

void MappedFile::read(uint64_t offset, uint8_t* out, size_t n) const {
  for (size_t done = 0; done < n;) {
    OVERLAPPED at{};   // a positioned read (ReadFile's pread)
    at.Offset = DWORD((offset + done) & 0xffffffffu);
    at.OffsetHigh = DWORD((offset + done) >> 32);
    DWORD got = 0;
    const DWORD want = DWORD(std::min<size_t>(n - done, 1u << 30));
    if (!ReadFile(reinterpret_cast<HANDLE>(file_), out + done, want, &got, &at))
      throw std::runtime_error(error_text(GetLastError()));
    if (got == 0) throw std::runtime_error("the file was truncated while loading");
    done += got;
  }
}

int process_id() { return int(GetCurrentProcessId()); }

std::string cache_dir() {
  if (const wchar_t* x = _wgetenv(L"LOCALAPPDATA"); x && *x) return narrow(x) + "\\vkspec";
  if (const wchar_t* x = _wgetenv(L"XDG_CACHE_HOME"); x && *x) return narrow(x) + "/vkspec";
  return "";
}

uint64_t physical_memory_bytes() {
  MEMORYSTATUSEX m{};
  m.dwLength = sizeof m;
  return GlobalMemoryStatusEx(&m) ? uint64_t(m.ullTotalPhys) : 0;
}

std::string last_error() { return error_text(GetLastError()); }

std::tm utc_time(std::time_t t) {
  std::tm tm{};
  gmtime_s(&tm, &t);
  return tm;
}

std::tm local_time(std::time_t t) {
  std::tm tm{};
  localtime_s(&tm, &t);
  return tm;
}

bool complete_utc_date(std::tm& tm) { return _mkgmtime(&tm) != std::time_t(-1); }

namespace {
uint32_t map_case(uint32_t cp, DWORD how) {
  wchar_t in[2], out[4];
  int n = 1;
  if (cp >= 0x10000) {
    if (cp > 0x10FFFF) return cp;
    in[0] = wchar_t(0xD800 + ((cp - 0x10000) >> 10));
    in[1] = wchar_t(0xDC00 + ((cp - 0x10000) & 0x3FF));
    n = 2;
  } else {
    if (cp >= 0xD800 && cp <= 0xDFFF) return cp;
    in[0] = wchar_t(cp);
  }
  const int m = LCMapStringEx(LOCALE_NAME_INVARIANT, how, in, n, out, 4, nullptr, nullptr, 0);
  if (m == 1) return uint32_t(out[0]);
  if (m == 2 && out[0] >= 0xD800 && out[0] < 0xDC00) return 0x10000 + ((uint32_t(out[0]) - 0xD800) << 10) + (uint32_t(out[1]) - 0xDC00);
  return cp;   // a mapping to several code points is not a simple case mapping
}
}  // namespace

uint32_t to_upper(uint32_t cp) { return map_case(cp, LCMAP_UPPERCASE); }
uint32_t to_lower(uint32_t cp) { return map_case(cp, LCMAP_LOWERCASE); }

std::vector<std::string> utf8_arguments(int argc, char** argv) {
  int n = 0;
  wchar_t** w = CommandLineToArgvW(GetCommandLineW(), &n);
  if (!w || n != argc) {   // should not happen; the ANSI arguments are better than none
    if (w) LocalFree(w);
    return std::vector<std::string>(argv, argv + argc);
  }
  std::vector<std::string> args;
  for (int i = 0; i < n; ++i) args.push_back(narrow(w[i]));
  LocalFree(w);
  return args;
}

void init_console() {
  // a failure ends the process with its status instead of a dialog that would hold a script or a CI job
  SetErrorMode(SEM_FAILCRITICALERRORS | SEM_NOGPFAULTERRORBOX | SEM_NOOPENFILEERRORBOX);
  _setmode(_fileno(stdout), _O_BINARY);
  _setmode(_fileno(stderr), _O_BINARY);
  _setmode(_fileno(stdin), _O_BINARY);
  // the console's code pages belong to the console, not to this process: given back at exit
  static const UINT output_cp = GetConsoleOutputCP(), input_cp = GetConsoleCP();
  if (output_cp != 0) {
    SetConsoleOutputCP(CP_UTF8);
    SetConsoleCP(CP_UTF8);
    std::atexit([] {
      SetConsoleOutputCP(output_cp);
      SetConsoleCP(input_cp);
    });
  }
}

bool is_terminal(Stream s) {
  HANDLE h = GetStdHandle(s == Stream::In ? STD_INPUT_HANDLE : s == Stream::Out ? STD_OUTPUT_HANDLE : STD_ERROR_HANDLE);
  DWORD mode;
  return h != INVALID_HANDLE_VALUE && h != nullptr && GetConsoleMode(h, &mode);
}

bool read_line(std::string& line) {
  HANDLE in = GetStdHandle(STD_INPUT_HANDLE);
  DWORD mode;
  if (!GetConsoleMode(in, &mode)) return bool(std::getline(std::cin, line));
  std::wstring w;
  for (wchar_t c;;) {
    DWORD got = 0;
    if (!ReadConsoleW(in, &c, 1, &got, nullptr) || got == 0) {
      if (w.empty()) return false;
      break;
    }
    if (c == L'\n') break;
    if (c == 0x1A && w.empty()) return false;   // Ctrl-Z at the start of a line: the end of the input
    w += c;
  }
  line = narrow(w.c_str(), int(w.size()));
  return true;
}

void set_env(const std::string& name, const std::string& value) { _wputenv_s(wide(name).c_str(), wide(value).c_str()); }
void unset_env(const std::string& name) { _wputenv_s(wide(name).c_str(), L""); }

namespace {
BOOL WINAPI on_ctrl_c(DWORD type) {
  if (type != CTRL_C_EVENT && type != CTRL_BREAK_EVENT) return FALSE;
  InterruptScope::notify();
  return TRUE;
}
}  // namespace

InterruptScope::InterruptScope() {
  clear();
  SetConsoleCtrlHandler(on_ctrl_c, TRUE);
}

InterruptScope::~InterruptScope() { SetConsoleCtrlHandler(on_ctrl_c, FALSE); }

namespace {
// One server per process: the console handler (a function, no context) reaches it through here.
HANDLE g_stop_event = nullptr;
std::atomic<int> g_stop_cause{int(StopSignal::Cause::Requested)};
BOOL WINAPI on_console_stop(DWORD type) {
  g_stop_cause = int(type == CTRL_C_EVENT || type == CTRL_BREAK_EVENT ? StopSignal::Cause::Interrupt : StopSignal::Cause::Terminate);
  SetEvent(g_stop_event);
  // a close, logoff or shutdown ends the process when the handler returns: let the main thread finish first
  if (type == CTRL_CLOSE_EVENT || type == CTRL_LOGOFF_EVENT || type == CTRL_SHUTDOWN_EVENT) Sleep(5000);
  return TRUE;
}
}  // namespace

StopSignal::StopSignal() {
  g_stop_event = CreateEventW(nullptr, TRUE, FALSE, nullptr);
  SetConsoleCtrlHandler(on_console_stop, TRUE);
}

StopSignal::~StopSignal() {
  SetConsoleCtrlHandler(on_console_stop, FALSE);
  CloseHandle(g_stop_event);
  g_stop_event = nullptr;
}

StopSignal::Cause StopSignal::wait() {
  WaitForSingleObject(g_stop_event, INFINITE);
  return Cause(g_stop_cause.load());
}

void StopSignal::request_stop() {
  g_stop_cause = int(Cause::Requested);
  SetEvent(g_stop_event);
}

const char* StopSignal::name(Cause c) {
  return c == Cause::Interrupt ? "Ctrl-C" : c == Cause::Terminate ? "console closed" : "stopped by vkspec";
}

void set_listen_socket_options(std::intptr_t socket) {
  BOOL yes = TRUE;
  setsockopt(SOCKET(socket), SOL_SOCKET, SO_EXCLUSIVEADDRUSE, reinterpret_cast<const char*>(&yes), sizeof yes);
}

uint64_t raise_open_file_limit() { return 65536; }

size_t peak_resident_bytes() {
  PROCESS_MEMORY_COUNTERS c{};
  c.cb = sizeof c;
  return K32GetProcessMemoryInfo(GetCurrentProcess(), &c, sizeof c) ? size_t(c.PeakWorkingSetSize) : 0;
}

namespace {
// One argument as CommandLineToArgvW reads it back (backslashes doubled before a quote).
std::wstring quote_argument(const std::wstring& a) {
  if (!a.empty() && a.find_first_of(L" \t\n\v\"") == std::wstring::npos) return a;
  std::wstring q = L"\"";
  for (size_t i = 0;; ++i) {
    size_t slashes = 0;
    while (i < a.size() && a[i] == L'\\') ++i, ++slashes;
    if (i == a.size()) {
      q.append(slashes * 2, L'\\');
      break;
    }
    if (a[i] == L'"') q.append(slashes * 2 + 1, L'\\');
    else q.append(slashes, L'\\');
    q += a[i];
  }
  return q + L"\"";
}
}  // namespace

ChildOutput run_capturing_stdout(const std::vector<std::string>& args, const std::string& stdin_path) {
  if (args.empty()) return {"", "no program to run"};
  SECURITY_ATTRIBUTES sa{sizeof sa, nullptr, TRUE};
  HANDLE read_end = nullptr, write_end = nullptr;
  if (!CreatePipe(&read_end, &write_end, &sa, 0)) return {"", "cannot create a pipe: " + last_error()};
  SetHandleInformation(read_end, HANDLE_FLAG_INHERIT, 0);
  HANDLE nul = CreateFileW(L"NUL", GENERIC_READ | GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_WRITE, &sa, OPEN_EXISTING, 0, nullptr);
  HANDLE in = stdin_path.empty() ? nul : CreateFileW(wide(stdin_path).c_str(), GENERIC_READ, FILE_SHARE_READ, &sa, OPEN_EXISTING, 0, nullptr);
  if (in == INVALID_HANDLE_VALUE) {
    CloseHandle(read_end);
    CloseHandle(write_end);
    CloseHandle(nul);
    return {"", "cannot open " + stdin_path + ": " + last_error()};
  }
  STARTUPINFOW si{};
  si.cb = sizeof si;
  si.dwFlags = STARTF_USESTDHANDLES;
  si.hStdInput = in;
  si.hStdOutput = write_end;
  si.hStdError = nul;
  std::wstring line;
  for (const std::string& a : args) line += (line.empty() ? L"" : L" ") + quote_argument(wide(a));
  PROCESS_INFORMATION pi{};
  const BOOL started = CreateProcessW(nullptr, line.data(), nullptr, nullptr, TRUE, CREATE_NO_WINDOW, nullptr, nullptr, &si, &pi);
  const std::string why = started ? "" : last_error();
  CloseHandle(write_end);
  if (in != nul) CloseHandle(in);
  CloseHandle(nul);
  ChildOutput r;
  if (!started) {
    CloseHandle(read_end);
    return {"", "cannot start " + args[0] + ": " + why};
  }
  char buf[4096];
  for (DWORD got; ReadFile(read_end, buf, sizeof buf, &got, nullptr) && got > 0;) r.out.append(buf, got);
  CloseHandle(read_end);
  WaitForSingleObject(pi.hProcess, INFINITE);
  DWORD code = 0;
  GetExitCodeProcess(pi.hProcess, &code);
  CloseHandle(pi.hProcess);
  CloseHandle(pi.hThread);
  if (code != 0) r.failure = "exit " + std::to_string(code);
  return r;
}

void* open_vulkan_loader() { return reinterpret_cast<void*>(LoadLibraryW(L"vulkan-1.dll")); }

void* library_symbol(void* library, const char* name) {
  return reinterpret_cast<void*>(GetProcAddress(static_cast<HMODULE>(library), name));
}

const char* vulkan_loader_advice() {
  return "no Vulkan loader found (vulkan-1.dll). It comes with every GPU driver: install or update your GPU "
         "vendor's driver (NVIDIA, AMD, Intel), or the Vulkan runtime";
}

void pin_vulkan_driver_modules() {}

}  // namespace vkspec::platform
