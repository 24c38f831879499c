#!/bin/bash
# On the device machine: issue 62's check of the matmul paths (about 6 minutes on an H200), most important first.
#   1. the device's facts and its choice (integer dot products, accelerated or not, cooperative matrices);
#   2. the paths' kernel tests (test_kernels_paths: int8dot, the cooperative-matrix kernel on the matrix units
#      and emulated) and the model's bit-for-bit tests on the matrix units, validation on;
#   3. the 1B shape in Q4_K_M and Q8_0 at a 129- and a 513-token prompt: vkspec with fma, int8dot and coopmat
#      and llama.cpp's Vulkan backend, interleaved (prefill and decode tok/s, ratios to llama.cpp);
#   4. a ~4000-token prompt (the attention tiles, attention_coop.comp): fma and coopmat beside llama.cpp;
#   5. prompt lookup's verify passes (speculative decode) and serving at 1 and 8 streams, per path.
#   scripts/gpu/matmul.sh OUTDIR        (from the repository root, after scripts/gpu/pack.sh here)
set -u
ret=$1; out=/tmp/results; mkdir -p "$ret" $out/suite
. scripts/gpu/suite.sh > "$out/setup.log" 2>&1
export PYTHONUNBUFFERED=1
pack() { tar czf "$ret/results.tgz" -C /tmp results; }
make_1b_models "$out/models.log" q4km:15 q8_0:7
build/vkspec devices --json > "$out/devices.json" 2>&1
python3 -c "import json,sys; [print(d['name'], 'matmul_path', d['matmul_path'], 'integer_dot', d['integer_dot_product'], 'accelerated', d['integer_dot_accelerated'], 'coopmat', d['cooperative_matrix'], 'coopmat_khr', d['cooperative_matrix_khr'], 'coopmat_nv', d['cooperative_matrix_nv'], 'vulkan_memory_model', d['vulkan_memory_model']) for d in json.load(open(sys.argv[1]))['devices']]" "$out/devices.json"
echo "== tests (validation on)"; date +%T
run_test() {   # name filter [validation: 1]
  VKSPEC_VALIDATION=${3:-1} timeout 150 build/tests/$1 --gtest_filter="$2" --gtest_brief=1 > "$out/suite/$1.${3:-1}.log" 2>&1
  echo "$1 (validation ${3:-1}) rc=$? failed tests: $(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$out/suite/$1.${3:-1}.log")"
  grep -E -A6 ': Failure$' "$out/suite/$1.${3:-1}.log" | head -16
}
# Under the carried validation layer (1.3.239, older than VK_KHR_cooperative_matrix) the matrix units run the NV
# build (CoopTest/*MatrixUnitsNv); the KHR build (*MatrixUnitsKhr, and what the benchmarks below run) is checked
# against the same references with validation off.
run_test test_kernels_paths '*'
run_test test_kernels_paths '*MatrixUnitsKhr*' 0
# the f16 models' matmuls on the matrix units: prompt chunks and batches give token-by-token decoding's bits
for v in 1 0; do
  VKSPEC_MATMUL=coopmat VKSPEC_VALIDATION=$v timeout 150 build/tests/test_model --gtest_filter='*Prefill*:*BatchOfSequences*' \
    --gtest_brief=1 > "$out/suite/test_model.coopmat.$v.log" 2>&1; echo "test_model coopmat (validation $v: $([ $v = 1 ] && echo NV || echo KHR)) rc=$?"
  grep -E -A6 ': Failure$' "$out/suite/test_model.coopmat.$v.log" | head -16
done
pack
# ratios TAG ROUNDS PATH...: each round's prefill and decode per path against llama.cpp's, from
# $out/TAG.PATH.ROUND.json and $out/TAG.llama.ROUND.json
ratios() {
  python3 - "$out" "$@" <<'PY'
import json, sys
out, tag, rounds, paths = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
for rep in range(1, rounds + 1):
    try:
        l = json.load(open(f"{out}/{tag}.llama.{rep}.json"))
    except Exception as e:
        print("%s round %d: llama.cpp failed (%s)" % (tag, rep, e)); continue
    row = []
    for path in paths:
        try:
            v = json.load(open(f"{out}/{tag}.{path}.{rep}.json"))["plain"]
        except Exception as e:
            row.append("%s failed (%s)" % (path, e)); continue
        row.append("%s prefill %.0f (x%.2f) decode %.0f (x%.2f)" % (path, v["prefill_tok_s"], v["prefill_tok_s"] / l["prefill_tok_s"],
                                                                    v["decode_tok_s"], v["decode_tok_s"] / l["decode_tok_s"]))
    print("%s round %d: %s | llama.cpp prefill %.0f decode %.0f" % (tag, rep, " | ".join(row), l["prefill_tok_s"], l["decode_tok_s"]))
PY
}
echo "== bench: fma | int8dot | coopmat | llama.cpp"; date +%T; wait $models; echo "models rc=$?"
p513=/tmp/p512.txt
for i in 1 2 3 4; do cat .gpu/prompt.txt; done > $p513
for m in /tmp/1b-q4km.gguf /tmp/1b-q8_0.gguf; do
  for p in .gpu/prompt.txt $p513; do
    ids=$(build/vkspec tokenize -m $m -f $p --json | tr -d '[] \n')
    tag=$(basename $m .gguf).$(basename $p .txt)
    for rep in 1 2; do
      for path in fma int8dot coopmat; do
        VKSPEC_MATMUL=$path build/vkspec bench -m $m -p 0 -f $p -n 64 --reps 3 --json > "$out/$tag.$path.$rep.json" 2>>"$out/bench.err"
      done
      .gpu/llama/llama_driver $m "$ids" 64 3 > "$out/$tag.llama.$rep.json" 2>>"$out/bench.err"
    done
    ratios $tag 2 fma int8dot coopmat
    pack
  done
done
echo "== a ~4000-token prompt (attention_coop.comp's tiles): fma | coopmat | llama.cpp"; date +%T
p4k=/tmp/p4k.txt; for i in $(seq 31); do cat .gpu/prompt.txt; done > $p4k
ids=$(build/vkspec tokenize -m /tmp/1b-q4km.gguf -f $p4k --json | tr -d '[] \n')
for path in fma coopmat; do
  VKSPEC_MATMUL=$path timeout 150 build/vkspec bench -m /tmp/1b-q4km.gguf -c 4400 -p 0 -f $p4k -n 16 --reps 2 --json > "$out/1b-q4km.p4k.$path.1.json" 2>>"$out/bench.err"
done
timeout 150 .gpu/llama/llama_driver /tmp/1b-q4km.gguf "$ids" 16 2 > "$out/1b-q4km.p4k.llama.1.json" 2>>"$out/bench.err"
ratios 1b-q4km.p4k 1 fma coopmat
pack
echo "== verify passes and serving: fma | int8dot | coopmat"; date +%T
for path in fma int8dot coopmat; do
  VKSPEC_MATMUL=$path build/vkspec bench -m /tmp/1b-q4km.gguf --draft ngram -p 0 -f .gpu/prompt.txt -n 128 --reps 3 --json > "$out/spec.$path.json" 2>>"$out/bench.err"
  python3 -c "import json,sys; v=json.load(open(sys.argv[1])); s=v['speculative']; print(sys.argv[2], 'plain %.0f lookup %.0f tok/s tokens/verify %.2f' % (v['plain']['decode_tok_s'], s['decode_tok_s'], s['tokens_per_verify']))" "$out/spec.$path.json" $path
  VKSPEC_MATMUL=$path timeout 120 python3 scripts/serve_bench.py --vkspec build/vkspec --model /tmp/1b-q4km.gguf --streams 1,8 --n 64 --rounds 1 > "$out/serve.$path.txt" 2>&1
  tail -4 "$out/serve.$path.txt"
done
date +%T; pack
