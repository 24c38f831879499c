#include "runtime/model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "platform/platform.h"

namespace vkspec {

static constexpr VkDeviceSize kKvRowBytes = contract::KV_ROW_UINTS * 4;
static_assert(contract::KV_ROW_UINTS == 4, "shaders read a KvRows entry as one uvec4");

LlamaModel::LlamaModel(VulkanDevice& ctx, Pipelines& pipelines, const GgufFile& file, const ModelOptions& opts)
    : ctx_(ctx), hp_(read_llama_hparams(file)) {
  const LlamaTensors t = find_llama_tensors(file, hp_);
  n_ctx_ = opts.n_ctx ? opts.n_ctx : std::min<uint32_t>(hp_.n_ctx_train, 4096);
  // (within it, attending to a window is attending to all)
  if (hp_.sliding_window && hp_.swa_layers.empty() && n_ctx_ > hp_.sliding_window)
    throw Error("this model attends to a sliding window of " + std::to_string(hp_.sliding_window) +
                " positions, which vkspec does not implement: use a context of at most that (--ctx " +
                std::to_string(hp_.sliding_window) + ")");
  ubatch_ = ubatch_for(ctx, opts);
  check_memory(ctx, file, opts);

  weights_arena_ = std::make_unique<Arena>(ctx, MemoryKind::Device);
  act_arena_ = std::make_unique<Arena>(ctx, MemoryKind::Device, 64ull << 20);
  upload_arena_ = std::make_unique<Arena>(ctx, MemoryKind::Upload, 4ull << 20);
  readback_arena_ = std::make_unique<Arena>(ctx, MemoryKind::Readback, 16ull << 20);
  kernels_ = std::make_unique<Kernels>(ctx, pipelines, opts.kernels);
  rec_ = std::make_unique<Recorder>(ctx, profiling_requested());

  // ---- weights: streamed to the device ----
  uint64_t total = 0, done = 0;
  for (const auto& g : file.tensors()) total += g.bytes;
  weight_bytes_ = total;
  Uploader up(ctx);
  // Tensor bytes come through GgufFile::read_tensor (pread), one tensor at a time: a file truncated during
  // loading is an Error, not SIGBUS from the mapping.
  std::vector<uint8_t> bytes;
  auto read = [&](const GgufTensor* g) -> const uint8_t* {
    file.read_tensor(*g, bytes);
    return bytes.data();
  };
  // Parts stacked by rows into one matrix of format f, each written straight from its tensor's bytes.
  auto stacked = [&](std::initializer_list<const GgufTensor*> parts, const WeightFormat& f) {
    uint32_t rows = 0;
    for (const GgufTensor* g : parts) rows += uint32_t(g->dims[1]);
    const GgufTensor* first = *parts.begin();
    DeviceMatrix m = alloc_matrix(*weights_arena_, weight_dtype(*first), f, rows, uint32_t(first->dims[0]),
                                  first->name.c_str());
    uint32_t row0 = 0;
    for (const GgufTensor* g : parts) {
      if (uint8_t* at = weight_dtype(*g) == m.type ? mapped_float_rows(m, row0) : nullptr)
        file.read_tensor(*g, at);   // float rows: read in place (same type, so the same bytes per row)
      else
        write_rows(up, m, row0, weight_dtype(*g), uint32_t(g->dims[1]), read(g), g->name.c_str());
      row0 += uint32_t(g->dims[1]);
      if (opts.progress) opts.progress(done += g->bytes, total);
    }
    return m;
  };
  auto matrix = [&](const GgufTensor* g) { return stacked({g}, native_format(weight_dtype(*g))); };
  // A fused tensor read once and split by rows into matrices of `rows[i]` rows each (Phi-3's gate|up).
  auto split_rows = [&](const GgufTensor* g, std::initializer_list<uint32_t> rows) {
    const DType type = weight_dtype(*g);
    const uint32_t cols = uint32_t(g->dims[0]);
    const uint64_t row_bytes = gguf_tensor_bytes(uint32_t(g->type), cols);
    const uint8_t* at = read(g);
    std::vector<DeviceMatrix> out;
    for (const uint32_t n : rows) {
      out.push_back(alloc_matrix(*weights_arena_, type, native_format(type), n, cols, g->name.c_str()));
      write_rows(up, out.back(), 0, type, n, at, g->name.c_str());
      at += n * row_bytes;
    }
    if (opts.progress) opts.progress(done += g->bytes, total);
    return out;
  };
  auto vec = [&](const GgufTensor* g) {
    Slice s = weights_arena_->alloc(g->bytes, g->name.c_str());
    up.upload(s, read(g), g->bytes);
    if (opts.progress) opts.progress(done += g->bytes, total);
    return s;
  };
  token_embd_ = matrix(t.token_embd);
  output_norm_ = vec(t.output_norm);
  output_norm_host_.resize(hp_.dim);
  std::memcpy(output_norm_host_.data(), read(t.output_norm), sizeof(float) * hp_.dim);   // (f32, checked by model_file)
  output_ = hp_.tied_embeddings ? token_embd_ : matrix(t.output);
  // Several matrices with the same row length stacked into one (fused QKV, read by one matmul), and gate/up
  // read by one SwiGLU matmul: same-typed parts keep their format; quantized parts of different types
  // (Q4_K_M's q4_K/q6_K mix) are decoded into a common format that holds each exactly.
  auto fusable = [](std::initializer_list<const GgufTensor*> parts) {
    bool same = true, quantized = true;
    for (const GgufTensor* g : parts) {
      same = same && g->type == (*parts.begin())->type;
      quantized = quantized && is_quantized(weight_dtype(*g));
    }
    return same || quantized;
  };
  auto shared_format = [](std::initializer_list<const GgufTensor*> parts) {
    WeightFormat f = native_format(weight_dtype(**parts.begin()));
    for (const GgufTensor* g : parts)
      if (!(native_format(weight_dtype(*g)) == f)) f = common_format(f, native_format(weight_dtype(*g)));
    return f;
  };
  for (const auto& L : t.layers) {
    LayerWeights w;
    w.attn_norm = vec(L.attn_norm);
    w.fused_qkv = L.wqkv || fusable({L.wq, L.wk, L.wv});   // shapes were checked on load
    if (L.wqkv) {
      w.wqkv = matrix(L.wqkv);   // (stored fused: Phi-3)
    } else if (w.fused_qkv) {
      w.wqkv = stacked({L.wq, L.wk, L.wv}, shared_format({L.wq, L.wk, L.wv}));
    } else {
      w.wq = matrix(L.wq);
      w.wk = matrix(L.wk);
      w.wv = matrix(L.wv);
    }
    if (L.bq) {
      const uint64_t widths[] = {L.bq->bytes, L.bk->bytes, L.bv->bytes};
      w.qkv_bias = weights_arena_->alloc(widths[0] + widths[1] + widths[2], "q/k/v biases");
      uint64_t at = 0;
      for (const GgufTensor* b : {L.bq, L.bk, L.bv}) {
        up.upload(w.qkv_bias.sub(at, b->bytes), read(b), b->bytes);
        at += b->bytes;
      }
    }
    if (L.q_norm) {
      w.qk_norm = weights_arena_->alloc(L.q_norm->bytes + L.k_norm->bytes, "q/k norms");
      up.upload(w.qk_norm.sub(0, L.q_norm->bytes), read(L.q_norm), L.q_norm->bytes);
      up.upload(w.qk_norm.sub(L.q_norm->bytes, L.k_norm->bytes), read(L.k_norm), L.k_norm->bytes);
    }
    w.wo = matrix(L.wo);
    w.ffn_norm = vec(L.ffn_norm);
    if (L.w_gate_up) {   // (stored fused: Phi-3) the gate's rows, then the up projection's
      const std::vector<DeviceMatrix> parts = split_rows(L.w_gate_up, {hp_.ffn_dim, hp_.ffn_dim});
      w.w_gate = parts[0];
      w.w_up = parts[1];
    } else if (L.w_gate->type == L.w_up->type) {
      w.w_gate = matrix(L.w_gate);
      w.w_up = matrix(L.w_up);
    } else {   // find_llama_tensors allows this for quantized types only
      const WeightFormat f = shared_format({L.w_gate, L.w_up});
      w.w_gate = stacked({L.w_gate}, f);
      w.w_up = stacked({L.w_up}, f);
    }
    w.w_down = matrix(L.w_down);
    if (L.attn_post_norm) {
      w.attn_post_norm = vec(L.attn_post_norm);
      w.ffn_post_norm = vec(L.ffn_post_norm);
    }
    if (L.bo) w.bo = vec(L.bo);
    if (L.b_down) w.b_down = vec(L.b_down);
    if (L.b_gate || L.b_up) {   // [b_gate | b_up], zeros for the one the file lacks
      std::vector<float> b(2 * size_t(hp_.ffn_dim), 0.0f);
      if (L.b_gate) std::memcpy(b.data(), read(L.b_gate), sizeof(float) * hp_.ffn_dim);
      if (L.b_up) std::memcpy(b.data() + hp_.ffn_dim, read(L.b_up), sizeof(float) * hp_.ffn_dim);
      w.glu_bias = weights_arena_->alloc(b.size() * 4, "FFN biases");
      up.upload(w.glu_bias, b.data(), b.size() * 4);
    }
    layers_.push_back(w);
  }
  up.flush();
  if (opts.progress) opts.progress(total, total);

  // ---- activations for a chunk of ubatch_ tokens, per-pass I/O for kMaxBatch logits rows ----
  const uint64_t B = ubatch_, q_dim = hp_.q_dim(), kv_dim = hp_.kv_dim();
  x_ = act_arena_->alloc(B * hp_.dim * 4, "activations");
  qkv_ = act_arena_->alloc(B * (q_dim + 2 * kv_dim) * 4, "activations");
  att_ = act_arena_->alloc(B * q_dim * 4, "activations");
  hb_ = act_arena_->alloc(B * hp_.ffn_dim * 4, "activations");
  x_out_ = act_arena_->alloc(B * hp_.dim * 4, "activations");
  if (hp_.post_norms) sub_out_ = act_arena_->alloc(B * hp_.dim * 4, "activations");
  if (std::any_of(layers_.begin(), layers_.end(), [](const LayerWeights& w) { return bool(w.glu_bias); }))
    gate_up_ = act_arena_->alloc(B * 2 * hp_.ffn_dim * 4, "activations");
  tokens_ = upload_arena_->alloc(2ull * std::max(opts.max_sequences, 1u) * n_ctx_ * 4, "token ids");
  // A submission's chunks each take ubatch_ pairs at most; it runs at most n_ctx + kMaxBatch rows per sequence.
  kv_rows_ = upload_arena_->alloc(2ull * std::max(opts.max_sequences, 1u) * (n_ctx_ + 2 * std::max(B, uint64_t(kMaxBatch))) *
                                  kKvRowBytes, "KV rows");
  logits_ = act_arena_->alloc(uint64_t(kMaxBatch) * hp_.n_vocab * 4, "logits");
  logits_host_ = readback_arena_->alloc(uint64_t(kMaxBatch) * hp_.n_vocab * 4, "logits read back");
  ids_ = readback_arena_->alloc(uint64_t(kMaxBatch) * contract::TOKEN_SLOT_UINTS * 4, "argmax token slots");
  // RoPE (cos, sin) of every position, so that passes recorded together need no per-pass host table; both
  // scaled by rope.scaling.attn_factor (ggml's mscale).
  auto rope_table = [&](const std::vector<double>& inv_freq) {
    std::vector<float> rope(size_t(n_ctx_) * hp_.n_rot);
    for (uint32_t pos = 0; pos < n_ctx_; ++pos)
      for (uint32_t i = 0; i < hp_.n_rot / 2; ++i) {
        const double theta = double(pos) * inv_freq[i];
        rope[(size_t(pos) * hp_.n_rot / 2 + i) * 2] = float(std::cos(theta) * hp_.rope_attn_factor);
        rope[(size_t(pos) * hp_.n_rot / 2 + i) * 2 + 1] = float(std::sin(theta) * hp_.rope_attn_factor);
      }
    Slice s = act_arena_->alloc(rope.size() * 4, "rope table");
    up.upload(s, rope.data(), rope.size() * 4);
    return s;
  };
  rope_ = rope_table(hp_.inv_freq(n_ctx_));
  rope_swa_ = hp_.rope_inv_freq_swa.empty() ? rope_ : rope_table(hp_.rope_inv_freq_swa);
  up.flush();

  kv_ = std::make_unique<PagedKvCache>(*act_arena_, *upload_arena_, hp_.n_layers, hp_.n_kv_heads, hp_.head_dim,
                                       opts.kv_block_size, uint32_t(opts.kv_pool_blocks(n_ctx_)), n_ctx_,
                                       opts.max_sequences);
}

// Before anything is allocated: weights (as the device stores them) + the KV cache for n_ctx positions of
// max_sequences + activations and the RoPE table, against the device-local memory heaps, so that a model or
// a --ctx that cannot fit is refused with the numbers instead of failing halfway through the upload.
MemoryEstimate LlamaModel::estimate_memory(const VulkanDevice& ctx, const GgufFile& file, const ModelOptions& opts) {
  const LlamaHParams hp = read_llama_hparams(file);
  MemoryEstimate e;
  e.n_ctx = opts.n_ctx ? opts.n_ctx : std::min<uint32_t>(hp.n_ctx_train, 4096);
  for (const auto& g : file.tensors()) e.weights += device_bytes(DType(g.type), g.elements());
  const uint64_t kv_dim = hp.kv_dim(), q_dim = hp.q_dim();
  const uint64_t blocks = opts.kv_pool_blocks(e.n_ctx);
  e.kv = 2ull * hp.n_layers * blocks * opts.kv_block_size * kv_dim * contract::KV_ELEMENT_BYTES;
  // a chunk's activations, the logits rows, the RoPE table and attention's split partials (grown while
  // running, by doubling, the smaller buffers staying allocated: twice their largest, a full chunk at the end
  // of the context)
  const uint32_t ubatch = ubatch_for(ctx, opts);
  const AttentionShape shape{hp.n_heads, hp.n_kv_heads, hp.head_dim, hp.n_rot};
  const LlamaTensors t = find_llama_tensors(file, hp);   // (the constructor's rule for the FFN biases' buffer)
  const bool glu_bias =
      std::any_of(t.layers.begin(), t.layers.end(), [](const LlamaLayerTensors& L) { return L.b_gate || L.b_up; });
  const uint64_t sub_out = hp.post_norms ? hp.dim : 0, gate_up = glu_bias ? 2 * hp.ffn_dim : 0;
  const uint64_t rope_tables = hp.rope_inv_freq_swa.empty() ? 1 : 2;
  e.activations = uint64_t(ubatch) * (2 * hp.dim + sub_out + 2 * q_dim + 2 * kv_dim + hp.ffn_dim + gate_up) * 4 +
                  uint64_t(kMaxBatch) * hp.n_vocab * 4 + uint64_t(e.n_ctx) * hp.n_rot * 4 * rope_tables +
                  2 * Kernels::attention_partials_bytes(shape, ubatch, (e.n_ctx + Kernels::kAttentionSplitGpu - 1) /
                                                                                   Kernels::kAttentionSplitGpu);
  const VkPhysicalDeviceMemoryProperties& mp = ctx.memory_properties();
  uint64_t largest = 0;
  for (uint32_t i = 0; i < mp.memoryHeapCount; ++i) {
    largest = std::max<uint64_t>(largest, mp.memoryHeaps[i].size);
    if (mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) e.device += mp.memoryHeaps[i].size;
  }
  if (e.device == 0) e.device = largest;
  // A CPU device's "device memory" is the host's: lavapipe on Mesa 22.3 reports a 2 GiB heap but allocates
  // from system RAM without that limit (a 6.4 GB model loads), so the machine's RAM is the bound there.
  if (ctx.facts().type == VK_PHYSICAL_DEVICE_TYPE_CPU)
    e.device = std::max<uint64_t>(e.device, platform::physical_memory_bytes());
  return e;
}

uint32_t LlamaModel::ubatch_for(const VulkanDevice& ctx, const ModelOptions& opts) {
  if (opts.ubatch > kMaxUbatch) throw Error("internal: ubatch " + std::to_string(opts.ubatch) + " > " + std::to_string(kMaxUbatch));
  return opts.ubatch ? opts.ubatch : ctx.facts().default_ubatch();
}

void LlamaModel::check_memory(VulkanDevice& ctx, const GgufFile& file, const ModelOptions& opts) const {
  const MemoryEstimate e = estimate_memory(ctx, file, opts);
  auto gib = [](uint64_t b) {
    char s[32];
    snprintf(s, sizeof s, "%.2f GiB", double(b) / double(1ull << 30));
    return std::string(s);
  };
  if (e.total() > e.device)
    throw Error("'" + file.path() + "' needs " + gib(e.total()) + " of device memory (weights " + gib(e.weights) +
                ", KV cache " + gib(e.kv) + " for " + std::to_string(opts.kv_pool_blocks(n_ctx_) * opts.kv_block_size) +
                " positions (a context of " + std::to_string(n_ctx_) + "), activations " + gib(e.activations) + ") but " +
                ctx.facts().name + " has " + gib(e.device) + ": use a smaller --ctx or a smaller quantization");
}

LlamaModel::~LlamaModel() {
  if (rec_ && rec_->profiling() && !rec_->profile().empty())
    fprintf(stderr, "model (dim %u, %u layers) %s", hp_.dim, hp_.n_layers, rec_->profile_report().c_str());
}

TokenInput LlamaModel::write_tokens(std::span<const uint32_t> tokens) {
  if (tokens.size() > n_ctx_) throw Error("internal: more input tokens than the context holds");
  for (uint32_t id : tokens)
    if (id >= hp_.n_vocab) throw Error("token id " + std::to_string(id) + " is outside the vocabulary");
  const uint32_t capacity = uint32_t(tokens_.size / 4);
  if (tokens_cursor_ + tokens.size() > capacity) tokens_cursor_ = 0;
  const Slice region = tokens_.sub(VkDeviceSize(tokens_cursor_) * 4, std::max<VkDeviceSize>(tokens.size(), 1) * 4);
  std::copy(tokens.begin(), tokens.end(), region.host<uint32_t>());
  tokens_cursor_ += uint32_t(tokens.size());
  return {region, 1};
}

void LlamaModel::forward(int seq, std::span<const uint32_t> tokens, Logits want) {
  const TokenInput in = write_tokens(tokens);
  rec_->begin();
  record_forward(*rec_, seq, in, uint32_t(tokens.size()), want);
  if (want != Logits::None) {
    const uint32_t rows = want == Logits::All ? uint32_t(tokens.size()) : 1;
    kernels_->argmax(*rec_, logits_, ids_, rows, hp_.n_vocab);
    record_logits_readback(*rec_, rows);
  }
  rec_->submit_and_wait();
}

std::vector<float> LlamaModel::embed(int seq, std::span<const uint32_t> tokens, Pooling pooling) {
  if (tokens.empty()) throw Error("an embedding needs at least one token");
  EmbeddingPart part;
  embed_part(seq, tokens, pooling, part, uint32_t(tokens.size()));
  return embedding_of(part, uint32_t(tokens.size()), pooling);
}

void LlamaModel::embed_part(int seq, std::span<const uint32_t> tokens, Pooling pooling, EmbeddingPart& part,
                            uint32_t max_tokens) {
  const uint32_t dim = hp_.dim, n = uint32_t(tokens.size());
  if (part.done >= n || max_tokens == 0) throw Error("internal: embed_part has no tokens to run");
  const VkDeviceSize x_row = VkDeviceSize(dim) * 4;
  // x rows reach the host through the logits' readback buffer, as many per submission as it holds (every
  // chunk's in one submission for the last token's, or a mean over a short text)
  const uint32_t capacity = uint32_t(logits_host_.size / x_row), per_pass = std::min(ubatch_, capacity);
  if (capacity == 0)   // (kMaxBatch rows of logits hold less than one row of x: a vocabulary smaller than dim / 16)
    throw Error("embeddings need a vocabulary of at least " + std::to_string((hp_.dim + kMaxBatch - 1) / kMaxBatch) +
                " tokens for this model's width");
  part.sum.resize(dim, 0.0);
  uint32_t kept = 0;   // rows copied into the readback buffer and not yet read
  const auto read_kept = [&] {
    rec_->submit_and_wait();
    for (uint32_t r = 0; r < kept; ++r) {   // xn = rmsnorm(x) * output_norm, as the logits' matmul reads it
      const float* x = logits_host_.host<float>() + size_t(r) * dim;
      double ss = 0;
      for (uint32_t i = 0; i < dim; ++i) ss += double(x[i]) * x[i];
      const double scale = 1.0 / std::sqrt(ss / dim + hp_.rms_eps);
      for (uint32_t i = 0; i < dim; ++i) part.sum[i] += double(x[i]) * scale * output_norm_host_[i];
    }
    kept = 0;
  };
  const uint32_t begin = part.done, end = begin + std::min(max_tokens, n - begin);
  const TokenInput ids = write_tokens(tokens.subspan(begin, end - begin));
  rec_->begin();
  for (uint32_t at = begin; at < end; at += per_pass) {
    const uint32_t c = std::min(per_pass, end - at);
    record_forward(*rec_, seq, TokenInput{ids.ids.sub(VkDeviceSize(at - begin) * 4, VkDeviceSize(c) * 4), 1}, c, Logits::None);
    const uint32_t first = pooling == Pooling::Mean ? 0 : c - 1;
    const uint32_t rows = pooling == Pooling::Mean ? c : at + c == n ? 1 : 0;
    if (rows == 0) continue;
    if (kept + rows > capacity) {   // (x keeps this chunk's rows across the submission)
      read_kept();
      rec_->begin();
    }
    rec_->barrier();
    rec_->copy(x_.sub(first * x_row, rows * x_row), logits_host_.sub(kept * x_row, rows * x_row));
    kept += rows;
  }
  read_kept();
  part.done = end;
}

std::vector<float> LlamaModel::embedding_of(const EmbeddingPart& part, uint32_t n_tokens, Pooling pooling) const {
  if (part.done != n_tokens || part.sum.size() != hp_.dim) throw Error("internal: embedding_of before its last part");
  const double count = pooling == Pooling::Mean ? double(n_tokens) : 1.0;
  std::vector<float> out(hp_.dim);
  for (uint32_t i = 0; i < hp_.dim; ++i) out[i] = float(part.sum[i] / count);
  return out;
}

void LlamaModel::warm_up(int seq) {
  const bool scratch = seq < 0;
  if (scratch) seq = kv_->new_sequence();
  const uint32_t kept = kv_->length(seq);
  if (kept + Kernels::kBatchTile > n_ctx_)
    throw Error("a warm-up needs " + std::to_string(Kernels::kBatchTile) + " free positions in the context");
  try {
    const std::vector<uint32_t> tokens(Kernels::kBatchTile, 0);   // any ids
    for (uint32_t n = 1; n <= Kernels::kBatchTile; ++n) {
      forward(seq, std::span(tokens).first(n), Logits::All);
      kv_->truncate(seq, kept);
    }
  } catch (...) {
    if (scratch) kv_->free_sequence(seq);
    else kv_->truncate(seq, kept);
    throw;
  }
  if (scratch) kv_->free_sequence(seq);
}

void LlamaModel::record_logits_readback(Recorder& r, uint32_t rows) {
  const VkDeviceSize bytes = VkDeviceSize(rows) * hp_.n_vocab * 4;
  r.copy(logits_.sub(0, bytes), logits_host_.sub(0, bytes));
}

void LlamaModel::record_forward(Recorder& r, int seq, const TokenInput& in, uint32_t n, Logits want,
                                const TokenTree* tree) {
  if (want == Logits::All && n > kMaxBatch) throw Error("internal: Logits::All needs n <= kMaxBatch");
  const SeqRows rows{seq, in, n, want, tree};
  record_batch(r, std::span<const SeqRows>(&rows, 1), logits_);
}

uint32_t LlamaModel::record_batch(Recorder& r, std::span<const SeqRows> rows, const Slice& logits) {
  uint32_t logits_rows = 0;
  for (const SeqRows& s : rows) {
    if (s.n == 0) throw Error("internal: a sequence with no rows in a batch");
    if (s.tree && s.first_node + s.n > s.tree->n) throw Error("internal: a tree's rows are its nodes");
    logits_rows += s.want == Logits::All ? s.n : s.want == Logits::Last ? 1 : 0;
    for (const SeqRows& t : rows)
      if (&t != &s && t.seq == s.seq) throw Error("internal: a sequence appears twice in one batch");
  }
  if (VkDeviceSize(logits_rows) * hp_.n_vocab * 4 > logits.size) throw Error("internal: logits rows overflow");
  // Chunks of ubatch_ rows; a sequence's rows may continue into the next chunk.
  std::vector<ChunkPart> parts;
  uint32_t used = 0, out_row = 0;
  auto flush = [&] {
    if (used == 0) return;
    out_row += record_chunk(r, parts, used, logits, out_row);
    r.barrier();   // the next chunk (or pass) reuses the activations
    parts.clear();
    used = 0;
  };
  for (const SeqRows& s : rows) {
    for (uint32_t i = 0; i < s.n;) {
      const uint32_t take = std::min(ubatch_ - used, s.n - i);
      const TokenInput in{s.in.ids.sub(VkDeviceSize(i) * s.in.stride * 4, VkDeviceSize(take) * s.in.stride * 4), s.in.stride};
      const TokenTree* tree = s.tree && !s.tree->chain() ? s.tree : nullptr;   // a chain's rows are plain rows
      parts.push_back({s.seq, in, used, take, s.want == Logits::Last && i + take == s.n, s.want == Logits::All, tree,
                       s.first_node + i});
      used += take;
      i += take;
      if (used == ubatch_) flush();
    }
  }
  flush();
  return out_row;
}

// One chunk of n <= ubatch_ rows (parts: the rows of each sequence in it); reads top to bottom like
// llama2.c's forward(). Returns the logits rows written at logits_row.
uint32_t LlamaModel::record_chunk(Recorder& r, std::span<const ChunkPart> parts, uint32_t n, const Slice& logits,
                                  uint32_t logits_row) {
  // Each row's position, block table and tree (KvRows, contract.h KV_ROW), from a ring like the input tokens'.
  if (kv_rows_cursor_ + ubatch_ > kv_rows_.size / kKvRowBytes) kv_rows_cursor_ = 0;
  KvRows kv_rows{kv_rows_.sub(VkDeviceSize(kv_rows_cursor_) * kKvRowBytes, VkDeviceSize(n) * kKvRowBytes), 0};
  kv_rows_cursor_ += n;
  for (const ChunkPart& p : parts) {
    const uint32_t pos0 = kv_->length(p.seq);
    kv_->grow(p.seq, pos0 + p.n);
    const uint32_t tree_base = pos0 - p.first;   // (a tree's earlier parts grew the cache by their rows)
    for (uint32_t i = 0; i < p.n; ++i) {
      uint32_t* row = kv_rows.rows.host<uint32_t>() + contract::KV_ROW_UINTS * (p.row0 + i);
      const uint32_t node = p.first + i;
      row[0] = p.tree ? tree_base + p.tree->depth[node] : pos0 + i;
      row[1] = kv_->table_offset(p.seq);
      row[2] = p.tree ? tree_base : contract::KV_NO_TREE;
      row[3] = p.tree ? p.tree->path(node) : 0;
    }
    kv_rows.max_len = std::max(kv_rows.max_len, pos0 + p.n);
  }
  kv_rows.one_sequence = parts.size() == 1 && !parts[0].tree;
  kv_->record_copies(r);   // copy-on-write of shared blocks, before this chunk writes them

  const uint32_t qkv_w = hp_.q_dim() + 2 * hp_.kv_dim();   // one token's q, k, v side by side in qkv_
  const AttentionShape shape{hp_.n_heads, hp_.n_kv_heads, hp_.head_dim, hp_.n_rot, qkv_w, qkv_w, hp_.rope_neox, hp_.rms_eps,
                             hp_.attn_scale, hp_.attn_softcap};
  const VkDeviceSize x_row = VkDeviceSize(hp_.dim) * 4;
  const QkvSlices qkv = qkv_slices(qkv_, shape);
  auto rows_of = [](const Slice& s, VkDeviceSize row_bytes, uint32_t row0) {
    return s.sub(row0 * row_bytes, s.size - row0 * row_bytes);
  };
  Kernels& k = *kernels_;
  // x = token_embd[tokens]: one embedding per run of parts whose ids follow each other in one buffer (the
  // host-written ids of a batched step's decode rows), else one per part (ids in each sequence's token slots)
  for (size_t i = 0; i < parts.size();) {
    TokenInput in = parts[i].in;
    uint32_t rows = parts[i].n;
    size_t j = i + 1;
    for (; j < parts.size(); ++j) {
      const TokenInput& next = parts[j].in;
      if (next.ids.buffer != in.ids.buffer || next.stride != in.stride ||
          next.ids.offset != in.ids.offset + VkDeviceSize(rows) * in.stride * 4)
        break;
      rows += parts[j].n;
    }
    in.ids.size = VkDeviceSize(rows) * in.stride * 4;
    k.embed(r, token_embd_, in, rows_of(x_, x_row, parts[i].row0), rows, hp_.embed_scale);   // (* sqrt(dim): Gemma)
    i = j;
  }
  r.barrier();
  // x += W in (+ bias), or (post norms: Gemma) x += rmsnorm(W in) * post_norm
  auto residual = [&](const DeviceMatrix& w, const Slice& in, const Slice& post_norm, const Slice& bias) {
    if (post_norm) {
      k.matmul(r, w, in, sub_out_, n, false);
      r.barrier();
      k.add_rmsnorm(r, x_, sub_out_, post_norm, hp_.dim, hp_.rms_eps, n);
      return;
    }
    k.matmul(r, w, in, x_, n, /*accumulate=*/true);
    if (bias) {
      r.barrier();
      k.add_bias(r, x_, bias, hp_.dim, hp_.dim, n);
    }
  };
  for (uint32_t l = 0; l < hp_.n_layers; ++l) {
    const LayerWeights& L = layers_[l];
    const MatmulInput xa{x_, L.attn_norm, hp_.rms_eps};                      // xn = rmsnorm(x) * attn_norm
    const PagedKvView kv = kv_->view(l);
    AttentionShape s = shape;                  // windowed layers: the last sliding_window keys, their own RoPE
    if (hp_.is_swa(l)) s.window = hp_.sliding_window;
    const Slice& rope = hp_.is_swa(l) ? rope_swa_ : rope_;
    if (L.fused_qkv) {   // [q k v] = [Wq; Wk; Wv] xn (+ [bq bk bv]; q, k heads normed); rope(q, k); cache <- k, v
      k.qkv_rope_store_kv(r, L.wqkv, xa, qkv_, n, s, rope, kv, kv_rows, L.qkv_bias, L.qk_norm);
    } else {
      k.matmul(r, L.wq, xa, qkv.q, n, false, 0, qkv_w);                     // q = Wq xn
      k.matmul(r, L.wk, xa, qkv.k, n, false, 0, qkv_w);                     // k = Wk xn
      k.matmul(r, L.wv, xa, qkv.v, n, false, 0, qkv_w);                     // v = Wv xn
      r.barrier();
      k.rope_store_kv(r, s, qkv.q, qkv.k, qkv.v, rope, kv, kv_rows, n, L.qkv_bias, L.qk_norm);   // (+ b, norms) rope(q, k); cache <- k, v
    }
    r.barrier();
    k.attention(r, s, qkv.q, att_, kv, kv_rows, n);                          // att = softmax(cap(q K^T * scale)) V
    r.barrier();
    residual(L.wo, att_, L.attn_post_norm, L.bo);                            // x += Wo att (+ bo)
    r.barrier();
    const MatmulInput xf{x_, L.ffn_norm, hp_.rms_eps};                       // xn = rmsnorm(x) * ffn_norm
    if (!L.glu_bias) {
      k.matmul_swiglu(r, L.w_gate, L.w_up, xf, hb_, n, hp_.gelu_gate);       // hb = silu|gelu(Wg xn) * (Wu xn)
    } else {                                                                 // ... (Wg xn + bg), (Wu xn + bu)
      const uint32_t ffn = hp_.ffn_dim;
      k.matmul(r, L.w_gate, xf, gate_up_, n, false, 0, 2 * ffn);
      k.matmul(r, L.w_up, xf, gate_up_.sub(VkDeviceSize(ffn) * 4, gate_up_.size - VkDeviceSize(ffn) * 4), n, false, 0, 2 * ffn);
      r.barrier();
      k.biased_glu(r, gate_up_, L.glu_bias, hb_, ffn, n, hp_.gelu_gate);
    }
    r.barrier();
    residual(L.w_down, hb_, L.ffn_post_norm, L.b_down);                      // x += Wd hb (+ bd)
    r.barrier();
  }
  // The rows that want logits, in order: runs of x gathered into x_out (unless they are one run already).
  std::vector<std::pair<uint32_t, uint32_t>> runs;   // (first row, rows); adjacent runs merged
  for (const ChunkPart& p : parts) {
    if (!p.logits_all && !p.logits_last) continue;
    const uint32_t first = p.logits_all ? p.row0 : p.row0 + p.n - 1, count = p.logits_all ? p.n : 1;
    if (!runs.empty() && runs.back().first + runs.back().second == first) runs.back().second += count;
    else runs.emplace_back(first, count);
  }
  uint32_t rows = 0;
  for (const auto& run : runs) rows += run.second;
  if (rows == 0) return 0;
  Slice x_rows = x_.sub(runs[0].first * x_row, rows * x_row);
  if (runs.size() > 1) {
    uint32_t at = 0;
    for (const auto& [first, count] : runs) {
      r.copy(x_.sub(first * x_row, count * x_row), x_out_.sub(at * x_row, count * x_row));
      at += count;
    }
    r.barrier();
    x_rows = x_out_.sub(0, rows * x_row);
  }
  const MatmulInput xo{x_rows, output_norm_, hp_.rms_eps};                   // xn = rmsnorm(x) * output_norm
  const VkDeviceSize logits_bytes = VkDeviceSize(hp_.n_vocab) * 4;
  const Slice out = logits.sub(logits_row * logits_bytes, rows * logits_bytes);
  k.matmul(r, output_, xo, out, rows, false);                                // logits = Wout xn
  if (hp_.final_softcap > 0) {                                               // logits = cap tanh(logits / cap)
    r.barrier();
    k.softcap(r, out, rows * hp_.n_vocab, hp_.final_softcap);
  }
  return rows;
}

}  // namespace vkspec
