#!/usr/bin/env bash
# Speculative decoding on the shared pycode pair with `vkspec bench` (plain and speculative interleaved in
# each process): the default prompt (greedy and T = 0.8), eight code prompts (geometric mean), n-gram drafts
# on a self-repeating prompt, and a prose prompt where the code-trained draft is mostly rejected.
#   scripts/bench/speculation.sh [REPS] [--lookup]   (from the repository root, after building)
#   --lookup   the draft model's rows with prompt lookup in front (-md DRAFT --draft ngram)
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=${1:-5}
M=../shared/models
T=$M/pycode-target-f16.gguf D=$M/pycode-draft-f16.gguf P=scripts/bench/prompts
lookup=()
[ "${2:-}" = "--lookup" ] && lookup=(--draft ngram)
row() {   # name, then bench arguments
  local name=$1; shift
  build/vkspec bench -m "$T" -n 128 --reps "$reps" --json "$@" 2>/dev/null | python3 -c "
import json, sys
v = json.load(sys.stdin); p = v['plain']; s = v['speculative']
print('%-14s plain %6.1f  spec %6.1f tok/s  x%.2f (device time predicts x%.2f)  acceptance %.2f  %.2f tok/verify  waits %.2f/%.2f  dispatches %.1f/%.1f' % (
  '$name', p['decode_tok_s'], s['decode_tok_s'], v['speedup'], v.get('predicted_speedup', 0), s['acceptance_rate'],
  s['tokens_per_verify'], p['waits_per_token'], s['waits_per_token'], p['dispatches_per_token'], s['dispatches_per_token']))"
}
row default -md "$D" "${lookup[@]}" -p 128
row default-T0.8 -md "$D" "${lookup[@]}" -p 128 --temp 0.8 --seed 1
for i in 1 2 3 4 5 6 7 8; do row "code$i" -md "$D" "${lookup[@]}" -p 0 -f "$P/code$i.txt"; done
row ngram-repeat --draft ngram -p 0 -f "$P/repeating.txt"
row prose -md "$D" "${lookup[@]}" -p 0 -f "$P/prose.txt"
