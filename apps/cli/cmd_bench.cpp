// `vkspec bench`: prefill and decode tokens/s (median of --reps) for plain decoding and, with a drafter,
// speculative decoding of the same prompt in the same process, plus acceptance and the speedup; with
// --peer, llama.cpp (../shared/tools/peer) on the same file and prompt ids, measured in the same run.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "common/cli_common.h"
#include "platform/platform.h"

namespace vkspec::cli {
namespace {

// Default prompt: Python, which the shared draft/target pair was trained on.
constexpr const char* kDefaultPrompt = R"(import os
import sys
import argparse


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Copy files between two directories.")
    parser.add_argument("source", help="directory to copy from")
    parser.add_argument("target", help="directory to copy into")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each file")
    return parser.parse_args(argv)


def copy_tree(source, target, verbose=False):
    for root, dirs, files in os.walk(source):
        rel = os.path.relpath(root, source)
        for name in files:
)";

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Exactly `n` prompt tokens: the text's tokens, repeated (after BOS) when the text is shorter; n = 0: the
// text's tokens as they are.
std::vector<int32_t> prompt_of_length(const api::Model& model, const std::string& text, uint32_t n) {
  const std::vector<int32_t> ids = encode_prompt(model, text);
  if (n == 0) return ids;
  const size_t lead = ids.front() == model.info().bos ? 1 : 0;
  if (ids.size() == lead) throw Error("the bench prompt has no tokens");
  std::vector<int32_t> out(ids.begin(), ids.begin() + long(std::min<size_t>(n, ids.size())));
  for (size_t i = lead; out.size() < n; i = i + 1 < ids.size() ? i + 1 : lead) out.push_back(ids[i]);
  return out;
}

struct Series {
  std::vector<double> prefill, decode, decode_gpu;
  SpecTotals spec;
  uint64_t decode_tokens = 0, submissions = 0, parts = 0, dispatches = 0;   // after the first token, summed over runs
  void add(const vkspec_metrics& m) {
    prefill.push_back(double(m.prompt_tokens) / m.prefill_seconds);
    decode.push_back(m.decode_tokens_per_second);
    const uint64_t tokens = m.generated_tokens > 1 ? m.generated_tokens - 1 : 0;
    decode_tokens += tokens;
    submissions += m.host_waits;
    parts += m.queue_submissions;
    dispatches += m.dispatches;
    if (m.device_seconds > 0) decode_gpu.push_back(double(tokens) / m.device_seconds);
    spec += m;
  }
  // tokens per second of device time alone (no host gaps between submissions), the median over runs like
  // the rest: one run holding a stall or lavapipe's first compile of a pipeline variant (inside device time,
  // at its first dispatch) must not move it, as a sum over runs did (a predicted 0.37x beside a realized 1.15x)
  double gpu_tok_s() const { return decode_gpu.empty() ? 0.0 : median(decode_gpu); }
  nlohmann::json summary() const {
    const double n = double(decode_tokens ? decode_tokens : 1);
    return {{"prefill_tok_s", median(prefill)}, {"decode_tok_s", median(decode)}, {"decode_runs", decode},
            {"waits_per_token", double(submissions) / n}, {"queue_submissions_per_token", double(parts) / n},
            {"dispatches_per_token", double(dispatches) / n},
            {"decode_gpu_tok_s", gpu_tok_s()}};
  }
};

// llama.cpp through the peer harness on the same prompt ids (greedy); its JSON. Throws when it fails.
nlohmann::json run_peer(const BenchOptions& b, const RunOptions& o, const std::vector<int32_t>& prompt) {
  std::string ids;
  for (int32_t id : prompt) {
    if (!ids.empty()) ids += ',';
    ids += std::to_string(id);
  }
  // An argument vector, never a shell command line: file names may hold quotes or `$(...)`.
  const std::vector<std::string> args = {"node", b.peer_dir + "/peer.mjs", "--model", o.model, "--gpu", b.peer_backend,
                                         "--threads", "1", "--no-bos", "--prompt-ids", ids, "--n",
                                         std::to_string(o.n_predict), "--runs", std::to_string(b.reps), "--temp", "0",
                                         "--ignore-eos", "--no-text"};
  const platform::ChildOutput peer = platform::run_capturing_stdout(args);
  const std::string& status = peer.failure;
  auto j = nlohmann::json::parse(peer.out, nullptr, false);
  if (!status.empty() || j.is_discarded() || !j.contains("median")) {
    std::string line;
    for (const auto& a : args) line += (line.empty() ? "" : " ") + a;
    throw Error("the llama.cpp peer failed (" + (status.empty() ? std::string("its output is not the expected JSON") : status) +
                "); run `" + line + "` to see why");
  }
  return j;
}

}  // namespace

int cmd_bench(const RunOptions& o, const BenchOptions& b) {
  if (b.prompt_tokens < 0 || o.n_predict < 2 || b.reps < 1)
    throw Error("bench needs -p >= 0 (0: the prompt text as it is), -n >= 2 and --reps >= 1");
  const api::Model model = load_model(o);
  const vkspec_model_info& mi = model.info();
  const auto too_long = [&](size_t prompt_tokens) {
    if (prompt_tokens + size_t(o.n_predict) + 1 > mi.n_ctx)
      throw Error("-p + -n exceed the context of " + std::to_string(mi.n_ctx) + " (use --ctx)");
  };
  too_long(size_t(b.prompt_tokens));   // before a prompt of that length is built (-p 1000000000 would take 4 GB)
  const std::string text = o.prompt_file.empty() ? std::string(kDefaultPrompt) : read_prompt(o, kMaxTextBytes);
  const std::vector<int32_t> prompt = prompt_of_length(model, text, uint32_t(b.prompt_tokens));
  too_long(prompt.size());
  api::Context ctx(model, context_params(o, o.seed.value_or(1)));
  const std::string drafter = ctx.info().drafter;
  const bool spec = !drafter.empty();

  // Each run from an empty cache: the whole prompt prefilled, in one submission.
  auto generate = [&](int n, bool speculative, std::vector<int32_t>* ids) {
    ctx.clear();
    vkspec_generate_params gp = vkspec_generate_default_params();
    gp.n_predict = n;
    gp.ignore_eos = 1;
    gp.speculative = speculative;
    gp.prefill_one_submission = 1;
    return ctx.generate(prompt, gp, [&](int32_t id, std::string_view, bool) {
      if (ids && id >= 0) ids->push_back(id);
      return true;
    });
  };
  // Warm-up (pipeline compilation, first-touch of memory), then plain and speculative runs interleaved so
  // that drift in the machine's speed affects both alike. The speculative warm-up is a whole run: its rounds
  // verify K + 1 rows for every K the policy tries, each a set of pipeline variants that lavapipe compiles at
  // its first dispatch; with a 4-token warm-up the first measured run paid for them (pycode pair: 101-161
  // tok/s against 176-272 for the runs after it).
  generate(4, false, nullptr);
  if (spec) generate(o.n_predict, true, nullptr);
  Series plain, specd;
  bool identical = true;
  std::vector<int32_t> plain_ids;
  for (int r = 0; r < b.reps; ++r) {
    std::vector<int32_t> a, s;
    plain.add(generate(o.n_predict, false, &a));
    plain_ids = a;
    if (!spec) continue;
    specd.add(generate(o.n_predict, true, &s));
    identical = identical && s == a;
  }
  nlohmann::json j = {{"model", o.model}, {"device", mi.device}, {"ubatch", mi.n_ubatch}, {"prompt_tokens", prompt.size()},
                      {"gen_tokens", o.n_predict}, {"reps", b.reps}, {"temp", o.temp},
                      {"plain", plain.summary()}};
  if (spec) {
    j["draft_model"] = o.draft_model;
    j["speculative"] = specd.summary();
    j["speculative"].update(speculative_json(o, drafter, specd.spec));
    j["speedup"] = median(specd.decode) / median(plain.decode);
    // What the device time of the rounds and of plain steps predicts (the realized speedup falls short of it
    // by the host's share: waits, recording, bookkeeping).
    if (plain.gpu_tok_s() > 0) j["predicted_speedup"] = specd.gpu_tok_s() / plain.gpu_tok_s();
    if (o.temp <= 0.0f) j["greedy_identical"] = identical;
  }
  if (!b.peer_dir.empty()) {
    const nlohmann::json peer = run_peer(b, o, prompt);
    const double peer_decode = peer["median"].value("decode_tok_s", 0.0);
    // how many leading greedy tokens agree with ours (f16 files drift after some 60-100 tokens)
    size_t agree = 0;
    const auto peer_ids = peer.value("ids", std::vector<int32_t>{});
    while (agree < peer_ids.size() && agree < plain_ids.size() && peer_ids[agree] == plain_ids[agree]) ++agree;
    j["llama_cpp"] = {{"backend", peer.value("backend", "")}, {"release", peer.value("llama_cpp_release", nlohmann::json())},
                      {"threads", peer.value("threads", 0)}, {"same_leading_ids", agree},
                      {"prefill_tok_s", peer["median"].value("prompt_tok_s", 0.0)}, {"decode_tok_s", peer_decode},
                      {"same_prompt_ids", peer.value("prompt_ids", nlohmann::json()) == nlohmann::json(prompt)}};
    if (peer_decode > 0) j["plain_vs_llama_cpp"] = median(plain.decode) / peer_decode;
  }
  if (o.json) {
    printf("%s\n", j.dump().c_str());
    return 0;
  }
  printf("%s on %s, %zu prompt tokens, %d generated, median of %d\n", o.model.c_str(), mi.device,
         prompt.size(), o.n_predict, b.reps);
  printf("  plain        prefill %8.1f tok/s   decode %8.1f tok/s   (%.2f waits, %.1f dispatches per token)\n",
         median(plain.prefill), median(plain.decode), plain.summary()["waits_per_token"].get<double>(),
         plain.summary()["dispatches_per_token"].get<double>());
  if (spec)
    printf("  speculative  prefill %8.1f tok/s   decode %8.1f tok/s   (%s, K=%d, acceptance %.2f, %.2f tokens/verify)"
           "   speedup %.2fx (device time predicts %.2fx)\n",
           median(specd.prefill), median(specd.decode), drafter.c_str(), o.draft_max,
           specd.spec.acceptance_rate(), specd.spec.tokens_per_verify(), j["speedup"].get<double>(),
           j.value("predicted_speedup", 0.0));
  if (j.contains("llama_cpp"))
    printf("  llama.cpp    prefill %8.1f tok/s   decode %8.1f tok/s   (%s)   vkspec plain / llama.cpp %.2fx\n",
           j["llama_cpp"]["prefill_tok_s"].get<double>(), j["llama_cpp"]["decode_tok_s"].get<double>(),
           b.peer_backend.c_str(), j.value("plain_vs_llama_cpp", 0.0));
  return 0;
}

}  // namespace vkspec::cli
