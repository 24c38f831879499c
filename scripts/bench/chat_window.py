#!/usr/bin/env python3
# A long Ollama /api/chat conversation on a running `vkspec serve` (one client, as Open WebUI or the ollama CLI
# send it: the whole conversation every turn): per turn the prompt's tokens, the tokens prefilled (the rest came
# from the prompt cache) and the time; totals at the end (docs/PERFORMANCE.md, fourteenth session).
# usage: chat_window.py PORT TURNS [NUM_PREDICT]
import http.client, json, sys, time
port, turns = int(sys.argv[1]), int(sys.argv[2]); num_predict = int(sys.argv[3]) if len(sys.argv) > 3 else 32
def call(method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request(method, path, json.dumps(body) if body is not None else None, {"Content-Type": "application/json"})
    return c.getresponse().read().decode()
def prefilled():
    for line in call("GET", "/metrics").split("\n"):
        if line.startswith("vkspec_prompt_tokens_prefilled_total "): return float(line.split()[1])
msgs = [{"role": "system", "content": "You are a helpful assistant who writes Python."}]
topics = ["parse a CSV file", "sort a list of dicts by key", "read JSON from a URL", "count words in a text",
          "merge two sorted lists", "find duplicates in a list", "flatten a nested list", "compute a moving average"]
total_prompt = total_prefilled = 0; t_all = time.time()
for t in range(turns):
    msgs.append({"role": "user", "content": "Turn %d: show me how to %s, with a short explanation." % (t, topics[t % len(topics)])})
    before = prefilled(); t0 = time.time()
    r = json.loads(call("POST", "/api/chat", {"messages": msgs, "stream": False,
                                              "options": {"num_predict": num_predict, "temperature": 0}}))
    if "message" not in r: sys.exit("turn %d: %s" % (t, r))
    got = prefilled() - before
    total_prompt += r["prompt_eval_count"]; total_prefilled += got
    print(json.dumps({"turn": t, "prompt": r["prompt_eval_count"], "prefilled": int(got), "s": round(time.time() - t0, 2)}))
    msgs.append({"role": "assistant", "content": r["message"]["content"]})
print(json.dumps({"turns": turns, "prompt_tokens": total_prompt, "prefilled_tokens": int(total_prefilled),
                  "seconds": round(time.time() - t_all, 1)}))
