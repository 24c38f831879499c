// llama.cpp's perplexity (CPU, one thread) by llama-perplexity's method, for test_presets: the text tokenized
// by llama.cpp (special tokens not parsed; BOS first where the vocabulary adds one), cut into CTX-token chunks
// whose first token is BOS; each chunk evaluated from an empty cache with its raw logits (node-llama-cpp's
// controlledEvaluate), and every token of its second half scored from the logits before it. Prints {"ppl": P, "tokens_scored": N, "tokens": T}.
//   node peer_perplexity.mjs MODEL TEXT_FILE CTX CHUNKS
import {createRequire} from "node:module";
import {readFileSync} from "node:fs";
const require = createRequire(process.env.VKSPEC_PEER + "/");
const {getLlama, LlamaLogLevel} = await import(require.resolve("node-llama-cpp"));
const [modelPath, textFile, ctxArg, chunksArg] = process.argv.slice(2);
const ctx = Number(ctxArg), maxChunks = Number(chunksArg);
process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD ??= "true";
const llama = await getLlama({gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
                              progressLogs: false, maxThreads: 1, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath});
const bos = model.tokens.bos;
const text = model.tokenize(readFileSync(textFile, "utf8"), false);
const tokens = model.tokens.shouldPrependBosToken ? [bos, ...text] : text;   // (llama-perplexity: BOS as the vocabulary says)
const context = await model.createContext({contextSize: ctx, batchSize: ctx, threads: 1});
const sequence = context.getSequence();
const first = Math.floor(ctx / 2);
let nll = 0, scored = 0;
const chunks = Math.min(Math.floor(tokens.length / ctx), maxChunks);
for (let c = 0; c < chunks; ++c) {
  const chunk = tokens.slice(c * ctx, (c + 1) * ctx);
  chunk[0] = bos;
  await sequence.clearHistory();
  const input = chunk.map((t, j) => (j >= first && j < ctx - 1 ? [t, {generateNext: {logits: true}}] : t));
  const out = await sequence.controlledEvaluate(input);
  for (let j = first; j < ctx - 1; ++j) {
    const logits = out[j].next.logits;
    let max = -Infinity;
    for (const v of logits.values()) max = Math.max(max, v);
    let sum = 0;
    for (const v of logits.values()) sum += Math.exp(v - max);
    nll -= logits.get(chunk[j + 1]) - max - Math.log(sum);
    ++scored;
  }
}
console.log(JSON.stringify({ppl: Math.exp(nll / scored), tokens_scored: scored, tokens: tokens.length}));
process.exit(0);
