#pragma once
// Admission and KV accounting for the batch engine, and its prompt cache (no device: it works on the KV
// pools' block tables, runtime/kv_block_pool.h, and is tested on them alone).
//
// A request reserves the blocks of its longest possible length (prompt + max_tokens + a round's drafts, at
// most the context) in the target's pool and, with a draft model, in the draft's; one that does not fit
// waits, and a running one never runs out. A new prompt that shares a prefix with a sequence already held
// (running or cached) takes that prefix's blocks by reference and prefills only the rest; while the
// sequence holding a prefix worth sharing is still prefilling it, the request waits for it.
//
// Prompt cache: a finished sequence's KV is kept (up to max_cached of them, least recently used evicted
// first), so that the next request that starts with its tokens (a chat's next turn, a repeated system
// prompt) shares those blocks. Cached sequences give way: admission evicts them (least recently used first)
// whenever a reservation needs their blocks, so the cache never makes a request wait; the one the request
// shares a prefix with goes last, and then is taken over (the request keeps the shared blocks, the rest is
// freed). A cached sequence keeps its request's drafter with its draft sequence, and a request that takes
// its prefix may take the drafter too (the draft model then catches up only on the rest).
//
// The pool invariant, asserted after every change (check): in each pool, every block in use is covered by a
// running request's reservation or a cached sequence's length, and reservations + cached lengths fit the
// pool; so "reserved + cached + a new reservation <= pool" keeps "a running request never runs out".
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "runtime/kv_block_pool.h"
#include "speculative/drafter.h"

namespace vkspec {

class KvAdmission {
 public:
  // The sequences admitted so far, which a new prompt may share a prefix with.
  struct Held {
    int seq;
    std::span<const uint32_t> tokens;   // what its KV holds or will hold (a prefilling sequence: its prompt)
    bool prefilling;
  };
  struct Reservation {
    uint32_t target = 0, draft = 0;   // blocks in each pool
  };
  // What an admitted request holds.
  struct Grant {
    int seq = -1;        // its KV sequence in the target's pool
    uint32_t reused = 0; // leading prompt tokens whose blocks it shares
    Reservation reserved;
    std::unique_ptr<Drafter> drafter;   // a cached sequence's, taken with its prefix (when asked for)
  };

  KvAdmission(KvBlockPool& target, KvBlockPool* draft, uint32_t n_ctx, uint32_t max_cached);
  ~KvAdmission();

  // The blocks a request may hold at most: its prompt, max_tokens and a round's drafts, within the context
  // (an embedding: its prompt).
  Reservation reservation(uint32_t prompt_tokens, uint32_t max_tokens, bool embed) const;
  // False when a request could never be admitted (its reservation exceeds a whole pool).
  bool could_ever_fit(const Reservation& r) const;
  // Admits a request now, or nullopt: it waits (blocks, or a prefix being prefilled). `held`: the running
  // sequences (none shares with an embedding, whose every row is computed). `take_drafter`: the request
  // speculates with a draft model and takes a cached source's drafter.
  std::optional<Grant> admit(std::span<const uint32_t> prompt, uint32_t max_tokens, bool embed,
                             std::span<const Held> held, bool take_drafter);
  // A running request ended: its reservation is released and its sequence, whose KV holds `tokens` (empty:
  // not to be kept), is cached with its drafter (or freed, the drafter with it).
  void release(int seq, const Reservation& r, std::vector<uint32_t> tokens, std::unique_ptr<Drafter> drafter);
  void evict_all();

  uint32_t cached() const { return uint32_t(cache_.size()); }
  uint64_t evictions() const { return evictions_; }
  const Reservation& reserved() const { return reserved_; }
  // The pool invariant (see above) and each pool's own; throws Error("internal: ...") when broken.
  void check() const;

 private:
  struct CachedSequence {
    int seq;
    std::vector<uint32_t> tokens;   // what its KV holds, in order
    uint64_t last_used;
    std::unique_ptr<Drafter> drafter;   // its request's (null: none, or taken)
    int draft_seq;                      // the drafter's sequence in the draft pool (-1: none)
  };
  uint32_t cached_blocks(const KvBlockPool& pool, bool draft_pool, int except) const;
  void evict(size_t i);

  KvBlockPool& target_;
  KvBlockPool* draft_;
  uint32_t n_ctx_, max_cached_;
  Reservation reserved_;
  std::vector<CachedSequence> cache_;
  uint64_t clock_ = 0, evictions_ = 0;
};

}  // namespace vkspec
