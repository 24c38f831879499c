// The C API (include/vkspec.h) over the Engine: no C++ type or exception crosses it. Every entry point
// runs inside api_call(), which turns exceptions into a status and the thread's last error message.
#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_set>

#include "apps/chat.h"
#include "apps/engine.h"
#include "vkspec.h"

using namespace vkspec;
using namespace vkspec::cli;

struct vkspec_model {
  std::shared_ptr<TargetModel> target;
  std::atomic<uint32_t> contexts{0};
  std::atomic<uint32_t> users{0};   // calls using it right now (vkspec_model_free waits for none: BUSY)
  uint32_t max_contexts = 1;
};

struct vkspec_context {
  vkspec_model* model = nullptr;
  std::unique_ptr<Engine> engine;
  Session session;
  SamplingParams sp;
  std::atomic<bool> cancel{false};
  std::atomic<bool> in_use{false};   // one thread at a time; a second gets VKSPEC_ERROR_BUSY
  vkspec_metrics metrics{};
  vkspec_generate_params params{};   // of the generation in progress (its callback)
  Utf8Stream utf8;                   // its text pieces
};

namespace {

thread_local std::string t_last_error;

struct Failure {   // a status with its message, thrown inside api_call
  vkspec_status status;
  std::string message;
};

template <typename F>
vkspec_status api_call(F&& f, vkspec_status on_error = VKSPEC_ERROR_FAILED) {
  try {
    f();
    return VKSPEC_OK;
  } catch (const Failure& e) {
    t_last_error = e.message;
    return e.status;
  } catch (const std::bad_alloc&) {
    t_last_error = "out of host memory";
    return VKSPEC_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    t_last_error = e.what();
    return on_error;
  } catch (...) {
    t_last_error = "unknown failure";
    return VKSPEC_ERROR_FAILED;
  }
}

void require(bool ok, const char* what) {
  if (!ok) throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, what};
}

void copy_text(const std::string& s, char* out, size_t capacity, size_t* len) {
  if (len) *len = s.size();
  if (out && capacity > 0) {
    const size_t n = std::min(s.size(), capacity - 1);
    memcpy(out, s.data(), n);
    out[n] = 0;
  }
}

template <size_t N>
void copy_field(char (&dst)[N], const std::string& s) {
  const size_t n = std::min(s.size(), N - 1);
  memcpy(dst, s.data(), n);
  dst[n] = 0;
}

// Live handles: a call with a freed (or never created) handle gets VKSPEC_ERROR_INVALID_ARGUMENT instead of
// touching freed memory. Checking a handle and claiming it happen under one lock, and freeing removes it
// under that lock first, so a free racing with a call never leaves the call with a dangling handle.
std::mutex g_handles_mutex;
std::unordered_set<const void*> g_models, g_contexts;

void check_live(const std::unordered_set<const void*>& set, const void* h, const char* what) {
  if (!h) throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, std::string("the ") + what + " is null"};
  if (!set.count(h)) throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, std::string("the ") + what + " is not live (freed?)"};
}

// Claims a context for the calling thread for the scope (one thread at a time).
struct Claim {
  vkspec_context* c;
  explicit Claim(vkspec_context* ctx) : c(ctx) {
    std::lock_guard<std::mutex> lock(g_handles_mutex);
    check_live(g_contexts, c, "context");
    if (c->in_use.exchange(true)) throw Failure{VKSPEC_ERROR_BUSY, "the context is in use by another thread"};
  }
  ~Claim() { c->in_use.store(false); }
};

// Uses a model for the scope (concurrent uses are fine; vkspec_model_free refuses while there are any).
struct ModelUse {
  const vkspec_model* m;
  explicit ModelUse(const vkspec_model* model) : m(model) {
    std::lock_guard<std::mutex> lock(g_handles_mutex);
    check_live(g_models, m, "model");
    const_cast<vkspec_model*>(m)->users++;
  }
  ~ModelUse() { const_cast<vkspec_model*>(m)->users--; }
};

TargetModel::Options target_options(const char* path, const vkspec_model_params& p) {
  require(path != nullptr, "the model path is null");
  require(p.device >= -1, "device must be -1 (automatic) or a device index");
  require(p.max_contexts >= 1 && p.max_contexts <= 256, "max_contexts must be 1..256");
  TargetModel::Options o;
  o.path = path;
  o.device = p.device;
  o.n_ctx = p.n_ctx;
  o.max_sequences = p.max_contexts;
  if (const vkspec_external_device* x = p.external) {
    ExternalDevice e;
    e.instance = static_cast<VkInstance>(x->instance);
    e.physical = static_cast<VkPhysicalDevice>(x->physical_device);
    e.device = static_cast<VkDevice>(x->device);
    e.queue_family = x->queue_family_index;
    e.queue = static_cast<VkQueue>(x->queue);
    e.get_instance_proc_addr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(x->get_instance_proc_addr);
    e.buffer_device_address = x->buffer_device_address;
    e.storage_16bit = x->storage_buffer_16bit;
    e.storage_8bit = x->storage_buffer_8bit;
    e.shader_float16 = x->shader_float16;
    e.shader_int8 = x->shader_int8;
    e.subgroup_size_control = x->subgroup_size_control;
    e.push_descriptor = x->push_descriptor;
    e.lock_queue = x->lock_queue;
    e.unlock_queue = x->unlock_queue;
    e.lock_user = x->lock_user;
    o.external = e;
  }
  return o;
}

}  // namespace

extern "C" {

uint32_t vkspec_api_version(void) { return VKSPEC_API_VERSION; }
const char* vkspec_last_error(void) { return t_last_error.c_str(); }

const char* vkspec_status_name(vkspec_status s) {
  switch (s) {
    case VKSPEC_OK: return "ok";
    case VKSPEC_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case VKSPEC_ERROR_LOAD: return "load failed";
    case VKSPEC_ERROR_DEVICE: return "device error";
    case VKSPEC_ERROR_OUT_OF_MEMORY: return "out of memory";
    case VKSPEC_ERROR_CANCELLED: return "cancelled";
    case VKSPEC_ERROR_BUSY: return "busy";
    case VKSPEC_ERROR_NOT_SUPPORTED: return "not supported";
    case VKSPEC_ERROR_FAILED: return "failed";
  }
  return "unknown status";
}

vkspec_status vkspec_list_devices(vkspec_device_info* out, uint32_t capacity, uint32_t* count) {
  return api_call([&] {
    require(count != nullptr, "count is null");
    require(out != nullptr || capacity == 0, "out is null");
    std::vector<DeviceFacts> devices;
    for (DeviceFacts& f : Context::list_devices()) {   // one device seen through two drivers is listed once
      bool seen = false;
      for (const DeviceFacts& d : devices) seen |= !f.uuid_hex.empty() && d.uuid_hex == f.uuid_hex;
      if (!seen) devices.push_back(std::move(f));
    }
    *count = uint32_t(devices.size());
    for (uint32_t i = 0; i < capacity && i < devices.size(); ++i) {
      const DeviceFacts& f = devices[i];
      vkspec_device_info& d = out[i];
      d = vkspec_device_info{};
      d.index = f.index;
      copy_field(d.name, f.name);
      copy_field(d.type, f.type_name());
      copy_field(d.driver, f.driver);
      copy_field(d.uuid, f.uuid_hex);
      d.subgroup_size = f.subgroup_size;
      d.device_local_bytes = f.device_local_bytes;
      d.max_storage_buffer_range = f.max_storage_buffer_range;
      d.shader_float16 = f.shader_float16;
      d.storage_8bit = f.storage_8bit;
      d.storage_16bit = f.storage_16bit;
      d.timestamps = f.timestamps;
      copy_field(d.kernel_family, f.prefers_row_per_lane() ? "row-per-lane" : "subgroup");
    }
  }, VKSPEC_ERROR_DEVICE);
}

vkspec_model_params vkspec_model_default_params(void) {
  vkspec_model_params p{};
  p.device = -1;
  p.n_ctx = 0;
  p.max_contexts = 1;
  return p;
}

vkspec_status vkspec_estimate_memory(const char* path, const vkspec_model_params* params, vkspec_memory_estimate* out) {
  return api_call([&] {
    require(params && out, "params or out is null");
    const TargetModel::Options o = target_options(path, *params);
    GgufFile file(o.path);
    Context ctx(ContextOptions{o.device, false, o.external ? &*o.external : nullptr});
    ModelOptions mo;
    mo.n_ctx = o.n_ctx;
    mo.max_sequences = o.max_sequences;
    const MemoryEstimate e = LlamaModel::estimate_memory(ctx, file, mo);
    *out = vkspec_memory_estimate{e.weights, e.kv, e.activations, e.total(), e.device, e.total() <= e.device};
  }, VKSPEC_ERROR_LOAD);
}

vkspec_status vkspec_model_load(const char* path, const vkspec_model_params* params, vkspec_model** out) {
  return api_call([&] {
    require(params && out, "params or out is null");
    *out = nullptr;
    TargetModel::Options o = target_options(path, *params);
    if (params->progress) {
      const vkspec_progress_fn fn = params->progress;
      void* user = params->progress_user;
      o.progress = [fn, user](uint64_t done, uint64_t total) {
        if (fn(total ? float(double(done) / double(total)) : 1.0f, user) != 0)
          throw Failure{VKSPEC_ERROR_CANCELLED, "loading was cancelled by the progress callback"};
      };
    }
    try {
      auto m = std::make_unique<vkspec_model>();
      m->target = std::make_shared<TargetModel>(o);
      m->max_contexts = o.max_sequences;
      std::lock_guard<std::mutex> lock(g_handles_mutex);
      g_models.insert(m.get());
      *out = m.release();
    } catch (const Error& e) {   // the memory check's message names the sizes
      const bool memory = strstr(e.what(), "of device memory") != nullptr;
      // the device's own failures: an external device refused, a missing index, no Vulkan, a failed vkCreate*
      const bool device = strncmp(e.what(), "external device", 15) == 0 || strncmp(e.what(), "device ", 7) == 0 ||
                          strstr(e.what(), "Vulkan") != nullptr || strstr(e.what(), "vkCreate") != nullptr;
      throw Failure{memory ? VKSPEC_ERROR_OUT_OF_MEMORY : device ? VKSPEC_ERROR_DEVICE : VKSPEC_ERROR_LOAD, e.what()};
    }
  }, VKSPEC_ERROR_DEVICE);
}

vkspec_status vkspec_model_free(vkspec_model* model) {
  return api_call([&] {
    if (!model) return;
    {
      std::lock_guard<std::mutex> lock(g_handles_mutex);
      check_live(g_models, model, "model");
      if (model->contexts.load() != 0) throw Failure{VKSPEC_ERROR_BUSY, "the model still has contexts: free them first"};
      if (model->users.load() != 0) throw Failure{VKSPEC_ERROR_BUSY, "the model is in use by another thread"};
      g_models.erase(model);
    }
    delete model;
  });
}

uint32_t vkspec_model_n_ctx(const vkspec_model* model) {
  uint32_t n = 0;
  api_call([&] { ModelUse use(model); n = model->target->model->n_ctx(); });
  return n;
}
uint32_t vkspec_model_n_vocab(const vkspec_model* model) {
  uint32_t n = 0;
  api_call([&] { ModelUse use(model); n = model->target->tok->n_vocab(); });
  return n;
}

vkspec_status vkspec_tokenize(const vkspec_model* model, const char* text, size_t text_len, int32_t add_bos,
                              int32_t parse_special, int32_t* tokens, size_t capacity, size_t* n_tokens) {
  return api_call([&] {
    ModelUse use(model);
    require(n_tokens && (text || text_len == 0) && (tokens || capacity == 0), "a null argument");
    const Tokenizer& tok = *model->target->tok;
    const std::vector<uint32_t> ids =
        tok.encode(std::string_view(text ? text : "", text_len), add_bos && tok.add_bos(), parse_special != 0);
    *n_tokens = ids.size();
    for (size_t i = 0; i < capacity && i < ids.size(); ++i) tokens[i] = int32_t(ids[i]);
  });
}

vkspec_status vkspec_detokenize(const vkspec_model* model, const int32_t* tokens, size_t n_tokens, char* text,
                                size_t capacity, size_t* len) {
  return api_call([&] {
    ModelUse use(model);
    require(len && (tokens || n_tokens == 0) && (text || capacity == 0), "a null argument");
    const Tokenizer& tok = *model->target->tok;
    std::string s;
    for (size_t i = 0; i < n_tokens; ++i) {
      require(tokens[i] >= 0 && uint32_t(tokens[i]) < tok.n_vocab(), "a token id is outside the vocabulary");
      s += tok.piece(uint32_t(tokens[i]));
    }
    copy_text(s, text, capacity, len);
  });
}

vkspec_status vkspec_apply_chat_template(const vkspec_model* model, const char* template_source, const char* messages_json,
                                         int32_t add_generation_prompt, char* text, size_t capacity, size_t* len) {
  return api_call([&] {
    ModelUse use(model);
    require(messages_json && len && (text || capacity == 0), "a null argument");
    const TargetModel& t = *model->target;
    std::optional<std::string> source = template_source ? std::optional<std::string>(template_source)
                                                        : ChatTemplate::from_gguf(*t.file);
    if (!source) throw Failure{VKSPEC_ERROR_NOT_SUPPORTED, "the model has no chat template (tokenizer.chat_template)"};
    const ChatFormatter fmt(*t.tok, source);
    const ChatInputs req = parse_chat_request(messages_json);
    copy_text(fmt.render(req.messages, add_generation_prompt != 0, req.tools), text, capacity, len);
  });
}

vkspec_context_params vkspec_context_default_params(void) {
  vkspec_context_params p{};
  p.draft_model = nullptr;
  p.draft_ngram = 0;
  p.draft_max = 5;
  p.draft_adaptive = 1;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  p.repeat_penalty = 1.0f;
  p.repeat_last_n = 64;
  p.seed = 0;
  return p;
}

vkspec_status vkspec_context_create(vkspec_model* model, const vkspec_context_params* params, vkspec_context** out) {
  return api_call([&] {
    ModelUse use(model);
    require(params && out, "a null argument");
    *out = nullptr;
    require(!(params->draft_model && params->draft_ngram), "give a draft model or n-gram drafts, not both");
    RunOptions o;
    if (params->draft_model) o.draft_model = params->draft_model;
    if (params->draft_ngram) o.draft = "ngram";
    o.draft_max = int(params->draft_max);
    o.draft_policy = params->draft_adaptive ? "adaptive" : "fixed";
    o.temp = params->temperature;
    o.top_k = params->top_k;
    o.top_p = params->top_p;
    o.min_p = params->min_p;
    o.repeat_penalty = params->repeat_penalty;
    o.repeat_last_n = params->repeat_last_n;
    auto c = std::make_unique<vkspec_context>();
    c->model = model;
    try {
      c->sp = sampling_params(o);
    } catch (const Error& e) {
      throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, e.what()};
    }
    c->sp.seed = params->seed;
    c->engine = std::make_unique<Engine>(model->target, o);
    c->engine->set_cancel_flag(&c->cancel);
    try {
      c->session = c->engine->open_session();
    } catch (const Error&) {
      throw Failure{VKSPEC_ERROR_BUSY, "the model's contexts are all in use (vkspec_model_params.max_contexts = " +
                                           std::to_string(model->max_contexts) + ")"};
    }
    model->contexts++;
    std::lock_guard<std::mutex> lock(g_handles_mutex);
    g_contexts.insert(c.get());
    *out = c.release();
  }, VKSPEC_ERROR_LOAD);
}

vkspec_status vkspec_context_free(vkspec_context* ctx) {
  return api_call([&] {
    if (!ctx) return;
    {
      Claim claim(ctx);
      {
        std::lock_guard<std::mutex> lock(g_handles_mutex);
        g_contexts.erase(ctx);   // from here on, other calls see a dead handle
      }
      ctx->engine->close_session(ctx->session);
      ctx->engine.reset();
      ctx->model->contexts--;
    }
    delete ctx;
  });
}

vkspec_generate_params vkspec_generate_default_params(void) {
  vkspec_generate_params p{};
  p.n_predict = -1;
  p.ignore_eos = 0;
  p.speculative = 1;
  return p;
}

namespace {

// Sets a generation up on a claimed context (vkspec_begin, vkspec_generate).
void begin_generation(vkspec_context* ctx, const int32_t* prompt, size_t n_prompt, const vkspec_generate_params* params) {
  require(params && prompt && n_prompt > 0, "a null argument or an empty prompt");
  Engine& e = *ctx->engine;
  if (e.running()) throw Failure{VKSPEC_ERROR_BUSY, "a generation is in progress on this context: step it to the end"};
  const uint32_t n_vocab = e.tokenizer().n_vocab(), n_ctx = e.model().n_ctx();
  std::vector<uint32_t> ids(n_prompt);
  for (size_t i = 0; i < n_prompt; ++i) {
    require(prompt[i] >= 0 && uint32_t(prompt[i]) < n_vocab, "a prompt token is outside the vocabulary");
    ids[i] = uint32_t(prompt[i]);
  }
  if (n_prompt >= n_ctx)
    throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, "the prompt is " + std::to_string(n_prompt) +
                                                     " tokens and the context holds " + std::to_string(n_ctx)};
  ctx->params = *params;
  ctx->utf8 = Utf8Stream();
  const vkspec_generate_params& p = ctx->params;
  const int n = p.n_predict > 0 ? p.n_predict : int(n_ctx);
  e.begin(ctx->session, ids, ctx->sp, n, p.ignore_eos != 0, p.speculative != 0, [ctx](uint32_t id, bool from_draft) {
    const vkspec_generate_params& q = ctx->params;
    if (!q.on_token) return true;
    const std::string piece = ctx->utf8.push(ctx->engine->tokenizer().piece(id));
    return q.on_token(int32_t(id), piece.c_str(), piece.size(), from_draft, q.user) == 0;
  });
}

// One step on a claimed context; at the end, the metrics (and CANCELLED when vkspec_cancel stopped it).
vkspec_status step_generation(vkspec_context* ctx, int32_t* done) {
  Engine& e = *ctx->engine;
  if (!e.running()) throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, "no generation was begun on this context"};
  *done = 0;
  if (e.step()) return VKSPEC_OK;
  *done = 1;
  const Completion c = e.finish();
  ctx->cancel.store(false);
  vkspec_metrics& m = ctx->metrics;
  m = vkspec_metrics{};
  m.prompt_tokens = c.reused + c.prefilled;
  m.reused_tokens = c.reused;
  m.prefilled_tokens = c.prefilled;
  m.generated_tokens = c.ids.size();
  m.prefill_seconds = c.prefill_s;
  m.decode_seconds = c.decode_s;
  m.prefill_tokens_per_second = c.prefill_s > 0 ? double(c.prefilled) / c.prefill_s : 0.0;
  m.decode_tokens_per_second = c.decode_tok_s();
  m.drafted = c.spec.drafted;
  m.accepted = c.spec.accepted;
  m.verify_passes = c.spec.verify_passes;
  m.acceptance_rate = c.spec.acceptance_rate();
  m.host_waits = c.decode_submissions;
  copy_field(m.stop_reason, c.stop_reason == "interrupted" ? std::string("stopped") : c.stop_reason);
  if (c.stop_reason == "cancelled") throw Failure{VKSPEC_ERROR_CANCELLED, "cancelled by vkspec_cancel()"};
  return VKSPEC_OK;
}

}  // namespace

vkspec_status vkspec_begin(vkspec_context* ctx, const int32_t* prompt, size_t n_prompt, const vkspec_generate_params* params) {
  return api_call([&] {
    Claim claim(ctx);
    begin_generation(ctx, prompt, n_prompt, params);
  });
}

vkspec_status vkspec_step(vkspec_context* ctx, int32_t* done) {
  return api_call([&] {
    require(done != nullptr, "done is null");
    Claim claim(ctx);
    step_generation(ctx, done);
  });
}

vkspec_status vkspec_generate(vkspec_context* ctx, const int32_t* prompt, size_t n_prompt,
                              const vkspec_generate_params* params) {
  return api_call([&] {
    Claim claim(ctx);
    begin_generation(ctx, prompt, n_prompt, params);
    for (int32_t done = 0; !done;) step_generation(ctx, &done);
  });
}

vkspec_status vkspec_cancel(vkspec_context* ctx) {
  return api_call([&] {
    std::lock_guard<std::mutex> lock(g_handles_mutex);   // (the context cannot be freed meanwhile)
    check_live(g_contexts, ctx, "context");
    ctx->cancel.store(true);
  });
}

vkspec_status vkspec_get_metrics(const vkspec_context* ctx, vkspec_metrics* out) {
  return api_call([&] {
    require(out != nullptr, "out is null");
    Claim claim(const_cast<vkspec_context*>(ctx));
    *out = ctx->metrics;
  });
}

}  // extern "C"
