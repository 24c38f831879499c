// `vkspec chat`, `vkspec run --chat` and `vkspec apply-template` end to end, on the tiny Llama-3-vocabulary
// model carrying Llama 3.2's chat template (written by vkspec-shape): the rendered prompt against
// python3-jinja2, its token ids against llama.cpp's tokenizer (the peer harness), and a two-turn chat whose
// second turn reuses the first turn's cache exactly.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <thread>

#include <nlohmann/json.hpp>

#include "platform/platform.h"
#include "gguf/gguf.h"
#include "text/tokenizer.h"
#include "tests/run_command.h"
#include "tests/server_process.h"

namespace vkspec::test {
namespace {

using json = nlohmann::json;

std::string shared(const std::string& rel) {
  const char* s = getenv("VKSPEC_SHARED");
  return std::string(s ? s : "../shared") + "/" + rel;
}
bool exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}
// per process: suites of two builds (or a CI run beside a developer's) must not share files
std::string tmp(const std::string& name) {
  return ::testing::TempDir() + "/vkspec-chat-" + std::to_string(platform::process_id()) + "-" + name;
}
void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
Result vkspec(const std::string& args) { return run_vkspec(VKSPEC_BIN, args); }
std::vector<json> json_lines(const std::string& out) {
  std::vector<json> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) v.push_back(json::parse(line));
  return v;
}

const std::string kTemplate = "chat-templates/meta-llama-Llama-3.2-3B-Instruct.jinja";

class Chat : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = tmp("tiny-llama32.gguf");
    const Result r = run_command(std::string(VKSPEC_SHAPE_BIN) + " " + model_ + " " +
                                 shared("tokenizer-tests/ggml-vocab-llama-bpe.gguf") + " tiny f16 7 " + shared(kTemplate));
    ASSERT_EQ(r.code, 0) << r.err;
  }
  static void TearDownTestSuite() { unlink(model_.c_str()); }
  static std::string model_;
};
std::string Chat::model_;

// python3-jinja2's rendering (tests/chat_template_reference.py) of one case.
json reference(const std::string& tmpl, const json& vars) {
  write(tmp("ref.json"), json::array({{{"template", tmpl}, {"vars", vars}}}).dump());
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    Result r = run_command(std::string(py) + " " + VKSPEC_SOURCE_DIR + "/tests/chat_template_reference.py < " + tmp("ref.json"));
    if (r.code == 0) return json::parse(r.out)[0];
  }
  return json();
}

const char* kMessages = R"([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Grüße! What is 2+2?"},
                           {"role": "assistant", "content": "4."}, {"role": "user", "content": "And 3+3?"}])";

TEST_F(Chat, ApplyTemplateEqualsJinja2) {
  platform::set_env("VKSPEC_TODAY", "2026-01-31");
  write(tmp("messages.json"), kMessages);
  GgufFile vocab(model_);
  const auto& tokens = vocab.metadata().at("tokenizer.ggml.tokens").strings;
  const json vars = {{"messages", json::parse(kMessages)}, {"add_generation_prompt", true},
                     {"bos_token", tokens.at(size_t(vocab.find("tokenizer.ggml.bos_token_id")->number))},
                     {"eos_token", tokens.at(size_t(vocab.find("tokenizer.ggml.eos_token_id")->number))}};
  std::ifstream in(shared(kTemplate), std::ios::binary);
  const json ref = reference(std::string(std::istreambuf_iterator<char>(in), {}), vars);
  if (ref.is_null()) GTEST_SKIP() << "python3-jinja2 is not installed";
  ASSERT_TRUE(ref["ok"].get<bool>()) << ref.dump();
  Result r = vkspec("apply-template -m " + model_ + " --messages " + tmp("messages.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, ref["text"].get<std::string>());
  EXPECT_NE(r.out.find("Today Date: 31 Jan 2026"), std::string::npos);
  // without the generation prompt, and the request form with tools
  json no_gen = vars;
  no_gen["add_generation_prompt"] = false;
  r = vkspec("apply-template -m " + model_ + " --messages " + tmp("messages.json") + " --no-generation-prompt --json");
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in2(shared(kTemplate), std::ios::binary);
  EXPECT_EQ(json::parse(r.out)["prompt"], reference(std::string(std::istreambuf_iterator<char>(in2), {}), no_gen)["text"]);
  write(tmp("request.json"), R"({"messages": [{"role": "user", "content": "Weather?"}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]})");
  r = vkspec("apply-template -m " + model_ + " --messages " + tmp("request.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"name\": \"get_weather\""), std::string::npos) << r.out;
  platform::unset_env("VKSPEC_TODAY");
}

// The ids vkspec feeds for a rendered conversation equal llama.cpp's tokenization of that text with special
// tokens parsed (BOS written by the template, not added twice).
TEST_F(Chat, RenderedPromptTokenizesAsLlamaCpp) {
  platform::set_env("VKSPEC_TODAY", "2026-01-31");
  Result run = vkspec("run -m " + model_ + " --chat -sys 'You are terse.' -p 'Grüße! What is 2+2?' -n 2 --temp 0 --json");
  ASSERT_EQ(run.code, 0) << run.err;
  const auto ids = json::parse(run.out)["prompt_ids"].get<std::vector<uint32_t>>();
  write(tmp("messages2.json"), R"([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Grüße! What is 2+2?"}])");
  Result text = vkspec("apply-template -m " + model_ + " --messages " + tmp("messages2.json"));
  ASSERT_EQ(text.code, 0) << text.err;
  ASSERT_EQ(text.out.rfind("<|begin_of_text|><|start_header_id|>system<|end_header_id|>", 0), 0u) << text.out;
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 128000u);   // <|begin_of_text|>, once
  EXPECT_NE(ids[1], 128000u);
  const char* peer = getenv("VKSPEC_PEER");
  if (!peer || !exists(std::string(peer) + "/node_modules")) GTEST_SKIP() << "llama.cpp peer not installed (scripts/install-peer.sh)";
  write(tmp("prompt.txt"), text.out);
  Result ref = run_command("node " + std::string(peer) + "/tokcheck.mjs " + model_ + " --text-file " + tmp("prompt.txt"));
  ASSERT_EQ(ref.code, 0) << ref.err;
  EXPECT_EQ(json::parse(ref.out)["ids"].get<std::vector<uint32_t>>(), ids);
  platform::unset_env("VKSPEC_TODAY");
}

// Two turns through a pipe: the second prompt holds the first exchange; its ids start with the first turn's
// prompt and reply ids exactly; the cache kept all of them but the last reply token (never fed back) and
// prefilled only the rest; afterwards it holds exactly the conversation.
// The server reports the template chats render with, the model's own when no --chat-template is given, where
// llama.cpp's web UI (/props) and Ollama's clients (/api/show) read it.
TEST_F(Chat, ServerReportsTheModelsOwnTemplate) {
  std::ifstream in(shared(kTemplate));
  const std::string source((std::istreambuf_iterator<char>(in)), {});
  ASSERT_FALSE(source.empty());
  ServerProcess s("-m " + model_ + " --ctx 256 --parallel 1");
  auto props = s.client().Get("/props");
  ASSERT_TRUE(props);
  ASSERT_EQ(props->status, 200);
  EXPECT_EQ(json::parse(props->body)["chat_template"], source);
  int status = 0;
  const json show = s.post("/api/show", {{"model", model_.substr(model_.find_last_of('/') + 1)}}, &status);
  ASSERT_EQ(status, 200) << show.dump();
  EXPECT_EQ(show["template"], source);
}

// The chat page at / in a real headless Chromium (tests/webui_check.py over the DevTools protocol): served
// without the API key, it shows the server's refusal until the key is entered, then the model's name and a
// streamed reply equal to the server's own greedy answer to the same messages; --no-webui leaves / a 404.
TEST_F(Chat, ChatPageInChromiumStreamsTheReply) {
  ServerProcess s("-m " + model_ + " --ctx 512 --parallel 1 --api-key s3cret");
  ASSERT_TRUE(s.up()) << s.log();
  auto index = s.client().Get("/");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->status, 200);
  EXPECT_NE(index->body.find("<title>vkspec chat</title>"), std::string::npos);
  EXPECT_EQ(index->get_header_value("Content-Type"), "text/html; charset=utf-8");
  const std::string profile = tmp("chromium-profile");
  const Result r = run_command("python3 " + std::string(VKSPEC_SOURCE_DIR) + "/tests/webui_check.py " + std::to_string(s.port()) +
                               " s3cret " + profile);
  run_command("rm -rf " + profile);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const json page = json::parse(r.out);
  EXPECT_EQ(page["unauthorized"]["cls"], "msg error") << page.dump();
  EXPECT_NE(page["unauthorized"]["text"].get<std::string>().find("API key"), std::string::npos) << page.dump();
  const std::string id = model_.substr(model_.find_last_of('/') + 1);
  EXPECT_EQ(page["model"], id);
  s.use_api_key("s3cret");
  int status = 0;
  const json want = s.post("/v1/chat/completions", {{"model", id}, {"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                                                    {"temperature", 0}, {"max_tokens", 12}}, &status);
  ASSERT_EQ(status, 200) << want.dump();
  EXPECT_EQ(page["reply"]["cls"], "msg assistant") << page.dump();
  EXPECT_EQ(page["reply"]["text"], want["choices"][0]["message"]["content"]) << page.dump();
  EXPECT_GE(page["lengths_seen"].get<int>(), 2) << "the reply was not seen growing: " << page.dump();
  EXPECT_EQ(s.stop(), 0);
  ServerProcess off("-m " + model_ + " --ctx 256 --parallel 1 --no-webui");
  ASSERT_TRUE(off.up()) << off.log();
  auto none = off.client().Get("/");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
}

TEST_F(Chat, SecondTurnReusesTheCache) {
  const std::string input = tmp("input.txt");
  write(input, "Hello there\nAnd now?\n/stats\n/clear\nHello there\n");
  Result r = run_command("VKSPEC_TODAY=2026-01-31 " + std::string(VKSPEC_BIN) + " chat -m " + model_ +
                         " -sys 'Be brief.' -n 6 --temp 0 --json < " + input);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<json> out = json_lines(r.out);
  ASSERT_EQ(out.size(), 4u) << r.out;   // turn, turn, stats, turn
  const json &t1 = out[0], &t2 = out[1], &stats = out[2], &t3 = out[3];
  const auto p1 = t1["prompt_ids"].get<std::vector<uint32_t>>(), ids1 = t1["ids"].get<std::vector<uint32_t>>();
  const auto p2 = t2["prompt_ids"].get<std::vector<uint32_t>>(), ids2 = t2["ids"].get<std::vector<uint32_t>>();
  EXPECT_NE(t2["prompt"].get<std::string>().find("Hello there"), std::string::npos);
  EXPECT_NE(t2["prompt"].get<std::string>().find(t1["reply"].get<std::string>()), std::string::npos);
  ASSERT_GT(p2.size(), p1.size() + ids1.size());
  EXPECT_TRUE(std::equal(p1.begin(), p1.end(), p2.begin()));
  EXPECT_TRUE(std::equal(ids1.begin(), ids1.end(), p2.begin() + long(p1.size())));
  EXPECT_EQ(t1["reused"], 0);
  EXPECT_EQ(t1["prefilled"], p1.size());
  EXPECT_EQ(t1["cached_tokens"], p1.size() + ids1.size() - 1);   // "length": the last token was not fed
  EXPECT_EQ(t2["reused"], p1.size() + ids1.size() - 1);
  EXPECT_EQ(t2["prefilled"], p2.size() - t2["reused"].get<size_t>());
  EXPECT_EQ(t2["cached_tokens"], p2.size() + ids2.size() - 1);
  EXPECT_EQ(stats["turns"], 2);
  EXPECT_EQ(stats["cached_tokens"], t2["cached_tokens"]);
  // /clear: a new conversation that starts like the first (system header reused from the cache)
  EXPECT_EQ(t3["prompt"], t1["prompt"]);
  EXPECT_EQ(t3["ids"], t1["ids"]);
  EXPECT_GT(t3["reused"].get<size_t>(), 10u);

  // Speculation (n-gram drafts) gives the same greedy replies, turn by turn.
  Result s = run_command("VKSPEC_TODAY=2026-01-31 " + std::string(VKSPEC_BIN) + " chat -m " + model_ +
                         " -sys 'Be brief.' -n 6 --temp 0 --json --draft ngram < " + input);
  ASSERT_EQ(s.code, 0) << s.err;
  const std::vector<json> spec = json_lines(s.out);
  ASSERT_EQ(spec.size(), 4u);
  for (size_t k : {0u, 1u, 3u}) {
    EXPECT_EQ(spec[k]["ids"], out[k]["ids"]) << k;
    EXPECT_TRUE(spec[k].contains("speculative"));
  }
}

// A conversation that outgrows the context goes on: before a turn whose prompt would leave less than the
// reply's reserve (min(-n, ctx / 2) tokens), the oldest exchanges are left out for good, the system message
// stays, until the prompt is at most half the context. Each cut turn's prompt is python3-jinja2's rendering
// of exactly the messages kept; it fits that half, and keeping one more exchange would not have; turns
// between cuts reuse the cache (counted with `vkspec tokenize`, which agrees with llama.cpp:
// RenderedPromptTokenizesAsLlamaCpp).
TEST_F(Chat, ConversationLongerThanTheContextLosesItsOldestExchanges) {
  platform::set_env("VKSPEC_TODAY", "2026-01-31");
  const std::string input = tmp("window.txt");
  std::string lines;
  for (int i = 1; i <= 8; ++i) lines += "Tell me about item number " + std::to_string(i) + " in the list, with detail\n";
  write(input, lines);
  const int n_ctx = 256, n_predict = 40, target = n_ctx / 2;
  Result r = run_command(std::string(VKSPEC_BIN) + " chat -m " + model_ + " -sys 'Be brief.' --ctx " +
                         std::to_string(n_ctx) + " -n " + std::to_string(n_predict) + " --temp 0 --json < " + input);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<json> turns = json_lines(r.out);
  ASSERT_EQ(turns.size(), 8u) << r.out;
  EXPECT_NE(r.err.find("oldest messages were left out to fit the context of 256 tokens"), std::string::npos) << r.err;

  std::ifstream in(shared(kTemplate), std::ios::binary);
  const std::string tmpl(std::istreambuf_iterator<char>(in), {});
  GgufFile vocab(model_);
  const auto& tokens = vocab.metadata().at("tokenizer.ggml.tokens").strings;
  const json system = {{"role", "system"}, {"content", "Be brief."}};
  auto rendered = [&](const json& conv) {
    json messages = json::array({system});
    for (const json& m : conv) messages.push_back(m);
    return reference(tmpl, {{"messages", messages}, {"add_generation_prompt", true},
                            {"bos_token", tokens.at(size_t(vocab.find("tokenizer.ggml.bos_token_id")->number))},
                            {"eos_token", tokens.at(size_t(vocab.find("tokenizer.ggml.eos_token_id")->number))}});
  };
  auto token_count = [&](const std::string& text) {
    write(tmp("window-prompt.txt"), text);
    Result t = vkspec("tokenize -m " + model_ + " -f " + tmp("window-prompt.txt") + " --no-bos --json");
    EXPECT_EQ(t.code, 0) << t.err;
    return json::parse(t.out).size();
  };
  json conv = json::array();   // what the chat keeps, after the system message
  size_t cut_turns = 0;
  std::istringstream user_lines(lines);
  for (const json& t : turns) {
    std::string user;
    std::getline(user_lines, user);
    json before = conv;
    before.push_back({{"role", "user"}, {"content", user}});
    const size_t dropped = t["dropped_messages"].get<size_t>();
    json kept = json::array();
    for (size_t i = dropped; i < before.size(); ++i) kept.push_back(before[i]);
    const json ref = rendered(kept);
    if (ref.is_null()) GTEST_SKIP() << "python3-jinja2 is not installed";
    ASSERT_TRUE(ref["ok"].get<bool>()) << ref.dump();
    EXPECT_EQ(t["prompt"], ref["text"]) << t["turn"];
    if (dropped > 0) {
      ++cut_turns;
      EXPECT_EQ(dropped % 2, 0u);   // whole exchanges: the window begins at a user message
      EXPECT_LE(t["prompt_ids"].size(), size_t(target)) << t["turn"];
      json one_more = json::array();
      for (size_t i = dropped - 2; i < before.size(); ++i) one_more.push_back(before[i]);
      EXPECT_GT(token_count(rendered(one_more)["text"]), size_t(target)) << t["turn"];
      EXPECT_GT(t["reused"].get<size_t>(), 10u);   // the system message's tokens, from the cache
    } else if (t["turn"] > 1) {
      EXPECT_GT(t["reused"].get<size_t>(), t["prompt_ids"].size() / 2) << t["turn"];   // the turns before, cached
    }
    conv = kept;
    conv.push_back({{"role", "assistant"}, {"content", t["reply"]}});
  }
  EXPECT_GE(cut_turns, 2u);
  EXPECT_LE(cut_turns, 4u);   // not every turn after the first cut
  platform::unset_env("VKSPEC_TODAY");
}

// Messages of several lines (pasted code): a """ block (Ollama's) and lines continued with a trailing
// backslash (llama-cli's) are one message each, newlines kept; the end of the input closes an open block.
TEST_F(Chat, MessagesOfSeveralLines) {
  write(tmp("lines.txt"), "\"\"\"\ndef f(x):\n    return x\n\"\"\"\nfirst line \\\nsecond line\n\"\"\"one line\"\"\"\n"
                          "\"\"\"unclosed\nlast");
  Result r = run_command("VKSPEC_TODAY=2026-01-31 " + std::string(VKSPEC_BIN) + " chat -m " + model_ +
                         " -n 1 --temp 0 --json < " + tmp("lines.txt"));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<json> turns = json_lines(r.out);
  ASSERT_EQ(turns.size(), 4u) << r.out;
  const char* users[] = {"def f(x):\n    return x", "first line \nsecond line", "one line", "unclosed\nlast"};
  EXPECT_EQ(turns[0]["prompt_ids"], json::parse(run_command("VKSPEC_TODAY=2026-01-31 " + std::string(VKSPEC_BIN) + " run -m " +
                                                              model_ + " --chat -p 'def f(x):\n    return x' --escape -n 1 --temp 0 --json").out)["prompt_ids"]);
  for (size_t i = 0; i < 4; ++i) {
    const std::string prompt = turns[i]["prompt"];
    const std::string want = std::string("<|start_header_id|>user<|end_header_id|>\n\n") + users[i] + "<|eot_id|>";
    EXPECT_NE(prompt.find(want), std::string::npos) << i << ": " << prompt;
  }
}

// llama-cli's /regen (the last reply again, to the same prompt: greedy, the same reply) and /read FILE (a
// file's text as the message); /regen with no reply yet ends a scripted chat with exit 1 and the reason.
TEST_F(Chat, RegenAndReadAsLlamaCli) {
  write(tmp("read-me.txt"), "Grüße from a file");
  write(tmp("regen.txt"), "hello there\n/regen\n/read " + tmp("read-me.txt") + "\n");
  Result r = run_command("VKSPEC_TODAY=2026-01-31 " + std::string(VKSPEC_BIN) + " chat -m " + model_ + " -n 6 --temp 0 --json < " +
                         tmp("regen.txt"));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<json> turns = json_lines(r.out);
  ASSERT_EQ(turns.size(), 3u) << r.out;
  EXPECT_EQ(turns[1]["prompt"], turns[0]["prompt"]);
  EXPECT_EQ(turns[1]["ids"], turns[0]["ids"]);
  EXPECT_EQ(turns[2]["prompt"].get<std::string>().find("hello there<|eot_id|>"), turns[0]["prompt"].get<std::string>().find("hello there<|eot_id|>"));
  EXPECT_NE(turns[2]["prompt"].get<std::string>().find("<|start_header_id|>user<|end_header_id|>\n\nGrüße from a file<|eot_id|>"),
            std::string::npos) << turns[2]["prompt"];
  write(tmp("regen-first.txt"), "/regen\n");
  Result first = run_command(std::string(VKSPEC_BIN) + " chat -m " + model_ + " -n 2 --temp 0 < " + tmp("regen-first.txt"));
  EXPECT_EQ(first.code, 1);
  EXPECT_NE(first.err.find("no reply to generate again"), std::string::npos) << first.err;
}

// `vkspec chat` on Gemma 2's and Gemma 3's passes (vkspec-shape gemma2-tiny, gemma3-tiny, carrying Gemma 2's
// template; Llama 2's vocabulary): two turns, each prompt the template's, each reply at most 6 tokens; exit 0 at EOF.
TEST_F(Chat, GemmaModelsChat) {
  for (const char* shape : {"gemma2-tiny", "gemma3-tiny"}) {
    SCOPED_TRACE(shape);
    const std::string m = tmp(std::string(shape) + ".gguf");
    Result r = run_command(std::string(VKSPEC_SHAPE_BIN) + " " + m + " " + shared("tokenizer-tests/ggml-vocab-llama-spm.gguf") +
                           " " + shape + " f16 7 " + shared("chat-templates/google-gemma-2-2b-it.jinja"));
    ASSERT_EQ(r.code, 0) << r.err;
    write(tmp("gemma-turns.txt"), "hello there\nand again\n");
    r = run_command(std::string(VKSPEC_BIN) + " chat -m " + m + " -n 6 --temp 0 --json < " + tmp("gemma-turns.txt"));
    unlink(m.c_str());
    ASSERT_EQ(r.code, 0) << r.err;
    const std::vector<json> turns = json_lines(r.out);
    ASSERT_EQ(turns.size(), 2u) << r.out;
    EXPECT_EQ(turns[0]["prompt"], "<s><start_of_turn>user\nhello there<end_of_turn>\n<start_of_turn>model\n");
    EXPECT_NE(turns[1]["prompt"].get<std::string>().find("<start_of_turn>user\nand again<end_of_turn>\n<start_of_turn>model\n"),
              std::string::npos) << turns[1]["prompt"];
    for (const json& t : turns) EXPECT_TRUE(t["ids"].size() >= 1 && t["ids"].size() <= 6) << t.dump();
  }
}

// /save writes the conversation as apply-template's messages; /load takes it back, and the next turn is the
// turn the conversation would have had without the round trip (same prompt, same greedy reply). A file
// that is not a conversation ends a scripted chat with exit 1 and the reason.
TEST_F(Chat, SaveAndLoadContinueAConversation) {
  const std::string saved = tmp("conv.json");
  write(tmp("sl.txt"), "Hello there\n/save " + saved + "\n/clear\n/load " + saved + "\nAnd now?\n");
  write(tmp("plain.txt"), "Hello there\nAnd now?\n");
  const std::string chat = "VKSPEC_TODAY=2026-01-31 " + std::string(VKSPEC_BIN) + " chat -m " + model_ + " -sys 'Be brief.' -n 6 --temp 0 --json < ";
  Result a = run_command(chat + tmp("sl.txt"));
  Result b = run_command(chat + tmp("plain.txt"));
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  const std::vector<json> ta = json_lines(a.out), tb = json_lines(b.out);
  ASSERT_EQ(ta.size(), 2u);
  ASSERT_EQ(tb.size(), 2u);
  EXPECT_EQ(ta[1]["prompt"], tb[1]["prompt"]);
  EXPECT_EQ(ta[1]["ids"], tb[1]["ids"]);
  std::ifstream in(saved);
  const json file = json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  json want = json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}])");
  want.push_back({{"role", "assistant"}, {"content", ta[0]["reply"]}});
  EXPECT_EQ(file, want);
  write(tmp("robot.json"), R"([{"role": "robot", "content": "beep"}])");
  write(tmp("bad-load.txt"), "/load " + tmp("robot.json") + "\nHello\n");
  Result bad = run_command(chat + tmp("bad-load.txt"));
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("system, user or assistant"), std::string::npos) << bad.err;
  EXPECT_EQ(bad.out, "");
}

// Ctrl-C (SIGINT) during a reply stops that reply; the session goes on with the next line. The signal is
// sent once the reply is streaming (a background job of a script starts with SIGINT ignored, so a signal
// during loading would be lost, not caught), and the next line only after it.
TEST_F(Chat, SigintStopsTheReplyNotTheSession) {
  const std::string out = tmp("sigint-out.txt"), go = tmp("sigint-go");
  write(tmp("sigint.sh"),
        "(echo 'tell me a long story'; for i in $(seq 600); do [ -e " + go + " ] && break; sleep 0.1; done; echo /stats) | " +
        std::string(VKSPEC_BIN) + " chat -m " + model_ + " -n 100000 --ctx 2048 --temp 0 > " + out + " & pid=$!\n" +
        "for i in $(seq 600); do [ -s " + out + " ] && break; sleep 0.1; done\n"
        "sleep 0.5\nkill -INT $pid\nsleep 0.5\ntouch " + go + "\nwait $pid\n");
  Result r = run_command("bash " + tmp("sigint.sh"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("(reply stopped)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1 turns"), std::string::npos) << r.err;   // /stats ran after it
  std::ifstream in(out);
  const std::string reply((std::istreambuf_iterator<char>(in)), {});
  EXPECT_FALSE(reply.empty());
}

// The chat on a terminal (tmux drives one): /help and /? list the commands, an unknown command is refused,
// a pasted page shows its reading progress and Ctrl-C stops that reading within a chunk (the reply never
// starts; the session goes on), the arrow keys recall earlier lines and the line can be edited, /bye ends
// the session with status 0.
TEST_F(Chat, TerminalStopsAPrefillKeepsHistoryAndTakesCommands) {
  const std::string socket = "vkspec-test-" + std::to_string(platform::process_id());
  const std::string tmux = "tmux -L " + socket + " ";
  const auto pane = [&] { return run_command(tmux + "capture-pane -p -J -S - -t chat").out; };
  const auto keys = [&](const std::string& k) { EXPECT_EQ(run_command(tmux + "send-keys -t chat " + k).code, 0) << k; };
  const auto wait_for = [&](const std::string& text, int count = 1) {
    for (int i = 0; i < 300; ++i) {   // up to 30 s
      const std::string p = pane();
      int n = 0;
      for (size_t at = p.find(text); at != std::string::npos; at = p.find(text, at + 1)) ++n;
      if (n >= count) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "never saw " << count << " x '" << text << "' in:\n" << pane();
    return false;
  };
  std::string page;   // ~6000 tokens: seconds of reading even on a fast machine
  for (int i = 0; i < 6000; ++i) page += i % 7 ? "tree " : "cat ";
  write(tmp("page.txt"), page);
  const Result started = run_command(tmux + "new-session -d -s chat -x 200 -y 50 '" + VKSPEC_BIN + " chat -m " + model_ +
                                     " --ctx 8192 -ub 16 --temp 0 -n 8; echo EXITED $?; sleep 60'");
  ASSERT_EQ(started.code, 0) << started.err;
  ASSERT_TRUE(wait_for("/help lists the commands"));
  keys("/help Enter");
  ASSERT_TRUE(wait_for("/exit, /quit, /bye"));
  keys("/? Enter");
  ASSERT_TRUE(wait_for("/exit, /quit, /bye", 2));
  keys("/nonsense Enter");
  ASSERT_TRUE(wait_for("unknown command /nonsense"));
  EXPECT_EQ(run_command(tmux + "load-buffer " + tmp("page.txt") + " && " + tmux + "paste-buffer -t chat").code, 0);
  keys("Enter");
  ASSERT_TRUE(wait_for("(reading your message: "));
  keys("C-c");
  ASSERT_TRUE(wait_for("(reply stopped)"));
  keys("/stats Enter");
  ASSERT_TRUE(wait_for("1 turns;"));
  const std::string p = pane();
  const size_t at = p.find("prompt: ");
  ASSERT_NE(at, std::string::npos) << p;
  EXPECT_LT(std::atoi(p.c_str() + at + 8), 3000) << "the reading was not stopped:\n" << p;
  EXPECT_NE(p.find("reply: 0 tokens"), std::string::npos) << p;
  keys("Up Enter");   // the history: /stats again
  ASSERT_TRUE(wait_for("1 turns;", 2));
  keys("/statz BSpace s Enter");   // edited before it is sent
  ASSERT_TRUE(wait_for("1 turns;", 3));
  keys("/bye Enter");
  ASSERT_TRUE(wait_for("EXITED 0"));
  run_command(tmux + "kill-server");
}

// The vocabulary's end-of-generation markers end a reply (the random model seldom writes one, so the
// rule is checked on the tokenizer that generation asks): <|end_of_text|> and <|eot_id|> are EOG;
// BOS, a header marker, a reserved token and an ordinary token are not.
TEST_F(Chat, EndOfGenerationMarkersAreKnown) {
  GgufFile f(model_);
  auto tok = Tokenizer::from_gguf(f);
  for (uint32_t id : {128001u, 128009u}) EXPECT_TRUE(tok->is_eog(id)) << tok->text(id);
  for (uint32_t id : {128000u, 1000u, 128006u, 128008u}) EXPECT_FALSE(tok->is_eog(id)) << tok->text(id);
}

TEST_F(Chat, BadInputGetsOneLineErrors) {
  const std::string stories = shared("models/stories260K.gguf");
  write(tmp("m.json"), R"([{"role": "user", "content": "hi"}])");
  Result r = vkspec("apply-template -m " + stories + " --messages " + tmp("m.json"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no chat template"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--chat-template"), std::string::npos) << r.err;
  r = vkspec("apply-template -m " + stories + " --messages " + tmp("m.json") + " --chat-template " +
             shared("chat-templates/google-gemma-2-2b-it.jinja"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "<s><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n");
  // Gemma rejects a system message: the template's own message, exit 1
  write(tmp("line.txt"), "hi\n");
  r = run_command(std::string(VKSPEC_BIN) + " chat -m " + stories + " -sys 'x' --chat-template " +
                  shared("chat-templates/google-gemma-2-2b-it.jinja") + " < " + tmp("line.txt"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("System role not supported"), std::string::npos) << r.err;
  for (const char* bad : {"[{\"content\": \"no role\"}]", "not json", "{\"messages\": 3}"}) {
    write(tmp("bad.json"), bad);
    r = vkspec("apply-template -m " + model_ + " --messages " + tmp("bad.json"));
    EXPECT_EQ(r.code, 1) << bad;
    EXPECT_NE(r.err.find("vkspec: error:"), std::string::npos) << r.err;
  }
  write(tmp("broken.jinja"), "{% for m in messages %}{{ m.content }");
  r = vkspec("apply-template -m " + model_ + " --messages " + tmp("m.json") + " --chat-template " + tmp("broken.jinja"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("chat template: line 1"), std::string::npos) << r.err;
  r = vkspec("apply-template -m " + model_ + " --messages /dev/zero");
  EXPECT_EQ(r.code, 1);
  r = vkspec("run -m " + model_ + " -p hi --system x");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--chat"), std::string::npos) << r.err;
  // A message that alone does not fit the context: a clear error (exit 1 when scripted)
  write(tmp("long.txt"), std::string(3000, 'a') + "\n");
  r = run_command(std::string(VKSPEC_BIN) + " chat -m " + model_ + " --ctx 256 -n 4 < " + tmp("long.txt"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("use a larger --ctx"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace vkspec::test
