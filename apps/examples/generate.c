/* generate MODEL PROMPT N: loads MODEL, generates N tokens greedily after PROMPT, streaming the text to
 * stdout (then a newline), and prints the metrics to stderr: the text equals what
 * `vkspec run -m MODEL -p PROMPT -n N --temp 0` prints. Plain C99 against include/vkspec.h only.
 *   cc -std=c99 generate.c $(pkg-config --cflags --libs vkspec) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkspec.h"

static int on_token(int32_t token, const char* piece, size_t piece_len, int32_t from_draft, void* user) {
  (void)token;
  (void)from_draft;
  (void)user;
  return fwrite(piece, 1, piece_len, stdout) != piece_len || fflush(stdout) != 0; /* a failed write stops */
}

static int fail(const char* what, vkspec_status s) {
  fprintf(stderr, "generate: %s: %s: %s\n", what, vkspec_status_name(s), vkspec_last_error());
  return 1;
}

int main(int argc, char** argv) {
  vkspec_model_params mp;
  vkspec_context_params cp;
  vkspec_generate_params gp;
  vkspec_metrics m;
  vkspec_model* model = NULL;
  vkspec_context* ctx = NULL;
  int32_t* tokens = NULL;
  size_t n_tokens = 0;
  vkspec_status s;
  if (argc != 4) {
    fprintf(stderr, "usage: generate MODEL.gguf PROMPT N\n");
    return 2;
  }
  mp = vkspec_model_default_params();
  if ((s = vkspec_model_load(argv[1], &mp, &model)) != VKSPEC_OK) return fail("loading the model", s);
  if ((s = vkspec_tokenize(model, argv[2], strlen(argv[2]), 1, 1, NULL, 0, &n_tokens)) != VKSPEC_OK) return fail("tokenize", s);
  tokens = malloc((n_tokens ? n_tokens : 1) * sizeof *tokens);
  if (!tokens) return 1;
  if ((s = vkspec_tokenize(model, argv[2], strlen(argv[2]), 1, 1, tokens, n_tokens, &n_tokens)) != VKSPEC_OK)
    return fail("tokenize", s);
  cp = vkspec_context_default_params();
  cp.sampling.temperature = 0.0f;
  if ((s = vkspec_context_create(model, &cp, &ctx)) != VKSPEC_OK) return fail("creating a context", s);
  gp = vkspec_generate_default_params();
  gp.n_predict = atoi(argv[3]);
  gp.on_token = on_token;
  if ((s = vkspec_generate(ctx, tokens, n_tokens, &gp)) != VKSPEC_OK) return fail("generate", s);
  printf("\n");
  if ((s = vkspec_get_metrics(ctx, &m)) != VKSPEC_OK) return fail("metrics", s);
  fprintf(stderr, "generate: %lu prompt tokens (%.1f tok/s), %lu generated (%.1f tok/s), stop: %s\n",
          (unsigned long)m.prompt_tokens, m.prefill_tokens_per_second, (unsigned long)m.generated_tokens,
          m.decode_tokens_per_second, m.stop_reason);
  free(tokens);
  if ((s = vkspec_context_free(ctx)) != VKSPEC_OK) return fail("freeing the context", s);
  if ((s = vkspec_model_free(model)) != VKSPEC_OK) return fail("freeing the model", s);
  return 0;
}
