#!/usr/bin/env bash
# Installs dependencies, builds vkspec and runs the full test suite on the default Vulkan device
# (lavapipe on a machine without a GPU).   scripts/test.sh [--sanitize]
#   --sanitize   separate build in build-asan/ with AddressSanitizer + UndefinedBehaviorSanitizer
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh

build=build
flags=(-DCMAKE_BUILD_TYPE=Release -DVKSPEC_WERROR=ON)
exclude=()
if [ "${1:-}" = "--sanitize" ]; then
  build=build-asan
  # -O1 -g1 (line tables, enough for the reports' stack traces) compiles in half the time of -O2 -g, and the
  # build is most of this job (tests/test_server.cpp under ASan: 44 -> 23 s)
  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DVKSPEC_WERROR=ON -DVKSPEC_SANITIZE=ON
         "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
  # Leaks reported from inside Mesa/LLVM's own allocations are suppressed (see the file); ours are not.
  export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  # test_presets only drives the binary over llama.cpp's files (their decoders run under ASan in
  # test_kernels, their parsing in test_gguf and the fuzzer); it is the slowest suite under ASan.
  # (test_spirv_coopmat_khr reads SPIR-V, which the sanitizers do not change)
  exclude=(-E 'test_presets|test_spirv_coopmat_khr')
  # the plain build's shader cache, warm when it ran first (CI): LLVM under ASan is slow to JIT
  flags+=(-DVKSPEC_TEST_SHADER_CACHE="$PWD/build/cache")
fi
cmake -S . -B "$build" "${flags[@]}"
cmake --build "$build" -j"$(nproc)"
# As many suites at once as cores: a suite on lavapipe leaves cores idle while LLVM JITs its pipelines or the
# host waits on a small dispatch (the suites share no files and their servers take ephemeral ports).
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" "${exclude[@]}"
