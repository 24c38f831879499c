// llama.cpp's raw logits (CPU, one thread) after a token sequence, for scripts/bench/families.sh: the logit of
// each token asked for and the largest one. Prints {"max": L, "logits": {"ID": L, ...}}.
//   node peer_logits.mjs MODEL IDS TOKENS     (IDS: the sequence, BOS included; TOKENS: ids to report; comma-separated)
import {createRequire} from "node:module";
const require = createRequire(process.env.VKSPEC_PEER + "/");
const {getLlama, LlamaLogLevel} = await import(require.resolve("node-llama-cpp"));
const [modelPath, idsArg, tokensArg] = process.argv.slice(2);
const ids = idsArg.split(",").map(Number), asked = tokensArg.split(",").map(Number);
process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD ??= "true";
const llama = await getLlama({gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
                              progressLogs: false, maxThreads: 1, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({contextSize: Math.max(256, ids.length + 1), threads: 1});
const out = await context.getSequence().controlledEvaluate(
    ids.map((t, j) => (j === ids.length - 1 ? [t, {generateNext: {logits: true}}] : t)));
const logits = out[ids.length - 1].next.logits;
let max = -Infinity;
for (const v of logits.values()) max = Math.max(max, v);
console.log(JSON.stringify({max, logits: Object.fromEntries(asked.map((t) => [t, logits.get(t)]))}));
process.exit(0);
