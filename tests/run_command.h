#pragma once
// Runs a shell command line built by a test (from paths the test controls, never from user input) and
// returns its exit code, stdout and stderr. POSIX only (the shell): tests/run_program.h runs an argument
// vector on every system.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/run_program.h"

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

namespace vkspec::test {

inline Result run_command(const std::string& command) {
  const std::string err_path = ::testing::TempDir() + "/vkspec-test-stderr-" + std::to_string(getpid()) + ".txt";
  FILE* p = popen((command + " 2>" + err_path).c_str(), "r");
  Result r{-1, "", ""};
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  return r;
}

// The vkspec binary. Under the sanitizer job, leak checking is off for the child process only: the Vulkan
// loader unloads lavapipe at vkDestroyInstance, so the driver's exit-time allocations have no module name
// that scripts/lsan.supp could match. Our code paths are leak-checked in-process by the other suites.
inline Result run_vkspec(const std::string& bin, const std::string& args) {
  return run_command("ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0\" " + bin + " " + args);
}

}  // namespace vkspec::test
