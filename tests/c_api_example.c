/* A C99 program using only include/vkspec.h (compiled with -std=c99 -pedantic): loads a model, tokenizes a
 * prompt and streams a greedy completion, printing the token ids as a JSON array. tests/test_c_api.cpp
 * compares them with `vkspec run`.   c_api_example MODEL.gguf PROMPT N */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkspec.h"

static int on_token(int32_t token, const char* piece, size_t piece_len, int32_t from_draft, void* user) {
  int* count = (int*)user;
  (void)piece;
  (void)piece_len;
  (void)from_draft;
  printf("%s%d", *count ? "," : "", (int)token);
  ++*count;
  return 0;
}

static int fail(const char* what, vkspec_status s) {
  fprintf(stderr, "%s: %s: %s\n", what, vkspec_status_name(s), vkspec_last_error());
  return 1;
}

int main(int argc, char** argv) {
  vkspec_model_params mp;
  vkspec_context_params cp;
  vkspec_generate_params gp;
  vkspec_model* model = NULL;
  vkspec_context* ctx = NULL;
  int32_t tokens[512];
  size_t n_tokens = 0;
  int count = 0;
  vkspec_status s;
  if (argc != 4) {
    fprintf(stderr, "usage: c_api_example MODEL.gguf PROMPT N\n");
    return 2;
  }
  if (vkspec_api_version() != VKSPEC_API_VERSION) return fail("version", VKSPEC_ERROR_FAILED);
  mp = vkspec_model_default_params();
  if ((s = vkspec_model_load(argv[1], &mp, &model)) != VKSPEC_OK) return fail("load", s);
  if ((s = vkspec_tokenize(model, argv[2], strlen(argv[2]), 1, 1, tokens, 512, &n_tokens)) != VKSPEC_OK)
    return fail("tokenize", s);
  cp = vkspec_context_default_params();
  cp.temperature = 0.0f;
  if ((s = vkspec_context_create(model, &cp, &ctx)) != VKSPEC_OK) return fail("context", s);
  gp = vkspec_generate_default_params();
  gp.n_predict = atoi(argv[3]);
  gp.ignore_eos = 1;
  gp.on_token = on_token;
  gp.user = &count;
  printf("[");
  if ((s = vkspec_generate(ctx, tokens, n_tokens, &gp)) != VKSPEC_OK) return fail("generate", s);
  printf("]\n");
  if ((s = vkspec_context_free(ctx)) != VKSPEC_OK) return fail("context_free", s);
  if ((s = vkspec_model_free(model)) != VKSPEC_OK) return fail("model_free", s);
  return 0;
}
