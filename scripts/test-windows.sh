#!/usr/bin/env bash
# The Windows build's tests, on Linux: scripts/build-windows.sh cross-builds it, Debian's Wine runs it and
# winevulkan forwards its Vulkan calls to the host's lavapipe (Wine's Vulkan needs its X11 driver: everything
# runs under xvfb-run). Runs every suite build-win/bin/suites.txt lists, then tests/windows/check_windows.py
# on the unpacked zip against the Linux build in build/ (scripts/test.sh makes it; so CI runs this after it).
#   scripts/test-windows.sh
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
bash scripts/build-windows.sh
echo "test-windows: built in $((SECONDS - start)) s"
[ -x build/vkspec ] || { echo "test-windows: build/vkspec is missing (run scripts/test.sh first)" >&2; exit 1; }

export WINEPREFIX="$PWD/build-win/wine-prefix" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="   # no Mono/Gecko prompts
export LANG=C.UTF-8 LC_ALL=C.UTF-8   # Wine turns the Unix command line into UTF-16 with the locale's charset
tmp="$PWD/build-win/testtmp"
rm -rf "$tmp"
mkdir -p "$tmp"
# The suites' environment as tests/CMakeLists.txt gives it on Linux. The Khronos validation layer is a Linux
# layer that winevulkan does not offer to Windows programs: validation runs in the Linux suites.
export VKSPEC_SHARED="$(cd .. && pwd)/shared" TEST_TMPDIR="$tmp" VKSPEC_VALIDATION=0
# lavapipe runs on the Linux side of a Wine process and keeps LLVM's machine code in Mesa's cache: the Linux
# suites' (same SPIR-V, same keys), so the Windows suites do not JIT every pipeline again
export XDG_CACHE_HOME="$PWD/build/cache"
rm -rf build-win/pkg && mkdir -p build-win/pkg && (cd build-win/pkg && unzip -q ../vkspec-windows-x64.zip)
xvfb-run -a bash -c '
  set -u
  wineboot -i >/dev/null 2>&1
  wineserver -p   # one persistent wineserver for every run: no run meets one that is shutting down
  failed=0
  suite() {   # one suite; its verdict in $tmp/$t.result
    local t=$1 filter=$2 s=$SECONDS
    if (cd build-win/bin && timeout 900 wine "$t.exe" --gtest_brief=1 "--gtest_filter=$filter" > "'"$tmp"'/$t.log" 2>&1 </dev/null); then
      echo "test-windows: $t passed ($((SECONDS - s)) s)"
    else
      echo "test-windows: $t FAILED ($((SECONDS - s)) s):"; tail -n 40 "'"$tmp"'/$t.log"; touch "'"$tmp"'/$t.failed"
    fi
  }
  while read -r t filter; do   # as many suites at once as cores, as ctest -j runs the Linux ones
    while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n || true; done
    suite "$t" "$filter" &
  done < build-win/bin/suites.txt
  wait
  ls "'"$tmp"'"/*.failed >/dev/null 2>&1 && failed=1
  npm_dir=build/npm-openai
  [ -d "$npm_dir/node_modules/openai" ] || npm install --prefix "$npm_dir" openai@5 --no-audit --no-fund --loglevel=error >/dev/null
  python3 tests/windows/check_windows.py build-win/pkg/vkspec-windows-x64 build "$VKSPEC_SHARED" "'"$tmp"'" "$npm_dir" || failed=1
  wineserver -k 2>/dev/null || true
  exit $failed
'
echo "test-windows: passed in $((SECONDS - start)) s"
