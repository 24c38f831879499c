// external_device MODEL PROMPT N: as generate.c, but the program creates the Vulkan instance, device and
// queue itself (as a game engine does: app_device.h) and hands them to vkspec, which then runs on them,
// taking the program's queue lock around each submission. Prints the same text as `vkspec run ... --temp 0`.
//   c++ -std=c++17 external_device.cpp $(pkg-config --cflags --libs vkspec) -lvulkan
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "app_device.h"
#include "vkspec.h"

namespace {

int fail(const char* what, vkspec_status s) {
  fprintf(stderr, "external_device: %s: %s: %s\n", what, vkspec_status_name(s), vkspec_last_error());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: external_device MODEL.gguf PROMPT N\n");
    return 2;
  }
  AppDevice d;
  vkspec_model_params mp = vkspec_model_default_params();
  mp.external = &d.handoff;
  vkspec_model* model = nullptr;
  vkspec_status s = vkspec_model_load(argv[1], &mp, &model);
  if (s != VKSPEC_OK) return fail("loading the model", s);
  size_t n = 0;
  vkspec_tokenize(model, argv[2], strlen(argv[2]), 1, 1, nullptr, 0, &n);
  std::vector<int32_t> prompt(n);
  if ((s = vkspec_tokenize(model, argv[2], strlen(argv[2]), 1, 1, prompt.data(), n, &n)) != VKSPEC_OK) return fail("tokenize", s);
  vkspec_context_params cp = vkspec_context_default_params();
  cp.sampling.temperature = 0.0f;
  vkspec_context* ctx = nullptr;
  if ((s = vkspec_context_create(model, &cp, &ctx)) != VKSPEC_OK) return fail("creating a context", s);
  vkspec_generate_params gp = vkspec_generate_default_params();
  gp.n_predict = atoi(argv[3]);
  gp.on_token = [](int32_t, const char* piece, size_t len, int32_t, void*) {
    return int(fwrite(piece, 1, len, stdout) != len || fflush(stdout) != 0);
  };
  if ((s = vkspec_generate(ctx, prompt.data(), prompt.size(), &gp)) != VKSPEC_OK) return fail("generate", s);
  printf("\n");
  vkspec_context_free(ctx);
  vkspec_model_free(model);
  fprintf(stderr, "external_device: vkspec took the queue lock %d times\n", d.lock_calls);
  return d.lock_calls > 0 ? 0 : 1;
}
