// libFuzzer target for the GGUF parser, the llama hyperparameter/tensor checks and the quantized-block
// decoders: any input must either parse or raise vkspec::Error; a crash, hang, out-of-bounds read (ASan) or
// UB (UBSan) is a bug.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/model_file.h"
#include "core/quant.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    vkspec::GgufFile f(data, size, "fuzz.gguf");
    // every quantized tensor the parser accepted decodes within its bytes (small ones: the fuzzer's time)
    for (const auto& t : f.tensors()) {
      const auto type = vkspec::DType(t.type);
      if (!vkspec::is_quantized(type) || t.elements() > (1u << 16)) continue;
      const size_t n = t.elements();
      std::vector<int8_t> q(n);
      std::vector<float> s(n / vkspec::kCanonicalGroup), m(n / vkspec::kCanonicalGroup);
      vkspec::decode_quant(type, t.data, n, q.data(), s.data(), m.data());
    }
    vkspec::LlamaHParams hp = vkspec::read_llama_hparams(f);
    vkspec::find_llama_tensors(f, hp);
  } catch (const vkspec::Error&) {
  }
  return 0;
}
