#!/usr/bin/env bash
# Installs dependencies, builds vkspec and runs the main job: `vkspec run` on the default model
# (../shared/models/stories260K.gguf) unless arguments are given, e.g.
#   scripts/run.sh run -m ~/models/Llama-3.2-1B-Instruct-f16.gguf -p "Hello" -n 64
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh >/dev/null
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
if [ $# -eq 0 ]; then set -- run -p "Once upon a time" -n 64; fi
exec ./build/vkspec "$@"
