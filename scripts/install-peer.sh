#!/usr/bin/env bash
# Installs the llama.cpp peer (../shared/tools/peer: npm's node-llama-cpp with prebuilt CPU and Vulkan
# llama.cpp) into .peer/, for the tests that compare with llama.cpp (tests/test_presets.cpp: presets made by
# llama.cpp's own quantizer, its greedy ids) and for `vkspec bench --peer .peer`. Idempotent; needs node and
# npm (the tests that use it skip with a message without them).   scripts/install-peer.sh [SHARED_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${1:-../shared}
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "install-peer: node/npm not found; tests against llama.cpp will be skipped" >&2
  exit 0
fi
if [ -f .peer/package.json ] && cmp -s "$shared/tools/peer/package.json" .peer/package.json && [ -d .peer/node_modules/node-llama-cpp ]; then
  echo "install-peer: .peer is up to date"
  exit 0
fi
rm -rf .peer
cp -r "$shared/tools/peer" .peer
chmod -R u+w .peer
(cd .peer && npm install --no-audit --no-fund --loglevel=error)
echo "install-peer: installed into .peer"
