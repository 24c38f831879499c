#include "platform/line_editor.h"

#include <cstdio>
#include <cstdlib>

#include <editline/readline.h>

namespace vkspec::platform {

bool read_edited_line(const char* prompt, std::string& line) {
  char* text = readline(prompt);
  if (!text) return false;
  line = text;
  free(text);
  return true;
}

void remember_line(const std::string& line) {
  if (!line.empty()) add_history(line.c_str());
}

}  // namespace vkspec::platform
