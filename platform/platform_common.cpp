// platform.h's functions that are the same on every system, written over the system-specific ones.
#include <random>

#include "platform/platform.h"

namespace vkspec::platform {

std::FILE* create_temp_beside(const std::string& path, std::string* tmp_path) {
  std::random_device rd;
  for (int attempt = 0; attempt < 16; ++attempt) {   // a name taken (or planted) is skipped, never reused
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, ".tmp-%d-%08x", process_id(), unsigned(rd()));
    if (std::FILE* f = create_new_file(path + suffix)) {
      *tmp_path = path + suffix;
      return f;
    }
  }
  return nullptr;
}

}  // namespace vkspec::platform
