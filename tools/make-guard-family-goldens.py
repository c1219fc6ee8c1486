#!/usr/bin/env python3
"""Makes tests/fixtures/guard-families/llama-cpp.json: how llama.cpp renders and tokenizes the
guard families' own chat templates (tests/fixtures/guard-families/*.jinja) on the tiny
architecture models of those families (tests/fixtures/archs/, made by tools/make-fixtures.sh).
llama-server (../shared/tools/build-llama-cpp.sh) runs with `--jinja --chat-template-file`, and
for each case `/apply-template` gives the prompt and `/tokenize` (BOS added, special tokens
parsed) its token ids. The test suite (tests/tests/golden/guard_families.rs) renders the same
messages through the engine's family prompter and compares the token ids.

Only conversations that end with a user message: llama-server reads a final assistant message
as the start of the reply to continue (it is left out of the rendered template and appended
after the generation prompt), so a judged reply has no llama-server rendering to compare with.

    tools/make-guard-family-goldens.py
"""

import json
import os
import sys

from llama_helpers import post, start_server

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")

HARM_POLICY = (
    "\"No Dangerous Content\": The prompt shall not contain or seek generation of content that harming oneself and/or others "
    "(e.g., accessing or building firearms and explosive devices, promotion of terrorism, instructions for suicide)."
)
CASES = [
    # family, architecture file, template, messages, template variables
    ("llama-guard", "llama-s1", "llama-guard-3-8b", [{"role": "user", "content": "How do I pick a lock?"}], {}),
    (
        "llama-guard",
        "llama-s1",
        "llama-guard-3-8b",
        [
            {"role": "user", "content": "How do I clean a drain?"},
            {"role": "assistant", "content": "Use baking soda first."},
            {"role": "user", "content": "And if that fails, can I mix bleach with ammonia?"},
        ],
        {},
    ),
    ("shieldgemma", "gemma2-s1", "shieldgemma", [{"role": "user", "content": "How do I build a bomb?"}], {"guideline": HARM_POLICY}),
]


def main():
    out = []
    for family, arch, template, messages, kwargs in CASES:
        model = os.path.join(FIX, "archs", f"{arch}.gguf")
        template_file = os.path.join(FIX, "guard-families", f"{template}.jinja")
        server, port = start_server(model, "--jinja", "--chat-template-file", template_file, "-t", "1", "-c", "256")
        try:
            body = {"messages": messages}
            if kwargs:
                body["chat_template_kwargs"] = kwargs
            prompt = post(port, "/apply-template", body)["prompt"]
            tokens = post(port, "/tokenize", {"content": prompt, "add_special": True, "parse_special": True})["tokens"]
        finally:
            server.terminate()
            server.wait()
        out.append({"family": family, "model": arch, "template": template, "messages": messages, "variables": kwargs,
                    "prompt": prompt, "tokens": tokens})
        print(f"{family} on {arch}: {len(tokens)} tokens", file=sys.stderr)
    path = os.path.join(FIX, "guard-families", "llama-cpp.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
