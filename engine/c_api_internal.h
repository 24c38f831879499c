#pragma once
// What the C API's source files (engine/c_api.cpp: models, contexts; engine/c_api_batch.cpp: batches)
// share: the model handle, api_call() (every entry point runs inside it: exceptions become a status and the
// thread's last error message), the registry of live handles and the conversions of parameter structs.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/engine.h"
#include "constrain/json_schema.h"
#include "core/json_text.h"
#include "vkspec.h"

struct vkspec_model {
  std::shared_ptr<vkspec::TargetModel> target;
  std::atomic<uint32_t> contexts{0};   // live contexts and batches (vkspec_model_free refuses while any)
  std::atomic<uint32_t> users{0};      // calls using it right now (vkspec_model_free waits for none: BUSY)
  uint32_t max_contexts = 1;           // contexts and batch sequences that may exist at once
};

namespace vkspec::capi {

// The calling thread's last error message (vkspec_last_error).
extern thread_local std::string t_last_error;

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
  } catch (const ModelBusy& e) {
    t_last_error = e.what();
    return VKSPEC_ERROR_BUSY;
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

inline void require(bool ok, const char* what) {
  if (!ok) throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, what};
}

// A caller's token ids, each checked against the vocabulary (`what`: "a prompt token", "a token id").
inline std::vector<uint32_t> checked_ids(const int32_t* tokens, size_t n, uint32_t n_vocab, const char* what = "a token id") {
  std::vector<uint32_t> ids(n);
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || uint32_t(tokens[i]) >= n_vocab)
      throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, std::string(what) + " is outside the vocabulary"};
    ids[i] = uint32_t(tokens[i]);
  }
  return ids;
}

inline void copy_text(const std::string& s, char* out, size_t capacity, size_t* len) {
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
extern std::mutex g_handles_mutex;
extern std::unordered_set<const void*> g_models, g_contexts, g_batches;

inline void check_live(const std::unordered_set<const void*>& set, const void* h, const char* what) {
  if (!h) throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, std::string("the ") + what + " is null"};
  if (!set.count(h)) throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, std::string("the ") + what + " is not live (freed?)"};
}


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

inline TargetModel::Options target_options(const char* path, const vkspec_model_params& p) {
  require(path != nullptr, "the model path is null");
  require(p.device >= -1, "device must be -1 (automatic) or a device index");
  require(p.max_contexts >= 1 && p.max_contexts <= 256, "max_contexts must be 1..256");
  TargetModel::Options o;
  o.path = path;
  o.device = p.device;
  o.n_ctx = p.n_ctx;
  o.max_sequences = p.max_contexts;
  require(p.kv_contexts <= p.max_contexts, "kv_contexts must be 0..max_contexts");
  o.kv_pool_sequences = p.kv_contexts;
  static_assert(LlamaModel::kMaxUbatch == VKSPEC_MAX_UBATCH);
  require(p.n_ubatch <= VKSPEC_MAX_UBATCH, "n_ubatch must be 0..VKSPEC_MAX_UBATCH (512; 0: the device's)");
  o.ubatch = p.n_ubatch;
  o.vocab_only = p.vocab_only != 0;
  if (p.pipeline_cache) o.pipeline_cache = std::string(p.pipeline_cache);
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
    e.shader_integer_dot_product = x->shader_integer_dot_product;
    e.cooperative_matrix_nv = x->cooperative_matrix_nv;
    e.cooperative_matrix_khr = x->cooperative_matrix_khr;
    e.vulkan_memory_model = x->vulkan_memory_model;
    e.lock_queue = x->lock_queue;
    e.unlock_queue = x->unlock_queue;
    e.lock_user = x->lock_user;
    e.timeline_semaphore = x->timeline_semaphore != 0;
    if (x->submit) {
      e.hand_over = [submit = x->submit, user = x->submit_user](const Handover& h) {
        static_assert(sizeof(void*) == sizeof(VkCommandBuffer));
        vkspec_submission s{};
        s.n_command_buffers = h.n_command_buffers;
        s.command_buffers = reinterpret_cast<void* const*>(h.command_buffers);
        s.semaphore = h.semaphore;
        s.wait_value = h.wait_value;
        s.signal_value = h.signal_value;
        return submit(&s, user) == 0;
      };
    }
    o.external = e;
  }
  return o;
}

}  // namespace vkspec::capi

namespace vkspec::capi {

// The stop reason's name in the C API's results (vkspec_metrics, vkspec_request_result): the one place
// reasons become strings.
inline const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::None: return "";
    case StopReason::Eos: return "eos";
    case StopReason::Length: return "length";
    case StopReason::Context: return "context";
    case StopReason::Stopped: return "stopped";
    case StopReason::Cancelled: return "cancelled";
    case StopReason::Error: return "error";
    case StopReason::Embedded: return "embedded";
  }
  return "";
}

// The drafting fields checked (a clear error naming the CLI's flags) and converted.
inline DraftOptions draft_options(const vkspec_draft_params& d) {
  DraftOptions o;
  if (d.model) o.model_path = d.model;
  o.ngram = d.ngram != 0;
  o.max = d.max;
  o.min = d.min;
  o.p_min = d.p_min;
  o.policy = d.adaptive ? DraftLengthPolicy::Adaptive : DraftLengthPolicy::Fixed;
  static_assert(int(DraftTree::Off) == 0 && int(DraftTree::Auto) == 1 && int(DraftTree::Wide) == 2);
  o.tree = DraftTree(std::clamp(d.tree, 0, 2));
  try {
    if (d.tree < 0 || d.tree > 2) throw Error("--draft-tree (vkspec_draft_params.tree) must be 0 (off), 1 (auto) or 2 (wide)");
    check_draft_options(o);
  } catch (const Error& e) {
    throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, e.what()};
  }
  return o;
}

inline SamplingParams sampling_params(const vkspec_sampling_params& p, uint32_t n_vocab) {
  try {
    SamplingParams sp;
    sp.temperature = p.temperature;
    sp.top_k = p.top_k;
    sp.top_p = p.top_p;
    sp.min_p = p.min_p;
    sp.repeat_penalty = p.repeat_penalty;
    sp.frequency_penalty = p.frequency_penalty;
    sp.presence_penalty = p.presence_penalty;
    sp.repeat_last_n = p.repeat_last_n;
    sp.seed = p.seed;
    if (p.json_object != 0 && p.json_object != 1) throw Error("json_object must be 0 or 1");
    sp.json_object = p.json_object == 1;
    if (p.grammar && *p.grammar) {
      if (sp.json_object) throw Error("json_object and a grammar exclude each other");
      sp.grammar = p.grammar;
    }
    if (p.json_schema && *p.json_schema) {
      if (sp.constrained()) throw Error("a JSON schema excludes json_object and a grammar");
      sp.grammar = json_schema_to_gbnf(parse_json_text(p.json_schema, "the JSON schema"));
    }
    if (!sp.grammar.empty()) (void)Gbnf::parse(sp.grammar);   // refused here, with its line, not at the first step
    if (p.grammar_trigger && *p.grammar_trigger) {
      if (sp.grammar.empty()) throw Error("a grammar trigger needs a grammar or a JSON schema");
      sp.grammar_trigger = p.grammar_trigger;
      try {
        (void)Gbnf::parse(sp.grammar_trigger);
      } catch (const Error& e) {
        throw Error(std::string("the grammar trigger: ") + e.what());
      }
    }
    static_assert(VKSPEC_SPEC_SAMPLING_COUPLED == int(SpecSampling::Coupled) &&
                  VKSPEC_SPEC_SAMPLING_REJECTION == int(SpecSampling::Rejection));
    if (p.spec_sampling != VKSPEC_SPEC_SAMPLING_COUPLED && p.spec_sampling != VKSPEC_SPEC_SAMPLING_REJECTION)
      throw Error("spec_sampling must be VKSPEC_SPEC_SAMPLING_COUPLED (0) or VKSPEC_SPEC_SAMPLING_REJECTION (1)");
    sp.spec_sampling = SpecSampling(p.spec_sampling);
    if (p.n_logit_bias > SamplingParams::kMaxLogitBias)
      throw Error("a logit bias of more than " + std::to_string(SamplingParams::kMaxLogitBias) + " tokens");
    if (p.n_logit_bias && (!p.logit_bias_tokens || !p.logit_bias)) throw Error("a logit bias without its arrays");
    for (uint32_t i = 0; i < p.n_logit_bias; ++i) {
      if (p.logit_bias_tokens[i] < 0 || uint32_t(p.logit_bias_tokens[i]) >= n_vocab)
        throw Error("logit bias: token " + std::to_string(p.logit_bias_tokens[i]) + " is outside the vocabulary");
      sp.logit_bias.push_back({uint32_t(p.logit_bias_tokens[i]), p.logit_bias[i]});
    }
    return checked_sampling(sp);
  } catch (const Error& e) {
    throw Failure{VKSPEC_ERROR_INVALID_ARGUMENT, e.what()};
  }
}

vkspec_sampling_params default_sampling();
vkspec_draft_params default_draft();

}  // namespace vkspec::capi
