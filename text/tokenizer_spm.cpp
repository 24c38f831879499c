// SentencePiece tokenizer: a ModelProto is serialized in memory from the GGUF vocabulary (pieces, scores,
// types; BPE model, identity normalizer, byte fallback) and loaded into libsentencepiece. The dummy-prefix
// space is added here, per fragment after a special token, as llama.cpp does.
//
// Long text is encoded in pieces cut after a "barrier" byte: an ASCII byte that no vocabulary entry longer
// than one byte contains (in Llama's vocabulary: '\n' among others). BPE never merges such a byte with a
// neighbour, so it stays a symbol of its own and the merges on either side of it are independent: the
// pieces' ids concatenated are exactly the ids of the whole text. libsentencepiece's BPE is linear but
// heavy (10 MB of code took 20 s and 1 GB in one call); pieces of a few KB keep it cache-sized.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstring>

#include "text/tokenizer.h"

namespace vkspec {
namespace {

// Minimal protobuf wire-format writer for the few ModelProto fields we set.
struct Proto {
  std::string buf;
  void varint(uint64_t v) {
    while (v >= 0x80) { buf += char(v | 0x80); v >>= 7; }
    buf += char(v);
  }
  void tag(uint32_t field, uint32_t wire) { varint((uint64_t(field) << 3) | wire); }
  void u(uint32_t field, uint64_t v) { tag(field, 0); varint(v); }
  void f32(uint32_t field, float v) {
    tag(field, 5);
    char b[4];
    memcpy(b, &v, 4);
    buf.append(b, 4);
  }
  void bytes(uint32_t field, const std::string& s) { tag(field, 2); varint(s.size()); buf += s; }
};

class SpmTokenizer : public Tokenizer {
 public:
  explicit SpmTokenizer(const GgufFile& f) : Tokenizer(f) {
    add_space_prefix_ = f.find("tokenizer.ggml.add_space_prefix") ? f.opt_number("tokenizer.ggml.add_space_prefix").value() != 0 : true;
    Proto model;
    bool has_bytes = false;
    int unk = unk_;   // SentencePiece's one unknown piece: the file's, else its first token typed unknown
    for (size_t i = 0; i < texts_.size() && unk < 0; ++i)
      if (types_[i] == TokenType::Unknown) unk = int(i);
    for (size_t i = 0; i < texts_.size(); ++i) {
      Proto piece;
      piece.bytes(1, texts_[i]);
      piece.f32(2, scores_[i]);
      int t = int(types_[i]);
      if (t == 0) t = 1;
      // SentencePiece takes exactly one unknown piece (Phi-3's file types its <unk> as control and 53
      // placeholders as unknown); the others are never produced from text, as control pieces are not
      if (int(i) == unk) t = int(TokenType::Unknown);
      else if (types_[i] == TokenType::Unknown) t = int(TokenType::Control);
      piece.u(3, uint64_t(t));
      has_bytes |= types_[i] == TokenType::Byte;
      model.bytes(1, piece.buf);
    }
    Proto trainer;
    trainer.u(3, 2);   // model_type = BPE (llama.cpp's SPM tokenizer is score-ranked BPE merging)
    trainer.u(4, texts_.size());
    trainer.u(35, has_bytes ? 1 : 0);   // byte_fallback
    trainer.u(40, uint64_t(unk >= 0 ? unk : 0));
    trainer.u(41, uint64_t(int64_t(bos_)));
    trainer.u(42, uint64_t(int64_t(eos_)));
    trainer.u(43, uint64_t(int64_t(-1)));
    model.bytes(2, trainer.buf);
    Proto norm;
    norm.bytes(1, "identity");
    norm.u(3, 0);   // add_dummy_prefix: done per fragment in encode_text
    norm.u(4, 0);   // remove_extra_whitespaces: llama.cpp keeps them
    norm.u(5, 1);   // escape_whitespaces: ' ' -> U+2581
    model.bytes(3, norm.buf);
    auto st = sp_.LoadFromSerializedProto(model.buf);
    if (!st.ok()) throw Error("SentencePiece rejected the GGUF vocabulary: " + st.ToString());

    // A barrier must also never be an unknown symbol (without byte fallback libsentencepiece joins a run of
    // unknown characters into one <unk>, across any cut): byte fallback is on, or the byte is a piece itself.
    bool piece_of_one[256] = {}, in_longer_piece[256] = {};
    for (size_t i = 0; i < texts_.size(); ++i) {
      if (types_[i] == TokenType::Byte) continue;
      if (texts_[i].size() == 1) piece_of_one[uint8_t(texts_[i][0])] = true;
      else for (unsigned char c : texts_[i]) in_longer_piece[c] = true;
    }
    for (int b = 1; b < 0x80; ++b) barrier_[b] = (has_bytes || piece_of_one[b]) && !in_longer_piece[b];
    barrier_[uint8_t(' ')] = false;   // the normalizer turns ' ' into U+2581 (three bytes, in many pieces)
  }

  std::string piece(uint32_t id) const override {
    const TokenType t = types_.at(id);
    const std::string& s = texts_[id];
    if (t == TokenType::Control || t == TokenType::Unused) return "";
    if (t == TokenType::Byte && s.size() == 6 && s.rfind("<0x", 0) == 0)
      return std::string(1, char(std::stoi(s.substr(3, 2), nullptr, 16)));
    if (t == TokenType::Unknown) return "\xE2\x96\x85";   // as llama.cpp renders <unk>
    std::string out;
    for (size_t i = 0; i < s.size();) {
      if (s.compare(i, 3, "\xE2\x96\x81") == 0) { out += ' '; i += 3; }
      else out += s[i++];
    }
    return out;
  }

 protected:
  void encode_text(std::string_view text, bool after_special, std::vector<uint32_t>& out) const override {
    std::string s;
    if (add_space_prefix_ && after_special) s = " ";
    s.append(text);
    std::vector<int> ids;
    for (size_t begin = 0; begin < s.size();) {
      size_t end = std::min(s.size(), begin + kPieceBytes);
      while (end < s.size() && !barrier_[uint8_t(s[end - 1])]) ++end;   // cut just after a barrier byte
      auto st = sp_.Encode(std::string_view(s).substr(begin, end - begin), &ids);
      if (!st.ok()) throw Error("SentencePiece encode failed: " + st.ToString());
      for (int id : ids) out.push_back(uint32_t(id));
      begin = end;
    }
  }

 private:
  static constexpr size_t kPieceBytes = 4096;   // a piece ends at the first barrier after this many bytes
  sentencepiece::SentencePieceProcessor sp_;
  bool add_space_prefix_ = true;
  bool barrier_[256] = {};   // bytes that never merge with a neighbour (see the top of the file)
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(const GgufFile& f) { return std::make_unique<SpmTokenizer>(f); }

}  // namespace vkspec
