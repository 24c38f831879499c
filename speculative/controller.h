#pragma once
// The speculative decoding loop. Per round: draft up to K tokens after the last accepted token g, run the
// target once over [g, d1..dK], decide how many drafts to keep and the token after them, and truncate the
// target's paged KV back to the accepted length.
//   Greedy: keep the longest prefix of drafts equal to the target's own choice; the next token is the
//           target's choice after it. Every kernel is batch-invariant, so the verify pass computes
//           bit-identical logits to plain decoding and the output equals plain greedy decoding.
//   Sampling: exact rejection sampling in the fused kernel (speculative/acceptance.h), so the output is
//           distributed exactly as sampling the target alone.
#include <functional>
#include <span>
#include <vector>

#include "speculative/acceptance.h"
#include "speculative/drafter.h"

namespace vkspec {

struct SpeculativeOptions {
  uint32_t draft_max = 5;   // K
  uint32_t draft_min = 0;   // rounds with fewer drafted tokens decode plainly
  const Sampler* sampler = nullptr;   // null or greedy: greedy verification
  SpecAcceptor* acceptor = nullptr;   // required when sampling (n_vocab of the target, max_k >= draft_max)
  // Adaptive K (speculative/draft_policy.h): greedy runs take the K in 0..draft_max with the best expected
  // tokens per second from the measured acceptance, draft and verify costs; sampled runs use modeled costs
  // (weight bytes) so that a seed reproduces its output. Otherwise always draft_max.
  bool adaptive = false;
};

struct SpeculativeStats {
  uint64_t drafted = 0, accepted = 0, verify_passes = 0, tokens = 0;
  double acceptance_rate() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
  double tokens_per_verify() const { return verify_passes ? double(tokens) / double(verify_passes) : 0.0; }
  SpeculativeStats& operator+=(const SpeculativeStats& o) {
    drafted += o.drafted, accepted += o.accepted, verify_passes += o.verify_passes, tokens += o.tokens;
    return *this;
  }
};

// Generates after `context` (already prefilled in `seq`, its last token's logits current in the target).
// `emit` receives each accepted token in order and returns false to stop (EOS, n reached).
SpeculativeStats generate_speculative(LlamaModel& target, int seq, Drafter& drafter, std::vector<uint32_t>& context,
                                      const SpeculativeOptions& opts, const std::function<bool(uint32_t)>& emit);

}  // namespace vkspec
