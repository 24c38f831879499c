#!/bin/bash
# On the device machine: where a serving step's device time goes, per kernel (VKSPEC_PROFILE=1: the server
# prints the batched steps' profile when it exits), at 1 and at 8 streams. Two questions from the H200 on
# 2026-11-27: why 8 streams at the 1B shape give 3.9x one stream and not ~7x (an 8-row step cost ~2.2x a
# 1-row step), and why the pycode pair's sampled speculation loses at 8 streams (0.72x plain) where it gains
# at one (1.09x). Timestamps around every dispatch slow the run: read shares and per-call times, not tok/s.
#   scripts/gpu/serve_profile.sh OUTDIR        (from the repository root, after scripts/gpu/pack.sh here)
set -u
ret=$1; out=/tmp/results; mkdir -p "$ret" $out
. scripts/gpu/suite.sh > "$out/setup.log" 2>&1
export PYTHONUNBUFFERED=1
pack() { tar czf "$ret/results.tgz" -C /tmp results; }
make_1b_models "$out/models.log" q4km:15
M=.gpu/shared/models
profile() {   # NAME SERVE_BENCH_ARGS...: the table, then each server's batched-steps profile, largest first
  local name=$1; shift
  rm -rf /tmp/serve-bench-*
  VKSPEC_PROFILE=1 timeout 150 python3 scripts/serve_bench.py --vkspec build/vkspec --rounds 1 --n 64 --requests 2 "$@" \
    > $out/$name.txt 2>&1
  echo "== $name"; grep '^| vkspec' $out/$name.txt
  for f in /tmp/serve-bench-*/*.log; do
    cp "$f" "$out/$name.$(basename "$f")"
    echo "  -- $(basename "$f" .log): kernel, total ms, calls, ms per call"
    sed -n '/^batched steps kernel profile/,/^[^ ]/p' "$f" | grep '^  ' |
      awk '{printf "    %-28s %10.1f %8d %9.4f\n", $1, $2, $5, $7}' | sort -k2 -n -r | head -12
  done
  pack
}
echo "== 1B Q4_K_M, greedy"; date +%T; wait $models; echo "models rc=$?"
profile 1b-1 --model /tmp/1b-q4km.gguf --streams 1
profile 1b-8 --model /tmp/1b-q4km.gguf --streams 8
echo "== pycode pair, T = 0.8, plain and draft model"; date +%T
profile pycode-1 --model $M/pycode-target-f16.gguf --draft $M/pycode-draft-f16.gguf --temperature 0.8 --streams 1
profile pycode-8 --model $M/pycode-target-f16.gguf --draft $M/pycode-draft-f16.gguf --temperature 0.8 --streams 8
date +%T
