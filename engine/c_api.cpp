// The C API (include/vkspec.h) over the Engine: no C++ type or exception crosses it. Every entry point
// runs inside api_call(), which turns exceptions into a status and the thread's last error message.
#include "engine/c_api_internal.h"
#include "text/prompt.h"

using namespace vkspec;
using namespace vkspec::capi;

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

namespace vkspec::capi {
thread_local std::string t_last_error;
std::mutex g_handles_mutex;
std::unordered_set<const void*> g_models, g_contexts, g_batches;
}  // namespace vkspec::capi

namespace {
const char* kernel_family(const DeviceFacts& f) { return f.prefers_row_per_lane() ? "row-per-lane" : "subgroup"; }

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
}  // namespace

namespace vkspec::capi {
static_assert(VKSPEC_MAX_JSON_DEPTH == kMaxJsonDepth, "include/vkspec.h and core/json_text.h");
static_assert(VKSPEC_MAX_LOGIT_BIAS == SamplingParams::kMaxLogitBias &&
                  VKSPEC_LOGIT_BIAS_BOUND == SamplingParams::kLogitBiasBound,
              "the C API's logit bias bounds are the sampler's");
vkspec_sampling_params default_sampling() {
  vkspec_sampling_params s{};
  s.temperature = 0.8f;
  s.top_k = 40;
  s.top_p = 0.95f;
  s.min_p = 0.05f;
  s.repeat_penalty = 1.0f;
  s.repeat_last_n = 64;
  s.seed = 0;
  s.frequency_penalty = 0.0f;
  s.presence_penalty = 0.0f;
  s.logit_bias_tokens = nullptr;
  s.logit_bias = nullptr;
  s.n_logit_bias = 0;
  s.json_object = 0;
  s.grammar = nullptr;
  s.json_schema = nullptr;
  s.grammar_trigger = nullptr;
  return s;
}
vkspec_draft_params default_draft() {
  vkspec_draft_params d{};
  d.model = nullptr;
  d.ngram = 0;
  d.max = 5;
  d.adaptive = 1;
  d.min = 0;
  d.p_min = 0.0f;
  return d;
}
}  // namespace vkspec::capi

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

vkspec_status vkspec_environment_json(char* text, size_t capacity, size_t* len) {
  return api_call([&] {
    require(len != nullptr && (text != nullptr || capacity == 0), "a null argument");
    try {
      copy_text(settings_json(read_settings()), text, capacity, len);
    } catch (const Error& e) {
      throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, e.what()};
    }
  });
}

vkspec_status vkspec_list_devices(vkspec_device_info* out, uint32_t capacity, uint32_t* count) {
  return api_call([&] {
    require(count != nullptr, "count is null");
    require(out != nullptr || capacity == 0, "out is null");
    std::vector<DeviceFacts> devices;
    for (DeviceFacts& f : VulkanDevice::list_devices()) {   // one device seen through two drivers is listed once
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
      copy_field(d.kernel_family, kernel_family(f));
      copy_field(d.api_version, std::to_string(VK_API_VERSION_MAJOR(f.api_version)) + "." +
                                    std::to_string(VK_API_VERSION_MINOR(f.api_version)) + "." +
                                    std::to_string(VK_API_VERSION_PATCH(f.api_version)));
      d.min_subgroup_size = f.min_subgroup_size;
      d.max_subgroup_size = f.max_subgroup_size;
      d.subgroup_size_control = f.subgroup_size_control;
      d.subgroup_arithmetic = f.subgroup_arithmetic;
      d.shader_int8 = f.shader_int8;
      d.buffer_device_address = f.buffer_device_address;
      d.max_shared_memory = f.max_shared_memory;
      d.max_allocation_size = f.max_allocation_size;
      copy_field(d.memory_model, f.discrete_memory ? "discrete" : "mapped");
      copy_field(d.submit, f.submit_split_name());
    }
  }, VKSPEC_ERROR_DEVICE);
}

vkspec_status vkspec_device_requirements_get(void* instance, void* physical_device, void (*get_instance_proc_addr)(void),
                                             vkspec_device_requirements* out) {
  return api_call([&] {
    require(instance && physical_device && out, "a null instance, physical device or output");
    const DeviceRequirements r = device_requirements(static_cast<VkInstance>(instance),
                                                     static_cast<VkPhysicalDevice>(physical_device),
                                                     reinterpret_cast<PFN_vkGetInstanceProcAddr>(get_instance_proc_addr));
    *out = vkspec_device_requirements{};
    out->api_version = r.api_version;
    out->buffer_device_address = r.buffer_device_address;
    out->subgroup_size_control = r.subgroup_size_control;
    out->timeline_semaphore = r.timeline_semaphore;
    for (const char* e : r.extensions)
      if (out->n_extensions < std::size(out->extensions)) out->extensions[out->n_extensions++] = e;
    copy_field(out->missing, r.missing);
    if (!r.missing.empty()) throw Failure{VKSPEC_ERROR_DEVICE, "the device lacks what vkspec needs: " + r.missing};
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
    VulkanDevice ctx(VulkanDeviceOptions{o.device, false, o.external ? &*o.external : nullptr});
    ModelOptions mo;
    mo.n_ctx = o.n_ctx;
    mo.max_sequences = o.max_sequences;
    mo.kv_pool_sequences = o.kv_pool_sequences;
    mo.ubatch = o.ubatch;
    const MemoryEstimate e = LlamaModel::estimate_memory(ctx, file, mo);
    *out = vkspec_memory_estimate{e.weights, e.kv, e.activations, e.total(), e.device, e.total() <= e.device};
  }, VKSPEC_ERROR_LOAD);
}

namespace {
vkspec_status load_model(const char* path, std::span<const uint8_t> memory, const vkspec_model_params* params, vkspec_model** out) {
  return api_call([&] {
    require(params && out, "params or out is null");
    *out = nullptr;
    TargetModel::Options o = target_options(path, *params);
    o.memory = memory;
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
}  // namespace

vkspec_status vkspec_model_load(const char* path, const vkspec_model_params* params, vkspec_model** out) {
  return load_model(path, {}, params, out);
}

vkspec_status vkspec_model_load_from_memory(const void* data, size_t size, const vkspec_model_params* params,
                                            vkspec_model** out) {
  if (!data || size == 0) {
    t_last_error = "a null or empty buffer";
    return VKSPEC_ERROR_INVALID_ARGUMENT;
  }
  return load_model("(memory)", std::span(static_cast<const uint8_t*>(data), size), params, out);
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
  api_call([&] {
    ModelUse use(model);
    n = model->target->model ? model->target->model->n_ctx() : 0;
  });
  return n;
}
uint32_t vkspec_model_n_vocab(const vkspec_model* model) {
  uint32_t n = 0;
  api_call([&] { ModelUse use(model); n = model->target->tok->n_vocab(); });
  return n;
}

uint32_t vkspec_model_n_embd(const vkspec_model* model) {
  uint32_t n = 0;
  api_call([&] {
    ModelUse use(model);
    n = model->target->model ? model->target->model->hparams().dim : 0;
  });
  return n;
}

vkspec_status vkspec_model_get_info(const vkspec_model* model, vkspec_model_info* out) {
  return api_call([&] {
    ModelUse use(model);
    require(out != nullptr, "out is null");
    const TargetModel& t = *model->target;
    *out = vkspec_model_info{};
    if (t.ctx) {
      copy_field(out->device, t.ctx->facts().name);
      copy_field(out->kernel_family, kernel_family(t.ctx->facts()));
    }
    out->n_ctx = t.model ? t.model->n_ctx() : 0;
    out->n_ubatch = t.model ? t.model->ubatch() : 0;
    out->n_vocab = t.tok->n_vocab();
    out->bos = t.tok->bos();
    out->eos = t.tok->eos();
    out->add_bos = t.tok->add_bos();
    out->has_chat_template = ChatTemplate::from_gguf(*t.file).has_value();
    out->load_seconds = t.load_s;
  });
}

vkspec_status vkspec_tokenize(const vkspec_model* model, const char* text, size_t text_len, int32_t add_bos,
                              int32_t parse_special, int32_t* tokens, size_t capacity, size_t* n_tokens) {
  return api_call([&] {
    ModelUse use(model);
    require(n_tokens && (text || text_len == 0) && (tokens || capacity == 0), "a null argument");
    require(add_bos >= 0 && add_bos <= VKSPEC_ADD_BOS_UNLESS_PRESENT, "add_bos must be 0, 1 or 2");
    const std::vector<uint32_t> ids = tokenize(*model->target->tok, std::string_view(text ? text : "", text_len),
                                               AddBos(add_bos), parse_special != 0);
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

vkspec_status vkspec_model_chat_template(const vkspec_model* model, char* text, size_t capacity, size_t* len) {
  return api_call([&] {
    ModelUse use(model);
    require(len && (text || capacity == 0), "a null argument");
    const std::optional<std::string> source = ChatTemplate::from_gguf(*model->target->file);
    if (!source) throw Failure{VKSPEC_ERROR_NOT_SUPPORTED, "the model has no chat template (tokenizer.chat_template)"};
    copy_text(*source, text, capacity, len);
  });
}

vkspec_context_params vkspec_context_default_params(void) {
  vkspec_context_params p{};
  p.draft = default_draft();
  p.sampling = default_sampling();
  return p;
}

vkspec_status vkspec_context_create(vkspec_model* model, const vkspec_context_params* params, vkspec_context** out) {
  return api_call([&] {
    ModelUse use(model);
    require(params && out, "a null argument");
    *out = nullptr;
    if (!model->target->model)
      throw Failure{VKSPEC_ERROR_NOT_SUPPORTED, "the model was loaded vocab_only: it has no contexts"};
    const DraftOptions o = draft_options(params->draft);
    auto c = std::make_unique<vkspec_context>();
    c->model = model;
    c->sp = sampling_params(params->sampling, model->target->tok->n_vocab());
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

vkspec_status vkspec_context_get_info(const vkspec_context* ctx, vkspec_context_info* out) {
  return api_call([&] {
    require(out != nullptr, "out is null");
    Claim claim(const_cast<vkspec_context*>(ctx));
    *out = vkspec_context_info{};
    const Engine& e = *ctx->engine;
    copy_field(out->drafter, drafter_name(e.drafter_kind()));
    out->load_seconds = e.load_s();
    out->cached_tokens = uint32_t(ctx->session.tokens.size());
  });
}

vkspec_status vkspec_context_clear(vkspec_context* ctx) {
  return api_call([&] {
    Claim claim(ctx);
    if (ctx->engine->running()) throw Failure{VKSPEC_ERROR_BUSY, "a generation is in progress on this context"};
    ctx->engine->clear_session(ctx->session);
  });
}

vkspec_status vkspec_context_save(vkspec_context* ctx, const char* path) {
  return api_call([&] {
    Claim claim(ctx);
    require(path != nullptr, "a null path");
    if (ctx->engine->running()) throw Failure{VKSPEC_ERROR_BUSY, "a generation is in progress on this context"};
    ctx->engine->save_session(ctx->session, path);
  });
}

vkspec_status vkspec_context_load(vkspec_context* ctx, const char* path) {
  return api_call([&] {
    Claim claim(ctx);
    require(path != nullptr, "a null path");
    if (ctx->engine->running()) throw Failure{VKSPEC_ERROR_BUSY, "a generation is in progress on this context"};
    try {
      ctx->engine->load_session(ctx->session, path);
    } catch (const Error& e) {
      throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, e.what()};
    }
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
  const std::vector<uint32_t> ids = checked_ids(prompt, n_prompt, n_vocab, "a prompt token");
  if (n_prompt >= n_ctx)
    throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, "the prompt is " + std::to_string(n_prompt) +
                                                     " tokens and the context holds " + std::to_string(n_ctx)};
  ctx->params = *params;
  ctx->utf8 = Utf8Stream();
  e.set_prefill_one_submission(params->prefill_one_submission != 0);
  e.set_device_budget(double(params->max_device_us) * 1e-6);
  const vkspec_generate_params& p = ctx->params;
  const int n = p.n_predict > 0 ? p.n_predict : int(n_ctx);
  e.begin(ctx->session, ids, ctx->sp, n, p.ignore_eos != 0, p.speculative != 0, [ctx](uint32_t id, bool from_draft) {
    const vkspec_generate_params& q = ctx->params;
    if (!q.on_token) return true;
    const std::string piece = ctx->utf8.push(ctx->engine->tokenizer().piece(id));
    return q.on_token(int32_t(id), piece.c_str(), piece.size(), from_draft, q.user) == 0;
  });
}

void end_generation(vkspec_context* ctx);

// One step on a claimed context (a step submitted asynchronously is collected first); at the end, the
// metrics (and CANCELLED when vkspec_cancel stopped it).
void step_generation(vkspec_context* ctx, int32_t* done) {
  Engine& e = *ctx->engine;
  if (!e.running()) throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, "no generation was begun on this context"};
  *done = 0;
  if (e.step_pending()) e.collect(UINT64_MAX);
  else if (!e.step()) {
    *done = 1;
    end_generation(ctx);
  }
}

// The generation has ended: its result, the last piece, the metrics (and CANCELLED when vkspec_cancel
// stopped it).
void end_generation(vkspec_context* ctx) {
  Engine& e = *ctx->engine;
  const SequenceResult c = e.finish();
  const std::string tail = ctx->utf8.finish();   // an unfinished UTF-8 sequence at the end: U+FFFD
  if (!tail.empty() && ctx->params.on_token) ctx->params.on_token(-1, tail.c_str(), tail.size(), 0, ctx->params.user);
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
  m.dispatches = c.decode_dispatches;
  m.queue_submissions = c.decode_parts;
  m.device_seconds = c.decode_gpu_s;
  m.round_tokens = c.spec.tokens;
  m.max_step_device_seconds = c.max_unit_gpu_s;
  copy_field(m.stop_reason, stop_reason_name(c.stop));
  if (c.stop == StopReason::Cancelled) throw Failure{VKSPEC_ERROR_CANCELLED, "cancelled by vkspec_cancel()"};
}

// Collects a submitted step within timeout_ns: *ready = 1 when it was (its tokens delivered).
void collect_step(vkspec_context* ctx, uint64_t timeout_ns, int32_t* ready) {
  Engine& e = *ctx->engine;
  if (!e.running() || !e.step_pending())
    throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, "no step was submitted on this context (vkspec_step_submit)"};
  *ready = e.collect(timeout_ns) ? 1 : 0;
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

vkspec_status vkspec_step_submit(vkspec_context* ctx, int32_t* done) {
  return api_call([&] {
    require(done != nullptr, "done is null");
    Claim claim(ctx);
    Engine& e = *ctx->engine;
    if (!e.running()) throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, "no generation was begun on this context"};
    if (e.step_pending())
      throw Failure{VKSPEC_ERROR_BUSY, "a step is in flight: collect it first (vkspec_step_poll, vkspec_step_wait)"};
    *done = 0;
    if (!e.submit(/*wait_for_model=*/false)) {
      *done = 1;
      end_generation(ctx);
    }
  });
}

vkspec_status vkspec_step_poll(vkspec_context* ctx, int32_t* ready) {
  return api_call([&] {
    require(ready != nullptr, "ready is null");
    Claim claim(ctx);
    collect_step(ctx, 0, ready);
  });
}

vkspec_status vkspec_step_wait(vkspec_context* ctx, uint64_t timeout_ns, int32_t* ready) {
  return api_call([&] {
    require(ready != nullptr, "ready is null");
    Claim claim(ctx);
    collect_step(ctx, timeout_ns, ready);
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

vkspec_status vkspec_score(vkspec_context* ctx, const int32_t* tokens, size_t n_tokens, size_t first, double* logprobs) {
  return api_call([&] {
    Claim claim(ctx);
    require(tokens && logprobs, "a null argument");
    Engine& e = *ctx->engine;
    if (e.running()) throw Failure{VKSPEC_ERROR_BUSY, "a generation is in progress on this context"};
    const uint32_t n_vocab = e.tokenizer().n_vocab(), n_ctx = e.model().n_ctx();
    require(first >= 1 && first < n_tokens && n_tokens <= n_ctx, "score needs 1 <= first < n_tokens <= the context");
    const auto lp = e.score(ctx->session, checked_ids(tokens, n_tokens, n_vocab), first);
    ctx->cancel.store(false);
    if (!lp) throw Failure{VKSPEC_ERROR_CANCELLED, "cancelled by vkspec_cancel()"};
    std::copy(lp->begin(), lp->end(), logprobs);
  });
}

vkspec_status vkspec_embed(vkspec_context* ctx, const int32_t* tokens, size_t n_tokens, int32_t pooling,
                           int32_t normalize, float* out, size_t capacity) {
  return api_call([&] {
    Claim claim(ctx);
    require(tokens && out, "a null argument");
    Engine& e = *ctx->engine;
    if (e.running()) throw Failure{VKSPEC_ERROR_BUSY, "a generation is in progress on this context"};
    require(pooling == VKSPEC_POOLING_LAST || pooling == VKSPEC_POOLING_MEAN, "pooling must be VKSPEC_POOLING_LAST or _MEAN");
    require(normalize == 0 || normalize == 1, "normalize must be 0 or 1");
    const uint32_t n_vocab = e.tokenizer().n_vocab(), n_embd = e.model().hparams().dim;
    require(capacity >= n_embd, "out holds fewer floats than vkspec_model_n_embd()");
    require(n_tokens >= 1 && n_tokens <= e.model().n_ctx(), "an embedding needs 1 <= n_tokens <= the context");
    const auto v = e.embed(ctx->session, checked_ids(tokens, n_tokens, n_vocab), pooling == VKSPEC_POOLING_MEAN ? LlamaModel::Pooling::Mean : LlamaModel::Pooling::Last,
                           normalize == 1);
    std::copy(v.begin(), v.end(), out);
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
