#pragma once
// Runs a program with an argument vector (no shell) on every system. (Under Wine a Linux program can be
// started but its output is not captured: Wine hands it the Wine process's own descriptors; the Windows
// suite leaves out the tests whose references are Linux programs, scripts/test-windows.sh.)
#include <cstdlib>
#include <string>
#include <vector>

#include "platform/platform.h"

namespace vkspec::test {

struct Result { int code; std::string out, err; };

// argv[0] with its arguments, stdin from a file; code 0 or 1 (how it failed is in err; stderr is discarded).
inline Result run_program(const std::vector<std::string>& argv, const std::string& stdin_path = "") {
  const platform::ChildOutput c = platform::run_capturing_stdout(argv, stdin_path);
  return {c.failure.empty() ? 0 : 1, c.out, c.failure};
}

// A program of this build (vkspec, an example). Under the sanitizer job leak checking is off in the child
// only, as tests/run_command.h's run_vkspec does (the driver's exit-time allocations have no module name).
inline Result run_binary(const std::string& bin, std::vector<std::string> args) {
  const char* before = std::getenv("ASAN_OPTIONS");
  const std::string saved = before ? before : "";
  platform::set_env("ASAN_OPTIONS", saved.empty() ? "detect_leaks=0" : saved + ":detect_leaks=0");
  args.insert(args.begin(), bin);
  Result r = run_program(args);
  if (before) platform::set_env("ASAN_OPTIONS", saved);
  else platform::unset_env("ASAN_OPTIONS");
  return r;
}

}  // namespace vkspec::test
