#pragma once
// What one batched step's pass holds, decided as data before anything is recorded (build_plan), so that the
// rule is one function and its tests need no device. The pass runs its rows in plan order; the rows that
// give logits (Verify: all of them; Decode, PlainRound, PrefillLast: the last) give them in the same order.
#include <cstdint>
#include <span>
#include <vector>

namespace vkspec {

enum class StepPart : uint8_t {
  None,         // not in this step
  Prefill,      // a chunk of its prompt, no logits
  PrefillLast,  // the rest of its prompt; its last row's logits choose the first token
  Decode,       // one row: the token chosen last step
  Verify,       // a speculative round: [g, d1..dK], every row's logits
  PlainRound,   // a speculative round drafting nothing this step: a decode row, its choice in the verify slot
};

// What a sequence asks of this step: Verify with its rows (drafts recorded), Decode or PlainRound (one row),
// Prefill with the prompt tokens it has left, or None.
struct StepDemand {
  StepPart part = StepPart::None;
  uint32_t rows = 0;
};

struct PlannedRows {
  uint32_t sequence;   // the index of its demand
  StepPart part;
  uint32_t rows;       // in the pass
};

struct StepPlan {
  std::vector<PlannedRows> rows;   // pass order: verify rows, then decode rows, then prefill
  uint32_t n_rows = 0, prefill_rows = 0;
  bool empty() const { return rows.empty(); }
};

// Decoding sequences first (a step's latency is every running stream's): the verify rows, then the decode
// rows, in sequence order; then prompts fill the rest of `step_rows`, in sequence order, and at least
// `min_prefill` rows beyond the decode rows, so that a new request always makes progress.
StepPlan build_plan(std::span<const StepDemand> demand, uint32_t step_rows, uint32_t min_prefill);

}  // namespace vkspec
