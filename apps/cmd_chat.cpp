// `vkspec chat` (a multi-turn conversation on a terminal, or one message per input line when stdin is not
// a terminal) and `vkspec apply-template` (the rendered prompt of a messages file).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <random>

#include "apps/chat.h"
#include "apps/cli_common.h"

namespace vkspec::cli {
namespace {

volatile sig_atomic_t g_interrupted = 0;
void on_sigint(int) { g_interrupted = 1; }

// Ctrl-C while a reply is generated stops that reply, not the session (outside replies it ends vkspec).
struct StopReplyOnSigint {
  struct sigaction old {};
  StopReplyOnSigint() {
    g_interrupted = 0;
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
  }
  ~StopReplyOnSigint() { sigaction(SIGINT, &old, nullptr); }
};

nlohmann::json stats_json(Engine& engine, const Conversation& conv) {
  const Conversation::Totals& t = conv.totals();
  nlohmann::json j = {{"turns", t.turns}, {"generated", t.generated}, {"prefilled", t.prefilled}, {"reused", t.reused},
                      {"cached_tokens", conv.cached_tokens()}, {"context", engine.model().n_ctx()},
                      {"prefill_tok_s", t.prefill_s > 0 ? double(t.prefilled) / t.prefill_s : 0.0},
                      {"decode_tok_s", t.decode_s > 0 ? double(t.generated) / t.decode_s : 0.0}};
  if (engine.drafter()) j["speculative"] = engine.speculative_json(t.spec);
  return j;
}

std::string stats_text(Engine& engine, const Conversation& conv) {
  const nlohmann::json j = stats_json(engine, conv);
  char buf[512];
  snprintf(buf, sizeof buf,
           "%llu turns; prompt: %llu tokens prefilled (%.1f tok/s), %llu reused from the cache; reply: %llu tokens "
           "(%.1f tok/s); the cache holds %u of %u",
           (unsigned long long)j["turns"], (unsigned long long)j["prefilled"], double(j["prefill_tok_s"]),
           (unsigned long long)j["reused"], (unsigned long long)j["generated"], double(j["decode_tok_s"]),
           unsigned(j["cached_tokens"]), unsigned(j["context"]));
  std::string s = buf;
  if (j.contains("speculative")) {
    const auto& sj = j["speculative"];
    snprintf(buf, sizeof buf, "; %s drafts: %llu drafted, %llu accepted (%.0f%%), %.2f tokens per verify pass",
             std::string(sj["drafter"]).c_str(), (unsigned long long)sj["drafted"], (unsigned long long)sj["accepted"],
             100.0 * double(sj["acceptance_rate"]), double(sj["tokens_per_verify"]));
    s += buf;
  }
  return s;
}

}  // namespace

int cmd_apply_template(const RunOptions& o, const ChatOptions& chat) {
  GgufFile file(o.model);
  auto tok = Tokenizer::from_gguf(file);
  const ChatFormatter fmt(file, *tok, chat.template_file);
  // 16 MiB of messages is millions of tokens, beyond any context; the bound keeps the JSON's memory in check
  const ChatInputs req = parse_chat_request(read_text_file(chat.messages_file, 16u << 20, "messages file"));
  const std::string text = fmt.render(req.messages, !chat.no_generation_prompt, req.tools);
  if (o.json) write_stdout(nlohmann::json{{"prompt", text}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  else write_stdout(text);
  return 0;
}

int cmd_chat(const RunOptions& o, const ChatOptions& chat) {
  const bool tty = isatty(STDIN_FILENO);
  Engine engine(o, isatty(STDERR_FILENO));
  const ChatFormatter fmt(engine.file(), engine.tokenizer(), chat.template_file);
  Conversation conv(engine, fmt, chat.system);
  SamplingParams sp = sampling_params(o);
  sp.seed = o.seed ? *o.seed : std::random_device{}();
  if (tty)
    fprintf(stderr, "vkspec chat on %s (context %u tokens). /exit ends, /clear starts a new conversation, /stats "
                    "shows speed and acceptance; Ctrl-C stops a reply.\n",
            engine.facts().name.c_str(), engine.model().n_ctx());
  std::string line;
  for (uint64_t turn = 1;; ) {
    if (tty) write_stdout("\n> ");
    if (!std::getline(std::cin, line)) {
      if (tty) write_stdout("\n");
      break;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/exit" || line == "/quit") break;
    if (line == "/clear") {
      conv.clear();
      if (tty) fprintf(stderr, "(a new conversation)\n");
      continue;
    }
    if (line == "/stats") {
      if (o.json) write_stdout(stats_json(engine, conv).dump() + "\n");
      else fprintf(stderr, "%s\n", stats_text(engine, conv).c_str());
      continue;
    }
    if (line.empty()) continue;
    Conversation::Turn t;
    try {
      StopReplyOnSigint sigint;
      t = conv.reply(line, sp, o.n_predict, [&](const std::string& piece) {
        if (!o.json) write_stdout(piece);
        return !g_interrupted;
      });
    } catch (const Error& e) {
      if (!tty) throw;   // scripted: a clear error and a non-zero exit
      fprintf(stderr, "vkspec: %s\n", e.what());
      continue;
    }
    if (o.json) {
      nlohmann::json j = {{"turn", turn}, {"prompt", t.prompt}, {"reply", t.reply}, {"prompt_ids", t.prompt_ids}, {"ids", t.c.ids},
                          {"stop_reason", t.c.stop_reason}, {"reused", t.c.reused}, {"prefilled", t.c.prefilled},
                          {"cached_tokens", conv.cached_tokens()},
                          {"timings", {{"prefill_s", t.c.prefill_s}, {"decode_s", t.c.decode_s}, {"decode_tok_s", t.c.decode_tok_s()}}}};
      if (t.c.speculative) j["speculative"] = engine.speculative_json(t.c.spec);
      write_stdout(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    } else {
      write_stdout("\n");
    }
    if (t.c.stop_reason == "interrupted") fprintf(stderr, "(reply stopped)\n");
    if (t.c.stop_reason == "context")
      fprintf(stderr, "vkspec: the context of %u tokens is full: /clear starts a new conversation\n", engine.model().n_ctx());
    ++turn;
  }
  return 0;
}

}  // namespace vkspec::cli
