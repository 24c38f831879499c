#!/usr/bin/env bash
# Builds the GGUF parser, tokenizer, chat-template, server-request and grammar fuzzers with clang's libFuzzer (+ASan/UBSan) and runs each
# for a fixed time, seeded with the shared GGUF files and tokenizer test strings.   scripts/fuzz.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-30}"
if ! command -v clang++ >/dev/null; then echo "fuzz: clang++ not installed, skipping"; exit 0; fi
out=build-fuzz
mkdir -p "$out/corpus"
# The harnesses (tests/fuzz/CMakeLists.txt) link the layer libraries, built with clang and libFuzzer's
# instrumentation (+ASan/UBSan): only the layers they exercise are built, none of them Vulkan's.
CC=clang CXX=clang++ cmake -S . -B "$out" -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" \
  -DVKSPEC_FUZZ=ON -DVKSPEC_TESTS=OFF > "$out/configure.log" || { cat "$out/configure.log"; exit 1; }
cmake --build "$out" -j"$(nproc)" --target fuzz_gguf fuzz_tokenizer fuzz_chat_template fuzz_server_request fuzz_grammar
bin="$out/tests/fuzz"
# a seed with one small tensor of every quantized type (random blocks), so the decoders are reached at once
python3 - "$out/corpus/quantized.gguf" <<'PY'
import random, struct, sys
random.seed(1)
types = {2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 10: (256, 84), 11: (256, 110),
         12: (256, 144), 13: (256, 176), 14: (256, 210)}
def s(x): b = x.encode(); return struct.pack("<Q", len(b)) + b
head = b"GGUF" + struct.pack("<IQQ", 3, len(types), 1) + s("general.architecture") + struct.pack("<I", 8) + s("llama")
data, off = b"", 0
for code, (elems, size) in types.items():
    head += s("t%d" % code) + struct.pack("<I", 2) + struct.pack("<QQ", elems, 2) + struct.pack("<IQ", code, off)
    blob = bytes(random.getrandbits(8) for _ in range(2 * size))
    blob += b"\0" * (-len(blob) % 32)
    data += blob; off += len(blob)
head += b"\0" * (-len(head) % 32)
open(sys.argv[1], "wb").write(head + data)
PY
for f in ../shared/models/stories260K.gguf ../shared/tokenizer-tests/ggml-vocab-llama-spm.gguf; do
  [ -f "$f" ] && head -c 65536 "$f" > "$out/corpus/$(basename "$f").head"
done
"$bin/fuzz_gguf" "$out/corpus" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -timeout=10

# tokenizers: both vocabularies over arbitrary bytes (half the time)
mkdir -p "$out/corpus-tok"
for f in ../shared/tokenizer-tests/*.inp; do
  [ -f "$f" ] && split -b 2048 -d "$f" "$out/corpus-tok/$(basename "$f")."
done
VKSPEC_SHARED="$PWD/../shared" "$bin/fuzz_tokenizer" "$out/corpus-tok" -max_total_time="$(( (secs + 1) / 2 ))" \
  -max_len=8192 -rss_limit_mb=4096 -timeout=10

# chat templates: arbitrary template source rendered with a fixed conversation (half the time)
mkdir -p "$out/corpus-jinja"
for f in ../shared/chat-templates/*.jinja; do
  [ -f "$f" ] && cp "$f" "$out/corpus-jinja/"
done
"$bin/fuzz_chat_template" "$out/corpus-jinja" -max_total_time="$(( (secs + 1) / 2 ))" -max_len=8192 -rss_limit_mb=2048 -timeout=10

# server requests: arbitrary bodies through the OpenAI protocol layer (half the time)
mkdir -p "$out/corpus-server"
cp tests/fuzz/server-seeds/* "$out/corpus-server/"
VKSPEC_SHARED="$PWD/../shared" "$bin/fuzz_server_request" "$out/corpus-server" -max_total_time="$(( (secs + 1) / 2 ))" \
  -max_len=16384 -rss_limit_mb=2048 -timeout=10

# grammars: arbitrary GBNF text (or a JSON schema) and a text fed through it, JSON mode's recognizer over the
# same bytes (half the time)
mkdir -p "$out/corpus-grammar"
cp tests/fuzz/grammar-seeds/* "$out/corpus-grammar/"
"$bin/fuzz_grammar" "$out/corpus-grammar" -max_total_time="$(( (secs + 1) / 2 ))" -max_len=4096 -rss_limit_mb=2048 -timeout=10
