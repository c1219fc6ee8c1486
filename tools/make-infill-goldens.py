#!/usr/bin/env python3
"""Makes tests/fixtures/infill/llama-cpp.json: what llama-server answers to `/infill` on the real
Qwen2.5-Coder-0.5B-Instruct Q4_K_M (tools/fetch-models.sh tests) at a context of 4096, greedy.
For each request: its prompt as token ids (and, for some, the prompt of a llama-server started
with `--spm-infill`, the suffix first) (llama-server's `prompt` text, which it answers with,
tokenized again by its `/tokenize` and checked against `tokens_evaluated`), and its reply. For
the `n_indent` cases, the reply without the limit too, so that the cut can be checked on the
same tokens. For llama.vim's sampler chain (`top_k`, `top_p`, `infill`), draws with a few
seeds: each token drawn and the tokens the chain left before it, with their probabilities. The test suite (tests/tests/golden/infill.rs) builds the same prompts and cuts.

    tools/make-infill-goldens.py
"""

import json
import os
import sys

from llama_helpers import post, start_server

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "infill", "llama-cpp.json")
MODEL = os.path.expanduser("~/.cache/engine-assets/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")

ADD = {"input_prefix": "def add(a, b):\n    return ", "input_suffix": "\n\nprint(add(1, 2))\n"}
SORT = {"input_prefix": "def bubble_sort(arr):\n", "input_suffix": "\n\nprint(bubble_sort([3, 1, 2]))\n"}
METHOD = {"input_prefix": "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n",
          "input_suffix": "\n\n    def pop(self):\n        return self.items.pop()\n"}
EXTRA = [{"filename": "util.py", "text": "def helper(x):\n    return x * 2\n"}, {"text": "TAU = 6.283185307179586\n"}]
LONG = {"input_prefix": "".join(f"value_{i} = {i} * {i}\n" for i in range(700)),
        "input_suffix": "".join(f"print(value_{i})\n" for i in range(300))}

# (name, request body); every request is greedy
PROMPTS = [
    ("prefix and suffix", {**ADD, "n_predict": 16}),
    ("with prompt", {"input_prefix": "def add(a, b):\n", "input_suffix": ADD["input_suffix"], "prompt": "    return ", "n_predict": 16}),
    ("extra files", {**ADD, "input_extra": EXTRA, "n_predict": 16}),
    ("past the budgets", {**LONG, "n_predict": 16}),
    ("empty", {"input_prefix": "", "input_suffix": "", "n_predict": 4}),
    ("warm-up", {"input_prefix": "", "input_suffix": "", "input_extra": EXTRA, "n_predict": 0}),
]
# the requests sent again to a server started with --spm-infill (suffix first)
SPM = ["prefix and suffix", "with prompt", "extra files", "past the budgets"]
# llama.vim's sampler chain, drawn with these seeds: (name, request body, seeds)
CHAIN = {"top_k": 40, "top_p": 0.9, "samplers": ["top_k", "top_p", "infill"]}
SAMPLED = [("add", {**ADD, "n_predict": 16}, [1, 2, 3]), ("bubble sort", {**SORT, "n_predict": 24}, [1, 2, 3]),
           ("method", {**METHOD, "n_predict": 24}, [4, 5])]
# (name, request body without the limit, n_indent values)
INDENTS = [("bubble sort", {**SORT, "n_predict": 64}, [4, 8, 100]), ("method", {**METHOD, "n_predict": 48}, [4, 8, 100])]


def infill(port: int, body: dict) -> dict:
    r = post(port, "/infill", {**body, "temperature": 0, "cache_prompt": False})
    ids = post(port, "/tokenize", {"content": r["prompt"], "add_special": False})["tokens"]
    if len(ids) != r["tokens_evaluated"]:
        sys.exit(f"{body}: the prompt text gives {len(ids)} tokens, {r['tokens_evaluated']} were evaluated")
    return {"prompt_ids": ids, "content": r["content"], "stop_type": r["stop_type"], "tokens_predicted": r["tokens_predicted"]}


def sampled(port: int, body: dict, seed: int) -> dict:
    """A draw through llama.vim's chain: the tokens drawn, and before each draw the tokens the
    chain left with their probabilities (llama-server's post-sampling probabilities)."""
    r = post(port, "/infill", {**body, **CHAIN, "seed": seed, "n_probs": 64, "post_sampling_probs": True, "cache_prompt": False})
    ids = post(port, "/tokenize", {"content": r["prompt"], "add_special": False})["tokens"]
    steps = [{"id": t["id"], "left": [[c["id"], round(c["prob"], 6)] for c in t["top_probs"]]} for t in r["completion_probabilities"]]
    if any(len(s["left"]) >= 64 for s in steps):
        sys.exit(f"{body}: more than 64 tokens left by the chain")
    return {"prompt_ids": ids, "seed": seed, "steps": steps}


def main() -> None:
    if not os.path.exists(MODEL):
        sys.exit(f"{MODEL} is missing: run tools/fetch-models.sh tests")
    server, port = start_server(MODEL, "-t", "2", "-c", "4096", "--parallel", "1")
    try:
        prompts = [{"name": name, "request": body, **infill(port, body)} for name, body in PROMPTS]
        indents = []
        for name, body, limits in INDENTS:
            whole = infill(port, body)
            cuts = [{"n_indent": n, "content": infill(port, {**body, "n_indent": n})["content"]} for n in limits]
            indents.append({"name": name, "request": body, "content": whole["content"], "cuts": cuts})
        chains = [{"name": name, **sampled(port, body, seed)} for name, body, seeds in SAMPLED for seed in seeds]
    finally:
        server.terminate()
        server.wait()
    server, port = start_server(MODEL, "-t", "2", "-c", "4096", "--parallel", "1", "--spm-infill")
    try:
        bodies = dict(PROMPTS)
        spm = [{"name": name, "request": bodies[name], "prompt_ids": infill(port, bodies[name])["prompt_ids"]}
               for name in SPM]
    finally:
        server.terminate()
        server.wait()
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"llama_cpp": "b11434", "n_ctx": 4096, "prompts": prompts, "spm_prompts": spm, "indents": indents, "chain": CHAIN,
                   "sampled": chains}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{OUT}: {len(prompts)} prompts, {len(indents)} indentation cases")


if __name__ == "__main__":
    main()
