#!/usr/bin/env bash
# Installs the llama.cpp peer (../shared/tools/peer: npm's node-llama-cpp with prebuilt CPU and Vulkan
# llama.cpp) into .peer/, for the tests that compare with llama.cpp (tests/test_presets.cpp: presets made by
# llama.cpp's own quantizer, its greedy ids) and for `vkspec bench --peer .peer`. Idempotent; needs node and
# npm (the tests that use it skip with a message without them). It also takes llama.cpp's test vocabularies
# of other families (models/ggml-vocab-*.gguf with their .inp/.out cases) out of the package's source bundle
# into .peer/vocab/, for tests/test_tokenizer.cpp.   scripts/install-peer.sh [SHARED_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${1:-../shared}
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "install-peer: node/npm not found; tests against llama.cpp will be skipped" >&2
  exit 0
fi
if [ -f .peer/package.json ] && cmp -s "$shared/tools/peer/package.json" .peer/package.json && [ -d .peer/node_modules/node-llama-cpp ]; then
  echo "install-peer: .peer is up to date"
else
  rm -rf .peer
  cp -r "$shared/tools/peer" .peer
  chmod -R u+w .peer
  (cd .peer && npm install --no-audit --no-fund --loglevel=error)
  echo "install-peer: installed into .peer"
fi
bundle=.peer/node_modules/node-llama-cpp/llama/gitRelease.bundle
if [ ! -f .peer/vocab/ggml-vocab-phi-3.gguf ] && [ -f "$bundle" ] && command -v git >/dev/null; then
  src=$(mktemp -d)
  git clone -q --no-checkout "$bundle" "$src/llama.cpp"
  rm -rf .peer/vocab .peer/vocab.tmp
  mkdir -p .peer/vocab.tmp
  for v in qwen2 starcoder refact phi-3; do
    for ext in "" .inp .out; do
      git -C "$src/llama.cpp" show "HEAD:models/ggml-vocab-$v.gguf$ext" > ".peer/vocab.tmp/ggml-vocab-$v.gguf$ext"
    done
  done
  rm -rf "$src"
  mv .peer/vocab.tmp .peer/vocab
  echo "install-peer: llama.cpp's test vocabularies in .peer/vocab"
fi
