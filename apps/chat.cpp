#include "apps/chat.h"

#include "apps/cli_common.h"

namespace vkspec::cli {

Conversation::Conversation(Engine& engine, const ChatFormatter& fmt, std::string system)
    : engine_(engine), fmt_(fmt), system_(std::move(system)), session_(engine.open_session()) {
  clear();
}

Conversation::~Conversation() { engine_.close_session(session_); }

void Conversation::clear() {
  messages_ = nlohmann::ordered_json::array();
  if (!system_.empty()) messages_.push_back({{"role", "system"}, {"content", system_}});
  last_text_.clear();
  last_tokens_.clear();
}

Conversation::Turn Conversation::reply(const std::string& user_text, const SamplingParams& sp, int n,
                                       const std::function<bool(const std::string&)>& on_text) {
  nlohmann::ordered_json messages = messages_;
  messages.push_back({{"role", "user"}, {"content", user_text}});
  Turn t;
  t.prompt = fmt_.render(messages, true);
  std::vector<uint32_t> context;
  if (!last_tokens_.empty() && t.prompt.size() > last_text_.size() && t.prompt.compare(0, last_text_.size(), last_text_) == 0) {
    context = last_tokens_;   // earlier turns exactly as the model saw and wrote them
    const std::vector<uint32_t> rest = engine_.tokenizer().encode(std::string_view(t.prompt).substr(last_text_.size()), false, true);
    context.insert(context.end(), rest.begin(), rest.end());
  } else {
    context = engine_.encode_chat(t.prompt);
  }
  const uint32_t n_ctx = engine_.model().n_ctx();
  if (context.size() >= n_ctx)
    throw Error("the conversation is " + std::to_string(context.size()) + " tokens and the context holds " +
                std::to_string(n_ctx) + ": /clear starts a new one (or use a larger --ctx)");

  const Tokenizer& tok = engine_.tokenizer();
  Utf8Stream utf8;
  bool go_on = true;
  t.c = engine_.generate(session_, context, sp, n, /*ignore_eos=*/false, /*speculate=*/true, [&](uint32_t id, bool) {
    const std::string piece = utf8.push(tok.piece(id));
    t.reply += piece;
    if (!piece.empty() && on_text) go_on = on_text(piece);
    return go_on;
  });
  const std::string tail = utf8.finish();
  t.reply += tail;
  if (!tail.empty() && on_text) on_text(tail);

  messages.push_back({{"role", "assistant"}, {"content", t.reply}});
  messages_ = std::move(messages);
  last_text_ = t.prompt + t.reply;
  t.prompt_ids = context;
  last_tokens_ = std::move(context);
  last_tokens_.insert(last_tokens_.end(), t.c.ids.begin(), t.c.ids.end());
  totals_.turns++;
  totals_.generated += t.c.ids.size();
  totals_.prefilled += t.c.prefilled;
  totals_.reused += t.c.reused;
  totals_.prefill_s += t.c.prefill_s;
  totals_.decode_s += t.c.decode_s;
  totals_.spec += t.c.spec;
  return t;
}

}  // namespace vkspec::cli
