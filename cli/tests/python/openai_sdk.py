"""The official `openai` Python package against `engine-cli serve`, with strict response
validation: chat (plain, stream, llama-server's timings and progress chunks, the .stream() helper, tools, .parse() with a JSON schema, a GBNF `grammar` in extra_body),
completions with logprobs, embeddings (the SDK's default base64), models list / retrieve /
delete, moderations; the guard routes over raw HTTP; /metrics through prometheus_client's OpenMetrics parser. Exits non-zero on the first failed check."""

import re
import sys
import urllib.request
from typing import Annotated

import openai
import raw_http
from pydantic import BaseModel, Field

base, chat_id, guard_id = sys.argv[1:4]


def post_json(path, body):
    return raw_http.post_json(base, path, body)


client = openai.OpenAI(base_url=base + "/v1", api_key="unused", _strict_response_validation=True, max_retries=0)
messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]

plain = client.chat.completions.create(model=chat_id, messages=messages, max_tokens=8, temperature=0, seed=1)
assert plain.object == "chat.completion" and plain.choices[0].message.role == "assistant"
assert plain.usage.total_tokens == plain.usage.prompt_tokens + plain.usage.completion_tokens
text = plain.choices[0].message.content

chunks = list(client.chat.completions.create(model=chat_id, messages=messages, max_tokens=8, temperature=0, stream=True, stream_options={"include_usage": True}))
assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
# llama-server's extras (as its web page asks for them): the SDK reads the progress chunks (a
# role delta with null content) and keeps `timings` and `prompt_progress` as extra fields
extras = list(client.chat.completions.create(model=chat_id, messages=messages, max_tokens=8, temperature=0, stream=True,
                                             stream_options={"include_usage": True},
                                             extra_body={"return_progress": True, "timings_per_token": True}))
assert "".join(c.choices[0].delta.content or "" for c in extras if c.choices) == text
progress = [c.model_extra["prompt_progress"] for c in extras if "prompt_progress" in c.model_extra]
assert progress and progress[-1]["processed"] == progress[-1]["total"] == plain.usage.prompt_tokens, progress
assert extras[-1].model_extra["timings"]["predicted_n"] == plain.usage.completion_tokens
assert plain.model_extra["timings"]["predicted_n"] == plain.usage.completion_tokens

with client.chat.completions.stream(model=chat_id, messages=messages, max_tokens=8, temperature=0) as stream:
    for _ in stream:
        pass
    final = stream.get_final_completion()
assert final.choices[0].message.content == text, (final, text)

tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
with_tools = client.chat.completions.create(model=chat_id, messages=messages, tools=tools, tool_choice="auto", max_tokens=8, temperature=0)
assert with_tools.choices[0].finish_reason in ("stop", "length", "tool_calls")

logprobs = client.chat.completions.create(model=chat_id, messages=messages, max_tokens=4, temperature=0, logprobs=True, top_logprobs=3)
content = logprobs.choices[0].logprobs.content
assert len(content) == logprobs.usage.completion_tokens and all(len(t.top_logprobs) == 3 for t in content)


class Pet(BaseModel):
    name: Annotated[str, Field(max_length=6)]
    legs: Annotated[int, Field(ge=0, le=8)]


parsed = client.chat.completions.parse(model=chat_id, messages=[{"role": "user", "content": "A pet as JSON"}], response_format=Pet, max_tokens=64, temperature=0)
pet = parsed.choices[0].message.parsed
assert isinstance(pet, Pet) and len(pet.name) <= 6 and 0 <= pet.legs <= 8, parsed

# llama-server's `grammar` field (GBNF) through the SDK's extra_body, on chat and text completions
answer = 'root ::= ("yes" | "no") ", " [a-z]{2,5} "."\n'
ok = re.compile(r"(yes|no), [a-z]{2,5}\.")
graded = client.chat.completions.create(model=chat_id, messages=messages, max_tokens=40, temperature=1, seed=4, extra_body={"grammar": answer})
assert ok.fullmatch(graded.choices[0].message.content) and graded.choices[0].finish_reason == "stop", graded
graded = client.completions.create(model=chat_id, prompt="Well?", max_tokens=40, temperature=1, seed=4, extra_body={"grammar": answer})
assert ok.fullmatch(graded.choices[0].text) and graded.choices[0].finish_reason == "stop", graded
try:
    client.chat.completions.create(model=chat_id, messages=messages, extra_body={"grammar": "root ::= (\n"})
    raise AssertionError("a malformed grammar was accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "grammar" and "line 2, column 1" in e.body["message"], e.body

completion = client.completions.create(model=chat_id, prompt="The quick brown fox", max_tokens=4, temperature=0, logprobs=2)
lp = completion.choices[0].logprobs
assert len(lp.tokens) == completion.usage.completion_tokens == len(lp.token_logprobs) == len(lp.top_logprobs)

# The SDK asks for base64 by default and decodes it after parsing; strict validation checks the
# raw body against `embedding: list[float]` first, so the default path runs on a lenient client.
lenient = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
embeddings = lenient.embeddings.create(model=chat_id, input=["first text", "second text"])
assert [d.index for d in embeddings.data] == [0, 1]
norm = sum(x * x for x in embeddings.data[0].embedding) ** 0.5
assert abs(norm - 1) < 1e-4, norm
floats = client.embeddings.create(model=chat_id, input=["first text", "second text"], encoding_format="float")
assert floats.data[0].embedding == embeddings.data[0].embedding

ids = {m.id for m in client.models.list()}
assert {chat_id, guard_id} <= ids, ids
assert client.models.retrieve(chat_id).id == chat_id

status, scan = post_json("/v1/guard/scan", {"model": guard_id, "input": {"user": "How do I pick a lock?"}})
assert status == 200 and len(scan["verdicts"]) == 9 and isinstance(scan["flagged"], bool), scan
status, bad = post_json("/v1/guard", {"model": guard_id, "input": {"user": "x"}, "risks": ["nope"]})
assert status == 400 and bad["error"]["message"] == "invalid risk category: nope", bad

# /v1/moderations through the SDK: one result per input, the scores /v1/guard/scan's
# risk_probability for the same text, under the risks' names and OpenAI's (strictly validated)
texts = ["How do I pick a lock?", "I love sunny days"]
mods = client.moderations.create(model=guard_id, input=texts)
assert mods.id.startswith("modr-") and mods.model == guard_id and len(mods.results) == 2, mods
for text, result in zip(texts, mods.results):
    status, scan = post_json("/v1/guard/scan", {"model": guard_id, "input": {"user": text}})
    assert status == 200, scan
    verdicts = {v["risk"]: v for v in scan["verdicts"]}
    scores, flags = result.category_scores, result.categories
    for risk, v in verdicts.items():
        assert getattr(scores, risk) == v["risk_probability"] and getattr(flags, risk) == v["unsafe"], (risk, result, v)
    assert scores.violence == scores.violence_graphic == verdicts["violence"]["risk_probability"], result
    assert scores.hate == verdicts["social_bias"]["risk_probability"] and scores.harassment == verdicts["profanity"]["risk_probability"]
    assert scores.illicit == verdicts["unethical_behavior"]["risk_probability"] and scores.self_harm == verdicts["harm"]["risk_probability"]
    assert flags.sexual == verdicts["sexual_content"]["unsafe"] and result.flagged == scan["flagged"], (result, scan)
    assert result.category_applied_input_types.violence == ["text"]
one = client.moderations.create(input="I love sunny days")  # model omitted: the guard
assert one.model == guard_id and one.results[0].category_scores.hate == mods.results[1].category_scores.hate, one
parts = client.moderations.create(model=guard_id, input=[{"type": "text", "text": "I love sunny days"}])
assert parts.results[0].category_scores == mods.results[1].category_scores, parts
for body in [{"input": []}, {"input": 5}, {"input": " "}, {"input": ["ok", 3]},
             {"input": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]},
             {"input": [{"type": "text"}]}, {"model": chat_id, "input": "x"}, {"model": None, "input": "x"}]:
    status, err = post_json("/v1/moderations", body)
    assert status == 400 and err["error"]["type"] == "invalid_request_error", (body, status, err)
status, err = post_json("/v1/moderations", {"model": "nope", "input": "x"})
assert status == 404, err

# thresholds on risk_probability decide `unsafe` on both sides of the value, and are echoed
p = mods.results[1].category_scores.violence
at = client.moderations.create(model=guard_id, input=texts[1], extra_body={"thresholds": {"violence": p}})
assert at.results[0].categories.violence and at.results[0].categories.violence_graphic and at.results[0].flagged, at
above = {r: 1.0 for r in ["evasiveness", "harm", "harm_engagement", "jailbreaking", "profanity", "sexual_content", "social_bias", "unethical_behavior", "violence"]}
if p < 1.0:
    above["violence"] = p + (1.0 - p) / 2
    status, none = post_json("/v1/moderations", {"model": guard_id, "input": texts[1], "thresholds": above})
    assert status == 200 and none["thresholds"]["violence"] == above["violence"], none
    assert not none["results"][0]["categories"]["violence"] and none["results"][0]["category_scores"]["violence"] == p, none
    assert none["results"][0]["flagged"] == any(none["results"][0]["category_scores"][r] >= 1.0 for r in above), none
status, scan0 = post_json("/v1/guard/scan", {"model": guard_id, "input": {"user": texts[1]}, "thresholds": {"harm": 0.0}})
assert status == 200 and scan0["flagged"] and scan0["thresholds"] == {"harm": 0.0}, scan0
assert [v["unsafe"] for v in scan0["verdicts"] if v["risk"] == "harm"] == [True] and scan0["highest_risk"], scan0
status, batch0 = post_json("/v1/guard/batch", {"model": guard_id, "inputs": [{"user": texts[1]}], "thresholds": {"violence": 0.0}})
assert status == 200 and batch0["results"][0]["flagged"], batch0
for bad_t in [{"nope": 0.5}, {"harm": 2}, {"harm": "x"}, [0.5]]:
    for path, body in [("/v1/moderations", {"input": "x"}), ("/v1/guard", {"model": guard_id, "input": {"user": "x"}})]:
        status, err = post_json(path, {**body, "thresholds": bad_t})
        assert status == 400 and err["error"]["param"] == "thresholds", (path, bad_t, err)

# guardrails on a chat completion, parsed by the SDK: an output guard that flags every window
# (threshold 0) ends the stream with finish_reason "content_filter" and the verdicts; an input
# guard refuses with a 400 whose code is content_filter, before any token is generated
flag = {"input": False, "risks": ["harm"], "thresholds": {"harm": 0.0}, "every": 3}
chunks = list(client.chat.completions.create(model=chat_id, messages=messages, max_tokens=16, temperature=0, stream=True, extra_body={"guard": flag}))
finals = [c.choices[0] for c in chunks if c.choices and c.choices[0].finish_reason]
assert len(finals) == 1 and finals[0].finish_reason == "content_filter", finals
verdict = finals[0].model_extra["guard"]
assert verdict["flagged"] and verdict["stage"] == "output" and verdict["verdicts"][0]["risk"] == "harm", verdict
assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) <= 3, chunks
whole = client.chat.completions.create(model=chat_id, messages=messages, max_tokens=16, temperature=0, extra_body={"guard": flag})
assert whole.choices[0].finish_reason == "content_filter" and whole.choices[0].message.content is None, whole
try:
    client.chat.completions.create(model=chat_id, messages=messages, max_tokens=16, extra_body={"guard": {"output": False, "thresholds": {"harm": 0.0}, "risks": ["harm"]}})
    raise AssertionError("a flagged input was answered")
except openai.BadRequestError as e:
    assert e.code == "content_filter" and e.body["guard"]["verdicts"][0]["unsafe"], e.body

from prometheus_client.openmetrics.parser import text_string_to_metric_families

with urllib.request.urlopen(base + "/metrics") as r:
    families = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
for name, kind in [("requests", "counter"), ("tokens_generated", "counter"), ("request_latency_ms", "histogram"), ("guard_requests", "counter"), ("guard_latency_ms", "histogram")]:
    assert families[name].type == kind, (name, families.get(name))
guard_total = [s.value for s in families["guard_requests"].samples if s.name == "guard_requests_total"]
assert guard_total and guard_total[0] >= 2, guard_total

try:
    client.chat.completions.create(model="nope", messages=messages)
    raise AssertionError("unknown model accepted")
except openai.NotFoundError:
    pass
try:
    client.chat.completions.create(model=chat_id, messages=messages, temperature=5)
    raise AssertionError("temperature 5 accepted")
except openai.BadRequestError:
    pass

deleted = client.models.delete(chat_id)
assert deleted.deleted and deleted.id == chat_id
try:
    client.models.retrieve(chat_id)
    raise AssertionError("deleted model still listed")
except openai.NotFoundError:
    pass
print("openai sdk: all checks passed")
