#!/bin/bash
# On the device machine: prefill of a ~516-token prompt at the 1B shape (Q4_K_M) with each forward chunk size
# (--ubatch 16 64 256 512), interleaved with llama.cpp's Vulkan backend on the same ids (llama_driver: one
# ubatch of the whole prompt), after the model and batch tests with the GPU's default chunk.
#   scripts/gpu/ubatch.sh OUTDIR        (from the repository root, after scripts/gpu/pack.sh here)
set -u
out=$1; mkdir -p "$out/suite"
. scripts/gpu/suite.sh > "$out/setup.log" 2>&1
export PYTHONUNBUFFERED=1
make_1b_models "$out/models.log" q4km:15
echo "== tests (subgroup, validation on)"; date +%T
TESTS="test_model test_batch_engine" TEST_TIMEOUT=120 scripts/gpu/run_suite.sh "$out/suite" subgroup
echo "== prefill by --ubatch, 1B Q4_K_M"; date +%T; wait $models; echo "models rc=$?"
m=/tmp/1b-q4km.gguf; p=/tmp/p512.txt
for i in 1 2 3 4; do cat .gpu/prompt.txt; done > $p
ids=$(build/vkspec tokenize -m $m -f $p --json | tr -d '[] \n')
for rep in 1 2; do
  for u in 16 64 256 512; do
    build/vkspec bench -m $m -p 0 -f $p -n 32 --reps 3 --ubatch $u --json > "$out/u$u.$rep.json" 2>>"$out/bench.err"
  done
  .gpu/llama/llama_driver $m "$ids" 32 3 > "$out/llama.$rep.json" 2>>"$out/bench.err"
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
for rep in (1, 2):
    l = json.load(open(f"{out}/llama.{rep}.json"))
    row = []
    for u in (16, 64, 256, 512):
        v = json.load(open(f"{out}/u{u}.{rep}.json"))
        row.append("u%d %.0f (%.2fx)" % (u, v["plain"]["prefill_tok_s"], v["plain"]["prefill_tok_s"] / l["prefill_tok_s"]))
    print("round %d, %d tokens: llama.cpp prefill %.0f decode %.0f | vkspec prefill %s | decode %.0f" % (
        rep, v["prompt_tokens"], l["prefill_tok_s"], l["decode_tok_s"], ", ".join(row), v["plain"]["decode_tok_s"]))
PY
date +%T
