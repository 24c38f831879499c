#pragma once
// The speculative suites' fixture (tests/test_speculative*.cpp): the stories pair (stories260K and its first
// two layers as a draft), plain greedy decoding as the reference, and a request's chooser and recorder.
#include "platform/platform.h"
#include "speculative/controller.h"
#include "tests/gguf_writer.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {

std::vector<uint32_t> plain_greedy(LlamaModel& m, const std::vector<uint32_t>& prompt, size_t n) {
  const int seq = m.kv().new_sequence();
  m.forward(seq, prompt, Logits::Last);
  std::vector<uint32_t> out;
  while (out.size() < n) {
    uint32_t t = m.argmax_id(0);
    out.push_back(t);
    if (out.size() < n) m.forward(seq, std::span<const uint32_t>(&t, 1), Logits::Last);
  }
  m.kv().free_sequence(seq);
  return out;
}

// What a decoding request holds besides the models: the token chooser and the recorder of its steps.
struct Session {
  TokenChooser chooser;
  Recorder rec;
  Session(uint32_t n_vocab, const SamplingParams& p = greedy_params())
      : chooser(gpu().ctx, gpu().pipelines, n_vocab, 4096), rec(gpu().ctx, false) {
    chooser.start(p);
  }
  static SamplingParams greedy_params() {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
  }
  // The prompt in one submission, its next token chosen into slot 0 (what generate_speculative expects).
  void prefill(LlamaModel& m, int seq, std::span<const uint32_t> tokens, std::span<const uint32_t> context) {
    decode_step(m, seq, chooser, rec, m.write_tokens(tokens), uint32_t(tokens.size()), context);
  }
};

// stories260K with only its first two layers: a real (weak) draft sharing the vocabulary.
std::string write_truncated_stories() {
  GgufFile f(shared_path("models/stories260K.gguf"));
  GgufWriter w;
  w.copy_metadata(f, [](const std::string& k) { return k == "llama.block_count"; });
  w.u32("llama.block_count", 2);
  for (auto& t : f.tensors())
    if (t.name.rfind("blk.", 0) != 0 || t.name.rfind("blk.0.", 0) == 0 || t.name.rfind("blk.1.", 0) == 0)
      w.tensor(t.name, t.dims, t.type, t.data, t.bytes);
  // One file per process: test_speculative and test_speculative_rejection run side by side, and rewriting the file
  // the other has mapped ends its reads with SIGBUS.
  std::string path = ::testing::TempDir() + "/stories260K-2layers-" + std::to_string(platform::process_id()) + ".gguf";
  w.write(path);
  return path;
}

// stories260K as the target and its first two layers as the draft, three sequences each.
struct StoriesPair {
  GgufFile tf{shared_path("models/stories260K.gguf")}, df{write_truncated_stories()};
  ModelOptions mo = [] {
    ModelOptions o;
    o.max_sequences = 3;
    return o;
  }();
  LlamaModel target{gpu().ctx, gpu().pipelines, tf, mo}, draft{gpu().ctx, gpu().pipelines, df, mo};
};

class SpeculativeTest : public VkTest {};

}  // namespace
}  // namespace vkspec::test
