"""The official `openai` package (strict response validation) sends chat completions with an
image part (a base64 PNG data: URI) to `engine-cli serve --mmproj` on 127.0.0.1: answered whole
and streamed, the image's rows counted in the prompt and, asked again, found in the prefix cache
(`cached_tokens`); a file:// image under the allowed folder equals its data: URI; and the errors:
a remote URL, a corrupt image, an image over the byte limit, a file:// path outside the folder,
an image for a model without a projector. Exits non-zero on the first failed check.

usage: vision.py BASE_URL MODEL_ID IMAGE.png TEXT_ONLY_MODEL_ID MEDIA_DIR"""

import base64
import os
import sys

import openai

base, model_id, image_path, plain_id, media_dir = sys.argv[1:6]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", _strict_response_validation=True, max_retries=0)
png = open(image_path, "rb").read()
data_uri = "data:image/png;base64," + base64.b64encode(png).decode()


def ask(url, model=model_id, text="What is in this image?", **kw):
    return client.chat.completions.create(
        model=model,
        max_tokens=8,
        temperature=0,
        messages=[{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url, "detail": "auto"}}]}],
        **kw,
    )


models = client.models.list()
caps = {m.id: m.model_extra.get("capabilities") for m in models.data}
assert "vision" in caps[model_id] and "vision" not in caps[plain_id], caps

first = ask(data_uri)
text = first.choices[0].message.content
assert first.choices[0].finish_reason in ("length", "stop") and text, first
# the prompt holds the image's rows (4 for the tiny Gemma 3 projector) beside the text's tokens
text_only = client.chat.completions.create(
    model=model_id, max_tokens=1, messages=[{"role": "user", "content": "What is in this image?"}]
)
extra = first.usage.prompt_tokens - text_only.usage.prompt_tokens
assert extra >= 4 + 2, (first.usage, text_only.usage)

# the same image again: its rows come from the prefix cache
again = ask(data_uri)
assert again.choices[0].message.content == text, (again, first)
cached = again.usage.prompt_tokens_details.cached_tokens
assert cached >= first.usage.prompt_tokens - 2, (cached, again.usage)

# streamed: the same greedy text
stream = ask(data_uri, stream=True, stream_options={"include_usage": True})
chunks = list(stream)
streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
assert streamed == text, (streamed, text)
assert chunks[-1].usage.prompt_tokens == first.usage.prompt_tokens, chunks[-1]

# file:// under the allowed folder reads the same pixels
local = ask("file://" + os.path.join(media_dir, os.path.basename(image_path)))
assert local.choices[0].message.content == text, local


def refused(status, url, model=model_id, contains=""):
    try:
        ask(url, model=model)
    except openai.APIStatusError as e:
        assert e.status_code == status, (e.status_code, e.body)
        assert e.body["param"] == "messages[0].content[1].image_url.url", e.body
        assert contains in e.body["message"], e.body
        return e.body
    raise AssertionError(f"{url[:40]} was accepted")


refused(400, "https://example.com/cat.png", contains="remote images are not fetched")
refused(400, "data:image/png;base64," + base64.b64encode(png[: len(png) // 2]).decode(), contains="corrupt")
refused(400, "data:image/png;base64,bm90IGFuIGltYWdl", contains="not a supported image")
refused(413, "data:image/png;base64," + base64.b64encode(png + bytes(300_000)).decode(), contains="at most")
refused(400, "file:///etc/passwd", contains="must be under")
refused(400, data_uri, model=plain_id, contains="no vision projector")
print("all checks passed")
