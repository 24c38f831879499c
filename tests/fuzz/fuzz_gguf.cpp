// libFuzzer target for the GGUF parser and the llama hyperparameter/tensor checks: any input must either
// parse or raise vkspec::Error; a crash, hang, out-of-bounds read (ASan) or UB (UBSan) is a bug.
#include <cstddef>
#include <cstdint>

#include "loader/gguf.h"
#include "loader/model_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    vkspec::GgufFile f(data, size, "fuzz.gguf");
    vkspec::LlamaHParams hp = vkspec::read_llama_hparams(f);
    vkspec::find_llama_tensors(f, hp);
  } catch (const vkspec::Error&) {
  }
  return 0;
}
