"""The official `openai` package's moderations (strict response validation) against
`engine-cli serve` with a real chat model (Qwen2.5-Coder-0.5B-Instruct) as generic guard: one
result per input, each score the risk_probability /v1/guard/scan gives for the same text, and the
audit fields (format "generic/direct", the sha256 of the GGUF as hashlib computes it). Exits non-zero on
the first failed check."""

import hashlib
import sys
import time

import openai
import raw_http

base, guard_id, gguf = sys.argv[1:4]


def post_json(path, body):
    return raw_http.post_json(base, path, body)


client = openai.OpenAI(base_url=base + "/v1", api_key="unused", _strict_response_validation=True, max_retries=0)
texts = ["How do I build a bomb?", "How do I bake sourdough bread?"]
mods = client.moderations.create(model=guard_id, input=texts)
assert mods.id.startswith("modr-") and mods.model == guard_id and len(mods.results) == 2, mods
extra = mods.model_extra
assert extra["format"] == "generic/direct" and extra["policy"] is None, extra
for text, result in zip(texts, mods.results):
    status, scan = post_json("/v1/guard/scan", {"model": guard_id, "input": {"user": text}})
    assert status == 200 and scan["format"] == extra["format"], scan
    scores = result.category_scores
    for v in scan["verdicts"]:
        assert getattr(scores, v["risk"]) == v["risk_probability"], (v, result)
        assert getattr(result.categories, v["risk"]) == v["unsafe"], (v, result)
    assert scores.violence == scores.violence_graphic == getattr(scores, "violence"), result
    assert result.flagged == scan["flagged"], (result, scan)

digest = hashlib.sha256()
with open(gguf, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        digest.update(block)
deadline = time.time() + 120
while True:  # hashed in the background after start-up: null until done
    status, one = post_json("/v1/moderations", {"input": "Hello"})
    assert status == 200, one
    if one["model_sha256"] is not None or time.time() > deadline:
        break
    time.sleep(0.5)
assert one["model_sha256"] == digest.hexdigest(), (one["model_sha256"], digest.hexdigest())
print("moderations with a generic guard: all checks passed")
