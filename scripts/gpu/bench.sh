#!/bin/bash
# On a GPU machine (the device tool): vkspec bench next to llama.cpp's Vulkan backend (llama_driver, built
# against the peer's llama.h and carried with its linux-x64-vulkan libraries) on the same prompt ids.
#   scripts/gpu/bench.sh OUTDIR MODEL [DRAFT]      (from the repository root, after `. scripts/gpu/suite.sh`)
set -u
out=$1; m=$2; d=${3:-}
name=$(basename "$m" .gguf)
ids=$(build/vkspec tokenize -m "$m" -f .gpu/prompt.txt --json | tr -d '[] \n')
n_prompt=$(echo "$ids" | tr ',' '\n' | wc -l)
for rep in 1 2; do   # interleaved: vkspec, llama.cpp, vkspec, llama.cpp
  build/vkspec bench -m "$m" ${d:+-md "$d"} -p 0 -f .gpu/prompt.txt -n 128 --reps 5 --json > "$out/$name.vkspec.$rep.json" 2>>"$out/$name.err"
  .gpu/llama/llama_driver "$m" "$ids" 128 5 > "$out/$name.llama.$rep.json" 2>>"$out/$name.err"
done
echo "$name prompt=$n_prompt"
for rep in 1 2; do
  python3 - "$out/$name.vkspec.$rep.json" "$out/$name.llama.$rep.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1])); l = json.load(open(sys.argv[2]))
p = v["plain"]; s = v.get("speculative", {})
print("  vkspec prefill %.0f decode %.1f (%.1f dispatches, %.2f waits, %.2f queue submissions per token) | llama.cpp prefill %.0f decode %.1f | ratio prefill %.2f decode %.2f%s" % (
  p["prefill_tok_s"], p["decode_tok_s"], p.get("dispatches_per_token", 0), p.get("waits_per_token", 0), p.get("queue_submissions_per_token", 0),
  l["prefill_tok_s"], l["decode_tok_s"], p["prefill_tok_s"] / l["prefill_tok_s"], p["decode_tok_s"] / l["decode_tok_s"],
  " | spec decode %.1f (x%.2f, accept %.2f)" % (s["decode_tok_s"], v["speedup"], s["acceptance_rate"]) if s else ""))
PY
done
