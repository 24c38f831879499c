#!/bin/bash
# On the device machine, the whole GPU check of a session in one command. Device time is short, so the most
# important results come first and each lands in OUTDIR (and on stdout) as soon as it exists:
#   1. the device list (stops here when no NVIDIA device is found);
#   2. the 1B-shape models, written on the machine's CPUs in the background (vkspec-shape, llama.cpp's quantizer);
#   3. the core suite with the GPU's default kernel family (subgroup), validation on;
#   4. vkspec bench beside llama.cpp's Vulkan backend (bench.sh) at the 1B shape, Q4_K_M;
#   5. the rest of the suite; the pycode pair plain and speculative (draft model alone, then lookup in front,
#      then sampled at T = 0.8); Q8_0; serving at 1 and 8 streams;
#   6. serving the pycode pair at 1 and 8 streams, plain against the draft model (greedy, then T = 0.8);
#      (before 6) the Gemma 3 1B shape beside llama.cpp's Vulkan backend.
# Every log and JSON is packed into OUTDIR/results.tgz after each stage (the device tool returns at most 8 files).
#   scripts/gpu/check.sh OUTDIR       (from the repository root, after scripts/gpu/pack.sh here)
set -u
ret=$1; out=/tmp/results; logs=$out/suite; mkdir -p "$ret" $logs   # OUT gets one archive: the tool returns at most 8 files
. scripts/gpu/suite.sh
export PYTHONUNBUFFERED=1 TEST_TIMEOUT=${TEST_TIMEOUT:-150}   # test_kernels takes ~70 s on an H100 (driver compiles)
build/vkspec devices 2>&1 | tee "$out/devices.txt"; grep -qi nvidia "$out/devices.txt" ||
  { echo "no GPU device"; VK_LOADER_DEBUG=error,warn,driver build/vkspec devices 2>&1 | tail -25; exit 1; }
make_1b_models "$out/models.log" q4km:15 q8_0:7
pack() { tar czf "$ret/results.tgz" -C /tmp results; }

echo "== core suite (subgroup, validation on)"; date +%T
TESTS="test_kernels test_kernels_pass test_kernels_paths test_model test_sampler test_speculative test_draft_policy test_batch_engine test_batch_prompt_cache" \
  scripts/gpu/run_suite.sh $logs subgroup; pack
echo "== models"; date +%T; wait $models; echo "models rc=$?"
scripts/gpu/bench.sh "$out" /tmp/1b-q4km.gguf; pack
echo "== rest of the suite"; date +%T
TESTS="test_cli test_c_api test_c_api_batch test_server test_server_dialects test_chat test_gguf test_chat_template" \
  scripts/gpu/run_suite.sh $logs subgroup; pack
M=.gpu/shared/models
echo "== pycode pair"; date +%T
build/vkspec bench -m $M/pycode-target-f16.gguf -md $M/pycode-draft-f16.gguf -n 128 --reps 5 --json > "$out/pycode.json" 2>&1
build/vkspec bench -m $M/pycode-target-f16.gguf -md $M/pycode-draft-f16.gguf --draft ngram -n 128 --reps 5 --json > "$out/pycode-lookup.json" 2>&1
# sampled: the Gumbel coupling's acceptance and speed on the GPU (T = 0.8, a fixed seed)
build/vkspec bench -m $M/pycode-target-f16.gguf -md $M/pycode-draft-f16.gguf --temp 0.8 --seed 3 -n 128 --reps 5 --json > "$out/pycode-t0.8.json" 2>&1
# issue 61: the draft model's chains against its trees (auto on a GPU), rejection against coupling (over trees)
build/vkspec bench -m $M/pycode-target-f16.gguf -md $M/pycode-draft-f16.gguf --draft-tree off -n 128 --reps 5 --json > "$out/pycode-chains.json" 2>&1
build/vkspec bench -m $M/pycode-target-f16.gguf -md $M/pycode-draft-f16.gguf --temp 0.8 --seed 3 --spec-sampling rejection -n 128 --reps 5 --json > "$out/pycode-t0.8-rejection.json" 2>&1
for j in pycode pycode-chains pycode-lookup pycode-t0.8 pycode-t0.8-rejection; do
  python3 -c "import json,sys; v=json.load(open(sys.argv[1])); s=v['speculative']; print(sys.argv[2], 'plain %.0f spec %.0f tok/s x%.2f accept %.2f tokens/verify %.2f trees %d/%d' % (v['plain']['decode_tok_s'], s['decode_tok_s'], v['speedup'], s['acceptance_rate'], s['tokens_per_verify'], s['tree_rounds'], s['verify_passes']))" "$out/$j.json" $j
done
scripts/gpu/bench.sh "$out" /tmp/1b-q8_0.gguf
# issue 63: Gemma 3's pass (post norms, GeGLU, 256-wide heads, sliding-window layers) at its 1B shape, Q4_K_M
build/tests/vkspec-shape /tmp/g3-f16.gguf .gpu/shared/tokenizer-tests/ggml-vocab-llama-spm.gguf gemma3-1b f16 > "$out/g3.log" 2>&1 &&
  .gpu/llama/llama_driver --quantize /tmp/g3-f16.gguf /tmp/g3-1b-q4km.gguf 15 >> "$out/g3.log" 2>&1 &&
  scripts/gpu/bench.sh "$out" /tmp/g3-1b-q4km.gguf; pack
echo "== serving, 1B Q4_K_M"; date +%T
timeout 150 python3 scripts/serve_bench.py --vkspec build/vkspec --model /tmp/1b-q4km.gguf --streams 1,8 --n 64 --rounds 2 > "$out/serve.txt" 2>&1
tail -15 "$out/serve.txt"; date +%T; pack
echo "== serving the pycode pair, speculative"; date +%T
for t in 0 0.8; do
  timeout 100 python3 scripts/serve_bench.py --vkspec build/vkspec --model $M/pycode-target-f16.gguf --draft $M/pycode-draft-f16.gguf \
    --streams 1,8 --n 64 --rounds 1 --temperature $t > "$out/serve-pycode-$t.txt" 2>&1
  tail -8 "$out/serve-pycode-$t.txt"
done
date +%T; pack
