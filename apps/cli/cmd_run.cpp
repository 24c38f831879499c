// `vkspec run` (generate text, streamed; --samples N completions) and `vkspec tokenize`.

#include <cerrno>
#include <cstring>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>

#include <nlohmann/json.hpp>

#include "common/cli_common.h"
#include "platform/platform.h"

namespace vkspec::cli {
namespace {

struct RunInfo {   // what a completion's JSON line says besides the completion itself
  std::string device;
  double load_s = 0;
  std::string drafter;   // empty: not speculative
};

nlohmann::json completion_json(const RunOptions& o, const RunInfo& info, const std::vector<int32_t>& prompt,
                               const std::vector<int32_t>& ids, const std::string& text, uint64_t seed,
                               const std::string& stop_reason, double prefill_s, double decode_s,
                               const SpecTotals* spec) {
  const double decode_tok_s = ids.size() > 1 && decode_s > 0 ? double(ids.size() - 1) / decode_s : 0.0;
  nlohmann::json j = {
      {"model", o.model}, {"device", info.device}, {"prompt_ids", prompt}, {"ids", ids}, {"text", text},
      {"prompt_tokens", prompt.size()}, {"n_generated", ids.size()}, {"seed", seed}, {"stop_reason", stop_reason},
      {"timings", {{"load_s", info.load_s}, {"prefill_s", prefill_s}, {"prefill_tok_s", double(prompt.size()) / prefill_s},
                   {"decode_s", decode_s}, {"decode_tok_s", decode_tok_s}}}};
  if (spec) j["speculative"] = speculative_json(o, info.drafter, *spec);
  return j;
}

void print_completion(const RunOptions& o, const RunInfo& info, const std::vector<int32_t>& prompt,
                      const std::vector<int32_t>& ids, const std::string& text, uint64_t seed,
                      const std::string& stop_reason, double prefill_s, double decode_s, const SpecTotals* spec,
                      uint32_t n_ctx, uint64_t reused = 0, double pipelines_s = 0) {
  // (prefill_s and decode_s without pipelines_s: the driver's shader compilation, a first run's, said apart)
  if (o.json) {
    nlohmann::json j = completion_json(o, info, prompt, ids, text, seed, stop_reason, prefill_s, decode_s, spec);
    if (!o.prompt_cache.empty()) j["reused_tokens"] = reused;   // from the --prompt-cache file
    j["timings"]["pipelines_s"] = pipelines_s;
    write_stdout(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  } else {
    write_stdout("\n");   // flushed: the text's last line comes before the stats, also on one pipe
  }
  if (stop_reason == "context")
    fprintf(stderr, "vkspec: the context of %u tokens is full: generation stopped after %zu tokens (use --ctx)\n", n_ctx,
            ids.size());
  if (!o.json && pipelines_s >= 0.01)
    fprintf(stderr, "vkspec: %.3f s creating pipelines (the driver compiling shaders; later runs find them cached)\n", pipelines_s);
  if (!o.json)
    fprintf(stderr, "vkspec: %zu prompt tokens in %.3f s (%.1f tok/s), %zu generated in %.3f s (%.1f tok/s) on %s\n",
            prompt.size(), prefill_s, double(prompt.size()) / prefill_s, ids.size(), decode_s,
            ids.size() > 1 && decode_s > 0 ? double(ids.size() - 1) / decode_s : 0.0, info.device.c_str());
  if (!o.json && reused > 0) fprintf(stderr, "vkspec: %llu prompt tokens from %s\n", (unsigned long long)reused, o.prompt_cache.c_str());
}

// --samples N > 1: the completions decoded together in one batch (vkspec_batch: they share the prompt's KV
// blocks, which is prefilled once), printed in order as each finishes; seeds S, S+1, ...
void run_samples(const RunOptions& o, const api::Model& model, const RunInfo& info, const std::vector<int32_t>& prompt,
                 uint64_t base_seed, uint32_t parallel) {
  struct Sample {
    std::vector<int32_t> ids;
    std::string text;
    vkspec_request_result result{};
    bool done = false;
  };
  std::vector<Sample> samples(size_t(o.samples));
  vkspec_batch_params bp = vkspec_batch_default_params();
  bp.parallel = parallel;
  bp.draft = draft_params(o);
  api::Batch batch(model, bp);
  for (int i = 0; i < o.samples; ++i) {
    vkspec_request_params rp = vkspec_request_default_params();
    rp.sampling = sampling_params(o, base_seed + uint64_t(i));
    rp.max_tokens = uint32_t(o.n_predict);
    rp.ignore_eos = o.ignore_eos;
    rp.user = &samples[size_t(i)];
    rp.on_token = [](uint64_t, int32_t id, const char* piece, size_t len, int32_t, const float*, uint32_t, void* user) {
      Sample& s = *static_cast<Sample*>(user);
      if (id >= 0) s.ids.push_back(id);
      s.text.append(piece, len);
      return 0;
    };
    rp.on_done = [](uint64_t, const vkspec_request_result* r, void* user) {
      Sample& s = *static_cast<Sample*>(user);
      s.result = *r;
      s.done = true;
    };
    batch.submit(prompt, rp);
  }
  const uint32_t n_ctx = model.info().n_ctx;
  size_t printed = 0;
  while (printed < samples.size()) {
    const bool worked = batch.step();
    for (; printed < samples.size() && samples[printed].done; ++printed) {
      const Sample& s = samples[printed];
      if (std::string(s.result.stop_reason) == "error") throw Error(s.result.error);
      if (!o.json) write_stdout(s.text);
      SpecTotals spec;
      spec.drafted = s.result.drafted, spec.accepted = s.result.accepted;
      spec.verify_passes = s.result.verify_passes, spec.round_tokens = s.result.round_tokens;
      spec.tree_rounds = s.result.tree_rounds;
      print_completion(o, info, prompt, s.ids, s.text, base_seed + printed, cli_stop_reason(s.result.stop_reason),
                       s.result.prefill_seconds, s.result.decode_seconds, s.result.speculative ? &spec : nullptr, n_ctx);
    }
    if (!worked && printed < samples.size()) throw Error("internal: the batch stopped before every sample ended");
  }
}

}  // namespace

int cmd_tokenize(const RunOptions& o) {
  const api::Model model = api::Model::vocab_only(o.model);
  const std::vector<int32_t> ids = model.tokenize(read_prompt(o, kMaxTextBytes), o.no_bos ? 0 : VKSPEC_ADD_BOS, true);
  if (!o.no_bos) warn_if_double_bos(model, ids);
  if (o.json) {
    write_stdout(nlohmann::json(ids).dump() + "\n");
  } else {
    std::string out;
    for (int32_t id : ids) out += std::to_string(id) + "\n";
    write_stdout(out);
  }
  return 0;
}

int cmd_run(const RunOptions& o, const ChatOptions& chat) {
  if (o.n_predict <= 0) throw Error("-n must be positive (got " + std::to_string(o.n_predict) + ")");
  const uint32_t parallel = uint32_t(std::min(o.samples, 8));
  const api::Model model = load_model(o, parallel);
  const vkspec_model_info& mi = model.info();
  // a context position is rarely more than a few bytes of text: 64 per position bounds what is read
  const std::string text = read_prompt(o, uint64_t(mi.n_ctx) * 64);
  std::vector<int32_t> prompt;
  if (chat.chat) {   // one user turn (after the system message, if any) in the model's chat template
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!chat.system.empty()) messages.push_back({{"role", "system"}, {"content", chat.system}});
    messages.push_back({{"role", "user"}, {"content", text}});
    prompt = encode_chat(model, model.apply_chat_template(chat_template_source(model, chat.template_file), messages.dump(), true));
  } else {
    prompt = encode_prompt(model, text);
  }
  if (prompt.size() >= mi.n_ctx)
    throw Error("the prompt is " + std::to_string(prompt.size()) + " tokens, which does not fit the context of " +
                std::to_string(mi.n_ctx) + " (use --ctx)");
  const uint64_t base_seed = o.seed ? *o.seed : std::random_device{}();
  RunInfo info{mi.device, mi.load_seconds, ""};
  if (o.samples > 1) {
    if (!o.prompt_cache.empty()) throw Error("--prompt-cache takes one completion (not --samples)");
    info.drafter = drafter_name(o);
    run_samples(o, model, info, prompt, base_seed, parallel);
    return 0;
  }

  api::Context ctx(model, context_params(o, base_seed));
  // llama-cli's --prompt-cache: a session file of an earlier run (its prompt and what it generated); the run
  // prefills only what its prompt adds to the file's tokens, and leaves its own session there
  if (!o.prompt_cache.empty() && platform::file_info(o.prompt_cache).type != platform::FileType::Missing) ctx.load(o.prompt_cache);
  const vkspec_context_info ci = ctx.info();
  info.load_s = ci.load_seconds;
  info.drafter = ci.drafter;
  std::string out;
  std::vector<int32_t> ids;
  vkspec_generate_params gp = vkspec_generate_default_params();
  gp.n_predict = o.n_predict;
  gp.ignore_eos = o.ignore_eos;
  gp.prefill_one_submission = 1;
  const vkspec_metrics m = ctx.generate(prompt, gp, [&](int32_t id, std::string_view piece, bool) {
    if (id >= 0) ids.push_back(id);
    out += piece;
    if (!o.json) write_stdout(std::string(piece));   // a failed write stops generation (it throws)
    return true;
  });
  SpecTotals spec;
  spec += m;
  if (!o.prompt_cache.empty()) ctx.save(o.prompt_cache);
  print_completion(o, info, prompt, ids, out, base_seed, cli_stop_reason(m.stop_reason),
                   m.prefill_seconds - m.prefill_pipeline_seconds, m.decode_seconds - m.decode_pipeline_seconds,
                   info.drafter.empty() ? nullptr : &spec, mi.n_ctx, m.reused_tokens,
                   m.prefill_pipeline_seconds + m.decode_pipeline_seconds);
  return 0;
}

}  // namespace vkspec::cli
