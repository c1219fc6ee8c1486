"""Validates JSON texts against JSON schemas with `jsonschema`, the reference implementation,
formats checked (tests/src/lib.rs: `json_schema_errors`).

Reads a JSON array of {"schema": ..., "text": "..."} on stdin; writes a JSON array with, for each
case, the list of its errors (empty: the text parses and the schema accepts it). A schema that is
not a valid schema is an error of its case.
"""
import json
import sys

import jsonschema


def errors(schema, text):
    try:
        instance = json.loads(text)
    except ValueError as e:
        return [f"not JSON: {e}"]
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as e:
        return [f"not a valid schema: {e.message}"]
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(instance)]


def main():
    cases = json.load(sys.stdin)
    json.dump([errors(c["schema"], c["text"]) for c in cases], sys.stdout)


if __name__ == "__main__":
    main()
