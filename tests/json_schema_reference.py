# The reference validator of vkspec's JSON schema tests (tests/test_cli.cpp, tests/test_constraints.cpp):
# python3-jsonschema (Debian's python3-jsonschema), patterns through Python's `re`. Reads
# [{"schema": ..., "text": "..."}] on stdin, prints [{"valid": bool, "error": "..."}]: the text must parse as
# JSON and be valid under the schema (the validator its $schema names, else 2020-12), its formats checked.
# jsonschema checks some formats only when optional packages are present; the ones vkspec generates are
# checked here by the standard library alone (its calendar, uuid, ipaddress and email parsers), strictly.
import datetime
import ipaddress
import json
import re
import sys
import uuid
from email.headerregistry import Address

import jsonschema

checker = jsonschema.FormatChecker()


def date(s):
    return re.fullmatch(r"\d{4}-\d{2}-\d{2}", s, re.ASCII) is not None and bool(datetime.date.fromisoformat(s))


def time(s):
    m = re.fullmatch(r"(\d{2}:\d{2}:\d{2}(?:\.\d+)?)(Z|[+-]\d{2}:\d{2})", s, re.ASCII)
    return m is not None and bool(datetime.time.fromisoformat(m[1] + (m[2] if m[2] != "Z" else "+00:00")))


def date_time(s):
    day, t, clock = s.partition("T")
    return t == "T" and date(day) and time(clock)


def uuid_(s):
    return re.fullmatch(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}", s) is not None and bool(uuid.UUID(s))


def ipv4(s):
    return bool(ipaddress.IPv4Address(s))


def email(s):
    a = Address(addr_spec=s)
    return a.addr_spec == s and "." in a.domain


for name, check in [("date", date), ("time", time), ("date-time", date_time), ("uuid", uuid_), ("ipv4", ipv4),
                    ("email", email)]:
    checker.checks(name, raises=Exception)(check)   # (a parser error of any kind: not that format)

out = []
for case in json.load(sys.stdin):
    try:
        value = json.loads(case["text"])
        cls = jsonschema.validators.validator_for(case["schema"], default=jsonschema.Draft202012Validator)
        cls(case["schema"], format_checker=checker).validate(value)
        out.append({"valid": True, "error": ""})
    except (ValueError, jsonschema.ValidationError) as e:
        out.append({"valid": False, "error": str(e)[:300]})
json.dump(out, sys.stdout)
