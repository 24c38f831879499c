#!/bin/bash
# On the device machine: a short follow-up to check.sh. test_kernels with every test's time (check.sh's 60 s
# limit stopped it on the H100 without saying where), the device-time profile of a 512-token prefill at the
# 1B shape in f16 (which kernel the prefill's time goes to on a GPU), and serving 1B Q4_K_M at 1 and 8 streams
# with serve_bench's warm-up at every level.
#   scripts/gpu/probe.sh OUTDIR
set -u
out=$1; mkdir -p "$out"
. scripts/gpu/suite.sh > "$out/setup.log" 2>&1
export PYTHONUNBUFFERED=1
make_1b_models "$out/models.log" q4km:15
for t in test_kernels test_kernels_pass; do
  echo "== $t"; date +%T
  VKSPEC_KERNELS=subgroup VKSPEC_VALIDATION=1 timeout ${KERNELS_TIMEOUT:-120} build/tests/$t > "$out/$t.log" 2>&1
  echo "rc=$?"; grep -E '^\[  (PASSED|FAILED)' "$out/$t.log"
  grep -E '^\[ +(OK|FAILED) +\]' "$out/$t.log" | sed 's/.*\] \(.*\) (\([0-9]*\) ms)/\2 \1/' | sort -n | tail -8
  echo "last started: $(grep -E '^\[ RUN' "$out/$t.log" | tail -1)"
done
echo "== prefill profile, 1B f16, 512 tokens"; date +%T
while [ ! -e /tmp/1b-f16.done ] && kill -0 $models 2>/dev/null; do sleep 1; done
VKSPEC_PROFILE=1 timeout 60 build/vkspec bench -m /tmp/1b-f16.gguf -p 512 -n 4 --reps 1 > "$out/profile.txt" 2>&1; tail -14 "$out/profile.txt"
echo "== serving, 1B Q4_K_M"; date +%T; wait $models
timeout 120 python3 scripts/serve_bench.py --vkspec build/vkspec --model /tmp/1b-q4km.gguf --streams 1,8 --n 64 --rounds 2 > "$out/serve.txt" 2>&1
cat "$out/serve.txt"; date +%T
