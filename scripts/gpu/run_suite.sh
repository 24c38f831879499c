#!/bin/bash
# On a GPU machine, after `. scripts/gpu/suite.sh`: every carried test binary with each kernel family
# (subgroup is the GPU's default), validation layer on; one log per binary and family in OUTDIR, a summary
# on stdout (failed tests by name).
#   [TESTS='test_kernels test_model'] [TEST_TIMEOUT=S] scripts/gpu/run_suite.sh OUTDIR [FAMILIES...]
out=$1; shift; mkdir -p "$out"
for fam in ${@:-subgroup row}; do
  for t in ${TESTS:-build/tests/test_*}; do
    n=$(basename "$t"); t=build/tests/$n
    VKSPEC_KERNELS=$fam VKSPEC_VALIDATION=1 timeout "${TEST_TIMEOUT:-300}" "$t" --gtest_brief=1 > "$out/$fam.$n.log" 2>&1
    rc=$?
    echo "$fam $n rc=$rc $(grep -E '^\[  PASSED|^\[  SKIPPED' "$out/$fam.$n.log" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \]' "$out/$fam.$n.log" | sed 's/^/    /'
    # the first failures' messages too: the device tool returns at most 8 files, so logs may not come back
    grep -E -A4 ': Failure$' "$out/$fam.$n.log" | head -24 | sed 's/^/      /'
  done
done
