// The C API (include/vkspec.h): the library, devices, models (loading from a file, memory or a reader),
// tokenizing and chat templates. Every entry point runs inside api_call() (engine/c_api_internal.h).
#include <cstring>

#include "engine/c_api_internal.h"
#include "text/prompt.h"

using namespace vkspec;
using namespace vkspec::capi;

namespace {
// The kernels a device runs under the environment (VKSPEC_KERNELS, VKSPEC_MATMUL): runtime/kernels.h decides.
KernelChoice kernel_choice(const DeviceFacts& f) {
  const Settings settings = read_settings();
  return choose_kernels(f, settings.kernels, settings.matmul);
}
const char* kernel_family(KernelFamily f) { return f == KernelFamily::RowPerLane ? "row-per-lane" : "subgroup"; }
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
      const KernelChoice choice = kernel_choice(f);
      copy_field(d.kernel_family, kernel_family(choice.family));
      copy_field(d.matmul_path, choice.refused.empty() ? matmul_path_name(choice.matmul) : "refused");
      d.integer_dot_product = f.integer_dot_product;
      d.integer_dot_accelerated = f.integer_dot_accelerated;
      d.cooperative_matrix = f.cooperative_matrix;
      d.cooperative_matrix_nv = f.cooperative_matrix_nv;
      d.cooperative_matrix_khr = f.cooperative_matrix_khr;
      d.vulkan_memory_model = f.vulkan_memory_model;
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
    out->shader_integer_dot_product = r.integer_dot_product;
    out->cooperative_matrix_nv = r.cooperative_matrix_nv;
    out->cooperative_matrix_khr = r.cooperative_matrix_khr;
    out->vulkan_memory_model = r.vulkan_memory_model;
    if (r.extensions.size() > std::size(out->extensions)) throw Error("device requirements: more extensions than the struct holds");
    for (const char* e : r.extensions) out->extensions[out->n_extensions++] = e;
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
// From a file (path), bytes in memory (memory) or the application's reader (reader).
vkspec_status load_model(const char* path, std::span<const uint8_t> memory, const vkspec_reader* reader,
                         const vkspec_model_params* params, vkspec_model** out) {
  return api_call([&] {
    require(params && out, "params or out is null");
    *out = nullptr;
    TargetModel::Options o = target_options(path, *params);
    o.memory = memory;
    if (reader) {
      o.reader_size = reader->size;
      o.reader = [read = reader->read, user = reader->user, size = reader->size](uint64_t offset, uint8_t* dst, uint64_t n) {
        if (offset > size || n > size - offset || n > SIZE_MAX || read(user, offset, dst, size_t(n)) != 0)
          throw Error("the application's reader could not read " + std::to_string(n) + " bytes at offset " + std::to_string(offset));
      };
    }
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
  return load_model(path, {}, nullptr, params, out);
}

vkspec_status vkspec_model_load_from_memory(const void* data, size_t size, const vkspec_model_params* params,
                                            vkspec_model** out) {
  if (!data || size == 0) {
    t_last_error = "a null or empty buffer";
    return VKSPEC_ERROR_INVALID_ARGUMENT;
  }
  return load_model("(memory)", std::span(static_cast<const uint8_t*>(data), size), nullptr, params, out);
}

vkspec_status vkspec_model_load_from_reader(const vkspec_reader* reader, const vkspec_model_params* params, vkspec_model** out) {
  if (!reader || !reader->read || reader->size == 0) {
    t_last_error = "a null reader, read callback or size";
    return VKSPEC_ERROR_INVALID_ARGUMENT;
  }
  return load_model("(reader)", {}, reader, params, out);
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
      if (t.model) {   // what the loaded model runs (the environment may have changed since)
        copy_field(out->kernel_family, kernel_family(t.model->kernels().family()));
        copy_field(out->matmul_path, matmul_path_name(t.model->kernels().matmul_path()));
      }
    }
    out->n_ctx = t.model ? t.model->n_ctx() : 0;
    out->n_ubatch = t.model ? t.model->ubatch() : 0;
    out->n_vocab = t.tok->n_vocab();
    out->bos = t.tok->bos();
    out->eos = t.tok->eos();
    out->add_bos = t.tok->add_bos();
    out->has_chat_template = ChatTemplate::from_gguf(*t.file).has_value();
    out->load_seconds = t.load_s;
    copy_field(out->architecture, t.file->opt_string("general.architecture").value_or(""));
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

}  // extern "C"
