// The vkspec binary given bad input: one-line errors and non-zero exits, never a crash, a hang or a shell
// command; files it cannot use are refused with the reason (an architecture, device memory, non-finite logits).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "tests/cli_helpers.h"
#include "tests/gguf_writer.h"
#include "tests/run_command.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {

// A Gemma 4 file (here llama.cpp's Llama 3 vocabulary renamed so, with a pre-tokenizer vkspec does not know
// either) is refused for its architecture, not for its pre-tokenizer: the real reason first.
TEST(Cli, AnotherArchitectureIsRefusedForItsArchitecture) {
  GgufFile vocab(shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf"));
  GgufWriter w;
  w.copy_metadata(vocab, [](const std::string& k) { return k == "general.architecture" || k == "tokenizer.ggml.pre"; });
  w.str("general.architecture", "gemma4");
  w.str("tokenizer.ggml.pre", "gemma4-like");
  const std::string path = ::testing::TempDir() + "/vkspec-gemma4-vocab.gguf";
  w.write(path);
  const auto r = run_cli("run -m " + path + " -p hi");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("architecture 'gemma4' (Gemma 4) is not supported"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("pre-tokenizer"), std::string::npos) << r.err;
}

TEST(Cli, BadInputGetsOneLineErrorAndNonZeroExit) {
  const std::string tmp = ::testing::TempDir() + "/vkspec-not-gguf.bin";
  std::ofstream(tmp) << "this is not a model";
  std::string long_prompt(3000, 'a');
  for (auto args : {std::string("run -m /nonexistent.gguf -p hi"), "run -m " + tmp + " -p hi",
                    "run " + kStories + " -p hi -n 0", "run " + kStories + " -p hi -n -5",
                    "run " + kStories + " -p '" + long_prompt + "' --ctx 64",
                    "run " + kStories + " -p hi --device 99", "run " + kStories,
                    "run " + kStories + " -f /nonexistent-prompt.txt",
                    "run " + kStories + " -p hi --temp nan", "run " + kStories + " -p hi --temp inf",
                    "run " + kStories + " -p hi --repeat-penalty 0", "run " + kStories + " -p hi --top-p nan",
                    "run " + kStories + " -p hi --presence-penalty nan", "run " + kStories + " -p hi --frequency-penalty 1e9",
                    "bench " + kStories + " -p 8 -n 4 --temp nan",
                    "tokenize -m " + shared_path("models/README.md") + " -p hi",
                    "embed " + kStories + " -p '' --no-bos", "embed " + kStories + " -p '" + long_prompt + "' --ctx 64",
                    "embed " + kStories, "embed " + kStories + " -p hi -f x.txt"}) {
    auto r = run_cli(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.code, 128) << "crashed: " << args;
    EXPECT_NE(r.err.find("error"), std::string::npos) << args << "\n" << r.err;
  }
}

// A context that cannot fit is refused before anything is allocated, with the numbers.
TEST(Cli, ContextBeyondDeviceMemoryIsRefusedWithTheNumbers) {
  // 2e9 positions need ~1.2 TB of KV: more than any device has (1e8 fit the 141 GB of an H200, and ran)
  auto r = run_cli("run " + kStories + " -p hi -n 4 -c 2000000000");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("of device memory (weights"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("KV cache"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("smaller --ctx"), std::string::npos) << r.err;
}

// The hardening classes of the CLI (issue 16): each bad input gets a one-line error that names the flag, file or
// variable, and a non-zero exit; nothing blocks on a FIFO or reads a device; write failures are exit 1.
TEST(Cli, HostileInputsAreRefusedByName) {
  const std::string dir = ::testing::TempDir();
  const std::string fifo = dir + "/vkspec-prompt.fifo";
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  struct Case { std::string args, expect; };
  const std::vector<Case> cases = {
      {"run " + kStories + " -f " + fifo, "is not a regular file"},   // would block for ever if opened
      {"run " + kStories + " -f /dev/zero", "is not a regular file"},   // would read until memory runs out
      {"run " + kStories + " -f " + dir, "is not a regular file"},
      {"run -m " + fifo + " -p hi", "is not a regular file"},   // a FIFO as the model must not block either
      {"run " + kStories + " -p hi -f " + shared_path("models/README.md"), "either -p TEXT or -f FILE"},
      {"run " + kStories + " -p hi -md ''", "-md needs a draft model file"},
      {"run " + kStories + " -p hi --chat --chat-template ''", "--chat-template needs a template file"},
      {"serve " + kStories + " --chat-template '' --port 1", "--chat-template needs a template file"},
      {"run " + kStories + " -p hi --top-p 1.5", "--top-p must be in (0, 1]"},
      {"run " + kStories + " -p hi --min-p -0.1", "--min-p must be in [0, 1]"},
      {"run " + kStories + " -p hi --top-k -1", "--top-k must be"},
      {"run " + kStories + " -p hi --draft-p-min 2", "--draft-p-min must be in [0, 1]"},
      {"run " + kStories + " -p hi --seed 99999999999999999999999", "--seed must be"},
      {"run " + kStories + " -p hi --seed -5", "--seed must be"},
      {"run " + kStories + " -p hi --device -3", "--device must be"},
      {"run " + kStories + " -p hi --ubatch 513", "--ubatch must be 1..512"},
      {"run " + kStories + " -p hi -ub -1", "--ubatch must be 1..512"},
      // a grammar whose text no token can start, or continue after its first character: the request's fault,
      // said so (not a model with broken weights, not an internal error)
      {"run " + kStories + " -p hi --grammar 'root ::= [^\\x00-\\U0010FFFF]'", "the grammar allows no token at its start"},
      {"run " + kStories + " -p hi --grammar 'root ::= \"a\" [^\\x00-\\U0010FFFF]'", "the grammar allows no token here"},
      {"VKSPEC_KERNELS=fast run " + kStories + " -p hi", "VKSPEC_KERNELS must be"},
      {"VKSPEC_PROFILE=yes run " + kStories + " -p hi", "VKSPEC_PROFILE must be"},
      {"VKSPEC_SUBMIT=split run " + kStories + " -p hi", "VKSPEC_SUBMIT must be"},
      {"VKSPEC_MEMORY=gpu run " + kStories + " -p hi", "VKSPEC_MEMORY must be"},
      {"VKSPEC_MATMUL=tensor run " + kStories + " -p hi", "VKSPEC_MATMUL must be"},
      {"VKSPEC_DEVICE=99999999999 run " + kStories + " -p hi", "VKSPEC_DEVICE must be"},
      {"VKSPEC_PROFILE=2 devices --json", "VKSPEC_PROFILE must be"},
  };
  for (const Case& c : cases) {
    const bool env = c.args.rfind("VKSPEC_", 0) == 0;
    auto r = env ? run_command(c.args.substr(0, c.args.find(' ')) + " " + std::string(VKSPEC_BIN) + " " +
                               c.args.substr(c.args.find(' ') + 1))
                 : run_cli(c.args);
    EXPECT_EQ(r.code, 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  }
  unlink(fifo.c_str());
}

TEST(Cli, WriteFailuresExitNonZero) {
  for (std::string args : {"run " + kStories + " -p 'Once upon a time' -n 40", "run " + kStories + " -p hi -n 8 --json",
                           std::string("devices"), "tokenize " + kStories + " -p hi"}) {
    auto r = run_cli(args + " > /dev/full");
    EXPECT_EQ(r.code, 1) << args << "\n" << r.err;
    const size_t at = r.err.find("cannot write to standard output");
    EXPECT_NE(at, std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(r.err.find("cannot write to standard output", at + 1), std::string::npos) << "reported twice: " << r.err;
  }
}

// --peer runs node with an argument vector: a file name that would be a command in a shell stays a name.
TEST(Cli, PeerPathsAreNeverShellCommands) {
  const std::string marker = ::testing::TempDir() + "/vkspec-peer-injected";
  unlink(marker.c_str());
  auto r = run_cli("bench " + kStories + " -p 8 -n 4 --reps 1 --peer \"/nonexistent/it's \\$(touch " + marker + ")\"");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("the llama.cpp peer failed (exit"), std::string::npos) << r.err;
  struct stat st;
  EXPECT_NE(stat(marker.c_str(), &st), 0) << "the peer path was run by a shell";
}

// A model whose logits are NaN (its final norm weight is) gets a clear error in every decoding mode: greedy,
// sampled, and speculative (n-gram drafts, greedy and sampled verification); never an out-of-range token.
TEST(Cli, NonFiniteLogitsAreAClearError) {
  GgufFile good(shared_path("models/stories260K.gguf"));
  GgufWriter w;
  w.copy_metadata(good, [](const std::string&) { return false; });
  std::vector<float> nan_norm;
  for (const auto& t : good.tensors()) {
    if (t.name == "output_norm.weight") {
      nan_norm.assign(t.elements(), std::numeric_limits<float>::quiet_NaN());
      w.tensor(t.name, t.dims, t.type, nan_norm.data(), nan_norm.size() * 4);
    } else {
      w.tensor(t.name, t.dims, t.type, t.data, t.bytes);
    }
  }
  const std::string path = ::testing::TempDir() + "/vkspec-nan-logits.gguf";
  w.write(path);
  for (std::string mode : {"--temp 0", "--temp 0.8 --seed 3", "--temp 0 --draft ngram", "--temp 0.8 --seed 3 --draft ngram"}) {
    auto r = run_cli("run -m " + path + " -p 'Once upon a time' -n 8 " + mode);
    EXPECT_EQ(r.code, 1) << mode << "\n" << r.err;
    EXPECT_NE(r.err.find("non-finite"), std::string::npos) << mode << "\n" << r.err;
  }
}

// A FIFO (or any non-regular file) where the pipeline cache lives is ignored, not opened: the run completes.
TEST(Cli, PipelineCacheThatIsNotAFileIsIgnored) {
  const std::string home = ::testing::TempDir() + "/vkspec-cache-fifo";
  run_command("rm -rf " + home + " && mkdir -p " + home + "/vkspec");
  // every name the cache could have on this machine's devices: make the first run create it, then swap in FIFOs
  auto r = run_command("XDG_CACHE_HOME=" + home + " " + std::string(VKSPEC_BIN) + " run " + kStories + " -p hi -n 2");
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_command("cd " + home + "/vkspec && for f in pipelines-*.bin; do rm \"$f\" && mkfifo \"$f\"; done && ls");
  ASSERT_NE(r.out.find("pipelines-"), std::string::npos) << r.out;
  r = run_command("XDG_CACHE_HOME=" + home + " timeout 60 " + std::string(VKSPEC_BIN) + " run " + kStories + " -p hi -n 2");
  EXPECT_EQ(r.code, 0) << r.err;
}

// An unused numeric array costs nothing: it stays in the mapping until a key is used (as doubles, a 100 MB
// byte array took 800 MB). With 512 MB of address space the file still gets its real error (no tokenizer).
TEST(Cli, UnusedMetadataArraysAreNotExpanded) {
#ifdef VKSPEC_SANITIZED
  GTEST_SKIP() << "address-space limits do not apply under AddressSanitizer";
#else
  const std::string path = ::testing::TempDir() + "/vkspec-big-array.gguf";
  // header by hand: the writer has no u8 arrays; 100M zero bytes follow the array header
  std::string head = "GGUF";
  auto put = [&](auto v) { head.append(reinterpret_cast<const char*>(&v), sizeof v); };
  auto str = [&](const std::string& t) { put(uint64_t(t.size())); head += t; };
  put(uint32_t(3)); put(uint64_t(0)); put(uint64_t(2));
  str("general.architecture"); put(uint32_t(8)); str("llama");
  str("junk.bytes"); put(uint32_t(9)); put(uint32_t(0)); put(uint64_t(100000000));
  {
    std::ofstream out(path, std::ios::binary);
    out << head;
    out.seekp(std::streamoff(head.size() + 100000000 - 1));
    out.put('\0');
  }
  auto r = run_command("ulimit -v 524288 && " + std::string(VKSPEC_BIN) + " tokenize -m " + path + " -p hi");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("missing GGUF key 'tokenizer.ggml.model'"), std::string::npos) << r.err;
  unlink(path.c_str());
#endif
}

// Strings from a file are shown escaped in errors (no raw control characters reach the terminal), and
// llama.cpp's `-md=FILE` spelling works.
TEST(Cli, ErrorsEscapeControlCharactersAndMdEqualsWorks) {
  GgufWriter w;
  w.str("general.architecture", "llama");
  w.str("tokenizer.ggml.model", "gp\x1b[2Jt2");
  const std::string path = ::testing::TempDir() + "/vkspec-escape.gguf";
  w.write(path);
  auto r = run_cli("run -m " + path + " -p hi");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << "raw escape character in: " << r.err;
  EXPECT_NE(r.err.find("gp\\x1b[2Jt2"), std::string::npos) << r.err;
  // a NUL inside a file's string is escaped too: the message is not cut short where it is read as a C string
  GgufWriter nul;
  nul.str("general.architecture", "llama");
  nul.str("tokenizer.ggml.model", std::string("gp\0t2\nend", 9));
  nul.write(path);
  r = run_cli("run -m " + path + " -p hi");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("gp\\x00t2\\x0aend'"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  const std::string draft = shared_path("models/pycode-draft-f16.gguf");
  r = run_cli("run -m " + shared_path("models/pycode-target-f16.gguf") + " -md=" + draft + " -p 'def f(' -n 8 --temp 0 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out).contains("speculative"));
}

}  // namespace
}  // namespace vkspec::test
