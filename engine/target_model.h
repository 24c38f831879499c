#pragma once
// What the engines share: a target model loaded once (file, tokenizer, device, pipelines, the model with its
// paged KV pool), the constraints its requests ask for, and the drafting options with the one function that
// loads a draft model beside it. Engine (one request at a time) and BatchEngine (continuous batching) run on it.
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "constrain/gbnf.h"
#include "constrain/json_grammar.h"
#include "text/tokenizer.h"
#include "runtime/model.h"
#include "runtime/sampling_params.h"
#include "speculative/draft_policy.h"
#include "speculative/controller.h"
#include "speculative/drafter.h"

namespace vkspec {

// How requests draft (the C API's draft parameters; the CLI's -md and --draft flags).
struct DraftOptions {
  std::string model_path;   // a draft GGUF sharing the target's vocabulary, or empty
  bool ngram = false;       // prompt lookup (with a draft model: lookup first, the model when it finds nothing)
  uint32_t max = 5, min = 0;   // K (the most when adaptive); rounds drafting fewer decode plainly
  float p_min = 0.0f;
  DraftLengthPolicy policy = DraftLengthPolicy::Adaptive;
  DraftTree tree = DraftTree::Auto;   // which rounds draft token trees (speculative/controller.h)
  DrafterKind kind() const {
    if (!model_path.empty()) return ngram ? DrafterKind::NgramThenModel : DrafterKind::Model;
    return ngram ? DrafterKind::Ngram : DrafterKind::None;
  }
};
// Throws a clear error (naming the CLI's flags) for drafting options out of range.
void check_draft_options(const DraftOptions& o);
// Sampling settings checked (values the device sampler would turn into NaN or infinite probabilities are
// refused, naming the CLI's flags); the seed is left to the caller.
SamplingParams checked_sampling(const SamplingParams& sp);

// A target model loaded once and shared by the engines on it.
// Another completion's submitted step holds the model (TargetModel::claim without waiting).
struct ModelBusy : Error {
  using Error::Error;
};

struct TargetModel {
  struct Options {
    std::string path;
    int device = -1;
    uint32_t n_ctx = 0;           // 0: the model's, capped at 4096
    uint32_t max_sequences = 1;   // KV sequences that may be open at once (each needs KV for n_ctx)
    uint32_t kv_blocks = 0;       // KV pool blocks (0: n_ctx for each of kv_pool_sequences)
    uint32_t kv_pool_sequences = 0;   // 0: max_sequences
    uint32_t ubatch = 0;          // tokens per forward chunk (ModelOptions::ubatch; 0: the device's)
    std::function<void(uint64_t done, uint64_t total)> progress;
    std::optional<ExternalDevice> external;   // the application's device (C API external device mode)
    bool vocab_only = false;      // the file and tokenizer only: no device, no model (ctx, pipelines, model null)
    std::optional<std::string> pipeline_cache;   // Pipelines' cache file (nullopt: the default place; "": none)
    std::span<const uint8_t> memory;   // non-empty: the GGUF's bytes (outliving the model), `path` its label
    GgufFile::Reader reader;           // set: the GGUF read through it (reader_size bytes; outliving the model)
    uint64_t reader_size = 0;
  };
  explicit TargetModel(const Options& o);
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<VulkanDevice> ctx;
  std::unique_ptr<Pipelines> pipelines;
  std::unique_ptr<LlamaModel> model;
  double load_s = 0;
  // Held while a completion records or commits a step: the model's activations and the device queue serve
  // one at a time. Between an asynchronous step's submission and its collection (Engine::submit, collect)
  // the model's buffers still belong to that step: `in_flight` names its owner, and no other completion
  // records until it is collected. claim() takes `busy` once no other owner's step is in flight: waiting for
  // that (wait), or else throwing ModelBusy; also when the step was submitted by the calling thread, which
  // would otherwise wait for itself.
  std::mutex busy;
  const void* in_flight = nullptr;
  std::thread::id in_flight_thread;
  std::condition_variable collected;
  std::unique_lock<std::mutex> claim(const void* owner, bool wait = true);
  // The constraint of a request's settings (JSON mode, a grammar; null: none). The vocabulary's views they
  // need are made at the first request that asks (any thread); the last kGrammarsKept grammars are kept
  // parsed with their masks (GbnfMaskCache), for the requests that repeat them.
  std::unique_ptr<TokenConstraint> constraint(const SamplingParams& sp);
  // The same, refused (a request's error) when no token can start the text it allows.
  std::unique_ptr<TokenConstraint> startable_constraint(const SamplingParams& sp);
  static constexpr size_t kGrammarsKept = 8, kGrammarBytesKept = 16u << 20;   // (the grammars, not their masks)

 private:
  struct KeptGrammar {
    std::string text;
    std::shared_ptr<const Gbnf> grammar;
    std::shared_ptr<GbnfMaskCache> masks;
  };
  std::mutex constraint_mu_;
  std::shared_ptr<const VocabBytes> vocab_bytes_;
  std::shared_ptr<const JsonGrammar> json_grammar_;
  std::vector<KeptGrammar> grammars_;   // most recently used last
};

// A draft model loaded beside a target, on its device and pipelines (-md).
struct DraftModel {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<LlamaModel> model;
};
// The draft model of `o` (null when o runs none), checked to share the target's vocabulary, with the
// target's context and chunk size, `sequences` KV sequences of which `pool_sequences` (0: all) are given
// blocks for a whole context. The caller holds the target's `busy` (the upload uses the shared queue).
std::unique_ptr<DraftModel> load_draft_model(const TargetModel& target, const DraftOptions& o, uint32_t sequences,
                                             uint32_t pool_sequences = 0);

}  // namespace vkspec
