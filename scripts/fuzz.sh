#!/usr/bin/env bash
# Builds the GGUF parser fuzzer with clang's libFuzzer (+ASan/UBSan) and runs it for a fixed time,
# seeded with the shared GGUF files.   scripts/fuzz.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-30}"
if ! command -v clang++ >/dev/null; then echo "fuzz: clang++ not installed, skipping"; exit 0; fi
out=build-fuzz
mkdir -p "$out/corpus"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -DVK_NO_PROTOTYPES \
  -I. tests/fuzz/fuzz_gguf.cpp loader/gguf.cpp loader/model_file.cpp runtime/quant.cpp -o "$out/fuzz_gguf"
for f in ../shared/models/stories260K.gguf ../shared/tokenizer-tests/ggml-vocab-llama-spm.gguf; do
  [ -f "$f" ] && head -c 65536 "$f" > "$out/corpus/$(basename "$f").head"
done
"$out/fuzz_gguf" "$out/corpus" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -timeout=10
