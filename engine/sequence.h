#pragma once
// One request, whichever engine runs it (Engine: one at a time; BatchEngine: many in one step): what it owns
// (its tokens, its constraint, its drafter and speculative decoder) and what it decides (check_stop; whether
// it speculates: can_speculate in speculative/drafter.h; how much of a cached prefix it reuses), with the one
// result type both engines return. The engines own the device side: the KV sequence it runs in and the token
// chooser it borrows.
//
// Invariants: `context` starts with the prompt and grows only by fed-back tokens; result.ids are the tokens
// check_stop let through, in order; the first stop reason recorded (end) is the one reported.
#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "constrain/token_constraint.h"
#include "text/tokenizer.h"
#include "speculative/controller.h"

namespace vkspec {

enum class StopReason : uint8_t {
  None,        // still running
  Eos,         // an end-of-generation token (not part of the output)
  Length,      // max_tokens reached
  Context,     // the context is full
  Stopped,     // the token callback asked to stop
  Cancelled,   // the cancel flag was set
  Error,       // a step failed (SequenceResult::error says what)
  Embedded,    // an embedding request finished
};

struct SequenceResult {
  StopReason stop = StopReason::None;
  std::string error;
  std::vector<uint32_t> ids;   // generated tokens (an end-of-generation token excluded)
  uint32_t prompt_tokens = 0;
  uint32_t reused = 0;      // leading prompt tokens whose K/V a cache already held (a session, another sequence)
  uint32_t prefilled = 0;   // prompt tokens this request ran
  bool speculative = false;
  SpeculativeStats spec;
  double queued_s = 0, prefill_s = 0, decode_s = 0;   // admission wait (batches), first token, the rest
  double prefill_pipelines_s = 0, decode_pipelines_s = 0;   // Engine only: of those, creating pipelines (a first run)
  // Engine only: submissions (host waits), command buffers and dispatches after the first token, and their
  // device time (timestamps).
  uint64_t decode_submissions = 0, decode_parts = 0, decode_dispatches = 0;
  double decode_gpu_s = 0;
  double max_unit_gpu_s = 0;   // the device time of the costliest submission (its prompt's included; timestamps)
  // Engine only, under a device-time budget: the costliest release of a held submission's parts, and
  // group of kernels between two barriers.
  double max_release_gpu_s = 0, max_group_gpu_s = 0;
  // Decode tokens/s: every token after the first costs one forward pass (or a share of a verify pass).
  double decode_tok_s() const { return ids.size() > 1 && decode_s > 0 ? double(ids.size() - 1) / decode_s : 0.0; }
};

// Each accepted token in order: its id, whether it was a verified draft, and the logits row it was chosen
// from (null unless the request keeps them). False ends the request (Stopped).
using TokenSink = std::function<bool(uint32_t token, bool from_draft, const float* logits_row)>;

// How many leading tokens of `prompt` a cache holding `held` can give: their common prefix, leaving at least
// one prompt token to run (its logits choose the first token).
uint32_t reusable_prefix(std::span<const uint32_t> held, std::span<const uint32_t> prompt);

class Sequence {
 public:
  Sequence(std::span<const uint32_t> prompt, uint32_t max_tokens, bool ignore_eos, const Tokenizer& tok,
           const std::atomic<bool>* cancel, TokenSink on_token);
  Sequence(const Sequence&) = delete;   // the speculative decoder holds a reference to `context`
  Sequence& operator=(const Sequence&) = delete;

  // The stop rule, for each generated token in order: None to go on, otherwise why the request ends here.
  StopReason check_stop(uint32_t t, bool from_draft, const float* logits_row = nullptr);
  // check_stop, recording the reason: false ends the request.
  bool take(uint32_t t, bool from_draft, const float* logits_row = nullptr) {
    end(check_stop(t, from_draft, logits_row));
    return stop() == StopReason::None;
  }
  // A chosen token fed back into the context; false (VulkanDevice recorded) once the context is full.
  bool feed_back(uint32_t t, uint32_t n_ctx);
  // Records why the request ended, unless a reason was recorded first.
  void end(StopReason r) {
    if (result.stop == StopReason::None) result.stop = r;
  }
  StopReason stop() const { return result.stop; }
  bool cancelled() const { return cancel_ && cancel_->load(std::memory_order_relaxed); }

  // The speculative decoder of this sequence, from its first token on (the prompt is in `kv_seq`, the
  // target's choice after it in the chooser's slot 0); its tokens go through take().
  void start_speculating(LlamaModel& target, int kv_seq, TokenChooser& chooser, Recorder& rec,
                         const SpeculativeOptions& so);

  std::vector<uint32_t> context;               // the prompt, then every token fed back (the penalty history)
  uint32_t cached = 0;                         // context tokens whose K/V are in the KV sequence
  std::unique_ptr<TokenConstraint> constraint; // JSON mode or a grammar (the tokens so far, the next mask)
  std::unique_ptr<Drafter> drafter;            // when it speculates
  std::unique_ptr<SpeculativeDecoder> spec;    // once speculating
  SequenceResult result;

 private:
  uint32_t max_tokens_;
  bool ignore_eos_;
  const Tokenizer& tok_;
  const std::atomic<bool>* cancel_;
  TokenSink on_token_;
};

}  // namespace vkspec
