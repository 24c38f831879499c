#include "platform/line_editor.h"

#include <cstdio>

#include "platform/platform.h"

namespace vkspec::platform {

bool read_edited_line(const char* prompt, std::string& line) {   // (the console edits and keeps history)
  fputs(prompt, stdout);
  fflush(stdout);
  return read_line(line);
}

void remember_line(const std::string&) {}

}  // namespace vkspec::platform
