// `vkspec perplexity`: llama.cpp's llama-perplexity method, so the figures compare with its own
// (../shared/models/reference/perplexity.json): tokenize the whole text with BOS; cut it into n_ctx-token
// chunks, the first token of each replaced by BOS; evaluate each chunk from an empty cache and score the
// log-probability of every token in its second half (the prediction of token j+1 from the logits at j,
// for j = n_ctx/2 .. n_ctx-2); PPL = exp(mean negative log-likelihood). Its uncertainty as llama.cpp gives
// it: the standard error of the mean NLL, times PPL.
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "apps/cli_common.h"
#include "apps/engine.h"

namespace vkspec::cli {
namespace {
// -log softmax(logits)[target], in double
double nll_of(const float* logits, uint32_t n_vocab, uint32_t target) {
  double mx = logits[0];
  for (uint32_t i = 1; i < n_vocab; ++i) mx = std::max(mx, double(logits[i]));
  double sum = 0;
  for (uint32_t i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i]) - mx);
  const double nll = std::log(sum) + mx - double(logits[target]);
  if (!std::isfinite(nll)) throw Error("the model produced non-finite logits");
  return nll;
}
}  // namespace

int cmd_perplexity(const RunOptions& run_opts, const PerplexityOptions& p) {
  if (p.ctx < 8) throw Error("--ctx must be at least 8 (got " + std::to_string(p.ctx) + ")");
  RunOptions o = run_opts;
  o.ctx = p.ctx;
  Engine engine(o);
  LlamaModel& model = engine.model();
  const Tokenizer& tok = engine.tokenizer();
  const uint32_t n_ctx = uint32_t(p.ctx), n_vocab = model.hparams().n_vocab;
  if (tok.bos() < 0) throw Error("the model has no BOS token, which llama.cpp's method puts at every chunk's start");
  // llama-perplexity: add_special = true (BOS when the model adds it), special tokens in the text not parsed
  const std::vector<uint32_t> tokens = tok.encode(read_prompt(o, kMaxTextBytes), tok.add_bos(), /*parse_special=*/false);
  if (tokens.size() < 2 * size_t(n_ctx))
    throw Error("'" + o.prompt_file + "' has " + std::to_string(tokens.size()) + " tokens; --ctx " +
                std::to_string(n_ctx) + " needs at least " + std::to_string(2 * n_ctx));
  const size_t max_chunks = tokens.size() / n_ctx;
  const size_t n_chunk = p.chunks > 0 ? std::min(max_chunks, size_t(p.chunks)) : max_chunks;
  const uint32_t first = n_ctx / 2;
  fprintf(stderr, "perplexity: %zu tokens, %zu chunks of %u (scoring the last %u tokens of each) on %s\n",
          tokens.size(), n_chunk, n_ctx, n_ctx - 1 - first, engine.facts().name.c_str());

  double nll = 0, nll2 = 0;
  size_t count = 0;
  std::vector<uint32_t> chunk(n_ctx);
  const int seq = model.kv().new_sequence();
  for (size_t c = 0; c < n_chunk; ++c) {
    std::copy_n(tokens.begin() + c * n_ctx, n_ctx, chunk.begin());
    chunk[0] = uint32_t(tok.bos());
    model.kv().truncate(seq, 0);
    // the first half only fills the cache: one submission, no logits
    model.forward(seq, std::span(chunk).first(first), Logits::None);
    for (uint32_t j = first; j < n_ctx - 1; j += LlamaModel::kMaxBatch) {
      const uint32_t n = std::min(LlamaModel::kMaxBatch, n_ctx - 1 - j);
      model.forward(seq, std::span(chunk).subspan(j, n), Logits::All);
      for (uint32_t r = 0; r < n; ++r) {
        const double v = nll_of(model.logits(r), n_vocab, chunk[j + r + 1]);
        nll += v;
        nll2 += v * v;
        ++count;
      }
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
                                {"device", engine.facts().name}}.dump() + "\n");
  } else {
    char line[96];
    snprintf(line, sizeof line, "Final estimate: PPL = %.4f +/- %.5f\n", ppl, err);
    write_stdout(line);
  }
  return 0;
}

}  // namespace vkspec::cli
