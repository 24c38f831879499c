#pragma once
// The batch engine suites' fixture (tests/test_batch_engine*.cpp): the pycode pair loaded once, requests that
// record what they were given, and draining a batch.
#include <condition_variable>
#include <map>
#include <thread>

#include "engine/batch_engine.h"
#include "engine/engine.h"
#include "text/prompt.h"
#include "speculative/drafter.h"
#include "tests/vk_test_env.h"

namespace vkspec::test {
namespace {


using vkspec::BatchEngine;
using vkspec::BatchRequest;
using vkspec::SequenceResult;
using vkspec::StopReason;

const char* kPrompts[] = {"def fibonacci(n):\n", "import os\nimport sys\n\n", "class Stack:\n    def __init__(self):\n",
                          "for i in range(10):\n", "    return self.", "with open(path) as f:\n"};

inline std::vector<uint32_t> encode(const TargetModel& t, const std::string& text) {
  return tokenize(*t.tok, text, AddBos::IfWanted, true);
}

struct Outcome {
  std::vector<uint32_t> ids;
  SequenceResult result;
  bool done = false;
};

class BatchEngineTest : public VkTest {
 protected:
  static std::shared_ptr<TargetModel> target(uint32_t sequences, uint32_t kv_blocks = 0) {
    TargetModel::Options to;
    to.path = shared_path("models/pycode-target-f16.gguf");
    to.n_ctx = 256;
    to.max_sequences = sequences;
    to.kv_blocks = kv_blocks;
    return std::make_shared<TargetModel>(to);
  }
  static std::shared_ptr<BatchRequest> request(const std::vector<uint32_t>& prompt, const SamplingParams& sp,
                                               uint32_t n, Outcome& out) {
    auto r = std::make_shared<BatchRequest>();
    r->prompt = prompt;
    r->sp = sp;
    r->max_tokens = n;
    r->ignore_eos = true;
    r->on_token = [&out](uint32_t t, bool, const float*) {
      out.ids.push_back(t);
      return true;
    };
    r->on_done = [&out](const SequenceResult& res) {
      out.result = res;
      out.done = true;
    };
    return r;
  }
  static void drain(BatchEngine& e) {
    for (int guard = 0; guard < 100000 && e.step(); ++guard) {
    }
  }
};

}  // namespace
}  // namespace vkspec::test
