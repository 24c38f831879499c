// llama.cpp's greedy continuation under a GBNF grammar (CPU, one thread), for test_presets: "json" is the
// JSON grammar node-llama-cpp ships (llama.cpp's grammars/json.gbnf), anything else a grammar file. Prints
// the ids (an end-of-generation token included) as JSON.
//   node peer_grammar.mjs MODEL PROMPT_IDS N json|GRAMMAR_FILE
// node-llama-cpp comes from the peer's folder ($VKSPEC_PEER), which is not this script's.
import {createRequire} from "node:module";
import {readFileSync} from "node:fs";
const require = createRequire(process.env.VKSPEC_PEER + "/");
const {getLlama, LlamaLogLevel, LlamaGrammarEvaluationState} = await import(require.resolve("node-llama-cpp"));
const [model, promptIds, n, which] = process.argv.slice(2);
process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD ??= "true";
const llama = await getLlama({gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
                              progressLogs: false, maxThreads: 1, logLevel: LlamaLogLevel.error});
const m = await llama.loadModel({modelPath: model});
const grammar = which === "json" ? await llama.getGrammarFor("json")
                                 : await llama.createGrammar({grammar: readFileSync(which, "utf8")});
const sequence = (await m.createContext({contextSize: 512, threads: 1})).getSequence();
const state = new LlamaGrammarEvaluationState({model: m, grammar});
const ids = [];
const it = sequence.evaluate(promptIds.split(",").map(Number),
                             {temperature: 0, topK: 1, yieldEogToken: true, grammarEvaluationState: state});
while (ids.length < parseInt(n)) {
    const r = await it.next();
    if (r.done) break;
    ids.push(r.value);
    if (m.isEogToken(r.value)) break;
}
console.log(JSON.stringify({ids}));
process.exit(0);
