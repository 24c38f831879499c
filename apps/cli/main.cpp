// vkspec command line: devices | run | chat | apply-template | bench | tokenize | perplexity | embed | serve.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <algorithm>
#include <filesystem>

#include <CLI/CLI.hpp>

#include "cli/llama_flags.h"
#include "common/cli_common.h"
#include "platform/platform.h"

namespace {
// The default model when -m is not given: stories260K from the shared models folder next to the checkout.
std::string default_model(const std::string& argv0) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path exe = fs::canonical(vkspec::platform::utf8_path(argv0), ec);
  for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
    fs::path candidate = dir / ".." / "shared" / "models" / "stories260K.gguf";
    if (fs::exists(candidate, ec)) return vkspec::platform::utf8_string(fs::weakly_canonical(candidate, ec));
  }
  return "../shared/models/stories260K.gguf";
}

void add_prompt_options(CLI::App* c, vkspec::cli::RunOptions& o) {
  c->add_option("-p,--prompt", o.prompt, "Prompt text (escapes such as \\n processed, as llama.cpp)");
  c->add_option("-f,--file", o.prompt_file, "Read the prompt from a file (taken as it is)");
  c->add_flag("--escape", o.escape, "Process escapes (\\n, \\t, ...) in a prompt file too");
  c->add_flag("--no-escape", o.no_escape, "Take -p exactly as given");
  c->add_flag("--json", o.json, "Print JSON");
}
// The sampling transforms besides the temperature (run and bench take the same ones).
void add_sampling_options(CLI::App* c, vkspec::cli::RunOptions& o) {
  c->add_option("--top-k", o.top_k, "Top-k (0 = off)");
  c->add_option("--top-p", o.top_p, "Top-p (1 = off)");
  c->add_option("--min-p", o.min_p, "Min-p (0 = off)");
  c->add_option("--repeat-penalty", o.repeat_penalty, "Repetition penalty (1 = off)");
  c->add_option("--frequency-penalty", o.frequency_penalty, "Subtracted from a token's logit per occurrence in the window (0 = off)");
  c->add_option("--presence-penalty", o.presence_penalty, "Subtracted from the logit of each token in the window (0 = off)");
  c->add_option("--repeat-last-n", o.repeat_last_n, "Tokens the penalties look back over (-1: the whole context)");
  c->add_option_function<std::vector<std::string>>(
       "-l,--logit-bias",
       [&o](const std::vector<std::string>& all) {
         for (const std::string& v : all) {
           const auto b = vkspec::cli::parse_logit_bias(v);
           if (!b) throw CLI::ValidationError("--logit-bias", "'" + v + "' is not TOKEN+BIAS or TOKEN-BIAS (e.g. 15043+1)");
           o.bias_tokens.push_back(b->first);
           o.bias_values.push_back(b->second);
         }
       },
       "Add BIAS to TOKEN's logit before sampling (repeatable; 15043+1, 2-100)");
  c->add_flag("--json-object", o.json_object,
              "JSON mode: the output is one JSON object (llama.cpp's json.gbnf), ended only once complete "
              "(speculates with --draft ngram only)");
  c->add_option("--grammar", o.grammar, "A GBNF grammar (llama.cpp's syntax) the output follows");
  c->add_option("--grammar-file", o.grammar_file, "Read the GBNF grammar from a file");
  c->add_option("-j,--json-schema", o.json_schema, "A JSON schema the output is a value of (also -jf FILE)");
  c->add_option("--json-schema-file", o.json_schema_file, "Read the JSON schema from a file (also -jf)");
}
void add_draft_options(CLI::App* c, vkspec::cli::RunOptions& o) {
  c->add_option("--model-draft", o.draft_model, "Draft model for speculative decoding (also -md)");
  c->add_option("--draft", o.draft, "ngram: prompt lookup (with -md: lookup first, the draft model when it finds nothing)")
      ->check(CLI::IsMember({"ngram"}));
  c->add_option("--draft-max", o.draft_max, "Tokens drafted per round (K, the most when adaptive)");
  c->add_option("--draft-min", o.draft_min, "Rounds drafting fewer tokens decode plainly");
  c->add_option("--draft-p-min", o.draft_p_min, "Verify no draft after one whose top probability is below this (0: off)");
  c->add_option("--draft-policy", o.draft_policy,
                "adaptive (default): K in 0..draft-max from the measured acceptance and costs; fixed: always K")
      ->check(CLI::IsMember({"fixed", "adaptive"}));
  c->add_option("--draft-tree", o.draft_tree,
                "auto (default): token trees (several continuations, one verify pass): prompt lookup's earlier "
                "matches, and a draft model's trees (each node's draw and runner-up) on GPUs; wide: a draft model's "
                "trees of 16 nodes on every device; off: chains")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(vkspec::cli::kDraftTreeNames),
                                                     std::end(vkspec::cli::kDraftTreeNames))));
  c->add_option("--spec-sampling", o.spec_sampling,
                "How sampled drafts are verified: coupled (default): the tokens are sampling's without speculation; "
                "rejection: rejection sampling, the same distribution and more drafts kept, tokens that depend on the drafts")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(vkspec::cli::kSpecSamplingNames),
                                                     std::end(vkspec::cli::kSpecSamplingNames))));
}
void add_device_options(CLI::App* c, vkspec::cli::RunOptions& o) {
  c->add_option("--device", o.device, "Vulkan device index (see `vkspec devices`)");
  c->add_option("--ubatch", o.ubatch, "Prompt tokens per forward chunk, 1.." + std::to_string(VKSPEC_MAX_UBATCH) +
                                      " (llama.cpp's -ub; 0: the device's, 16 on CPUs, 256 on GPUs)");
}

void add_chat_options(CLI::App* c, vkspec::cli::ChatOptions& chat) {
  c->add_option("--system", chat.system, "System message (also -sys)");
  c->add_option("--chat-template", chat.template_file, "Jinja chat template file instead of the model's");
}
}  // namespace

static int run_main(const std::vector<std::string>& argv) {
  CLI::App app{"vkspec: portable Llama inference on Vulkan with lossless speculative decoding"};
  app.option_defaults()->always_capture_default();   // help shows each option's default
  app.require_subcommand(0, 1);
  bool version = false;
  app.add_flag("--version", version, "Print vkspec's version, the C API's and the Vulkan devices");
  vkspec::cli::RunOptions o;
  bool devices_json = false;
  auto* devices = app.add_subcommand("devices", "List Vulkan devices and the facts kernels rely on");
  devices->add_flag("--json", devices_json, "Print JSON");

  auto* run = app.add_subcommand("run", "Generate text from a prompt");
  run->add_option("-m,--model", o.model, "GGUF model file (default: ../shared/models/stories260K.gguf)");
  add_prompt_options(run, o);
  run->add_option("-n,--n-predict", o.n_predict, "Tokens to generate (-1: until end of generation or the context)");
  run->add_option("--temp", o.temp, "Temperature (0 = greedy)");
  add_sampling_options(run, o);
  std::string seed = "-1";
  run->add_option("-s,--seed", seed, "RNG seed (-1 = random)");
  run->add_option("--samples", o.samples, "Independent completions of the prompt, seeds S, S+1, ... (one JSON line each)")
      ->check(CLI::Range(1, 1000000));
  run->add_option("-c,--ctx", o.ctx, "Context size (0 = model's, capped at 4096)");
  run->add_option("--prompt-cache", o.prompt_cache,
                  "Session file: its KV is reused where the prompt begins with its tokens; written after the run");
  add_device_options(run, o);
  run->add_flag("--ignore-eos", o.ignore_eos, "Do not stop at end-of-generation tokens");
  add_draft_options(run, o);
  vkspec::cli::ChatOptions chat;
  run->add_flag("--chat", chat.chat, "The prompt is a user message, formatted with the model's chat template");
  add_chat_options(run, chat);

  auto* chat_cmd = app.add_subcommand("chat", "Chat with an instruct model (one message per line when stdin is not a terminal)");
  chat_cmd->add_option("-m,--model", o.model, "GGUF model file")->required();
  chat_cmd->add_option("-n,--n-predict", o.n_predict, "Most tokens per reply (default: up to the context)");
  chat_cmd->add_option("--temp", o.temp, "Temperature (0 = greedy)");
  add_sampling_options(chat_cmd, o);
  chat_cmd->add_option("-s,--seed", seed, "RNG seed (-1 = random)");
  chat_cmd->add_option("-c,--ctx", o.ctx, "Context size (0 = model's, capped at 4096)");
  add_device_options(chat_cmd, o);
  chat_cmd->add_flag("--json", o.json, "One JSON line per reply (and per /stats)");
  add_draft_options(chat_cmd, o);
  add_chat_options(chat_cmd, chat);

  auto* apply = app.add_subcommand("apply-template", "Print the prompt a chat template makes of a messages file");
  apply->add_option("-m,--model", o.model, "GGUF model (or vocabulary) file")->required();
  apply->add_option("--messages", chat.messages_file,
                    "JSON: [{\"role\": ..., \"content\": ...}, ...] or {\"messages\": [...], \"tools\": [...]}")->required();
  apply->add_flag("--no-generation-prompt", chat.no_generation_prompt, "Do not open an assistant turn at the end");
  apply->add_option("--chat-template", chat.template_file, "Jinja chat template file instead of the model's");
  apply->add_flag("--json", o.json, "Print {\"prompt\": ...}");

  vkspec::cli::BenchOptions bo;
  auto* bench = app.add_subcommand("bench", "Measure prefill and decode speed, plain and speculative (JSON with --json)");
  bench->add_option("-m,--model", o.model, "GGUF model file")->required();
  bench->add_option("-p,--n-prompt", bo.prompt_tokens, "Prompt tokens (the prompt text repeated or cut to this length; 0: as it is)");
  bench->add_option("-n,--n-gen", o.n_predict, "Tokens to generate");
  bench->add_option("-r,--reps", bo.reps, "Repetitions (medians are reported)");
  bench->add_option("-f,--file", o.prompt_file, "Prompt text (default: a built-in Python snippet)");
  bench->add_flag("--json", o.json, "Print JSON");
  bench->add_option("--temp", o.temp, "Temperature (default 0: greedy, and speculation must give plain's tokens)");
  add_sampling_options(bench, o);
  bench->add_option("-s,--seed", seed, "RNG seed when sampling");
  bench->add_option("-c,--ctx", o.ctx, "Context size");
  add_device_options(bench, o);
  add_draft_options(bench, o);
  bench->add_option("--peer", bo.peer_dir, "llama.cpp peer harness folder (peer.mjs, npm-installed) to measure alongside");
  bench->add_option("--peer-backend", bo.peer_backend, "Peer backend: false (CPU, one thread) or vulkan")
      ->check(CLI::IsMember({"false", "vulkan"}));

  auto* tokenize = app.add_subcommand("tokenize", "Print the token ids of a text");
  tokenize->add_option("-m,--model", o.model, "GGUF model or vocabulary file")->required();
  add_prompt_options(tokenize, o);
  tokenize->add_flag("--no-bos", o.no_bos, "Do not add BOS");

  vkspec::cli::PerplexityOptions po;
  auto* perplexity = app.add_subcommand("perplexity", "Perplexity of a text file, by llama.cpp's llama-perplexity method");
  perplexity->add_option("-m,--model", o.model, "GGUF model file")->required();
  perplexity->add_option("-f,--file", o.prompt_file, "Text to score")->required();
  perplexity->add_option("-c,--ctx", po.ctx, "Tokens per chunk (the second half of each is scored)")->check(CLI::Range(8, 1 << 20));
  perplexity->add_option("--chunks", po.chunks, "Score at most this many chunks (-1: all)")->check(CLI::Range(-1, 1 << 30));
  add_device_options(perplexity, o);
  perplexity->add_flag("--json", o.json, "Print JSON");

  vkspec::cli::EmbedOptions eo;
  auto* embed = app.add_subcommand("embed", "Print a text's embedding (the final hidden state, as llama.cpp's llama-embedding)");
  embed->add_option("-m,--model", o.model, "GGUF model file")->required();
  add_prompt_options(embed, o);
  embed->add_option("--pooling", eo.pooling, "last (llama.cpp's and Ollama's for a decoder model) or mean over the tokens")
      ->check(CLI::IsMember({"last", "mean"}));
  embed->add_flag("--normalize", eo.normalize, "Scale to unit length (what OpenAI's and Ollama's endpoints return)");
  embed->add_flag("--no-bos", o.no_bos, "Do not add BOS");
  embed->add_option("-c,--ctx", o.ctx, "Context size (the most tokens a text may have)");
  add_device_options(embed, o);

  vkspec::cli::ServeOptions so;
  auto* serve = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  serve->add_option("-m,--model", o.model, "GGUF model file")->required();
  serve->add_option("--host", so.host, "Address to listen on (default 127.0.0.1: this machine only)");
  serve->add_option("--port", so.port, "Port (0: any free port, printed)");
  serve->add_option("--pooling", so.pooling, "Embeddings: last (llama.cpp's and Ollama's for a decoder model) or mean")
      ->check(CLI::IsMember({"last", "mean"}));
  serve->add_option("--parallel", so.parallel, "Sequences decoded together (further requests queue)");
  serve->add_option("--prompt-cache", so.prompt_cache,
                    "Finished sequences whose KV is kept for later prompts that start the same way (a chat's next "
                    "turn); evicted when running requests need the blocks. 0: off (default: 4)")
      ->check(CLI::Range(0u, 256u));
  serve->add_option("--ctx", o.ctx, "Context per sequence (0 = model's, capped at 4096)");
  uint32_t ctx_total = 0;
  serve->add_option("-c,--ctx-size,--ctx-total", ctx_total,
                    "Context of all sequences together, divided among --parallel (llama-server's -c)");
  serve->add_option("--api-key", so.api_key, "Require 'Authorization: Bearer KEY'");
  serve->add_flag("--no-webui", so.no_webui, "No chat page at / (llama-server's flag)");
  serve->add_option("--cors-origin", so.cors_origins,
                    "A browser origin allowed to call the server besides loopback pages (repeatable; '*': any)");
  serve->add_option("--alias", so.alias, "The model's id in the API (default: the file name)");
  serve->add_option("--chat-template", so.chat_template, "Jinja chat template file instead of the model's");
  serve->add_option("--max-body", so.max_body, "Largest request body in bytes")->check(CLI::Range(size_t(1024), size_t(1) << 30));
  serve->add_option("--timeout", so.timeout_s, "Seconds a client may stall a read or write")->check(CLI::Range(1, 3600));
  serve->add_flag("--report-cache", so.report_cache,
                  "Responses count the prompt tokens taken from other requests' KV (single-user setups: on a shared "
                  "server the counts reveal how much of a prompt matches another client's)");
  add_device_options(serve, o);
  add_draft_options(serve, o);

  std::vector<std::string> args;
  try {
    std::vector<std::string> notes;
    args = vkspec::cli::translate_llama_flags({argv.begin() + 1, argv.end()}, &notes);
    for (const std::string& n : notes) fprintf(stderr, "vkspec: %s\n", n.c_str());
  } catch (const std::exception& e) {
    fprintf(stderr, "vkspec: error: %s\n", vkspec::cli::escape_controls(e.what()).c_str());
    return 1;
  }
  std::reverse(args.begin(), args.end());
  try {
    app.parse(args);
    if (!version && app.get_subcommands().empty()) throw CLI::RequiredError("A subcommand");
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (version) return vkspec::cli::cmd_version();
    if (*devices) return vkspec::cli::cmd_devices(devices_json);
    o.seed = vkspec::cli::parse_seed(seed);
    if (*run && !run->count("--model")) {
      o.model = default_model(argv[0]);
      fprintf(stderr, "vkspec: no -m given, using %s\n", o.model.c_str());
    }
    for (auto* c : {run, tokenize, embed})
      if (*c && c->count("-p") + c->count("-f") == 0) throw vkspec::cli::Error("give a prompt with -p TEXT or -f FILE");
    for (auto* c : {run, tokenize, embed})   // (bench's -p is a prompt length)
      if (c->count("-p") && c->count("-f")) throw vkspec::cli::Error("give either -p TEXT or -f FILE, not both");
    for (auto* c : {run, bench, chat_cmd, serve})
      if (c->count("--model-draft") && o.draft_model.empty()) throw vkspec::cli::Error("-md needs a draft model file");
    for (auto* c : {run, chat_cmd, apply, serve})   // an empty name must not fall back to the model's template
      if (c->count("--chat-template") && (c == serve ? so.chat_template : chat.template_file).empty())
        throw vkspec::cli::Error("--chat-template needs a template file");
    for (auto* c : {run, bench, chat_cmd}) {
      if (c->count("--grammar") + c->count("--grammar-file") + c->count("--json-object") + c->count("--json-schema") +
              c->count("--json-schema-file") > 1)
        throw vkspec::cli::Error("give one of --grammar, --grammar-file, --json-object, -j and -jf");
      if (c->count("--grammar") && o.grammar.empty()) throw vkspec::cli::Error("--grammar needs a grammar");
      if (c->count("--json-schema") && o.json_schema.empty()) throw vkspec::cli::Error("-j needs a JSON schema");
      if (c->count("--grammar-file"))
        o.grammar = vkspec::cli::read_text_file(o.grammar_file, 1u << 20, "grammar file");
      if (c->count("--json-schema-file"))
        o.json_schema = vkspec::cli::read_text_file(o.json_schema_file, 1u << 20, "JSON schema file");
    }
    if (*run && !chat.chat && (run->count("--system") || run->count("--chat-template")))
      throw vkspec::cli::Error("--system and --chat-template go with --chat");
    for (auto* c : {run, chat_cmd})   // llama.cpp's -n -1: no limit but the end of generation and the context
      if (*c && c->count("-n") && o.n_predict == -1) o.n_predict = 1 << 30;
    if (*run) return vkspec::cli::cmd_run(o, chat);
    if (*chat_cmd) {
      if (!chat_cmd->count("-n")) o.n_predict = 1 << 30;   // a reply ends at end of generation or the context
      return vkspec::cli::cmd_chat(o, chat);
    }
    if (*apply) return vkspec::cli::cmd_apply_template(o, chat);
    if (*bench) {
      if (!bench->count("--temp")) o.temp = 0.0f;
      if (!bench->count("-n")) o.n_predict = 128;
      return vkspec::cli::cmd_bench(o, bo);
    }
    if (*tokenize) return vkspec::cli::cmd_tokenize(o);
    if (*perplexity) return vkspec::cli::cmd_perplexity(o, po);
    if (*embed) return vkspec::cli::cmd_embed(o, eo);
    if (*serve) {
      if (serve->count("--ctx") && serve->count("--ctx-total")) throw vkspec::cli::Error("give --ctx (per sequence) or -c (in all), not both");
      if (serve->count("--ctx-total")) {
        if (ctx_total / std::max<uint32_t>(so.parallel, 1) < 16)
          throw vkspec::cli::Error("-c " + std::to_string(ctx_total) + " leaves fewer than 16 tokens for each of the " +
                                   std::to_string(so.parallel) + " sequences (--parallel)");
        o.ctx = int(ctx_total / std::max<uint32_t>(so.parallel, 1));
      }
      return vkspec::cli::cmd_serve(o, so);
    }
  } catch (const std::exception& e) {
    // the library escapes control characters in its messages; other exceptions (options, JSON) may quote raw input
    fprintf(stderr, "vkspec: error: %s\n", vkspec::cli::escape_controls(e.what()).c_str());
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  vkspec::platform::init_console();
  const int rc = run_main(vkspec::platform::utf8_arguments(argc, argv));
  // whatever a command printed must have reached its destination (> /dev/full, a closed pipe)
  // (when the command failed it has said why: a failed write is reported once)
  if ((fflush(stdout) != 0 || ferror(stdout)) && rc == 0) {
    fprintf(stderr, "vkspec: error: cannot write to standard output: %s\n", strerror(errno));
    return 1;
  }
  return rc;
}
