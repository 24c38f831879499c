#include "engine/step_plan.h"

#include <algorithm>

namespace vkspec {

StepPlan build_plan(std::span<const StepDemand> demand, uint32_t step_rows, uint32_t min_prefill) {
  StepPlan plan;
  const auto add = [&](uint32_t i, StepPart part, uint32_t rows) {
    plan.rows.push_back({i, part, rows});
    plan.n_rows += rows;
  };
  for (uint32_t i = 0; i < demand.size(); ++i)
    if (demand[i].part == StepPart::Verify) add(i, StepPart::Verify, demand[i].rows);
  for (uint32_t i = 0; i < demand.size(); ++i)
    if (demand[i].part == StepPart::Decode || demand[i].part == StepPart::PlainRound) add(i, demand[i].part, 1);
  const uint32_t budget = std::max(step_rows, plan.n_rows + min_prefill);
  for (uint32_t i = 0; i < demand.size() && plan.n_rows < budget; ++i) {
    if (demand[i].part != StepPart::Prefill || demand[i].rows == 0) continue;
    const uint32_t take = std::min(budget - plan.n_rows, demand[i].rows);
    add(i, take == demand[i].rows ? StepPart::PrefillLast : StepPart::Prefill, take);
    plan.prefill_rows += take;
  }
  return plan;
}

}  // namespace vkspec
