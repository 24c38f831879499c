#pragma once
// A Session on disk (llama.cpp's state files, `llama-cli --prompt-cache`): the tokens a session's KV holds and
// that KV, so that a later process goes on with a long prompt or conversation without prefilling it again.
// The file names the model it was made with (its shapes and a fingerprint of its weights: the tensor table
// and the values of its norms), so a file of another model, a truncated or an altered file is refused with
// the reason and the session is left as it was.
//
// Layout, little-endian: "VKSPKV01"; n_layers, n_kv_heads, head_dim, n_vocab (u32); the fingerprint (u64);
// n_tokens (u32); the tokens (u32 each); then per layer the K and then the V of positions 0..n_tokens-1
// ([position][kv head][head dim] f16, as PagedKvCache holds them, independent of its block size); last an
// FNV-1a hash (u64) of every byte before it.
#include <string>

#include "engine/engine.h"

namespace vkspec {

// Writes the session's tokens and KV to `path` (through a temporary file beside it, renamed at the end, so a
// failed save leaves an older file whole). The caller holds the model (TargetModel::busy) with no completion
// running on the session; waits for the device.
void save_session(TargetModel& t, const Session& s, const std::string& path);

// Replaces the session's tokens and KV by the file's. Throws Error naming the problem (not a session file,
// another model, longer than the context, truncated, altered) before touching the session. Same caller
// duties as save_session.
void load_session(TargetModel& t, Session& s, const std::string& path);

}  // namespace vkspec
