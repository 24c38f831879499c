#!/usr/bin/env bash
# Installs the build into a temporary prefix, builds apps/examples/generate.c against it with pkg-config and
# apps/examples/external_device.cpp with CMake's find_package(vkspec CONFIG), runs both and compares their
# text with `vkspec run ... --temp 0`.   tests/install_test.sh BUILD_DIR SOURCE_DIR MODEL
set -euo pipefail
build="$1"; src="$2"; model="$3"
prompt="Once upon a time"; n=24
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" > /dev/null
pc="$(dirname "$(find "$tmp/prefix" -name vkspec.pc)")"
libdir="$(dirname "$(find "$tmp/prefix" -name 'libvkspec.so' | head -1)")"
test -f "$tmp/prefix/include/vkspec.h"
test -f "$tmp/prefix/include/vkspec_device.h"
# only the C API is exported
if nm -D --defined-only "$libdir/libvkspec.so" | awk '{print $3}' | grep -v '^vkspec_' | grep -v '^VKSPEC_0$' | grep -q .; then
  echo "libvkspec.so exports symbols besides vkspec_*"; exit 1
fi

cc -std=c99 -pedantic -Wall -Werror "$src/apps/examples/generate.c" $(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs vkspec) \
  -Wl,-rpath,"$libdir" -o "$tmp/generate"

mkdir -p "$tmp/app"
cat > "$tmp/app/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.22)
project(app CXX)
find_package(vkspec 0.1 CONFIG REQUIRED)
find_package(Vulkan REQUIRED)
add_executable(external_device "$src/apps/examples/external_device.cpp")
target_link_libraries(external_device PRIVATE vkspec::vkspec Vulkan::Vulkan)
set_target_properties(external_device PROPERTIES CXX_STANDARD 17 BUILD_RPATH "$libdir")
CMAKE
cmake -S "$tmp/app" -B "$tmp/app/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" > /dev/null
cmake --build "$tmp/app/build" > /dev/null

want="$("$build/vkspec" run -m "$model" -p "$prompt" -n $n --temp 0 2>/dev/null)"
got_c="$("$tmp/generate" "$model" "$prompt" $n 2>/dev/null)"
got_ext="$("$tmp/app/build/external_device" "$model" "$prompt" $n 2>/dev/null)"
[ "$got_c" = "$want" ] || { printf 'generate.c printed\n%s\nvkspec run printed\n%s\n' "$got_c" "$want"; exit 1; }
[ "$got_ext" = "$want" ] || { printf 'external_device printed\n%s\nvkspec run printed\n%s\n' "$got_ext" "$want"; exit 1; }
echo "install test: header, libvkspec.so (vkspec_* only), vkspec.pc and vkspecConfig.cmake installed; both examples print vkspec run's text"
