// libFuzzer target for the chat-template interpreter: arbitrary bytes are parsed as a Jinja template and
// rendered with a conversation that has a system message, turns, Unicode, a tool call and tools. Any exception
// other than vkspec::Error, a crash, ASan/UBSan finding, a hang (libFuzzer's -timeout), a render past the
// limits or longer than 5 s (the limits below bound its work far under that) is a bug. Seeds:
// ../shared/chat-templates.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const vkspec::ChatInputs in = [] {
    vkspec::ChatInputs c = vkspec::parse_chat_request(R"({"messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Grüße 🌍 \"q\" \\ x"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "abc123def", "type": "function",
          "function": {"name": "f", "arguments": {"a": 1, "b": [true, null, 2.5]}}}]},
        {"role": "tool", "tool_call_id": "abc123def", "content": "{\"ok\": 1}"}, {"role": "user", "content": ""}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]})");
    c.bos_token = "<s>";
    c.eos_token = "</s>";
    return c;
  }();
  vkspec::jinja::Limits limits;   // small, so that each input finishes well inside the timeout
  limits.max_output_bytes = 1 << 20;
  limits.max_steps = 20000;
  limits.max_call_depth = 40;
  limits.max_work = 2'000'000;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const std::string out = vkspec::ChatTemplate(std::string(reinterpret_cast<const char*>(data), size), limits).apply(in);
    if (out.size() > limits.max_output_bytes) abort();
  } catch (const vkspec::Error&) {
  }
  if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(5)) abort();   // work the limits did not count
  return 0;
}
