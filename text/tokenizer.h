#pragma once
// Tokenizers that match llama.cpp id for id:
//   SentencePiece vocabularies (tokenizer.ggml.model = "llama") through libsentencepiece, with the
//   model built in memory from the GGUF vocabulary (text/tokenizer_spm.cpp);
//   Llama 3 byte-level BPE (tokenizer.ggml.model = "gpt2", pre = "llama-bpe"): PCRE2 pre-tokenizer
//   and ranked merges (text/tokenizer_bpe.cpp).
// Special tokens written in text are matched first (longest first), like llama.cpp's parse_special.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"

namespace vkspec {

enum class TokenType : uint8_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

class Tokenizer {
 public:
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& f);
  virtual ~Tokenizer() = default;

  // parse_special: control/unknown tokens written in the text become those tokens (user-defined
  // tokens always do). Plain text never produces control tokens otherwise.
  std::vector<uint32_t> encode(std::string_view text, bool add_bos, bool parse_special = true) const;
  // Bytes of one token as it appears in generated text ("" for control tokens).
  virtual std::string piece(uint32_t id) const = 0;

  uint32_t n_vocab() const { return uint32_t(texts_.size()); }
  const std::string& text(uint32_t id) const { return texts_.at(id); }
  TokenType type(uint32_t id) const { return types_.at(id); }
  int bos() const { return bos_; }
  int eos() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  bool is_eog(uint32_t id) const;
  const std::string& model_name() const { return model_; }

 protected:
  explicit Tokenizer(const GgufFile& f);
  // Encode one run of plain text; `after_special` is true at the start and after a special token.
  virtual void encode_text(std::string_view text, bool after_special, std::vector<uint32_t>& out) const = 0;

  std::string model_;
  std::vector<std::string> texts_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  int bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = false;
  std::vector<uint32_t> eog_;
  std::vector<uint32_t> specials_;   // matched in text, longest text first
  // specials_ by their first byte (longest first), so finding the next special token is one pass over the
  // text however many special tokens there are: tokenizing stays linear in the text's length
  std::vector<uint32_t> specials_by_byte_[256];
};

// Turns a stream of token bytes into valid UTF-8 chunks, holding back an incomplete trailing sequence.
class Utf8Stream {
 public:
  std::string push(const std::string& bytes);
  std::string finish();   // whatever is held back: an unfinished sequence, as one U+FFFD
 private:
  std::string pending_;
};

std::unique_ptr<Tokenizer> make_spm_tokenizer(const GgufFile& f);
std::unique_ptr<Tokenizer> make_bpe_tokenizer(const GgufFile& f);

}  // namespace vkspec
