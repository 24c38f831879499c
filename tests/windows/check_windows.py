#!/usr/bin/env python3
"""The Windows package under Wine against the Linux build (scripts/test-windows.sh runs it under xvfb-run).

    check_windows.py PACKAGE_DIR LINUX_BUILD_DIR SHARED_DIR TMP_DIR NPM_OPENAI_DIR

PACKAGE_DIR is the unpacked zip (vkspec.exe, vkspec.dll, generate.exe): what a Windows user runs.
Each check prints one line; the exit status is the number of failed checks. What is checked:
  - the shared chat templates render as python3-jinja2 renders them (tests/chat_template_reference.py);
  - `vkspec.exe run` gives exactly the Linux binary's greedy tokens on the shared models, plain, with a
    draft model (-md) and with prompt lookup (--draft ngram), and the C API example (generate.exe on
    vkspec.dll) prints the Linux example's text;
  - paths with characters outside every ANSI code page (a model, a prompt file and a --prompt-cache
    session under .../Zoë/モデル/), the session written and reread by a second run;
  - bad input: a one-line error and exit 1, never a crash, a hang or a half-written file;
  - Ctrl-C in `chat` stops the reply, not the session;
  - `vkspec.exe serve` answers the official openai npm client on loopback and stops on Ctrl-C.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

PKG, LINUX, SHARED, TMP, NPM = (os.path.abspath(a) for a in sys.argv[1:6])
EXE = os.path.join(PKG, "vkspec.exe")
ENV = dict(os.environ, WINEDEBUG="-all", LANG="C.UTF-8", LC_ALL="C.UTF-8")
failures = []


def model(name):
    return os.path.join(SHARED, "models", name)


def check(name, ok, detail=""):
    print(("ok    " if ok else "FAIL  ") + name + ("" if ok else ": " + detail), flush=True)
    if not ok:
        failures.append(name)


def run(argv, timeout=300, stdin=None):
    """(exit code, stdout, stderr) of a command; a timeout is a failure with code None."""
    try:
        p = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout, env=ENV)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        return None, "", "timed out after %d s" % timeout


def wine(args, **kw):
    return run(["wine", EXE] + args, **kw)


def no_crash(err):
    """Wine's own report of an unhandled exception, or an X error when it opens a dialog."""
    return "Unhandled" not in err and "wine: " not in err


def run_json(argv):
    code, out, err = argv
    try:
        return json.loads(out) if code == 0 else {"error": err, "exit": code}
    except json.JSONDecodeError:
        return {"error": "not JSON: " + out[:200] + err[-300:]}


# ---- the same greedy tokens as the Linux build ----
cases = [
    ("stories260K", ["-m", model("stories260K.gguf"), "-p", "Once upon a time", "-n", "64"]),
    ("llama-2-tiny-random (32k SentencePiece, f16)", ["-m", model("llama-2-tiny-random.gguf"), "-p", "Hello world", "-n", "32"]),
    ("pycode target", ["-m", model("pycode-target-f16.gguf"), "-p", "def fibonacci(n):\n", "-n", "64"]),
    ("pycode target, draft model (-md)", ["-m", model("pycode-target-f16.gguf"), "-md", model("pycode-draft-f16.gguf"),
                                          "-p", "def fibonacci(n):\n", "-n", "64"]),
    ("pycode target, prompt lookup (--draft ngram)", ["-m", model("pycode-target-f16.gguf"), "--draft", "ngram",
                                                      "-p", "import os\nimport sys\nimport os\n", "-n", "64"]),
]
for name, args in cases:
    args = ["run"] + args + ["--temp", "0", "--ignore-eos", "--json"]
    lin = run_json(run([os.path.join(LINUX, "vkspec")] + args))
    win = run_json(wine(args))
    same = "ids" in lin and lin.get("ids") == win.get("ids") and lin.get("prompt_ids") == win.get("prompt_ids")
    check("greedy tokens equal Linux's: " + name, same, "linux %s / windows %s" % (lin.get("ids", lin), win.get("ids", win)))
    if "-md" in args or "--draft" in args:
        spec = win.get("speculative", {})
        check("speculated: " + name, spec.get("verify_passes", 0) > 0 and spec.get("drafted", 0) > 0, json.dumps(spec))

code, lin_text, _ = run([os.path.join(LINUX, "examples", "generate"), model("stories260K.gguf"), "Once upon a time", "32"])
code_w, win_text, err = run(["wine", os.path.join(PKG, "generate.exe"), model("stories260K.gguf"), "Once upon a time", "32"])
check("the C API example on vkspec.dll prints the Linux example's text (its C runtime writes \\r\\n)",
      code == 0 and code_w == 0 and win_text.replace("\r\n", "\n") == lin_text,
      "linux %r / windows exit %s %r %s" % (lin_text, code_w, win_text, err[-300:]))

# ---- chat templates: vkspec.exe's interpreter against python3-jinja2, run here on the Linux side ----
messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Grüße, 世界! Write 2+2."},
            {"role": "assistant", "content": "4"}, {"role": "user", "content": "And ✓?"}]
messages_file = os.path.join(TMP, "messages ü.json")
with open(messages_file, "w", encoding="utf-8") as f:
    json.dump(messages, f, ensure_ascii=False)
templates = os.path.join(SHARED, "chat-templates")
reference = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chat_template_reference.py")
today = dict(ENV, VKSPEC_TODAY="2026-02-03")   # Llama 3.x print strftime_now's date
for name in sorted(n for n in os.listdir(templates) if n.endswith(".jinja")):
    source = open(os.path.join(templates, name), encoding="utf-8").read()
    case = [{"template": source, "vars": {"messages": messages, "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"}}]
    ref = json.loads(subprocess.run(["python3", reference], input=json.dumps(case).encode(), capture_output=True, env=today).stdout)[0]
    p = subprocess.run(["wine", EXE, "apply-template", "-m", model("stories260K.gguf"), "--chat-template",
                        os.path.join(templates, name), "--messages", messages_file, "--json"], capture_output=True, env=today)
    err = p.stderr.decode("utf-8", "replace")
    if ref["ok"]:
        got = json.loads(p.stdout.decode("utf-8")).get("prompt") if p.returncode == 0 else None
        check("chat template equals jinja2's rendering: " + name, got == ref["text"], "%r / %r %s" % (got, ref["text"], err[-200:]))
    else:   # (Gemma 2 refuses a system message) the same refusal, one line, exit 1
        why = ref["error"].split(": ", 1)[-1]
        check("chat template raises as jinja2 does: " + name, p.returncode == 1 and why in err, "exit %s %r / %r" % (p.returncode, err, why))

# ---- paths beyond ASCII: C:\Users\Zoë\モデル\ ----
home = os.path.join(TMP, "Zoë", "モデル")
shutil.rmtree(os.path.join(TMP, "Zoë"), ignore_errors=True)
os.makedirs(home)
shutil.copy(model("stories260K.gguf"), os.path.join(home, "stories260K.gguf"))
with open(os.path.join(home, "prompt ü.txt"), "w", encoding="utf-8") as f:
    f.write("Once upon a time")
session = os.path.join(home, "session ✓.kv")
args = ["run", "-m", os.path.join(home, "stories260K.gguf"), "-f", os.path.join(home, "prompt ü.txt"), "-n", "24",
        "--temp", "0", "--ignore-eos", "--json"]
lin = run_json(run([os.path.join(LINUX, "vkspec")] + args))
first = run_json(wine(args + ["--prompt-cache", session]))
check("a model and a prompt file under Zoë/モデル load", "ids" in first and first["ids"] == lin.get("ids"), str(first)[:300])
check("--prompt-cache writes its session file under Zoë/モデル", os.path.isfile(session) and os.path.getsize(session) > 100)
check("no temporary file is left beside the session", sorted(os.listdir(home)) == sorted(["stories260K.gguf", "prompt ü.txt", "session ✓.kv"]),
      str(os.listdir(home)))
second = run_json(wine(args + ["--prompt-cache", session]))
check("the session file is reread by the next run", second.get("reused_tokens", 0) > 0 and second.get("ids") == lin.get("ids"),
      str(second)[:300])

# ---- bad input: one line, exit 1 ----
fifo = os.path.join(TMP, "prompt.fifo")
if os.path.exists(fifo):
    os.remove(fifo)
os.mkfifo(fifo)
with open(os.path.join(TMP, "not-a-model.gguf"), "w") as f:
    f.write("hello, I am not a GGUF file\n")
with open(os.path.join(TMP, "bad-session.kv"), "w") as f:
    f.write("hello, I am not a session\n")
stories = model("stories260K.gguf")
bad = [
    ("a prompt file that is a directory", ["run", "-m", stories, "-f", home], "is not a regular file"),
    ("a prompt file that is a named pipe", ["run", "-m", stories, "-f", fifo], "prompt file"),
    ("a model that is a named pipe", ["run", "-m", fifo, "-p", "hi"], fifo.split("/")[-1]),
    ("a missing model", ["run", "-m", os.path.join(TMP, "missing.gguf"), "-p", "hi"], "missing.gguf"),
    ("a model that is not GGUF", ["run", "-m", os.path.join(TMP, "not-a-model.gguf"), "-p", "hi"], "not-a-model.gguf"),
    ("a damaged --prompt-cache file", ["run", "-m", stories, "-p", "hi", "--prompt-cache", os.path.join(TMP, "bad-session.kv")],
     "not a vkspec session file"),
]
for name, args, want in bad:
    code, out, err = wine(args, timeout=60)
    lines = [l for l in err.splitlines() if l.strip() and "X connection" not in l and "XIO" not in l]
    ok = code == 1 and no_crash(err) and any(want in l for l in lines) and sum(l.startswith("vkspec: error") for l in lines) <= 1
    check("bad input gets a one-line error and exit 1: " + name, ok, "exit %s, stderr %r" % (code, err[-400:]))

args = ["run", "-m", stories, "--no-such-option"]
lin, win = run([os.path.join(LINUX, "vkspec")] + args), wine(args)
check("an unknown option: the Linux build's exit status and message", win[0] == lin[0] != 0 and lin[2].strip() in win[2],
      "linux %s %r / windows %s %r" % (lin[0], lin[2], win[0], win[2]))

# ---- Ctrl-C in chat stops the reply, not the session ----
chat = ["wine", EXE, "chat", "-m", model("pycode-target-f16.gguf"), "--chat-template",
        os.path.join(SHARED, "chat-templates", "meta-llama-Llama-3.2-3B-Instruct.jinja"), "-n", "100000", "--ctx", "2048",
        "--temp", "0"]
p = subprocess.Popen(chat, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
p.stdin.write(b"tell me a long story\n")
p.stdin.flush()
os.set_blocking(p.stdout.fileno(), False)
reply, start = b"", time.time()
while time.time() - start < 120 and len(reply) < 16:
    reply += p.stdout.read() or b""
    time.sleep(0.1)
time.sleep(0.5)
os.kill(p.pid, signal.SIGINT)   # Wine gives it to the program as a console Ctrl-C event
time.sleep(1)
try:
    out, err = p.communicate(input=b"/stats\n", timeout=120)
except subprocess.TimeoutExpired:
    p.kill()
    out, err = p.communicate()
err = err.decode("utf-8", "replace")
check("Ctrl-C in chat stops the reply, the session goes on", p.returncode == 0 and len(reply) >= 16 and
      "(reply stopped)" in err and "1 turns" in err, "exit %s, reply %r, stderr %r" % (p.returncode, reply[:80], err[-400:]))

# ---- the server and the official openai client ----
log_path = os.path.join(TMP, "serve.log")
log = open(log_path, "wb")
server = subprocess.Popen(["wine", EXE, "serve", "--port", "0", "-m", model("pycode-target-f16.gguf"), "--ctx", "640",
                           "--parallel", "4", "--chat-template",
                           os.path.join(SHARED, "chat-templates", "meta-llama-Llama-3.2-3B-Instruct.jinja")],
                          stdout=log, stderr=log, env=ENV)
port, start = None, time.time()
while time.time() - start < 120 and port is None:
    text = open(log_path, encoding="utf-8", errors="replace").read()
    if "loaded (" in text and "listening on http://127.0.0.1:" in text:
        port = int(text.split("listening on http://127.0.0.1:")[1].split()[0])
    time.sleep(0.2)
check("vkspec.exe serve starts", port is not None, open(log_path, errors="replace").read()[-400:])
if port is not None:
    code, out, err = run(["node", os.path.join(os.path.dirname(__file__), "..", "openai_client.mjs"), NPM,
                          "http://127.0.0.1:%d/v1" % port, "pycode-target-f16.gguf"], timeout=300)
    j = json.loads(out) if code == 0 else {}
    import urllib.request
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, method="POST",
                                 data=json.dumps({"prompt": "def fibonacci(n):\n", "max_tokens": 12, "temperature": 0}).encode(),
                                 headers={"Content-Type": "application/json"})
    direct = json.loads(urllib.request.urlopen(req, timeout=120).read())
    lin = run_json(run([os.path.join(LINUX, "vkspec"), "run", "-m", model("pycode-target-f16.gguf"), "--ctx", "640",
                        "-p", "def fibonacci(n):\n", "-n", "12", "--temp", "0", "--ignore-eos", "--json"]))
    check("the openai client: completion, chat, stream, n=3, tool calls, models, embeddings",
          code == 0 and j.get("completion", {}).get("text") == direct["choices"][0]["text"] and
          j["stream"]["content"] == j["chat"]["content"] and j["n3"]["count"] == 3 and
          j["tool"]["finish_reason"] == "tool_calls" and j["models"] == ["pycode-target-f16.gguf"] and
          j["embeddings"]["count"] == 2, "exit %s %s %s" % (code, out[:300], err[-300:]))
    check("the server's greedy completion equals the Linux run's text", direct["choices"][0]["text"] == lin.get("text"),
          "%r / %r" % (direct["choices"][0]["text"], lin.get("text")))
    server.send_signal(signal.SIGINT)
try:
    server.wait(timeout=60)
except subprocess.TimeoutExpired:
    server.kill()
log.close()
text = open(log_path, encoding="utf-8", errors="replace").read()
check("Ctrl-C stops the server cleanly", server.returncode == 0 and "stopped (Ctrl-C)" in text, "exit %s %s" % (server.returncode, text[-300:]))

print("%d checks failed" % len(failures) if failures else "all checks passed")
sys.exit(len(failures))
