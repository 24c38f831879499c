// The official `ollama` npm client (ollama-js) against `vkspec serve` (tests/test_server.cpp runs it):
//   node ollama_client.mjs NODE_MODULES_DIR HOST MODEL
// Prints one JSON object with what each call returned; exits non-zero when a call throws unexpectedly.
import { createRequire } from "node:module";
import path from "node:path";

const [modules, host, model] = process.argv.slice(2);
const require = createRequire(path.join(modules, "node_modules", "index.js"));
const { Ollama } = require("ollama");
const ollama = new Ollama({ host });
const greedy = { temperature: 0, repeat_penalty: 1, num_predict: 12 };

const out = {};
out.version = (await ollama.version()).version;
out.tags = (await ollama.list()).models.map((m) => m.name);
const shown = await ollama.show({ model });
out.show = { has_template: typeof shown.template === "string" && shown.template.length > 0, capabilities: shown.capabilities };

const raw = await ollama.generate({ model, prompt: "def fibonacci(n):\n", raw: true, options: greedy });
out.generate_raw = { response: raw.response, done: raw.done, done_reason: raw.done_reason, eval_count: raw.eval_count,
                     prompt_eval_count: raw.prompt_eval_count };

let streamed = "", parts = 0, last = null;
for await (const part of await ollama.generate({ model, prompt: "def fibonacci(n):\n", raw: true, stream: true, options: greedy })) {
  streamed += part.response;
  parts++;
  last = part;
}
out.generate_stream = { response: streamed, parts, done: last.done, eval_count: last.eval_count };

const messages = [{ role: "system", content: "You write Python." }, { role: "user", content: "Sort a list." }];
const chat = await ollama.chat({ model, messages, options: greedy });
out.chat = { role: chat.message.role, content: chat.message.content, done_reason: chat.done_reason };
let chatStreamed = "";
for await (const part of await ollama.chat({ model, messages, options: greedy, stream: true })) chatStreamed += part.message.content;
out.chat_stream = { content: chatStreamed };

const json = await ollama.chat({ model, messages: [{ role: "user", content: "A config." }], format: "json",
                                 options: { ...greedy, num_predict: 200 } });
out.json = { content: json.message.content, done_reason: json.done_reason };

// a conversation with a tool call and its result (Ollama's shapes: arguments as an object, tool_name)
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
const turn = await ollama.chat({ model, tools, options: { ...greedy, num_predict: 4 }, messages: [
  { role: "user", content: "Weather in Paris?" },
  { role: "assistant", content: "", tool_calls: [{ function: { name: "get_weather", arguments: { city: "Paris" } } }] },
  { role: "tool", content: "21 C", tool_name: "get_weather" }] });
out.tool_turn = { content: turn.message.content, done: turn.done };

const embed = await ollama.embed({ model, input: ["def add(a, b): return a + b", "hello"] });
out.embed = { count: embed.embeddings.length, first: embed.embeddings[0], prompt_eval_count: embed.prompt_eval_count };
out.embeddings = { first: (await ollama.embeddings({ model, prompt: "def add(a, b): return a + b" })).embedding };

try {
  await ollama.generate({ model: "no-such-model", prompt: "x" , stream: false});
  out.unknown_model = "accepted";
} catch (e) {
  out.unknown_model = { status: e.status_code ?? null, error: e.error ?? String(e) };
}
console.log(JSON.stringify(out));
