#pragma once
// Drafters propose up to K next tokens for the target to verify in one pass.
//   ModelDrafter: a small draft model sharing the target's vocabulary, with its own paged KV kept in step
//                 with the accepted context (filled lazily: the first call prefills the prompt). Greedy, or
//                 sampling from its distribution after the target's sampling transforms (on the device
//                 when DeviceSampler supports them).
//   NgramDrafter: prompt lookup: the longest recent n-gram that occurred earlier in the context proposes
//                 the tokens that followed it (zero model cost).
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "loader/tokenizer.h"
#include "runtime/model.h"
#include "runtime/sampler.h"
#include "speculative/acceptance.h"

namespace vkspec {

// How a drafter samples (and where the distributions its drafts were drawn from go).
struct DraftSampling {
  const Sampler* sampler = nullptr;        // null or greedy: greedy drafts
  SpecAcceptor* device = nullptr;          // device transforms: q_i is left in the acceptor's q row i
  std::vector<Candidates>* q = nullptr;    // host transforms: q_i is appended here
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual const char* name() const = 0;
  // True when drafts are drawn from a distribution q (written where `s` says); false when proposals are
  // deterministic (q is then one-hot at the drafted token, and the caller writes it).
  virtual bool samples() const = 0;
  // The cost of one draft relative to a decoding step of `target` (used where timings must not steer K).
  virtual double relative_cost(const LlamaModel& target) const = 0;
  // Up to `k` tokens likely to follow `context` (which ends with the last accepted token).
  virtual std::vector<uint32_t> draft(std::span<const uint32_t> context, uint32_t k, const DraftSampling& s = {}) = 0;
};

class ModelDrafter : public Drafter {
 public:
  // p_min: stop drafting once the draft's top probability falls below it (0 = always draft k).
  ModelDrafter(LlamaModel& draft, float p_min);
  ~ModelDrafter() override;
  const char* name() const override { return "draft-model"; }
  bool samples() const override { return true; }
  // decoding is memory-bound: a step costs about the bytes of weights it reads
  double relative_cost(const LlamaModel& target) const override {
    return double(model_.weight_bytes()) / double(target.weight_bytes());
  }
  std::vector<uint32_t> draft(std::span<const uint32_t> context, uint32_t k, const DraftSampling& s = {}) override;

 private:
  LlamaModel& model_;
  float p_min_;
  int seq_;
  std::vector<uint32_t> cached_;   // tokens whose K/V are in the draft's cache, in order
};

class NgramDrafter : public Drafter {
 public:
  explicit NgramDrafter(uint32_t max_n = 4, uint32_t min_n = 1) : max_n_(max_n), min_n_(min_n) {}
  const char* name() const override { return "ngram"; }
  bool samples() const override { return false; }
  double relative_cost(const LlamaModel&) const override { return 0.0; }
  std::vector<uint32_t> draft(std::span<const uint32_t> context, uint32_t k, const DraftSampling& = {}) override;

 private:
  uint32_t max_n_, min_n_;
};

// Draft and target must share a vocabulary (size, texts, types, special ids); throws Error otherwise.
void check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft);

}  // namespace vkspec
