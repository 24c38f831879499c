// `vkspec run` (generate text, streamed; --samples N completions) and `vkspec tokenize`.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>

#include <nlohmann/json.hpp>

#include "apps/cli_common.h"
#include "apps/engine.h"

namespace vkspec::cli {
namespace {

nlohmann::json completion_json(Engine& engine, const RunOptions& o, const std::vector<uint32_t>& prompt,
                               const Completion& c, const std::string& text, uint64_t seed) {
  nlohmann::json j = {
      {"model", o.model}, {"device", engine.facts().name}, {"prompt_ids", prompt}, {"ids", c.ids}, {"text", text},
      {"prompt_tokens", prompt.size()}, {"n_generated", c.ids.size()}, {"seed", seed},
      {"timings", {{"load_s", engine.load_s()}, {"prefill_s", c.prefill_s},
                   {"prefill_tok_s", double(prompt.size()) / c.prefill_s}, {"decode_s", c.decode_s},
                   {"decode_tok_s", c.decode_tok_s()}}}};
  if (c.speculative) j["speculative"] = engine.speculative_json(c.spec);
  return j;
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
  Engine engine(o, isatty(STDERR_FILENO) && !o.json);
  const Tokenizer& tok = engine.tokenizer();
  const std::vector<uint32_t> prompt = engine.encode_prompt(read_prompt(o));
  SamplingParams sp = sampling_params(o);
  const uint64_t base_seed = o.seed >= 0 ? uint64_t(o.seed) : std::random_device{}();

  // --samples N: independent completions with seeds S, S+1, ..., the models loaded once.
  for (int sample = 0; sample < o.samples; ++sample) {
    sp.seed = base_seed + uint64_t(sample);
    std::string text;
    Utf8Stream utf8;
    auto emit = [&](const std::string& s) {
      text += s;
      if (!o.json) {
        fwrite(s.data(), 1, s.size(), stdout);
        fflush(stdout);
      }
    };
    const Completion c = engine.generate(prompt, sp, o.n_predict, o.ignore_eos, /*speculate=*/true,
                                         [&](uint32_t id) { emit(utf8.push(tok.piece(id))); });
    emit(utf8.finish());
    if (o.json)
      printf("%s\n", completion_json(engine, o, prompt, c, text, sp.seed).dump(-1, ' ', false,
                                                                            nlohmann::json::error_handler_t::replace).c_str());
    else
      printf("\n");
    fflush(stdout);   // the text's last line before the stats, also when both streams go to one pipe
    if (!o.json)
      fprintf(stderr, "vkspec: %zu prompt tokens in %.3f s (%.1f tok/s), %zu generated in %.3f s (%.1f tok/s) on %s\n",
              prompt.size(), c.prefill_s, double(prompt.size()) / c.prefill_s, c.ids.size(), c.decode_s,
              c.decode_tok_s(), engine.facts().name.c_str());
  }
  return 0;
}

}  // namespace vkspec::cli
