// `vkspec perplexity`: llama.cpp's llama-perplexity method, so the figures compare with its own
// (../shared/models/reference/perplexity.json): tokenize the whole text with BOS; cut it into n_ctx-token
// chunks, the first token of each replaced by BOS; evaluate each chunk from an empty cache and score the
// log-probability of every token in its second half (the prediction of token j+1 from the logits at j,
// for j = n_ctx/2 .. n_ctx-2); PPL = exp(mean negative log-likelihood). Its uncertainty as llama.cpp gives
// it: the standard error of the mean NLL, times PPL.
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/cli_common.h"

namespace vkspec::cli {

int cmd_perplexity(const RunOptions& run_opts, const PerplexityOptions& p) {
  if (p.ctx < 8) throw Error("--ctx must be at least 8 (got " + std::to_string(p.ctx) + ")");
  RunOptions o = run_opts;
  o.ctx = p.ctx;
  const api::Model model = load_model(o);
  const vkspec_model_info& mi = model.info();
  api::Context ctx(model, context_params(o, 0));
  const uint32_t n_ctx = uint32_t(p.ctx);
  if (mi.bos < 0) throw Error("the model has no BOS token, which llama.cpp's method puts at every chunk's start");
  // llama-perplexity: add_special = true (BOS when the model adds it), special tokens in the text not parsed
  const std::vector<int32_t> tokens = model.tokenize(read_prompt(o, kMaxTextBytes), VKSPEC_ADD_BOS, /*parse_special=*/false);
  if (tokens.size() < 2 * size_t(n_ctx))
    throw Error("'" + o.prompt_file + "' has " + std::to_string(tokens.size()) + " tokens; --ctx " +
                std::to_string(n_ctx) + " needs at least " + std::to_string(2 * n_ctx));
  const size_t max_chunks = tokens.size() / n_ctx;
  const size_t n_chunk = p.chunks > 0 ? std::min(max_chunks, size_t(p.chunks)) : max_chunks;
  const uint32_t first = n_ctx / 2;
  fprintf(stderr, "perplexity: %zu tokens, %zu chunks of %u (scoring the last %u tokens of each) on %s\n",
          tokens.size(), n_chunk, n_ctx, n_ctx - 1 - first, mi.device);

  double nll = 0, nll2 = 0;
  size_t count = 0;
  std::vector<int32_t> chunk(n_ctx);
  for (size_t c = 0; c < n_chunk; ++c) {
    std::copy_n(tokens.begin() + long(c * n_ctx), n_ctx, chunk.begin());
    chunk[0] = mi.bos;
    // the predictions of tokens first+1 .. n_ctx-1, each from the logits at the position before it
    for (const double lp : ctx.score(chunk, first + 1)) {
      nll -= lp;
      nll2 += lp * lp;
      ++count;
    }
    fprintf(stderr, "[%zu]%.4f,", c + 1, std::exp(nll / double(count)));
    fflush(stderr);
  }
  fprintf(stderr, "\n");
  const double mean = nll / double(count), ppl = std::exp(mean);
  const double var = nll2 / double(count) - mean * mean;
  const double err = var > 0 && count > 1 ? std::sqrt(var / double(count - 1)) * ppl : 0.0;
  if (o.json) {
    write_stdout(nlohmann::json{{"model", o.model}, {"file", o.prompt_file}, {"ctx", n_ctx}, {"chunks", n_chunk},
                                {"tokens_scored", count}, {"ppl", ppl}, {"ppl_error", err},
                                {"device", mi.device}}.dump() + "\n");
  } else {
    char line[96];
    snprintf(line, sizeof line, "Final estimate: PPL = %.4f +/- %.5f\n", ppl, err);
    write_stdout(line);
  }
  return 0;
}

}  // namespace vkspec::cli
