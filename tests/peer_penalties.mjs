// llama.cpp's greedy continuation with penalties and a logit bias (node-llama-cpp, CPU, one thread), for
// test_presets: the penalty window is the last `window` tokens of prompt and continuation, as vkspec's
// --repeat-last-n. Prints the ids as JSON.
//   node peer_penalties.mjs MODEL PROMPT_IDS N FREQUENCY PRESENCE REPEAT WINDOW [TOKEN:BIAS;...]
// node-llama-cpp comes from the peer's folder ($VKSPEC_PEER), which is not this script's.
import {createRequire} from "node:module";
const require = createRequire(process.env.VKSPEC_PEER + "/");
const {getLlama, LlamaLogLevel, TokenBias} = await import(require.resolve("node-llama-cpp"));
const [model, promptIds, n, frequency, presence, repeat, window, bias] = process.argv.slice(2);
process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD ??= "true";
const llama = await getLlama({gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
                              progressLogs: false, maxThreads: 1, logLevel: LlamaLogLevel.error});
const m = await llama.loadModel({modelPath: model});
const sequence = (await m.createContext({contextSize: 512, threads: 1})).getSequence();
const prompt = promptIds.split(",").map(Number), seen = prompt.slice();
const options = {temperature: 0, topK: 1, yieldEogToken: true,
                 repeatPenalty: {punishTokens: () => seen.slice(-parseInt(window)), maxPunishTokens: parseInt(window),
                                 penalty: parseFloat(repeat), frequencyPenalty: parseFloat(frequency),
                                 presencePenalty: parseFloat(presence)}};
if (bias) {
    options.tokenBias = new TokenBias(m.tokenizer);
    for (const entry of bias.split(";")) {
        const [token, value] = entry.split(":");
        options.tokenBias.set(parseInt(token), {logit: parseFloat(value)});
    }
}
const ids = [];
const it = sequence.evaluate(prompt, options);
while (ids.length < parseInt(n)) {
    const r = await it.next();
    if (r.done) break;
    ids.push(r.value);
    seen.push(r.value);
}
console.log(JSON.stringify({ids}));
process.exit(0);
