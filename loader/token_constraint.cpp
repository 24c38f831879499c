#include "loader/token_constraint.h"

#include "loader/tokenizer.h"

namespace vkspec {

VocabBytes::VocabBytes(const Tokenizer& tok) : pieces(tok.n_vocab()), eog_flags(tok.n_vocab(), false) {
  for (uint32_t t = 0; t < tok.n_vocab(); ++t) {
    if (tok.is_eog(t)) {
      eog.push_back(t);
      eog_flags[t] = true;
    } else {
      pieces[t] = tok.piece(t);
    }
  }
}

}  // namespace vkspec
