#!/usr/bin/env python3
"""Makes tests/fixtures/completion/llama-cpp.json: what llama-server answers to its own
`/completion` at a context of 2048, greedy, `n_probs` 3, on two real models (tools/fetch-models.sh
tests): gemma-3-270m Q4_K_M, whose vocabulary adds BOS (so where BOS goes shows), for every
prompt shape (text with special tokens, token ids, text and ids mixed either way round,
`prompt_string`, several prompts at once), 8 tokens; and Qwen2.5-Coder-0.5B-Instruct Q4_K_M,
whose logits the two engines agree on more closely than gemma's (gemma-3-270m's differ by
tenths between llama.cpp's own settings), for the probabilities, 12 tokens. For each answer: the
prompt as llama-server read it (`prompt` and `tokens_evaluated`), the tokens written and their
`completion_probabilities`. The test suite (server/tests/http/llama_completion.rs) sends the same
requests.

    tools/make-completion-goldens.py
"""

import json
import os
import sys

from llama_helpers import post, start_server

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "completion", "llama-cpp.json")
MODELS = os.path.expanduser("~/.cache/engine-assets/models")
GEMMA = os.path.join(MODELS, "gemma-3-270m-q4_k_m.gguf")
QWEN = os.path.join(MODELS, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
N_CTX = 2048


def shapes(port: int) -> list:
    """(name, prompt) of every shape; the ids are llama-server's own tokens of a text."""
    ids = lambda text: post(port, "/tokenize", {"content": text, "add_special": False})["tokens"]
    return [
        ("text with special tokens", "<start_of_turn>user\nName three colours.<end_of_turn>\n<start_of_turn>model\n"),
        ("token ids", ids("The capital of France is")),
        ("mixed, text first", ["The capital of", *ids(" Italy"), " is"]),
        ("mixed, ids first", [*ids("Water"), " boils at"]),
        ("prompt_string", {"prompt_string": "One, two, three,"}),
    ]


QWEN_PROMPTS = [
    ("code", "def fibonacci(n):\n"),
    ("chat template", "<|im_start|>user\nWhat is the boiling point of water?<|im_end|>\n<|im_start|>assistant\n"),
]


def answer(r: dict) -> dict:
    probs = [{"id": p["id"], "token": p["token"], "bytes": p["bytes"], "logprob": round(p["logprob"], 5),
              "top": [[t["id"], round(t["logprob"], 5)] for t in p["top_logprobs"]]} for p in r["completion_probabilities"]]
    return {"tokens_evaluated": r["tokens_evaluated"], "prompt": r["prompt"], "tokens": r["tokens"], "content": r["content"],
            "stop_type": r["stop_type"], "completion_probabilities": probs}


def cases(model: str, prompts: list, n_predict: int, several: bool) -> list:
    """Each prompt's answers from a llama-server on `model`; with `several`, the first three
    prompts sent at once too."""
    server, port = start_server(model, "-t", "2", "-c", str(N_CTX), "--parallel", "1")
    settings = {"n_predict": n_predict, "temperature": 0, "n_probs": 3, "return_tokens": True, "cache_prompt": False}
    try:
        out = []
        for name, prompt in (prompts(port) if callable(prompts) else prompts):
            out.append({"name": name, "request": {"prompt": prompt, **settings}, "answers": [answer(post(port, "/completion", {"prompt": prompt, **settings}))]})
        if several:
            three = [c["request"]["prompt"] for c in out[:3]]
            answers = post(port, "/completion", {"prompt": three, **settings})
            if not isinstance(answers, list) or [a["index"] for a in answers] != [0, 1, 2]:
                sys.exit(f"several prompts: {answers}")
            out.append({"name": "several prompts", "request": {"prompt": three, **settings}, "answers": [answer(a) for a in answers]})
        return out
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    for model in (GEMMA, QWEN):
        if not os.path.exists(model):
            sys.exit(f"{model} is missing: run tools/fetch-models.sh tests")
    golden = {"llama_cpp": "b11434", "n_ctx": N_CTX, "gemma": cases(GEMMA, shapes, 8, True), "qwen": cases(QWEN, QWEN_PROMPTS, 12, False)}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{OUT}: {len(golden['gemma'])} gemma cases, {len(golden['qwen'])} qwen cases")


if __name__ == "__main__":
    main()
