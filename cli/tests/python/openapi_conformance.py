"""/openapi.yaml against the live server: validates the served document with
openapi-spec-validator, then runs schemathesis (every check, settings in schemathesis.toml
beside this file) over every operation but llamaCompletions (`/completions`, the other name of
`/completion`: the same handler and schema); deleteModel runs last and alone, since it unloads
the models the other operations use. Random bodies seldom reach a successful stream (most carry
some value the server refuses), so a few representative streaming and tool requests are also
sent through schemathesis's own client and their responses, SSE event by event, validated
against the document. Prints the number of generated cases; exits non-zero on the first
failure."""

import pathlib
import re
import subprocess
import sys
import urllib.request

import schemathesis as st
import yaml
from openapi_spec_validator import validate

base, chat_id = sys.argv[1:3]
here = pathlib.Path(__file__).parent

with urllib.request.urlopen(base + "/openapi.yaml") as r:
    assert r.headers["Content-Type"].startswith("application/yaml"), r.headers["Content-Type"]
    doc = yaml.safe_load(r.read())
validate(doc)
operations = {op["operationId"] for path in doc["paths"].values() for op in path.values() if isinstance(op, dict)}
expected = {"health", "ready", "metrics", "openapi", "listModels", "retrieveModel", "deleteModel", "createChatCompletion",
            "createCompletion", "createEmbedding", "guard", "guardScan", "guardBatch", "createModeration",
            "createResponse", "getResponse", "deleteResponse", "createMessage", "countMessageTokens", "loadModel",
            "infill", "llamaCompletion", "llamaCompletions", "getProps", "llamaEmbedding", "countResponseInputTokens",
            "countChatInputTokens"}
assert expected <= operations, f"operations missing from the document: {expected - operations}"
print("openapi-spec-validator: valid OpenAPI", doc["openapi"], "with", len(operations), "operations")


weather = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
messages = [{"role": "user", "content": "Weather in Paris?"}]
representative = [
    ("/v1/chat/completions", {"model": chat_id, "messages": messages, "max_tokens": 6, "stream": True,
                              "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 2,
                              "return_progress": True, "timings_per_token": True}),
    ("/v1/chat/completions", {"model": chat_id, "messages": messages, "max_tokens": 24, "stream": True,
                              "tools": [weather], "tool_choice": "required"}),
    ("/v1/chat/completions", {"model": chat_id, "messages": messages, "max_tokens": 24, "tools": [weather],
                              "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "n": 2}),
    ("/v1/completions", {"model": chat_id, "prompt": ["Once", "upon"], "max_tokens": 4, "stream": True,
                         "logprobs": 2, "stream_options": {"include_usage": True}, "return_progress": True,
                         "timings_per_token": True}),
    ("/v1/completions", {"model": chat_id, "prompt": "Once", "max_tokens": 4, "logprobs": 2, "echo": True}),
    ("/v1/responses", {"model": chat_id, "input": "Weather in Paris?", "max_output_tokens": 6, "stream": True}),
    ("/v1/responses", {"model": chat_id, "input": messages, "max_output_tokens": 24, "stream": True,
                       "tools": [{"type": "function", **weather["function"]}], "tool_choice": "required"}),
    ("/v1/responses", {"model": chat_id, "input": "Hi", "max_output_tokens": 24, "text": {"format": {"type": "json_object"}}}),
    ("/v1/messages", {"model": chat_id, "messages": messages, "max_tokens": 6, "stream": True}),
    ("/v1/messages", {"model": chat_id, "messages": messages, "max_tokens": 24, "stream": True,
                      "tools": [{"name": "get_weather", "input_schema": weather["function"]["parameters"]}],
                      "tool_choice": {"type": "any"}}),
    ("/completion", {"model": chat_id, "prompt": ["Once", [1, "upon"]], "n_predict": 4, "n_probs": 2, "stream": True,
                     "return_tokens": True, "return_progress": True, "timings_per_token": True, "n_cmpl": 2}),
    ("/completion", {"model": chat_id, "prompt": "Once", "n_predict": 4, "n_probs": 2, "post_sampling_probs": True,
                     "top_k": 3, "temperature": 1, "seed": 1}),
]
loaded = st.openapi.from_url(base + "/openapi.yaml")
loaded.config.update(base_url=base)
for path, body in representative:
    case = loaded[path]["POST"].Case(body=body)
    response = case.call()
    assert response.status_code == 200, (path, body, response.status_code, response.text)
    case.validate_response(response)
    if body.get("stream"):
        events = [line for line in response.text.splitlines() if line.startswith("data: ")]
        # chat and text completions end with [DONE]; Responses and Messages with their last named
        # event; llama-server's /completion with a prompt's answer
        last = {"/v1/responses": 'data: {"type":"response.', "/v1/messages": 'data: {"type":"message_stop"',
                "/completion": 'data: {"index":'}.get(path, "data: [DONE]")
        assert len(events) > 2 and events[-1].startswith(last), response.text
    if path == "/v1/responses":
        stored = loaded["/v1/responses/{response_id}"]["GET"].Case(path_parameters={"response_id": response.json()["id"]} if not body.get("stream") else {"response_id": "resp_unknown"})
        got = stored.call()
        assert got.status_code == (404 if body.get("stream") else 200), got.text
        stored.validate_response(got)
# a model of the models directory loaded at run time, then unloaded
load = loaded["/v1/models"]["POST"].Case(body={"model": "tiny-granite-Q8_0", "id": "conformance-load", "context_length": 256})
response = load.call()
assert response.status_code == 200, response.text
load.validate_response(response)
again = load.call()
assert again.status_code == 409, again.text
load.validate_response(again)
urllib.request.urlopen(urllib.request.Request(base + "/v1/models/conformance-load", method="DELETE")).read()
print(f"schemathesis: {len(representative)} representative requests (streams event by event) and a model load match the document")


def schemathesis(*args):
    """Runs the schemathesis CLI; returns the number of generated cases."""
    command = [sys.executable, "-c", "import sys; from schemathesis.cli import schemathesis; sys.exit(schemathesis())",
               "--config-file", str(here / "schemathesis.toml"), "run", base + "/openapi.yaml", "--checks", "all", *args]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stdout, run.stderr, sep="\n")
        sys.exit(f"schemathesis {' '.join(args)} failed (exit {run.returncode})")
    found = re.search(r"(\d+) generated", run.stdout)
    assert found, run.stdout
    return int(found.group(1))


cases = schemathesis("--exclude-operation-id", "deleteModel", "--exclude-operation-id", "llamaCompletions")
cases_delete = schemathesis("--include-operation-id", "deleteModel")
with urllib.request.urlopen(base + "/v1/models") as r:
    left = yaml.safe_load(r.read())["data"]
assert left == [], f"deleteModel's cases should have unloaded every model, left: {left}"
print(f"schemathesis: {cases} + {cases_delete} generated cases (every operation but the alias /completions; deleteModel last), no failures")
print("all checks passed")
