// llama.cpp's spellings of the options (apps/cli/llama_flags.cpp): each renamed one means what vkspec's
// does (the same tokens), the ignored ones leave the tokens alone and say so, the ones that cannot apply
// and every unknown or malformed flag exit non-zero with one line naming the flag; --version, help with
// defaults, -n -1, serve's -c; a first run's pipeline creation said apart from its prompt's time.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/run_command.h"
#include "tests/server_process.h"
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
  // -p's escapes are processed, as llama.cpp does (-e accepted), unless --no-escape; llama.cpp's --draft N is
  // the drafts per round (vkspec's --draft names the drafter)
  const auto prompt_ids = [](const std::string& args) {
    const Result r = run_cli("run " + kStories + " -n 1 --temp 0 --json " + args);
    EXPECT_EQ(r.code, 0) << args << ": " << r.err;
    return r.code == 0 ? nlohmann::json::parse(r.out)["prompt_ids"] : nlohmann::json();
  };
  const nlohmann::json newline = prompt_ids("-p \"$(printf 'a\\nb')\"");
  EXPECT_EQ(prompt_ids("-p 'a\\nb'"), newline);
  EXPECT_EQ(prompt_ids("-p 'a\\nb' -e"), newline);
  EXPECT_NE(prompt_ids("-p 'a\\nb' --no-escape"), newline);
  const Result drafts = run_cli("run " + kStories + kGreedy + " -n 8 --draft ngram --draft 3");
  ASSERT_EQ(drafts.code, 0) << drafts.err;
  EXPECT_EQ(nlohmann::json::parse(drafts.out)["speculative"]["draft_max"], 3);
  // -n -1: until the end of generation or the context
  const Result endless = run_cli("run " + kStories + kGreedy + " -c 48 -n -1");
  ASSERT_EQ(endless.code, 0) << endless.err;
  const nlohmann::json e = nlohmann::json::parse(endless.out);
  EXPECT_EQ(e["stop_reason"], "context");
  EXPECT_EQ(e["prompt_tokens"].get<int>() + e["n_generated"].get<int>(), 48);
  // serve: -np is --parallel; -c (--ctx-size) is llama-server's, the context of all sequences together
  const Result serve = run_cli("serve -m /nonexistent.gguf -np 2 --ctx-size 256");
  EXPECT_EQ(serve.code, 1);
  EXPECT_NE(serve.err.find("nonexistent.gguf"), std::string::npos) << serve.err;
  const Result tiny = run_cli("serve " + kStories + " -c 40 -np 4");
  EXPECT_EQ(tiny.code, 1);
  EXPECT_NE(tiny.err.find("fewer than 16 tokens for each of the 4 sequences"), std::string::npos) << tiny.err;
  ServerProcess s(kStories + " -c 1024 -np 2");
  ASSERT_TRUE(s.up()) << s.log();
  EXPECT_NE(s.log().find("context 512, 2 sequences"), std::string::npos) << s.log();
  EXPECT_EQ(s.stop(), 0);
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

// A run says how long creating its pipelines took (vkCreateComputePipelines: where GPU drivers compile
// shaders), apart from the prompt's time, on stderr and in --json's timings. (lavapipe compiles most of a
// shader at its first dispatch instead, inside the first pass, where no API can tell it apart.)
TEST(CliFlags, RunSaysPipelineCreationApart) {
  const Result text = run_cli("run " + kStories + " -p 'Once upon a time' -n 4 --temp 0");
  ASSERT_EQ(text.code, 0) << text.err;
  const size_t at = text.err.find("s creating pipelines (the driver compiling shaders");
  ASSERT_NE(at, std::string::npos) << text.err;
  EXPECT_LT(at, text.err.find("prompt tokens in")) << text.err;
  const Result json = run_cli("run " + kStories + " -p 'Once upon a time' -n 4 --temp 0 --json");
  ASSERT_EQ(json.code, 0) << json.err;
  const nlohmann::json t = nlohmann::json::parse(json.out)["timings"];
  EXPECT_GT(t["pipelines_s"].get<double>(), 0) << t.dump();
  EXPECT_GE(t["prefill_s"].get<double>(), 0) << t.dump();
  EXPECT_GE(t["decode_s"].get<double>(), 0) << t.dump();
}

}  // namespace
}  // namespace vkspec::test
