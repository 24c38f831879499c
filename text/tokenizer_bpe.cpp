// Byte-level BPE: PCRE2 pre-tokenizer (the patterns need Unicode properties), bytes mapped to GPT-2's
// printable code points, then merges applied lowest rank first. As llama.cpp does for llama-bpe, a pre-token
// that is itself a vocabulary entry is taken whole (ignore_merges). A pre-tokenizer is one or more patterns
// applied in turn, as llama.cpp's are: each splits every piece of the one before into its matches and the
// text between them.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <climits>
#include <memory>
#include <queue>
#include <unordered_map>

#include "text/tokenizer.h"
#include "core/utf8.h"

namespace vkspec {
namespace {

// The patterns share their pieces; each family's differs from Llama 3's or GPT-2's where it says.
#define LLAMA3_WORDS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define LLAMA3_REST "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define GPT2_WORDS "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
const char* const kLlama3Pattern = LLAMA3_WORDS "\\p{N}{1,3}" LLAMA3_REST;   // digits in threes
const char* const kQwen2Pattern = LLAMA3_WORDS "\\p{N}" LLAMA3_REST;         // Qwen2's: single digits
const char* const kGpt2Pattern = GPT2_WORDS "|\\s+";
// StarCoder's, SmolLM's and Refact's: digits apart first, then GPT-2's words (without the last \s+).
const char* const kDigitsPattern = "\\p{N}";
const char* const kStarcoderWordsPattern = GPT2_WORDS;
// Mistral Nemo's (tekken): letters in runs of capitals then lower case, single digits. Written as llama.cpp
// runs it: its tokenizer.json's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] is "a letter but not a-z" and its lower-case
// class "a letter but not A-Z" (which a non-ASCII letter of either case matches both ways).
#define TEKKEN_UPPER "((?=[\\p{L}])([^a-z]))"
#define TEKKEN_LOWER "((?=[\\p{L}])([^A-Z]))"
const char* const kTekkenPattern = "[^\\r\\n\\p{L}\\p{N}]?" TEKKEN_UPPER "*" TEKKEN_LOWER "+|[^\\r\\n\\p{L}\\p{N}]?" TEKKEN_UPPER "+"
                                   TEKKEN_LOWER "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
#undef TEKKEN_UPPER
#undef TEKKEN_LOWER
#undef LLAMA3_WORDS
#undef LLAMA3_REST
#undef GPT2_WORDS

struct PreTokenizer {
  const char* names;                  // tokenizer.ggml.pre values, space-separated
  std::vector<const char*> patterns;
  bool ignore_merges;
};
const PreTokenizer kPreTokenizers[] = {
    {"llama-bpe llama3 llama-v3", {kLlama3Pattern}, true},
    {"default gpt2", {kGpt2Pattern}, false},
    {"qwen2 deepseek-r1-qwen megrez", {kQwen2Pattern}, false},
    {"starcoder smollm refact", {kDigitsPattern, kStarcoderWordsPattern}, false},
    {"tekken", {kTekkenPattern}, true},
};

class BpeTokenizer : public Tokenizer {
 public:
  explicit BpeTokenizer(const GgufFile& f) : Tokenizer(f) {
    const std::string pre = f.opt_string("tokenizer.ggml.pre").value_or("default");
    const PreTokenizer* chosen = nullptr;
    std::string known;
    for (const PreTokenizer& p : kPreTokenizers) {
      known += std::string(known.empty() ? "" : ", ") + p.names;
      if ((" " + std::string(p.names) + " ").find(" " + pre + " ") != std::string::npos) chosen = &p;
    }
    if (!chosen) throw Error("BPE pre-tokenizer '" + pre + "' is not supported (" + known + ")");
    ignore_merges_ = chosen->ignore_merges;
    for (const char* pattern : chosen->patterns) {
      int err = 0;
      PCRE2_SIZE off = 0;
      res_.emplace_back(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                      PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr),
                        &pcre2_code_free);
      if (!res_.back()) throw Error("internal: cannot compile the pre-tokenizer pattern");
      pcre2_jit_compile(res_.back().get(), PCRE2_JIT_COMPLETE);   // optional speed-up; falls back to the interpreter
    }

    // GPT-2 byte <-> printable code point table.
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      byte_to_cp_[b] = printable ? uint32_t(b) : uint32_t(256 + n++);
      cp_to_byte_[byte_to_cp_[b]] = uint8_t(b);
      utf8::append(byte_to_cp_[b], byte_text_[b]);
    }
    // Token texts are UTF-8 (GPT-2's printable code points for bytes): a truncated sequence would make
    // piece() read past the text, so the vocabulary is checked here.
    for (uint32_t i = 0; i < texts_.size(); ++i) {
      for (size_t k = 0; k < texts_[i].size();) {
        const size_t len = utf8::valid_len(texts_[i], k);
        if (len == 0)
          throw Error("'" + f.path() + "': tokenizer.ggml.tokens[" + std::to_string(i) + "] is not valid UTF-8");
        k += len;
      }
      token_id_.emplace(texts_[i], i);
    }
    const auto* merges = f.opt_strings("tokenizer.ggml.merges");
    if (!merges) throw Error("'" + f.path() + "': BPE vocabulary without tokenizer.ggml.merges");
    for (size_t r = 0; r < merges->size(); ++r) {
      const std::string& m = (*merges)[r];
      size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) throw Error("tokenizer.ggml.merges[" + std::to_string(r) + "] is malformed");
      merge_rank_.emplace(m, int(r));
    }
  }

  std::string piece(uint32_t id) const override {
    const TokenType t = types_.at(id);
    if (t == TokenType::Control || t == TokenType::Unused) return "";
    const std::string& s = texts_[id];
    if (t == TokenType::UserDefined) return s;
    std::string out;
    for (size_t i = 0; i < s.size();) {   // each code point back to its byte (texts are valid: checked at load)
      const size_t len = utf8::valid_len(s, i);
      auto it = cp_to_byte_.find(utf8::decode(s, i, len));
      if (it != cp_to_byte_.end()) out += char(it->second);
      else out.append(s, i, len);
      i += len;
    }
    return out;
  }

 protected:
  // Pre-tokenizes maximal runs of valid UTF-8 with the pattern (checked once here, so PCRE2 need not
  // re-validate the subject at every match: that made long texts quadratic); each invalid byte is a word of
  // its own, so one bad byte changes only its own tokens.
  void encode_text(std::string_view text, bool, std::vector<uint32_t>& out) const override {
    std::vector<pcre2_match_data*> md;
    for (const auto& re : res_) md.push_back(pcre2_match_data_create_from_pattern(re.get(), nullptr));
    for (size_t i = 0; i < text.size();) {
      size_t run = i;
      while (run < text.size()) {
        const size_t len = utf8::valid_len(text, run);
        if (len == 0) break;
        run += len;
      }
      if (run > i) encode_valid(text.substr(i, run - i), 0, md, out);
      if (run < text.size()) encode_word(text.substr(run, 1), out);   // an invalid byte
      i = run + (run < text.size() ? 1 : 0);
    }
    for (pcre2_match_data* m : md) pcre2_match_data_free(m);
  }

 private:
  // Pattern `level` splits text into its matches and the text between them, each split by the next pattern
  // (or, after the last, merged into tokens).
  void encode_valid(std::string_view text, size_t level, const std::vector<pcre2_match_data*>& md,
                    std::vector<uint32_t>& out) const {
    if (level == res_.size()) return encode_word(text, out);
    const auto piece = [&](size_t from, size_t to) { encode_valid(text.substr(from, to - from), level + 1, md, out); };
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t start = 0, emitted = 0;   // where the next match is looked for; the text before `emitted` is split
    while (start < text.size()) {
      if (pcre2_match(res_[level].get(), subject, text.size(), start, PCRE2_NO_UTF_CHECK, md[level], nullptr) < 0) break;
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md[level]);
      if (ov[1] == ov[0]) {   // an empty match: step over one code point (it stays in the text between)
        start = ov[0] + utf8::valid_len(text, ov[0]);
        continue;
      }
      if (ov[0] > emitted) piece(emitted, ov[0]);
      piece(ov[0], ov[1]);
      start = emitted = ov[1];
    }
    if (emitted < text.size()) piece(emitted, text.size());   // no more matches: the rest as one piece
  }

  // BPE merges of one pre-token, lowest rank first (leftmost among equal ranks), with a priority queue of
  // candidate pairs over a linked list of symbols: O(m log m) for a word of m bytes (a 100,000-byte word
  // took minutes with the rescan-every-merge loop).
  void encode_word(std::string_view word, std::vector<uint32_t>& out) const {
    const int n = int(word.size());
    std::string s;   // the word in GPT-2 code points; symbol i is s[start[i], start[i] + len[i])
    std::vector<size_t> start(n), len(n);
    for (int i = 0; i < n; ++i) {
      start[i] = s.size();
      s += byte_text_[uint8_t(word[i])];
      len[i] = s.size() - start[i];
    }
    if (ignore_merges_) {
      if (auto it = token_id_.find(s); it != token_id_.end()) { out.push_back(it->second); return; }
    }
    std::vector<int> prev(n), next(n);
    for (int i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
    struct Pair { int rank, left; size_t left_len, right_len; };
    auto later = [](const Pair& a, const Pair& b) { return a.rank != b.rank ? a.rank > b.rank : a.left > b.left; };
    std::priority_queue<Pair, std::vector<Pair>, decltype(later)> queue(later);
    std::string key;
    auto push = [&](int l) {
      const int r = l >= 0 ? next[l] : -1;
      if (r < 0) return;
      key.assign(s, start[l], len[l]);
      key += ' ';
      key.append(s, start[r], len[r]);
      if (auto it = merge_rank_.find(key); it != merge_rank_.end()) queue.push({it->second, l, len[l], len[r]});
    };
    for (int i = 0; i + 1 < n; ++i) push(i);
    while (!queue.empty()) {
      const Pair p = queue.top();
      queue.pop();
      const int l = p.left, r = next[l];
      if (len[l] != p.left_len || r < 0 || len[r] != p.right_len) continue;   // stale: a side merged since
      len[l] += len[r];
      len[r] = 0;
      next[l] = next[r];
      if (next[r] >= 0) prev[next[r]] = l;
      push(prev[l]);
      push(l);
    }
    for (int i = 0; i >= 0 && i < n; i = next[i]) {
      const std::string sym = s.substr(start[i], len[i]);
      if (auto it = token_id_.find(sym); it != token_id_.end()) { out.push_back(it->second); continue; }
      for (size_t k = 0; k < sym.size();) {   // not in vocab: fall back to single-byte symbols
        size_t cl = 1;
        while (k + cl < sym.size() && (((unsigned char)sym[k + cl]) >> 6) == 2) ++cl;
        auto b = token_id_.find(sym.substr(k, cl));
        if (b != token_id_.end()) out.push_back(b->second);
        else if (unk_ >= 0) out.push_back(uint32_t(unk_));
        k += cl;
      }
    }
  }

  // owned here, so that a constructor that throws (a malformed vocabulary) frees it too
  std::vector<std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)>> res_;
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
