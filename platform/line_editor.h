#pragma once
// A conversation's input line on a terminal, with line editing and the session's history: libedit (BSD
// licensed, Debian's libedit-dev) on POSIX; on Windows the console's own line editing, which keeps a
// history in cooked mode. Only for a terminal: piped input is read with platform::read_line. The CLI's
// alone (library vkspec_line_editor), so that libvkspec does not depend on it.
#include <string>

namespace vkspec::platform {

// Shows `prompt` and reads one line (without its end); false at end of input (Ctrl-D, Ctrl-Z).
bool read_edited_line(const char* prompt, std::string& line);
// Adds a line to the history that the arrow keys recall.
void remember_line(const std::string& line);

}  // namespace vkspec::platform
