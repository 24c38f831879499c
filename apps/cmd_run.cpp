// `vkspec run` (generate text, streamed) and `vkspec tokenize`.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>

#include <nlohmann/json.hpp>

#include "apps/cli_common.h"
#include "loader/tokenizer.h"
#include "runtime/model.h"
#include "runtime/sampler.h"
#include "speculative/controller.h"

namespace vkspec::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void progress_bar(uint64_t done, uint64_t total) {
  static int last = -1;
  int pct = total ? int(done * 100 / total) : 100;
  if (pct == last) return;
  last = pct;
  fprintf(stderr, "\rloading weights [%-40.*s] %3d%%%s", pct * 40 / 100, "########################################", pct,
          pct == 100 ? "\n" : "");
}

}  // namespace

std::string process_escapes(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) { out += s[i]; continue; }
    switch (s[++i]) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '"': out += '"'; break;
      case '\'': out += '\''; break;
      case '0': out += '\0'; break;
      default: out += '\\'; out += s[i];
    }
  }
  return out;
}

std::string read_prompt(const RunOptions& o) {
  std::string text = o.prompt;
  if (!o.prompt_file.empty()) {
    std::ifstream in(o.prompt_file, std::ios::binary);
    if (!in) throw Error("cannot read prompt file '" + o.prompt_file + "'");
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  return o.escape ? process_escapes(text) : text;
}

int cmd_tokenize(const RunOptions& o) {
  GgufFile file(o.model);
  auto tok = Tokenizer::from_gguf(file);
  auto ids = tok->encode(read_prompt(o), tok->add_bos() && !o.no_bos, true);
  if (o.json) {
    printf("%s\n", nlohmann::json(ids).dump().c_str());
  } else {
    for (uint32_t id : ids) printf("%u\n", id);
  }
  return 0;
}

int cmd_run(const RunOptions& o) {
  if (o.n_predict <= 0) throw Error("-n must be positive (got " + std::to_string(o.n_predict) + ")");
  if (!o.draft_model.empty() && !o.draft.empty()) throw Error("give either -md DRAFT.gguf or --draft ngram, not both");
  if (o.draft_max < 1 || o.draft_max > int(LlamaModel::kMaxBatch - 1) || o.draft_min < 0 || o.draft_min > o.draft_max)
    throw Error("--draft-max must be 1.." + std::to_string(LlamaModel::kMaxBatch - 1) + " and --draft-min 0..draft-max");
  if (o.ctx < 0) throw Error("--ctx must be positive");
  const auto t_load = std::chrono::steady_clock::now();
  GgufFile file(o.model);
  auto tok = Tokenizer::from_gguf(file);
  const std::string prompt = read_prompt(o);
  std::vector<uint32_t> ids = tok->encode(prompt, tok->add_bos(), true);
  if (ids.empty()) throw Error("the prompt is empty and the model adds no BOS token");

  Context ctx(ContextOptions{o.device, false});
  Pipelines pipelines(ctx);
  ModelOptions mo;
  mo.n_ctx = uint32_t(o.ctx);
  mo.max_sequences = 1;
  if (isatty(STDERR_FILENO) && !o.json) mo.progress = progress_bar;
  LlamaModel model(ctx, pipelines, file, mo);
  std::unique_ptr<GgufFile> draft_file;
  std::unique_ptr<LlamaModel> draft_model;
  std::unique_ptr<Drafter> drafter;
  if (!o.draft_model.empty()) {
    draft_file = std::make_unique<GgufFile>(o.draft_model);
    check_same_vocabulary(*tok, *Tokenizer::from_gguf(*draft_file));
    ModelOptions dmo = mo;
    dmo.n_ctx = model.n_ctx();
    draft_model = std::make_unique<LlamaModel>(ctx, pipelines, *draft_file, dmo);
    drafter = std::make_unique<ModelDrafter>(*draft_model, o.draft_p_min);
  } else if (o.draft == "ngram") {
    drafter = std::make_unique<NgramDrafter>();
  }
  if (tok->n_vocab() != model.hparams().n_vocab) throw Error("tokenizer and model disagree on the vocabulary size");
  if (ids.size() >= model.n_ctx())
    throw Error("the prompt is " + std::to_string(ids.size()) + " tokens, which does not fit the context of " +
                std::to_string(model.n_ctx()) + " (use --ctx)");
  const double load_s = seconds_since(t_load);

  SamplingParams sp;
  sp.temperature = o.temp;
  sp.top_k = o.top_k;
  sp.top_p = o.top_p;
  sp.min_p = o.min_p;
  sp.repeat_penalty = o.repeat_penalty;
  sp.repeat_last_n = o.repeat_last_n;
  const uint64_t base_seed = o.seed >= 0 ? uint64_t(o.seed) : std::random_device{}();
  const bool device_argmax = sp.greedy() && sp.repeat_penalty == 1.0f;
  std::unique_ptr<SpecAcceptor> acceptor;
  if (drafter && !sp.greedy())
    acceptor = std::make_unique<SpecAcceptor>(ctx, pipelines, model.hparams().n_vocab, LlamaModel::kMaxBatch - 1);
  const std::vector<uint32_t> prompt_ids = ids;

  // --samples N: independent completions with seeds S, S+1, ..., the models loaded once.
  for (int sample = 0; sample < o.samples; ++sample) {
  ids = prompt_ids;
  sp.seed = base_seed + uint64_t(sample);
  Sampler sampler(sp);
  const int seq = model.kv().new_sequence();
  const auto t_prefill = std::chrono::steady_clock::now();
  model.forward(seq, ids, Logits::Last);
  const double prefill_s = seconds_since(t_prefill);

  const size_t n_prompt = ids.size();
  std::vector<uint32_t> generated;
  std::string text;
  Utf8Stream utf8;
  auto emit = [&](const std::string& s) {
    text += s;
    if (!o.json) {
      fwrite(s.data(), 1, s.size(), stdout);
      fflush(stdout);
    }
  };
  const auto t_decode = std::chrono::steady_clock::now();
  SpeculativeStats spec;
  if (drafter) {
    SpeculativeOptions so{uint32_t(o.draft_max), uint32_t(o.draft_min), &sampler, acceptor.get()};
    std::vector<uint32_t> context = ids;
    spec = generate_speculative(model, seq, *drafter, context, so, [&](uint32_t next) {
      if (!o.ignore_eos && tok->is_eog(next)) return false;
      ids.push_back(next);
      generated.push_back(next);
      emit(utf8.push(tok->piece(next)));
      return generated.size() < size_t(o.n_predict);
    });
  }
  while (!drafter) {
    const uint32_t next = device_argmax
                              ? model.argmax_id(0)
                              : sampler.sample({model.logits(0), model.hparams().n_vocab}, ids, ids.size());
    if (!o.ignore_eos && tok->is_eog(next)) break;
    ids.push_back(next);
    generated.push_back(next);
    emit(utf8.push(tok->piece(next)));
    if (generated.size() >= size_t(o.n_predict) || ids.size() >= model.n_ctx()) break;
    model.forward(seq, std::span<const uint32_t>(&next, 1), Logits::Last);
  }
  emit(utf8.finish());
  const double decode_s = seconds_since(t_decode);
  // tokens/s counts forward passes in the decode loop (one per generated token after the first)
  const double decode_passes = generated.empty() ? 0 : double(generated.size() - 1);

  if (o.json) {
    nlohmann::json j = {
        {"model", o.model}, {"device", ctx.facts().name},
        {"prompt_ids", std::vector<uint32_t>(ids.begin(), ids.begin() + long(n_prompt))},
        {"ids", generated}, {"text", text}, {"prompt_tokens", n_prompt}, {"n_generated", generated.size()},
        {"seed", sp.seed},
        {"timings", {{"load_s", load_s}, {"prefill_s", prefill_s}, {"prefill_tok_s", n_prompt / prefill_s},
                     {"decode_s", decode_s}, {"decode_tok_s", decode_passes > 0 ? decode_passes / decode_s : 0.0}}}};
    if (drafter)
      j["speculative"] = {{"drafter", drafter->name()}, {"draft_max", o.draft_max}, {"drafted", spec.drafted},
                          {"accepted", spec.accepted}, {"acceptance_rate", spec.acceptance_rate()},
                          {"tokens_per_verify", spec.tokens_per_verify()}, {"verify_passes", spec.verify_passes}};
    printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    printf("\n");
    fprintf(stderr, "vkspec: %zu prompt tokens in %.3f s (%.1f tok/s), %zu generated in %.3f s (%.1f tok/s) on %s\n",
            n_prompt, prefill_s, n_prompt / prefill_s, generated.size(), decode_s,
            decode_passes > 0 ? decode_passes / decode_s : 0.0, ctx.facts().name.c_str());
  }
  fflush(stdout);
  model.kv().free_sequence(seq);
  }
  return 0;
}

}  // namespace vkspec::cli
