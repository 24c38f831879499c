#pragma once
// Runs a program with an argument vector (no shell) on every system: the Windows suite under Wine starts
// Debian's python3 this way (Wine runs a Linux program that CreateProcess is given).
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

}  // namespace vkspec::test
