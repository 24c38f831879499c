#include "engine/kv_admission.h"

#include <algorithm>
#include <string>

#include "engine/sequence.h"

namespace vkspec {

KvAdmission::KvAdmission(KvBlockPool& target, KvBlockPool* draft, uint32_t n_ctx, uint32_t max_cached)
    : target_(target), draft_(draft), n_ctx_(n_ctx), max_cached_(max_cached) {}

KvAdmission::~KvAdmission() { evict_all(); }

KvAdmission::Reservation KvAdmission::reservation(uint32_t prompt_tokens, uint32_t max_tokens, bool embed) const {
  const uint64_t longest =
      embed ? prompt_tokens : std::min<uint64_t>(uint64_t(prompt_tokens) + max_tokens + LlamaModel::kMaxBatch, n_ctx_);
  return {uint32_t((longest + target_.block_size() - 1) / target_.block_size()),
          draft_ ? uint32_t((longest + draft_->block_size() - 1) / draft_->block_size()) : 0};
}

bool KvAdmission::could_ever_fit(const Reservation& r) const {
  return r.target <= target_.total_blocks() && (!draft_ || r.draft <= draft_->total_blocks());
}

// Blocks counted for the prompt cache in one pool, but for the cached sequence `except`: each cached
// sequence's length in blocks (shared ones included, so the count bounds what evicting them all would free).
uint32_t KvAdmission::cached_blocks(const KvBlockPool& pool, bool draft_pool, int except) const {
  uint32_t n = 0;
  for (const CachedSequence& c : cache_) {
    if (c.seq == except) continue;
    const int seq = draft_pool ? c.draft_seq : c.seq;
    if (seq >= 0) n += pool.blocks_for(pool.length(seq));
  }
  return n;
}

std::optional<KvAdmission::Grant> KvAdmission::admit(std::span<const uint32_t> prompt, uint32_t max_tokens, bool embed,
                                                     std::span<const Held> held, bool take_drafter) {
  const Reservation need = reservation(uint32_t(prompt.size()), max_tokens, embed);
  if (reserved_.target + need.target > target_.total_blocks()) return std::nullopt;
  if (draft_ && reserved_.draft + need.draft > draft_->total_blocks()) return std::nullopt;
  // The longest prefix of the prompt a held sequence has in its cache, running or cached; wait while a
  // sequence is still prefilling one worth sharing (a block or more).
  int source = -1, cached_source = -1;   // sequences; cached_source: the source when it is a cached one
  uint32_t shared = 0;
  if (!embed) {
    for (const Held& h : held) {
      const uint32_t useful = reusable_prefix(h.tokens, prompt);
      const uint32_t have = std::min(useful, target_.length(h.seq));
      if (h.prefilling && have < useful && useful >= target_.block_size()) return std::nullopt;
      if (have > shared) shared = have, source = h.seq;
    }
    for (const CachedSequence& c : cache_) {
      const uint32_t have = std::min(reusable_prefix(c.tokens, prompt), target_.length(c.seq));
      if (have > shared) shared = have, source = cached_source = c.seq;
    }
  }
  // Make room: cached sequences give way to the reservation, least recently used first. The source goes
  // last: when only it is in the way, the request takes it over (the shared blocks become the request's,
  // within its reservation, and the rest is freed).
  bool take_over = false;
  const auto over = [&] {
    const int except = take_over ? cached_source : -2;
    return reserved_.target + need.target + cached_blocks(target_, false, except) > target_.total_blocks() ||
           (draft_ && reserved_.draft + need.draft + cached_blocks(*draft_, true, except) > draft_->total_blocks());
  };
  while (over() && !cache_.empty() && !take_over) {
    size_t victim = cache_.size();
    for (size_t i = 0; i < cache_.size(); ++i)
      if (cache_[i].seq != cached_source && (victim == cache_.size() || cache_[i].last_used < cache_[victim].last_used))
        victim = i;
    if (victim == cache_.size()) take_over = true;   // only the source is left
    else evict(victim);
  }
  if (over()) throw Error("internal: a reservation that fits the pool does not fit once the cache is empty");
  Grant g;
  for (CachedSequence& c : cache_)
    if (c.seq == cached_source) {
      c.last_used = ++clock_;
      if (take_drafter && c.drafter && c.drafter->model_drafter()) {
        g.drafter = std::move(c.drafter);
        c.draft_seq = -1;
      }
    }
  g.seq = target_.new_sequence();
  if (source >= 0) target_.share_prefix(g.seq, source, shared);
  if (take_over)
    for (size_t i = 0; i < cache_.size(); ++i)
      if (cache_[i].seq == cached_source) evict(i--);
  g.reused = shared;
  g.reserved = need;
  reserved_.target += need.target;
  reserved_.draft += need.draft;
  check();
  return g;
}

void KvAdmission::release(int seq, const Reservation& r, std::vector<uint32_t> tokens, std::unique_ptr<Drafter> drafter) {
  if (r.target > reserved_.target || r.draft > reserved_.draft) throw Error("internal: a reservation released twice");
  reserved_.target -= r.target;
  reserved_.draft -= r.draft;
  if (max_cached_ == 0 || tokens.empty()) {
    target_.free_sequence(seq);
    drafter.reset();   // with its draft sequence
    check();
    return;
  }
  // an entry whose tokens the new one starts with is subsumed by it
  for (size_t i = cache_.size(); i-- > 0;) {
    const auto& t = cache_[i].tokens;
    if (t.size() <= tokens.size() && std::equal(t.begin(), t.end(), tokens.begin())) evict(i);
  }
  ModelDrafter* md = drafter ? drafter->model_drafter() : nullptr;
  const int draft_seq = md ? md->sequence() : -1;
  cache_.push_back({seq, std::move(tokens), ++clock_, std::move(drafter), draft_seq});
  if (cache_.size() > max_cached_) {
    size_t lru = 0;
    for (size_t i = 1; i < cache_.size(); ++i)
      if (cache_[i].last_used < cache_[lru].last_used) lru = i;
    evict(lru);
  }
  check();
}

void KvAdmission::evict(size_t i) {
  target_.free_sequence(cache_[i].seq);
  cache_.erase(cache_.begin() + long(i));   // (its drafter frees its draft sequence)
  evictions_++;
}

void KvAdmission::evict_all() {
  while (!cache_.empty()) evict(0);
}

void KvAdmission::check() const {
  const auto pool = [&](const KvBlockPool& p, uint32_t reserved, bool draft_pool, const char* which) {
    const uint32_t cached = cached_blocks(p, draft_pool, -2);
    if (reserved + cached > p.total_blocks())
      throw Error(std::string("internal: the ") + which + " pool's reservations and cached sequences exceed it");
    if (p.blocks_in_use() > reserved + cached)
      throw Error(std::string("internal: ") + std::to_string(p.blocks_in_use()) + " blocks of the " + which +
                  " pool are in use, more than the " + std::to_string(reserved) + " reserved and " +
                  std::to_string(cached) + " cached");
  };
  pool(target_, reserved_.target, false, "target");
  if (draft_) pool(*draft_, reserved_.draft, true, "draft");
  if (cache_.size() > max_cached_) throw Error("internal: the prompt cache holds more sequences than it may");
}

}  // namespace vkspec
