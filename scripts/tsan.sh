#!/usr/bin/env bash
# ThreadSanitizer job for the C API's threading rules (include/vkspec.h): two contexts on one model used
# from two threads, a second thread on a busy context, vkspec_cancel from another thread during a prefill,
# stepped generation; and the batch engine's (engine/batch_engine.h, and vkspec_batch over it: submitters on
# many threads while the engine thread runs, a cancel from another thread); and the server's HTTP layer
# (apps/server/http_server.h: the I/O thread, its workers, stop() from another thread). A separate build
# (build-tsan/) of those tests only.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVKSPEC_WERROR=ON -DVKSPEC_TSAN=ON \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" > /dev/null
cmake --build build-tsan -j"$(nproc)" --target test_c_api_context test_c_api_batch test_batch_engine test_http_server
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
export XDG_CACHE_HOME="$PWD/build/cache"   # the plain build's shader cache (tests/CMakeLists.txt)
VKSPEC_SHARED="$PWD/../shared" TEST_TMPDIR="$PWD/build-tsan" build-tsan/tests/test_c_api_context \
  --gtest_filter='CApi.ThreadingRules:CApi.CancelStopsGenerationAndPrefill:CApi.StepsAreBoundedAndGiveGenerateTokens:CApi.FreedHandlesAndBadFilesAreErrors'
VKSPEC_SHARED="$PWD/../shared" TEST_TMPDIR="$PWD/build-tsan" build-tsan/tests/test_c_api_batch \
  --gtest_filter='CApiBatch.SubmittersOnManyThreadsWhileOneRuns'
VKSPEC_SHARED="$PWD/../shared" TEST_TMPDIR="$PWD/build-tsan" build-tsan/tests/test_batch_engine \
  --gtest_filter='BatchEngineTest.SubmittersOnManyThreadsWhileTheEngineRuns'
build-tsan/tests/test_http_server
