#!/usr/bin/env python3
"""Checks the corpus of tests/schemas/*.json against the jsonschema package
(the reference; offline only, tests/test_json_schema.c does not need it).

Each file holds a schema and sample documents:
  valid            valid by the schema; the grammar must accept them
  invalid          invalid by the schema; the grammar must reject them
  grammar_rejects  valid by the schema but outside the grammar's subset
                   (member order, extra members first, ...): rejected
  grammar_accepts  invalid by the schema through a keyword the grammar cannot
                   express (named in "warnings"): accepted
  valid_text       exact texts, valid by the schema; accepted
  rejects_text     exact texts the grammar rejects (whitespace beyond the
                   bound, bad JSON, forms outside the subset); not checked here
  warnings         the warnings the conversion must give, exactly
  reference        "openapi": the schema uses OpenAPI's nullable, which
                   jsonschema ignores, so the file is not checked here
Formats are checked (FormatChecker of the schema's draft)."""
import glob, json, os, sys

import jsonschema

def main():
    here = os.path.dirname(os.path.abspath(__file__))
    bad = 0
    files = sorted(glob.glob(os.path.join(here, "*.json")))
    for path in files:
        d = json.load(open(path, encoding="utf-8"))
        if d.get("reference") == "openapi":
            continue
        schema = d["schema"]
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        v = cls(schema, format_checker=cls.FORMAT_CHECKER)
        docs = [(x, True, k) for k in ("valid", "grammar_rejects") for x in d.get(k, [])]
        docs += [(x, False, k) for k in ("invalid", "grammar_accepts") for x in d.get(k, [])]
        docs += [(json.loads(t), True, "valid_text") for t in d.get("valid_text", [])]
        for doc, want, kind in docs:
            if v.is_valid(doc) != want:
                print(f"{os.path.basename(path)}: {kind} {json.dumps(doc)} is "
                      f"{'invalid' if want else 'valid'} by jsonschema")
                bad += 1
    print(f"{len(files)} files, {bad} disagreements")
    return 1 if bad else 0

if __name__ == "__main__":
    sys.exit(main())
