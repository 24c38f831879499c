// The official `openai` npm client against `vkspec serve` (tests/test_server.cpp runs it):
//   node openai_client.mjs NODE_MODULES_DIR BASE_URL MODEL
// Prints one JSON object with what each call returned; exits non-zero when a call throws.
import { createRequire } from "node:module";
import path from "node:path";

const [modules, baseURL, model] = process.argv.slice(2);
const require = createRequire(path.join(modules, "node_modules", "index.js"));
const OpenAI = require("openai").default ?? require("openai");
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 120000 });

const out = {};
const completion = await client.completions.create({ model, prompt: "def fibonacci(n):\n", max_tokens: 12, temperature: 0 });
out.completion = { text: completion.choices[0].text, finish_reason: completion.choices[0].finish_reason, usage: completion.usage };

const messages = [{ role: "system", content: "You write Python." }, { role: "user", content: "Sort a list." }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0 });
out.chat = { content: chat.choices[0].message.content, role: chat.choices[0].message.role, finish_reason: chat.choices[0].finish_reason };

const stream = await client.chat.completions.create({
  model, messages, max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let streamed = "", chunks = 0, usage = null, finish = null;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    if (c.delta?.content) streamed += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
}
out.stream = { content: streamed, chunks, usage, finish_reason: finish };

const three = await client.completions.create({ model, prompt: "import ", max_tokens: 6, temperature: 0.9, n: 3, seed: 7 });
out.n3 = { count: three.choices.length, indexes: three.choices.map((c) => c.index).sort(), texts: three.choices.map((c) => c.text) };

// Function calling: a forced call, the same call through the SDK's stream helper (which assembles tool-call
// deltas and checks their shape), and the next turn with the call and its result in the conversation.
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather in a city",
  parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"] } } }];
const ask = [{ role: "user", content: "Weather in Paris?" }];
const called = await client.chat.completions.create({ model, messages: ask, tools, tool_choice: "required", max_tokens: 200, temperature: 0 });
out.tool = { finish_reason: called.choices[0].finish_reason, message: called.choices[0].message };
const toolStream = client.chat.completions.stream({ model, messages: ask, tools, tool_choice: "required", max_tokens: 200, temperature: 0 });
const final = await toolStream.finalChatCompletion();
out.tool_stream = { finish_reason: final.choices[0].finish_reason, tool_calls: final.choices[0].message.tool_calls };
const call = called.choices[0].message.tool_calls?.[0];
if (call) {
  const next = await client.chat.completions.create({ model, tools, max_tokens: 4, temperature: 0, tool_choice: "none",
    messages: [...ask, called.choices[0].message, { role: "tool", tool_call_id: call.id, content: "21 C, sunny" }] });
  out.tool_turn = { finish_reason: next.choices[0].finish_reason, content: next.choices[0].message.content };
}

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

try {
  await client.completions.create({ model: "no-such-model", prompt: "x", max_tokens: 1 });
  out.unknown_model = "accepted";
} catch (e) {
  out.unknown_model = { status: e.status, code: e.code ?? e.error?.code ?? null };
}
// Embeddings: the SDK asks for base64 unless told otherwise, and decodes it
const emb = await client.embeddings.create({ model, input: ["def add(a, b): return a + b", "hello"] });
out.embeddings = { count: emb.data.length, indexes: emb.data.map((d) => d.index), first: Array.from(emb.data[0].embedding),
                   usage: emb.usage };
console.log(JSON.stringify(out));
