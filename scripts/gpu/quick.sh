#!/bin/bash
# On the device machine: the short check after a kernel change (about 3 minutes on an H200), most important
# first. The subgroup family's kernel tests, the model's bit-for-bit prefill tests and the device sampler's
# batched-rows tests (5 times: one failed in 9 of 11 repetitions on an H200 before c1b95b0) with validation on; then
# bench.sh at the 1B shape in Q4_K_M beside llama.cpp (129-token prompt) and the prefill of a 513-token prompt
# in the GPU's default chunks.
#   scripts/gpu/quick.sh OUTDIR        (from the repository root, after scripts/gpu/pack.sh here)
set -u
ret=$1; out=/tmp/results; mkdir -p "$ret" $out/suite
. scripts/gpu/suite.sh > "$out/setup.log" 2>&1
export PYTHONUNBUFFERED=1
pack() { tar czf "$ret/results.tgz" -C /tmp results; }
make_1b_models "$out/models.log" q4km:15
echo "== tests (subgroup, validation on)"; date +%T
run_test() {   # name filter [repeat]
  VKSPEC_VALIDATION=1 timeout 120 build/tests/$1 --gtest_filter="$2" --gtest_repeat=${3:-1} --gtest_brief=1 > "$out/suite/$1.log" 2>&1
  local rc=$?
  # gtest prints one "ran" line per finished repetition and one "FAILED ... (N ms)" line per failed test
  echo "$1 rc=$rc repetitions: $(grep -c '^\[==========\] .* ran' "$out/suite/$1.log")" \
    "failed tests: $(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$out/suite/$1.log")"
  grep -E -A6 ': Failure$' "$out/suite/$1.log" | head -16
}
run_test test_kernels '*Subgroup*'
run_test test_kernels_pass '*Subgroup*:VkTest*'
run_test test_model '*Prefill*:*BatchOfSequences*:*LogitsMatchCpu*'
run_test test_sampler 'DeviceSamplerTest.BatchedRows*:*Lanes*' 5
pack
echo "== bench, 129 tokens"; date +%T; wait $models; echo "models rc=$?"
scripts/gpu/bench.sh "$out" /tmp/1b-q4km.gguf; pack
echo "== prefill of 513 tokens"; date +%T
m=/tmp/1b-q4km.gguf; p=/tmp/p512.txt
for i in 1 2 3 4; do cat .gpu/prompt.txt; done > $p
ids=$(build/vkspec tokenize -m $m -f $p --json | tr -d '[] \n')
for rep in 1 2; do
  build/vkspec bench -m $m -p 0 -f $p -n 32 --reps 3 --json > "$out/p513.$rep.json" 2>>"$out/bench.err"
  .gpu/llama/llama_driver $m "$ids" 32 3 > "$out/llama513.$rep.json" 2>>"$out/bench.err"
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
for rep in (1, 2):
    l = json.load(open(f"{out}/llama513.{rep}.json")); v = json.load(open(f"{out}/p513.{rep}.json"))
    print("round %d, %d tokens (ubatch %d): vkspec prefill %.0f decode %.0f | llama.cpp prefill %.0f decode %.0f | ratio %.2f / %.2f" % (
        rep, v["prompt_tokens"], v["ubatch"], v["plain"]["prefill_tok_s"], v["plain"]["decode_tok_s"],
        l["prefill_tok_s"], l["decode_tok_s"], v["plain"]["prefill_tok_s"] / l["prefill_tok_s"],
        v["plain"]["decode_tok_s"] / l["decode_tok_s"]))
PY
date +%T; pack
