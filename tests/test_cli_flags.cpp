// llama.cpp's spellings of the options (apps/cli/llama_flags.cpp): each renamed one means what vkspec's
// does (the same tokens), the ignored ones leave the tokens alone and say so, the ones that cannot apply
// and every unknown or malformed flag exit non-zero with one line naming the flag; --version, help with
// defaults, -n -1.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/run_command.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {

Result run_cli(const std::string& args) { return run_vkspec(VKSPEC_BIN, args); }
const std::string kStories = "-m " + shared_path("models/stories260K.gguf");
const std::string kGreedy = " -p 'Once upon a time' --temp 0 --ignore-eos --json";

nlohmann::json ids_of(const std::string& args) {
  const Result r = run_cli("run " + kStories + kGreedy + " " + args);
  EXPECT_EQ(r.code, 0) << args << ": " << r.err;
  return r.code == 0 ? nlohmann::json::parse(r.out)["ids"] : nlohmann::json();
}

TEST(CliFlags, LlamaCppSpellingsMeanWhatVkspecsDo) {
  const nlohmann::json want = ids_of("-n 16 --ctx 512 --ubatch 4");
  ASSERT_EQ(want.size(), 16u);
  // renamed (--ctx-size, -ub, --predict), with and without '=', beside flags vkspec always honours
  EXPECT_EQ(ids_of("--predict 16 --ctx-size 512 -ub 4"), want);
  EXPECT_EQ(ids_of("--predict=16 --ctx-size=512 -ub=4 -ngl 99 -t 8 -tb 8 -fa --jinja -ctk f16 -ctv f16 --no-mmap"), want);
  EXPECT_EQ(ids_of("-n 16 -c 512 --n-gpu-layers=99 --flash-attn on --threads 4"), want);
  const Result noted = run_cli("run " + kStories + kGreedy + " -n 4 -ngl 99");
  EXPECT_NE(noted.err.find("-ngl ignored: every layer always runs on the Vulkan device"), std::string::npos) << noted.err;
  // -e is --escape; llama.cpp's --draft N is the drafts per round (vkspec's --draft names the drafter)
  const Result escaped = run_cli("run " + kStories + " -p 'a\\nb' -e -n 1 --temp 0 --json");
  const Result plain = run_cli("run " + kStories + " -p \"$(printf 'a\\nb')\" -n 1 --temp 0 --json");
  ASSERT_EQ(escaped.code, 0) << escaped.err;
  EXPECT_EQ(nlohmann::json::parse(escaped.out)["prompt_ids"], nlohmann::json::parse(plain.out)["prompt_ids"]);
  const Result drafts = run_cli("run " + kStories + kGreedy + " -n 8 --draft ngram --draft 3");
  ASSERT_EQ(drafts.code, 0) << drafts.err;
  EXPECT_EQ(nlohmann::json::parse(drafts.out)["speculative"]["draft_max"], 3);
  // -n -1: until the end of generation or the context
  const Result endless = run_cli("run " + kStories + kGreedy + " -c 48 -n -1");
  ASSERT_EQ(endless.code, 0) << endless.err;
  const nlohmann::json e = nlohmann::json::parse(endless.out);
  EXPECT_EQ(e["stop_reason"], "context");
  EXPECT_EQ(e["prompt_tokens"].get<int>() + e["n_generated"].get<int>(), 48);
  // serve's -np is --parallel (the error is the model's, not the flag's)
  const Result serve = run_cli("serve -m /nonexistent.gguf -np 2 --ctx-size 256");
  EXPECT_EQ(serve.code, 1);
  EXPECT_NE(serve.err.find("nonexistent.gguf"), std::string::npos) << serve.err;
}

TEST(CliFlags, WhatCannotApplyAndUnknownFlagsAreOneLineErrors) {
  struct Case {
    std::string args, names;
  };
  const std::vector<Case> cases = {
      {"-hf user/repo", "-hf user/repo: vkspec does not download models"},
      {"--hf-repo=user/repo", "--hf-repo user/repo: vkspec does not download models"},
      {"-ngl 0", "-ngl 0: every layer always runs on the Vulkan device"},
      {"-ctk q8_0", "-ctk q8_0: vkspec keeps the KV cache in f16"},
      {"--lora adapter.gguf", "--lora adapter.gguf: vkspec does not apply LoRA adapters"},
      {"-ngl", "-ngl needs a value"},
      {"--bogus", "--bogus"},
      {"-xyz 3", "-x"},
      {"-n abc", "abc"},
      {"--temp", "--temp"},
  };
  for (const Case& c : cases) {
    const Result r = run_cli("run " + kStories + " -p hi " + c.args);
    EXPECT_NE(r.code, 0) << c.args;
    EXPECT_NE(r.err.find(c.names), std::string::npos) << c.args << ": " << r.err;
    EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 2) << c.args << ": " << r.err;
    EXPECT_EQ(r.out, "") << c.args;
  }
}

TEST(CliFlags, VersionAndHelpWithDefaults) {
  const Result v = run_cli("--version");
  ASSERT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.out.find("vkspec "), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("(C API "), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("device 0: "), std::string::npos) << v.out;
  const Result help = run_cli("run --help");
  ASSERT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("-n,--n-predict INT=128"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--temp FLOAT=0.8"), std::string::npos) << help.out;
  const Result none = run_cli("");
  EXPECT_NE(none.code, 0);
}

}  // namespace
}  // namespace vkspec::test
