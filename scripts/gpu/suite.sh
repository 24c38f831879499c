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

# The 1B-shape models, written on the machine's CPUs in the background (vkspec-shape, then llama.cpp's
# quantizer): /tmp/1b-f16.gguf (/tmp/1b-f16.done once it is whole), then /tmp/1b-NAME.gguf for each NAME:FTYPE
# argument (llama_ftype: q4km:15, q8_0:7). The writer's pid is left in $models.
#   make_1b_models LOG [NAME:FTYPE...]
make_1b_models() {
  local log=$1; shift
  (build/tests/vkspec-shape /tmp/1b-f16.gguf .gpu/shared/tokenizer-tests/ggml-vocab-llama-bpe.gguf 1b f16 &&
   touch /tmp/1b-f16.done &&
   for q in "$@"; do .gpu/llama/llama_driver --quantize /tmp/1b-f16.gguf "/tmp/1b-${q%%:*}.gguf" "${q#*:}" || exit 1; done
  ) > "$log" 2>&1 &
  models=$!
}
