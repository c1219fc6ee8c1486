#!/usr/bin/env python3
"""How natural a server's structured JSON output is to its model: six `response_format` chat
completions (a person, Paris, an event to extract, a film's rating, a dog as a `json_object`, a
pancake recipe) and one forced tool call, greedy, each with the sum of the model's own
log-probabilities of the tokens it wrote (the server reports the unconstrained distribution's),
its token count, finish reason and the start of its text; then the six replies' total. Higher is
closer to what the model would write without the grammar. Standard library only.

  python3 tools/json-output-logprobs.py --port 8080 --model qwen2.5-coder-1.5b-instruct-q4_k_m
"""

import argparse
import json
import urllib.request

STRING, INTEGER, NUMBER = {"type": "string"}, {"type": "integer"}, {"type": "number"}


def schema(properties):
    return {"type": "json_schema", "json_schema": {"name": "reply", "strict": True, "schema": {
        "type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}}}


CASES = [
    ("Give a person.", schema({"name": STRING, "age": INTEGER})),
    ("Describe the city of Paris.", schema({"name": STRING, "country": STRING, "population": INTEGER,
                                            "landmarks": {"type": "array", "items": STRING, "maxItems": 3}})),
    ("Extract the event: 'Team meeting on Friday at 3pm in room 4B with Alice and Bob.'",
     schema({"title": STRING, "day": STRING, "time": STRING, "room": STRING, "attendees": {"type": "array", "items": STRING}})),
    ("Rate the movie Inception.", schema({"title": STRING, "year": INTEGER, "rating": NUMBER, "genres": {"type": "array", "items": STRING}})),
    ("Give me a JSON object describing a dog.", {"type": "json_object"}),
    ("A recipe for pancakes.", schema({"name": STRING, "ingredients": {"type": "array", "items": {
        "type": "object", "properties": {"item": STRING, "amount": STRING}, "required": ["item", "amount"], "additionalProperties": False}},
        "steps": {"type": "array", "items": STRING, "maxItems": 4}})),
]
WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": STRING, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}}]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--model", required=True)
    parser.add_argument("--max-tokens", type=int, default=160)
    args = parser.parse_args()

    def chat(body):
        body = {"model": args.model, "temperature": 0, "logprobs": True, **body}
        request = urllib.request.Request(f"http://127.0.0.1:{args.port}/v1/chat/completions", data=json.dumps(body).encode(),
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request) as response:
            choice = json.load(response)["choices"][0]
        logprobs = [t["logprob"] for t in (choice["logprobs"] or {}).get("content") or []]
        return choice, sum(logprobs), len(logprobs)

    total = 0.0
    for prompt, response_format in CASES:
        choice, logprob, n = chat({"messages": [{"role": "user", "content": prompt}], "response_format": response_format, "max_tokens": args.max_tokens})
        total += logprob
        print(f"{logprob:8.2f} {n:4d} {choice['finish_reason']:6s} {choice['message']['content'][:150]!r}")
    choice, logprob, n = chat({"messages": [{"role": "user", "content": "What's the weather in Paris in celsius?"}], "tools": WEATHER,
                               "tool_choice": "required", "max_tokens": 60})
    print(f"{logprob:8.2f} {n:4d} tool   {json.dumps(choice['message']['tool_calls'][0]['function'])[:150]}")
    print(f"six replies: {total:.2f}")


if __name__ == "__main__":
    main()
