#include "constrain/token_constraint.h"

#include <algorithm>

#include "text/tokenizer.h"
#include "core/core.h"

namespace vkspec {

VocabBytes::VocabBytes(const Tokenizer& tok) : pieces(tok.n_vocab()), eog_flags(tok.n_vocab(), false) {
  std::vector<uint32_t> all;
  for (uint32_t t = 0; t < tok.n_vocab(); ++t) {
    if (tok.is_eog(t)) {
      eog.push_back(t);
      eog_flags[t] = true;
    } else {
      pieces[t] = tok.piece(t);
      if (!pieces[t].empty()) all.push_back(t);
    }
  }
  with_piece = sorted(std::move(all));
}

VocabBytes::VocabBytes(std::vector<std::string> p, std::vector<uint32_t> e)
    : pieces(std::move(p)), eog(std::move(e)), eog_flags(pieces.size(), false) {
  std::vector<uint32_t> all;
  for (uint32_t t : eog) {
    if (t >= pieces.size()) throw Error("internal: an end-of-generation token outside the vocabulary");
    eog_flags[t] = true;
    pieces[t].clear();
  }
  for (uint32_t t = 0; t < pieces.size(); ++t)
    if (!pieces[t].empty()) all.push_back(t);
  with_piece = sorted(std::move(all));
}

SortedTokens VocabBytes::sorted(std::vector<uint32_t> tokens) const {
  std::sort(tokens.begin(), tokens.end(), [&](uint32_t a, uint32_t b) { return pieces[a] < pieces[b]; });
  SortedTokens s{std::move(tokens), {}, 0};
  s.common.resize(s.tokens.size());
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    const std::string& p = pieces[s.tokens[i]];
    s.longest = std::max(s.longest, p.size());
    if (i == 0) continue;
    const std::string& q = pieces[s.tokens[i - 1]];
    const size_t n = std::min(p.size(), q.size());
    s.common[i] = uint32_t(std::mismatch(p.begin(), p.begin() + long(n), q.begin()).first - p.begin());
  }
  return s;
}

bool TokenConstraint::allows_any(uint32_t n_vocab) const {
  std::vector<uint32_t> bits(TOKEN_MASK_WORDS(n_vocab));
  allowed(bits);
  return !mask_allows_none(bits);
}

}  // namespace vkspec
