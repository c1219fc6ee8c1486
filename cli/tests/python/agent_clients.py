"""The official `openai` and `anthropic` packages, with strict response validation, against
`engine-cli serve` with the real Qwen2.5-Coder-0.5B-Instruct: the Responses API
(`client.responses.create` answered whole and streamed, the `responses.stream` helper, a function
tool round trip through a stored response and `previous_response_id`, its prompt counted by
`responses.input_tokens.count`, retrieve and delete) and the
Messages API (`client.messages.create(stream=True)`, the `messages.stream` helper, a tool round
trip). Each reply is checked against the chat completion of the same conversation: the same
prompt tokens and, greedy, the same text. Exits non-zero on the first failed check."""

import json
import sys

import anthropic
import openai

base, model = sys.argv[1:3]

oa = openai.OpenAI(base_url=base + "/v1", api_key="local", max_retries=0, _strict_response_validation=True)
an = anthropic.Anthropic(base_url=base, api_key="local", max_retries=0, _strict_response_validation=True)

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 16}},
    "required": ["city"],
    "additionalProperties": False,
}
QUESTION = "What is the weather in Paris right now?"
RESULT = json.dumps({"temperature_c": 18, "sky": "sunny"})
chat_tools = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city", "parameters": WEATHER}}]


def chat(messages, max_tokens, tool_choice="auto"):
    """The chat completion of `messages` (greedy), for comparison."""
    return oa.chat.completions.create(model=model, messages=messages, tools=chat_tools, tool_choice=tool_choice, max_tokens=max_tokens, temperature=0)


# --- Responses: a forced function call, answered whole --------------------------------------
tools = [{"type": "function", "name": "get_weather", "description": "Current weather of a city", "parameters": WEATHER, "strict": True}]
first = oa.responses.create(model=model, input=QUESTION, tools=tools, tool_choice="required", temperature=0, max_output_tokens=64)
assert first.status == "completed" and first.store, first
calls = [o for o in first.output if o.type == "function_call"]
assert len(calls) == 1 and calls[0].name == "get_weather", first.output
args = json.loads(calls[0].arguments)
assert isinstance(args["city"], str) and "paris" in args["city"].lower(), args
call = calls[0]

# the call's output sent back on the stored response: the whole conversation is the prompt,
# whose tokens OpenAI's count gives before it is sent
output = [{"type": "function_call_output", "call_id": call.call_id, "output": RESULT}]
counted = oa.responses.input_tokens.count(model=model, previous_response_id=first.id, input=output, tools=tools, tool_choice="none")
second = oa.responses.create(
    model=model,
    previous_response_id=first.id,
    input=output,
    tools=tools,
    tool_choice="none",
    temperature=0,
    max_output_tokens=24,
)
assert second.previous_response_id == first.id and second.output_text, second
assert counted.object == "response.input_tokens" and counted.input_tokens == second.usage.input_tokens, (counted, second.usage)
conversation = [
    {"role": "user", "content": QUESTION},
    {"role": "assistant", "content": None, "tool_calls": [{"id": call.call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]},
    {"role": "tool", "tool_call_id": call.call_id, "content": RESULT},
]
same = chat(conversation, 24, tool_choice="none")
assert second.usage.input_tokens == same.usage.prompt_tokens, (second.usage, same.usage)
assert second.output_text == same.choices[0].message.content, (second.output_text, same.choices[0].message.content)

# stored responses come back as they were, and go
assert oa.responses.retrieve(first.id).output[0].call_id == call.call_id
oa.responses.delete(second.id)
try:
    oa.responses.retrieve(second.id)
except openai.NotFoundError:
    pass
else:
    raise AssertionError("a deleted response is still there")

# --- Responses: streamed, raw events and the SDK's stream helper -----------------------------
events = list(oa.responses.create(model=model, input=QUESTION, tools=tools, tool_choice="required", temperature=0, max_output_tokens=64, stream=True))
kinds = [e.type for e in events]
assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed", kinds
assert [e.sequence_number for e in events] == list(range(len(events))), kinds
streamed_call = next(o for o in events[-1].response.output if o.type == "function_call")
assert streamed_call.arguments == call.arguments, (streamed_call, call)
assert "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta") == call.arguments

with oa.responses.stream(model=model, input="Say hello in French.", temperature=0, max_output_tokens=16) as stream:
    text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
    final = stream.get_final_response()
assert text and text == final.output_text, (text, final.output_text)
greeting = oa.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hello in French."}], max_tokens=16, temperature=0)
assert final.output_text == greeting.choices[0].message.content and final.usage.input_tokens == greeting.usage.prompt_tokens

# --- Messages: streamed, with a tool round trip ----------------------------------------------
an_tools = [{"name": "get_weather", "description": "Current weather of a city", "input_schema": WEATHER}]
with an.messages.stream(model=model, max_tokens=64, messages=[{"role": "user", "content": QUESTION}], tools=an_tools, tool_choice={"type": "tool", "name": "get_weather"}, extra_body={"temperature": 0}) as stream:
    streamed_kinds = [e.type for e in stream]
    called = stream.get_final_message()
assert streamed_kinds[0] == "message_start" and streamed_kinds[-1] == "message_stop", streamed_kinds
assert called.stop_reason == "tool_use", called
use = next(b for b in called.content if b.type == "tool_use")
assert use.input == args, (use.input, args)

follow = [
    {"role": "user", "content": QUESTION},
    {"role": "assistant", "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": RESULT}]},
]
raw = list(an.messages.create(model=model, max_tokens=24, messages=follow, tools=an_tools, tool_choice={"type": "none"}, extra_body={"temperature": 0}, stream=True))
assert raw[0].type == "message_start" and raw[-1].type == "message_stop", [e.type for e in raw]
answer = "".join(e.delta.text for e in raw if e.type == "content_block_delta" and e.delta.type == "text_delta")
delta = next(e for e in raw if e.type == "message_delta")
same = chat(conversation, 24, tool_choice="none")
assert raw[0].message.usage.input_tokens == same.usage.prompt_tokens, (raw[0].message.usage, same.usage)
assert answer == same.choices[0].message.content, (answer, same.choices[0].message.content)
assert delta.usage.output_tokens == same.usage.completion_tokens and delta.delta.stop_reason in ("end_turn", "max_tokens"), delta

print("agent clients: all checks passed")
