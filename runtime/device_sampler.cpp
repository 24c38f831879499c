#include "runtime/device_sampler.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace vkspec {

namespace {
using contract::SampleRowsPC;   // shaders/contract.h
constexpr VkDeviceSize kSlotBytes = contract::TOKEN_SLOT_UINTS * 4;
static_assert(sizeof(SampleRowsPC) <= 128, "sample_rows push constants: within the 128 bytes every device has");
static_assert(sizeof(contract::SampleRow) % 8 == 0, "SampleRow: std430's array stride (8-byte aligned) is its size");
// sample_rows.comp's shared memory. Per lane: digit_mass (16 floats) and lane_ties. Fixed: the digit
// histogram (256), the four candidate arrays (MAX_TOP_K each), the candidate list (two of SAMPLE_LIST_CAP),
// all 4 bytes; common.glsl's reduction scratch (64 floats) and the scalars within the last 512 bytes.
constexpr uint32_t kSharedPerLane = 17 * 4;
constexpr uint32_t kSharedFixed =
    (256 + 4 * contract::MAX_TOP_K + 2 * contract::SAMPLE_LIST_CAP) * 4 + 512;
}  // namespace

// Lanes per row of sample_rows, one workgroup per row that walks the whole vocabulary ~10 times. On a GPU 64
// lanes are latency-bound: 1B shape (128,256 logits), H100, sampled decode (top-k 40) with 64 / 256 / 512
// lanes: sample_rows 1.70 / 0.91 / ~0.55 ms (the last from step times), 250 / 312 / 350 tok/s (greedy 418).
// Its shared memory grows with the lanes (kSharedPerLane, below): 512 lanes need ~46 KB.
// CPU devices stay at 64. The general path's (top-k off or > MAX_TOP_K) partial sums follow the lane count,
// so its top-p cut may differ in a near-tie; the draw itself is a maximum, the same at any lane count.
uint32_t DeviceSampler::lanes_for(const DeviceFacts& f) {
  if (f.prefers_row_per_lane()) return 64;
  for (uint32_t lanes : {512u, 256u})
    if (lanes_fit(f, lanes)) return lanes;
  return 64;
}

bool DeviceSampler::lanes_fit(const DeviceFacts& f, uint32_t lanes) {
  return lanes >= 64 && (lanes & (lanes - 1)) == 0 && lanes <= f.max_workgroup_invocations &&
         kSharedPerLane * lanes + kSharedFixed <= f.max_shared_memory;
}

DeviceSampler::DeviceSampler(VulkanDevice& ctx, Pipelines& pipelines, uint32_t n_vocab, uint32_t max_rows,
                             uint32_t max_history, uint32_t lanes, bool texel_reads, uint32_t submission_rows)
    : pipelines_(pipelines), n_vocab_(n_vocab), max_rows_(max_rows), max_history_(max_history),
      lanes_(lanes ? lanes : lanes_for(ctx.facts())),
      texel_reads_(texel_reads && ctx.facts().prefers_row_per_lane() && ctx.facts().texel_reads()) {
  if (!lanes_fit(ctx.facts(), lanes_)) throw Error("internal: sample_rows lanes do not fit the device");
  // The row table holds the rows of one recording and the slots a wrap-around skips (table_rows() checks it).
  table_rows_ = (submission_rows ? submission_rows : 4 * std::max(max_rows, 1u)) + std::max(max_rows, 1u);
  upload_ = std::make_unique<Arena>(ctx, MemoryKind::Upload,
                                    VkDeviceSize(max_history) * 4 + SamplingParams::kMaxLogitBias * 8 +
                                        VkDeviceSize(std::max(max_rows, 1u)) * TOKEN_MASK_WORDS(n_vocab) * 4 +
                                        VkDeviceSize(table_rows_) * sizeof(contract::SampleRow) + 4096);
  readback_ = std::make_unique<Arena>(ctx, MemoryKind::Readback, VkDeviceSize(max_rows) * kSlotBytes + 256);
  history_ = upload_->alloc(VkDeviceSize(std::max(max_history, 1u)) * 4, "sampling history");
  bias_ = upload_->alloc(SamplingParams::kMaxLogitBias * 8, "logit bias");
  mask_ = upload_->alloc(VkDeviceSize(std::max(max_rows, 1u)) * TOKEN_MASK_WORDS(n_vocab) * 4, "JSON mode masks");
  table_ = upload_->alloc(VkDeviceSize(table_rows_) * sizeof(contract::SampleRow), "sampling row table");
  draws_ = readback_->alloc(VkDeviceSize(max_rows) * kSlotBytes, "sampled tokens (token slots)");
  if (!history_.mapped || !bias_.mapped || !mask_.mapped || !draws_.mapped || !table_.mapped)
    throw Error("internal: sampling buffers are not mapped");
}

DeviceSampler::~DeviceSampler() = default;

uint32_t DeviceSampler::set_history(const SamplingParams& p, std::span<const uint32_t> context,
                                    std::span<const uint32_t> extra) {
  // The penalties' window: the context's last repeat_last_n tokens (all of it for -1), then `extra`.
  const size_t window = !p.penalized()        ? 0
                        : p.repeat_last_n < 0 ? context.size()
                                              : std::min(context.size(), size_t(p.repeat_last_n));
  if (window + extra.size() > max_history_) throw Error("internal: sampling history longer than planned");
  if (p.logit_bias.size() > SamplingParams::kMaxLogitBias) throw Error("internal: a logit bias longer than planned");
  uint32_t* b = bias_.host<uint32_t>();
  for (const LogitBias& e : p.logit_bias) {
    // the C API refuses such a token; the kernel would skip it (no lane owns it), as the host Sampler does
    if (e.token >= n_vocab_) throw Error("internal: a logit bias token outside the vocabulary");
    *b++ = e.token;
    std::memcpy(b++, &e.bias, 4);
  }
  uint32_t* h = history_.host<uint32_t>();
  std::copy(context.end() - long(window), context.end(), h);
  std::copy(extra.begin(), extra.end(), h + window);
  return uint32_t(window);
}

void DeviceSampler::record_append_history(Recorder& r, const Slice& slots, uint32_t first, uint32_t n, uint32_t at) {
  if (at + n > max_history_) throw Error("internal: sampling history longer than planned");
  for (uint32_t i = 0; i < n; ++i)
    r.copy(slots.sub(VkDeviceSize(first + i) * kSlotBytes, 4), history_.sub(VkDeviceSize(at + i) * 4, 4));
}

std::span<uint32_t> DeviceSampler::mask_words(uint32_t row) {
  if (row >= std::max(max_rows_, 1u)) throw Error("internal: a JSON mode mask row out of range");
  const uint32_t words = TOKEN_MASK_WORDS(n_vocab_);
  return {mask_.host<uint32_t>() + size_t(row) * words, words};
}

bool DeviceSampler::texel_logits(bool adjusted, const Slice& logits) const {
  return texel_reads_ && !adjusted && n_vocab_ % 4 == 0 && texel_readable(logits);
}

contract::SampleRow DeviceSampler::entry(const SamplingParams& p, const Slice& logits, const Slice& probs,
                                         uint64_t draw, uint32_t h_end, uint64_t position,
                                         bool texels, uint32_t mask_row) const {
  const uint32_t last_n = !p.penalized() ? 0u : p.repeat_last_n < 0 ? 0xffffffffu : uint32_t(p.repeat_last_n);
  return {logits.address, probs.address, draw, history_.address, p.seed, bias_.address,
          p.constrained() ? mask_.address + VkDeviceSize(mask_row) * (TOKEN_MASK_WORDS(n_vocab_)) * 4 : 0, h_end, last_n,
          p.repeat_penalty, p.frequency_penalty, p.presence_penalty, p.temperature, p.top_p, p.min_p,
          uint32_t(p.top_k), uint32_t(position), uint32_t(p.logit_bias.size()),
          texels ? texel_offset(logits) : 0u};
}

std::span<contract::SampleRow> DeviceSampler::table_rows(const Recorder& r, uint32_t n) {
  if (r.recording() != table_recording_) {   // a new recording: its entries start here
    table_recording_ = r.recording();
    table_used_ = 0;
  }
  if (table_next_ + n > table_rows_) {   // wrap: the skipped slots count as used by this recording
    table_used_ += table_rows_ - table_next_;
    table_next_ = 0;
  }
  table_used_ += n;
  if (table_used_ > table_rows_) throw Error("internal: more sampled rows in one submission than the row table holds");
  contract::SampleRow* at = table_.host<contract::SampleRow>() + table_next_;
  table_next_ += n;
  return {at, n};
}

void DeviceSampler::dispatch(Recorder& r, std::span<const contract::SampleRow> entries, VkBufferView texels,
                             uint32_t flags) {
  const VkDeviceAddress table = table_.address + VkDeviceSize(entries.data() - table_.host<contract::SampleRow>()) *
                                                     sizeof(contract::SampleRow);
  SampleRowsPC pc{table, n_vocab_, flags};
  const uint32_t rows = uint32_t(entries.size());
  if (texels) {
    const VkBufferView views[Pipelines::kTexelBindings] = {texels, texels, texels, texels};   // only binding 0 is read
    r.dispatch(pipelines_.get("sample_rows_texels", {lanes_}, Pipelines::Layout::Texels), views, &pc, sizeof pc, rows);
  } else {
    r.dispatch(pipelines_.get("sample_rows", {lanes_}), &pc, sizeof pc, rows);
  }
}

void DeviceSampler::record(Recorder& r, const SamplingParams& p, const Rows& j) {
  if (!supports(p, n_vocab_) || j.rows == 0 || j.rows > max_rows_) throw Error("internal: DeviceSampler::record out of range");
  const VkDeviceSize row_bytes = VkDeviceSize(n_vocab_) * 4;
  const bool texels = texel_logits(p.adjusts_logits(), j.logits);   // whole texels per row: every row then is too
  const std::span<contract::SampleRow> rows = table_rows(r, j.rows);
  for (uint32_t i = 0; i < j.rows; ++i)   // row i of the sequence: i tokens later than row 0
    rows[i] = entry(p, j.logits.sub(i * row_bytes, row_bytes), j.probs ? j.probs.sub(i * row_bytes, row_bytes) : Slice{},
                    j.draws ? j.draws->sub(i * kSlotBytes, kSlotBytes).address : 0, j.history_len + i, j.position + i,
                    texels, i);
  dispatch(r, rows, texels ? j.logits.texels : VK_NULL_HANDLE, j.draws ? contract::SAMPLE_DRAW : 0u);
}

DeviceSampler::BatchRow DeviceSampler::row(const SamplingParams& p, const Slice& logits, const Slice& probs,
                                           const Slice& draw, uint32_t history_len, uint64_t position) const {
  if (!supports(p, n_vocab_) || logits.size < VkDeviceSize(n_vocab_) * 4 || (probs && probs.size < VkDeviceSize(n_vocab_) * 4) ||
      draw.size < kSlotBytes || history_len > max_history_)   // drafts may extend the history on the device
    throw Error("internal: DeviceSampler::row out of range");
  const bool texels = texel_logits(p.adjusts_logits(), logits);
  return {entry(p, logits, probs, draw.address, history_len, position, texels, 0),
          texels ? logits.texels : VK_NULL_HANDLE};
}

void DeviceSampler::record_rows(Recorder& r, std::span<const BatchRow> batch) {
  if (batch.empty() || batch.size() > max_rows_) throw Error("internal: DeviceSampler::record_rows out of range");
  // texel reads when every row allows them through the same view (one binding per dispatch)
  VkBufferView view = batch[0].texels;
  for (const BatchRow& b : batch)
    if (b.texels != view) view = VK_NULL_HANDLE;
  const std::span<contract::SampleRow> rows = table_rows(r, uint32_t(batch.size()));
  for (size_t i = 0; i < batch.size(); ++i) rows[i] = batch[i].entry;
  dispatch(r, rows, view, contract::SAMPLE_DRAW);
}

void DeviceSampler::record(Recorder& r, const SamplingParams& p, const Slice& logits, const Slice& probs,
                           uint32_t rows, std::span<const uint32_t> context, std::span<const uint32_t> extra,
                           uint64_t position, bool draw) {
  if (extra.size() + 1 < rows) throw Error("internal: DeviceSampler::record out of range");
  const uint32_t window = set_history(p, context, extra);
  Rows j{logits, probs, rows, window, position, draw ? &draws_ : nullptr};
  record(r, p, j);
}

DeviceSampler::Draw DeviceSampler::drawn(uint32_t row) const {
  const uint32_t* d = draws_.host<uint32_t>() + contract::TOKEN_SLOT_UINTS * size_t(row);
  float top;
  std::memcpy(&top, d + 1, 4);
  return {d[0], top};
}

}  // namespace vkspec
