#pragma once
// The sampling transforms on the device (shaders/sample_rows.comp), the only sampling implementation that
// generation uses: logits rows become dense probability rows that stay in device memory, and optionally
// one token is drawn per row into token slots. Semantics are the host Sampler's (logit bias -> penalties ->
// JSON mode's mask (-inf) -> top-k -> top-p -> min-p -> temperature, ties by lower id), which the tests use
// as the reference, for every setting: top-k in 1..kMaxTopK ranks its candidates in shared memory, top-k off or larger takes the
// general path (rank-prefix cuts found by radix selection on mass). Draws use shaders/rng.h (runtime/rng.h
// mirrors it).
#include <span>

#include "runtime/kernels.h"
#include "runtime/rng.h"
#include "runtime/sampling_params.h"

namespace vkspec {

class DeviceSampler {
 public:
  static constexpr uint32_t kMaxTopK = contract::MAX_TOP_K;   // the shared-memory path of sample_rows
  static bool supports(const SamplingParams& p, uint32_t n_vocab) { return !p.greedy() && n_vocab > 0; }

  // Lanes per row of sample_rows on a device (device_sampler.cpp says why), and whether `lanes` fit its
  // shared memory and workgroup limits.
  static uint32_t lanes_for(const DeviceFacts& f);
  static bool lanes_fit(const DeviceFacts& f, uint32_t lanes);

  // max_rows: rows per record(); max_history: the longest context + extra tokens ever passed; lanes: 0 for
  // lanes_for(device), else a power of two >= 64 that fits (tests run the GPUs' lane counts on lavapipe).
  // texel_reads: CPU devices read logits through a texel buffer where they can (texel_logits); false keeps
  // the device-address variant everywhere (tests compare the two). submission_rows: the most rows recorded
  // in one submission (0: 4 max_rows, a verify pass and a round's draft steps).
  DeviceSampler(VulkanDevice& ctx, Pipelines& pipelines, uint32_t n_vocab, uint32_t max_rows, uint32_t max_history,
                uint32_t lanes = 0, bool texel_reads = true, uint32_t submission_rows = 0);
  ~DeviceSampler();

  // The host-written inputs of the next records: p's logit bias, and the penalties' history (the context's
  // last repeat_last_n tokens, then `extra`). Returns the number of context tokens kept (the history length
  // before any extra token). Every record of one submission must see the same history and bias (append
  // device-chosen tokens with record_append_history instead).
  uint32_t set_history(const SamplingParams& p, std::span<const uint32_t> context, std::span<const uint32_t> extra = {});
  // JSON mode's mask of row `row` of the next records (Rows: row r of a record; a BatchRow: row 0) for
  // SamplingParams::constrained(): [ceil(n_vocab / 32)] words in upload memory, bit t set: token t allowed;
  // written by the host like the history.
  std::span<uint32_t> mask_words(uint32_t row = 0);
  // Copies the tokens of token slots [first, first + n) to history positions at, at + 1, ... on the device
  // (drafts chosen in this submission, which the penalty of later rows must see).
  void record_append_history(Recorder& r, const Slice& slots, uint32_t first, uint32_t n, uint32_t at);

  struct Rows {
    Slice logits, probs;            // [rows][n_vocab]: logits penalized in place; probability rows out (none:
                                    // not written; generation only draws)
    uint32_t rows = 1;
    uint32_t history_len = 0;       // history tokens before row 0's position; row r sees history_len + r
    uint64_t position = 0;          // counter position of row 0's draw
    const Slice* draws = nullptr;   // token slots that row r's draw goes to ({token, top probability}); null: no draw
  };
  void record(Recorder& r, const SamplingParams& p, const Rows& rows);

  // One row of a batched record: rows of several sequences, each with its own settings, history and token
  // slot, sampled and drawn in one dispatch (a batched decoding step). Made by the sequence's own sampler
  // (row()), whose history it reads; recorded by any sampler of the same vocabulary (record_rows).
  struct BatchRow {
    contract::SampleRow entry;
    VkBufferView texels = VK_NULL_HANDLE;   // the logits' texel view where texel_logits allows it, else null
  };
  // Row `logits` (one [n_vocab] row) at the history set last by set_history (history_len tokens before it),
  // drawn at counter `position` into the token slot `draw`; probabilities into `probs` (none: not written).
  BatchRow row(const SamplingParams& p, const Slice& logits, const Slice& probs, const Slice& draw,
               uint32_t history_len, uint64_t position) const;
  void record_rows(Recorder& r, std::span<const BatchRow> rows);

  // Records the transforms of `rows` logits rows ([rows][n_vocab], penalized in place) into `probs`.
  // Row r's history is `context` followed by extra[0..r) (the drafts before it). With `draw`, row r's
  // token is drawn at counter position + r; read it with drawn(r) after the submission.
  // Convenience: set_history(context, extra) and record, drawing into this sampler's own slots (drawn()).
  void record(Recorder& r, const SamplingParams& p, const Slice& logits, const Slice& probs, uint32_t rows,
              std::span<const uint32_t> context, std::span<const uint32_t> extra, uint64_t position, bool draw);
  struct Draw { uint32_t token; float top_prob; };
  Draw drawn(uint32_t row) const;

  // Which sample_rows variant a record uses, decided here only: sample_rows_texels (logits through a texel
  // buffer, shaders/sample_rows.comp says why) on CPU devices for rows of whole texels whose logits are
  // not adjusted (SamplingParams::adjusts_logits: no bias, no penalty).
  bool texel_logits(bool adjusted, const Slice& logits) const;

 private:
  // texels: the row is read through its texel view (texel_logits, decided once by the caller)
  contract::SampleRow entry(const SamplingParams& p, const Slice& logits, const Slice& probs, uint64_t draw,
                            uint32_t h_end, uint64_t position, bool texels, uint32_t mask_row) const;
  // n entries of the row table for the recording in `r`, to be filled by the caller before dispatch().
  std::span<contract::SampleRow> table_rows(const Recorder& r, uint32_t n);
  // One dispatch over the entries table_rows() just gave (texels: the view every row's logits are read
  // through, or null for device-address reads).
  void dispatch(Recorder& r, std::span<const contract::SampleRow> entries, VkBufferView texels, uint32_t flags);

  Pipelines& pipelines_;
  uint32_t n_vocab_, max_rows_, max_history_;
  uint32_t lanes_;   // lanes per row (workgroup size) of sample_rows
  bool texel_reads_;
  std::unique_ptr<Arena> upload_, readback_;
  Slice history_, bias_, mask_, draws_;   // bias_: SamplingParams::kMaxLogitBias {token, bias} pairs
  // The row table: a ring of SampleRow entries, written at record time and read by the submission.
  // Invariant: one recording (Recorder::recording()) takes at most table_rows_ entries, the slots a
  // wrap-around skips included, so no entry is rewritten before the submission that reads it has run
  // (checked in table_rows()).
  Slice table_;
  uint32_t table_rows_ = 0, table_next_ = 0, table_used_ = 0;
  uint64_t table_recording_ = 0;
};

}  // namespace vkspec
