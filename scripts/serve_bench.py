#!/usr/bin/env python3
"""Load generator for OpenAI-compatible servers: aggregate tokens/s and per-request latency at several
numbers of concurrent streams, for `vkspec serve` (plain and speculative) and llama.cpp's `llama-server` on
the same GGUF, interleaved round by round (the machines are noisy: medians over rounds, ratios per round).

    scripts/serve_bench.py --vkspec build/vkspec --model M.gguf [--draft D.gguf] [--ngram]
                           [--llama-server PATH] [--compare OTHER/vkspec] [--streams 1,4,8,16] [--n 64]
                           [--rounds 3] [--ctx 512] [--temperature T] [--json]

Each stream sends the same number of requests one after another (a different prompt each, greedy unless
--temperature is given (then seeded by the request's index), `ignore_eos` so every request generates
exactly --n tokens). --compare runs a second vkspec binary the same way in every round (an A/B of two
builds). Standard library only.
"""
import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

PROMPTS = [
    "def parse_args(argv):\n", "class Cache:\n    def __init__(self, size):\n", "import os\nimport sys\n\n",
    "for path in paths:\n", "    with open(filename) as f:\n", "def main():\n    ", "if __name__ == '__main__':\n",
    "    return self._", "try:\n    import json\nexcept ImportError:\n", "def test_", "    @property\n    def ",
    "# Copyright", "    raise ValueError(", "while True:\n", "    for key, value in ", "lambda x: ",
]


def start(cmd, ready_pattern, log_path):
    log = open(log_path, "w")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    port = None
    for _ in range(1200):
        time.sleep(0.1)
        text = open(log_path, errors="replace").read()
        m = re.search(ready_pattern, text)
        if m:
            port = int(m.group(1))
        if port:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return p, port
            except OSError:
                pass
        if p.poll() is not None:
            break
    p.kill()
    raise SystemExit(f"server did not start: {' '.join(cmd)}\n{open(log_path, errors='replace').read()[-2000:]}")


def stop(p):
    os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)


def one_request(port, prompt, n, temperature=0.0, seed=0):
    """Streams one completion; returns (tokens, seconds to first token, seconds in all)."""
    body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": temperature, "seed": seed, "stream": True,
                       "ignore_eos": True, "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"HTTP {r.status}: {r.read()[:500]!r}")
    first = None
    events = 0
    usage = None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        j = json.loads(line[6:])
        if j.get("usage"):
            usage = j["usage"]["completion_tokens"]
        if j.get("choices") and (j["choices"][0].get("text") or "") != "":
            events += 1
            if first is None:
                first = time.perf_counter() - t0
    total = time.perf_counter() - t0
    return (usage if usage is not None else events), first or total, total


def level(port, streams, n, requests_per_stream, temperature):
    results, threads = [], []
    lock = threading.Lock()

    def worker(k):
        for i in range(requests_per_stream):
            j = k * requests_per_stream + i
            out = one_request(port, PROMPTS[j % len(PROMPTS)], n, temperature, j)
            with lock:
                results.append(out)

    t0 = time.perf_counter()
    for k in range(streams):
        threads.append(threading.Thread(target=worker, args=(k,)))
        threads[-1].start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    tokens = sum(r[0] for r in results)
    return {"streams": streams, "requests": len(results), "tokens": tokens, "wall_s": wall, "tok_s": tokens / wall,
            "ttft_s_median": statistics.median(r[1] for r in results),
            "latency_s_median": statistics.median(r[2] for r in results)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vkspec", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--draft", help="draft model for a speculative vkspec server")
    ap.add_argument("--ngram", action="store_true", help="n-gram drafting for the speculative vkspec server (with --draft: lookup first)")
    ap.add_argument("--llama-server", help="llama.cpp's llama-server binary, run on the same file")
    ap.add_argument("--llama-threads", type=int, default=1)
    ap.add_argument("--streams", default="1,4,8,16")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--requests", type=int, default=2, help="requests per stream")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--temperature", type=float, default=0.0, help="sampling temperature of every request (0: greedy)")
    ap.add_argument("--compare", help="a second vkspec binary, run the same way in every round")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    levels = [int(s) for s in a.streams.split(",")]
    parallel = max(levels)
    tmp = tempfile.mkdtemp(prefix="serve-bench-")

    servers = {"vkspec": [a.vkspec, "serve", "-m", a.model, "--port", "0", "--parallel", str(parallel), "--ctx", str(a.ctx)]}
    if a.compare:
        servers["vkspec-compare"] = [a.compare] + servers["vkspec"][1:]
    for name in list(servers):
        if a.draft or a.ngram:
            servers[name + "-spec"] = servers[name] + (["-md", a.draft] if a.draft else []) + (["--draft", "ngram"] if a.ngram else [])
    if a.llama_server:
        servers["llama-server"] = [a.llama_server, "-m", a.model, "--port", "PORT", "--host", "127.0.0.1", "-np", str(parallel),
                                   "-c", str(a.ctx * parallel), "-t", str(a.llama_threads), "-tb", str(a.llama_threads),
                                   "--no-warmup", "-ngl", "0"]
    figures = {name: {s: [] for s in levels} for name in servers}
    for rnd in range(a.rounds):
        for name, cmd in servers.items():
            log = os.path.join(tmp, f"{name}-{rnd}.log")
            if name == "llama-server":
                port = 18000 + rnd
                cmd = [c if c != "PORT" else str(port) for c in cmd]
                p, port = start(cmd, rf"listening on http://127\.0\.0\.1:({port})", log)
            else:
                p, port = start(cmd, r"listening on http://127\.0\.0\.1:([0-9]+)", log)
            try:
                # Warm-up at every level: a step of several rows builds pipelines (and on a GPU compiles
                # shaders) that one stream never needs, which would otherwise land in the first round's figure.
                for s in levels:
                    level(port, s, 8, 1, a.temperature)
                for s in levels:
                    figures[name][s].append(level(port, s, a.n, a.requests, a.temperature))
                    print(f"round {rnd} {name} {s} streams: {figures[name][s][-1]['tok_s']:.1f} tok/s", file=sys.stderr)
            finally:
                stop(p)

    out = {"model": a.model, "n": a.n, "requests_per_stream": a.requests, "rounds": a.rounds,
           "temperature": a.temperature, "servers": {}}
    for name in servers:
        out["servers"][name] = [{"streams": s,
                                 "tok_s_median": statistics.median(f["tok_s"] for f in figures[name][s]),
                                 "ttft_s_median": statistics.median(f["ttft_s_median"] for f in figures[name][s]),
                                 "latency_s_median": statistics.median(f["latency_s_median"] for f in figures[name][s])}
                                for s in levels]
        base = out["servers"][name][0]["tok_s_median"]
        for row in out["servers"][name]:
            row["vs_1_stream"] = row["tok_s_median"] / base
    if "llama-server" in servers:
        for name in servers:
            if name == "llama-server":
                continue
            for row, peer in zip(out["servers"][name], out["servers"]["llama-server"]):
                row["vs_llama_server"] = row["tok_s_median"] / peer["tok_s_median"]
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print("| server | streams | tokens/s (median) | x 1 stream | median TTFT s | median latency s |")
        print("|---|---|---|---|---|---|")
        for name, rows in out["servers"].items():
            for r in rows:
                print(f"| {name} | {r['streams']} | {r['tok_s_median']:.1f} | {r['vs_1_stream']:.2f} | "
                      f"{r['ttft_s_median']:.3f} | {r['latency_s_median']:.3f} |")


if __name__ == "__main__":
    main()
