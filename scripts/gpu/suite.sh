#!/bin/bash
# Sourced on the device machine from the repository root (`. scripts/gpu/suite.sh`): unpacks the Vulkan
# loader (.gl) and the carried libraries (.gpu), and sets the environment the binaries and tests need.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
R=$PWD
xz -dc .gpu/layer/libVkLayer_khronos_validation.so.xz > .gpu/layer/libVkLayer_khronos_validation.so
[ -f .gpu/llama/libggml-vulkan.so.xz ] && xz -dc .gpu/llama/libggml-vulkan.so.xz > .gpu/llama/libggml-vulkan.so
export VK_LAYER_PATH=$R/.gpu/layer LD_LIBRARY_PATH=$R/.gpu/lib XDG_CACHE_HOME=/tmp/cache VKSPEC_SHARED=$R/.gpu/shared
[ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] &&
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
# test_cli runs the vkspec binary at the path it was built with here.
mkdir -p /work build/tests; [ -e /work/main ] || ln -s "$R" /work/main
cp .gpu/bin/vkspec build/; cp .gpu/bin/test_* build/tests/ 2>/dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
