// `vkspec chat` (a multi-turn conversation on a terminal, or one message per input line when stdin is not
// a terminal) and `vkspec apply-template` (the rendered prompt of a messages file).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>

#include "cli/chat.h"
#include "common/cli_common.h"
#include "platform/line_editor.h"
#include "platform/platform.h"
#include "common/json_text.h"

namespace vkspec::cli {
namespace {

struct ChatInfo {
  const RunOptions& o;
  uint32_t n_ctx;
  std::string drafter;   // empty: not speculative
};

nlohmann::json stats_json(const ChatInfo& info, const Conversation& conv) {
  const Conversation::Totals& t = conv.totals();
  nlohmann::json j = {{"turns", t.turns}, {"generated", t.generated}, {"prefilled", t.prefilled}, {"reused", t.reused},
                      {"cached_tokens", conv.cached_tokens()}, {"context", info.n_ctx},
                      {"prefill_tok_s", t.prefill_s > 0 ? double(t.prefilled) / t.prefill_s : 0.0},
                      {"decode_tok_s", t.decode_s > 0 ? double(t.generated) / t.decode_s : 0.0}};
  if (!info.drafter.empty()) j["speculative"] = speculative_json(info.o, info.drafter, t.spec);
  return j;
}

std::string stats_text(const ChatInfo& info, const Conversation& conv) {
  const nlohmann::json j = stats_json(info, conv);
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

void strip_cr(std::string& line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
}
bool ends_with_quotes(const std::string& s) { return s.size() >= 3 && s.compare(s.size() - 3, 3, "\"\"\"") == 0; }

// One user message from stdin (nullopt at the end of the input): a line; a line that ends in '\' goes on
// with the next (llama-cli's convention); a message that begins with """ goes on until a line that ends with
// """ (Ollama's), the quotes left out. Either keeps the newlines, so that pasted code stays one message.
// On a terminal each line is read with editing and history (platform/line_editor.h).
std::optional<std::string> read_message(bool tty) {
  std::string line, more;
  const auto read = [&](const char* prompt, std::string& into) {
    if (!(tty ? platform::read_edited_line(prompt, into) : platform::read_line(into))) return false;
    strip_cr(into);
    return true;
  };
  if (!read("> ", line)) return std::nullopt;
  const auto next = [&] { return read("... ", more); };
  if (line.rfind("\"\"\"", 0) == 0) {
    std::string text = line.substr(3);
    if (ends_with_quotes(text)) return text.substr(0, text.size() - 3);
    bool first = text.empty();   // (nothing after the opening quotes: no leading newline)
    while (next()) {
      const bool last = ends_with_quotes(more);
      if (last && more.size() == 3) break;   // (a closing line of its own adds no newline)
      if (!first) text += '\n';
      text.append(more, 0, more.size() - (last ? 3 : 0));
      first = false;
      if (last) break;
    }
    return text;   // (the end of the input closes it too)
  }
  while (!line.empty() && line.back() == '\\' && next()) {
    line.back() = '\n';
    line += more;
  }
  return line;
}

// /help (also /?): Ollama's and llama-cli's spellings of what a session can do.
constexpr const char* kCommands =
    "  /exit, /quit, /bye    end the session (Ctrl-D too)\n"
    "  /clear                start a new conversation\n"
    "  /stats                speed, cache and speculation of the session\n"
    "  /save FILE, /load FILE  keep a conversation as messages JSON\n"
    "  /regen                the last reply again (llama-cli's)\n"
    "  /read FILE            send a file's text as the message (llama-cli's)\n"
    "  /help, /?             this list\n"
    "  \"\"\" ... \"\"\"           a message of several lines (or end each line but the last with \\)\n"
    "  Ctrl-C                stops a reply, also while a long message is read; the arrow keys recall earlier lines\n";

}  // namespace

int cmd_apply_template(const RunOptions& o, const ChatOptions& chat) {
  const api::Model model = api::Model::vocab_only(o.model);
  const std::optional<std::string> source = chat_template_source(model, chat.template_file);
  // 16 MiB of messages is millions of tokens, beyond any context; the bound keeps the JSON's memory in check
  const std::string messages = read_text_file(chat.messages_file, 16u << 20, "messages file");
  const std::string text = model.apply_chat_template(source, messages, !chat.no_generation_prompt);
  if (o.json) write_stdout(nlohmann::json{{"prompt", text}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  else write_stdout(text);
  return 0;
}

int cmd_chat(const RunOptions& o, const ChatOptions& chat) {
  const bool tty = platform::is_terminal(platform::Stream::In);
  const api::Model model = load_model(o);
  const vkspec_model_info& mi = model.info();
  std::optional<std::string> source = chat_template_source(model, chat.template_file);
  api::Context ctx(model, context_params(o, o.seed ? *o.seed : std::random_device{}()));
  const ChatInfo info{o, mi.n_ctx, ctx.info().drafter};
  Conversation conv(model, ctx, std::move(source), chat.system);
  if (tty) fprintf(stderr, "vkspec chat on %s (context %u tokens). /help lists the commands; Ctrl-C stops a reply.\n", mi.device, mi.n_ctx);
  for (uint64_t turn = 1;; ) {
    if (tty) write_stdout("\n");
    const std::optional<std::string> message = read_message(tty);
    if (!message) {
      if (tty) write_stdout("\n");
      break;
    }
    const std::string& line = *message;
    std::string text = line;   // what is sent: the line, or what a command makes of it
    if (tty) platform::remember_line(line);
    if (line == "/exit" || line == "/quit" || line == "/bye") break;
    if (line == "/help" || line == "/?") {
      fprintf(stderr, "%s", kCommands);
      continue;
    }
    if (line == "/clear") {
      conv.clear();
      if (tty) fprintf(stderr, "(a new conversation)\n");
      continue;
    }
    if (line.rfind("/save ", 0) == 0 || line.rfind("/load ", 0) == 0) {   // the conversation as messages JSON
      const std::string path = line.substr(6);
      try {
        if (line[1] == 's') {
          std::ofstream out(platform::utf8_path(path), std::ios::binary);
          out << conv.messages().dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
          if (!out.flush()) throw Error("cannot write " + path);
        } else {
          const std::string text = read_text_file(path, 16u << 20, "conversation file");
          bool deep = false;
          const std::optional<nlohmann::ordered_json> m = parse_json_text(text, VKSPEC_MAX_JSON_DEPTH, &deep);
          if (!m) throw Error(path + (deep ? " nests deeper than " + std::to_string(VKSPEC_MAX_JSON_DEPTH) + " levels" : " is not JSON"));
          conv.load(*m);
        }
        if (tty) fprintf(stderr, "(%s %s)\n", line[1] == 's' ? "saved to" : "loaded", path.c_str());
      } catch (const std::exception& e) {
        if (!tty) throw;
        fprintf(stderr, "vkspec: %s\n", e.what());
      }
      continue;
    }
    if (line == "/stats") {
      if (o.json) write_stdout(stats_json(info, conv).dump() + "\n");
      else fprintf(stderr, "%s\n", stats_text(info, conv).c_str());
      continue;
    }
    if (line == "/regen") {   // llama-cli's: the last reply again, to the same message
      const std::optional<std::string> last = conv.take_back_last_exchange();
      if (!last) {
        if (!tty) throw Error("/regen: there is no reply to generate again");
        fprintf(stderr, "vkspec: /regen: there is no reply to generate again\n");
        continue;
      }
      text = *last;
    } else if (line.rfind("/read ", 0) == 0) {   // llama-cli's: a file's text as the message
      try {
        text = read_text_file(line.substr(6), 16u << 20, "message file");
      } catch (const std::exception& e) {
        if (!tty) throw;
        fprintf(stderr, "vkspec: %s\n", e.what());
        continue;
      }
    } else if (line.empty()) {
      continue;
    } else if (line[0] == '/' && line.find_first_of(" \n") == std::string::npos) {   // (a path or a message with spaces is text)
      const std::string why = "unknown command " + line + " (/help lists them)";
      if (!tty) throw Error(why);
      fprintf(stderr, "vkspec: %s\n", why.c_str());
      continue;
    }
    Conversation::Turn t;
    try {
      platform::InterruptScope sigint;   // Ctrl-C stops this reply, not the session (outside replies it ends vkspec)
      // a long message's reading shows its progress on a terminal (erased by the reply's first piece)
      const bool show = tty && platform::is_terminal(platform::Stream::Err);
      bool shown = false;
      const auto erase = [&] {
        if (shown) fprintf(stderr, "\r\033[K");
        shown = false;
      };
      t = conv.reply(
          text, o.n_predict,
          [&](const std::string& piece) {
            erase();
            if (!o.json) write_stdout(piece);
            return !platform::InterruptScope::interrupted();
          },
          [&](float read) {
            if (show && read < 1.0f) {
              fprintf(stderr, "\r(reading your message: %d%%)", int(read * 100));
              shown = true;
            }
            return !platform::InterruptScope::interrupted();
          });
      erase();
    } catch (const std::exception& e) {
      if (!tty) throw;   // scripted: a clear error and a non-zero exit
      fprintf(stderr, "vkspec: %s\n", e.what());
      continue;
    }
    if (t.dropped_messages > 0)
      fprintf(stderr, "(the %zu oldest messages were left out to fit the context of %u tokens)\n", t.dropped_messages, mi.n_ctx);
    if (o.json) {
      const double decode_tok_s = t.ids.size() > 1 && t.m.decode_seconds > 0 ? double(t.ids.size() - 1) / t.m.decode_seconds : 0.0;
      nlohmann::json j = {{"turn", turn}, {"prompt", t.prompt}, {"reply", t.reply}, {"prompt_ids", t.prompt_ids}, {"ids", t.ids},
                          {"stop_reason", cli_stop_reason(t.m.stop_reason)}, {"reused", t.m.reused_tokens}, {"prefilled", t.m.prefilled_tokens},
                          {"cached_tokens", conv.cached_tokens()}, {"dropped_messages", t.dropped_messages},
                          {"timings", {{"prefill_s", t.m.prefill_seconds}, {"decode_s", t.m.decode_seconds}, {"decode_tok_s", decode_tok_s}}}};
      if (!info.drafter.empty()) {
        SpecTotals spec;
        spec += t.m;
        j["speculative"] = speculative_json(o, info.drafter, spec);
      }
      write_stdout(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    } else {
      write_stdout("\n");
    }
    const std::string stop = cli_stop_reason(t.m.stop_reason);
    if (stop == "interrupted" || stop == "cancelled") fprintf(stderr, "(reply stopped)\n");
    if (cli_stop_reason(t.m.stop_reason) == "context")
      fprintf(stderr, "vkspec: the context of %u tokens is full: the reply was cut short (the next turn leaves out the "
                      "oldest messages; /clear starts a new conversation)\n", mi.n_ctx);
    ++turn;
  }
  return 0;
}

}  // namespace vkspec::cli
