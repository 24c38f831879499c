#!/usr/bin/env python3
"""Multi-turn chat against `vkspec serve` with and without the prompt cache (docs/PERFORMANCE.md).

A client that resends the whole conversation each turn: a long system prompt, then TURNS turns of 16
greedy tokens, each appending the reply and a short user message. Servers with --prompt-cache 4 and 0 are
started in turn (interleaved, ROUNDS rounds); prints the median request seconds per turn and the prompt
tokens shared from the cache.
"""
import argparse, json, statistics, subprocess, time, urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("--vkspec", default="build/vkspec")
ap.add_argument("--model", default="../shared/models/pycode-target-f16.gguf")
ap.add_argument("--chat-template", default="../shared/chat-templates/meta-llama-Llama-3.2-3B-Instruct.jinja")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--turns", type=int, default=4)
ap.add_argument("--port", type=int, default=8190)
a = ap.parse_args()


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t = time.time()
    r = json.load(urllib.request.urlopen(req))
    return time.time() - t, r


system = "You are a careful Python reviewer. " + " ".join(
    f"Rule {i}: keep function number {i} short and name its arguments clearly." for i in range(40))
res = {}
for rnd in range(a.rounds):
    for cache in ("4", "0"):
        port = a.port + rnd * 2 + (cache == "0")
        p = subprocess.Popen([a.vkspec, "serve", "-m", a.model, "--port", str(port), "--parallel", "2",
                              "--prompt-cache", cache, "--ctx", "2048", "--chat-template", a.chat_template, "--report-cache"],
                             stderr=subprocess.DEVNULL)
        try:
            for _ in range(600):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health")
                    break
                except Exception:
                    time.sleep(0.1)
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": "def add(a, b):"}]
            turns = []
            for turn in range(a.turns):
                s, r = post(port, {"messages": msgs, "max_tokens": 16, "temperature": 0})
                msgs += [r["choices"][0]["message"], {"role": "user", "content": f"and now step {turn}"}]
                turns.append((s, r["usage"]["prompt_tokens"], r["vkspec"]["choices"][0]["shared_prompt_tokens"]))
            res.setdefault(cache, []).append(turns)
        finally:
            p.terminate()
            p.wait()
for cache, runs in res.items():
    for turn in range(a.turns):
        print(f"--prompt-cache {cache} turn {turn + 1}: prompt {runs[0][turn][1]} shared {runs[0][turn][2]} "
              f"median request s {statistics.median(r[turn][0] for r in runs):.3f}")
