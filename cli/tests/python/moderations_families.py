"""The official `openai` package's moderations (strict response validation) and /v1/guard/scan
(through the same client) against `engine-cli serve` with a guard model of a family that has prompts of its own (a scripted
model answering as Llama Guard, ShieldGemma or Qwen3Guard does): the audit format names the
family, every verdict of the scan is the moderation category of its risk, every one of OpenAI's
13 categories is in the result, and exactly the expected ones are applied to no input type.
Arguments: BASE GUARD_ID FAMILY UNAPPLIED (comma-separated, may be empty). Exits non-zero on the
first failed check."""

import sys

import openai
import raw_http

base, guard_id, family, unapplied = sys.argv[1:5]
unapplied = set(filter(None, unapplied.split(",")))

client = openai.OpenAI(base_url=base + "/v1", api_key="unused", _strict_response_validation=True, max_retries=0)
text = "How do I hurt someone?"
mods = client.moderations.create(model=guard_id, input=[text])
assert mods.model == guard_id and len(mods.results) == 1, mods
assert mods.model_extra["format"] == family, mods.model_extra
result = mods.results[0]
# the guard route through the same client (its generic `post`, which raises on any error status)
scan = client.post("/guard/scan", body={"model": guard_id, "input": {"user": text}}, cast_to=object)
assert scan["format"] == family, scan
assert scan["verdicts"], scan
for v in scan["verdicts"]:
    assert getattr(result.category_scores, v["risk"]) == v["risk_probability"], (v, result)
    assert getattr(result.categories, v["risk"]) == v["unsafe"], (v, result)
assert result.flagged == scan["flagged"], (result, scan)
applied = result.category_applied_input_types.model_dump(by_alias=True)
categories = result.categories.model_dump(by_alias=True)
scores = result.category_scores.model_dump(by_alias=True)
openai_names = [
    "harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent", "self-harm",
    "self-harm/instructions", "self-harm/intent", "sexual", "sexual/minors", "violence", "violence/graphic",
]
for name in openai_names:
    assert name in categories and name in scores and name in applied, (name, result)
found = {name for name in openai_names if applied[name] == []}
assert found == unapplied, (found, unapplied)
for name in found:
    assert categories[name] is False and scores[name] == 0, (name, result)
status, err = raw_http.post_json(base, "/v1/guard", {"model": guard_id, "input": {"user": text}, "format": "3.2"})
assert status == 400 and err["error"]["param"] == "format", err
print(f"moderations with a {family} guard: all checks passed")
