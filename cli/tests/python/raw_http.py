"""Raw HTTP calls the test scripts share (for what the SDKs do not cover)."""

import json
import urllib.error
import urllib.request


def post_json(base, path, body):
    """POST `body` as JSON to base + path; returns (status, parsed body), errors included."""
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
