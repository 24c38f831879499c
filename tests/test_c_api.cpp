// The C API (include/vkspec.h, libvkspec.so): results equal the CLI's and the reference ids, streaming and
// stopping, logit bias and constraints, memory estimates and the examples. The contexts' lifecycle (cache
// reuse, speculation, cancellation, steps, threads, freed handles): test_c_api_context.cpp; an application's
// own device: test_c_api_external.cpp.
#include "tests/c_api_helpers.h"

namespace {

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

// vkspec_model_load_from_memory: the file's bytes in memory make the same model (the same tokens); a null,
// empty or truncated buffer is refused.
TEST(CApi, ModelFromMemoryEqualsTheFile) {
  std::ifstream in(kStories, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GT(bytes.size(), 1000u);
  vkspec_model_params p = vkspec_model_default_params();
  vkspec_model* m = nullptr;
  EXPECT_EQ(vkspec_model_load_from_memory(nullptr, 10, &p, &m), VKSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vkspec_model_load_from_memory(bytes.data(), bytes.size() / 2, &p, &m), VKSPEC_ERROR_LOAD);
  EXPECT_EQ(m, nullptr);
  std::vector<int32_t> ids[2];
  for (int from_memory = 0; from_memory < 2; ++from_memory) {
    ASSERT_EQ(from_memory ? vkspec_model_load_from_memory(bytes.data(), bytes.size(), &p, &m)
                          : vkspec_model_load(kStories.c_str(), &p, &m),
              VKSPEC_OK)
        << vkspec_last_error();
    {
      Ctx ctx(m);
      Streamed s;
      ASSERT_EQ(generate(ctx.c, tokenize(m, "Once upon a time"), 16, s), VKSPEC_OK);
      ids[from_memory] = s.ids;
    }
    ASSERT_EQ(vkspec_model_free(m), VKSPEC_OK);
  }
  EXPECT_EQ(ids[1], ids[0]);
  EXPECT_EQ(ids[0].size(), 16u);
}

// vkspec_model_load_from_reader: the GGUF read through a callback (an asset pack) makes the model of the file
// (the same tokens, also after a session's save and load, which read the weights' fingerprint through it);
// it reads little more than the file once; a failing read and a bad reader are refused, never a crash.
TEST(CApi, ModelFromAReaderEqualsTheFile) {
  std::ifstream in(kStories, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  struct Pack {
    const std::vector<char>* bytes;
    uint64_t fail_at = UINT64_MAX, read = 0;
  } pack{&bytes};
  vkspec_reader r{bytes.size(), [](void* user, uint64_t offset, void* dst, size_t n) -> int32_t {
                    auto* p = static_cast<Pack*>(user);
                    if (offset + n > p->fail_at) return 1;
                    memcpy(dst, p->bytes->data() + offset, n);
                    p->read += n;
                    return 0;
                  }, &pack};
  vkspec_model_params p = vkspec_model_default_params();
  vkspec_model* m = nullptr;
  EXPECT_EQ(vkspec_model_load_from_reader(nullptr, &p, &m), VKSPEC_ERROR_INVALID_ARGUMENT);
  pack.fail_at = bytes.size() / 2;   // inside the weights
  EXPECT_EQ(vkspec_model_load_from_reader(&r, &p, &m), VKSPEC_ERROR_LOAD);
  EXPECT_NE(std::string(vkspec_last_error()).find("could not read"), std::string::npos) << vkspec_last_error();
  EXPECT_EQ(m, nullptr);
  vkspec_reader shorter = r;   // a truncated pack: the last tensor lies past its end
  shorter.size = bytes.size() - 1000;
  pack.fail_at = UINT64_MAX;
  EXPECT_EQ(vkspec_model_load_from_reader(&shorter, &p, &m), VKSPEC_ERROR_LOAD);
  EXPECT_NE(std::string(vkspec_last_error()).find("outside the file"), std::string::npos) << vkspec_last_error();
  pack.read = 0;
  ASSERT_EQ(vkspec_model_load_from_reader(&r, &p, &m), VKSPEC_OK) << vkspec_last_error();
  EXPECT_GE(pack.read, bytes.size() * 9 / 10);
  EXPECT_LE(pack.read, bytes.size() + (2u << 20)) << "the weights are read once (and the metadata's first MiB)";
  std::vector<int32_t> want;
  {
    Model file(kStories);
    Ctx ctx(file.m);
    Streamed s;
    ASSERT_EQ(generate(ctx.c, tokenize(file.m, "Once upon a time"), 16, s), VKSPEC_OK);
    want = s.ids;
  }
  {
    Ctx ctx(m);
    Streamed s;
    ASSERT_EQ(generate(ctx.c, tokenize(m, "Once upon a time"), 16, s), VKSPEC_OK);
    EXPECT_EQ(s.ids, want);
    const std::string session = ::testing::TempDir() + "/vkspec-reader-" + std::to_string(vkspec::platform::process_id()) + ".kv";
    ASSERT_EQ(vkspec_context_save(ctx.c, session.c_str()), VKSPEC_OK) << vkspec_last_error();
    ASSERT_EQ(vkspec_context_load(ctx.c, session.c_str()), VKSPEC_OK) << vkspec_last_error();
    std::filesystem::remove(session);
  }
  EXPECT_EQ(vkspec_model_free(m), VKSPEC_OK);
  // metadata longer than the first MiB read (a 128k-token vocabulary): read again, longer, until it fits
  const std::string vocab = shared("tokenizer-tests/ggml-vocab-llama-bpe.gguf");
  std::ifstream vin(vocab, std::ios::binary);
  const std::vector<char> vbytes((std::istreambuf_iterator<char>(vin)), {});
  ASSERT_GT(vbytes.size(), 2u << 20);
  Pack vpack{&vbytes};
  vkspec_reader vr{vbytes.size(), r.read, &vpack};
  vkspec_model_params vp = vkspec_model_default_params();
  vp.vocab_only = 1;
  vkspec_model *from_reader = nullptr, *from_file = nullptr;
  ASSERT_EQ(vkspec_model_load_from_reader(&vr, &vp, &from_reader), VKSPEC_OK) << vkspec_last_error();
  ASSERT_EQ(vkspec_model_load(vocab.c_str(), &vp, &from_file), VKSPEC_OK) << vkspec_last_error();
  EXPECT_EQ(tokenize(from_reader, "Hello world, Grüße ✓"), tokenize(from_file, "Hello world, Grüße ✓"));
  EXPECT_EQ(vkspec_model_free(from_reader), VKSPEC_OK);
  EXPECT_EQ(vkspec_model_free(from_file), VKSPEC_OK);
}

// vkspec_model_params.pipeline_cache: a file of the application's is written when the model is freed and
// read at the next load (the same tokens); "" writes nothing, not even in the default cache folder.
TEST(CApi, PipelineCacheFileOfTheApplicationsOrNone) {
  const std::string file = ::testing::TempDir() + "/vkspec-pipelines-" + std::to_string(vkspec::platform::process_id()) + ".bin";
  const std::string folder = ::testing::TempDir() + "/vkspec-xdg-" + std::to_string(vkspec::platform::process_id());
  std::filesystem::remove(file);
  std::filesystem::remove_all(folder);
  std::vector<int32_t> first;
  for (int load = 0; load < 2; ++load) {
    vkspec_model_params p = vkspec_model_default_params();
    p.pipeline_cache = file.c_str();
    vkspec_model* m = nullptr;
    ASSERT_EQ(vkspec_model_load(kStories.c_str(), &p, &m), VKSPEC_OK) << vkspec_last_error();
    {
      Ctx ctx(m);
      Streamed s;
      ASSERT_EQ(generate(ctx.c, tokenize(m, "Once upon a time"), 8, s), VKSPEC_OK);
      if (load == 0) first = s.ids;
      else EXPECT_EQ(s.ids, first);
    }
    ASSERT_EQ(vkspec_model_free(m), VKSPEC_OK);
    ASSERT_TRUE(std::filesystem::exists(file)) << "load " << load;
    EXPECT_GT(std::filesystem::file_size(file), 0u);
  }
  const char* xdg = getenv("XDG_CACHE_HOME");
  const std::string saved = xdg ? xdg : "";
  vkspec::platform::set_env("XDG_CACHE_HOME", folder);
  vkspec_model_params p = vkspec_model_default_params();
  p.pipeline_cache = "";
  vkspec_model* m = nullptr;
  const vkspec_status loaded = vkspec_model_load(kStories.c_str(), &p, &m);
  if (loaded == VKSPEC_OK) {
    {
      Ctx ctx(m);
      Streamed s;
      EXPECT_EQ(generate(ctx.c, tokenize(m, "Once upon a time"), 8, s), VKSPEC_OK);
      EXPECT_EQ(s.ids, first);
    }
    EXPECT_EQ(vkspec_model_free(m), VKSPEC_OK);
  }
  if (xdg) vkspec::platform::set_env("XDG_CACHE_HOME", saved);
  else vkspec::platform::unset_env("XDG_CACHE_HOME");
  ASSERT_EQ(loaded, VKSPEC_OK) << vkspec_last_error();
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(folder) / "vkspec")) << "a cache was written";
  std::filesystem::remove(file);
  std::filesystem::remove_all(folder);
}

}  // namespace
