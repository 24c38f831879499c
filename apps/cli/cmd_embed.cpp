// `vkspec embed`: a text's embedding, as llama.cpp's llama-embedding computes it for a decoder model (the
// final hidden state after the output norm; the last token's, or the mean over the tokens) and optionally
// normalized to unit length, as OpenAI's and Ollama's endpoints return it.
#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/cli_common.h"

namespace vkspec::cli {

int cmd_embed(const RunOptions& run_opts, const EmbedOptions& e) {
  const api::Model model = load_model(run_opts);
  const vkspec_model_info& mi = model.info();
  const std::vector<int32_t> ids =
      model.tokenize(read_prompt(run_opts, uint64_t(mi.n_ctx) * 64), run_opts.no_bos ? 0 : VKSPEC_ADD_BOS, true);
  if (ids.empty()) throw Error("the text has no tokens to embed");
  if (ids.size() > mi.n_ctx)
    throw Error("the text is " + std::to_string(ids.size()) + " tokens, more than the context (" + std::to_string(mi.n_ctx) +
                "; --ctx sets it)");
  api::Context ctx(model, context_params(run_opts, 0));
  const uint32_t n_embd = vkspec_model_n_embd(model.get());
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> v = ctx.embed(ids, e.pooling == "mean" ? VKSPEC_POOLING_MEAN : VKSPEC_POOLING_LAST, e.normalize, n_embd);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (run_opts.json) {
    write_stdout(nlohmann::json{{"embedding", v}, {"n_embd", n_embd}, {"n_tokens", ids.size()}, {"pooling", e.pooling},
                                {"normalized", e.normalize}, {"seconds", seconds}, {"model", run_opts.model}}.dump() + "\n");
  } else {
    std::string out;
    char num[32];
    for (size_t i = 0; i < v.size(); ++i) {
      snprintf(num, sizeof num, i ? " %.9g" : "%.9g", double(v[i]));
      out += num;
    }
    write_stdout(out + "\n");
  }
  return 0;
}

}  // namespace vkspec::cli
