// The vkspec binary end to end: output formats, reproducibility, sampling flags, benchmarks, perplexity, the
// prompt cache. Bad input (one-line error + non-zero exit): test_cli_refusals.cpp (the same executable).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/cli_helpers.h"
#include "tests/run_command.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {

// Every device lists the facts kernels are chosen from; lavapipe's known limits are checked where it is
// the device (CI), a GPU's only for being present (the suite also runs on GPU machines).
TEST(Cli, DevicesListsFacts) {
  auto r = run_cli("devices --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto all = nlohmann::json::parse(r.out);
  // the VKSPEC_* variables as the library read them (tests run with the validation layer on)
  EXPECT_EQ(all["environment"]["VKSPEC_VALIDATION"], getenv("VKSPEC_VALIDATION") && std::string(getenv("VKSPEC_VALIDATION")) == "1");
  EXPECT_EQ(all["environment"]["VKSPEC_MEMORY"], getenv("VKSPEC_MEMORY") && *getenv("VKSPEC_MEMORY") ? "discrete" : "auto");
  const auto& j = all["devices"];
  ASSERT_FALSE(j.empty());
  for (auto& d : j) {
    for (const char* key : {"shader_float16", "storage_16bit", "storage_8bit", "subgroup_size_control", "subgroup_size",
                            "max_storage_buffer_range", "max_compute_shared_memory", "max_memory_allocation_size",
                            "timestamps", "kernel_family", "submit", "matmul_path", "integer_dot_product", "cooperative_matrix",
                            "cooperative_matrix_khr", "cooperative_matrix_nv", "vulkan_memory_model"})
      EXPECT_TRUE(d.contains(key)) << key;
    if (d["type"] == "CPU" && d["name"].get<std::string>().find("llvmpipe") != std::string::npos) {
      EXPECT_EQ(d["subgroup_size"], 8);
      EXPECT_EQ(d["max_storage_buffer_range"], 134217728);
      EXPECT_EQ(d["kernel_family"], getenv("VKSPEC_KERNELS") && std::string(getenv("VKSPEC_KERNELS")) == "subgroup" ? "subgroup" : "row-per-lane");
      EXPECT_EQ(d["integer_dot_product"], true);   // Mesa 22.3's lavapipe: present, not accelerated
      EXPECT_EQ(d["integer_dot_accelerated"], false);
      EXPECT_EQ(d["cooperative_matrix"], false);
      EXPECT_EQ(d["cooperative_matrix_khr"], false);
      EXPECT_EQ(d["vulkan_memory_model"], true);   // (Mesa 22.3's lavapipe has it: the coopmat builds' one fact it meets)
      const char* matmul = getenv("VKSPEC_MATMUL");
      EXPECT_EQ(d["matmul_path"], matmul && *matmul ? matmul : "fma");
      // a path the device cannot run is refused, with why, not replaced (lavapipe has no matrix units)
      const Result refused = run_command("VKSPEC_MATMUL=coopmat " + std::string(VKSPEC_BIN) + " run " + kStories + " -p hi");
      EXPECT_EQ(refused.code, 1) << refused.err;
      EXPECT_NE(refused.err.find("VKSPEC_MATMUL=coopmat: the matrix-unit kernels need VK_KHR_cooperative_matrix"), std::string::npos) << refused.err;
      const char* submit = getenv("VKSPEC_SUBMIT");   // CPU devices take a step's recording whole
      EXPECT_EQ(d["submit"], submit && *submit ? submit : "whole");
    }
  }
}

TEST(Cli, RunJsonReproducesReferenceAndSeededSamplingRepeats) {
  auto r = run_cli("run " + kStories + " -p 'Once upon a time' -n 24 --temp 0 --ignore-eos --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  std::ifstream in(shared_path("models/reference/stories260K-greedy.jsonl"));
  std::string line;
  std::getline(in, line);
  auto ref = nlohmann::json::parse(line);
  EXPECT_EQ(j["prompt_ids"], ref["prompt_ids"]);
  auto want = ref["ids"].get<std::vector<uint32_t>>();
  want.resize(24);
  EXPECT_EQ(j["ids"].get<std::vector<uint32_t>>(), want);
  EXPECT_EQ(j["n_generated"], 24);
  for (const char* k : {"load_s", "prefill_s", "prefill_tok_s", "decode_s", "decode_tok_s"}) EXPECT_TRUE(j["timings"].contains(k));
  // the prompt in chunks of 2 tokens (-ub, llama.cpp's spelling): the same tokens
  auto chunked = run_cli("run " + kStories + " -p 'Once upon a time' -n 24 --temp 0 --ignore-eos --json -ub 2");
  ASSERT_EQ(chunked.code, 0) << chunked.err;
  EXPECT_EQ(nlohmann::json::parse(chunked.out)["ids"].get<std::vector<uint32_t>>(), want);

  const std::string sampled = "run " + kStories + " -p 'Lily' -n 32 --temp 1.0 --top-k 0 --top-p 1 --min-p 0 --ignore-eos --json --seed ";
  auto a = nlohmann::json::parse(run_cli(sampled + "11").out), b = nlohmann::json::parse(run_cli(sampled + "11").out),
       c = nlohmann::json::parse(run_cli(sampled + "12").out);
  EXPECT_EQ(a["ids"], b["ids"]);
  EXPECT_NE(a["ids"], c["ids"]);

  // --samples 3 from seed 11: one JSON line per completion, the k-th equal to a single run with seed 11+k,
  // with and without speculation (sampling verification through the fused kernel).
  for (std::string extra : {"", " --draft ngram"}) {
    auto many = run_cli(sampled + "11 --samples 3" + extra);
    ASSERT_EQ(many.code, 0) << many.err;
    std::istringstream lines(many.out);
    std::string line;
    std::vector<nlohmann::json> js;
    while (std::getline(lines, line)) js.push_back(nlohmann::json::parse(line));
    ASSERT_EQ(js.size(), 3u);
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(js[k]["seed"], 11 + k);
      EXPECT_EQ(js[k]["ids"], nlohmann::json::parse(run_cli(sampled + std::to_string(11 + k) + extra).out)["ids"]);
    }
    if (extra.empty()) EXPECT_EQ(js[0]["ids"], a["ids"]);
    else EXPECT_TRUE(js[0].contains("speculative"));
  }
  // -md with --draft ngram: lookup first, the draft model otherwise; greedy tokens are plain greedy's
  auto both = run_cli("run " + kStories + " -md " + shared_path("models/stories260K.gguf") +
                      " --draft ngram -p 'Once upon a time' -n 24 --temp 0 --ignore-eos --json");
  ASSERT_EQ(both.code, 0) << both.err;
  auto jb = nlohmann::json::parse(both.out);
  EXPECT_EQ(jb["ids"], j["ids"]);
  EXPECT_EQ(jb["speculative"]["drafter"], "ngram+model");
  // The same with top-k 40, which samples on the device (DeviceSampler), plain and with a draft model.
  const std::string device = "run " + kStories + " -p 'Lily' -n 16 --temp 0.9 --top-k 40 --ignore-eos --json --seed ";
  for (std::string extra : {std::string(""), " -md " + shared_path("models/stories260K.gguf")}) {
    auto many = run_cli(device + "21 --samples 2" + extra);
    ASSERT_EQ(many.code, 0) << many.err;
    std::istringstream lines(many.out);
    std::string line;
    for (int k = 0; std::getline(lines, line); ++k) {
      auto single = nlohmann::json::parse(run_cli(device + std::to_string(21 + k) + extra).out);
      EXPECT_EQ(nlohmann::json::parse(line)["ids"], single["ids"]) << extra << " sample " << k;
      EXPECT_EQ(single["ids"].size(), 16u);
      // a draft that is the target itself gives q == p bit for bit (batch-invariant kernels): all accepted
      if (!extra.empty()) {
        EXPECT_EQ(single["speculative"]["acceptance_rate"], 1.0);
      }
    }
  }
}

// One sampling implementation: a seed gives the same tokens whatever top-k, when the top-p cut lies inside
// every top-k tried (top-k 40 and 256 take the shared-memory path of sample_rows.comp, 0, 300 and 512 the
// general one), plain and with a draft model.
TEST(Cli, SeedGivesTheSameTokensWhateverTheTopK) {
  for (std::string extra : {std::string(""), " -md " + shared_path("models/stories260K.gguf")}) {
    nlohmann::json first;
    for (int k : {0, 40, 256, 300, 512}) {
      auto r = run_cli("run " + kStories + " -p 'Once upon a time' -n 40 --temp 0.9 --top-p 0.8 --min-p 0 --seed 7 "
                       "--ignore-eos --json --top-k " + std::to_string(k) + extra);
      ASSERT_EQ(r.code, 0) << r.err;
      const auto ids = nlohmann::json::parse(r.out)["ids"];
      ASSERT_EQ(ids.size(), 40u);
      if (first.is_null()) first = ids;
      EXPECT_EQ(ids, first) << "top-k " << k << extra;
    }
  }
}

// bench: medians of the runs it reports, greedy speculation identical to plain, and a draft model that is the
// target itself accepts every draft (K + 1 tokens per verify pass, the bonus token included).
TEST(Cli, BenchReportsMediansAcceptanceAndSpeedup) {
  auto r = run_cli("bench " + kStories + " -md " + shared_path("models/stories260K.gguf") +
                   " -p 40 -n 33 -r 3 --draft-max 4 --draft-policy fixed --json -ub 7");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_tokens"], 40);
  EXPECT_EQ(j["ubatch"], 7);
  EXPECT_EQ(j["reps"], 3);
  auto median_of = [](const nlohmann::json& runs) {
    auto v = runs.get<std::vector<double>>();
    EXPECT_EQ(v.size(), 3u);
    std::sort(v.begin(), v.end());
    return v[1];
  };
  const double plain = j["plain"]["decode_tok_s"], spec = j["speculative"]["decode_tok_s"];
  EXPECT_EQ(plain, median_of(j["plain"]["decode_runs"]));
  EXPECT_EQ(spec, median_of(j["speculative"]["decode_runs"]));
  EXPECT_GT(plain, 0);
  EXPECT_DOUBLE_EQ(j["speedup"].get<double>(), spec / plain);
  EXPECT_EQ(j["greedy_identical"], true);
  EXPECT_EQ(j["speculative"]["acceptance_rate"], 1.0);
  EXPECT_EQ(j["speculative"]["acceptance_by_depth"], nlohmann::json({1.0, 1.0, 1.0, 1.0}));   // K = 4, all kept
  EXPECT_EQ(j["speculative"]["draft_policy"], "fixed");
  // 33 tokens: the first from the prefill, then 32 from verify passes of 5 (4 drafts + bonus), 3 rounds x 3 reps
  EXPECT_DOUBLE_EQ(j["speculative"]["tokens_per_verify"].get<double>(), 33.0 / 7.0);
  // one host wait per plain token and one per round (7 rounds for the 32 tokens after the first)
  EXPECT_DOUBLE_EQ(j["plain"]["waits_per_token"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["speculative"]["waits_per_token"].get<double>(), 7.0 / 32.0);
  // command buffers: one per wait where a recording goes whole (CPU devices), a step's parts on GPUs
  for (const char* mode : {"plain", "speculative"})
    EXPECT_GE(j[mode]["queue_submissions_per_token"].get<double>(), j[mode]["waits_per_token"].get<double>()) << mode;
  EXPECT_GT(j["plain"]["dispatches_per_token"].get<double>(), 10.0);
  EXPECT_GT(j["predicted_speedup"].get<double>(), 0.0);   // lavapipe has timestamps

  // sampled with rejection sampling, the target drafting for itself (q = p) keeps every draft too
  auto rs = run_cli("bench " + kStories + " -md " + shared_path("models/stories260K.gguf") +
                    " -p 16 -n 25 -r 1 --draft-max 4 --draft-policy fixed --temp 0.8 --spec-sampling rejection --json");
  ASSERT_EQ(rs.code, 0) << rs.err;
  const auto js = nlohmann::json::parse(rs.out);
  EXPECT_EQ(js["speculative"]["spec_sampling"], "rejection");
  EXPECT_EQ(js["speculative"]["acceptance_rate"], 1.0);
  EXPECT_EQ(js["speculative"]["draft_tree"], "auto");
  EXPECT_EQ(js["speculative"]["tree_rounds"], 0) << "a draft model's rounds are chains";

  auto t = run_cli("bench " + kStories + " --draft ngram -p 16 -n 8 -r 1");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("plain"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("speculative"), std::string::npos) << t.out;
  for (auto args : {"bench " + kStories + " -p -1", "bench " + kStories + " -p 5000 -n 8", "bench " + kStories + " -r 0",
                    "bench " + kStories + " --draft-policy sometimes", "bench " + kStories + " --spec-sampling typical",
                    "bench " + kStories + " --draft-tree broad",
                    std::string("bench -m /nonexistent.gguf")}) {
    auto b = run_cli(args);
    EXPECT_NE(b.code, 0) << args;
    EXPECT_NE(b.code, 128) << "crashed: " << args;
    EXPECT_FALSE(b.err.empty()) << args;
  }
#ifndef VKSPEC_SANITIZED   // (ASan's shadow memory needs more address space than the limit below)
  // -p beyond the context is refused before a prompt of that length is built (4 GB of ids for 10^9): under a
  // 3 GiB address-space limit the old order died of bad_alloc
  auto huge = run_command("ulimit -v 3145728 && " + std::string(VKSPEC_BIN) + " bench " + kStories + " -p 1000000000 -n 8");
  EXPECT_EQ(huge.code, 1) << huge.err;
  EXPECT_NE(huge.err.find("exceed the context"), std::string::npos) << huge.err;
#endif
}

TEST(Cli, StreamsTextAndTokenizes) {
  auto r = run_cli("run " + kStories + " -p 'Once upon a time' -n 8 --temp 0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind(", there was a little girl", 0), 0u) << r.out;
  ASSERT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.back(), '\n') << "streamed text ends with a newline on stdout";
  auto t = run_cli("tokenize -m " + shared_path("tokenizer-tests/ggml-vocab-llama-bpe.gguf") + " -p 'Hello world' --json");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_EQ(nlohmann::json::parse(t.out), nlohmann::json::parse("[128000, 9906, 1917]"));
}

// --logit-bias takes llama.cpp's TOKEN+BIAS / TOKEN-BIAS: +100 on a token makes greedy choose it every step,
// and what is not that syntax (or out of range) is refused with a non-zero exit.
// Structured output (-j, -jf): every completed output is valid under its schema for python3-jsonschema (an
// independent validator), greedy and sampled, over schemas with required and optional properties, bounded
// strings and arrays, bounded integers, enums, anyOf, nullable types, a recursive $ref, and a Pydantic model
// (a oneOf discriminated union, date and uuid formats, a pattern, a tuple); unsupported keywords are refused.
TEST(Cli, JsonSchemaOutputsAreValidForJsonschema) {
  const std::string m = "-m " + shared_path("models/pycode-target-f16.gguf");
  const char* schemas[] = {
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "version": {"type": "integer", "minimum": 1, "maximum": 40},
          "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3}, "stable": {"type": "boolean"}},
          "required": ["name", "version"]})",
      R"({"type": "array", "items": {"enum": ["red", "green", 3, null]}, "minItems": 2, "maxItems": 4})",
      R"({"type": "object", "properties": {"kind": {"const": "leaf"}, "value": {"anyOf": [{"type": "number"}, {"type": ["string", "null"], "maxLength": 6}]}},
          "required": ["kind", "value"], "additionalProperties": false})",
      R"({"$defs": {"node": {"type": "object", "properties": {"id": {"type": "integer", "minimum": -3, "exclusiveMaximum": 100}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
          "required": ["id"]}}, "$ref": "#/$defs/node"})",
      // as Pydantic writes a model with a discriminated union, a date, a uuid, a constrained string and a tuple
      R"j({"$defs": {"Cat": {"properties": {"kind": {"const": "cat", "title": "Kind"}, "lives": {"maximum": 9, "minimum": 0, "type": "integer"}},
                             "required": ["kind", "lives"], "title": "Cat", "type": "object"},
                     "Dog": {"properties": {"kind": {"const": "dog"}, "tag": {"format": "uuid", "type": "string"}}, "required": ["kind", "tag"], "type": "object"}},
          "properties": {"pet": {"discriminator": {"mapping": {"cat": "#/$defs/Cat", "dog": "#/$defs/Dog"}, "propertyName": "kind"},
                                 "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}], "title": "Pet"},
                         "born": {"format": "date", "type": "string"}, "code": {"pattern": "^[A-Z]{2}-\\d{3}$", "type": "string"},
                         "size": {"maxItems": 2, "minItems": 2, "prefixItems": [{"type": "integer"}, {"type": "number"}], "type": "array"}},
          "required": ["pet", "born", "code", "size"], "title": "Record", "type": "object"})j",
  };
  json cases = json::array();
  for (const char* schema : schemas) {
    write(tmp("schema.json"), schema);
    for (const char* prompt : {"CONFIG = ", "x = ["})
      for (const char* sampling : {"--temp 0", "--temp 0.8 --seed 4"}) {
        auto r = run_cli("run " + m + " -p '" + prompt + "' -jf " + tmp("schema.json") + " -n 160 --json " + sampling);
        ASSERT_EQ(r.code, 0) << r.err;
        const json j = json::parse(r.out);
        if (j["stop_reason"] == "eos") cases.push_back({{"schema", json::parse(schema)}, {"text", j["text"]}});
      }
  }
  EXPECT_GE(cases.size(), 10u) << "too few outputs completed";
  printf("%zu of %zu outputs completed; validating them\n", cases.size(), 4 * std::size(schemas));
  write(tmp("schema-cases.json"), cases.dump());
  Result ref;
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    ref = run_command(std::string(py) + " " + VKSPEC_SOURCE_DIR + "/tests/json_schema_reference.py < " + tmp("schema-cases.json"));
    if (ref.code == 0) break;
  }
  if (ref.code != 0) GTEST_SKIP() << "python3-jsonschema is not installed: " << ref.err;
  const json verdicts = json::parse(ref.out);
  ASSERT_EQ(verdicts.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_TRUE(verdicts[i]["valid"].get<bool>()) << cases[i]["text"] << "\n" << verdicts[i]["error"];
  for (const char* bad : {R"j({"type": "string", "pattern": "(?!a)"})j", R"({"type": "number", "minimum": 3})",
                          R"({"oneOf": [{"type": "string"}, {"type": "string"}]})", R"({"$ref": "https://example.com/s.json"})", "{\"type\": "}) {
    auto r = run_cli("run " + m + " -p x -n 2 -j '" + std::string(bad) + "'");
    EXPECT_EQ(r.code, 1) << bad;
    EXPECT_NE(r.err.find("JSON schema"), std::string::npos) << r.err;
  }
}

TEST(Cli, LogitBiasTakesLlamaCppsSyntax) {
  auto r = run_cli("run " + kStories + " -p 'Once upon a time' -n 5 --temp 0 --ignore-eos --json -l 7+100 --logit-bias 9-1.5");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["ids"], nlohmann::json({7, 7, 7, 7, 7}));
  for (const char* bad : {"7x1", "7+", "+7+1", "7++1", "7+1e3", "7-inf", "999999+1"}) {
    auto b = run_cli("run " + kStories + " -p hi -n 2 -l " + bad);
    EXPECT_NE(b.code, 0) << bad;
    EXPECT_NE(b.code, 128) << "crashed: " << bad;
    EXPECT_NE(b.err.find("logit"), std::string::npos) << bad << "\n" << b.err;
  }
}

// perplexity: bad inputs get one-line errors naming what is wrong; a chunk count caps the work.
TEST(Cli, PerplexityRefusesBadInputAndHonoursChunks) {
  const std::string m = "-m " + shared_path("models/pycode-target-f16.gguf");
  const std::string text = shared_path("models/reference/heldout-code.txt");
  auto r = run_cli("perplexity " + m + " -f " + text + " --ctx 4096");   // 5763 tokens < 2 x 4096
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("needs at least 8192"), std::string::npos) << r.err;
  r = run_cli("perplexity " + m + " -f /nonexistent.txt");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("/nonexistent.txt"), std::string::npos) << r.err;
  r = run_cli("perplexity " + m + " -f " + text + " --ctx 4");
  EXPECT_NE(r.code, 0);
  r = run_cli("perplexity " + m + " -f " + text + " --ctx 64 --chunks 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["chunks"], 2);
  EXPECT_EQ(j["tokens_scored"], 2 * 31);
  EXPECT_GT(j["ppl"].get<double>(), 1.0);
  EXPECT_NE(r.err.find("[2]"), std::string::npos) << "progress with the running estimate, as llama.cpp prints it";
}

// VKSPEC_PROFILE=1 reports device time per kernel; =each per dispatch position (in recording order, with
// its grid) and, for a speculative round, the time of its drafts and of its verify pass.
TEST(Cli, ProfileReportsPerKernelAndPerDispatch) {
  const std::string run = std::string(VKSPEC_BIN) + " run " + kStories + " -md " + shared_path("models/stories260K.gguf") +
                          " -p 'Once upon a time' -n 12 --temp 0";
  auto kernels = run_command("VKSPEC_PROFILE=1 " + run);
  ASSERT_EQ(kernels.code, 0) << kernels.err;
  EXPECT_NE(kernels.err.find("kernel profile (VKSPEC_PROFILE=1)"), std::string::npos) << kernels.err;
  EXPECT_NE(kernels.err.find("  embed "), std::string::npos) << kernels.err;
  EXPECT_EQ(kernels.err.find("speculative round:"), std::string::npos) << kernels.err;
  auto each = run_command("VKSPEC_PROFILE=each " + run);
  ASSERT_EQ(each.code, 0) << each.err;
  EXPECT_EQ(each.out, kernels.out) << "profiling changed the tokens";
  EXPECT_NE(each.err.find("kernel profile per dispatch (VKSPEC_PROFILE=each)"), std::string::npos) << each.err;
  EXPECT_NE(each.err.find("  001 embed 1x1 "), std::string::npos) << each.err;   // a decode step's first dispatch
  EXPECT_NE(each.err.find("speculative round: "), std::string::npos) << each.err;
  EXPECT_NE(each.err.find(" ms, verify pass of "), std::string::npos) << each.err;
}

TEST(Cli, DoubleBosIsWarnedAbout) {
  auto r = run_cli("run -m " + shared_path("models/pycode-target-f16.gguf") + " -p '<s>def f():' -n 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto ids = nlohmann::json::parse(r.out)["prompt_ids"];
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 1);
  EXPECT_NE(r.err.find("starts with two"), std::string::npos) << r.err;
  // tokenize says so too (as run does), unless it adds no BOS
  r = run_cli("tokenize -m " + shared_path("models/pycode-target-f16.gguf") + " -p '<s>def f():' --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)[1], 1);
  EXPECT_NE(r.err.find("starts with two"), std::string::npos) << r.err;
  r = run_cli("tokenize -m " + shared_path("models/pycode-target-f16.gguf") + " -p '<s>def f():' --no-bos --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("starts with two"), std::string::npos) << r.err;
}

TEST(Cli, StopReasonAndContextNotice) {
  auto r = run_cli("run " + kStories + " -p 'Once upon a time' -n 100 --ctx 20 --ignore-eos --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["stop_reason"], "context");
  EXPECT_LT(j["n_generated"].get<int>(), 20);
  EXPECT_NE(r.err.find("context of 20 tokens is full"), std::string::npos) << r.err;
  j = nlohmann::json::parse(run_cli("run " + kStories + " -p 'Once upon a time' -n 5 --ignore-eos --json").out);
  EXPECT_EQ(j["stop_reason"], "length");
  EXPECT_EQ(j["n_generated"], 5);
}

// --prompt-cache FILE (llama-cli's): the first run writes the session; a second run whose prompt continues the
// first's text prefills only what it adds (the file's tokens reused) and prints the tokens of a run without
// the file; a file that is not a session of this model is an error that names it; --samples refuses it.
TEST(Cli, PromptCacheFileIsReusedByTheNextRun) {
  const std::string file = tmp("prompt-cache.kv"), prompt = "Once upon a time";
  unlink(file.c_str());
  auto r = run_cli("run " + kStories + " -p '" + prompt + "' -n 12 --temp 0 --ignore-eos --json --prompt-cache " + file);
  ASSERT_EQ(r.code, 0) << r.err;
  const json first = json::parse(r.out);
  EXPECT_EQ(first["reused_tokens"], 0);
  write(tmp("prompt-cache-next.txt"), prompt + first["text"].get<std::string>() + " and then");
  const std::string next = "run " + kStories + " -f " + tmp("prompt-cache-next.txt") + " -n 8 --temp 0 --ignore-eos --json";
  r = run_cli(next + " --prompt-cache " + file);
  ASSERT_EQ(r.code, 0) << r.err;
  const json cached = json::parse(r.out);
  EXPECT_GE(cached["reused_tokens"].get<int>(), first["prompt_tokens"].get<int>() + 8) << r.out;
  r = run_cli(next);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(cached["ids"], json::parse(r.out)["ids"]);
  write(file, "not a session");
  r = run_cli("run " + kStories + " -p hi -n 2 --prompt-cache " + file);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("is not a vkspec session file"), std::string::npos) << r.err;
  r = run_cli("run " + kStories + " -p hi -n 2 --samples 2 --prompt-cache " + file);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--prompt-cache"), std::string::npos) << r.err;
  unlink(file.c_str());
}
}  // namespace
}  // namespace vkspec::test
