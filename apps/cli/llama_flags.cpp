#include "cli/llama_flags.h"

#include <cstdlib>
#include <cstring>

#include "common/cli_common.h"

namespace vkspec::cli {
namespace {

enum class Spelling {
  Rename,    // vkspec's option of the same meaning (`ours`)
  Ignored,   // vkspec always does what it asks (`ours`: why), value or not
  Refused,   // it cannot apply (`ours`: why)
};
enum class Value { None, One, Optional };   // what follows the flag

struct LlamaFlag {
  const char* llama;
  Spelling what;
  const char* ours;
  Value value = Value::None;
  const char* only = nullptr;   // Ignored: the one value that applies (others are refused with `ours`)
};

constexpr const char* kEveryLayer = "every layer always runs on the Vulkan device (a CPU device: VKSPEC_DEVICE)";
constexpr const char* kThreads = "the Vulkan device does the work; host threads are not a setting";
constexpr const char* kKvType = "vkspec keeps the KV cache in f16";
constexpr const char* kDownload = "vkspec does not download models; give a GGUF file with -m";

constexpr LlamaFlag kFlags[] = {
    {"-md", Spelling::Rename, "--model-draft"},
    {"-sys", Spelling::Rename, "--system"},
    {"-jf", Spelling::Rename, "--json-schema-file"},
    {"-ub", Spelling::Rename, "--ubatch"},
    {"--ubatch-size", Spelling::Rename, "--ubatch"},
    {"--ctx-size", Spelling::Rename, "--ctx"},
    {"-np", Spelling::Rename, "--parallel"},
    {"--chat-template-file", Spelling::Rename, "--chat-template"},
    {"-e", Spelling::Rename, "--escape"},
    {"-mg", Spelling::Rename, "--device"},
    {"--main-gpu", Spelling::Rename, "--device"},
    {"--predict", Spelling::Rename, "--n-predict"},
    {"--system-prompt", Spelling::Rename, "--system"},
    {"-ngl", Spelling::Ignored, kEveryLayer, Value::One},
    {"--n-gpu-layers", Spelling::Ignored, kEveryLayer, Value::One},
    {"--gpu-layers", Spelling::Ignored, kEveryLayer, Value::One},
    {"-fa", Spelling::Ignored, "vkspec's attention is always fused", Value::Optional},
    {"--flash-attn", Spelling::Ignored, "vkspec's attention is always fused", Value::Optional},
    {"-t", Spelling::Ignored, kThreads, Value::One},
    {"--threads", Spelling::Ignored, kThreads, Value::One},
    {"-tb", Spelling::Ignored, kThreads, Value::One},
    {"--threads-batch", Spelling::Ignored, kThreads, Value::One},
    {"--jinja", Spelling::Ignored, "chat templates are always rendered as Jinja"},
    {"--mlock", Spelling::Ignored, "the weights live in device memory"},
    {"--no-mmap", Spelling::Ignored, "the weights are read with positioned reads"},
    {"-cnv", Spelling::Ignored, "use `vkspec chat` for a conversation"},
    {"-ctk", Spelling::Ignored, kKvType, Value::One, "f16"},
    {"--cache-type-k", Spelling::Ignored, kKvType, Value::One, "f16"},
    {"-ctv", Spelling::Ignored, kKvType, Value::One, "f16"},
    {"--cache-type-v", Spelling::Ignored, kKvType, Value::One, "f16"},
    {"-hf", Spelling::Refused, kDownload, Value::One},
    {"-hfr", Spelling::Refused, kDownload, Value::One},
    {"--hf-repo", Spelling::Refused, kDownload, Value::One},
    {"-mu", Spelling::Refused, kDownload, Value::One},
    {"--model-url", Spelling::Refused, kDownload, Value::One},
    {"--lora", Spelling::Refused, "vkspec does not apply LoRA adapters (merge the adapter into the GGUF)", Value::One},
};

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  strtod(s.c_str(), &end);
  return end && *end == 0;
}

}  // namespace

std::vector<std::string> translate_llama_flags(std::vector<std::string> args, std::vector<std::string>* notes) {
  std::vector<std::string> out;
  const bool serve = !args.empty() && args[0] == "serve";
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], inline_value;
    bool has_inline = false;
    if (const size_t eq = a.find('='); a.rfind("-", 0) == 0 && eq != std::string::npos) {
      inline_value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_inline = true;
    }
    // llama.cpp's --draft N is the drafts per round; vkspec's --draft names a drafter (ngram)
    if (a == "--draft" && (has_inline ? is_number(inline_value) : i + 1 < args.size() && is_number(args[i + 1]))) {
      out.push_back("--draft-max");
      if (has_inline) out.push_back(inline_value);
      continue;
    }
    // llama-server's -c is the context of all its sequences together (divided among -np); vkspec's --ctx is each one's
    if (serve && (a == "-c" || a == "--ctx-size")) {
      out.push_back(has_inline ? "--ctx-total=" + inline_value : "--ctx-total");
      continue;
    }
    const LlamaFlag* f = nullptr;
    for (const LlamaFlag& k : kFlags)
      if (a == k.llama) f = &k;
    if (!f) {
      out.push_back(args[i]);
      continue;
    }
    if (f->what == Spelling::Rename) {
      out.push_back(has_inline ? std::string(f->ours) + "=" + inline_value : f->ours);
      continue;
    }
    std::string value;
    if (has_inline) {
      value = inline_value;
    } else if (f->value == Value::One || (f->value == Value::Optional && i + 1 < args.size() && args[i + 1].rfind("-", 0) != 0)) {
      if (i + 1 >= args.size()) throw Error(a + " needs a value");
      value = args[++i];
    }
    const bool applies = f->what == Spelling::Ignored && (!f->only || value == f->only) &&
                         !(f->ours == kEveryLayer && value == "0");
    if (!applies) throw Error(a + (value.empty() ? "" : " " + value) + ": " + f->ours);
    if (notes) notes->push_back(a + " ignored: " + f->ours);
  }
  return out;
}

}  // namespace vkspec::cli
