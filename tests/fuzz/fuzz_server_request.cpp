// libFuzzer target for the server's request parsing (apps/server/server_api.h): arbitrary bytes as the body of a
// completion (first byte even) or chat completion (odd) request (with bit 3 set: Ollama's generate or chat; bit
// 2: llama-server's /tokenize or /detokenize; bit 5: embeddings, OpenAI's, or with bit 3 Ollama's /api/embed
// (even) or /api/embeddings (odd); else bit 7: llama-server's /completion), with a real vocabulary and the Llama 3.2 chat template. Every outcome
// must be a CompletionSpec (or embedding inputs) within the limits (its JSON schema, a tool call's included,
// converted to a grammar or refused with an Error) or an ApiError with a 4xx status; any other exception, a
// crash, an ASan/UBSan finding or a hang is a bug. Seeds: tests/fuzz/server-seeds (text: first byte 'P',
// even, or 'C', odd; 'H' / 'K' Ollama's generate / chat; 'D' / 'E' /tokenize / /detokenize; 'a' / 'h' / 'i'
// OpenAI's embeddings, Ollama's embed / embeddings; 0xC0 llama-server's /completion; then the body).
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "apps/server/embeddings_api.h"
#include "apps/server/llamacpp_api.h"
#include "apps/server/ollama_api.h"
#include "apps/server/server_api.h"
#include "text/prompt.h"
#include "constrain/gbnf.h"
#include "constrain/json_schema.h"

namespace {
std::string shared(const char* rel) {
  const char* root = getenv("VKSPEC_SHARED");
  return std::string(root ? root : "../shared") + "/" + rel;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vkspec;
  static const GgufFile file(shared("models/stories260K.gguf"));
  static const std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(file);
  static const ChatFormatter fmt(*tok, [] {
    std::ifstream in(shared("chat-templates/meta-llama-Llama-3.2-3B-Instruct.jinja"));
    return std::optional<std::string>(std::string(std::istreambuf_iterator<char>(in), {}));
  }());
  static const cli::ServerLimits lim = [] {
    cli::ServerLimits l;
    l.n_ctx = 512;
    l.n_vocab = tok->n_vocab();
    return l;
  }();
  // the server's encodings (apps/server/server.cpp goes through the C API, which calls the same tokenize())
  static const cli::PromptEncoder enc = [] {
    auto encode = [](std::string_view text, AddBos bos) {
      const std::vector<uint32_t> ids = tokenize(*tok, text, bos, true);
      if (ids.empty()) throw std::runtime_error("empty prompt");
      return std::vector<int32_t>(ids.begin(), ids.end());
    };
    cli::PromptEncoder e;
    e.prompt = [encode](const std::string& t) { return encode(t, AddBos::IfWanted); };
    e.chat = [encode](const std::string& t) { return encode(t, AddBos::IfWantedUnlessPresent); };
    e.render_chat = [](const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools) {
      return fmt.render(messages, true, tools.is_null() ? std::nullopt : std::optional<nlohmann::ordered_json>(tools));
    };
    return e;
  }();
  if (size == 0) return 0;
  bool chat = data[0] & 1;
  bool fit = false;   // Ollama's chat: a long conversation cut to the context (n_ctx 512 here)
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    nlohmann::ordered_json request = cli::parse_body(body, lim);
    if (data[0] & 32) {   // embeddings: every input accepted is 1..n_ctx ids of the vocabulary
      const cli::EmbedEndpoint ep = !(data[0] & 8) ? cli::EmbedEndpoint::OpenAi
                                    : chat        ? cli::EmbedEndpoint::OllamaEmbeddings
                                                  : cli::EmbedEndpoint::OllamaEmbed;
      const cli::EmbedSpec e = cli::parse_embeddings(request, ep, lim, enc, "m", 64);
      if (e.inputs.size() > lim.max_embed_inputs) abort();
      for (const auto& ids : e.inputs) {
        if (ids.empty() || ids.size() > lim.n_ctx) abort();
        for (int32_t id : ids)
          if (id < 0 || uint32_t(id) >= tok->n_vocab()) abort();
      }
      (void)cli::dump(cli::embeddings_response(e, std::vector<std::vector<float>>(e.inputs.size(), std::vector<float>(3, 0.5f)), "m", 0.1));
      return 0;
    }
    if (data[0] & 4) {   // llama-server's utilities: what they accept is in range
      if (chat) {
        for (int32_t id : cli::parse_detokenize(request, lim))
          if (id < 0 || uint32_t(id) >= tok->n_vocab()) abort();
      } else {
        (void)cli::parse_tokenize(request);
      }
      return 0;
    }
    if (data[0] & 8) {   // Ollama's API: the OpenAI body it means goes on through the same checks
      const cli::OllamaRequest o = cli::ollama_request(request, chat ? cli::OllamaEndpoint::Chat : cli::OllamaEndpoint::Generate,
                                                       true, "m");
      if (o.load_only) return 0;
      request = o.openai;
      chat = o.chat;
      fit = o.fit_messages;
    } else if (data[0] & 128) {   // llama-server's /completion: the OpenAI completion body it means
      request = cli::llamacpp_request(request, lim.n_ctx).openai;
      chat = false;
    } else {   // OpenAI's endpoints, with llama-server's fields on them
      request = cli::llamacpp_openai_extensions(request, lim.n_ctx);
    }
    const cli::CompletionSpec s = cli::parse_completion(request, chat, lim, enc, "m", fit);
    if (s.prompt.empty() || s.prompt.size() >= lim.n_ctx || s.max_tokens == 0 || s.max_tokens > lim.n_ctx ||
        s.n == 0 || s.n > lim.max_n || s.stop.size() > lim.max_stop || s.top_logprobs > lim.max_top_logprobs)
      abort();
    for (int32_t id : s.prompt)
      if (id < 0 || uint32_t(id) >= tok->n_vocab()) abort();
    // A schema (a tool call's too) becomes a grammar at submission, or is refused there with an Error (a 400).
    if (!s.json_schema.empty()) {
      try {
        (void)Gbnf::parse(json_schema_to_gbnf(nlohmann::ordered_json::parse(s.json_schema)));
      } catch (const Error&) {
      }
    }
    if (!s.grammar_trigger.empty() && s.json_schema.empty()) abort();   // a trigger holds a grammar back
  } catch (const cli::ApiError& e) {
    if (e.status < 400 || e.status >= 500) abort();
  }
  return 0;
}
