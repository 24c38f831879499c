#!/usr/bin/env python3
# A greedy stream of 1500 tokens beside a long embedding on a running `vkspec serve`: the largest and median gap
# between two of the stream's events, and the embedding's time (docs/PERFORMANCE.md, thirteenth session).
# usage: embed_stall.py PORT TEXT_FILE
import http.client, json, sys, threading, time
port = int(sys.argv[1]); text = open(sys.argv[2]).read()
gaps = []; t_embed = {}
def stream():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", json.dumps({"prompt": "def fibonacci(n):\n", "max_tokens": 1500, "temperature": 0, "ignore_eos": True, "stream": True}), {"Content-Type": "application/json"})
    r = c.getresponse(); last = None
    for line in r:
        if line.startswith(b"data: "):
            now = time.time()
            if last is not None: gaps.append(now - last)
            last = now
def embed():
    time.sleep(1.0)
    t0 = time.time()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/embeddings", json.dumps({"input": text}), {"Content-Type": "application/json"})
    r = c.getresponse(); r.read(); t_embed["s"] = time.time() - t0
a = threading.Thread(target=stream); b = threading.Thread(target=embed); a.start(); b.start(); a.join(); b.join()
gaps.sort()
print(json.dumps({"max_gap_s": round(gaps[-1], 3), "median_gap_s": round(gaps[len(gaps)//2], 3), "embed_s": round(t_embed["s"], 2), "events": len(gaps) + 1}))
