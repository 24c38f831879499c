#!/usr/bin/env bash
# Cross-builds the Windows build's libraries into $1/prefix (default build-win-deps): sentencepiece and pcre2
# from Debian 12's source packages (static) and GoogleTest from /usr/src/googletest. nlohmann-json, CLI11,
# Boost (Beast, Asio: headers) and the Vulkan headers come from their Debian packages (/usr/include; see
# cmake/windows_deps.cmake). Skips what is built already.
set -euo pipefail
root=$(realpath -m "${1:-build-win-deps}")
here=$(cd "$(dirname "$0")/../.." && pwd)
prefix=$root/prefix
toolchain=$here/cmake/mingw-w64-x86_64.cmake
jobs=$(nproc)
bash "$here/scripts/windows/fetch-sources.sh" "$root/src" >/dev/null
common=(-G Ninja -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix"
        -DBUILD_SHARED_LIBS=OFF)
build() {   # name source-dir target (all: and install) cmake-options...
  local name=$1 src=$2 target=$3; shift 3
  [ -f "$root/$name.done" ] && return 0
  echo "build-deps: $name"
  cmake -S "$src" -B "$root/build-$name" "${common[@]}" "$@" >"$root/$name.log" 2>&1 || { tail -n 30 "$root/$name.log"; exit 1; }
  cmake --build "$root/build-$name" -j"$jobs" --target "$target" >>"$root/$name.log" 2>&1 || { tail -n 30 "$root/$name.log"; exit 1; }
  [ "$target" = all ] && cmake --install "$root/build-$name" >>"$root/$name.log" 2>&1
  touch "$root/$name.done"
}
build pcre2 "$(ls -d "$root"/src/pcre2-*/ | head -1)" all -DPCRE2_BUILD_PCRE2GREP=OFF -DPCRE2_BUILD_TESTS=OFF \
  -DPCRE2_SUPPORT_JIT=ON -DPCRE2_BUILD_PCRE2_16=OFF -DPCRE2_BUILD_PCRE2_32=OFF
# Debian's packaging drops sentencepiece's static library (debian/patches/disable-static-library.patch); that one
# patch is reverted here so that vkspec.dll and vkspec.exe carry it inside, and the static target alone is built
# and put in the prefix by hand (upstream's CMakeLists cannot configure with SPM_ENABLE_SHARED=OFF).
spm=$(ls -d "$root"/src/sentencepiece-*/ | head -1)
if [ ! -f "$root/sentencepiece.done" ]; then
  grep -q 'sentencepiece-static STATIC' "$spm/src/CMakeLists.txt" ||
    patch -d "$spm" -R -p1 -s < "$spm/debian/patches/disable-static-library.patch"
  build sentencepiece "$spm" sentencepiece-static -DSPM_ENABLE_TCMALLOC=OFF
  mkdir -p "$prefix/lib" "$prefix/include"
  cp "$root/build-sentencepiece/src/libsentencepiece.a" "$prefix/lib/"
  cp "$spm/src/sentencepiece_processor.h" "$prefix/include/"
fi
build googletest /usr/src/googletest all -DBUILD_GMOCK=ON
echo "build-deps: $prefix"
