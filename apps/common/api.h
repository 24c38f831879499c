#pragma once
// The CLI's thin C++ layer over the C API (include/vkspec.h), which is all of the library the CLI sees:
// owning handles, strings and vectors in and out, and a failed call thrown as ApiError carrying
// vkspec_last_error()'s message. Header-only; nothing here reaches past the public header.
#include <algorithm>
#include <exception>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "vkspec.h"

namespace vkspec::api {

struct ApiError : std::runtime_error {
  vkspec_status status;
  ApiError(vkspec_status s, const std::string& message) : std::runtime_error(message), status(s) {}
};

inline void check(vkspec_status s) {
  if (s != VKSPEC_OK) throw ApiError(s, vkspec_last_error());
}

// Calls fill(buffer, capacity, &len) for a text output (snprintf convention): once to size it, once to fill.
template <typename F>
std::string text_of(F&& fill) {
  size_t len = 0;
  check(fill(nullptr, 0, &len));
  std::string s(len + 1, '\0');
  check(fill(s.data(), s.size(), &len));
  s.resize(len);
  return s;
}

inline std::string environment_json() { return text_of(vkspec_environment_json); }

inline std::vector<vkspec_device_info> list_devices() {
  uint32_t n = 0;
  check(vkspec_list_devices(nullptr, 0, &n));
  std::vector<vkspec_device_info> out(n);
  check(vkspec_list_devices(out.data(), n, &n));
  out.resize(std::min<size_t>(out.size(), n));
  return out;
}

class Model {
 public:
  Model(const std::string& path, const vkspec_model_params& p) {
    check(vkspec_model_load(path.c_str(), &p, &m_));
    check(vkspec_model_get_info(m_, &info_));
  }
  // The tokenizer and chat template only (no device).
  static Model vocab_only(const std::string& path) {
    vkspec_model_params p = vkspec_model_default_params();
    p.vocab_only = 1;
    return Model(path, p);
  }
  Model(Model&& o) noexcept : m_(o.m_), info_(o.info_) { o.m_ = nullptr; }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model() { vkspec_model_free(m_); }

  vkspec_model* get() const { return m_; }
  const vkspec_model_info& info() const { return info_; }   // fixed for the model's life: read once
  // add_bos: 0, VKSPEC_ADD_BOS or VKSPEC_ADD_BOS_UNLESS_PRESENT
  std::vector<int32_t> tokenize(std::string_view text, int add_bos, bool parse_special) const {
    size_t n = 0;
    check(vkspec_tokenize(m_, text.data(), text.size(), add_bos, parse_special, nullptr, 0, &n));
    std::vector<int32_t> ids(n);
    check(vkspec_tokenize(m_, text.data(), text.size(), add_bos, parse_special, ids.data(), ids.size(), &n));
    return ids;
  }
  std::string detokenize(std::span<const int32_t> ids) const {
    return text_of([&](char* b, size_t cap, size_t* len) { return vkspec_detokenize(m_, ids.data(), ids.size(), b, cap, len); });
  }
  // The model's own chat template (its Jinja source); nullopt when it has none.
  std::optional<std::string> chat_template() const {
    if (!info().has_chat_template) return std::nullopt;
    return text_of([&](char* b, size_t cap, size_t* len) { return vkspec_model_chat_template(m_, b, cap, len); });
  }
  // template_source: nullopt for the model's own template
  std::string apply_chat_template(const std::optional<std::string>& template_source, const std::string& messages_json,
                                  bool add_generation_prompt) const {
    return text_of([&](char* b, size_t cap, size_t* len) {
      return vkspec_apply_chat_template(m_, template_source ? template_source->c_str() : nullptr, messages_json.c_str(),
                                        add_generation_prompt, b, cap, len);
    });
  }

 private:
  vkspec_model* m_ = nullptr;
  vkspec_model_info info_{};
};

class Context {
 public:
  Context(const Model& model, const vkspec_context_params& p) { check(vkspec_context_create(model.get(), &p, &c_)); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context() { vkspec_context_free(c_); }

  vkspec_context* get() const { return c_; }
  vkspec_context_info info() const {
    vkspec_context_info i;
    check(vkspec_context_get_info(c_, &i));
    return i;
  }
  void clear() { check(vkspec_context_clear(c_)); }
  void save(const std::string& path) { check(vkspec_context_save(c_, path.c_str())); }
  void load(const std::string& path) { check(vkspec_context_load(c_, path.c_str())); }

  // Each accepted token (id -1: the U+FFFD of an unfinished UTF-8 sequence at the end), its text piece and
  // whether it was a verified draft; false stops the generation. An exception thrown by the callback stops
  // it too and is rethrown here.
  using OnToken = std::function<bool(int32_t token, std::string_view piece, bool from_draft)>;
  // on_step (optional) runs after each step (vkspec_step: a prompt chunk, a decoding step, a round) with the
  // steps so far; false cancels the generation there (vkspec_cancel), also in the middle of a prompt: it then
  // ends with the stop reason "cancelled", not an error.
  using OnStep = std::function<bool(uint64_t steps)>;
  vkspec_metrics generate(std::span<const int32_t> prompt, vkspec_generate_params p, const OnToken& on_token,
                          const OnStep& on_step = {}) {
    struct Call {
      const OnToken* fn;
      std::exception_ptr error;
    } call{&on_token, nullptr};
    p.user = &call;
    p.on_token = [](int32_t token, const char* piece, size_t len, int32_t from_draft, void* user) -> int {
      Call& c = *static_cast<Call*>(user);
      if (c.error || !*c.fn) return c.error ? 1 : 0;
      try {
        return (*c.fn)(token, std::string_view(piece, len), from_draft != 0) ? 0 : 1;
      } catch (...) {
        c.error = std::current_exception();
        return 1;
      }
    };
    vkspec_status s = VKSPEC_OK;
    if (!on_step) {
      s = vkspec_generate(c_, prompt.data(), prompt.size(), &p);
    } else if ((s = vkspec_begin(c_, prompt.data(), prompt.size(), &p)) == VKSPEC_OK) {
      int32_t done = 0;
      bool cancelled = false;
      for (uint64_t steps = 1; s == VKSPEC_OK && !done; ++steps)
        if ((s = vkspec_step(c_, &done)) == VKSPEC_OK && !done && !cancelled && !on_step(steps)) {
          vkspec_cancel(c_);
          cancelled = true;
        }
      if (cancelled && s == VKSPEC_ERROR_CANCELLED) s = VKSPEC_OK;
    }
    if (call.error) std::rethrow_exception(call.error);
    check(s);
    vkspec_metrics m;
    check(vkspec_get_metrics(c_, &m));
    return m;
  }
  // log p(tokens[i] | tokens[..i]) for i = first .. n-1 (vkspec_score)
  std::vector<double> score(std::span<const int32_t> tokens, size_t first) {
    std::vector<double> out(tokens.size() > first ? tokens.size() - first : 0);
    check(vkspec_score(c_, tokens.data(), tokens.size(), first, out.data()));
    return out;
  }
  // The embedding of tokens (vkspec_embed): n_embd floats
  std::vector<float> embed(std::span<const int32_t> tokens, vkspec_pooling pooling, bool normalize, uint32_t n_embd) {
    std::vector<float> out(n_embd);
    check(vkspec_embed(c_, tokens.data(), tokens.size(), pooling, normalize ? 1 : 0, out.data(), out.size()));
    return out;
  }

 private:
  vkspec_context* c_ = nullptr;
};

// Continuous batching (vkspec_batch_*): requests with C callbacks, stepped on one thread.
class Batch {
 public:
  Batch(const Model& model, const vkspec_batch_params& p) { check(vkspec_batch_create(model.get(), &p, &b_)); }
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  ~Batch() { vkspec_batch_free(b_); }

  vkspec_batch* get() const { return b_; }
  uint64_t submit(std::span<const int32_t> prompt, const vkspec_request_params& p) {
    uint64_t id = 0;
    check(vkspec_batch_submit(b_, prompt.data(), prompt.size(), &p, &id));
    return id;
  }
  uint64_t embed(std::span<const int32_t> tokens, vkspec_pooling pooling, bool normalize, vkspec_embedding_fn on_embedding,
                 vkspec_request_done_fn on_done, void* user) {
    uint64_t id = 0;
    check(vkspec_batch_embed(b_, tokens.data(), tokens.size(), pooling, normalize ? 1 : 0, on_embedding, on_done, user, &id));
    return id;
  }
  void warm_up() { check(vkspec_batch_warm_up(b_)); }
  bool step() {
    int32_t worked = 0;
    check(vkspec_batch_step(b_, &worked));
    return worked != 0;
  }
  vkspec_batch_metrics metrics() const {
    vkspec_batch_metrics m;
    check(vkspec_batch_get_metrics(b_, &m));
    return m;
  }
  void cancel(uint64_t id) { check(vkspec_batch_cancel(b_, id)); }
  void run() { check(vkspec_batch_run(b_)); }          // until stop()
  void stop() { check(vkspec_batch_stop(b_)); }        // any thread
  void shutdown() { check(vkspec_batch_shutdown(b_)); }

 private:
  vkspec_batch* b_ = nullptr;
};

}  // namespace vkspec::api
