#include "engine/target_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace vkspec {

SamplingParams checked_sampling(const SamplingParams& sp) {
  if (!std::isfinite(sp.temperature)) throw Error("--temp must be a finite number (0 = greedy)");
  if (!(sp.top_p > 0.0f && sp.top_p <= 1.0f))
    throw Error("--top-p must be in (0, 1] (1 = off), got " + std::to_string(sp.top_p));
  if (!(sp.min_p >= 0.0f && sp.min_p <= 1.0f))
    throw Error("--min-p must be in [0, 1] (0 = off), got " + std::to_string(sp.min_p));
  if (sp.top_k < 0) throw Error("--top-k must be 0 (off) or positive, got " + std::to_string(sp.top_k));
  if (sp.repeat_last_n < -1) throw Error("--repeat-last-n must be -1 (the whole context), 0 (off) or positive");
  if (!std::isfinite(sp.repeat_penalty) || sp.repeat_penalty <= 0.0f)
    throw Error("--repeat-penalty must be a positive number (1 = off)");
  // Finite and bounded (OpenAI allows [-2, 2], llama.cpp anything): past +-100 a penalty only removes or
  // forces a token.
  if (!(std::fabs(sp.frequency_penalty) <= 100.0f)) throw Error("--frequency-penalty must be in [-100, 100] (0 = off)");
  if (!(std::fabs(sp.presence_penalty) <= 100.0f)) throw Error("--presence-penalty must be in [-100, 100] (0 = off)");
  for (const LogitBias& b : sp.logit_bias)   // (their count is checked where they are read: c_api_internal.h)
    if (!(std::fabs(b.bias) <= SamplingParams::kLogitBiasBound))
      throw Error("--logit-bias: a bias must be in [-100, 100], got " + std::to_string(b.bias) + " for token " +
                  std::to_string(b.token));
  return sp;
}

void check_draft_options(const DraftOptions& o) {
  if (o.max < 1 || o.max > LlamaModel::kMaxBatch - 1 || o.min > o.max)
    throw Error("--draft-max must be 1.." + std::to_string(LlamaModel::kMaxBatch - 1) + " and --draft-min 0..draft-max");
  if (!(o.p_min >= 0.0f && o.p_min <= 1.0f)) throw Error("--draft-p-min must be in [0, 1] (0 = off)");
}

TargetModel::TargetModel(const Options& o) {
  const auto t_load = std::chrono::steady_clock::now();
  const auto loaded = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count(); };
  file = o.reader           ? std::make_unique<GgufFile>(o.reader, o.reader_size, o.path)
         : o.memory.empty() ? std::make_unique<GgufFile>(o.path)
                            : std::make_unique<GgufFile>(o.memory.data(), o.memory.size(), o.path);
  if (!o.vocab_only) check_supported_model(*file);   // (the real reason first, before the tokenizer's)
  tok = Tokenizer::from_gguf(*file);
  if (o.vocab_only) {
    load_s = loaded();
    return;
  }
  ctx = std::make_unique<VulkanDevice>(VulkanDeviceOptions{o.device, false, o.external ? &*o.external : nullptr});
  pipelines = std::make_unique<Pipelines>(*ctx, o.pipeline_cache);
  ModelOptions mo;
  mo.n_ctx = o.n_ctx;
  mo.max_sequences = o.max_sequences;
  mo.kv_blocks = o.kv_blocks;
  mo.kv_pool_sequences = o.kv_pool_sequences;
  mo.ubatch = o.ubatch;
  mo.progress = o.progress;
  model = std::make_unique<LlamaModel>(*ctx, *pipelines, *file, mo);
  if (tok->n_vocab() != model->hparams().n_vocab) throw Error("tokenizer and model disagree on the vocabulary size");
  load_s = loaded();
}

std::unique_lock<std::mutex> TargetModel::claim(const void* owner, bool wait) {
  std::unique_lock<std::mutex> lock(busy);
  if (in_flight && in_flight != owner && (!wait || in_flight_thread == std::this_thread::get_id()))
    throw ModelBusy("another context's submitted step holds the model: collect it first");
  collected.wait(lock, [&] { return !in_flight || in_flight == owner; });
  return lock;
}

std::unique_ptr<TokenConstraint> TargetModel::constraint(const SamplingParams& sp) {
  if (!sp.constrained()) return nullptr;
  if (sp.json_object && !sp.grammar.empty()) throw Error("JSON mode and a grammar exclude each other");
  std::lock_guard<std::mutex> lock(constraint_mu_);
  if (!vocab_bytes_) vocab_bytes_ = std::make_shared<const VocabBytes>(*tok);
  if (!sp.json_object) {
    auto kept = std::find_if(grammars_.begin(), grammars_.end(), [&](const KeptGrammar& k) { return k.text == sp.grammar; });
    if (kept == grammars_.end()) {
      std::shared_ptr<const Gbnf> parsed = Gbnf::parse(sp.grammar);
      // the least recently used go while the kept ones would be too many or hold too much
      size_t bytes = parsed->bytes();
      for (const KeptGrammar& k : grammars_) bytes += k.grammar->bytes();
      while (!grammars_.empty() && (grammars_.size() >= kGrammarsKept || bytes > kGrammarBytesKept)) {
        bytes -= grammars_.front().grammar->bytes();
        grammars_.erase(grammars_.begin());
      }
      grammars_.push_back({sp.grammar, std::move(parsed), std::make_shared<GbnfMaskCache>()});
    } else {
      std::rotate(kept, kept + 1, grammars_.end());   // most recently used last
    }
    const KeptGrammar& g = grammars_.back();
    if (!sp.grammar_trigger.empty())
      return std::make_unique<TriggeredGbnfConstraint>(Gbnf::parse(sp.grammar_trigger), g.grammar, vocab_bytes_, g.masks);
    return std::make_unique<GbnfConstraint>(g.grammar, vocab_bytes_, g.masks);
  }
  if (!json_grammar_) json_grammar_ = std::make_shared<const JsonGrammar>(vocab_bytes_);
  return std::make_unique<JsonConstraint>(json_grammar_);
}

std::unique_ptr<TokenConstraint> TargetModel::startable_constraint(const SamplingParams& sp) {
  std::unique_ptr<TokenConstraint> c = constraint(sp);
  if (c && !c->allows_any(tok->n_vocab()))
    throw Error("the grammar allows no token at its start: it accepts no text the model's vocabulary can write");
  return c;
}

std::unique_ptr<DraftModel> load_draft_model(const TargetModel& t, const DraftOptions& o, uint32_t sequences,
                                             uint32_t pool_sequences) {
  if (o.model_path.empty()) return nullptr;
  auto d = std::make_unique<DraftModel>();
  d->file = std::make_unique<GgufFile>(o.model_path);
  check_supported_model(*d->file);
  check_same_vocabulary(*t.tok, *Tokenizer::from_gguf(*d->file));
  ModelOptions mo;
  mo.n_ctx = t.model->n_ctx();
  mo.max_sequences = sequences;
  mo.kv_pool_sequences = pool_sequences;
  mo.ubatch = t.model->ubatch();
  d->model = std::make_unique<LlamaModel>(*t.ctx, *t.pipelines, *d->file, mo);
  return d;
}

}  // namespace vkspec
