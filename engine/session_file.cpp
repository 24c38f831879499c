#include "engine/session_file.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "platform/platform.h"
#include "runtime/recorder.h"

namespace vkspec {
namespace {

// "VKSPKV" and the format's version ("02": the weights sampled into the fingerprint)
constexpr char kMagic[8] = {'V', 'K', 'S', 'P', 'K', 'V', '0', '2'};
constexpr uint64_t kFnvOffset = 1469598103934665603ull, kFnvPrime = 1099511628211ull;
constexpr VkDeviceSize kStagingBytes = 32ull << 20;   // KV read back per device round trip, at most

uint64_t fnv(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

struct Header {
  uint32_t n_layers = 0, n_kv_heads = 0, head_dim = 0, n_vocab = 0;
  uint64_t fingerprint = 0;
  uint32_t n_tokens = 0;
};
constexpr size_t kHeaderBytes = sizeof kMagic + 4 * 4 + 8 + 4;

// The model's identity beyond its shapes: the tensor table and samples of every tensor's bytes (kSamples
// stretches of kSampleBytes spread over it, the whole of a small one), so that a session of another model of
// the same shape is refused: another fine-tune, or a merge that changed matrices and kept the norms. A few
// hundred KB read whatever the model's size.
constexpr uint64_t kSamples = 8, kSampleBytes = 256;
uint64_t fingerprint(const GgufFile& f) {
  uint64_t h = kFnvOffset;
  uint8_t sample[kSampleBytes];
  for (const GgufTensor& t : f.tensors()) {
    h = fnv(h, t.name.data(), t.name.size());
    h = fnv(h, &t.type, sizeof t.type);
    h = fnv(h, t.dims.data(), t.dims.size() * sizeof(uint64_t));
    for (uint64_t i = 0; i < kSamples; ++i) {
      const uint64_t n = std::min(kSampleBytes, t.bytes);
      const uint64_t at = kSamples > 1 ? (t.bytes - n) * i / (kSamples - 1) : 0;
      f.read_tensor_part(t, at, sample, n);
      h = fnv(h, sample, size_t(n));
    }
  }
  return h;
}

Header header_of(const TargetModel& t, uint32_t n_tokens) {
  const LlamaHParams& hp = t.model->hparams();
  return {hp.n_layers, hp.n_kv_heads, hp.head_dim, hp.n_vocab, fingerprint(*t.file), n_tokens};
}

// The KV bytes of n positions: per layer, K then V.
uint64_t kv_bytes(const PagedKvCache& kv, uint32_t n_layers, uint32_t n) { return uint64_t(n_layers) * 2 * n * kv.position_bytes(); }

// Visits the positions [0, n) of seq block by block in the file's order: f(layer, v, physical block, positions).
template <class F>
void for_each_run(const PagedKvCache& kv, int seq, uint32_t n_layers, uint32_t n, F f) {
  const std::vector<uint32_t>& table = kv.block_table(seq);
  for (uint32_t l = 0; l < n_layers; ++l)
    for (const bool v : {false, true})
      for (uint32_t b = 0; b * kv.block_size() < n; ++b) f(l, v, table[b], std::min(kv.block_size(), n - b * kv.block_size()));
}

// A new temporary file beside the session file (created exclusively: a link planted there is never followed)
// that hashes what is written; renamed over the session file once whole.
class HashedFile {
 public:
  explicit HashedFile(const std::string& path) : path_(path), f_(platform::create_temp_beside(path, &tmp_)) {
    if (!f_) throw Error("cannot write the session file " + path + ": " + platform::last_error());
  }
  const std::string& tmp_path() const { return tmp_; }
  ~HashedFile() {
    if (f_) fclose(f_);
  }
  void write(const void* data, size_t n) {
    hash_ = fnv(hash_, data, n);
    if (fwrite(data, 1, n, f_) != n) throw Error("cannot write the session file " + path_ + ": " + strerror(errno));
  }
  void close_with_hash() {
    const uint64_t h = hash_;
    write(&h, sizeof h);
    const int rc = fclose(f_);
    f_ = nullptr;
    if (rc != 0) throw Error("cannot write the session file " + path_ + ": " + strerror(errno));
  }

 private:
  std::string path_, tmp_;
  FILE* f_;
  uint64_t hash_ = kFnvOffset;
};

}  // namespace

void save_session(TargetModel& t, const Session& s, const std::string& path) {
  if (!t.model) throw Error("sessions need a loaded model");
  PagedKvCache& kv = t.model->kv();
  const uint32_t n = uint32_t(s.tokens.size());
  if (s.seq < 0 || kv.length(s.seq) < n) throw Error("internal: the session's KV does not hold its tokens");
  const Header h = header_of(t, n);
  std::string tmp;
  try {
    HashedFile out(path);
    tmp = out.tmp_path();
    out.write(kMagic, sizeof kMagic);
    for (const uint32_t v : {h.n_layers, h.n_kv_heads, h.head_dim, h.n_vocab}) out.write(&v, 4);
    out.write(&h.fingerprint, 8);
    out.write(&h.n_tokens, 4);
    out.write(s.tokens.data(), s.tokens.size() * sizeof(uint32_t));
    if (n > 0) {
      // positions copied into a host-visible staging buffer, as many as it holds per device round trip
      const VkDeviceSize staging = std::min<VkDeviceSize>(kStagingBytes, kv_bytes(kv, h.n_layers, n));
      Arena arena(*t.ctx, MemoryKind::Readback, staging);
      const Slice buf = arena.alloc(staging, "session readback");
      Recorder rec(*t.ctx, false);
      VkDeviceSize used = 0;
      const auto drain = [&] {
        rec.submit_and_wait();
        out.write(buf.mapped, used);
        used = 0;
      };
      rec.begin();
      kv.record_copies(rec);   // a token tree's accepted path moved into place, if that is still queued
      for_each_run(kv, s.seq, h.n_layers, n, [&](uint32_t l, bool v, uint32_t block, uint32_t positions) {
        const VkDeviceSize bytes = positions * kv.position_bytes();
        if (used + bytes > staging) {
          drain();
          rec.begin();
        }
        rec.copy(kv.block(l, v, block).sub(0, bytes), buf.sub(used, bytes));
        used += bytes;
      });
      drain();
    }
    out.close_with_hash();
    std::error_code ec;   // (std::filesystem::rename replaces an existing file on Windows too)
    std::filesystem::rename(platform::utf8_path(tmp), platform::utf8_path(path), ec);
    if (ec) throw Error("cannot write the session file " + path + ": " + ec.message());
  } catch (...) {
    std::error_code ec;
    if (!tmp.empty()) std::filesystem::remove(platform::utf8_path(tmp), ec);
    throw;
  }
}

void load_session(TargetModel& t, Session& s, const std::string& path) {
  if (!t.model) throw Error("sessions need a loaded model");
  LlamaModel& m = *t.model;
  PagedKvCache& kv = m.kv();
  const auto bad = [&](const std::string& why) { return Error("the session file " + path + " " + why); };
  const platform::FileInfo st = platform::file_info(path);
  if (st.type != platform::FileType::Regular && st.type != platform::FileType::Missing)   // (a FIFO would block the open)
    throw bad("is not a vkspec session file (not a regular file)");
  FILE* f = platform::open_file(path, "rb");
  if (!f) throw Error("cannot open the session file " + path + ": " + strerror(errno));
  std::vector<uint8_t> data;
  {
    const bool sized = st.type == platform::FileType::Regular;
    const Header want = header_of(t, 0);
    // the size the header claims is checked before the whole file is read
    uint8_t head[kHeaderBytes];
    const bool has_head = sized && fread(head, 1, sizeof head, f) == sizeof head;
    if (!has_head || memcmp(head, kMagic, 6) != 0) {
      fclose(f);
      throw bad("is not a vkspec session file");
    }
    if (memcmp(head, kMagic, sizeof kMagic) != 0) {
      fclose(f);
      throw bad("was written in another version of vkspec's session format (run the prompt again to make a new one)");
    }
    Header h;
    memcpy(&h.n_layers, head + 8, 4);
    memcpy(&h.n_kv_heads, head + 12, 4);
    memcpy(&h.head_dim, head + 16, 4);
    memcpy(&h.n_vocab, head + 20, 4);
    memcpy(&h.fingerprint, head + 24, 8);
    memcpy(&h.n_tokens, head + 32, 4);
    std::string why;
    if (h.n_layers != want.n_layers || h.n_kv_heads != want.n_kv_heads || h.head_dim != want.head_dim || h.n_vocab != want.n_vocab)
      why = "was made with a model of another shape";
    else if (h.fingerprint != want.fingerprint)
      why = "was made with another model (its weights differ)";
    else if (h.n_tokens >= m.n_ctx())
      why = "holds " + std::to_string(h.n_tokens) + " tokens, which do not fit the context of " + std::to_string(m.n_ctx()) + " (use a larger --ctx)";
    const uint64_t size = kHeaderBytes + uint64_t(h.n_tokens) * 4 + kv_bytes(kv, h.n_layers, h.n_tokens) + 8;
    if (why.empty() && st.size != size)
      why = "is " + std::to_string(st.size) + " bytes where its header says " + std::to_string(size) + " (truncated?)";
    if (!why.empty()) {
      fclose(f);
      throw bad(why);
    }
    data.resize(size);
    memcpy(data.data(), head, sizeof head);
    const bool read_all = fread(data.data() + sizeof head, 1, size - sizeof head, f) == size - sizeof head;
    fclose(f);
    if (!read_all) throw bad("could not be read whole");
  }
  uint64_t stored;
  memcpy(&stored, data.data() + data.size() - 8, 8);
  if (fnv(kFnvOffset, data.data(), data.size() - 8) != stored) throw bad("is damaged (its checksum does not match)");
  uint32_t n;
  memcpy(&n, data.data() + 32, 4);
  std::vector<uint32_t> tokens(n);
  memcpy(tokens.data(), data.data() + kHeaderBytes, size_t(n) * 4);
  for (const uint32_t id : tokens)
    if (id >= m.hparams().n_vocab) throw bad("holds a token id out of the vocabulary");

  // Valid: the session's KV becomes the file's (a pool too full to hold it leaves the session empty).
  kv.truncate(s.seq, 0);
  s.tokens.clear();
  kv.grow(s.seq, n);
  Uploader up(*t.ctx, std::min<VkDeviceSize>(kStagingBytes, std::max<VkDeviceSize>(kv_bytes(kv, m.hparams().n_layers, n), 1 << 16)));
  const uint8_t* at = data.data() + kHeaderBytes + size_t(n) * 4;
  for_each_run(kv, s.seq, m.hparams().n_layers, n, [&](uint32_t l, bool v, uint32_t block, uint32_t positions) {
    const VkDeviceSize bytes = positions * kv.position_bytes();
    up.upload(kv.block(l, v, block), at, bytes);
    at += bytes;
  });
  up.flush();
  s.tokens = std::move(tokens);
}

}  // namespace vkspec
