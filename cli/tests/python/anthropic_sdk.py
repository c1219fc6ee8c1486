"""The official `anthropic` Python package against `engine-cli serve` (its Messages API on the
tiny chat model): messages.create with text, a stop sequence, a forced tool call and the tool
result sent back, a last assistant turn continued (a prefill), messages.count_tokens, `x-api-key`
authentication, and the SDK's error classes for Anthropic-shaped errors. Exits non-zero on the
first failed check."""

import json
import sys
import urllib.request

import anthropic

base, chat_id, key = sys.argv[1:4]

client = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0)
hello = [{"role": "user", "content": "Hello"}]

reply = client.messages.create(model=chat_id, max_tokens=24, system="Be brief.", messages=hello, extra_body={"temperature": 0})
assert reply.type == "message" and reply.role == "assistant" and reply.id.startswith("msg_"), reply
# random weights do not end a reply within 24 tokens
assert reply.stop_reason == "max_tokens" and reply.usage.output_tokens == 24, reply
text = reply.content[0].text
counted = client.messages.count_tokens(model=chat_id, system="Be brief.", messages=hello)
assert counted.input_tokens == reply.usage.input_tokens, (counted, reply.usage)

# a stop sequence taken from the greedy reply ends the same reply there
stop = text[3:6]
stopped = client.messages.create(model=chat_id, max_tokens=24, system="Be brief.", messages=hello, stop_sequences=[stop], extra_body={"temperature": 0})
assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == stop, stopped
assert "".join(b.text for b in stopped.content) == text[: text.find(stop)], (stopped, text)

# a forced tool call, then its result sent back
tools = [{"name": "get_weather", "description": "Weather of a city", "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"], "additionalProperties": False}}]
called = client.messages.create(model=chat_id, max_tokens=64, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=tools, tool_choice={"type": "tool", "name": "get_weather"}, extra_body={"temperature": 0})
assert called.stop_reason == "tool_use", called
use = next(b for b in called.content if b.type == "tool_use")
assert use.name == "get_weather" and isinstance(use.input["city"], str), use
follow = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "18 C, sunny"}]},
]
answered = client.messages.create(model=chat_id, max_tokens=4, messages=follow, tools=tools)
assert answered.usage.input_tokens > called.usage.input_tokens, (answered.usage, called.usage)

# a last assistant turn is the start of the reply (a prefill): the reply is what a plain
# completion of the prompt that ends in its text says
def post(path, body):
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"content-type": "application/json", "x-api-key": key})
    with urllib.request.urlopen(request) as response:
        return json.load(response)


prefilled = hello + [{"role": "assistant", "content": "Sure, here"}]
continued = client.messages.create(model=chat_id, max_tokens=8, messages=prefilled, extra_body={"temperature": 0})
prompt = post("/apply-template", {"model": chat_id, "messages": prefilled})["prompt"]
assert prompt.endswith("<|im_start|>assistant\nSure, here"), prompt
ids = post("/tokenize", {"model": chat_id, "content": prompt, "add_special": True})["tokens"]
plain = post("/v1/completions", {"model": chat_id, "prompt": ids, "max_tokens": 8, "temperature": 0})
assert continued.content[0].text == plain["choices"][0]["text"], (continued, plain)
assert continued.usage.input_tokens == len(ids) == client.messages.count_tokens(model=chat_id, messages=prefilled).input_tokens, (continued.usage, len(ids))

# errors come back as the SDK's classes
for call, error in [
    (lambda: client.messages.create(model="nope", max_tokens=4, messages=hello), anthropic.NotFoundError),
    (lambda: client.messages.create(model=chat_id, max_tokens=4, messages=hello, extra_body={"temperature": 1.5}), anthropic.BadRequestError),
    (lambda: anthropic.Anthropic(base_url=base, api_key="wrong", max_retries=0).messages.create(model=chat_id, max_tokens=4, messages=hello), anthropic.AuthenticationError),
]:
    try:
        call()
    except error as e:
        assert e.body["type"] == "error" and e.body["error"]["message"], e.body
    else:
        raise AssertionError(f"expected {error.__name__}")

print("anthropic: all checks passed")
