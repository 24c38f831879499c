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
#include "apps/engine.h"

namespace vkspec::cli {
namespace {

nlohmann::json completion_json(Engine& engine, const RunOptions& o, const std::vector<uint32_t>& prompt,
                               const Completion& c, const std::string& text, uint64_t seed) {
  nlohmann::json j = {
      {"model", o.model}, {"device", engine.facts().name}, {"prompt_ids", prompt}, {"ids", c.ids}, {"text", text},
      {"prompt_tokens", prompt.size()}, {"n_generated", c.ids.size()}, {"seed", seed}, {"stop_reason", c.stop_reason},
      {"timings", {{"load_s", engine.load_s()}, {"prefill_s", c.prefill_s},
                   {"prefill_tok_s", double(prompt.size()) / c.prefill_s}, {"decode_s", c.decode_s},
                   {"decode_tok_s", c.decode_tok_s()}}}};
  if (c.speculative) j["speculative"] = engine.speculative_json(c.spec);
  return j;
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
  Engine engine(o, isatty(STDERR_FILENO) && !o.json);
  const Tokenizer& tok = engine.tokenizer();
  // a context position is rarely more than a few bytes of text: 64 per position bounds what is read
  const std::string text = read_prompt(o, uint64_t(engine.model().n_ctx()) * 64);
  std::vector<uint32_t> prompt;
  if (chat.chat) {   // one user turn (after the system message, if any) in the model's chat template
    const ChatFormatter fmt(engine.file(), tok, chat.template_file);
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!chat.system.empty()) messages.push_back({{"role", "system"}, {"content", chat.system}});
    messages.push_back({{"role", "user"}, {"content", text}});
    prompt = engine.encode_chat(fmt.render(messages, true));
  } else {
    prompt = engine.encode_prompt(text);
  }
  SamplingParams sp = sampling_params(o);
  const uint64_t base_seed = o.seed ? *o.seed : std::random_device{}();

  // --samples N: independent completions with seeds S, S+1, ..., the models loaded once.
  for (int sample = 0; sample < o.samples; ++sample) {
    sp.seed = base_seed + uint64_t(sample);
    std::string text;
    Utf8Stream utf8;
    auto emit = [&](const std::string& s) {   // a failed write stops generation (it throws)
      text += s;
      if (!o.json) write_stdout(s);
    };
    const Completion c = engine.generate(prompt, sp, o.n_predict, o.ignore_eos, /*speculate=*/true,
                                         [&](uint32_t id, bool) { emit(utf8.push(tok.piece(id))); return true; });
    emit(utf8.finish());
    if (o.json)
      write_stdout(completion_json(engine, o, prompt, c, text, sp.seed).dump(-1, ' ', false,
                                                                           nlohmann::json::error_handler_t::replace) + "\n");
    else
      write_stdout("\n");   // flushed: the text's last line comes before the stats, also on one pipe
    if (c.stop_reason == "context")
      fprintf(stderr, "vkspec: the context of %u tokens is full: generation stopped after %zu tokens (use --ctx)\n",
              engine.model().n_ctx(), c.ids.size());
    if (!o.json)
      fprintf(stderr, "vkspec: %zu prompt tokens in %.3f s (%.1f tok/s), %zu generated in %.3f s (%.1f tok/s) on %s\n",
              prompt.size(), c.prefill_s, double(prompt.size()) / c.prefill_s, c.ids.size(), c.decode_s,
              c.decode_tok_s(), engine.facts().name.c_str());
  }
  return 0;
}

}  // namespace vkspec::cli
