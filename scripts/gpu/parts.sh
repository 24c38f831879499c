#!/bin/bash
# On the device machine: recordings submitted in parts (DeviceFacts::submit_split, GPUs' default since
# 2026-11-27) against whole recordings (VKSPEC_SUBMIT=whole), interleaved. First the tests that compare bits
# (subgroup family, validation on), then `bench` on the pycode pair and at the 1B shape in Q4_K_M beside
# llama.cpp, then serving (serve_bench --compare with a wrapper that sets VKSPEC_SUBMIT=whole).
#   scripts/gpu/parts.sh OUTDIR        (from the repository root, after scripts/gpu/pack.sh here)
set -u
ret=$1; out=/tmp/results; mkdir -p "$ret" $out/suite
. scripts/gpu/suite.sh > "$out/setup.log" 2>&1
export PYTHONUNBUFFERED=1
pack() { tar czf "$ret/results.tgz" -C /tmp results; }
make_1b_models "$out/models.log" q4km:15
echo "== tests (subgroup, parts, validation on)"; date +%T
TESTS="test_model test_batch_engine test_speculative test_sampler test_c_api_batch" TEST_TIMEOUT=120 \
  scripts/gpu/run_suite.sh $out/suite subgroup; pack
summary() {   # JSON files of bench runs: decode tok/s (wall and device), speculative where present
  python3 - "$@" <<'PY'
import json, sys
for f in sys.argv[1:]:
    v = json.load(open(f)); p = v["plain"]; s = v.get("speculative")
    print("  %-28s prefill %7.0f decode %7.1f (device %7.1f)%s" % (f.split("/")[-1], p["prefill_tok_s"], p["decode_tok_s"],
          p.get("decode_gpu_tok_s", 0), " | spec %7.1f (device %7.1f) x%.2f" % (s["decode_tok_s"], s.get("decode_gpu_tok_s", 0), v["speedup"]) if s else ""))
PY
}
M=.gpu/shared/models
echo "== bench, pycode pair"; date +%T
for rep in 1 2; do
  for mode in parts whole; do
    VKSPEC_SUBMIT=$mode build/vkspec bench -m $M/pycode-target-f16.gguf -md $M/pycode-draft-f16.gguf -n 128 --reps 5 --json \
      > $out/pycode.$mode.$rep.json 2>>$out/bench.err
  done
done
summary $out/pycode.*.json; pack
echo "== bench, 1B Q4_K_M"; date +%T; wait $models; echo "models rc=$?"
m=/tmp/1b-q4km.gguf
ids=$(build/vkspec tokenize -m $m -f .gpu/prompt.txt --json | tr -d '[] \n')
for rep in 1 2; do
  for mode in parts whole; do
    VKSPEC_SUBMIT=$mode build/vkspec bench -m $m -p 0 -f .gpu/prompt.txt -n 128 --reps 5 --json > $out/1b.$mode.$rep.json 2>>$out/bench.err
  done
  .gpu/llama/llama_driver $m "$ids" 128 5 > $out/llama.$rep.json 2>>$out/bench.err
  python3 -c "import json,sys; l=json.load(open(sys.argv[1])); print('  llama.cpp round $rep: prefill %.0f decode %.1f' % (l['prefill_tok_s'], l['decode_tok_s']))" $out/llama.$rep.json
done
summary $out/1b.*.json; pack
echo "== serving, 1B Q4_K_M: parts (vkspec) against whole (vkspec-b)"; date +%T
printf '#!/bin/sh\nVKSPEC_SUBMIT=whole exec %s/build/vkspec "$@"\n' "$PWD" > /tmp/vkspec-whole; chmod +x /tmp/vkspec-whole
timeout 150 python3 scripts/serve_bench.py --vkspec build/vkspec --compare /tmp/vkspec-whole --model $m --streams 1,8 --n 64 \
  --rounds 2 > $out/serve.txt 2>&1
tail -8 $out/serve.txt; date +%T; pack
