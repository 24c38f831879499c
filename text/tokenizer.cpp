#include "text/tokenizer.h"
#include "core/utf8.h"

#include <algorithm>
#include <cmath>

namespace vkspec {

Tokenizer::Tokenizer(const GgufFile& f) {
  model_ = f.get_string("tokenizer.ggml.model");
  const auto* tokens = f.opt_strings("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty()) throw Error("'" + f.path() + "': no tokenizer.ggml.tokens vocabulary");
  texts_ = *tokens;
  const size_t n = texts_.size();
  if (const auto s = f.opt_numbers("tokenizer.ggml.scores")) {
    if (s->size() != n) throw Error("tokenizer.ggml.scores has " + std::to_string(s->size()) + " entries, vocabulary " + std::to_string(n));
    scores_.assign(s->begin(), s->end());
  } else {
    scores_.assign(n, 0.f);
  }
  types_.assign(n, TokenType::Normal);
  if (const auto t = f.opt_numbers("tokenizer.ggml.token_type")) {
    if (t->size() != n) throw Error("tokenizer.ggml.token_type has " + std::to_string(t->size()) + " entries, vocabulary " + std::to_string(n));
    for (size_t i = 0; i < n; ++i) {
      double v = (*t)[i];
      if (!(v >= 0 && v <= 6) || v != std::floor(v))   // NaN fails too (casting it would be undefined)
        throw Error("tokenizer.ggml.token_type[" + std::to_string(i) + "] is invalid");
      types_[i] = TokenType(int(v));
    }
  }
  auto id_key = [&](const char* key, int def) {
    auto v = f.opt_number(key);
    if (!v) return def;
    if (!(*v >= 0 && *v < double(n)) || *v != std::floor(*v))   // NaN fails too (casting it would be undefined)
      throw Error(std::string("GGUF key '") + key + "' is not a token id of the vocabulary");
    return int(*v);
  };
  const bool spm = model_ == "llama";
  bos_ = id_key("tokenizer.ggml.bos_token_id", spm ? 1 : -1);
  eos_ = id_key("tokenizer.ggml.eos_token_id", spm ? 2 : -1);
  unk_ = id_key("tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
  if (bos_ >= int(n)) bos_ = -1;
  if (eos_ >= int(n)) eos_ = -1;
  add_bos_ = f.find("tokenizer.ggml.add_bos_token") ? f.opt_number("tokenizer.ggml.add_bos_token").value() != 0 : spm;
  if (add_bos_ && bos_ < 0) throw Error("tokenizer asks for BOS but has no bos_token_id");

  // End-of-generation: EOS, EOT/EOM ids, and the Llama 3 / chat markers llama.cpp also treats as such.
  if (eos_ >= 0) eog_.push_back(uint32_t(eos_));
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (int id = id_key(key, -1); id >= 0) eog_.push_back(uint32_t(id));
  for (uint32_t i = 0; i < n; ++i)
    if (types_[i] == TokenType::Control &&
        (texts_[i] == "<|eot_id|>" || texts_[i] == "<|eom_id|>" || texts_[i] == "<|end_of_text|>" || texts_[i] == "<|endoftext|>" ||
         texts_[i] == "<|im_end|>" || texts_[i] == "<|end|>" || texts_[i] == "<end_of_turn>" || texts_[i] == "<EOT>" ||
         texts_[i] == "<｜end▁of▁sentence｜>"))   // (DeepSeek-R1 distills)
      if (std::find(eog_.begin(), eog_.end(), i) == eog_.end()) eog_.push_back(i);

  for (uint32_t i = 0; i < n; ++i)
    if ((types_[i] == TokenType::Control || types_[i] == TokenType::UserDefined || types_[i] == TokenType::Unknown) &&
        !texts_[i].empty())
      specials_.push_back(i);
  std::stable_sort(specials_.begin(), specials_.end(),
                   [&](uint32_t a, uint32_t b) { return texts_[a].size() > texts_[b].size(); });
  for (uint32_t id : specials_) specials_by_byte_[uint8_t(texts_[id][0])].push_back(id);
}

bool Tokenizer::is_eog(uint32_t id) const { return std::find(eog_.begin(), eog_.end(), id) != eog_.end(); }

std::vector<uint32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<uint32_t> out;
  if (add_bos && bos_ >= 0) out.push_back(uint32_t(bos_));
  bool after_special = true;
  size_t pos = 0, scan = 0;
  while (pos < text.size()) {
    // the earliest special token at or after pos (the longest where several start at one position); `scan`
    // only moves forward, so the whole text is scanned once
    int best = -1;
    for (scan = std::max(scan, pos); scan < text.size() && best < 0; ++scan)
      for (uint32_t id : specials_by_byte_[uint8_t(text[scan])])
        if ((parse_special || types_[id] == TokenType::UserDefined) && text.compare(scan, texts_[id].size(), texts_[id]) == 0) {
          best = int(id);
          break;
        }
    const size_t end = best < 0 ? text.size() : scan - 1;
    if (end > pos) {
      encode_text(text.substr(pos, end - pos), after_special, out);
      after_special = false;
    }
    if (best < 0) break;
    out.push_back(uint32_t(best));
    after_special = true;
    pos = end + texts_[best].size();
  }
  return out;
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& f) {
  std::string model = f.get_string("tokenizer.ggml.model");
  if (model == "llama") return make_spm_tokenizer(f);
  if (model == "gpt2") return make_bpe_tokenizer(f);
  throw Error("tokenizer model '" + model + "' is not supported (llama = SentencePiece, gpt2 = byte-level BPE)");
}

// Each maximal ill-formed subpart becomes one U+FFFD, like Python's decode(errors="replace"); a sequence cut
// off by the end of what has come so far waits for the next piece.
std::string Utf8Stream::push(const std::string& bytes) {
  pending_ += bytes;
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const utf8::Sequence q = utf8::scan(pending_, i);
    if (q.kind == utf8::Sequence::Truncated) break;   // hold back
    if (q.kind == utf8::Sequence::Valid) out.append(pending_, i, q.len);
    else out += utf8::kReplacement;
    i += q.len;
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8Stream::finish() {
  // what is held back is one truncated prefix: one U+FFFD, never lost silently
  std::string out = pending_.empty() ? "" : std::string(utf8::kReplacement);
  pending_.clear();
  return out;
}

}  // namespace vkspec
