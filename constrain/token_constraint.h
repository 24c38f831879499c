#pragma once
// Constrained generation (JSON mode: constrain/json_grammar.h; GBNF grammars: constrain/gbnf.h): what the token
// chooser and the engines need of a constraint. Before each choice the host asks it for the mask of allowed
// tokens, which the device sampler applies (SampleRow.mask); each chosen token advances it.
#include <cstdint>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "shaders/contract.h"

namespace vkspec {

class Tokenizer;

// Tokens in byte order of their pieces; common[i]: the bytes token i shares with token i - 1. Tokens that
// share a prefix are consecutive, so a walk skips all of those that share one a constraint rejects.
struct SortedTokens {
  std::vector<uint32_t> tokens, common;
  size_t longest = 0;   // bytes of the longest piece
};

// The vocabulary as text: each token's bytes as generation writes them, made once per model.
struct VocabBytes {
  explicit VocabBytes(const Tokenizer& tok);
  // pieces[t] for every token ("" for the end-of-generation ones, listed in eog): tests and the fuzzer
  VocabBytes(std::vector<std::string> pieces, std::vector<uint32_t> eog);
  uint32_t n_vocab() const { return uint32_t(pieces.size()); }
  bool is_eog(uint32_t t) const { return t < eog_flags.size() && eog_flags[t]; }
  SortedTokens sorted(std::vector<uint32_t> tokens) const;
  std::vector<std::string> pieces;   // "" for control tokens and end-of-generation tokens
  std::vector<uint32_t> eog;         // end-of-generation tokens: allowed once the text is complete
  std::vector<bool> eog_flags;
  SortedTokens with_piece;           // every token with a piece
};

// Sets the bit of each token of `s` that the constraint allows after `start`: feed(state, byte) advances a
// state by one byte of a token (false: no text continues so), ends(state) says whether a token may end there.
// Each token's bytes are fed from the state after the prefix it shares with the token before it (at[d]: the
// state after d bytes), and the tokens after one whose first d bytes failed are skipped while they share
// those d bytes.
template <class State, class Feed, class Ends>
void walk_sorted(const VocabBytes& v, const SortedTokens& s, const State& start, Feed feed, Ends ends,
                 std::span<uint32_t> bits) {
  thread_local std::vector<State> at;
  at.resize(s.longest + 1);
  at[0] = start;
  size_t dead = SIZE_MAX;   // the length of the rejected prefix
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    if (s.common[i] >= dead) continue;
    dead = SIZE_MAX;
    const uint32_t t = s.tokens[i];
    const std::string& p = v.pieces[t];
    size_t d = s.common[i];
    for (; d < p.size(); ++d) {
      at[d + 1] = at[d];
      if (!feed(at[d + 1], uint8_t(p[d]))) break;
    }
    if (d < p.size()) dead = d + 1;
    else if (ends(at[d])) bits[TOKEN_MASK_WORD(t)] |= TOKEN_MASK_BIT(t);
  }
}

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // `bits` ([TOKEN_MASK_WORDS(n_vocab)] words, all written; shaders/contract.h): token t may come next.
  virtual void allowed(std::span<uint32_t> bits) const = 0;
  // Speculation with drafts the host wrote (prompt lookup): for each leading draft the constraint allows,
  // the mask after it, into mask(1), mask(2), ... (the verify rows after the drafts); returns how many
  // drafts that is (the rest could never be accepted).
  virtual uint32_t draft_masks(std::span<const uint32_t> drafts,
                               const std::function<std::span<uint32_t>(uint32_t row)>& mask) const = 0;
  // Advances past a chosen token; throws an internal error for one that allowed() did not allow.
  virtual void accept(uint32_t token) = 0;
  // The text so far is complete (end-of-generation tokens are allowed).
  virtual bool complete() const = 0;

  // Whether any token of a vocabulary of n_vocab may come next (a grammar may accept no text the vocabulary
  // can write, say one of an empty character class): refused as the request's fault, before a row whose
  // every token is masked is sampled.
  bool allows_any(uint32_t n_vocab) const;
};
// A mask that allows no token: the text so far has no continuation the vocabulary can write.
inline bool mask_allows_none(std::span<const uint32_t> bits) {
  for (const uint32_t w : bits)
    if (w) return false;
  return true;
}

}  // namespace vkspec
