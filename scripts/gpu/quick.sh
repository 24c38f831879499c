#!/bin/bash
# On the device machine: the short check after a kernel change (about 4 minutes on an H100), most important
# first. The device sampler's batched-rows test 20 times (it failed once on an H200; its messages are printed),
# test_kernels and test_model with the GPU's default family, validation on, then bench.sh at the 1B shape
# in Q4_K_M beside llama.cpp (with its VKSPEC_MATMUL_TILE=0 and VKSPEC_FMA=0 A/Bs).
#   scripts/gpu/quick.sh OUTDIR        (from the repository root, after scripts/gpu/pack.sh here)
set -u
ret=$1; out=/tmp/results; mkdir -p "$ret" $out/suite
. scripts/gpu/suite.sh > "$out/setup.log" 2>&1
export PYTHONUNBUFFERED=1
pack() { tar czf "$ret/results.tgz" -C /tmp results; }
make_1b_models "$out/models.log" q4km:15
echo "== DeviceSamplerTest x20"; date +%T
VKSPEC_KERNELS=subgroup VKSPEC_VALIDATION=1 timeout 120 build/tests/test_sampler --gtest_filter='DeviceSampler*' \
  --gtest_repeat=20 --gtest_brief=1 > "$out/sampler.log" 2>&1
echo "rc=$? passed runs: $(grep -c '^\[  PASSED' "$out/sampler.log") failed: $(grep -c '^\[  FAILED  \] [A-Z]' "$out/sampler.log")"
grep -E -A8 ': Failure$' "$out/sampler.log" | head -40
echo "== test_kernels, test_model"; date +%T
TESTS="test_kernels test_model" TEST_TIMEOUT=150 scripts/gpu/run_suite.sh $out/suite subgroup; pack
echo "== bench"; date +%T; wait $models; echo "models rc=$?"
scripts/gpu/bench.sh "$out" /tmp/1b-q4km.gguf; date +%T; pack
