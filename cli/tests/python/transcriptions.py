"""The official `openai` package's audio transcriptions (strict response validation) against
`engine-cli serve --transcribe` with a real Whisper model: every response_format (json, text,
srt, vtt, verbose_json) for a spoken clip, the text equal to faster-whisper's (the fixture's
golden transcript), verbose_json's segments timed inside the clip with their decoding fields,
and the errors: word timestamps, an unknown model, a file that is not audio. Exits non-zero on
the first failed check."""

import json
import sys

import openai

base, model_id, clip, golden_text = sys.argv[1:5]

client = openai.OpenAI(base_url=base + "/v1", api_key="unused", _strict_response_validation=True, max_retries=0)


def transcribe(**kw):
    with open(clip, "rb") as f:
        return client.audio.transcriptions.create(model=model_id, file=f, **kw)


t = transcribe()
assert t.text == golden_text, (t.text, golden_text)

text = transcribe(response_format="text")
assert isinstance(text, str) and text.strip() == golden_text, text

srt = transcribe(response_format="srt")
assert srt.startswith("1\n00:00:00,000 --> 00:00:0"), srt
vtt = transcribe(response_format="vtt")
assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> "), vtt

v = transcribe(response_format="verbose_json", timestamp_granularities=["segment"], language="en")
assert v.text == golden_text and v.language == "english" and 1.0 < v.duration < 30.0, v
assert v.segments and v.segments[0].start == 0.0 and v.segments[-1].end <= v.duration + 0.02, v.segments
for s in v.segments:
    assert s.tokens and -1.0 < s.avg_logprob < 0.0 and 0.0 <= s.no_speech_prob < 0.5 and s.compression_ratio > 0, s
    assert s.temperature == 0.0 and s.start < s.end, s
assert "".join(s.text for s in v.segments).strip() == golden_text

try:
    transcribe(response_format="verbose_json", timestamp_granularities=["word"])
    raise AssertionError("word timestamps were accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "timestamp_granularities", e.body

try:
    client.audio.transcriptions.create(model="no-such-model", file=("a.wav", open(clip, "rb").read()))
    raise AssertionError("an unknown model was accepted")
except openai.NotFoundError as e:
    assert e.body["code"] == "model_not_found", e.body

try:
    client.audio.transcriptions.create(model=model_id, file=("notes.wav", b"these are not sound waves"))
    raise AssertionError("a file that is not audio was accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "file" and "not a supported audio file" in e.body["message"], e.body

print(json.dumps({"text": t.text}))
print("all checks passed")
