#!/usr/bin/env bash
# Installs every build, test and run-time dependency of vkspec from Debian 12 packages.
# Idempotent: packages already present are skipped by apt. Needs root (or sudo).
#   scripts/install-deps.sh [--mesa-backports] [--windows]
#   --mesa-backports   opt-in, never the default (CI stays on Debian 12's Mesa 22.3): lavapipe from Mesa 25
#                      in bookworm-backports. Measure before choosing it: with today's int8 kernels it runs
#                      the 1B shape slower than 22.3 (docs/PERFORMANCE.md, 2026-11-26 late)
#   --windows          also what the Windows build and its tests need (scripts/build-windows.sh,
#                      scripts/test-windows.sh): MinGW-w64, the tools that unpack Debian's source packages, Wine
#                      and a virtual X server for it
set -euo pipefail
mesa_backports=0
windows=0
for a in "$@"; do
  case "$a" in
    --mesa-backports) mesa_backports=1 ;;
    --windows) windows=1 ;;
    *) echo "install-deps: unknown option $a" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake pkg-config git
  # Vulkan: loader + headers, lavapipe (CPU driver), validation layers, vulkaninfo
  libvulkan-dev mesa-vulkan-drivers vulkan-validationlayers vulkan-tools
  # Shader toolchain: GLSL -> SPIR-V at build time
  glslc glslang-tools spirv-tools
  # Tests
  googletest libgtest-dev libgmock-dev
  # Chat templates: the reference renderer of tests/test_chat_template.cpp; JSON schemas: the reference validator
  python3 python3-jinja2 python3-jsonschema
  # Loader / tokenizers / apps (Boost: Beast and Asio, the server's HTTP layer; cpp-httplib: the tests' client)
  libsentencepiece-dev libpcre2-dev nlohmann-json3-dev libcli11-dev libboost-dev libcpp-httplib-dev
  # The chat's line editing and history (libedit: BSD licence); the REPL's test drives a terminal with tmux,
  # the chat page's a headless Chromium
  libedit-dev tmux chromium
  # Sanitizer and fuzzer runtimes (clang's libFuzzer)
  clang libclang-rt-14-dev
)
[ $windows = 1 ] && packages+=(g++-mingw-w64-x86-64-posix dpkg-dev patch zip unzip ninja-build wine wine64 xvfb xauth)

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
if [ $mesa_backports = 1 ]; then
  # the machine's own Debian archive (no host is named here): the first URIs of a deb822 file, or the URI of a
  # one-line bookworm entry
  archive=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$archive" ] || archive=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list \
                                  /etc/apt/sources.list.d/*.list 2>/dev/null || true)
  [ -n "$archive" ] || { echo "install-deps: no Debian archive in the apt sources to take backports from" >&2; exit 1; }
  echo "deb $archive bookworm-backports main" | $SUDO tee /etc/apt/sources.list.d/vkspec-bookworm-backports.list >/dev/null
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends -t bookworm-backports mesa-vulkan-drivers
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
