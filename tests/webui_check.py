#!/usr/bin/env python3
"""Drives vkspec serve's chat page in a real headless Chromium (Debian's `chromium`) over the DevTools protocol
on a pipe (--remote-debugging-pipe: JSON messages ended by NUL on fds 3 and 4), as a user would:

    webui_check.py PORT API_KEY PROFILE_DIR

Opens http://127.0.0.1:PORT/, sends a message before giving the API key (the page must show the server's
refusal), enters the key, sets temperature 0 and 12 tokens, sends "Hello" and watches the reply grow until the
page marks it done. Prints one JSON object: the model name the page shows, the refusal, the reply, how many
different lengths of it were seen while it streamed."""
import json
import os
import subprocess
import sys
import time

port, key, profile = sys.argv[1], sys.argv[2], sys.argv[3]
to_chrome_r, to_chrome_w = os.pipe()
from_chrome_r, from_chrome_w = os.pipe()


def child_fds():   # the browser reads commands on fd 3 and writes answers on fd 4 (dup2 makes them inheritable;
    a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)   # the pipes may be 3 or 4 already: dup2 onto itself would not)
    os.dup2(a, 3)
    os.dup2(b, 4)


chrome = subprocess.Popen(
    ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
     "--remote-debugging-pipe", "--user-data-dir=" + profile, "about:blank"],
    preexec_fn=child_fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
os.close(to_chrome_r)
os.close(from_chrome_w)
inbox = b""
next_id = 0


def call(method, params=None, session=None, timeout=30):
    global inbox, next_id
    next_id += 1
    msg = {"id": next_id, "method": method, "params": params or {}}
    if session:
        msg["sessionId"] = session
    os.write(to_chrome_w, json.dumps(msg).encode() + b"\0")
    deadline = time.time() + timeout
    while time.time() < deadline:
        while b"\0" in inbox:
            raw, inbox = inbox.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == next_id:
                if "error" in answer:
                    raise RuntimeError(method + ": " + json.dumps(answer["error"]))
                return answer["result"]
        chunk = os.read(from_chrome_r, 1 << 16)
        if not chunk:
            raise RuntimeError("chromium closed the pipe")
        inbox += chunk
    raise RuntimeError(method + ": no answer")


def page(expression, session):
    r = call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, session)
    return r["result"].get("value")


def until(expression, session, seconds=60, every=0.05, watch=None):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = page(expression, session)
        if watch:
            watch()
        if value:
            return value
        time.sleep(every)
    raise RuntimeError("timed out waiting for " + expression)


result = {}
try:
    target = call("Target.createTarget", {"url": "http://127.0.0.1:%s/" % port})["targetId"]
    session = call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    until("document.readyState === 'complete' && document.getElementById('model').textContent !== '…'", session)
    last_done = "(() => { const m = document.querySelectorAll('.msg'); const l = m[m.length - 1];"
    last_done += " return l && l.dataset.done ? {cls: l.className, text: l.textContent} : null; })()"
    # without the key: the server's refusal on the page
    page("document.getElementById('input').value = 'Hello'; document.getElementById('form').requestSubmit(); 1", session)
    refused = until(last_done, session)
    result["unauthorized"] = refused
    # the key, greedy sampling, 12 tokens; the model's name appears
    page("const k = document.getElementById('key'); k.value = %s; k.onchange();"
         "document.getElementById('temperature').value = '0'; document.getElementById('max_tokens').value = '12'; 1"
         % json.dumps(key), session)
    result["model"] = until("document.getElementById('model').dataset.id", session)
    page("document.getElementById('log').textContent = '';"
         "document.getElementById('input').value = 'Hello'; document.getElementById('form').requestSubmit(); 1", session)
    lengths = set()

    def watch():
        text = page("(() => { const m = document.querySelectorAll('.msg.assistant'); return m.length ? m[m.length - 1].textContent : ''; })()", session)
        lengths.add(len(text or ""))

    reply = until(last_done, session, watch=watch)
    result["reply"] = reply
    result["lengths_seen"] = len(lengths)
finally:
    try:
        call("Browser.close", timeout=5)
    except Exception:
        pass
    try:
        chrome.wait(timeout=10)
    except subprocess.TimeoutExpired:
        chrome.kill()
print(json.dumps(result))
