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
 *   - A model must outlive its contexts and batches: vkspec_model_free() with live ones (or while another
 *     thread uses the model) returns VKSPEC_ERROR_BUSY. A batch and contexts on one model share its device
 *     queue the same way (one submission at a time).
 *   - A handle that was freed (or never created) gets VKSPEC_ERROR_INVALID_ARGUMENT, never a crash, as long
 *     as its memory was not handed out again to a new handle.
 *
 * External device mode (vkspec_device.h): vkspec_model_params.external hands vkspec the application's own
 * Vulkan instance, device and queue (a game engine's); vkspec then creates no instance or device, destroys none, and takes
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

#define VKSPEC_API_VERSION 16
#define VKSPEC_MAX_LOGIT_BIAS 1024   /* vkspec_sampling_params.n_logit_bias's bound */
#define VKSPEC_MAX_JSON_DEPTH 64     /* JSON text given to the library (messages, schemas) nests at most this deep */
#define VKSPEC_LOGIT_BIAS_BOUND 100  /* each logit bias lies in [-VKSPEC_LOGIT_BIAS_BOUND, VKSPEC_LOGIT_BIAS_BOUND] */

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

/* ---- devices: vkspec_device.h ---- */
#include "vkspec_device.h"

/* API version 9. The VKSPEC_* environment variables as the library reads them: one JSON object keyed by variable (a bad
   value is VKSPEC_ERROR_INVALID_ARGUMENT naming it). Text as vkspec_detokenize writes it. */
VKSPEC_API vkspec_status vkspec_environment_json(char* text, size_t capacity, size_t* len);

/* ---- models ---- */
typedef struct vkspec_model vkspec_model;
typedef struct vkspec_context vkspec_context;

/* Called while weights are uploaded with the fraction done (0..1); return non-zero to cancel loading. */
typedef int (*vkspec_progress_fn)(float fraction, void* user);

#define VKSPEC_MAX_UBATCH 512      /* the largest vkspec_model_params.n_ubatch */

typedef struct vkspec_model_params {
  int32_t device;            /* -1: VKSPEC_DEVICE, else the best device (discrete > integrated > CPU) */
  uint32_t n_ctx;            /* context length of every context on the model; 0: the model's, capped at 4096 */
  uint32_t max_contexts;     /* contexts (or a batch's sequences) that may exist at once */
  uint32_t kv_contexts;      /* the KV pool holds n_ctx tokens for this many of them (0: max_contexts);
                                with fewer, sequences take blocks as they grow (a vkspec_batch waits for them) */
  vkspec_progress_fn progress;
  void* progress_user;
  const vkspec_external_device* external; /* NULL: vkspec creates its own instance and device */
  int32_t vocab_only;        /* 1: only the tokenizer and chat template (no device, no weights, no contexts) */
  uint32_t n_ubatch;         /* tokens per forward chunk of a prompt (llama.cpp's ubatch), 1..VKSPEC_MAX_UBATCH; 0: the
                                device's (16 on CPU devices, 256 on GPUs). Results do not depend on it. */
  /* API version 10: the file the compiled pipelines are kept in between runs (read at load, written when the
   * model is freed; a game's own cache folder); NULL: $XDG_CACHE_HOME/vkspec (or the platform's cache
   * folder); "": none (nothing read or written). */
  const char* pipeline_cache;
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
/* The same from a GGUF file's bytes in memory (a game's asset pack; API version 10): not copied, so the
 * buffer must stay unchanged until vkspec_model_free. The model is the same as the file's. */
VKSPEC_API vkspec_status vkspec_model_load_from_memory(const void* data, size_t size, const vkspec_model_params* params,
                                                       vkspec_model** out);
/* API version 11: a GGUF read through the application's callback (a game's asset pack, an archive):
 * read(user, offset, dst, n) copies the n bytes at `offset` of the GGUF (0 <= offset, offset + n <= size)
 * into dst and returns 0, or non-zero for a read error (the load fails with VKSPEC_ERROR_LOAD). The metadata
 * is read at the start and kept; each weight is read once while loading; a context's session save or load
 * reads a few hundred KB again (the weights' fingerprint), so the callback stays valid until the model is
 * freed. It is called on the thread of the vkspec call that reads. */
typedef struct vkspec_reader {
  uint64_t size;
  int32_t (*read)(void* user, uint64_t offset, void* dst, size_t n);
  void* user;
} vkspec_reader;
VKSPEC_API vkspec_status vkspec_model_load_from_reader(const vkspec_reader* reader, const vkspec_model_params* params,
                                                       vkspec_model** out);
VKSPEC_API vkspec_status vkspec_model_free(vkspec_model* model);
VKSPEC_API uint32_t vkspec_model_n_ctx(const vkspec_model* model);
VKSPEC_API uint32_t vkspec_model_n_vocab(const vkspec_model* model);
VKSPEC_API uint32_t vkspec_model_n_embd(const vkspec_model* model); /* hidden size, an embedding's length (0: vocab_only) */

typedef struct vkspec_model_info {
  char device[256];          /* the device's name ("" for a vocab_only model) */
  char kernel_family[16];    /* "subgroup" or "row-per-lane" ("" for a vocab_only model) */
  uint32_t n_ctx, n_vocab;   /* n_ctx 0 for a vocab_only model */
  uint32_t n_ubatch;         /* prompt tokens per forward chunk (the device's default unless set; 0: vocab_only) */
  int32_t bos, eos;          /* token ids; -1: none */
  int32_t add_bos;           /* 1: the model wants BOS at the start of a prompt */
  int32_t has_chat_template; /* 1: the file has tokenizer.chat_template */
  double load_seconds;       /* reading, uploading and preparing the model */
  char architecture[32];     /* API version 12: the file's general.architecture ("llama", "qwen2") */
  char matmul_path[24];      /* API version 15: the matmuls' arithmetic ("fma", "int8dot", "coopmat",
                                "coopmat-emulated"; "" for a vocab_only model) */
} vkspec_model_info;

VKSPEC_API vkspec_status vkspec_model_get_info(const vkspec_model* model, vkspec_model_info* out);

/* ---- text ---- */
/* Token ids of `text`; *n_tokens is the count; up to `capacity` ids are written. add_bos: 0 never adds BOS,
 * VKSPEC_ADD_BOS (1) adds it when the model wants one, VKSPEC_ADD_BOS_UNLESS_PRESENT (2) also, unless the
 * text already begins with BOS's text (what a chat template's output needs). Special-token text (such as
 * "<|eot_id|>") becomes its token when parse_special. */
#define VKSPEC_ADD_BOS 1
#define VKSPEC_ADD_BOS_UNLESS_PRESENT 2
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
/* API version 9. The model's own chat template, its Jinja source as the file holds it (tokenizer.chat_template);
 * VKSPEC_ERROR_NOT_SUPPORTED when it has none. */
VKSPEC_API vkspec_status vkspec_model_chat_template(const vkspec_model* model, char* text, size_t capacity, size_t* len);

/* ---- contexts ---- */
/* How tokens are chosen; the same seed and settings give the same tokens, with or without speculation
 * (greedy or sampled: drafts change only the speed; but see spec_sampling) and whatever else shares a batch. */
typedef struct vkspec_sampling_params {
  float temperature;         /* 0: greedy */
  int32_t top_k;             /* 0: off */
  float top_p, min_p;        /* 1 / 0: off */
  float repeat_penalty;      /* 1: off */
  int32_t repeat_last_n;     /* tokens the penalties look back over; -1: the whole context */
  uint64_t seed;
  /* API version 4, llama.cpp's and OpenAI's penalties over the same window, after the repetition penalty:
   * a token's logit loses frequency_penalty per occurrence there and presence_penalty once (0: off) */
  float frequency_penalty;
  float presence_penalty;
  /* API version 4, llama.cpp's and OpenAI's logit bias, added to the logits before everything else:
   * n_logit_bias (at most VKSPEC_MAX_LOGIT_BIAS) token ids and their biases (within VKSPEC_LOGIT_BIAS_BOUND;
   * -100 bans a token in practice), duplicates adding up; copied when the parameters are used */
  const int32_t* logit_bias_tokens;
  const float* logit_bias;
  uint32_t n_logit_bias;
  /* API version 5, JSON mode (OpenAI's response_format {"type": "json_object"}; llama.cpp's
   * grammars/json.gbnf): 1 limits the text to one JSON object, which generation may end only once it is
   * complete (n_predict or the context may still cut it short). It speculates with n-gram drafts only (a
   * draft model's are chosen on the device, where the grammar is not). */
  int32_t json_object;
  /* API version 5, a GBNF grammar (llama.cpp's syntax; NULL or "": none; not with json_object): the text
   * stays a prefix of a sentence of it, and ends only where a sentence does. Copied when the parameters are
   * used; a grammar that does not parse is VKSPEC_ERROR_INVALID_ARGUMENT with the line. Speculates as JSON
   * mode does. */
  const char* grammar;
  /* API version 5, a JSON schema (text; NULL or "": none; not with json_object or grammar): the text is a
   * JSON value the schema accepts (the supported keywords: constrain/json_schema.h; any other that constrains
   * values is VKSPEC_ERROR_INVALID_ARGUMENT naming it). Run as the grammar it converts to. */
  const char* json_schema;
  /* API version 6, a lazy grammar (llama.cpp's; how function calling with tool_choice "auto" is constrained):
   * GBNF (NULL or "": none; needs `grammar` or `json_schema`). Every token is allowed until the text so far
   * is a sentence of this trigger grammar; from there the grammar holds the whole text. Leading whitespace is
   * no part of the text for either. Text that leaves the trigger's language first, or that the grammar does
   * not accept at the match, stays unconstrained. */
  const char* grammar_trigger;
  /* API version 13, how a sampled generation's drafts are verified (greedy ones are not affected):
   * VKSPEC_SPEC_SAMPLING_COUPLED: the model's own draw at each position, which a draft matches or not: the
   * tokens are exactly those of sampling without speculation. VKSPEC_SPEC_SAMPLING_REJECTION: rejection
   * sampling (a draft d kept with probability min(1, p(d) / q(d)), else a draw from the residual): the same
   * distribution and the most drafts any verification keeps, but the tokens then depend on the drafts. */
  int32_t spec_sampling;
} vkspec_sampling_params;
#define VKSPEC_SPEC_SAMPLING_COUPLED 0
#define VKSPEC_SPEC_SAMPLING_REJECTION 1

/* Speculative decoding: a draft model or n-gram (prompt lookup) drafts, verified by the model. */
typedef struct vkspec_draft_params {
  const char* model;         /* path of a draft GGUF sharing the vocabulary, or NULL */
  int32_t ngram;             /* 1: n-gram (prompt lookup) drafts; with `model` too, lookup first and the
                                draft model when the context has no match (not in a vkspec_batch) */
  uint32_t max;              /* tokens drafted per round, the most when adaptive (1..15) */
  int32_t adaptive;          /* 1: K chosen per round from measured acceptance and costs */
  uint32_t min;              /* rounds that would draft fewer tokens decode plainly (0..max) */
  float p_min;               /* a draft model's step whose top probability is below this ends the draft (0: off) */
  /* API version 13, token trees (several continuations verified in one pass) for requests without a
   * penalty or constraint; the tokens are the same (with rejection sampling, a node's children are tried in
   * turn). 1 (default, "auto"): prompt lookup's
   * rounds where earlier matches continue differently, and a draft model's trees (each node's draw and
   * runner-up, the nodes worth their verify rows) on GPUs; 2 ("wide"): a draft model's trees of 16 nodes on
   * every device; 0 ("off"): chains. */
  int32_t tree;
} vkspec_draft_params;

typedef struct vkspec_context_params {
  vkspec_draft_params draft;
  vkspec_sampling_params sampling;
} vkspec_context_params;

VKSPEC_API vkspec_context_params vkspec_context_default_params(void);
VKSPEC_API vkspec_status vkspec_context_create(vkspec_model* model, const vkspec_context_params* params,
                                               vkspec_context** out);
VKSPEC_API vkspec_status vkspec_context_free(vkspec_context* ctx);

typedef struct vkspec_context_info {
  char drafter[16];          /* "draft-model", "ngram", "ngram+model" or "" (none) */
  double load_seconds;       /* the model's and the draft model's */
  uint32_t cached_tokens;    /* tokens whose K/V the context holds (the next generation may reuse them) */
} vkspec_context_info;

VKSPEC_API vkspec_status vkspec_context_get_info(const vkspec_context* ctx, vkspec_context_info* out);
/* Empties the context's KV cache: the next generation prefills its whole prompt. */
VKSPEC_API vkspec_status vkspec_context_clear(vkspec_context* ctx);
/* API version 12. Optional, between generations (a game's loading screen): creates the pipelines of the
 * model's and the draft model's passes of every width now (drivers create each at its first use, which
 * takes a frame's time or more), so that no later call waits for one. Blocks until done; the cached
 * tokens stay (it needs a few free positions in the context: an error says how many). */
VKSPEC_API vkspec_status vkspec_context_warm_up(vkspec_context* ctx);
/* The context's cached tokens and their KV to a file (llama.cpp's state files): a context that loads it,
 * in this process or a later one, on the same model file, continues as this one would, prefilling only
 * what its next prompt adds to those tokens (a long conversation resumes without being prefilled again).
 * Load refuses a file of another model, a truncated or altered one, one longer than the context
 * (VKSPEC_ERROR_INVALID_ARGUMENT, vkspec_last_error() says which) and leaves the context as it was. Not
 * during a generation (VKSPEC_ERROR_BUSY). Since API version 8. */
VKSPEC_API vkspec_status vkspec_context_save(vkspec_context* ctx, const char* path);
VKSPEC_API vkspec_status vkspec_context_load(vkspec_context* ctx, const char* path);

/* Called for each accepted token, in order: its id, its text piece (complete UTF-8 characters; may be
 * empty while a character is incomplete), and whether it was a verified draft. Return non-zero to stop.
 * When a generation ends inside a UTF-8 sequence, one last call has token -1 and the piece U+FFFD (the
 * text stays the concatenation of the pieces; that call's return value is ignored). */
typedef int (*vkspec_token_fn)(int32_t token, const char* piece, size_t piece_len, int32_t from_draft, void* user);

typedef struct vkspec_generate_params {
  int32_t n_predict;         /* most tokens to generate; <= 0: up to the context */
  int32_t ignore_eos;        /* 1: do not stop at end-of-generation tokens */
  int32_t speculative;       /* 1: use the context's drafter, when it has one */
  /* 1: the prompt in one submission (no host wait between its passes: fastest); vkspec_cancel() is then
   * seen only after it, and vkspec_step() runs it whole. 0: passes of at most 16 tokens, one per step. */
  int32_t prefill_one_submission;
  vkspec_token_fn on_token;
  void* user;
  /* API version 10: a device-time budget per call, in microseconds (0: none), for frame loops. The prompt
   * goes in chunks (one step each) and, API version 12, each step's work is cut at its kernels' barriers and
   * released a budget's worth per call: vkspec_step_submit releases the first parts, each vkspec_step_poll
   * that finds the last release done releases the next (vkspec_step and vkspec_step_wait release them all,
   * one after the other). So one call's device work exceeds the budget by about one group of kernels at most
   * (vkspec_metrics.max_release_device_seconds, max_group_device_seconds). The steps and their tokens do
   * not change. Needs device timestamps (vkspec_device_info): without them steps go whole. */
  uint32_t max_device_us;
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

/* vkspec_step() in two halves, for a frame loop that must never block (API version 10):
 * vkspec_step_submit() records the next unit of the generation (a prompt part, a decoding step or a
 * speculative round), submits it and returns without waiting for the device (*done = 0); or, when the
 * generation has ended, submits nothing and sets *done = 1 (metrics ready, as vkspec_step's end).
 * vkspec_step_poll() looks without waiting, vkspec_step_wait() waits up to timeout_ns: *ready = 1 once the
 * device has finished the unit and its tokens have gone through on_token; then submit the next. on_token
 * runs on the thread that calls these functions, inside them. The tokens are exactly vkspec_step's.
 * A second submit before the unit is collected is VKSPEC_ERROR_BUSY; so is a submit while another context
 * of the same model has a unit in flight (collect that one first: they share the model's buffers).
 * vkspec_step() collects a submitted unit; vkspec_context_free() waits for it. The host work of each call
 * is the recording or the commit of one unit; no call waits for the device but vkspec_step_wait. */
VKSPEC_API vkspec_status vkspec_step_submit(vkspec_context* ctx, int32_t* done);
VKSPEC_API vkspec_status vkspec_step_poll(vkspec_context* ctx, int32_t* ready);
VKSPEC_API vkspec_status vkspec_step_wait(vkspec_context* ctx, uint64_t timeout_ns, int32_t* ready);

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
  uint64_t dispatches;                       /* compute dispatches after the first token */
  double device_seconds;                     /* device time of those submissions (0 without timestamps) */
  uint64_t round_tokens;                     /* tokens the speculative rounds produced (per verify pass:
                                                round_tokens / verify_passes) */
  uint64_t queue_submissions;                /* command buffers submitted after the first token (API version
                                                3): host_waits on CPU devices, a step's parts on GPUs */
  double max_step_device_seconds;            /* the device time of the generation's costliest step, its
                                                prompt's included (API version 10; 0 without timestamps) */
  /* API version 11: of prefill_seconds and decode_seconds, the time spent creating pipelines (the driver
   * compiling shaders: a first run's first passes; 0 once the process has them) */
  double prefill_pipeline_seconds, decode_pipeline_seconds;
  /* API version 12, with max_device_us: a step's work is cut at its kernels' barriers into parts and released
   * a budget's worth per call (vkspec_step_submit, then each vkspec_step_poll that finds the last release
   * done): the device time of the costliest release, and of the costliest group of kernels between two
   * barriers, which is how much a release may exceed the budget (0 without a budget or timestamps) */
  double max_release_device_seconds, max_group_device_seconds;
  uint64_t tree_rounds;                      /* API version 13: verify passes over a token tree (of verify_passes) */
  /* API version 13, per draft position d + 1 (a tree's depth d + 1): verify passes that verified a draft
   * there, and those that accepted one there (acceptance at that depth: accepted / drafted) */
  uint64_t drafted_at_depth[16], accepted_at_depth[16];
} vkspec_metrics;

/* The metrics of the context's last vkspec_generate. */
VKSPEC_API vkspec_status vkspec_get_metrics(const vkspec_context* ctx, vkspec_metrics* out);

/* ---- continuous batching: many requests decoded together (a server's engine) ----
 * A batch advances all its requests one step at a time, one submission per step: every running sequence's
 * decoding row (or its speculative round) and as much prefill as the step holds, in one forward pass. Every
 * kernel is batch-invariant: a request's tokens do not depend on what else is in the batch. A request that
 * shares a prompt prefix with a running (or recently finished, with cached_sequences) sequence shares its
 * KV blocks instead of prefilling them again. A request waits in the queue until KV blocks for its longest
 * possible length are free; a running one never runs out.
 * Threads: vkspec_batch_submit(), vkspec_batch_cancel(), vkspec_batch_get_metrics() and vkspec_batch_stop()
 * from any thread; vkspec_batch_step() or vkspec_batch_run() on one thread, where the callbacks run. */
typedef struct vkspec_batch vkspec_batch;

typedef struct vkspec_batch_params {
  uint32_t parallel;           /* sequences decoded together (1..64) */
  uint32_t cached_sequences;   /* finished sequences kept as a prompt cache (0: none); the model needs
                                  max_contexts >= parallel + cached_sequences */
  vkspec_draft_params draft;   /* a draft model is loaded with `parallel` sequences */
} vkspec_batch_params;

VKSPEC_API vkspec_batch_params vkspec_batch_default_params(void);

typedef struct vkspec_request_result {
  char stop_reason[16];        /* "eos", "length", "context", "stopped", "cancelled", "error" (an embedding: "embedded") */
  char error[256];             /* with "error": what failed */
  uint32_t prompt_tokens, prefilled_tokens, shared_tokens, completion_tokens;
  int32_t speculative;
  uint64_t drafted, accepted, verify_passes, round_tokens;
  double queued_seconds, prefill_seconds, decode_seconds;   /* admission wait, first token, the rest */
  uint64_t tree_rounds;        /* API version 13: verify passes over a token tree */
} vkspec_request_result;

/* Each accepted token of request `id`, in order, as vkspec_token_fn (token -1: the U+FFFD of an unfinished
 * UTF-8 sequence at the end), with its logits row when the request asked for them (else NULL). Non-zero
 * ends the request ("stopped"). */
typedef int (*vkspec_request_token_fn)(uint64_t id, int32_t token, const char* piece, size_t piece_len,
                                       int32_t from_draft, const float* logits, uint32_t n_vocab, void* user);
/* Once per request, last. */
typedef void (*vkspec_request_done_fn)(uint64_t id, const vkspec_request_result* result, void* user);

typedef struct vkspec_request_params {
  vkspec_sampling_params sampling;
  uint32_t max_tokens;         /* 1..n_ctx */
  int32_t ignore_eos;
  int32_t speculative;         /* 1: with the batch's drafter, when it has one */
  int32_t logits;              /* 1: each token's logits row to on_token (no speculation then) */
  vkspec_request_token_fn on_token;
  vkspec_request_done_fn on_done;
  void* user;
  int32_t draft_tree;          /* API version 13: -1 (default): the batch's vkspec_draft_params.tree; else its values */
} vkspec_request_params;

VKSPEC_API vkspec_request_params vkspec_request_default_params(void);

typedef struct vkspec_batch_metrics {
  uint64_t requests, requests_done, prompt_tokens, prefilled_tokens, shared_tokens, generated_tokens;
  uint64_t drafted, accepted, steps, step_rows, kv_blocks_allocated, cache_evictions;
  uint32_t active, queued, kv_blocks_in_use, kv_blocks_total, parallel, cached_sequences;
  uint64_t draft_kv_blocks_allocated;          /* the draft model's pool (API version 3; 0 without one) */
  uint32_t draft_kv_blocks_in_use, draft_kv_blocks_total;
} vkspec_batch_metrics;

VKSPEC_API vkspec_status vkspec_batch_create(vkspec_model* model, const vkspec_batch_params* params,
                                             vkspec_batch** out);
/* Queues a request (prompt: 1..n_ctx-1 token ids); *id names it in callbacks and vkspec_batch_cancel. A
 * prompt that could never run (longer than the context) is VKSPEC_ERROR_INVALID_ARGUMENT. */
VKSPEC_API vkspec_status vkspec_batch_submit(vkspec_batch* batch, const int32_t* prompt, size_t n_prompt,
                                             const vkspec_request_params* params, uint64_t* id);
/* Ends request `id` at the next step ("cancelled"); an id that has ended already is not an error. */
VKSPEC_API vkspec_status vkspec_batch_cancel(vkspec_batch* batch, uint64_t id);
/* Optional, before the first request, on the thread that will step the batch: creates the pipelines of
 * the model's and the draft model's forward passes of every width and of the sampling kernel now (drivers
 * create each at its first use, which is slow), so that no step of a
 * request waits for one; a server calls it while it reports that it is loading. Refused while requests
 * run. */
VKSPEC_API vkspec_status vkspec_batch_warm_up(vkspec_batch* batch);
/* One step when there is work; *worked = 0 when there was none. */
VKSPEC_API vkspec_status vkspec_batch_step(vkspec_batch* batch, int32_t* worked);
/* vkspec_batch_step() in two halves (API version 10), as vkspec_step_submit / poll / wait for a context:
 * submit admits, plans, records and submits the step's pass without waiting (*in_flight = 1: collect it
 * before the next submit) or finds no pass to run (*in_flight = 0; *worked = 0 when there was nothing to do);
 * poll looks without waiting, wait waits up to timeout_ns: *ready = 1 once the pass is committed (its tokens
 * went through the callbacks, on this thread). An embedding request's part runs, and is waited for, inside
 * submit. vkspec_batch_step() collects a submitted pass. */
VKSPEC_API vkspec_status vkspec_batch_step_submit(vkspec_batch* batch, int32_t* in_flight, int32_t* worked);
VKSPEC_API vkspec_status vkspec_batch_step_poll(vkspec_batch* batch, int32_t* ready);
VKSPEC_API vkspec_status vkspec_batch_step_wait(vkspec_batch* batch, uint64_t timeout_ns, int32_t* ready);
/* Steps until vkspec_batch_stop(), sleeping while idle. */
VKSPEC_API vkspec_status vkspec_batch_run(vkspec_batch* batch);
VKSPEC_API vkspec_status vkspec_batch_stop(vkspec_batch* batch);
/* Once nothing steps the batch any more: every running and queued request ends ("cancelled", on_done on
 * this thread) and later submissions are refused. */
VKSPEC_API vkspec_status vkspec_batch_shutdown(vkspec_batch* batch);
VKSPEC_API vkspec_status vkspec_batch_get_metrics(const vkspec_batch* batch, vkspec_batch_metrics* out);
/* Shuts down (as above) and frees; no other call on the batch may be running or follow. */
VKSPEC_API vkspec_status vkspec_batch_free(vkspec_batch* batch);

/* ---- scoring (perplexity) ---- */
/* The log-probability (natural log) the model gives each of tokens[first..n_tokens-1] after the tokens
 * before it: logprobs[i - first] = log p(tokens[i] | tokens[0..i-1]), 1 <= first < n_tokens <= n_ctx.
 * Evaluated from an empty cache (what the context held is dropped; afterwards it holds tokens[0..n-2]).
 * vkspec_cancel() stops it between forward passes (VKSPEC_ERROR_CANCELLED). */
VKSPEC_API vkspec_status vkspec_score(vkspec_context* ctx, const int32_t* tokens, size_t n_tokens, size_t first,
                                      double* logprobs);

/* ---- embeddings (since version 7) ---- */
/* pooling: one of these (an int32_t in the calls, so that any value a caller passes is defined) */
typedef enum vkspec_pooling {
  VKSPEC_POOLING_LAST = 0,   /* the last token's (llama.cpp's and Ollama's for a decoder model: it has seen the text) */
  VKSPEC_POOLING_MEAN = 1    /* the mean over the tokens */
} vkspec_pooling;
/* The embedding of tokens[0..n_tokens-1]: the final hidden state after the output norm (what llama.cpp calls
 * embeddings), pooled; normalize 1 scales it to unit Euclidean length (what OpenAI's and Ollama's embeddings
 * endpoints return). out holds capacity floats, at least vkspec_model_n_embd(). 1 <= n_tokens <= n_ctx;
 * evaluated from an empty cache (what the context held is dropped; afterwards it holds the tokens). */
VKSPEC_API vkspec_status vkspec_embed(vkspec_context* ctx, const int32_t* tokens, size_t n_tokens, int32_t pooling,
                                      int32_t normalize, float* out, size_t capacity);
/* The same in a batch: queued and admitted as a request (a sequence and its tokens' KV blocks), run on the
 * stepping thread in parts of at most a step's rows, one before each step's pass (the generations beside it
 * go on meanwhile; a cancel takes effect between parts). on_embedding gets the vector (n_embd floats, valid
 * during the call), then on_done ("embedded"; "cancelled", "error"); both on the stepping thread. 1 <= n_tokens
 * <= n_ctx; *id as vkspec_batch_submit's (vkspec_batch_cancel works on it). */
typedef void (*vkspec_embedding_fn)(uint64_t id, const float* embedding, uint32_t n_embd, void* user);
VKSPEC_API vkspec_status vkspec_batch_embed(vkspec_batch* batch, const int32_t* tokens, size_t n_tokens, int32_t pooling,
                                            int32_t normalize, vkspec_embedding_fn on_embedding, vkspec_request_done_fn on_done,
                                            void* user, uint64_t* id);

#ifdef __cplusplus
}
#endif

#endif /* VKSPEC_H */
