#pragma once
// Constrained generation (JSON mode: loader/json_grammar.h; GBNF grammars: loader/gbnf.h): what the token
// chooser and the engines need of a constraint. Before each choice the host asks it for the mask of allowed
// tokens, which the device sampler applies (SampleRow.mask); each chosen token advances it.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace vkspec {

class Tokenizer;

// The vocabulary as text: each token's bytes as generation writes them, made once per model.
struct VocabBytes {
  explicit VocabBytes(const Tokenizer& tok);
  uint32_t n_vocab() const { return uint32_t(pieces.size()); }
  bool is_eog(uint32_t t) const { return t < eog_flags.size() && eog_flags[t]; }
  std::vector<std::string> pieces;   // "" for control tokens and end-of-generation tokens
  std::vector<uint32_t> eog;         // end-of-generation tokens: allowed once the text is complete
  std::vector<bool> eog_flags;
};

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Bit t of `bits` ([ceil(n_vocab / 32)] words, all written): token t may come next.
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
};

}  // namespace vkspec
