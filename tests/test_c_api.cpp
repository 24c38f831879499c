// The C API (include/vkspec.h, libvkspec.so): results equal the CLI's and the reference ids, streaming and
// stopping, prompt-cache reuse, cancellation (before and during a prefill), the threading rules (BUSY for a
// context used twice at once, two contexts on one model from two threads), and clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <thread>

#include <nlohmann/json.hpp>

#include <vulkan/vulkan.h>

#include "platform/platform.h"
#include "tests/run_program.h"
#include "vkspec.h"

namespace {

std::string shared(const std::string& rel) {
  const char* s = getenv("VKSPEC_SHARED");
  return std::string(s ? s : "../shared") + "/" + rel;
}
const std::string kStories = shared("models/stories260K.gguf");

struct Model {
  vkspec_model* m = nullptr;
  explicit Model(const std::string& path, uint32_t max_contexts = 1, uint32_t n_ctx = 0, uint32_t n_ubatch = 0) {
    vkspec_model_params p = vkspec_model_default_params();
    p.max_contexts = max_contexts;
    p.n_ctx = n_ctx;
    p.n_ubatch = n_ubatch;
    EXPECT_EQ(vkspec_model_load(path.c_str(), &p, &m), VKSPEC_OK) << vkspec_last_error();
  }
  ~Model() { EXPECT_EQ(vkspec_model_free(m), VKSPEC_OK) << vkspec_last_error(); }
};

struct Ctx {
  vkspec_context* c = nullptr;
  explicit Ctx(vkspec_model* m, vkspec_context_params p = greedy()) {
    EXPECT_EQ(vkspec_context_create(m, &p, &c), VKSPEC_OK) << vkspec_last_error();
  }
  ~Ctx() { EXPECT_EQ(vkspec_context_free(c), VKSPEC_OK) << vkspec_last_error(); }
  static vkspec_context_params greedy() {
    vkspec_context_params p = vkspec_context_default_params();
    p.sampling.temperature = 0.0f;
    return p;
  }
};

std::vector<int32_t> tokenize(vkspec_model* m, const std::string& text) {
  size_t n = 0;
  EXPECT_EQ(vkspec_tokenize(m, text.data(), text.size(), 1, 1, nullptr, 0, &n), VKSPEC_OK);
  std::vector<int32_t> ids(n);
  EXPECT_EQ(vkspec_tokenize(m, text.data(), text.size(), 1, 1, ids.data(), ids.size(), &n), VKSPEC_OK);
  return ids;
}

struct Streamed {
  std::vector<int32_t> ids;
  std::string text;
  int drafts = 0;
  int stop_after = -1;
};
int collect(int32_t token, const char* piece, size_t len, int32_t from_draft, void* user) {
  auto* s = static_cast<Streamed*>(user);
  s->ids.push_back(token);
  s->text.append(piece, len);
  s->drafts += from_draft;
  return s->stop_after >= 0 && int(s->ids.size()) >= s->stop_after;
}
// Up to n tokens after `prompt` on a new context with `p`: what was streamed and why it stopped.
struct Generated {
  Streamed s;
  std::string stop;
};
Generated generate_on_new_context(vkspec_model* m, const std::vector<int32_t>& prompt, const vkspec_context_params& p, int n) {
  Ctx ctx(m, p);
  Generated o;
  vkspec_generate_params g = vkspec_generate_default_params();
  g.n_predict = n;
  g.on_token = collect;
  g.user = &o.s;
  EXPECT_EQ(vkspec_generate(ctx.c, prompt.data(), prompt.size(), &g), VKSPEC_OK) << vkspec_last_error();
  vkspec_metrics metrics;
  EXPECT_EQ(vkspec_get_metrics(ctx.c, &metrics), VKSPEC_OK);
  o.stop = metrics.stop_reason;
  return o;
}

vkspec_status generate(vkspec_context* c, const std::vector<int32_t>& prompt, int n, Streamed& out, int speculative = 1) {
  vkspec_generate_params g = vkspec_generate_default_params();
  g.n_predict = n;
  g.ignore_eos = 1;
  g.speculative = speculative;
  g.on_token = collect;
  g.user = &out;
  return vkspec_generate(c, prompt.data(), prompt.size(), &g);
}

TEST(CApi, VersionDevicesAndErrors) {
  EXPECT_EQ(vkspec_api_version(), uint32_t(VKSPEC_API_VERSION));
  uint32_t n = 0;
  ASSERT_EQ(vkspec_list_devices(nullptr, 0, &n), VKSPEC_OK);
  ASSERT_GE(n, 1u);
  std::vector<vkspec_device_info> d(n);
  ASSERT_EQ(vkspec_list_devices(d.data(), n, &n), VKSPEC_OK);
  EXPECT_GT(strlen(d[0].name), 0u);
  EXPECT_GT(d[0].subgroup_size, 0u);

  vkspec_model* m = nullptr;
  vkspec_model_params p = vkspec_model_default_params();
  EXPECT_EQ(vkspec_model_load(nullptr, &p, &m), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("null"), std::string::npos);
  EXPECT_EQ(vkspec_model_load("/nonexistent.gguf", &p, &m), VKSPEC_ERROR_LOAD);
  EXPECT_NE(std::string(vkspec_last_error()).find("/nonexistent.gguf"), std::string::npos) << vkspec_last_error();
  EXPECT_EQ(m, nullptr);
  p.max_contexts = 0;
  EXPECT_EQ(vkspec_model_load(kStories.c_str(), &p, &m), VKSPEC_ERROR_INVALID_ARGUMENT);
  p = vkspec_model_default_params();
  p.n_ubatch = 513;
  EXPECT_EQ(vkspec_model_load(kStories.c_str(), &p, &m), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("n_ubatch"), std::string::npos) << vkspec_last_error();
  p = vkspec_model_default_params();
  p.device = int32_t(n);   // one past the last device
  EXPECT_EQ(vkspec_model_load(kStories.c_str(), &p, &m), VKSPEC_ERROR_DEVICE) << vkspec_last_error();
  EXPECT_EQ(vkspec_model_free(nullptr), VKSPEC_OK);
  EXPECT_EQ(vkspec_cancel(nullptr), VKSPEC_ERROR_INVALID_ARGUMENT);
  // the last error is per thread
  std::thread([] { EXPECT_STREQ(vkspec_last_error(), ""); }).join();
}

TEST(CApi, EstimateMemoryAndProgressCancel) {
  vkspec_model_params p = vkspec_model_default_params();
  vkspec_memory_estimate e{};
  ASSERT_EQ(vkspec_estimate_memory(kStories.c_str(), &p, &e), VKSPEC_OK) << vkspec_last_error();
  EXPECT_GT(e.weights_bytes, 0u);
  EXPECT_GT(e.kv_bytes, 0u);
  EXPECT_EQ(e.total_bytes, e.weights_bytes + e.kv_bytes + e.activation_bytes);
  EXPECT_TRUE(e.fits);
  p.max_contexts = 4;
  vkspec_memory_estimate e4{};
  ASSERT_EQ(vkspec_estimate_memory(kStories.c_str(), &p, &e4), VKSPEC_OK);
  EXPECT_EQ(e4.kv_bytes, 4 * e.kv_bytes);
  // a larger forward chunk holds more activations (and attention partials) at once; a smaller KV pool less KV
  p.n_ubatch = 16;
  vkspec_memory_estimate e16{}, e256{};
  ASSERT_EQ(vkspec_estimate_memory(kStories.c_str(), &p, &e16), VKSPEC_OK);
  p.n_ubatch = 256;
  p.kv_contexts = 2;
  ASSERT_EQ(vkspec_estimate_memory(kStories.c_str(), &p, &e256), VKSPEC_OK);
  EXPECT_GT(e256.activation_bytes, e16.activation_bytes);
  EXPECT_EQ(e256.kv_bytes, 2 * e.kv_bytes);
  p = vkspec_model_default_params();

  // A progress callback that cancels: no model, CANCELLED; one that lets it finish sees 1.0 last.
  struct P { float last = -1; int calls = 0; bool cancel; };
  auto cb = [](float f, void* u) {
    auto* s = static_cast<P*>(u);
    s->last = f;
    s->calls++;
    return s->cancel ? 1 : 0;
  };
  P stop{-1, 0, true}, go{-1, 0, false};
  vkspec_model* m = nullptr;
  p = vkspec_model_default_params();
  p.progress = cb;
  p.progress_user = &stop;
  EXPECT_EQ(vkspec_model_load(kStories.c_str(), &p, &m), VKSPEC_ERROR_CANCELLED);
  EXPECT_EQ(m, nullptr);
  EXPECT_EQ(stop.calls, 1);
  p.progress_user = &go;
  ASSERT_EQ(vkspec_model_load(kStories.c_str(), &p, &m), VKSPEC_OK) << vkspec_last_error();
  EXPECT_FLOAT_EQ(go.last, 1.0f);
  EXPECT_EQ(vkspec_model_free(m), VKSPEC_OK);
}

// Greedy ids equal the reference file's (made by the project's first engine and checked against llama.cpp),
// through the callback, with the text pieces adding up to the detokenized ids.
TEST(CApi, GreedyEqualsReferenceAndStreams) {
  std::ifstream in(shared("models/reference/stories260K-greedy.jsonl"));
  std::string line;
  std::getline(in, line);
  const auto ref = nlohmann::json::parse(line);
  Model model(kStories);
  const std::vector<int32_t> prompt = tokenize(model.m, ref["prompt"].get<std::string>());
  EXPECT_EQ(prompt, ref["prompt_ids"].get<std::vector<int32_t>>());
  Ctx ctx(model.m);
  Streamed s;
  ASSERT_EQ(generate(ctx.c, prompt, 24, s), VKSPEC_OK) << vkspec_last_error();
  std::vector<int32_t> want = ref["ids"].get<std::vector<int32_t>>();
  want.resize(24);
  EXPECT_EQ(s.ids, want);
  size_t len = 0;
  ASSERT_EQ(vkspec_detokenize(model.m, s.ids.data(), s.ids.size(), nullptr, 0, &len), VKSPEC_OK);
  std::string text(len, '\0');
  ASSERT_EQ(vkspec_detokenize(model.m, s.ids.data(), s.ids.size(), text.data(), len + 1, &len), VKSPEC_OK);
  EXPECT_EQ(s.text, text);
  vkspec_metrics m{};
  ASSERT_EQ(vkspec_get_metrics(ctx.c, &m), VKSPEC_OK);
  EXPECT_EQ(m.generated_tokens, 24u);
  EXPECT_EQ(m.prompt_tokens, prompt.size());
  EXPECT_STREQ(m.stop_reason, "length");

  // The callback stops it: exactly that many tokens, "stopped"
  Streamed stop;
  stop.stop_after = 5;
  ASSERT_EQ(generate(ctx.c, prompt, 24, stop), VKSPEC_OK);
  EXPECT_EQ(stop.ids, std::vector<int32_t>(want.begin(), want.begin() + 5));
  ASSERT_EQ(vkspec_get_metrics(ctx.c, &m), VKSPEC_OK);
  EXPECT_STREQ(m.stop_reason, "stopped");
}

// The logit bias through the C API: +100 on a token makes greedy choose it at every step; -100 on the
// greedy reference's first token makes greedy choose the reference's runner-up there (any other token).
TEST(CApi, LogitBiasSteersGreedy) {
  std::ifstream in(shared("models/reference/stories260K-greedy.jsonl"));
  std::string line;
  std::getline(in, line);
  const auto ref = nlohmann::json::parse(line);
  const std::vector<int32_t> want = ref["ids"].get<std::vector<int32_t>>();
  Model model(kStories);
  const std::vector<int32_t> prompt = tokenize(model.m, ref["prompt"].get<std::string>());
  for (const float bias : {100.0f, -100.0f}) {
    vkspec_context_params p = Ctx::greedy();
    const int32_t token[] = {bias > 0 ? want[3] : want[0]};
    const float value[] = {bias};
    p.sampling.logit_bias_tokens = token;
    p.sampling.logit_bias = value;
    p.sampling.n_logit_bias = 1;
    Ctx ctx(model.m, p);
    Streamed s;
    ASSERT_EQ(generate(ctx.c, prompt, 6, s), VKSPEC_OK) << vkspec_last_error();
    if (bias > 0) EXPECT_EQ(s.ids, std::vector<int32_t>(6, want[3]));
    else EXPECT_NE(s.ids[0], want[0]);
  }
}

// Constrained generation through the API. JSON mode: the streamed text is a JSON object (the generation ended
// by itself) or a prefix of one (n_predict cut it), the same with prompt lookup speculating; json_object
// other than 0/1 is refused. A GBNF grammar: the text is a sentence of it (checked with a regular expression
// of the same language), ended by end of generation; one that does not parse is refused with its line.
TEST(CApi, ConstrainedGenerationThroughTheApi) {
  Model model(kStories);
  const std::vector<int32_t> prompt = tokenize(model.m, "Once upon a time");
  std::vector<std::string> texts;
  for (const int32_t ngram : {0, 1}) {
    vkspec_context_params p = Ctx::greedy();
    p.sampling.json_object = 1;
    p.draft.ngram = ngram;
    Ctx ctx(model.m, p);
    Streamed s;
    vkspec_generate_params g = vkspec_generate_default_params();
    g.n_predict = 64;
    g.on_token = collect;
    g.user = &s;
    ASSERT_EQ(vkspec_generate(ctx.c, prompt.data(), prompt.size(), &g), VKSPEC_OK) << vkspec_last_error();
    vkspec_metrics m;
    ASSERT_EQ(vkspec_get_metrics(ctx.c, &m), VKSPEC_OK);
    ASSERT_FALSE(s.text.empty());
    EXPECT_EQ(s.text[0], '{') << s.text;
    if (std::string(m.stop_reason) == "eos") {
      nlohmann::json doc;
      ASSERT_NO_THROW(doc = nlohmann::json::parse(s.text)) << s.text;
      EXPECT_TRUE(doc.is_object());
    } else {
      EXPECT_STREQ(m.stop_reason, "length");
      try {
        const auto whole = nlohmann::json::parse(s.text);
        ADD_FAILURE() << "a cut-off text parses whole: " << whole.dump();
      } catch (const nlohmann::json::parse_error& e) {
        EXPECT_EQ(e.byte, s.text.size() + 1) << e.what() << "\n" << s.text;
      }
    }
    texts.push_back(s.text);
  }
  EXPECT_EQ(texts[0], texts[1]);
  vkspec_context_params p = vkspec_context_default_params();
  EXPECT_EQ(p.sampling.json_object, 0);
  EXPECT_EQ(p.sampling.grammar, nullptr);
  p.sampling.json_object = 2;
  vkspec_context* c = nullptr;
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("json_object"), std::string::npos);
  p.sampling.json_object = 1;
  p.sampling.grammar = "root ::= \"a\"\n";
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c), VKSPEC_ERROR_INVALID_ARGUMENT);   // not both
  p.sampling.json_object = 0;
  p.sampling.grammar = "root ::= [a-z\n";
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("line 1: an unterminated character class"), std::string::npos)
      << vkspec_last_error();
  // a grammar: the text is a sentence of it, and generation ends where it does
  {
    p = Ctx::greedy();
    p.sampling.grammar = "root ::= \"Once \" [a-z]+ (\" \" [a-z]+){2} \".\"\n";
    const Generated out = generate_on_new_context(model.m, prompt, p, 64);
    const Streamed& s = out.s;
    EXPECT_EQ(out.stop, "eos") << s.text;
    // "Once " [a-z]+ (" " [a-z]+){2} ".", checked by hand
    std::vector<std::string> words;
    bool shape = s.text.rfind("Once ", 0) == 0 && s.text.size() > 5 && s.text.back() == '.';
    for (size_t i = 5; shape && i + 1 < s.text.size(); ++i) {
      const char c = s.text[i];
      if (c == ' ') words.emplace_back();
      else if (c >= 'a' && c <= 'z') (words.empty() ? words.emplace_back() : words.back()) += c;
      else shape = false;
    }
    EXPECT_TRUE(shape && words.size() == 3 && std::none_of(words.begin(), words.end(), [](auto& w) { return w.empty(); }))
        << s.text;
  }
  // a JSON schema: converted to a grammar; not JSON, or a keyword it cannot honour, is refused by name
  p = Ctx::greedy();
  p.sampling.json_schema = "{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"minItems\": 1, \"maxItems\": 3}";
  const Generated arr = generate_on_new_context(model.m, prompt, p, 64);
  if (arr.stop == "eos") {
    const auto v = nlohmann::json::parse(arr.s.text);
    EXPECT_TRUE(v.is_array() && !v.empty() && v.size() <= 3 && v[0].is_number_integer()) << arr.s.text;
  }
  vkspec_context* c2 = nullptr;
  p.sampling.json_schema = "{\"type\": \"string\", \"format\": \"ipv6\"}";
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c2), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("the format 'ipv6' is not supported"), std::string::npos) << vkspec_last_error();
  p.sampling.json_schema = "{\"type\": ";
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c2), VKSPEC_ERROR_INVALID_ARGUMENT);
  p.sampling.grammar = "root ::= \"a\"\n";
  p.sampling.json_schema = "{}";
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c2), VKSPEC_ERROR_INVALID_ARGUMENT);   // not both
}

// A lazy grammar (grammar_trigger, how the server constrains tool_choice "auto"): the model's own tokens until
// the text matches the trigger, the grammar's from there; a trigger that never matches changes nothing.
TEST(CApi, LazyGrammarHoldsFromItsTrigger) {
  Model model(kStories);
  const std::vector<int32_t> prompt = tokenize(model.m, "Once upon a time");
  auto generate = [&](const vkspec_context_params& p) { return generate_on_new_context(model.m, prompt, p, 32); };
  for (const float temp : {0.0f, 0.8f}) {   // never triggered: the same tokens, greedy and sampled
    vkspec_context_params p = Ctx::greedy();
    p.sampling.temperature = temp;
    p.sampling.seed = 11;
    const Generated plain = generate(p);
    p.sampling.grammar = "root ::= \"x\"\n";
    p.sampling.grammar_trigger = "root ::= \"@@\"\n";
    EXPECT_EQ(generate(p).s.ids, plain.s.ids) << temp;
  }
  // triggered by the text of plain greedy's first two tokens (leading space aside): those two tokens, then the
  // grammar's digits and full stop, then the end; a grammar holding from the first token gives the same ids
  vkspec_context_params p = Ctx::greedy();
  const Generated plain = generate(p);
  ASSERT_GE(plain.s.ids.size(), 2u);
  size_t len = 0;
  std::string two(64, '\0');
  ASSERT_EQ(vkspec_detokenize(model.m, plain.s.ids.data(), 2, two.data(), two.size(), &len), VKSPEC_OK);
  two.resize(len);
  const size_t b = two.find_first_not_of(' ');
  ASSERT_NE(b, std::string::npos) << two;
  std::string lit = "\"";
  for (const char c : two.substr(b)) {
    ASSERT_TRUE((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == ' ' || c == ',') << two;   // no escapes needed
    lit += c;
  }
  lit += "\"";
  const std::string trigger = "root ::= " + lit + "\n", lazy_grammar = "root ::= " + lit + " [0-9]{1,3} \".\"\n",
                    strict_grammar = "root ::= \" \"* " + lit + " [0-9]{1,3} \".\"\n";
  p.sampling.grammar = lazy_grammar.c_str();
  p.sampling.grammar_trigger = trigger.c_str();
  const Generated lazy = generate(p);
  ASSERT_GE(lazy.s.ids.size(), 4u) << lazy.s.text;
  EXPECT_EQ(std::vector<int32_t>(lazy.s.ids.begin(), lazy.s.ids.begin() + 2),
            std::vector<int32_t>(plain.s.ids.begin(), plain.s.ids.begin() + 2));
  EXPECT_EQ(lazy.stop, "eos") << lazy.s.text;
  const std::string rest = lazy.s.text.substr(two.size());
  EXPECT_TRUE(rest.size() >= 2 && rest.size() <= 4 && rest.back() == '.' &&
              std::all_of(rest.begin(), rest.end() - 1, [](char c) { return c >= '0' && c <= '9'; }))
      << lazy.s.text;
  p.sampling.grammar = strict_grammar.c_str();
  p.sampling.grammar_trigger = nullptr;
  EXPECT_EQ(generate(p).s.ids, lazy.s.ids);
  // refused: a trigger without a grammar, a trigger that is no grammar
  vkspec_context* c = nullptr;
  p.sampling.grammar = nullptr;
  p.sampling.grammar_trigger = trigger.c_str();
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("needs a grammar"), std::string::npos) << vkspec_last_error();
  p.sampling.grammar = lazy_grammar.c_str();
  p.sampling.grammar_trigger = "root ::= (";
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("grammar trigger"), std::string::npos) << vkspec_last_error();
  EXPECT_EQ(vkspec_context_default_params().sampling.grammar_trigger, nullptr);
}

// The examples print exactly `vkspec run`'s text: generate.c linked against libvkspec.so and against
// libvkspec.a, and external_device.cpp, which creates the Vulkan device itself and hands it to vkspec.
TEST(CApi, ExamplesPrintWhatVkspecRunPrints) {
  const auto cli = vkspec::test::run_binary(VKSPEC_BIN, {"run", "-m", kStories, "-p", "Once upon a time", "-n", "24", "--temp", "0"});
  ASSERT_EQ(cli.code, 0) << cli.err;
  for (const char* bin : {EXAMPLE_GENERATE, EXAMPLE_GENERATE_STATIC, EXAMPLE_EXTERNAL_DEVICE}) {
    const auto c = vkspec::test::run_binary(bin, {kStories, "Once upon a time", "24"});
    ASSERT_EQ(c.code, 0) << bin << ": " << c.err;
    EXPECT_EQ(c.out, cli.out) << bin;
  }
}

// Sampled generation through the API draws what `vkspec run` draws for the same seed.
TEST(CApi, SampledEqualsCliForTheSameSeed) {
  Model model(kStories);
  vkspec_context_params p = vkspec_context_default_params();
  p.sampling.temperature = 0.8f;
  p.sampling.seed = 7;
  Ctx ctx(model.m, p);
  Streamed s;
  ASSERT_EQ(generate(ctx.c, tokenize(model.m, "Once upon a time"), 32, s), VKSPEC_OK);
  const auto cli = vkspec::test::run_binary(VKSPEC_BIN, {"run", "-m", kStories, "-p", "Once upon a time", "-n", "32", "--temp",
                                                         "0.8", "--seed", "7", "--ignore-eos", "--json"});
  ASSERT_EQ(cli.code, 0) << cli.err;
  EXPECT_EQ(nlohmann::json::parse(cli.out)["ids"].get<std::vector<int32_t>>(), s.ids);
}

// A device created without bufferDeviceAddress is refused with a message that names it.
TEST(CApi, ExternalDeviceWithoutRequiredFeatureIsRefused) {
  void* lib = vkspec::platform::open_vulkan_loader();
  ASSERT_NE(lib, nullptr);
  auto gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(vkspec::platform::library_symbol(lib, "vkGetInstanceProcAddr"));
#define GET(name) auto name = reinterpret_cast<PFN_##name>(gipa(instance, #name))
  VkInstance instance = VK_NULL_HANDLE;
  auto create_instance = reinterpret_cast<PFN_vkCreateInstance>(gipa(nullptr, "vkCreateInstance"));
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ici.pApplicationInfo = &app;
  ASSERT_EQ(create_instance(&ici, nullptr, &instance), VK_SUCCESS);
  GET(vkEnumeratePhysicalDevices);
  GET(vkCreateDevice);
  GET(vkGetDeviceProcAddr);
  GET(vkDestroyInstance);
  uint32_t n = 1;
  VkPhysicalDevice pd = VK_NULL_HANDLE;
  vkEnumeratePhysicalDevices(instance, &n, &pd);
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueCount = 1;
  qci.pQueuePriorities = &prio;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  VkDevice device = VK_NULL_HANDLE;
  ASSERT_EQ(vkCreateDevice(pd, &dci, nullptr, &device), VK_SUCCESS);
  auto get_queue = reinterpret_cast<PFN_vkGetDeviceQueue>(vkGetDeviceProcAddr(device, "vkGetDeviceQueue"));
  auto destroy_device = reinterpret_cast<PFN_vkDestroyDevice>(vkGetDeviceProcAddr(device, "vkDestroyDevice"));
  VkQueue queue = VK_NULL_HANDLE;
  get_queue(device, 0, 0, &queue);
#undef GET
  vkspec_external_device x{};
  x.instance = instance;
  x.physical_device = pd;
  x.device = device;
  x.queue = queue;
  x.get_instance_proc_addr = reinterpret_cast<void (*)(void)>(gipa);
  x.buffer_device_address = 0;   // not enabled above
  vkspec_model_params p = vkspec_model_default_params();
  p.external = &x;
  vkspec_model* m = nullptr;
  EXPECT_EQ(vkspec_model_load(kStories.c_str(), &p, &m), VKSPEC_ERROR_DEVICE);
  EXPECT_NE(std::string(vkspec_last_error()).find("bufferDeviceAddress"), std::string::npos) << vkspec_last_error();
  x.buffer_device_address = 1;
  x.queue = nullptr;
  EXPECT_EQ(vkspec_model_load(kStories.c_str(), &p, &m), VKSPEC_ERROR_DEVICE);
  EXPECT_EQ(m, nullptr);
  destroy_device(device, nullptr);
  vkDestroyInstance(instance, nullptr);
}

// The cache is kept between calls: a prompt that extends the last call's tokens prefills only the new part,
// and gives the same tokens as a fresh context.
TEST(CApi, ReusesTheCacheAcrossCalls) {
  Model model(kStories, 2);
  Ctx a(model.m), fresh(model.m);
  const std::vector<int32_t> p1 = tokenize(model.m, "Once upon a time");
  Streamed s1;
  ASSERT_EQ(generate(a.c, p1, 8, s1), VKSPEC_OK);
  std::vector<int32_t> p2 = p1;
  p2.insert(p2.end(), s1.ids.begin(), s1.ids.end());
  const std::vector<int32_t> more = tokenize(model.m, "And then");
  p2.insert(p2.end(), more.begin() + 1, more.end());   // (without its BOS)
  Streamed s2, s2_fresh;
  ASSERT_EQ(generate(a.c, p2, 8, s2), VKSPEC_OK);
  vkspec_metrics m{};
  ASSERT_EQ(vkspec_get_metrics(a.c, &m), VKSPEC_OK);
  EXPECT_EQ(m.reused_tokens, p1.size() + s1.ids.size() - 1);   // the last generated token was never fed back
  EXPECT_EQ(m.prefilled_tokens, p2.size() - m.reused_tokens);
  ASSERT_EQ(generate(fresh.c, p2, 8, s2_fresh), VKSPEC_OK);
  EXPECT_EQ(s2.ids, s2_fresh.ids);
}

// Speculation through the API is lossless and says which tokens were verified drafts; sampled with a seed,
// it gives the tokens of sampling without it.
TEST(CApi, SpeculativeMarksDraftsAndMatchesPlain) {
  Model model(shared("models/pycode-target-f16.gguf"));
  const std::vector<int32_t> prompt = tokenize(model.m, "for i in range(10):\n    print(i)\nfor i in range(10):\n    print(i)\n");
  {
    vkspec_context_params sampled = vkspec_context_default_params();
    sampled.sampling.temperature = 0.8f;
    sampled.sampling.seed = 11;
    sampled.draft.ngram = 1;
    Ctx ctx(model.m, sampled);
    Streamed plain, spec;
    ASSERT_EQ(generate(ctx.c, prompt, 48, plain, /*speculative=*/0), VKSPEC_OK);
    ASSERT_EQ(generate(ctx.c, prompt, 48, spec, /*speculative=*/1), VKSPEC_OK);
    EXPECT_EQ(spec.ids, plain.ids) << "sampled, seed 11";
    EXPECT_GT(spec.drafts, 0);
  }
  vkspec_context_params sp = Ctx::greedy();
  sp.draft.ngram = 1;
  Ctx ctx(model.m, sp);
  Streamed plain, spec;
  ASSERT_EQ(generate(ctx.c, prompt, 48, plain, /*speculative=*/0), VKSPEC_OK);
  ASSERT_EQ(generate(ctx.c, prompt, 48, spec, /*speculative=*/1), VKSPEC_OK);
  EXPECT_EQ(spec.ids, plain.ids);
  vkspec_metrics m{};
  ASSERT_EQ(vkspec_get_metrics(ctx.c, &m), VKSPEC_OK);
  EXPECT_GT(m.verify_passes, 0u);
  // Every delivered draft was accepted; `accepted` also counts drafts the last verify pass accepted past the
  // 48th token (which K adaptive K picks there depends on measured timings): at most one round's K.
  EXPECT_GT(spec.drafts, 0);
  EXPECT_LE(uint64_t(spec.drafts), m.accepted);
  EXPECT_LE(m.accepted - uint64_t(spec.drafts), uint64_t(sp.draft.max));
}

TEST(CApi, CancelStopsGenerationAndPrefill) {
  Model model(shared("models/pycode-target-f16.gguf"), 1, 4096);
  Ctx ctx(model.m);
  const std::vector<int32_t> prompt = tokenize(model.m, "x = 1\n");
  // cancelled before it starts: nothing runs
  ASSERT_EQ(vkspec_cancel(ctx.c), VKSPEC_OK);
  Streamed s;
  EXPECT_EQ(generate(ctx.c, prompt, 8, s), VKSPEC_ERROR_CANCELLED);
  EXPECT_TRUE(s.ids.empty());
  // the flag is consumed: the next call runs
  ASSERT_EQ(generate(ctx.c, prompt, 4, s), VKSPEC_OK);
  EXPECT_EQ(s.ids.size(), 4u);

  // during a long prefill (1500 tokens): another thread cancels it; it stops after a whole forward pass
  // (16 tokens), whose K/V stay in the cache
  std::vector<int32_t> long_prompt;
  while (long_prompt.size() < 1500) {
    const auto part = tokenize(model.m, "def f(a, b):\n    return a * b + 1\n");
    long_prompt.insert(long_prompt.end(), part.begin() + 1, part.end());
  }
  long_prompt.resize(1500);
  Streamed l;
  std::atomic<bool> started{false};
  std::thread canceller([&] {
    while (!started) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    vkspec_cancel(ctx.c);
  });
  started = true;
  const vkspec_status st = generate(ctx.c, long_prompt, 8, l);
  canceller.join();
  if (st == VKSPEC_OK) GTEST_SKIP() << "the device prefilled 1500 tokens before the cancel arrived";
  ASSERT_EQ(st, VKSPEC_ERROR_CANCELLED);
  EXPECT_TRUE(l.ids.empty());
  vkspec_metrics m{};
  ASSERT_EQ(vkspec_get_metrics(ctx.c, &m), VKSPEC_OK);
  EXPECT_STREQ(m.stop_reason, "cancelled");
  EXPECT_LT(m.prefilled_tokens, long_prompt.size());
  EXPECT_EQ(m.prefilled_tokens % 16, 0u) << m.prefilled_tokens;
  // what ran is reused by the next call
  Streamed again;
  const std::vector<int32_t> head(long_prompt.begin(), long_prompt.begin() + long(m.reused_tokens + m.prefilled_tokens + 1));
  const uint64_t done = m.reused_tokens + m.prefilled_tokens;
  ASSERT_EQ(generate(ctx.c, head, 1, again), VKSPEC_OK);
  ASSERT_EQ(vkspec_get_metrics(ctx.c, &m), VKSPEC_OK);
  EXPECT_EQ(m.reused_tokens, done);
}

// vkspec_step: one submission per call, at most one token per call when decoding plainly (at most K + 1 per
// speculative round), the same tokens as vkspec_generate.
TEST(CApi, StepsAreBoundedAndGiveGenerateTokens) {
  Model model(shared("models/pycode-target-f16.gguf"), 1, 0, 16);   // 16-token prompt chunks on every device
  vkspec_model_info info{};
  ASSERT_EQ(vkspec_model_get_info(model.m, &info), VKSPEC_OK);
  ASSERT_EQ(info.n_ubatch, 16u);
  vkspec_context_params p = Ctx::greedy();
  p.draft.ngram = 1;
  p.draft.max = 4;
  Ctx ctx(model.m, p);
  const std::vector<int32_t> prompt =
      tokenize(model.m, "for i in range(10):\n    print(i)\nfor j in range(20):\n    print(j)\nfor k in range(30):\n    print(k)\n");
  ASSERT_GT(prompt.size(), 40u);
  int32_t done = 0;
  EXPECT_EQ(vkspec_step(ctx.c, &done), VKSPEC_ERROR_INVALID_ARGUMENT);   // nothing begun
  for (int speculative : {0, 1}) {
    Streamed all;
    ASSERT_EQ(generate(ctx.c, prompt, 40, all, speculative), VKSPEC_OK);
    Streamed stepped;
    vkspec_generate_params g = vkspec_generate_default_params();
    g.n_predict = 40;
    g.ignore_eos = 1;
    g.speculative = speculative;
    g.on_token = collect;
    g.user = &stepped;
    // another prompt in between, so that the stepped run prefills (all but BOS) in several steps
    Streamed flush;
    ASSERT_EQ(generate(ctx.c, tokenize(model.m, "x = 1"), 2, flush), VKSPEC_OK);
    ASSERT_EQ(vkspec_begin(ctx.c, prompt.data(), prompt.size(), &g), VKSPEC_OK) << vkspec_last_error();
    Streamed other;
    EXPECT_EQ(generate(ctx.c, prompt, 4, other), VKSPEC_ERROR_BUSY);   // one generation at a time
    int steps = 0, prefill_steps = 0;
    size_t most = 0;
    for (done = 0; !done;) {
      const size_t before = stepped.ids.size();
      ASSERT_EQ(vkspec_step(ctx.c, &done), VKSPEC_OK) << vkspec_last_error();
      ++steps;
      most = std::max(most, stepped.ids.size() - before);
      if (stepped.ids.empty()) ++prefill_steps;
    }
    EXPECT_EQ(stepped.ids, all.ids) << "speculative " << speculative;
    EXPECT_LE(most, speculative ? 5u : 1u);
    EXPECT_GE(steps, speculative ? 2 : 40);
    vkspec_metrics m{};
    ASSERT_EQ(vkspec_get_metrics(ctx.c, &m), VKSPEC_OK);
    EXPECT_GE(prefill_steps, int((m.prefilled_tokens + 15) / 16));   // one 16-token chunk per step
    EXPECT_EQ(vkspec_step(ctx.c, &done), VKSPEC_ERROR_INVALID_ARGUMENT);   // ended
  }
}

TEST(CApi, ThreadingRules) {
  Model model(kStories, 2);
  const std::vector<int32_t> prompt = tokenize(model.m, "Once upon a time");
  std::vector<int32_t> want;
  {
    Ctx c(model.m);
    Streamed s;
    ASSERT_EQ(generate(c.c, prompt, 32, s), VKSPEC_OK);
    want = s.ids;
  }
  // Two contexts on one model, two threads at once: each gets the single-threaded result.
  {
    Ctx a(model.m), b(model.m);
    Streamed sa, sb;
    vkspec_status ra = VKSPEC_ERROR_FAILED, rb = VKSPEC_ERROR_FAILED;
    std::thread ta([&] { ra = generate(a.c, prompt, 32, sa); }), tb([&] { rb = generate(b.c, prompt, 32, sb); });
    ta.join();
    tb.join();
    EXPECT_EQ(ra, VKSPEC_OK);
    EXPECT_EQ(rb, VKSPEC_OK);
    EXPECT_EQ(sa.ids, want);
    EXPECT_EQ(sb.ids, want);
    // a third context does not fit max_contexts = 2
    vkspec_context* c3 = nullptr;
    vkspec_context_params p = Ctx::greedy();
    EXPECT_EQ(vkspec_context_create(model.m, &p, &c3), VKSPEC_ERROR_BUSY);
    EXPECT_EQ(c3, nullptr);
    // the model cannot go while contexts live
    EXPECT_EQ(vkspec_model_free(model.m), VKSPEC_ERROR_BUSY);
  }
  // One context from two threads: the second caller gets BUSY, never a shared context.
  Ctx c(model.m);
  struct Gate { std::atomic<bool> inside{false}, release{false}; };
  Gate gate;
  vkspec_generate_params g = vkspec_generate_default_params();
  g.n_predict = 4;
  g.ignore_eos = 1;
  g.user = &gate;
  g.on_token = [](int32_t, const char*, size_t, int32_t, void* u) {
    auto* gt = static_cast<Gate*>(u);
    gt->inside = true;
    while (!gt->release) std::this_thread::yield();
    return 0;
  };
  vkspec_status first = VKSPEC_ERROR_FAILED;
  std::thread t([&] { first = vkspec_generate(c.c, prompt.data(), prompt.size(), &g); });
  while (!gate.inside) std::this_thread::yield();
  Streamed s;
  EXPECT_EQ(generate(c.c, prompt, 4, s), VKSPEC_ERROR_BUSY);
  EXPECT_NE(std::string(vkspec_last_error()).find("in use"), std::string::npos);
  vkspec_metrics m{};
  EXPECT_EQ(vkspec_get_metrics(c.c, &m), VKSPEC_ERROR_BUSY);
  gate.release = true;
  t.join();
  EXPECT_EQ(first, VKSPEC_OK);
}

// Calls on freed handles are errors, not crashes; so are a file that is not GGUF and a draft with another
// vocabulary.
TEST(CApi, FreedHandlesAndBadFilesAreErrors) {
  vkspec_model_params mp = vkspec_model_default_params();
  vkspec_model* m = nullptr;
  const std::string not_gguf = shared("models/README.md");
  EXPECT_EQ(vkspec_model_load(not_gguf.c_str(), &mp, &m), VKSPEC_ERROR_LOAD);
  EXPECT_EQ(m, nullptr);
  ASSERT_EQ(vkspec_model_load(kStories.c_str(), &mp, &m), VKSPEC_OK);
  vkspec_context_params cp = Ctx::greedy();
  const std::string other_vocab = shared("models/pycode-draft-f16.gguf");
  cp.draft.model = other_vocab.c_str();
  vkspec_context* c = nullptr;
  EXPECT_EQ(vkspec_context_create(m, &cp, &c), VKSPEC_ERROR_LOAD);
  EXPECT_NE(std::string(vkspec_last_error()).find("vocabular"), std::string::npos) << vkspec_last_error();
  cp.draft.model = nullptr;
  ASSERT_EQ(vkspec_context_create(m, &cp, &c), VKSPEC_OK);
  ASSERT_EQ(vkspec_context_free(c), VKSPEC_OK);
  const int32_t prompt[] = {1};
  vkspec_generate_params g = vkspec_generate_default_params();
  int32_t done = 0;
  vkspec_metrics met{};
  EXPECT_EQ(vkspec_generate(c, prompt, 1, &g), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("not live"), std::string::npos) << vkspec_last_error();
  EXPECT_EQ(vkspec_step(c, &done), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_cancel(c), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_get_metrics(c, &met), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_context_free(c), VKSPEC_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(vkspec_model_free(m), VKSPEC_OK);
  size_t n = 0;
  EXPECT_EQ(vkspec_tokenize(m, "a", 1, 1, 1, nullptr, 0, &n), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_context_create(m, &cp, &c), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_model_free(m), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_model_n_ctx(m), 0u);
  EXPECT_EQ(vkspec_tokenize(nullptr, "a", 1, 1, 1, nullptr, 0, &n), VKSPEC_ERROR_INVALID_ARGUMENT);
}

TEST(CApi, ChatTemplateAndBadInput) {
  Model model(kStories);
  const char* msgs = R"([{"role": "user", "content": "hi"}])";
  size_t len = 0;
  EXPECT_EQ(vkspec_apply_chat_template(model.m, nullptr, msgs, 1, nullptr, 0, &len), VKSPEC_ERROR_NOT_SUPPORTED);
  std::ifstream in(shared("chat-templates/google-gemma-2-2b-it.jinja"));
  const std::string gemma((std::istreambuf_iterator<char>(in)), {});
  ASSERT_EQ(vkspec_apply_chat_template(model.m, gemma.c_str(), msgs, 1, nullptr, 0, &len), VKSPEC_OK) << vkspec_last_error();
  std::string out(len, '\0');
  char small[8];
  ASSERT_EQ(vkspec_apply_chat_template(model.m, gemma.c_str(), msgs, 1, small, sizeof small, &len), VKSPEC_OK);
  EXPECT_STREQ(small, "<s><sta");   // cut like snprintf, NUL-terminated
  ASSERT_EQ(vkspec_apply_chat_template(model.m, gemma.c_str(), msgs, 1, out.data(), len + 1, &len), VKSPEC_OK);
  EXPECT_EQ(out, "<s><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(vkspec_apply_chat_template(model.m, gemma.c_str(), "not json", 1, nullptr, 0, &len), VKSPEC_ERROR_FAILED);
  EXPECT_NE(std::string(vkspec_last_error()).find("JSON"), std::string::npos);
  // JSON text nested past VKSPEC_MAX_JSON_DEPTH (here 100,000 levels, which would overflow the stack where the
  // value is copied, dumped or destroyed) is refused where it enters: messages, and a schema's const
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string deep_msgs = R"([{"role": "user", "content": "hi", "x": )" + deep + "}]";
  EXPECT_EQ(vkspec_apply_chat_template(model.m, gemma.c_str(), deep_msgs.c_str(), 1, nullptr, 0, &len), VKSPEC_ERROR_FAILED);
  EXPECT_NE(std::string(vkspec_last_error()).find("nests deeper than 64 levels"), std::string::npos) << vkspec_last_error();
  vkspec_context_params deep_schema = vkspec_context_default_params();
  const std::string schema = R"({"const": )" + deep + "}";
  deep_schema.sampling.json_schema = schema.c_str();
  vkspec_context* refused = nullptr;
  EXPECT_EQ(vkspec_context_create(model.m, &deep_schema, &refused), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("the JSON schema: the JSON nests deeper"), std::string::npos) << vkspec_last_error();

  Ctx ctx(model.m);
  const int32_t bad[] = {1, 999999};
  vkspec_generate_params g = vkspec_generate_default_params();
  EXPECT_EQ(vkspec_generate(ctx.c, bad, 2, &g), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_generate(ctx.c, bad, 0, &g), VKSPEC_ERROR_INVALID_ARGUMENT);
  std::vector<int32_t> too_long(vkspec_model_n_ctx(model.m), 1);
  EXPECT_EQ(vkspec_generate(ctx.c, too_long.data(), too_long.size(), &g), VKSPEC_ERROR_INVALID_ARGUMENT);
  vkspec_context* c2 = nullptr;
  vkspec_context_params p = vkspec_context_default_params();
  p.sampling.top_p = 2.0f;
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c2), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("top-p"), std::string::npos);
  p = vkspec_context_default_params();
  EXPECT_EQ(p.sampling.frequency_penalty, 0.0f);   // API version 4's fields default to off
  EXPECT_EQ(p.sampling.presence_penalty, 0.0f);
  p.sampling.presence_penalty = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c2), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("presence-penalty"), std::string::npos);
  p.sampling.presence_penalty = 0.0f;
  p.sampling.frequency_penalty = 1000.0f;
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c2), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("frequency-penalty"), std::string::npos);
  p.sampling.frequency_penalty = 0.0f;
  EXPECT_EQ(p.sampling.n_logit_bias, 0u);
  const int32_t outside[] = {1 << 30};
  const float bias[] = {1.0f};
  p.sampling.logit_bias_tokens = outside;
  p.sampling.logit_bias = bias;
  p.sampling.n_logit_bias = 1;
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c2), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vkspec_last_error()).find("vocabulary"), std::string::npos);
  p.sampling.logit_bias_tokens = nullptr;   // a count without its arrays
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c2), VKSPEC_ERROR_INVALID_ARGUMENT);
  p.sampling.n_logit_bias = VKSPEC_MAX_LOGIT_BIAS + 1;
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c2), VKSPEC_ERROR_INVALID_ARGUMENT);
  p = vkspec_context_default_params();
  p.draft.model = "/nonexistent-draft.gguf";
  EXPECT_EQ(vkspec_context_create(model.m, &p, &c2), VKSPEC_ERROR_LOAD);
  const int32_t out_of_vocab = 1 << 30;
  EXPECT_EQ(vkspec_detokenize(model.m, &out_of_vocab, 1, nullptr, 0, &len), VKSPEC_ERROR_INVALID_ARGUMENT);
}

}  // namespace
