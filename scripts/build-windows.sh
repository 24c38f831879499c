#!/usr/bin/env bash
# Cross-builds vkspec for 64-bit Windows with Debian's MinGW-w64 and packages it:
#   build-win/bin/      vkspec.exe, vkspec.dll (+ build-win/vkspec.dll.a), the Windows test suites
#   build-win/vkspec-windows-x64.zip   what a Windows user unpacks and runs: vkspec.exe, vkspec.dll, generate.exe
#                       (the C API example), include/vkspec.h (+ vkspec_device.h), lib/vkspec.dll.a, examples/generate.c; it needs no
#                       DLL but vkspec.dll and Windows' own (the C and C++ runtimes are linked in)
# Dependencies: scripts/install-deps.sh --windows, and sentencepiece + pcre2 built from Debian's source packages
# (scripts/windows/build-deps.sh, cached in build-win-deps/).
#   scripts/build-windows.sh [--no-tests]
set -euo pipefail
cd "$(dirname "$0")/.."
tests=ON
[ "${1:-}" = "--no-tests" ] && tests=OFF
bash scripts/install-deps.sh --windows
bash scripts/windows/build-deps.sh build-win-deps
cmake -S . -B build-win -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64-x86_64.cmake -DCMAKE_BUILD_TYPE=Release \
      -DVKSPEC_WIN_DEPS="$PWD/build-win-deps/prefix" -DVKSPEC_WERROR=ON -DVKSPEC_TESTS=$tests >/dev/null
cmake --build build-win -j"$(nproc)"

# The package: the programs, the library for C and C++ applications, the header and an example.
pkg=build-win/vkspec-windows-x64
rm -rf "$pkg" "$pkg.zip"
mkdir -p "$pkg/include" "$pkg/lib" "$pkg/examples"
cp build-win/bin/vkspec.exe build-win/bin/vkspec.dll "$pkg/"
cp include/vkspec.h include/vkspec_device.h "$pkg/include/"
cp build-win/vkspec.dll.a "$pkg/lib/"
cp apps/examples/generate.c "$pkg/examples/"
# the C example built as an application would build it: against the package's header and import library only
x86_64-w64-mingw32-gcc-posix -std=c99 -pedantic -Wall -Wextra -Werror -O2 -DVKSPEC_SHARED -I"$pkg/include" \
  "$pkg/examples/generate.c" "$pkg/lib/vkspec.dll.a" -static-libgcc -o "$pkg/generate.exe"   # (beside the DLL it loads)
cp README.md "$pkg/README.md"
mkdir -p "$pkg/docs"
cp docs/WINDOWS.md docs/CLI.md docs/SERVER.md docs/C_API.md "$pkg/docs/"   # (the README's links)
# every DLL the programs import must be Windows' own or vkspec.dll (the C++ runtime is linked in)
for f in "$pkg"/vkspec.exe "$pkg"/vkspec.dll "$pkg"/generate.exe; do
  for dll in $(x86_64-w64-mingw32-objdump -p "$f" | awk '/DLL Name:/ {print tolower($3)}'); do
    case "$dll" in
      kernel32.dll|user32.dll|advapi32.dll|shell32.dll|ws2_32.dll|mswsock.dll|crypt32.dll|msvcrt.dll|ucrtbase.dll|vkspec.dll|api-ms-win-*) ;;
      *) echo "build-windows: $f imports $dll, which Windows does not have" >&2; exit 1 ;;
    esac
  done
done
(cd build-win && zip -qr vkspec-windows-x64.zip vkspec-windows-x64)
echo "build-windows: build-win/vkspec-windows-x64.zip ($(du -h build-win/vkspec-windows-x64.zip | cut -f1))"
