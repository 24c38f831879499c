// Text input and output shared by the subcommands and the library (apps/cli_common.h).
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "apps/cli_common.h"
#include "runtime/core.h"

namespace vkspec::cli {

std::string process_escapes(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) { out += s[i]; continue; }
    switch (s[++i]) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '"': out += '"'; break;
      case '\'': out += '\''; break;
      case '0': out += '\0'; break;
      default: out += '\\'; out += s[i];
    }
  }
  return out;
}

std::string read_text_file(const std::string& path, uint64_t max_bytes, const char* what) {
  // The type is checked before opening: a FIFO or a device (/dev/zero) would block or never end.
  struct stat st;
  if (stat(path.c_str(), &st) != 0) throw Error(std::string("cannot read ") + what + " '" + path + "': " + strerror(errno));
  if (!S_ISREG(st.st_mode)) throw Error(std::string(what) + " '" + path + "' is not a regular file");
  if (uint64_t(st.st_size) > max_bytes)
    throw Error(std::string(what) + " '" + path + "' is " + std::to_string(st.st_size) + " bytes; at most " +
                std::to_string(max_bytes) + " are read" + (std::string(what) == "prompt file" && max_bytes != kMaxTextBytes ? " for this context (--ctx)" : ""));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(std::string("cannot read ") + what + " '" + path + "': " + strerror(errno));
  std::string text(size_t(st.st_size), '\0');
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(in.gcount()));   // a file that shrank meanwhile: what was there
  return text;
}

std::string read_prompt(const RunOptions& o, uint64_t max_bytes) {
  std::string text = o.prompt;
  if (!o.prompt_file.empty()) text = read_text_file(o.prompt_file, max_bytes, "prompt file");
  return o.escape ? process_escapes(text) : text;
}

std::optional<uint64_t> parse_seed(const std::string& text) {
  if (text == "-1") return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = strtoull(text.c_str(), &end, 10);
  if (text.empty() || text[0] == '-' || text[0] == '+' || *end || errno == ERANGE)
    throw Error("--seed must be -1 (random) or an integer in 0..18446744073709551615, got '" + text + "'");
  return uint64_t(v);
}

void write_stdout(const std::string& s) {
  if (s.empty()) return;
  if (fwrite(s.data(), 1, s.size(), stdout) != s.size() || fflush(stdout) != 0)
    throw Error(std::string("cannot write to standard output: ") + strerror(errno));
}

}  // namespace vkspec::cli
