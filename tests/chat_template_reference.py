#!/usr/bin/env python3
"""The reference renderer for tests/test_chat_template.cpp: chat templates rendered the way Hugging Face
transformers renders them (jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the
loopcontrols extension; tojson without ASCII escaping; globals raise_exception and strftime_now, the latter
reading VKSPEC_TODAY=YYYY-MM-DD when set).

stdin:  a JSON array of cases {"template": "...", "vars": {...}}
stdout: a JSON array, one entry per case: {"ok": true, "text": "..."} or {"ok": false, "error": "..."}
"""
import datetime
import json
import os
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    today = os.environ.get("VKSPEC_TODAY")
    now = datetime.datetime.strptime(today, "%Y-%m-%d") if today else datetime.datetime.now()
    return now.strftime(fmt)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    results = []
    for case in json.load(sys.stdin):
        try:
            text = env.from_string(case["template"]).render(**case["vars"])
            results.append({"ok": True, "text": text})
        except Exception as e:  # every failure of the template counts: syntax, undefined, type, raise_exception
            results.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
