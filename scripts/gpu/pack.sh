#!/bin/bash
# Here (not on the GPU machine): fills the git-ignored .gl/ and .gpu/ that a run on the device machine carries,
# from the current build (scripts/gpu/README.md says what each folder holds). Needs the peer
# (scripts/install-peer.sh) for llama.cpp's Vulkan libraries and its sources for llama.h.
#   scripts/gpu/pack.sh [SHARED]        (SHARED defaults to ../shared; prints the carried size at the end)
set -euo pipefail
shared=${1:-$(cd .. && pwd)/shared}
G=.gpu
peer=.peer/node_modules
vk=$peer/@node-llama-cpp/linux-x64-vulkan/bins/linux-x64-vulkan
rm -rf $G && mkdir -p $G/bin $G/lib $G/layer $G/shared/models/reference $G/shared/tokenizer-tests $G/llama .gl

# The Vulkan loader and libglvnd (the machine has the NVIDIA driver's ICD, whose libGLX_nvidia needs
# libGLdispatch, but neither): without libglvnd the loader finds no driver.
if ! ls .gl/libglvnd0_*.deb >/dev/null 2>&1; then
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/gpu-apt-lists'
  mkdir -p /tmp/gpu-apt-lists/partial && apt-get $o update >/dev/null && (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi

# Binaries, stripped, and the libraries they need beyond the C/C++ runtime.
for b in build/vkspec build/tests/vkspec-shape build/tests/test_*; do
  [ -f "$b" ] && [ -x "$b" ] && strip -o "$G/bin/$(basename "$b")" "$b"
done
ldd build/vkspec build/tests/test_* | awk '/=> \// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*|libvulkan)\.so' | xargs -r cp -L -t $G/lib

# The Khronos validation layer, so the suite runs with validation on as it does here.
cp /usr/lib/x86_64-linux-gnu/libVkLayer_khronos_validation.so $G/layer/
sed 's#"library_path": *"[^"]*"#"library_path": "./libVkLayer_khronos_validation.so"#' \
  /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json > $G/layer/VkLayer_khronos_validation.json

# Shared test data the suite reads (not the f32 target: 50 MB; its llama.cpp reference test fails there).
cp "$shared"/models/README.md "$shared"/models/{llama-2-tiny-random,stories260K,pycode-draft-f16,pycode-target-f16}.gguf \
   "$shared"/models/pycode8k.model $G/shared/models/
cp "$shared"/models/reference/* $G/shared/models/reference/
cp "$shared"/tokenizer-tests/* $G/shared/tokenizer-tests/
cp -r "$shared"/chat-templates $G/shared/
head -c 520 "$shared"/models/reference/heldout-code.txt > $G/prompt.txt

# llama.cpp's Vulkan backend and a small driver built against its own llama.h.
if [ ! -d /tmp/gpu-llama-src ]; then git clone -q $peer/node-llama-cpp/llama/gitRelease.bundle /tmp/gpu-llama-src; fi
cp $vk/libggml-base.so $vk/libggml.vulkan.v0.5.0.so $vk/libllama.vulkan.v0.5.0.so $vk/libggml-vulkan.so \
   $vk/libggml-cpu-x64.so $G/llama/
g++ -O2 -std=c++17 -I/tmp/gpu-llama-src/include -I/tmp/gpu-llama-src/ggml/include scripts/gpu/llama_driver.cpp \
  -o $G/llama/llama_driver -L$G/llama -l:libllama.vulkan.v0.5.0.so -l:libggml.vulkan.v0.5.0.so -l:libggml-base.so \
  -Wl,-rpath,'$ORIGIN'

# Compressed to fit the 64 MiB carry; suite.sh decompresses every *.xz under .gpu there.
find $G -type f -size +200k ! -name '*.xz' -print0 | xargs -0 -n1 -P2 xz -9 -T1
du -sh $G .gl
