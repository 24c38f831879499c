#pragma once
// The vkspec binary's suites (tests/test_cli.cpp, test_cli_refusals.cpp): running it, scratch files, the model.
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/run_command.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {

inline Result run_cli(const std::string& args) { return run_vkspec(VKSPEC_BIN, args); }
using json = nlohmann::json;
inline std::string tmp(const std::string& name) { return ::testing::TempDir() + "/vkspec-cli-" + name; }
inline void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

const std::string kStories = "-m " + shared_path("models/stories260K.gguf");

}  // namespace
}  // namespace vkspec::test
