#pragma once
// Pieces shared by the vkspec subcommands.
#include <string>

namespace vkspec::cli {
int cmd_devices(bool json);
}
