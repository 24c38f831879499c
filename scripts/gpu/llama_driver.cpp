// llama.cpp beside vkspec on a machine without node: loads a GGUF with every layer offloaded (the backend
// the shared libraries provide: the peer's linux-x64-vulkan build), prefills the given prompt ids, decodes
// greedily, and prints one JSON line: prefill/decode tokens/s of each run, medians, and the generated ids.
// Built against llama.h of the peer's own llama.cpp release (scripts/gpu/README.md).
//   llama_driver MODEL.gguf IDS(comma-separated) N_GEN REPS
//   llama_driver --quantize IN.gguf OUT.gguf FTYPE   (llama.cpp's own quantizer: FTYPE 7 = Q8_0, 15 = Q4_K_M)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama.h"

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}
static void quiet(ggml_log_level, const char*, void*) {}

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--quantize") {   // real presets of the real-shape models, made there
    llama_model_quantize_params qp = llama_model_quantize_default_params();
    qp.ftype = llama_ftype(atoi(argv[4]));
    qp.nthread = 16;
    return llama_model_quantize(argv[2], argv[3], &qp) == 0 ? 0 : 1;
  }
  if (argc != 5) { fprintf(stderr, "usage: llama_driver MODEL IDS N_GEN REPS\n"); return 2; }
  std::vector<llama_token> prompt;
  for (const char* p = argv[2]; *p;) { prompt.push_back(llama_token(strtol(p, (char**)&p, 10))); if (*p == ',') ++p; }
  const int n_gen = atoi(argv[3]), reps = atoi(argv[4]);
  if (!getenv("LLAMA_DRIVER_VERBOSE")) llama_log_set(quiet, nullptr);
  llama_backend_init();
  ggml_backend_load_all();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 999;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = uint32_t(prompt.size() + n_gen + 16);
  cp.n_batch = cp.n_ubatch = uint32_t(std::max<size_t>(prompt.size(), 1));
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) { fprintf(stderr, "cannot create context\n"); return 1; }
  std::vector<double> pre, dec;
  std::vector<llama_token> out;
  for (int r = -1; r < reps; ++r) {   // r = -1 warms up (pipeline compilation)
    llama_memory_clear(llama_get_memory(ctx), true);
    out.clear();
    double t0 = now();
    if (llama_decode(ctx, llama_batch_get_one(prompt.data(), int32_t(prompt.size())))) return 1;
    const float* lg = llama_get_logits_ith(ctx, -1);
    llama_token tok = llama_token(std::max_element(lg, lg + n_vocab) - lg);
    double t1 = now();
    for (int i = 0; i < n_gen; ++i) {
      out.push_back(tok);
      if (llama_decode(ctx, llama_batch_get_one(&tok, 1))) return 1;
      lg = llama_get_logits_ith(ctx, -1);
      tok = llama_token(std::max_element(lg, lg + n_vocab) - lg);
    }
    double t2 = now();
    if (r >= 0) { pre.push_back(prompt.size() / (t1 - t0)); dec.push_back(n_gen / (t2 - t1)); }
  }
  printf("{\"prefill_tok_s\":%.2f,\"decode_tok_s\":%.2f,\"decode_runs\":[", median(pre), median(dec));
  for (size_t i = 0; i < dec.size(); ++i) printf("%s%.2f", i ? "," : "", dec[i]);
  printf("],\"ids\":[");
  for (size_t i = 0; i < out.size(); ++i) printf("%s%d", i ? "," : "", out[i]);
  printf("]}\n");
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
