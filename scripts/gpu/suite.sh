#!/bin/bash
# Sourced on the device machine from the repository root (`. scripts/gpu/suite.sh`): unpacks the Vulkan
# loader (.gl) and the carried files (.gpu; any *.xz there is decompressed in place, to fit the 64 MiB carry),
# and sets the environment the binaries and tests need.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
R=$PWD
find .gpu -name '*.xz' -exec xz -d -f -T0 {} +
chmod +x .gpu/bin/* .gpu/llama/llama_driver 2>/dev/null
export VK_LAYER_PATH=$R/.gpu/layer LD_LIBRARY_PATH=$R/.gpu/lib XDG_CACHE_HOME=/tmp/cache VKSPEC_SHARED=$R/.gpu/shared
icd=$(ls /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json \
  /usr/share/vulkan/icd.d/nvidia_icd.json 2>/dev/null | head -1)
[ -n "$icd" ] || icd=$(find /usr /etc -name 'nvidia_icd*.json' 2>/dev/null | head -1)
[ -n "$icd" ] && export VK_DRIVER_FILES=$icd; echo "ICD: ${icd:-none found}"
# test_cli runs the vkspec binary at the path it was built with here.
mkdir -p /work build/tests; [ -e /work/main ] || ln -s "$R" /work/main
cp .gpu/bin/vkspec build/; cp .gpu/bin/test_* .gpu/bin/vkspec-shape build/tests/ 2>/dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
