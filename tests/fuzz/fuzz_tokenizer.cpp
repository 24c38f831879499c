// libFuzzer target for both tokenizers: arbitrary bytes (invalid UTF-8, special-token text, long runs) are
// encoded with the Llama 3 BPE and the Llama 2 SentencePiece vocabularies, special tokens parsed, and every
// id is detokenized again. Any exception other than vkspec::Error, a crash, an out-of-bounds read (ASan), UB
// (UBSan) or an id outside the vocabulary is a bug. The vocabularies: $VKSPEC_SHARED/tokenizer-tests.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "text/tokenizer.h"

namespace {
struct Vocab {
  std::unique_ptr<vkspec::GgufFile> file;
  std::unique_ptr<vkspec::Tokenizer> tok;
};
Vocab load(const char* name) {
  const char* shared = getenv("VKSPEC_SHARED");
  Vocab v;
  v.file = std::make_unique<vkspec::GgufFile>(std::string(shared ? shared : "../shared") + "/tokenizer-tests/" + name);
  v.tok = vkspec::Tokenizer::from_gguf(*v.file);
  return v;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Vocab bpe = load("ggml-vocab-llama-bpe.gguf"), spm = load("ggml-vocab-llama-spm.gguf");
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (Vocab* v : {&bpe, &spm}) {
    try {
      for (bool special : {true, false}) {
        std::string back;
        for (uint32_t id : v->tok->encode(text, true, special)) {
          if (id >= v->tok->n_vocab()) abort();
          back += v->tok->piece(id);
        }
      }
    } catch (const vkspec::Error&) {
    }
  }
  return 0;
}
