#pragma once
// The sampling transforms on the device (shaders/sample_rows.comp): logits rows become dense probability
// rows that stay in device memory, and optionally one token is drawn per row; only the drawn tokens come
// back. Semantics are the host Sampler's (penalty -> top-k -> top-p -> min-p -> temperature, ties by lower
// id), which the tests use as the reference. The device path takes top-k in 1..kMaxTopK, which covers the
// usual configurations; with top-k off or larger, callers keep the host Sampler for every step of a run,
// so plain and speculative sampling always share one implementation.
#include <span>

#include "runtime/kernels.h"
#include "runtime/sampler.h"

namespace vkspec {

class DeviceSampler {
 public:
  static constexpr uint32_t kMaxTopK = 256;
  // RNG streams of the counter-based generator (shaders/spec_accept.comp uses 1 and 2).
  static constexpr uint32_t kStreamPlain = 3, kStreamDraft = 4;
  static bool supports(const SamplingParams& p, uint32_t n_vocab) {
    return !p.greedy() && p.top_k >= 1 && uint32_t(p.top_k) <= kMaxTopK && uint32_t(p.top_k) < n_vocab;
  }

  // max_rows: rows per record(); max_history: the longest context + extra tokens ever passed.
  DeviceSampler(Context& ctx, Pipelines& pipelines, uint32_t n_vocab, uint32_t max_rows, uint32_t max_history);
  ~DeviceSampler();

  // Records the transforms of `rows` logits rows ([rows][n_vocab], penalized in place) into `probs`.
  // Row r's history is `context` followed by extra[0..r) (the drafts before it). With `draw`, row r's
  // token is drawn at counter position + r in `stream`; read it with drawn(r) after the submission.
  // Fused verify: the rows are p_0..p_k, and the last workgroup runs the accept/resample chain of
  // speculative sampling (shaders/accept.glsl) with the draft's q rows and drafts, at counter `position`
  // (the sequence position of the first draft), writing {accepted, next} to `result`. `counter` is a zeroed
  // uint the kernel leaves zeroed.
  struct FusedAccept { Slice q, tokens, result, counter; uint32_t k; };
  void record(Recorder& r, const SamplingParams& p, const Slice& logits, const Slice& probs, uint32_t rows,
              std::span<const uint32_t> context, std::span<const uint32_t> extra, uint64_t position, bool draw,
              uint32_t stream, const FusedAccept* accept = nullptr);
  struct Draw { uint32_t token; float top_prob; };
  Draw drawn(uint32_t row) const;

  // The plain sampling step: one row transformed, drawn (stream kStreamPlain), submitted and waited on.
  uint32_t sample(const SamplingParams& p, const Slice& logits_row, std::span<const uint32_t> context,
                  uint64_t position);

 private:
  Pipelines& pipelines_;
  uint32_t n_vocab_, max_rows_, max_history_;
  std::unique_ptr<Arena> device_, upload_, readback_;
  std::unique_ptr<Recorder> rec_;
  Slice history_, draws_, scratch_probs_;
};

}  // namespace vkspec
