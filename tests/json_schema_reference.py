# The reference validator of tests/test_cli.cpp's JSON schema cases: python3-jsonschema (Debian's
# python3-jsonschema). Reads [{"schema": ..., "text": "..."}] on stdin, prints [{"valid": bool, "error": "..."}]:
# the text must parse as JSON and be valid under the schema (the validator its $schema names, else 2020-12).
import json
import sys

import jsonschema

out = []
for case in json.load(sys.stdin):
    try:
        value = json.loads(case["text"])
        cls = jsonschema.validators.validator_for(case["schema"], default=jsonschema.Draft202012Validator)
        cls(case["schema"]).validate(value)
        out.append({"valid": True, "error": ""})
    except (ValueError, jsonschema.ValidationError) as e:
        out.append({"valid": False, "error": str(e)[:300]})
json.dump(out, sys.stdout)
