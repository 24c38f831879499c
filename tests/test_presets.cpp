// The GGUFs users download: every common llama.cpp preset of the pycode target, made by llama.cpp's own
// quantizer (../shared/tools/peer/quantize.py, installed by scripts/install-peer.sh into .peer), loads and
// runs; its greedy continuations agree with llama.cpp's (the peer's CPU backend) on the reference prompts;
// and `vkspec perplexity` gives llama.cpp's own figures (../shared/models/reference/perplexity.json) within
// 0.5%. Skipped, with a message, where node or the peer is missing.
#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <map>

#include <nlohmann/json.hpp>

#include "platform/platform.h"
#include "tests/cpu_reference.h"
#include "text/tokenizer.h"
#include "tests/run_command.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {

#ifdef VKSPEC_PRESETS_SUBSET
// q3_K + q4_0, q4_1, q4_K + q5_0 + q6_K, q5_K + q5_1, and q8_0 (the token embedding of each)
const char* const kPresets[] = {"Q2_K", "Q4_1", "Q4_K_M", "Q5_K_M"};
#else
const char* const kPresets[] = {"Q2_K", "Q3_K_M", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                "Q4_K_S", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0"};
#endif

std::string peer_dir() { return getenv("VKSPEC_PEER") ? getenv("VKSPEC_PEER") : ""; }
bool exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}
// The peer's folder when llama.cpp can run from it (node-llama-cpp installed, node on the path), else "".
std::string usable_peer() {
  const std::string peer = peer_dir();
  if (peer.empty() || !exists(peer + "/node_modules/node-llama-cpp") || run_command("node --version").code != 0) return "";
  return peer;
}

// The preset file, made once per build folder (quantization is deterministic); "" when the peer is missing.
std::string preset(const std::string& type) {
  const std::string peer = usable_peer();
  if (peer.empty()) return "";
  const std::string dir = std::string(VKSPEC_PRESETS_DIR);
  const std::string out = dir + "/pycode-target-" + type + ".gguf";
  if (!exists(out)) {
    run_command("mkdir -p " + dir);
    Result r = run_command("python3 " + peer + "/quantize.py " + shared_path("models/pycode-target-f16.gguf") + " " +
                           out + ".tmp " + type + " >/dev/null && mv " + out + ".tmp " + out);
    EXPECT_EQ(r.code, 0) << "quantize.py " << type << ": " << r.err;
  }
  return exists(out) ? out : "";
}

#define REQUIRE_PEER(path)                                                                                     \
  if (path.empty()) GTEST_SKIP() << "llama.cpp peer not installed (scripts/install-peer.sh needs node and npm)"

// "1,2,3": ids as the peer's --prompt-ids takes them
std::string comma_list(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) {
    if (!s.empty()) s += ',';
    s += std::to_string(id);
  }
  return s;
}

std::vector<nlohmann::json> reference_prompts() {
  std::vector<nlohmann::json> out;
  std::ifstream in(shared_path("models/reference/pycode-target-greedy.jsonl"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Leading ids of vkspec's greedy continuation that equal llama.cpp's, per reference prompt. llama.cpp's CPU
// backend quantizes activations to 8 bits in its quantized matmuls, so a near-tie can go the other way
// and the two continuations part there; a wrong dequantization parts them at once.
TEST(Presets, GreedyContinuationsAgreeWithLlamaCpp) {
  const auto prompts = reference_prompts();
  ASSERT_GE(prompts.size(), 3u);
  const int n = 32;
  for (const char* type : kPresets) {
    const std::string model = preset(type);
    REQUIRE_PEER(model);
    std::vector<int> agree;
    for (size_t i = 0; i < 3; ++i) {
      const auto& p = prompts[i];
      const std::string ids = comma_list(p["prompt_ids"].get<std::vector<int>>());
      Result peer = run_command("node " + peer_dir() + "/peer.mjs --model " + model +
                                " --gpu false --threads 1 --runs 1 --ignore-eos --n " + std::to_string(n) +
                                " --prompt-ids " + ids);
      ASSERT_EQ(peer.code, 0) << peer.err;
      const auto theirs = nlohmann::json::parse(peer.out)["ids"].get<std::vector<int>>();
      const std::string prompt_file = ::testing::TempDir() + "/vkspec-preset-prompt.txt";
      std::ofstream(prompt_file) << p["prompt"].get<std::string>();
      Result ours = run_vkspec(VKSPEC_BIN, "run -m " + model + " -f " + prompt_file + " -n " + std::to_string(n) +
                                               " --temp 0 --ignore-eos --json");
      ASSERT_EQ(ours.code, 0) << ours.err;
      const auto j = nlohmann::json::parse(ours.out);
      ASSERT_EQ(j["prompt_ids"], p["prompt_ids"]) << type;
      const auto mine = j["ids"].get<std::vector<int>>();
      size_t k = 0;
      while (k < mine.size() && k < theirs.size() && mine[k] == theirs[k]) ++k;
      agree.push_back(int(k));
    }
    std::string report;
    for (int a : agree) report += std::to_string(a) + "/" + std::to_string(n) + " ";
    printf("%-7s leading ids equal to llama.cpp's: %s\n", type, report.c_str());
    // at least two of the three prompts agree for 8 tokens or more, and one for the whole continuation
    std::sort(agree.begin(), agree.end());
    EXPECT_GE(agree[1], 8) << type << ": " << report;
    EXPECT_EQ(agree[2], n) << type << ": " << report;
  }
}

// llama.cpp's penalties and logit bias (its llama_sampler_penalties and llama_sampler_logit_bias, through
// node-llama-cpp: tests/peer_penalties.mjs) against vkspec's --frequency-penalty, --presence-penalty,
// --repeat-penalty and -l, greedy on the f16 pycode target over a 64-token window. Each setting changes
// llama.cpp's own continuation within the 32 tokens (so agreeing is not agreeing on plain greedy), and
// vkspec's leading ids must equal it for at least 24 tokens (on this machine: all 32 in every setting).
TEST(Presets, PenaltiesAndLogitBiasAgreeWithLlamaCpp) {
  const std::string peer = usable_peer();
  if (peer.empty()) GTEST_SKIP() << "llama.cpp peer not installed (scripts/install-peer.sh needs node and npm)";
  const std::string model = shared_path("models/pycode-target-f16.gguf");
  const std::string script = std::string(VKSPEC_SOURCE_DIR) + "/tests/peer_penalties.mjs";
  const std::string prompt = "def parse_args(argv):";
  const int n = 32;
  Result plain = run_vkspec(VKSPEC_BIN, "run -m " + model + " -p '" + prompt + "' -n 32 --temp 0 --ignore-eos --json");
  ASSERT_EQ(plain.code, 0) << plain.err;
  const auto pj = nlohmann::json::parse(plain.out);
  const std::string ids = comma_list(pj["prompt_ids"].get<std::vector<int>>());
  const auto plain_ids = pj["ids"].get<std::vector<int>>();
  struct Setting { const char *frequency, *presence, *repeat, *bias, *flags; };
  for (const Setting& st : {Setting{"0.5", "0.3", "1", "", ""}, Setting{"0.4", "0", "1.1", "", ""},
                            Setting{"0", "0.8", "1", "", ""},
                            Setting{"0.3", "0.2", "1.05", "476:1;7786:0.5;29:-100", "-l 476+1 -l 7786+0.5 -l 29-100"}}) {
    const std::string what = std::string("frequency ") + st.frequency + " presence " + st.presence + " repeat " +
                             st.repeat + " bias '" + st.bias + "'";
    Result peer_run = run_command("VKSPEC_PEER=" + peer + " node " + script + " " + model + " " + ids + " " +
                                  std::to_string(n) + " " + st.frequency + " " + st.presence + " " + st.repeat +
                                  " 64 '" + st.bias + "'");
    ASSERT_EQ(peer_run.code, 0) << peer_run.err;
    const auto theirs = nlohmann::json::parse(peer_run.out)["ids"].get<std::vector<int>>();
    ASSERT_EQ(theirs.size(), size_t(n)) << what;
    EXPECT_NE(theirs, plain_ids) << what << ": the setting does not change llama.cpp's continuation";
    Result ours = run_vkspec(VKSPEC_BIN, "run -m " + model + " -p '" + prompt + "' -n 32 --temp 0 --ignore-eos --json" +
                                             " --repeat-last-n 64 --frequency-penalty " + st.frequency +
                                             " --presence-penalty " + st.presence + " --repeat-penalty " + st.repeat +
                                             " " + st.flags);
    ASSERT_EQ(ours.code, 0) << ours.err;
    const auto mine = nlohmann::json::parse(ours.out)["ids"].get<std::vector<int>>();
    size_t k = 0;
    while (k < mine.size() && k < theirs.size() && mine[k] == theirs[k]) ++k;
    printf("%s: leading ids equal to llama.cpp's: %zu/%d\n", what.c_str(), k, n);
    EXPECT_GE(k, 24u) << what;
  }
}

// JSON mode (--json-object) against llama.cpp's JSON grammar (grammars/json.gbnf, which constrain/json_grammar.h
// implements, through node-llama-cpp: tests/peer_grammar.mjs), greedy on the f16 pycode target after prompts
// that lead into code, not JSON: every continuation is the grammar's doing. vkspec's ids (with the
// end-of-generation token when it stopped there) must equal llama.cpp's for at least 48 leading tokens or
// all of them (on this machine: all, in every case), and its text must be a JSON object or a prefix of one
// for nlohmann's parser.
TEST(Presets, JsonModeAgreesWithLlamaCppsJsonGrammar) {
  const std::string peer = usable_peer();
  if (peer.empty()) GTEST_SKIP() << "llama.cpp peer not installed (scripts/install-peer.sh needs node and npm)";
  const std::string model = shared_path("models/pycode-target-f16.gguf");
  const std::string script = std::string(VKSPEC_SOURCE_DIR) + "/tests/peer_grammar.mjs";
  const int n = 96;
  int ended = 0;
  for (const char* prompt : {"CONFIG = ", "data = json.loads(", "def get_config():\\n    return ", "x = ["}) {
    Result ours = run_vkspec(VKSPEC_BIN, "run -m " + model + " -p '" + prompt + "' --escape -n " + std::to_string(n) +
                                             " --temp 0 --json-object --json");
    ASSERT_EQ(ours.code, 0) << ours.err;
    const auto j = nlohmann::json::parse(ours.out);
    std::vector<int> mine = j["ids"].get<std::vector<int>>();
    const std::string text = j["text"].get<std::string>();
    if (j["stop_reason"] == "eos") {
      ++ended;
      mine.push_back(2);   // the pycode vocabulary's EOS, which llama.cpp's ids include
      nlohmann::json doc;
      ASSERT_NO_THROW(doc = nlohmann::json::parse(text)) << text;
      EXPECT_TRUE(doc.is_object()) << text;
    } else {
      ASSERT_EQ(j["stop_reason"], "length");
      try {
        const auto whole = nlohmann::json::parse(text);
        ADD_FAILURE() << "a cut-off text parses whole: " << whole.dump();
      } catch (const nlohmann::json::parse_error& e) {
        EXPECT_EQ(e.byte, text.size() + 1) << "not a prefix of a JSON document: " << e.what() << "\n" << text;
      }
    }
    Result peer_run = run_command("VKSPEC_PEER=" + peer + " node " + script + " " + model + " " +
                                  comma_list(j["prompt_ids"].get<std::vector<int>>()) + " " + std::to_string(n) + " json");
    ASSERT_EQ(peer_run.code, 0) << peer_run.err;
    const auto theirs = nlohmann::json::parse(peer_run.out)["ids"].get<std::vector<int>>();
    size_t k = 0;
    while (k < mine.size() && k < theirs.size() && mine[k] == theirs[k]) ++k;
    printf("'%s': leading ids equal to llama.cpp's: %zu of %zu / %zu\n", prompt, k, mine.size(), theirs.size());
    EXPECT_TRUE(k >= 48 || (k == mine.size() && k == theirs.size())) << prompt;
  }
  EXPECT_GE(ended, 1) << "no continuation completed its object";
}

// GBNF grammars (--grammar-file) against llama.cpp's grammar sampler, on the grammars node-llama-cpp ships
// with llama.cpp (arithmetic, list, json_arr, chess), greedy on the f16 pycode target: vkspec's ids (with
// the end-of-generation token when it stopped there) equal llama.cpp's for at least 48 leading tokens or all
// of them (here: all, in every case). (Not every pair agrees everywhere: after "TODO:" the chess grammar
// reaches a choice between 'a' and 'e' whose log-probabilities differ by 0.0006 nats, and llama.cpp's CPU
// backend takes the other one.)
TEST(Presets, GrammarsAgreeWithLlamaCpp) {
  const std::string peer = usable_peer();
  if (peer.empty()) GTEST_SKIP() << "llama.cpp peer not installed (scripts/install-peer.sh needs node and npm)";
  const std::string model = shared_path("models/pycode-target-f16.gguf");
  const std::string script = std::string(VKSPEC_SOURCE_DIR) + "/tests/peer_grammar.mjs";
  const std::string grammars = peer + "/node_modules/node-llama-cpp/llama/grammars/";
  const int n = 64;
  struct Case { const char *grammar, *prompt; };
  for (const Case& c : {Case{"arithmetic", "TODO:"}, Case{"arithmetic", "def f(x):"}, Case{"list", "TODO:"},
                        Case{"list", "def f(x):"}, Case{"json_arr", "TODO:"}, Case{"json_arr", "def f(x):"},
                        Case{"chess", "def f(x):"}}) {
    const std::string file = grammars + c.grammar + ".gbnf", what = std::string(c.grammar) + " after '" + c.prompt + "'";
    Result ours = run_vkspec(VKSPEC_BIN, "run -m " + model + " -p '" + c.prompt + "' -n " + std::to_string(n) +
                                             " --temp 0 --grammar-file " + file + " --json");
    ASSERT_EQ(ours.code, 0) << ours.err;
    const auto j = nlohmann::json::parse(ours.out);
    std::vector<int> mine = j["ids"].get<std::vector<int>>();
    if (j["stop_reason"] == "eos") mine.push_back(2);
    Result peer_run = run_command("VKSPEC_PEER=" + peer + " node " + script + " " + model + " " +
                                  comma_list(j["prompt_ids"].get<std::vector<int>>()) + " " + std::to_string(n) + " " + file);
    ASSERT_EQ(peer_run.code, 0) << peer_run.err;
    const auto theirs = nlohmann::json::parse(peer_run.out)["ids"].get<std::vector<int>>();
    size_t k = 0;
    while (k < mine.size() && k < theirs.size() && mine[k] == theirs[k]) ++k;
    printf("%s: leading ids equal to llama.cpp's: %zu of %zu / %zu\n", what.c_str(), k, mine.size(), theirs.size());
    EXPECT_TRUE(k >= 48 || (k == mine.size() && k == theirs.size())) << what;
  }
}

// The f16 file of a tiny shape (tests/make_shape_model.cpp), made once per build folder.
std::string tiny_shape(const std::string& name, const std::string& vocab, const std::string& shape) {
  const std::string f16 = std::string(VKSPEC_PRESETS_DIR) + "/" + name + "-f16.gguf";
  if (!exists(f16)) {
    Result r = run_command(std::string(VKSPEC_SHAPE_BIN) + " " + f16 + ".tmp " + vocab + " " + shape + " f16 && mv " + f16 + ".tmp " + f16);
    EXPECT_EQ(r.code, 0) << r.err;
  }
  return f16;
}

// llama.cpp's Q4_K_M of it, made once per build folder.
std::string tiny_q4_k_m(const std::string& name, const std::string& f16) {
  const std::string q4 = std::string(VKSPEC_PRESETS_DIR) + "/" + name + "-Q4_K_M.gguf";
  if (!exists(q4)) {
    Result r = run_command("python3 " + peer_dir() + "/quantize.py " + f16 + " " + q4 + ".tmp Q4_K_M >/dev/null && mv " +
                           q4 + ".tmp " + q4);
    EXPECT_EQ(r.code, 0) << r.err;
  }
  return q4;
}

// A family's real vocabulary and architecture at a tiny size (tests/make_shape_model.cpp), in f16 and in
// llama.cpp's Q4_K_M of it (q4_K/q6_K layers, a q6_K tied embedding): greedy ids equal llama.cpp's for 16
// tokens, or part at a near-tie (checked with the exact CPU reference). Llama 3
// (`tiny`), Qwen2.5 (`qwen2-tiny`: q/k/v biases, NeoX RoPE; the vocabulary from llama.cpp's sources,
// scripts/install-peer.sh), whose biases change the ids (llama.cpp applies them: ignoring them would part),
// and Qwen3 (`qwen3-tiny`: per-head q/k norms, heads wider than dim / heads; Qwen2.5's vocabulary).
// ctx: the context both are created with (0: each one's default; LongRoPE's factors depend on it).
// quantized_only: the Q4_K_M file alone.
void tiny_shape_greedy_equals_llama_cpp(const std::string& name, const std::string& vocab, const std::string& shape,
                                        uint32_t ctx = 0, bool quantized_only = false) {
  const std::string ctx_flag = ctx ? " --ctx " + std::to_string(ctx) : "";
  const std::string f16 = tiny_shape(name, vocab, shape), q4 = tiny_q4_k_m(name, f16);
  const int n = 24;
  for (const std::string& model : quantized_only ? std::vector<std::string>{q4} : std::vector<std::string>{f16, q4}) {
    Result tok = run_vkspec(VKSPEC_BIN, "tokenize -m " + model + " -p 'The quick brown fox jumps over' --json");
    ASSERT_EQ(tok.code, 0) << tok.err;
    const std::string ids = comma_list(nlohmann::json::parse(tok.out).get<std::vector<int>>());
    Result peer = run_command("node " + peer_dir() + "/peer.mjs --model " + model + " --gpu false --threads 1 --runs 1 " +
                              "--ignore-eos --n " + std::to_string(n) + " --prompt-ids " + ids + ctx_flag);
    ASSERT_EQ(peer.code, 0) << peer.err;
    const auto theirs = nlohmann::json::parse(peer.out)["ids"].get<std::vector<int>>();
    Result ours = run_vkspec(VKSPEC_BIN, "run -m " + model + " -p 'The quick brown fox jumps over' -n " + std::to_string(n) +
                                             " --temp 0 --ignore-eos --json" + ctx_flag);
    ASSERT_EQ(ours.code, 0) << ours.err;
    const auto mine = nlohmann::json::parse(ours.out)["ids"].get<std::vector<int>>();
    size_t k = 0;
    while (k < mine.size() && k < theirs.size() && mine[k] == theirs[k]) ++k;
    printf("%s: %zu/%d leading ids equal to llama.cpp's\n", model.c_str(), k, n);
    if (k >= 16 || k == mine.size()) continue;
    // Random weights make near-ties, and both quantize activations to 8 bits in quantized matmuls (errors of
    // ~0.1 in a logit here): where the two part early, the exact CPU reference (tests/cpu_reference.h) must
    // see a near-tie between the two choices. A wrong layout or a missed bias parts them by far more.
    GgufFile f(model);
    CpuLlama ref(f, ctx);
    std::vector<double> logits;
    for (const int id : nlohmann::json::parse(tok.out).get<std::vector<int>>()) logits = ref.step(uint32_t(id));
    for (size_t i = 0; i < k; ++i) logits = ref.step(uint32_t(mine[i]));
    const double gap = std::fabs(logits[size_t(mine[k])] - logits[size_t(theirs[k])]);
    printf("  parting at %zu: the exact logits of the two choices differ by %.3f\n", k, gap);
    EXPECT_LT(gap, 0.15) << model << ": vkspec and llama.cpp part at " << k << " where the choices are not near-tied";
  }
}

TEST(Presets, TinyLlama3ShapeGreedyEqualsLlamaCpp) {
  if (preset("Q8_0").empty()) GTEST_SKIP() << "llama.cpp peer not installed (scripts/install-peer.sh needs node and npm)";
  tiny_shape_greedy_equals_llama_cpp("tiny-llama3", shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf"), "tiny");
}

// The llama architecture with every optional bias llama.cpp reads (q/k/v, output, FFN gate, up and down).
TEST(Presets, TinyLlamaWithBiasesGreedyEqualsLlamaCpp) {
  if (usable_peer().empty()) GTEST_SKIP() << "llama.cpp peer not installed (scripts/install-peer.sh needs node and npm)";
  tiny_shape_greedy_equals_llama_cpp("tiny-biases", shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf"), "tiny-biases");
}

TEST(Presets, TinyQwen2ShapeGreedyEqualsLlamaCpp) {
  const std::string vocab = peer_dir() + "/vocab/ggml-vocab-qwen2.gguf";
  if (usable_peer().empty() || !exists(vocab)) GTEST_SKIP() << "llama.cpp peer not installed (scripts/install-peer.sh needs node and npm)";
  tiny_shape_greedy_equals_llama_cpp("tiny-qwen2", vocab, "qwen2-tiny");
}

TEST(Presets, TinyQwen3ShapeGreedyEqualsLlamaCpp) {
  const std::string vocab = peer_dir() + "/vocab/ggml-vocab-qwen2.gguf";
  if (usable_peer().empty() || !exists(vocab)) GTEST_SKIP() << "llama.cpp peer not installed (scripts/install-peer.sh needs node and npm)";
  tiny_shape_greedy_equals_llama_cpp("tiny-qwen3", vocab, "qwen3-tiny");
}

// Phi-4-mini's layout (`phi3`: q|k|v and gate|up stored fused, partial rotary, LongRoPE) with Phi-3's
// vocabulary, at contexts on both sides of its original one (4096): the short factors, then the long ones.
TEST(Presets, TinyPhi3ShapeGreedyEqualsLlamaCpp) {
  const std::string vocab = peer_dir() + "/vocab/ggml-vocab-phi-3.gguf";
  if (usable_peer().empty() || !exists(vocab)) GTEST_SKIP() << "llama.cpp peer not installed (scripts/install-peer.sh needs node and npm)";
  tiny_shape_greedy_equals_llama_cpp("tiny-phi3", vocab, "phi3-tiny", 2048);
  tiny_shape_greedy_equals_llama_cpp("tiny-phi3", vocab, "phi3-tiny", 8192);
}


// Gemma 2's and Gemma 3's passes (tests/make_shape_model.cpp gemma2-tiny, gemma3-tiny: post norms, GeGLU,
// scaled embeddings, soft-capping, q/k norms, a window of 8 positions on layer 0 that the 24 tokens pass,
// RoPE bases of their own) with Llama 2's SentencePiece vocabulary (no Gemma 2/3 vocabulary is at hand; the
// architecture does not depend on it).
TEST(Presets, TinyGemma2ShapeGreedyEqualsLlamaCpp) {
  if (usable_peer().empty()) GTEST_SKIP() << "llama.cpp peer not installed (scripts/install-peer.sh needs node and npm)";
  tiny_shape_greedy_equals_llama_cpp("tiny-gemma2", shared_path("tokenizer-tests/ggml-vocab-llama-spm.gguf"), "gemma2-tiny");
}

TEST(Presets, TinyGemma3ShapeGreedyEqualsLlamaCpp) {
  if (usable_peer().empty()) GTEST_SKIP() << "llama.cpp peer not installed (scripts/install-peer.sh needs node and npm)";
  tiny_shape_greedy_equals_llama_cpp("tiny-gemma3", shared_path("tokenizer-tests/ggml-vocab-llama-spm.gguf"), "gemma3-tiny");
}

// vkspec's 40 greedy ids for `model` after `prompt` with extra run flags (empty when the run failed, which
// is reported).
std::vector<int> greedy_ids(const std::string& model, const std::string& prompt, const std::string& flags) {
  Result r = run_vkspec(VKSPEC_BIN, "run -m " + model + " -p '" + prompt + "' -n 40 --temp 0 --ignore-eos --json " + flags);
  EXPECT_EQ(r.code, 0) << r.err;
  return r.code == 0 ? nlohmann::json::parse(r.out)["ids"].get<std::vector<int>>() : std::vector<int>{};
}

// The matmul paths beside the default (VKSPEC_MATMUL=int8dot and coopmat-emulated; tests/test_kernels_paths.cpp
// has their kernels) at the model level: llama.cpp's Q4_K_M of the Llama 3 shape (q4_K and q6_K layers, a
// q6_K tied output) gives llama.cpp's greedy ids (as above: equal, or parting at a near-tie of the exact
// logits), and on the pycode target's Q8_0 prompt lookup and self-drafting (verify passes of several
// tokens) and a prompt in chunks of 5 give plain decoding's ids.
TEST(Presets, MatmulPathsAgreeWithLlamaCppAndKeepSpeculationLossless) {
  if (preset("Q8_0").empty()) GTEST_SKIP() << "llama.cpp peer not installed (scripts/install-peer.sh needs node and npm)";
  struct MatmulEnv {
    explicit MatmulEnv(const char* path) { platform::set_env("VKSPEC_MATMUL", path); }
    ~MatmulEnv() { platform::unset_env("VKSPEC_MATMUL"); }
  };
  const std::string q8 = preset("Q8_0");
  for (const char* path : {"int8dot", "coopmat-emulated"}) {
    SCOPED_TRACE(path);
    const MatmulEnv env(path);
    tiny_shape_greedy_equals_llama_cpp("tiny-llama3", shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf"), "tiny", 0, true);
    auto ids = [&](const std::string& flags) { return greedy_ids(q8, "def parse_args(argv):", flags); };
    const std::vector<int> plain = ids("");
    ASSERT_EQ(plain.size(), 40u);
    EXPECT_EQ(ids("--draft ngram"), plain);
    EXPECT_EQ(ids("-md " + q8 + " --draft-max 4"), plain);
    EXPECT_EQ(ids("--ubatch 5"), plain);
  }
}

// The tiny shape of every family (the vocabulary it is made with, the name of its files).
struct TinyFamily { const char* name; std::string vocab; const char* shape; };
std::vector<TinyFamily> tiny_families() {
  const std::string spm = shared_path("tokenizer-tests/ggml-vocab-llama-spm.gguf"), qwen = peer_dir() + "/vocab/ggml-vocab-qwen2.gguf";
  return {{"tiny-llama3", shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf"), "tiny"}, {"tiny-qwen2", qwen, "qwen2-tiny"},
          {"tiny-qwen3", qwen, "qwen3-tiny"}, {"tiny-phi3", peer_dir() + "/vocab/ggml-vocab-phi-3.gguf", "phi3-tiny"},
          {"tiny-gemma2", spm, "gemma2-tiny"}, {"tiny-gemma3", spm, "gemma3-tiny"}};
}

// Speculation in every family: prompt lookup and the model drafting for itself (its drafts accepted) give
// plain greedy decoding's 40 tokens; Gemma 3's pass drafting for Gemma 2's (one vocabulary; its drafts
// rejected) too. Gemma's passes cross the window of 8 positions many times (verify passes, truncation at a
// rejected draft on windowed layers).
TEST(Presets, SpeculationInEveryFamilyGivesPlainDecodingsTokens) {
  if (usable_peer().empty() || !exists(peer_dir() + "/vocab/ggml-vocab-qwen2.gguf"))
    GTEST_SKIP() << "llama.cpp peer not installed (scripts/install-peer.sh needs node and npm)";
  for (const TinyFamily& family : tiny_families()) {
    SCOPED_TRACE(family.name);
    const std::string target = tiny_shape(family.name, family.vocab, family.shape);
    auto ids = [&](const std::string& flags) {
      return greedy_ids(target, "The quick brown fox jumps over the lazy dog. The quick brown", flags);
    };
    const std::vector<int> plain = ids("");
    ASSERT_EQ(plain.size(), 40u);
    EXPECT_EQ(ids("--draft ngram"), plain);
    EXPECT_EQ(ids("-md " + target + " --draft-max 4"), plain);
    if (std::string(family.name) == "tiny-gemma2") {
      EXPECT_EQ(ids("-md " + tiny_shape("tiny-gemma3", family.vocab, "gemma3-tiny") + " --draft-max 4"), plain);
    }
  }
}

// The exact perplexity (the CPU reference in double over the file's weights) by llama-perplexity's method
// (apps/cli/cmd_perplexity.cpp): chunks of ctx tokens from BOS, the second half of each scored.
double exact_perplexity(const std::string& model, const std::string& text_file, uint32_t ctx, uint32_t chunks) {
  GgufFile f(model);
  const auto tok = Tokenizer::from_gguf(f);
  std::ifstream in(text_file, std::ios::binary);
  const std::vector<uint32_t> ids = tok->encode(std::string(std::istreambuf_iterator<char>(in), {}), tok->add_bos(), false);
  double nll = 0;
  uint32_t scored = 0;
  for (uint32_t c = 0; c < chunks && (c + 1) * ctx <= ids.size(); ++c) {
    CpuLlama ref(f, ctx);
    for (uint32_t j = 0; j + 1 < ctx; ++j) {
      const std::vector<double> logits = ref.step(j == 0 ? uint32_t(tok->bos()) : ids[c * ctx + j]);
      if (j < ctx / 2) continue;
      double max = logits[0], sum = 0;
      for (const double v : logits) max = std::max(max, v);
      for (const double v : logits) sum += std::exp(v - max);
      nll -= logits[ids[c * ctx + j + 1]] - max - std::log(sum);
      ++scored;
    }
  }
  return std::exp(nll / scored);
}

// Every family's tiny shape on the held-out text (4 chunks of 128 tokens) against llama.cpp by the same method
// (tests/peer_perplexity.mjs: llama.cpp's own tokens and raw logits): f16 within 0.1% of llama.cpp's. Q4_K_M
// within 0.3% of the exact figure for its weights and 0.5% of llama.cpp's: both quantize activations to 8 bits
// (llama.cpp per 256 values, vkspec per 32), which moves these random models' perplexity by up to ~0.2% either
// way from the exact one (measured: docs/PERFORMANCE.md); two chunks instead of four doubled that.
TEST(Presets, FamiliesPerplexityAgreesWithLlamaCpp) {
  if (usable_peer().empty() || !exists(peer_dir() + "/vocab/ggml-vocab-qwen2.gguf"))
    GTEST_SKIP() << "llama.cpp peer not installed (scripts/install-peer.sh needs node and npm)";
  const std::string text = shared_path("models/reference/heldout-code.txt");
  for (const TinyFamily& family : tiny_families()) {
    const std::string f16 = tiny_shape(family.name, family.vocab, family.shape);
    for (const std::string& model : {f16, tiny_q4_k_m(family.name, f16)}) {
      Result theirs = run_command("VKSPEC_PEER=" + peer_dir() + " node " + std::string(VKSPEC_SOURCE_DIR) + "/tests/peer_perplexity.mjs " +
                                  model + " " + text + " 128 4");
      ASSERT_EQ(theirs.code, 0) << theirs.err;
      Result ours = run_vkspec(VKSPEC_BIN, "perplexity -m " + model + " -f " + text + " --ctx 128 --chunks 4 --json");
      ASSERT_EQ(ours.code, 0) << ours.err;
      const auto t = nlohmann::json::parse(theirs.out), o = nlohmann::json::parse(ours.out);
      const double a = o["ppl"].get<double>(), b = t["ppl"].get<double>();
      EXPECT_EQ(o["tokens_scored"], t["tokens_scored"]) << model;
      if (model == f16) {
        printf("%-55s vkspec %.3f llama.cpp %.3f (%+.4f%%)\n", model.c_str(), a, b, 100 * (a / b - 1));
        EXPECT_NEAR(a, b, 0.001 * b) << model;
        continue;
      }
      const double exact = exact_perplexity(model, text, 128, 4);
      printf("%-55s vkspec %.3f llama.cpp %.3f (%+.4f%%), exact %.3f: vkspec %+.4f%%, llama.cpp %+.4f%%\n", model.c_str(), a, b,
             100 * (a / b - 1), exact, 100 * (a / exact - 1), 100 * (b / exact - 1));
      EXPECT_NEAR(a, exact, 0.003 * exact) << model;
      EXPECT_NEAR(a, b, 0.005 * b) << model;
    }
  }
}

TEST(Presets, PerplexityMatchesLlamaCppWithinHalfAPercent) {
  std::ifstream in(shared_path("models/reference/perplexity.json"));
  const auto ref = nlohmann::json::parse(in);
  const int ctx = ref["ctx"].get<int>();
  const std::string text = shared_path("models/reference/heldout-code.txt");
  bool missing_peer = false;
  for (auto& [name, figure] : ref["ppl"].items()) {
#ifdef VKSPEC_PRESETS_SUBSET
    if (name.find("Q4_K_M") == std::string::npos) continue;
#endif
    std::string model;
    if (name == "pycode-target-f16.gguf") {
      model = shared_path("models/pycode-target-f16.gguf");
    } else {   // "pycode-target-Q8_0 (quantize.py Q8_0 of the f16 file)"
      const std::string prefix = "pycode-target-", file = name.substr(0, name.find(' '));
      ASSERT_EQ(file.rfind(prefix, 0), 0u) << name;
      const std::string type(file.begin() + long(prefix.size()), file.end());
      model = preset(type);
      if (model.empty()) {   // the f16 figure is still checked
        missing_peer = true;
        continue;
      }
    }
    Result r = run_vkspec(VKSPEC_BIN, "perplexity -m " + model + " -f " + text + " --ctx " + std::to_string(ctx) + " --json");
    ASSERT_EQ(r.code, 0) << r.err;
    const double ppl = nlohmann::json::parse(r.out)["ppl"].get<double>(), theirs = figure.get<double>();
    printf("%-60s vkspec %.4f llama.cpp %.4f (%+.3f%%)\n", name.c_str(), ppl, theirs, 100 * (ppl / theirs - 1));
    EXPECT_NEAR(ppl, theirs, 0.005 * theirs) << name;
  }
  if (missing_peer) GTEST_SKIP() << "quantized presets not checked: llama.cpp peer not installed (scripts/install-peer.sh)";
}

// Embeddings (`vkspec embed`, vkspec_embed) against llama.cpp's (tests/peer_embed.mjs): the last token's final
// hidden state after the output norm; the mean over the tokens against the mean of llama.cpp's last-token
// embeddings of every prefix (the model is causal: token i's state depends on tokens 0..i alone); normalized,
// unit length in the same direction. On the f16 target and its Q8_0 preset (llama.cpp's CPU backend rounds
// activations to 8 bits there, so its vectors differ a little more).
TEST(Presets, EmbeddingsAgreeWithLlamaCpp) {
  const std::string peer = usable_peer();
  REQUIRE_PEER(peer);
  const auto cosine = [](const std::vector<double>& a, const std::vector<double>& b) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < a.size(); ++i) ab += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
    return ab / std::sqrt(aa * bb);
  };
  const std::string text = "def add(a, b): return a + b";
  for (const auto& [model, min_cos] : {std::pair{shared_path("models/pycode-target-f16.gguf"), 0.99999}, std::pair{preset("Q8_0"), 0.9999}}) {
    SCOPED_TRACE(model);
    ASSERT_FALSE(model.empty());
    Result r = run_vkspec(VKSPEC_BIN, "tokenize -m " + model + " -p '" + text + "' --json");
    ASSERT_EQ(r.code, 0) << r.err;
    const auto ids = nlohmann::json::parse(r.out).get<std::vector<int>>();
    std::string prefixes;
    for (size_t n = 1; n <= ids.size(); ++n)
      prefixes += (n > 1 ? ";" : "") + comma_list(std::vector<int>(ids.begin(), ids.begin() + long(n)));
    Result p = run_command("VKSPEC_PEER=" + peer + " node " + std::string(VKSPEC_SOURCE_DIR) + "/tests/peer_embed.mjs " + model +
                           " '" + prefixes + "'");
    ASSERT_EQ(p.code, 0) << p.err;
    const auto theirs = nlohmann::json::parse(p.out)["embeddings"].get<std::vector<std::vector<double>>>();
    ASSERT_EQ(theirs.size(), ids.size());
    std::vector<double> mean(theirs[0].size(), 0.0);
    for (const auto& v : theirs)
      for (size_t i = 0; i < v.size(); ++i) mean[i] += v[i] / double(theirs.size());
    std::map<std::string, std::vector<double>> ours;
    for (const char* flags : {"", "--pooling mean", "--normalize"}) {
      Result e = run_vkspec(VKSPEC_BIN, "embed -m " + model + " -p '" + text + "' --json " + flags);
      ASSERT_EQ(e.code, 0) << e.err;
      const auto j = nlohmann::json::parse(e.out);
      EXPECT_EQ(j["n_tokens"].get<size_t>(), ids.size());
      ours[flags] = j["embedding"].get<std::vector<double>>();
      ASSERT_EQ(ours[flags].size(), mean.size());
    }
    const double last = cosine(ours[""], theirs.back()), pooled = cosine(ours["--pooling mean"], mean);
    printf("cosine with llama.cpp: last %.7f, mean %.7f\n", last, pooled);
    EXPECT_GE(last, min_cos);
    EXPECT_GE(pooled, min_cos);
    EXPECT_LT(cosine(ours[""], ours["--pooling mean"]), 0.999) << "mean pooling should differ from the last token";
    double norm = 0;
    for (const double v : ours["--normalize"]) norm += v * v;
    EXPECT_NEAR(norm, 1.0, 1e-5);
    EXPECT_GT(cosine(ours["--normalize"], ours[""]), 0.999999);
  }
}

}  // namespace
}  // namespace vkspec::test
