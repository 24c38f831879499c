// Text input and output and the library's handles, shared by the subcommands (apps/common/cli_common.h).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/cli_common.h"
#include "platform/platform.h"

namespace vkspec::cli {

std::string escape_controls(const std::string& s) {
  std::string out;
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      char esc[8];
      snprintf(esc, sizeof esc, "\\x%02x", c);
      out += esc;
    } else {
      out += ch;
    }
  }
  return out;
}

std::string process_escapes(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) { out += s[i]; continue; }
    switch (s[++i]) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '"': out += '"'; break;
      case '\'': out += '\''; break;
      case '0': out += '\0'; break;
      default: out += '\\'; out += s[i];
    }
  }
  return out;
}

std::string read_text_file(const std::string& path, uint64_t max_bytes, const char* what) {
  // The type is checked before opening: a FIFO or a device (/dev/zero) would block or never end.
  const platform::FileInfo st = platform::file_info(path);
  if (st.type == platform::FileType::Missing) throw Error(std::string("cannot read ") + what + " '" + path + "': no such file");
  if (st.type != platform::FileType::Regular) throw Error(std::string(what) + " '" + path + "' is not a regular file");
  if (st.size > max_bytes)
    throw Error(std::string(what) + " '" + path + "' is " + std::to_string(st.size) + " bytes; at most " +
                std::to_string(max_bytes) + " are read" + (std::string(what) == "prompt file" && max_bytes != kMaxTextBytes ? " for this context (--ctx)" : ""));
  std::ifstream in(platform::utf8_path(path), std::ios::binary);
  if (!in) throw Error(std::string("cannot read ") + what + " '" + path + "': " + strerror(errno));
  std::string text(size_t(st.size), '\0');
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(in.gcount()));   // a file that shrank meanwhile: what was there
  return text;
}

std::string read_prompt(const RunOptions& o, uint64_t max_bytes) {
  std::string text = o.prompt;
  if (!o.prompt_file.empty()) text = read_text_file(o.prompt_file, max_bytes, "prompt file");
  const bool escape = o.prompt_file.empty() ? !o.no_escape : o.escape;
  return escape ? process_escapes(text) : text;
}

std::optional<uint64_t> parse_seed(const std::string& text) {
  if (text == "-1") return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = strtoull(text.c_str(), &end, 10);
  if (text.empty() || text[0] == '-' || text[0] == '+' || *end || errno == ERANGE)
    throw Error("--seed must be -1 (random) or an integer in 0..18446744073709551615, got '" + text + "'");
  return uint64_t(v);
}

std::optional<std::pair<int32_t, float>> parse_logit_bias(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  if (i == 0 || i > 9 || i + 1 >= text.size() || (text[i] != '+' && text[i] != '-')) return std::nullopt;
  const std::string magnitude = text.substr(i + 1);
  if (magnitude[0] == '+' || magnitude[0] == '-') return std::nullopt;   // one sign, the separator
  errno = 0;
  char* end = nullptr;
  const float v = strtof(magnitude.c_str(), &end);
  if (*end || errno == ERANGE) return std::nullopt;
  return std::make_pair(int32_t(std::stol(text.substr(0, i))), text[i] == '-' ? -v : v);
}

void write_stdout(const std::string& s) {
  if (s.empty()) return;
  if (fwrite(s.data(), 1, s.size(), stdout) != s.size() || fflush(stdout) != 0)
    throw Error(std::string("cannot write to standard output: ") + strerror(errno));
}

namespace {
int progress_bar(float fraction, void*) {
  static int last = -1;
  const int pct = int(fraction * 100.0f);
  if (pct != last) {
    last = pct;
    fprintf(stderr, "\rloading weights [%-40.*s] %3d%%%s", pct * 40 / 100, "########################################", pct,
            pct == 100 ? "\n" : "");
  }
  return 0;
}
}  // namespace

api::Model load_model(const RunOptions& o, uint32_t max_contexts) {
  if (o.ctx < 0) throw Error("--ctx must be positive");
  if (o.device < -1) throw Error("--device must be a device index (0, 1, ...; see `vkspec devices`)");
  vkspec_model_params p = vkspec_model_default_params();
  p.device = o.device;
  p.n_ctx = uint32_t(o.ctx);
  if (o.ubatch < 0 || o.ubatch > VKSPEC_MAX_UBATCH)
    throw Error("--ubatch must be 1.." + std::to_string(VKSPEC_MAX_UBATCH) + " (0: the device's)");
  p.n_ubatch = uint32_t(o.ubatch);
  p.max_contexts = max_contexts;
  if (platform::is_terminal(platform::Stream::Err) && !o.json) p.progress = progress_bar;
  return api::Model(o.model, p);
}

vkspec_draft_params draft_params(const RunOptions& o) {
  vkspec_draft_params d = vkspec_context_default_params().draft;
  d.model = o.draft_model.empty() ? nullptr : o.draft_model.c_str();
  d.ngram = o.draft == "ngram";
  // out of range stays out of range (the library names the flag): negative values are not wrapped
  d.max = uint32_t(std::max(o.draft_max, 0));
  d.min = o.draft_min < 0 ? 1000u : uint32_t(o.draft_min);
  d.p_min = o.draft_p_min;
  d.adaptive = o.draft_policy == "adaptive";
  d.tree = draft_tree_value(o.draft_tree);   // (another name cannot pass the flag's check)
  return d;
}

std::string drafter_name(const RunOptions& o) {
  return o.draft_model.empty() ? o.draft : o.draft.empty() ? "draft-model" : "ngram+model";
}

vkspec_sampling_params sampling_params(const RunOptions& o, uint64_t seed) {
  vkspec_sampling_params s = vkspec_context_default_params().sampling;   // (fields the CLI does not set: defaults)
  s.temperature = o.temp;
  s.top_k = o.top_k;
  s.top_p = o.top_p;
  s.min_p = o.min_p;
  s.repeat_penalty = o.repeat_penalty;
  s.repeat_last_n = o.repeat_last_n;
  s.seed = seed;
  s.frequency_penalty = o.frequency_penalty;
  s.presence_penalty = o.presence_penalty;
  s.logit_bias_tokens = o.bias_tokens.data();   // o outlives the parameters' use
  s.logit_bias = o.bias_values.data();
  s.n_logit_bias = uint32_t(o.bias_tokens.size());
  s.json_object = o.json_object ? 1 : 0;
  s.grammar = o.grammar.empty() ? nullptr : o.grammar.c_str();   // (--grammar-file read into it by then)
  s.json_schema = o.json_schema.empty() ? nullptr : o.json_schema.c_str();   // (and -jf into this)
  s.spec_sampling = spec_sampling_value(o.spec_sampling);   // (-1, refused by the library, cannot pass the flag's check)
  return s;
}

vkspec_context_params context_params(const RunOptions& o, uint64_t seed) {
  vkspec_context_params p = vkspec_context_default_params();
  p.draft = draft_params(o);
  p.sampling = sampling_params(o, seed);
  return p;
}

void warn_if_double_bos(const api::Model& m, const std::vector<int32_t>& ids) {
  const vkspec_model_info& info = m.info();
  if (info.add_bos && ids.size() >= 2 && ids[0] == info.bos && ids[1] == info.bos)   // as llama.cpp
    fprintf(stderr, "vkspec: warning: the prompt starts with a BOS token and the model adds one too: it now starts "
                    "with two (leave BOS out of the prompt text)\n");
}

std::vector<int32_t> encode_prompt(const api::Model& m, const std::string& text) {
  const std::vector<int32_t> ids = m.tokenize(text, VKSPEC_ADD_BOS, true);
  if (ids.empty()) throw Error("the prompt is empty and the model adds no BOS token");
  warn_if_double_bos(m, ids);
  return ids;
}

std::vector<int32_t> encode_chat(const api::Model& m, const std::string& text) {
  std::vector<int32_t> ids = m.tokenize(text, VKSPEC_ADD_BOS_UNLESS_PRESENT, true);
  if (ids.empty()) throw Error("the chat template rendered an empty prompt");
  return ids;
}

std::optional<std::string> chat_template_source(const api::Model& m, const std::string& template_file) {
  if (!template_file.empty()) return read_text_file(template_file, 1u << 20, "chat template file");
  if (!m.info().has_chat_template)
    throw Error("the model has no chat template (tokenizer.chat_template); give one with --chat-template FILE");
  return std::nullopt;
}

SpecTotals& SpecTotals::operator+=(const vkspec_metrics& m) {
  drafted += m.drafted, accepted += m.accepted, verify_passes += m.verify_passes, round_tokens += m.round_tokens;
  tree_rounds += m.tree_rounds;
  for (size_t d = 0; d < std::size(drafted_at); ++d) drafted_at[d] += m.drafted_at_depth[d], accepted_at[d] += m.accepted_at_depth[d];
  return *this;
}

nlohmann::json speculative_json(const RunOptions& o, const std::string& drafter, const SpecTotals& s) {
  nlohmann::json by_depth = nlohmann::json::array();   // acceptance at draft depth 1, 2, ... (while drafted)
  for (size_t d = 0; d < std::size(s.drafted_at) && s.drafted_at[d]; ++d)
    by_depth.push_back(double(s.accepted_at[d]) / double(s.drafted_at[d]));
  return {{"drafter", drafter}, {"acceptance_by_depth", by_depth}, {"draft_max", o.draft_max}, {"draft_min", o.draft_min},
          {"draft_p_min", o.draft_p_min}, {"draft_policy", o.draft_policy == "adaptive" ? "adaptive" : "fixed"},
          {"spec_sampling", o.spec_sampling}, {"draft_tree", o.draft_tree}, {"tree_rounds", s.tree_rounds},
          {"drafted", s.drafted}, {"accepted", s.accepted}, {"acceptance_rate", s.acceptance_rate()},
          {"tokens_per_verify", s.tokens_per_verify()}, {"verify_passes", s.verify_passes},
          // drafts (a tree's nodes) per verify pass: how wide the passes were
          {"drafted_per_verify", s.verify_passes ? double(s.drafted) / double(s.verify_passes) : 0.0}};
}

std::string cli_stop_reason(const char* library_reason) {
  const std::string r = library_reason;
  return r == "stopped" ? "interrupted" : r;
}

}  // namespace vkspec::cli
