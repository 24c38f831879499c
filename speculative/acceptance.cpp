#include "speculative/acceptance.h"

#include <algorithm>
#include <bit>
#include <cstdio>

namespace vkspec {

namespace {
using AcceptPC = contract::SpecAcceptPC;   // shaders/contract.h
static_assert(sizeof(AcceptPC) <= 128, "push constants: the 128 bytes every device has");
}  // namespace

SpecAcceptor::SpecAcceptor(Context& ctx, Pipelines& pipelines, uint32_t n_vocab, uint32_t max_k, uint32_t max_trials,
                           uint32_t max_history)
    : ctx_(ctx), pipelines_(pipelines), n_vocab_(n_vocab), max_k_(max_k), max_trials_(max_trials) {
  const VkDeviceSize row = VkDeviceSize(n_vocab) * 4;
  upload_ = std::make_unique<Arena>(ctx, MemoryKind::Upload, row * (2 * max_k + 1) + VkDeviceSize(max_trials) * max_k * 4 + 8192);
  readback_ = std::make_unique<Arena>(ctx, MemoryKind::Readback, VkDeviceSize(max_trials) * 8 + 256);
  p_ = upload_->alloc(row * (max_k + 1), "speculative p rows");
  q_ = upload_->alloc(row * std::max(max_k, 1u), "speculative q rows");
  tokens_ = upload_->alloc(VkDeviceSize(max_trials) * std::max(max_k, 1u) * 4, "speculative tokens");
  counter_ = upload_->alloc(contract::VERIFY_COUNTER_UINTS * 4, "fused verify counter");
  draft_slots_ = upload_->alloc(VkDeviceSize(std::max(max_k, 1u)) * contract::TOKEN_SLOT_UINTS * 4,
                                "host drafts as token slots");
  device_ = std::make_unique<Arena>(ctx, MemoryKind::Device, row * (2 * max_k + 1) + 8192);
  p_dev_ = device_->alloc(row * (max_k + 1), "speculative p rows");
  q_dev_ = device_->alloc(row * std::max(max_k, 1u), "speculative q rows");
  result_ = readback_->alloc(VkDeviceSize(max_trials) * 8, "speculative result");
  if (!p_.mapped || !tokens_.mapped || !result_.mapped) throw Error("internal: speculative buffers are not mapped");
  rec_ = std::make_unique<Recorder>(ctx, profiling_requested());
  sampler_ = std::make_unique<DeviceSampler>(ctx, pipelines, n_vocab, max_k + 1, max_history + max_k);
}

SpecAcceptor::~SpecAcceptor() {
  if (rec_->profiling() && !rec_->profile().empty()) fprintf(stderr, "speculative sampling %s", rec_->profile_report().c_str());
}

float* SpecAcceptor::p_row(uint32_t i) { return p_.host<float>() + size_t(i) * n_vocab_; }
float* SpecAcceptor::q_row(uint32_t i) { return q_.host<float>() + size_t(i) * n_vocab_; }
uint32_t* SpecAcceptor::tokens(uint32_t trial) { return tokens_.host<uint32_t>() + size_t(trial) * max_k_; }

void SpecAcceptor::set_row(float* row, const Candidates& c, uint32_t token) {
  std::fill(row, row + n_vocab_, 0.0f);
  if (c.ids.empty()) { row[token] = 1.0f; return; }
  for (size_t i = 0; i < c.ids.size(); ++i) row[c.ids[i]] = c.probs[i];
}

void SpecAcceptor::record_accept(uint32_t k, uint64_t seed, uint32_t position, uint32_t trials) {
  if (k > max_k_ || trials == 0 || trials > max_trials_) throw Error("internal: SpecAcceptor out of range");
  AcceptPC pc{p_.address, q_.address, tokens_.address, result_.address, seed, k, n_vocab_, position, max_k_, trials};
  // About four ids per lane, 8..64 lanes. The statistical tests' 24-token vocabulary gets 8 lanes, one
  // subgroup on lavapipe, which runs a workgroup's subgroups as coroutines switched at every barrier and a
  // shared-memory load in a loop as a loop over the lanes: test_acceptance (15 x 200,000 trials) took 206 s
  // with 64 lanes and takes 7.5 s with 8 (2-core AMD EPYC machine, Mesa 22.3). From 129 ids on it is 64, the
  // lanes sample_rows has on CPU devices: the residual draw's partial sums follow the lane count, and
  // test_sampler's FusedVerifyTest (300 ids) expects this kernel's draws to equal the fused verify's.
  const uint32_t lanes = std::clamp(std::bit_ceil((n_vocab_ + 3) / 4), 8u, 64u);
  const uint32_t gx = std::min(trials, 32768u);
  rec_->dispatch(pipelines_.get("spec_accept", {lanes}), &pc, sizeof pc, gx, (trials + gx - 1) / gx);
}

std::vector<SpecAcceptor::Outcome> SpecAcceptor::run(uint32_t k, uint64_t seed, uint32_t position, uint32_t trials) {
  rec_->begin();
  record_accept(k, seed, position, trials);
  rec_->submit_and_wait();
  std::vector<Outcome> out(trials);
  const uint32_t* r = result_.host<uint32_t>();
  for (uint32_t j = 0; j < trials; ++j) out[j] = {r[2 * j], r[2 * j + 1]};
  return out;
}

void SpecAcceptor::record_verify(Recorder& r, const SamplingParams& p, const Slice& target_logits,
                                 std::span<const uint32_t> context, const Slice& draft_slots, uint32_t k,
                                 float draft_p_min, bool one_hot_q) {
  record_fused(r, p, target_logits, context, draft_slots, k, draft_p_min, one_hot_q ? Slice{} : q_dev_, p_dev_);
}

void SpecAcceptor::record_fused(Recorder& r, const SamplingParams& p, const Slice& target_logits,
                                std::span<const uint32_t> context, const Slice& draft_slots, uint32_t k,
                                float draft_p_min, const Slice& q, const Slice& p_out) {
  if (k > max_k_) throw Error("internal: SpecAcceptor::record_verify out of range");
  const VkDeviceSize rows = VkDeviceSize(k + 1) * n_vocab_ * 4;
  // the kernel leaves the counter zeroed; set anyway in case a submission failed
  std::fill_n(counter_.host<uint32_t>(), contract::VERIFY_COUNTER_UINTS, 0u);
  const uint32_t window = sampler_->set_history(p, context);
  if (p.penalized() && k > 0) {
    sampler_->record_append_history(r, draft_slots, 0, k, window);
    r.barrier();
  }
  const DeviceSampler::FusedAccept fused{q, draft_slots, result_, counter_, k, draft_p_min};
  DeviceSampler::Rows j{target_logits.sub(0, rows), p_out.sub(0, rows), k + 1, window, context.size(), nullptr, 0, &fused};
  sampler_->record(r, p, j);
}

SpecAcceptor::Outcome SpecAcceptor::result() const {
  const uint32_t* res = result_.host<uint32_t>();
  return {res[0], res[1]};
}

SpecAcceptor::Outcome SpecAcceptor::verify(const SamplingParams& p, const Slice& target_logits,
                                           std::span<const uint32_t> context, std::span<const uint32_t> drafts) {
  const uint32_t k = uint32_t(drafts.size());
  if (k > max_k_) throw Error("internal: SpecAcceptor::verify out of range");
  std::copy(drafts.begin(), drafts.end(), tokens());   // also what run() would verify
  for (uint32_t i = 0; i < k; ++i) {
    draft_slots_.host<uint32_t>()[2 * i] = drafts[i];
    draft_slots_.host<uint32_t>()[2 * i + 1] = 0;
  }
  rec_->begin();
  record_fused(*rec_, p, target_logits, context, draft_slots_, k, 0.0f, q_, p_);
  rec_->submit_and_wait();
  return result();
}

}  // namespace vkspec
