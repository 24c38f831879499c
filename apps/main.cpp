// vkspec command line: devices | run | tokenize | bench.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "apps/cli_common.h"
#include "runtime/vk_loader.h"

int main(int argc, char** argv) {
  CLI::App app{"vkspec: portable Llama inference on Vulkan with lossless speculative decoding"};
  app.require_subcommand(1);
  bool devices_json = false;
  auto* devices = app.add_subcommand("devices", "List Vulkan devices and the facts kernels rely on");
  devices->add_flag("--json", devices_json, "Print JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*devices) return vkspec::cli::cmd_devices(devices_json);
  } catch (const std::exception& e) {
    fprintf(stderr, "vkspec: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
