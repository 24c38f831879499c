// `vkspec run` (generate text, streamed; --samples N completions) and `vkspec tokenize`.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>

#include <nlohmann/json.hpp>

#include "apps/chat.h"
#include "apps/cli_common.h"
#include "apps/batch_engine.h"
#include "apps/engine.h"

namespace vkspec::cli {
namespace {

struct RunInfo {   // what a completion's JSON line says besides the completion itself
  std::string device;
  double load_s = 0;
  std::string drafter;   // empty: not speculative
};

nlohmann::json completion_json(const RunOptions& o, const RunInfo& info, const std::vector<uint32_t>& prompt,
                               const std::vector<uint32_t>& ids, const std::string& text, uint64_t seed,
                               const std::string& stop_reason, double prefill_s, double decode_s,
                               const SpeculativeStats* spec) {
  const double decode_tok_s = ids.size() > 1 && decode_s > 0 ? double(ids.size() - 1) / decode_s : 0.0;
  nlohmann::json j = {
      {"model", o.model}, {"device", info.device}, {"prompt_ids", prompt}, {"ids", ids}, {"text", text},
      {"prompt_tokens", prompt.size()}, {"n_generated", ids.size()}, {"seed", seed}, {"stop_reason", stop_reason},
      {"timings", {{"load_s", info.load_s}, {"prefill_s", prefill_s}, {"prefill_tok_s", double(prompt.size()) / prefill_s},
                   {"decode_s", decode_s}, {"decode_tok_s", decode_tok_s}}}};
  if (spec) j["speculative"] = speculative_json(o, info.drafter, *spec);
  return j;
}

void print_completion(const RunOptions& o, const RunInfo& info, const std::vector<uint32_t>& prompt,
                      const std::vector<uint32_t>& ids, const std::string& text, uint64_t seed,
                      const std::string& stop_reason, double prefill_s, double decode_s, const SpeculativeStats* spec,
                      uint32_t n_ctx) {
  if (o.json)
    write_stdout(completion_json(o, info, prompt, ids, text, seed, stop_reason, prefill_s, decode_s, spec)
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  else
    write_stdout("\n");   // flushed: the text's last line comes before the stats, also on one pipe
  if (stop_reason == "context")
    fprintf(stderr, "vkspec: the context of %u tokens is full: generation stopped after %zu tokens (use --ctx)\n", n_ctx,
            ids.size());
  if (!o.json)
    fprintf(stderr, "vkspec: %zu prompt tokens in %.3f s (%.1f tok/s), %zu generated in %.3f s (%.1f tok/s) on %s\n",
            prompt.size(), prefill_s, double(prompt.size()) / prefill_s, ids.size(), decode_s,
            ids.size() > 1 && decode_s > 0 ? double(ids.size() - 1) / decode_s : 0.0, info.device.c_str());
}

// --samples N > 1: the completions decoded together (apps/batch_engine.h: they share the prompt's KV blocks,
// which is prefilled once), printed in order as each finishes; seeds S, S+1, ...
void run_samples(const RunOptions& o, std::shared_ptr<TargetModel> target, const RunInfo& info,
                 const std::vector<uint32_t>& prompt, SamplingParams sp, uint64_t base_seed, uint32_t parallel) {
  BatchEngine engine(target, o, {parallel, 64});
  const Tokenizer& tok = *target->tok;
  struct Sample {
    std::vector<uint32_t> ids;
    std::string text;
    Utf8Stream utf8;
    BatchResult result;
    bool done = false;
  };
  std::vector<Sample> samples(size_t(o.samples));
  for (int i = 0; i < o.samples; ++i) {
    auto r = std::make_shared<BatchRequest>();
    r->prompt = prompt;
    r->sp = sp;
    r->sp.seed = base_seed + uint64_t(i);
    r->max_tokens = uint32_t(o.n_predict);
    r->ignore_eos = o.ignore_eos;
    Sample& s = samples[size_t(i)];
    r->on_token = [&s, &tok](uint32_t id, bool, const float*) {
      s.ids.push_back(id);
      s.text += s.utf8.push(tok.piece(id));
      return true;
    };
    r->on_done = [&s](const BatchResult& res) {
      s.text += s.utf8.finish();
      s.result = res;
      s.done = true;
    };
    engine.submit(r);
  }
  size_t printed = 0;
  while (printed < samples.size()) {
    const bool worked = engine.step();
    for (; printed < samples.size() && samples[printed].done; ++printed) {
      const Sample& s = samples[printed];
      if (s.result.stop_reason == "error") throw Error(s.result.error);
      if (!o.json) write_stdout(s.text);
      print_completion(o, info, prompt, s.ids, s.text, base_seed + printed, s.result.stop_reason == "stop" ? "interrupted" : s.result.stop_reason,
                       s.result.prefill_s, s.result.decode_s, s.result.speculative ? &s.result.spec : nullptr,
                       target->model->n_ctx());
    }
    if (!worked && printed < samples.size()) throw Error("internal: the batch stopped before every sample ended");
  }
}

}  // namespace

int cmd_tokenize(const RunOptions& o) {
  GgufFile file(o.model);
  auto tok = Tokenizer::from_gguf(file);
  auto ids = tok->encode(read_prompt(o, kMaxTextBytes), tok->add_bos() && !o.no_bos, true);
  if (o.json) {
    write_stdout(nlohmann::json(ids).dump() + "\n");
  } else {
    std::string out;
    for (uint32_t id : ids) out += std::to_string(id) + "\n";
    write_stdout(out);
  }
  return 0;
}

int cmd_run(const RunOptions& o, const ChatOptions& chat) {
  check_engine_options(o);
  if (o.n_predict <= 0) throw Error("-n must be positive (got " + std::to_string(o.n_predict) + ")");
  const uint32_t parallel = uint32_t(std::min(o.samples, 8));
  TargetModel::Options to;
  to.path = o.model;
  to.device = o.device;
  to.n_ctx = uint32_t(o.ctx);
  to.max_sequences = parallel;
  if (isatty(STDERR_FILENO) && !o.json) to.progress = progress_bar;
  auto target = std::make_shared<TargetModel>(to);
  const Tokenizer& tok = *target->tok;
  // a context position is rarely more than a few bytes of text: 64 per position bounds what is read
  const std::string text = read_prompt(o, uint64_t(target->model->n_ctx()) * 64);
  std::vector<uint32_t> prompt;
  if (chat.chat) {   // one user turn (after the system message, if any) in the model's chat template
    const ChatFormatter fmt(*target->file, tok, chat.template_file);
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!chat.system.empty()) messages.push_back({{"role", "system"}, {"content", chat.system}});
    messages.push_back({{"role", "user"}, {"content", text}});
    prompt = encode_chat(tok, fmt.render(messages, true));
  } else {
    prompt = encode_prompt(tok, text);
  }
  if (prompt.size() >= target->model->n_ctx())
    throw Error("the prompt is " + std::to_string(prompt.size()) + " tokens, which does not fit the context of " +
                std::to_string(target->model->n_ctx()) + " (use --ctx)");
  SamplingParams sp = sampling_params(o);
  const uint64_t base_seed = o.seed ? *o.seed : std::random_device{}();
  RunInfo info{target->ctx->facts().name, target->load_s, ""};
  if (o.samples > 1) {
    info.drafter = !o.draft_model.empty() ? "draft-model" : o.draft;
    run_samples(o, target, info, prompt, sp, base_seed, parallel);
    return 0;
  }

  Engine engine(target, o);
  info.load_s = engine.load_s();
  if (engine.drafter()) info.drafter = engine.drafter()->name();
  sp.seed = base_seed;
  std::string out;
  Utf8Stream utf8;
  auto emit = [&](const std::string& s) {   // a failed write stops generation (it throws)
    out += s;
    if (!o.json) write_stdout(s);
  };
  const Completion c = engine.generate(prompt, sp, o.n_predict, o.ignore_eos, /*speculate=*/true,
                                       [&](uint32_t id, bool) { emit(utf8.push(tok.piece(id))); return true; });
  emit(utf8.finish());
  print_completion(o, info, prompt, c.ids, out, sp.seed, c.stop_reason, c.prefill_s, c.decode_s,
                   c.speculative ? &c.spec : nullptr, target->model->n_ctx());
  return 0;
}

}  // namespace vkspec::cli
