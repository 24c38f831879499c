#!/usr/bin/env bash
# Each model family at its real small shape (random weights, tests/make_shape_model.cpp) beside llama.cpp (the
# peer, CPU, one thread) in the same run: greedy ids equal to llama.cpp's for 64 tokens after two prompts, and
# decode and prefill speed as ratios (`vkspec bench --peer`). Models are written once into DIR.
#   scripts/bench/families.sh [DIR] [QUANT]   (from the repository root, after building and scripts/install-peer.sh;
#                                              DIR defaults to /tmp/vkspec-families, QUANT to Q4_K_M)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-/tmp/vkspec-families}; quant=${2:-Q4_K_M}
mkdir -p "$dir"
V=../shared/tokenizer-tests Q=.peer/vocab/ggml-vocab-qwen2.gguf
# name, shape, vocabulary
families=("llama-1b 1b $V/ggml-vocab-llama-bpe.gguf" "qwen2-0.5b qwen2-0.5b $Q" "qwen3-0.6b qwen3-0.6b $Q"
          "gemma3-1b gemma3-1b $V/ggml-vocab-llama-spm.gguf" "gemma2-2b gemma2-2b $V/ggml-vocab-llama-spm.gguf")
# Where vkspec's and llama.cpp's greedy ids part (if they do), llama.cpp's own logits of the two choices there:
# a gap within quantization noise (< 0.15) is a near-tie of random weights, not a difference of the passes.
parting() {
  local m=$1 file=$2 prompt ours theirs
  prompt=$(build/vkspec tokenize -m "$m" -f "$file" --json | tr -d '[] \n')
  ours=$(build/vkspec run -m "$m" -f "$file" -n 64 --temp 0 --ignore-eos --json 2>/dev/null | python3 -c "import json,sys; print(','.join(map(str, json.load(sys.stdin)['ids'])))")
  theirs=$(node .peer/peer.mjs --model "$m" --gpu false --threads 1 --runs 1 --ignore-eos --n 64 --prompt-ids "$prompt" 2>/dev/null |
           python3 -c "import json,sys; print(','.join(map(str, json.load(sys.stdin)['ids'])))")
  python3 - "$m" "$prompt" "$ours" "$theirs" <<'PY'
import json, os, subprocess, sys
m, prompt, ours, theirs = sys.argv[1], sys.argv[2].split(','), sys.argv[3].split(','), sys.argv[4].split(',')
k = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
if k is None: sys.exit(0)
out = subprocess.run(['node', 'tests/peer_logits.mjs', m, ','.join(prompt + ours[:k]), ours[k] + ',' + theirs[k]],
                     capture_output=True, text=True, env=dict(os.environ, VKSPEC_PEER=os.path.abspath('.peer')))
r = json.loads(out.stdout)
gap = r['logits'][theirs[k]] - r['logits'][ours[k]]
print('             parting at %d: llama.cpp\'s logits of its choice and of vkspec\'s differ by %.3f (%s)' % (
  k, gap, 'a near-tie' if gap < 0.15 else 'NOT a near-tie'))
PY
}

for f in "${families[@]}"; do
  read -r name shape vocab <<<"$f"
  m="$dir/$name-$quant.gguf"
  if [ ! -f "$m" ]; then
    build/tests/vkspec-shape "$dir/$name-f16.gguf" "$vocab" "$shape" f16
    python3 .peer/quantize.py "$dir/$name-f16.gguf" "$m" "$quant" > /dev/null 2>&1
    rm "$dir/$name-f16.gguf"
  fi
  for prompt in code1 prose; do
    build/vkspec bench -m "$m" -p 0 -f "scripts/bench/prompts/$prompt.txt" -n 64 --reps 1 --peer .peer --json 2>/dev/null |
      python3 -c "
import json, sys
v = json.load(sys.stdin); p = v['plain']; l = v['llama_cpp']
print('%-12s %-6s %3d prompt tokens  ids equal %2d/64  decode %5.2f tok/s (x%.2f)  prefill %6.1f tok/s (x%.2f)' % (
  '$name', '$prompt', v['prompt_tokens'], l['same_leading_ids'], p['decode_tok_s'], p['decode_tok_s'] / l['decode_tok_s'],
  p['prefill_tok_s'], p['prefill_tok_s'] / l['prefill_tok_s']))"
    parting "$m" "scripts/bench/prompts/$prompt.txt"
  done
done
