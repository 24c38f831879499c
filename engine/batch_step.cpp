// The plan, record and commit phases of a batched step (the loop is BatchEngine::step, engine/batch_engine.cpp).
#include <algorithm>

#include "engine/batch_engine.h"

namespace vkspec {

// What each sequence asks of this step. Speculative sequences go first: each emits its last choice g
// (SpeculativeDecoder::start), picks its K (priced at its share of the pass: the decoding sequences share it;
// a prompt chunk in the same pass is left out, it costs the pass whatever the drafts do) and drafts, a draft
// model's steps batched across the sequences; K = 0 makes its round a plain decode row.
void BatchEngine::draft_and_demand(std::vector<StepDemand>& demand, DraftSteps& drafts) {
  const uint32_t decoding = uint32_t(std::count_if(slots_.begin(), slots_.end(), [](const auto& s) {
    return s->req && s->decoding;
  }));
  std::optional<SharedCosts> costs = SharedCosts::measured(pass_costs_, draft_step_costs_, decoding);
  std::vector<BatchedDraft> batched;
  std::vector<uint32_t> batched_slots;
  uint32_t model_steps = 0;   // the batched draft steps that the sequences planned so far run
  for (auto& sp : slots_) {
    RequestSlot& s = *sp;
    if (!s.req || !s.decoding || !s.sequence->spec) continue;
    Sequence& q = *s.sequence;
    SpeculativeDecoder& spec = *q.spec;
    demand[s.index].part = StepPart::Verify;   // (from here a failure ends it with the step's)
    if (!spec.start()) {
      end(s, StopReason::Context);   // (unless the stop rule ended it first)
      demand[s.index] = {};
      continue;
    }
    if (costs) costs->joined_steps = model_steps;
    const uint32_t k_max = spec.drafts_planned(decoding, costs);
    if (k_max == 0) {
      spec.drafts_recorded(0);
      demand[s.index] = {StepPart::PlainRound, 1};
      continue;
    }
    const Drafted d = q.drafter->draft(q.context, k_max, spec.draft_round());
    if (d.model) {   // its steps batched with the other sequences' below
      batched.push_back({d.model, q.context, k_max, &spec.draft_round()});
      batched_slots.push_back(s.index);
      model_steps = std::max(model_steps, k_max);
    } else {
      demand[s.index] = {StepPart::Verify, spec.drafts_recorded(d.written)};
    }
  }
  if (!batched.empty()) {
    drafts.begin = rec_->mark();
    drafts.rows = record_batched_drafts(*draft_model_->model, batched, draft_logits_, *choices_);
    drafts.end = rec_->mark();
    for (size_t j = 0; j < batched.size(); ++j) {
      drafts.steps = std::max(drafts.steps, batched[j].steps);
      demand[batched_slots[j]] = {StepPart::Verify, slots_[batched_slots[j]]->sequence->spec->drafts_recorded(batched[j].k)};
    }
  }
  for (auto& sp : slots_) {
    RequestSlot& s = *sp;
    if (!s.req || s.req->embed || demand[s.index].part != StepPart::None) continue;   // (embeddings: run_embedding)
    if (s.decoding) demand[s.index] = {StepPart::Decode, 1};
    else demand[s.index] = {StepPart::Prefill, uint32_t(s.sequence->context.size()) - s.sequence->cached};
  }
}

// The target pass's rows, in plan order. Decode rows carry the token chosen last step (context.back(): its
// slot 0, or a speculative round's g) host-written, so that their ids are contiguous and the pass embeds them
// in one dispatch.
std::vector<SeqRows> BatchEngine::pass_rows(const StepPlan& plan) {
  LlamaModel& m = *t_->model;
  std::vector<SeqRows> rows;
  for (const PlannedRows& p : plan.rows) {
    const RequestSlot& s = *slots_[p.sequence];
    const Sequence& q = *s.sequence;
    switch (p.part) {
      case StepPart::Verify:
        rows.push_back({s.seq, q.spec->verify_input(), p.rows, Logits::All, q.spec->verify_tree()});
        break;
      case StepPart::Decode:
      case StepPart::PlainRound:
        rows.push_back({s.seq, m.write_tokens(std::span(q.context).last(1)), 1, Logits::Last});
        break;
      case StepPart::Prefill:
      case StepPart::PrefillLast:
        rows.push_back({s.seq, m.write_tokens(std::span(q.context).subspan(q.cached, p.rows)), p.rows,
                        p.part == StepPart::PrefillLast ? Logits::Last : Logits::None});
        break;
      case StepPart::None:
        throw Error("internal: a planned row of no part");
    }
  }
  return rows;
}

// Each sequence's choice or verification from its logits rows (in the order of the pass's rows). The choices
// are recorded together (BatchedChoices): one argmax for consecutive greedy rows, one sample_rows dispatch
// for every sampled row, instead of a dispatch and a barrier per sequence (on lavapipe a one-row dispatch
// is one workgroup on one core, then a barrier idles the other).
void BatchEngine::record_choices(const StepPlan& plan) {
  LlamaModel& m = *t_->model;
  Recorder& rec = *rec_;
  const VkDeviceSize row_bytes = VkDeviceSize(m.hparams().n_vocab) * 4;
  uint32_t at = 0;
  for (const PlannedRows& p : plan.rows) {
    RequestSlot& s = *slots_[p.sequence];
    Sequence& q = *s.sequence;
    const Slice logits = logits_.sub(at * row_bytes, logits_.size - at * row_bytes);
    if (p.part == StepPart::Verify) {
      q.spec->record_verify(logits);
      at += p.rows;
    } else if (p.part != StepPart::Prefill) {
      TokenChooser& ch = *s.chooser;
      if (s.req->logits)   // read back (before sampling penalizes the row in place: choices_ orders them)
        rec.copy(logits.sub(0, row_bytes), logits_host_.sub(s.index * row_bytes, row_bytes));
      // (a plain round's history was set when it was planned; its choice goes where SpeculativeDecoder::finish
      // reads its verdict)
      const bool plain_round = p.part == StepPart::PlainRound;
      const uint32_t history = plain_round ? q.spec->history_len()
                               : ch.mode() == ChoiceMode::Device ? ch.set_history(q.context) : 0;
      const uint32_t slot = plain_round ? TokenChooser::kVerifySlot : 0;
      choices_->add(rec, m.kernels(), ch, logits.sub(0, row_bytes), slot, history, q.context.size());
      at += 1;
    }
  }
  choices_->record(rec, m.kernels());
}

// After the step's wait: what its part of the pass gave this sequence (may end the request).
void BatchEngine::commit(RequestSlot& s, StepPart part, uint32_t rows) {
  LlamaModel& m = *t_->model;
  Sequence& q = *s.sequence;
  const float* row = s.req->logits ? logits_host_.host<float>() + size_t(s.index) * m.hparams().n_vocab : nullptr;
  if (part == StepPart::Prefill || part == StepPart::PrefillLast) {
    q.cached += rows;
    q.result.prefilled += rows;
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.prefilled_tokens += rows;
  }
  switch (part) {
    case StepPart::Prefill:
    case StepPart::None:
      break;
    case StepPart::PrefillLast:
      s.decoding = true;
      if (q.drafter) {   // the decoder emits the first token at its first round
        q.start_speculating(m, s.seq, *s.chooser, *rec_, {o_.max, o_.min, o_.policy, /*timing_free=*/true,
                                                     s.req->draft_tree.value_or(o_.tree)});
        break;
      }
      [[fallthrough]];
    case StepPart::Decode: {
      const uint32_t t = s.chooser->token(0);
      if (!q.take(t, false, row) || !q.feed_back(t, m.n_ctx())) end(s, q.stop());
      break;
    }
    case StepPart::Verify:
    case StepPart::PlainRound:
      if (!q.spec->finish()) end(s, StopReason::Context);   // (unless the stop rule ended it first)
      break;
  }
}

}  // namespace vkspec
