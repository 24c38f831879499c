// Llama 3 byte-level BPE: PCRE2 pre-tokenizer (the llama-bpe pattern needs Unicode properties), bytes
// mapped to GPT-2's printable code points, then merges applied lowest rank first. As llama.cpp does for
// llama-bpe, a pre-token that is itself a vocabulary entry is taken whole (ignore_merges).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <climits>
#include <unordered_map>

#include "loader/tokenizer.h"

namespace vkspec {
namespace {

const char* const kLlama3Pattern =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kGpt2Pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) s += char(cp);
  else if (cp < 0x800) { s += char(0xC0 | (cp >> 6)); s += char(0x80 | (cp & 0x3F)); }
  else { s += char(0xE0 | (cp >> 12)); s += char(0x80 | ((cp >> 6) & 0x3F)); s += char(0x80 | (cp & 0x3F)); }
  return s;
}

class BpeTokenizer : public Tokenizer {
 public:
  explicit BpeTokenizer(const GgufFile& f) : Tokenizer(f) {
    std::string pre = f.opt_string("tokenizer.ggml.pre").value_or("default");
    const char* pattern = nullptr;
    if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") pattern = kLlama3Pattern;
    else if (pre == "default" || pre == "gpt2") pattern = kGpt2Pattern;
    else throw Error("BPE pre-tokenizer '" + pre + "' is not supported (llama-bpe, gpt2)");
    ignore_merges_ = pattern == kLlama3Pattern;
    int err = 0;
    PCRE2_SIZE off = 0;
    re_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    if (!re_) throw Error("internal: cannot compile the pre-tokenizer pattern");
    pcre2_jit_compile(re_, PCRE2_JIT_COMPLETE);   // optional speed-up; falls back to the interpreter

    // GPT-2 byte <-> printable code point table.
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      byte_to_cp_[b] = printable ? uint32_t(b) : uint32_t(256 + n++);
      cp_to_byte_[byte_to_cp_[b]] = uint8_t(b);
      byte_text_[b] = utf8(byte_to_cp_[b]);
    }
    for (uint32_t i = 0; i < texts_.size(); ++i) token_id_.emplace(texts_[i], i);
    const auto* merges = f.opt_strings("tokenizer.ggml.merges");
    if (!merges) throw Error("'" + f.path() + "': BPE vocabulary without tokenizer.ggml.merges");
    for (size_t r = 0; r < merges->size(); ++r) {
      const std::string& m = (*merges)[r];
      size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) throw Error("tokenizer.ggml.merges[" + std::to_string(r) + "] is malformed");
      merge_rank_.emplace(m, int(r));
    }
  }
  ~BpeTokenizer() override { pcre2_code_free(re_); }

  std::string piece(uint32_t id) const override {
    const TokenType t = types_.at(id);
    if (t == TokenType::Control || t == TokenType::Unused) return "";
    const std::string& s = texts_[id];
    if (t == TokenType::UserDefined) return s;
    std::string out;
    for (size_t i = 0; i < s.size();) {   // decode UTF-8 code points, map each back to its byte
      unsigned char c = s[i];
      uint32_t cp;
      size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
      if (len == 1) cp = c;
      else if (len == 2) cp = ((c & 0x1F) << 6) | (s[i + 1] & 0x3F);
      else if (len == 3) cp = ((c & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
      else cp = UINT32_MAX;
      auto it = cp_to_byte_.find(cp);
      if (it != cp_to_byte_.end()) out += char(it->second);
      else out.append(s, i, len);
      i += len;
    }
    return out;
  }

 protected:
  void encode_text(std::string_view text, bool, std::vector<uint32_t>& out) const override {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re_, nullptr);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t start = 0;
    while (start < text.size()) {
      int rc = pcre2_match(re_, subject, text.size(), start, 0, md, nullptr);
      if (rc < 0) {   // invalid UTF-8 or no match: the rest as one chunk
        encode_word(text.substr(start), out);
        break;
      }
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (ov[1] == ov[0]) { ++start; continue; }
      if (ov[0] > start) encode_word(text.substr(start, ov[0] - start), out);
      encode_word(text.substr(ov[0], ov[1] - ov[0]), out);
      start = ov[1];
    }
    pcre2_match_data_free(md);
  }

 private:
  void encode_word(std::string_view word, std::vector<uint32_t>& out) const {
    std::vector<std::string> sym;
    std::string whole;
    for (unsigned char b : word) {
      sym.push_back(byte_text_[b]);
      whole += byte_text_[b];
    }
    if (ignore_merges_) {
      if (auto it = token_id_.find(whole); it != token_id_.end()) { out.push_back(it->second); return; }
    }
    while (sym.size() > 1) {
      int best_rank = INT_MAX;
      size_t best = 0;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        auto it = merge_rank_.find(sym[i] + " " + sym[i + 1]);
        if (it != merge_rank_.end() && it->second < best_rank) { best_rank = it->second; best = i; }
      }
      if (best_rank == INT_MAX) break;
      sym[best] += sym[best + 1];
      sym.erase(sym.begin() + long(best) + 1);
    }
    for (const auto& s : sym) {
      auto it = token_id_.find(s);
      if (it != token_id_.end()) { out.push_back(it->second); continue; }
      for (size_t i = 0; i < s.size();) {   // not in vocab: fall back to single-byte symbols
        size_t len = 1;
        while (i + len < s.size() && (((unsigned char)s[i + len]) >> 6) == 2) ++len;
        auto b = token_id_.find(s.substr(i, len));
        if (b != token_id_.end()) out.push_back(b->second);
        else if (unk_ >= 0) out.push_back(uint32_t(unk_));
        i += len;
      }
    }
  }

  pcre2_code* re_ = nullptr;
  bool ignore_merges_ = false;
  uint32_t byte_to_cp_[256];
  std::string byte_text_[256];
  std::unordered_map<uint32_t, uint8_t> cp_to_byte_;
  std::unordered_map<std::string, uint32_t> token_id_;
  std::unordered_map<std::string, int> merge_rank_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const GgufFile& f) { return std::make_unique<BpeTokenizer>(f); }

}  // namespace vkspec
