// llama.cpp's embeddings (CPU, one thread) of token sequences, for test_presets: node-llama-cpp's embedding
// context, whose vector for a decoder model is llama_get_embeddings_ith of the last token (the final hidden
// state after the output norm, not normalized). Prints {"embeddings": [[...], ...], "seconds": [...]}, one per
// sequence (seconds: the call's time, for side-by-side figures).
//   node peer_embed.mjs MODEL IDS[;IDS...]      (IDS: comma-separated token ids, BOS included)
import {createRequire} from "node:module";
const require = createRequire(process.env.VKSPEC_PEER + "/");
const {getLlama, LlamaLogLevel} = await import(require.resolve("node-llama-cpp"));
const [model, lists] = process.argv.slice(2);
process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD ??= "true";
const llama = await getLlama({gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
                              progressLogs: false, maxThreads: 1, logLevel: LlamaLogLevel.error});
const m = await llama.loadModel({modelPath: model});
const context = await m.createEmbeddingContext({contextSize: 512, threads: 1});
const embeddings = [], seconds = [];
for (const ids of lists.split(";")) {
    const t0 = performance.now();
    const e = await context.getEmbeddingFor(ids.split(",").map(Number));
    seconds.push((performance.now() - t0) / 1000);
    embeddings.push(Array.from(e.vector));
}
// (stdout is a pipe: exit only once the whole line is written, which a plain console.log would cut at 64 KiB)
await new Promise((resolve) => process.stdout.write(JSON.stringify({embeddings, seconds}) + "\n", resolve));
process.exit(0);
