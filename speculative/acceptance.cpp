#include "speculative/acceptance.h"

#include <algorithm>

namespace vkspec {

namespace {
struct AcceptPC {   // mirrors the push-constant block of shaders/spec_accept.comp
  uint64_t p, q, tokens, result;
  uint32_t seed_lo, seed_hi, k, vocab, position, tokens_stride, trials;
};
}  // namespace

SpecAcceptor::SpecAcceptor(Context& ctx, Pipelines& pipelines, uint32_t n_vocab, uint32_t max_k, uint32_t max_trials)
    : ctx_(ctx), pipelines_(pipelines), n_vocab_(n_vocab), max_k_(max_k), max_trials_(max_trials) {
  const VkDeviceSize row = VkDeviceSize(n_vocab) * 4;
  upload_ = std::make_unique<Arena>(ctx, MemoryKind::Upload, row * (2 * max_k + 1) + VkDeviceSize(max_trials) * max_k * 4 + 4096);
  readback_ = std::make_unique<Arena>(ctx, MemoryKind::Readback, VkDeviceSize(max_trials) * 8 + 256);
  p_ = upload_->alloc(row * (max_k + 1), "speculative p rows");
  q_ = upload_->alloc(row * std::max(max_k, 1u), "speculative q rows");
  tokens_ = upload_->alloc(VkDeviceSize(max_trials) * std::max(max_k, 1u) * 4, "speculative tokens");
  result_ = readback_->alloc(VkDeviceSize(max_trials) * 8, "speculative result");
  if (!p_.mapped || !tokens_.mapped || !result_.mapped) throw Error("internal: speculative buffers are not mapped");
  rec_ = std::make_unique<Recorder>(ctx, false);
}

SpecAcceptor::~SpecAcceptor() = default;

float* SpecAcceptor::p_row(uint32_t i) { return p_.host<float>() + size_t(i) * n_vocab_; }
float* SpecAcceptor::q_row(uint32_t i) { return q_.host<float>() + size_t(i) * n_vocab_; }
uint32_t* SpecAcceptor::tokens(uint32_t trial) { return tokens_.host<uint32_t>() + size_t(trial) * max_k_; }

void SpecAcceptor::set_row(float* row, const Candidates& c, uint32_t token) {
  std::fill(row, row + n_vocab_, 0.0f);
  if (c.ids.empty()) { row[token] = 1.0f; return; }
  for (size_t i = 0; i < c.ids.size(); ++i) row[c.ids[i]] = c.probs[i];
}

std::vector<SpecAcceptor::Outcome> SpecAcceptor::run(uint32_t k, uint64_t seed, uint32_t position, uint32_t trials) {
  if (k > max_k_ || trials == 0 || trials > max_trials_) throw Error("internal: SpecAcceptor::run out of range");
  AcceptPC pc{p_.address, q_.address, tokens_.address, result_.address, uint32_t(seed), uint32_t(seed >> 32),
              k, n_vocab_, position, max_k_, trials};
  rec_->begin();
  const uint32_t gx = std::min(trials, 32768u);
  rec_->dispatch(pipelines_.get("spec_accept", {64}), &pc, sizeof pc, gx, (trials + gx - 1) / gx);
  rec_->submit_and_wait();
  std::vector<Outcome> out(trials);
  const uint32_t* r = result_.host<uint32_t>();
  for (uint32_t j = 0; j < trials; ++j) out[j] = {r[2 * j], r[2 * j + 1]};
  return out;
}

}  // namespace vkspec
