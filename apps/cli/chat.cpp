#include "cli/chat.h"

#include "common/message_window.h"

namespace vkspec::cli {

Conversation::Conversation(const api::Model& model, api::Context& ctx, std::optional<std::string> template_source,
                           std::string system)
    : model_(model), ctx_(ctx), template_(std::move(template_source)), system_(std::move(system)),
      n_ctx_(model.info().n_ctx) {
  clear();
}

void Conversation::clear() {
  messages_ = nlohmann::ordered_json::array();
  if (!system_.empty()) messages_.push_back({{"role", "system"}, {"content", system_}});
  last_text_.clear();
  last_tokens_.clear();
}

std::optional<std::string> Conversation::take_back_last_exchange() {
  const size_t n = messages_.size();
  if (n < 2 || messages_[n - 1]["role"] != "assistant" || messages_[n - 2]["role"] != "user") return std::nullopt;
  std::string user = messages_[n - 2]["content"].get<std::string>();
  messages_.erase(n - 1);
  messages_.erase(n - 2);
  last_text_.clear();   // (the next turn tokenizes the whole conversation; the cache keeps the common prefix)
  last_tokens_.clear();
  return user;
}

void Conversation::load(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) throw Error("a saved conversation is a JSON array of {\"role\", \"content\"} messages");
  for (const auto& m : messages) {
    const bool ok = m.is_object() && m.contains("role") && m["role"].is_string() && m.contains("content") &&
                    m["content"].is_string();
    const std::string role = ok ? m["role"].get<std::string>() : "";
    if (role != "system" && role != "user" && role != "assistant")
      throw Error("a saved conversation's messages are {\"role\": system, user or assistant, \"content\": text}: " +
                  m.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).substr(0, 120));
  }
  messages_ = messages;
  last_text_.clear();   // (the next turn tokenizes the whole conversation; the cache keeps the common prefix)
  last_tokens_.clear();
}

Conversation::Turn Conversation::reply(const std::string& user_text, int n,
                                       const std::function<bool(const std::string&)>& on_text,
                                       const std::function<bool(float)>& on_prompt) {
  nlohmann::ordered_json messages = messages_;
  messages.push_back({{"role", "user"}, {"content", user_text}});
  Turn t;
  t.prompt = model_.apply_chat_template(template_, messages.dump(), true);
  std::vector<int32_t> context;
  if (!last_tokens_.empty() && t.prompt.size() > last_text_.size() && t.prompt.compare(0, last_text_.size(), last_text_) == 0) {
    context = last_tokens_;   // earlier turns exactly as the model saw and wrote them
    const std::vector<int32_t> rest = model_.tokenize(std::string_view(t.prompt).substr(last_text_.size()), 0, true);
    context.insert(context.end(), rest.begin(), rest.end());
  } else {
    context = encode_chat(model_, t.prompt);
  }
  // A conversation that leaves less than the reply's reserve loses its oldest exchanges (message_window.h),
  // down to half the context at most (as llama.cpp's context shift discards half): a cut prefills what is
  // kept again (the cache keeps only the system message's tokens), so the next turns should not cut again.
  const size_t budget = n_ctx_ - reply_reserve(n_ctx_, n);
  if (context.size() > budget) {
    MessageWindow w = fit_messages(messages, std::min<size_t>(budget, n_ctx_ / 2), [&](const nlohmann::ordered_json& m) {
      return encode_chat(model_, model_.apply_chat_template(template_, m.dump(), true)).size();
    });
    if (w.dropped > 0) {
      messages = std::move(w.messages);
      t.prompt = model_.apply_chat_template(template_, messages.dump(), true);
      context = encode_chat(model_, t.prompt);
      t.dropped_messages = w.dropped;
    }
  }
  if (context.size() >= n_ctx_)
    throw Error("the new message" + std::string(system_.empty() ? "" : " with the system message") + " is " +
                std::to_string(context.size()) + " tokens and the context holds " + std::to_string(n_ctx_) +
                ": use a larger --ctx");

  vkspec_generate_params gp = vkspec_generate_default_params();
  gp.n_predict = n;
  gp.prefill_one_submission = on_prompt ? 0 : 1;   // (in chunks, one per step, when someone watches)
  // the new tokens: those past what the cache holds (the last turn's, as far as they agree)
  size_t cached = 0;
  while (cached < context.size() && cached < last_tokens_.size() && context[cached] == last_tokens_[cached]) ++cached;
  const double to_read = double(context.size() - cached), chunk = double(std::max<uint32_t>(model_.info().n_ubatch, 1));
  bool go_on = true;
  const auto on_token = [&](int32_t id, std::string_view piece, bool) {
    if (id >= 0) t.ids.push_back(id);
    t.reply += piece;
    if (!piece.empty() && on_text && (go_on || id < 0)) {   // (a U+FFFD tail comes after a stop too)
      const bool more = on_text(std::string(piece));
      if (id >= 0) go_on = more;
    }
    return go_on;
  };
  const auto on_step = [&](uint64_t steps) {   // (each step before the first token read a chunk)
    return !t.ids.empty() || on_prompt(float(std::min(1.0, double(steps) * chunk / std::max(to_read, 1.0))));
  };
  t.m = on_prompt ? ctx_.generate(context, gp, on_token, on_step) : ctx_.generate(context, gp, on_token);

  messages.push_back({{"role", "assistant"}, {"content", t.reply}});
  messages_ = std::move(messages);
  last_text_ = t.prompt + t.reply;
  t.prompt_ids = context;
  last_tokens_ = std::move(context);
  last_tokens_.insert(last_tokens_.end(), t.ids.begin(), t.ids.end());
  totals_.turns++;
  totals_.generated += t.ids.size();
  totals_.prefilled += t.m.prefilled_tokens;
  totals_.reused += t.m.reused_tokens;
  totals_.prefill_s += t.m.prefill_seconds;
  totals_.decode_s += t.m.decode_seconds;
  totals_.spec += t.m;
  return t;
}

}  // namespace vkspec::cli
