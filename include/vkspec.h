/* vkspec: portable Llama inference on Vulkan with lossless speculative decoding. The C API (C99).
 *
 * Conventions
 *   - Every call that can fail returns a vkspec_status; VKSPEC_OK is 0. vkspec_last_error() gives the
 *     message of the calling thread's last failure (thread-local; valid until that thread's next call).
 *   - Handles are opaque. Parameter structs come from *_default_params() and are then edited, so that
 *     fields added in later versions keep their defaults.
 *   - Strings are UTF-8. Output buffers follow snprintf: the required size (without the NUL) is always
 *     returned in *len; the text is written (NUL-terminated, possibly cut) when capacity > 0.
 *
 * Threading
 *   - A vkspec_context is used by one thread at a time: a call on a context that another thread is using
 *     returns VKSPEC_ERROR_BUSY (it never blocks or corrupts it). The exception is vkspec_cancel(), which
 *     any thread may call at any time.
 *   - Several contexts may share one vkspec_model and may be used from different threads at once; their
 *     forward passes are serialized internally (one submission at a time per model: they share the model's
 *     activations and device queue), so two generations on one model interleave step by step.
 *     Tokenizing, detokenizing and applying the chat template are read-only and run concurrently.
 *   - A model must outlive its contexts: vkspec_model_free() with live contexts (or while another thread
 *     uses the model) returns VKSPEC_ERROR_BUSY.
 *   - A handle that was freed (or never created) gets VKSPEC_ERROR_INVALID_ARGUMENT, never a crash, as long
 *     as its memory was not handed out again to a new handle.
 *
 * External device mode: vkspec_model_params.external hands vkspec the application's own Vulkan instance,
 * device and queue (a game engine's); vkspec then creates no instance or device, destroys none, and takes
 * the application's queue lock around each of its submissions.
 */
#ifndef VKSPEC_H
#define VKSPEC_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#  if defined(VKSPEC_BUILD)
#    define VKSPEC_API __declspec(dllexport)
#  elif defined(VKSPEC_SHARED)
#    define VKSPEC_API __declspec(dllimport)
#  else
#    define VKSPEC_API
#  endif
#else
#  define VKSPEC_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define VKSPEC_API_VERSION 1

typedef enum vkspec_status {
  VKSPEC_OK = 0,
  VKSPEC_ERROR_INVALID_ARGUMENT = 1, /* a null handle or pointer, a value out of range */
  VKSPEC_ERROR_LOAD = 2,             /* the model file cannot be read, is malformed or unsupported */
  VKSPEC_ERROR_DEVICE = 3,           /* no usable Vulkan device, or the device failed */
  VKSPEC_ERROR_OUT_OF_MEMORY = 4,    /* the model and context do not fit the device */
  VKSPEC_ERROR_CANCELLED = 5,        /* a progress callback or vkspec_cancel() stopped the call */
  VKSPEC_ERROR_BUSY = 6,             /* the context is in use by another thread; contexts still live */
  VKSPEC_ERROR_NOT_SUPPORTED = 7,    /* e.g. a model without a chat template */
  VKSPEC_ERROR_FAILED = 8            /* anything else; vkspec_last_error() says what */
} vkspec_status;

VKSPEC_API uint32_t vkspec_api_version(void); /* VKSPEC_API_VERSION of the library */
VKSPEC_API const char* vkspec_last_error(void);
VKSPEC_API const char* vkspec_status_name(vkspec_status s);

/* ---- devices ---- */
typedef struct vkspec_device_info {
  uint32_t index;              /* what vkspec_model_params.device takes */
  char name[256];
  char type[16];               /* "discrete", "integrated", "virtual", "CPU", "other" */
  char driver[128];
  char uuid[33];               /* hex; the same device listed twice (two drivers) shares it */
  uint32_t subgroup_size;
  uint64_t device_local_bytes;
  uint64_t max_storage_buffer_range;
  int32_t shader_float16, storage_8bit, storage_16bit, timestamps; /* 0 or 1 */
  char kernel_family[16];      /* "subgroup" or "row-per-lane" */
} vkspec_device_info;

/* Fills up to `capacity` entries; *count is the number of devices. */
VKSPEC_API vkspec_status vkspec_list_devices(vkspec_device_info* out, uint32_t capacity, uint32_t* count);

/* ---- models ---- */
typedef struct vkspec_model vkspec_model;
typedef struct vkspec_context vkspec_context;

/* The application's Vulkan objects (handles passed as pointers, so this header needs no Vulkan headers):
 * VkInstance, VkPhysicalDevice, VkDevice, VkQueue and PFN_vkGetInstanceProcAddr. The device must have been
 * created with bufferDeviceAddress (Vulkan 1.2) enabled; the optional features below are used only when the
 * application says it enabled them. All must outlive the model. */
typedef struct vkspec_external_device {
  void* instance;
  void* physical_device;
  void* device;
  uint32_t queue_family_index;          /* a family with VK_QUEUE_COMPUTE_BIT */
  void* queue;
  void (*get_instance_proc_addr)(void); /* PFN_vkGetInstanceProcAddr; NULL: the system's libvulkan */
  int32_t buffer_device_address;        /* required: 1 */
  int32_t storage_buffer_16bit, storage_buffer_8bit, shader_float16, shader_int8, subgroup_size_control;
  int32_t push_descriptor;              /* VK_KHR_push_descriptor enabled */
  /* Called around every vkQueueSubmit vkspec makes on `queue` (both or neither). */
  void (*lock_queue)(void* user);
  void (*unlock_queue)(void* user);
  void* lock_user;
} vkspec_external_device;

/* Called while weights are uploaded with the fraction done (0..1); return non-zero to cancel loading. */
typedef int (*vkspec_progress_fn)(float fraction, void* user);

typedef struct vkspec_model_params {
  int32_t device;            /* -1: VKSPEC_DEVICE, else the best device (discrete > integrated > CPU) */
  uint32_t n_ctx;            /* context length of every context on the model; 0: the model's, capped at 4096 */
  uint32_t max_contexts;     /* contexts that may exist at once (each holds KV for n_ctx tokens) */
  vkspec_progress_fn progress;
  void* progress_user;
  const vkspec_external_device* external; /* NULL: vkspec creates its own instance and device */
} vkspec_model_params;

VKSPEC_API vkspec_model_params vkspec_model_default_params(void);

typedef struct vkspec_memory_estimate {
  uint64_t weights_bytes, kv_bytes, activation_bytes, total_bytes;
  uint64_t device_bytes;     /* what the device offers (for a CPU device: the host's RAM) */
  int32_t fits;              /* total_bytes <= device_bytes */
} vkspec_memory_estimate;

/* What loading `path` with `params` would need, without loading it. */
VKSPEC_API vkspec_status vkspec_estimate_memory(const char* path, const vkspec_model_params* params,
                                                vkspec_memory_estimate* out);
VKSPEC_API vkspec_status vkspec_model_load(const char* path, const vkspec_model_params* params, vkspec_model** out);
VKSPEC_API vkspec_status vkspec_model_free(vkspec_model* model);
VKSPEC_API uint32_t vkspec_model_n_ctx(const vkspec_model* model);
VKSPEC_API uint32_t vkspec_model_n_vocab(const vkspec_model* model);

/* ---- text ---- */
/* Token ids of `text` (BOS added when add_bos and the model wants one; special-token text parsed when
 * parse_special). *n_tokens is the count; up to `capacity` ids are written. */
VKSPEC_API vkspec_status vkspec_tokenize(const vkspec_model* model, const char* text, size_t text_len, int32_t add_bos,
                                         int32_t parse_special, int32_t* tokens, size_t capacity, size_t* n_tokens);
/* The text of a token sequence (bytes as generated; invalid UTF-8 at the end is kept as is). */
VKSPEC_API vkspec_status vkspec_detokenize(const vkspec_model* model, const int32_t* tokens, size_t n_tokens,
                                           char* text, size_t capacity, size_t* len);
/* The prompt the model's chat template (tokenizer.chat_template) makes of `messages_json`: a JSON array of
 * {"role", "content"} objects or {"messages": [...], "tools": [...]}. VKSPEC_ERROR_NOT_SUPPORTED when the
 * model has no template; `template_source` (Jinja; NULL: the model's) overrides it. */
VKSPEC_API vkspec_status vkspec_apply_chat_template(const vkspec_model* model, const char* template_source,
                                                    const char* messages_json, int32_t add_generation_prompt,
                                                    char* text, size_t capacity, size_t* len);

/* ---- contexts ---- */
typedef struct vkspec_context_params {
  const char* draft_model;   /* path of a draft GGUF sharing the vocabulary, or NULL */
  int32_t draft_ngram;       /* 1: n-gram (prompt lookup) drafts instead */
  uint32_t draft_max;        /* tokens drafted per round, the most when adaptive (1..15) */
  int32_t draft_adaptive;    /* 1: K chosen per round from measured acceptance and costs */
  float temperature;         /* 0: greedy (speculation then gives exactly the plain greedy tokens) */
  int32_t top_k;             /* 0: off */
  float top_p, min_p;        /* 1 / 0: off */
  float repeat_penalty;      /* 1: off */
  int32_t repeat_last_n;
  uint64_t seed;
} vkspec_context_params;

VKSPEC_API vkspec_context_params vkspec_context_default_params(void);
VKSPEC_API vkspec_status vkspec_context_create(vkspec_model* model, const vkspec_context_params* params,
                                               vkspec_context** out);
VKSPEC_API vkspec_status vkspec_context_free(vkspec_context* ctx);

/* Called for each accepted token, in order: its id, its text piece (complete UTF-8 characters; may be
 * empty while a character is incomplete), and whether it was a verified draft. Return non-zero to stop. */
typedef int (*vkspec_token_fn)(int32_t token, const char* piece, size_t piece_len, int32_t from_draft, void* user);

typedef struct vkspec_generate_params {
  int32_t n_predict;         /* most tokens to generate; <= 0: up to the context */
  int32_t ignore_eos;        /* 1: do not stop at end-of-generation tokens */
  int32_t speculative;       /* 1: use the context's drafter, when it has one */
  vkspec_token_fn on_token;
  void* user;
} vkspec_generate_params;

VKSPEC_API vkspec_generate_params vkspec_generate_default_params(void);

/* Generates after `prompt` (token ids; e.g. from vkspec_tokenize of a templated chat). The context keeps
 * its KV cache between calls: the longest common prefix with the previous call's tokens is reused and only
 * the rest is prefilled, so a chat that sends the whole conversation each turn prefills only the new turn.
 * Returns VKSPEC_ERROR_CANCELLED when vkspec_cancel() stopped it (the tokens so far were delivered). */
VKSPEC_API vkspec_status vkspec_generate(vkspec_context* ctx, const int32_t* prompt, size_t n_prompt,
                                         const vkspec_generate_params* params);

/* The same generation a forward pass at a time, for frame loops (no worker thread needed): vkspec_begin()
 * sets it up and returns at once; each vkspec_step() runs one submission — a prompt pass of at most 16
 * tokens, one decoding step or one speculative round — delivers the tokens it produced through on_token,
 * and sets *done to 1 when the generation has ended (then metrics are ready and the context is free for the
 * next vkspec_begin/vkspec_generate). `params` (with its callback and user pointer) must stay valid until
 * then. vkspec_generate() is vkspec_begin() plus vkspec_step() until done. */
VKSPEC_API vkspec_status vkspec_begin(vkspec_context* ctx, const int32_t* prompt, size_t n_prompt,
                                      const vkspec_generate_params* params);
VKSPEC_API vkspec_status vkspec_step(vkspec_context* ctx, int32_t* done);

/* Stops the running (or next) generation of ctx within one forward pass — including during a long prefill,
 * which runs in passes of 16 tokens. Any thread, any time. */
VKSPEC_API vkspec_status vkspec_cancel(vkspec_context* ctx);

typedef struct vkspec_metrics {
  uint64_t prompt_tokens, reused_tokens, prefilled_tokens, generated_tokens;
  double prefill_seconds, decode_seconds, prefill_tokens_per_second, decode_tokens_per_second;
  /* speculation (0 without a drafter): drafts verified, drafts accepted (the last verify pass may accept
   * drafts past the generation's end, which are not delivered), verify passes */
  uint64_t drafted, accepted, verify_passes;
  double acceptance_rate;
  uint64_t host_waits;                       /* submissions after the first token */
  char stop_reason[16];                      /* "eos", "length", "context", "stopped", "cancelled" */
} vkspec_metrics;

/* The metrics of the context's last vkspec_generate. */
VKSPEC_API vkspec_status vkspec_get_metrics(const vkspec_context* ctx, vkspec_metrics* out);

#ifdef __cplusplus
}
#endif

#endif /* VKSPEC_H */
