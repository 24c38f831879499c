#include "engine/sequence.h"

namespace vkspec {

uint32_t reusable_prefix(std::span<const uint32_t> held, std::span<const uint32_t> prompt) {
  uint32_t common = 0;
  while (common < held.size() && common + 1 < prompt.size() && held[common] == prompt[common]) ++common;
  return common;
}

Sequence::Sequence(std::span<const uint32_t> prompt, uint32_t max_tokens, bool ignore_eos, const Tokenizer& tok,
                   const std::atomic<bool>* cancel, TokenSink on_token)
    : context(prompt.begin(), prompt.end()), max_tokens_(max_tokens), ignore_eos_(ignore_eos), tok_(tok),
      cancel_(cancel), on_token_(std::move(on_token)) {
  if (max_tokens == 0) throw Error("internal: a sequence that may generate nothing");
  result.prompt_tokens = uint32_t(prompt.size());
}

StopReason Sequence::check_stop(uint32_t t, bool from_draft, const float* logits_row) {
  if (cancelled()) return StopReason::Cancelled;
  if (constraint) constraint->accept(t);
  if (!ignore_eos_ && tok_.is_eog(t)) return StopReason::Eos;
  result.ids.push_back(t);
  if (on_token_ && !on_token_(t, from_draft, logits_row)) return StopReason::Stopped;
  if (result.ids.size() >= max_tokens_) return StopReason::Length;
  return StopReason::None;
}

bool Sequence::feed_back(uint32_t t, uint32_t n_ctx) {
  context.push_back(t);
  if (context.size() < n_ctx) return true;
  end(StopReason::Context);
  return false;
}

void Sequence::start_speculating(LlamaModel& target, int kv_seq, TokenChooser& chooser, Recorder& rec,
                                 const SpeculativeOptions& so) {
  if (!drafter) throw Error("internal: speculating without a drafter");
  spec = std::make_unique<SpeculativeDecoder>(target, kv_seq, *drafter, chooser, rec, context, so,
                                              [this](uint32_t t, bool from_draft) { return take(t, from_draft); });
}

}  // namespace vkspec
