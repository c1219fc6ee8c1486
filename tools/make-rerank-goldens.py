#!/usr/bin/env python3
"""Makes tests/fixtures/rerank/llama-cpp.json: llama-server's reranking scores on the tests'
cross-encoder (engine_tests::reranker: the all-MiniLM-L6-v2 fixture with a seeded random
classification head, pooling rank), written to a file by the `reranker-model` binary.
llama-server (../shared/tools/build-llama-cpp.sh) runs with `--reranking`, and each pair's
`/v1/rerank` score is kept with its prompt token count; a second llama-server on the same file
with `--embeddings --pooling cls` gives the pair's first-token hidden state (the input of the
classification head), from the pair's tokens as llama-server builds them (`[CLS] query [SEP]
document [SEP]`, checked against the rerank token count). The test suite
(tests/tests/golden/rerank.rs) builds the same model in memory and compares.

    tools/make-rerank-goldens.py
"""

import json
import os
import subprocess
import sys
import tempfile

from llama_helpers import post, start_server

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "rerank", "llama-cpp.json")

CASES = [
    ("What is a panda?", ["hi", "The giant panda is a bear species endemic to China.", "Paris is the capital of France."]),
    ("how do I bake bread", ["Mix flour, water, salt and yeast; let it rise; bake at 230 C.", "Bread", "The stock market fell today.",
                             "Sourdough needs a starter that you feed daily."]),
    ("Café prices in Zürich?", ["A coffee costs about 5 CHF in Zürich.", "Zürich is Switzerland's largest city.", ""]),
    ("a", ["a", "b", "a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a"]),
]

# the flags of both servers
FLAGS = ("-t", "2", "-ub", "512", "-b", "512")


def main() -> None:
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "engine-tests", "--bin", "reranker-model"], cwd=ROOT, check=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "tiny-reranker.gguf")
        subprocess.run([os.path.join(ROOT, "target", "release", "reranker-model"),
                        os.path.join(FIX, "real", "all-MiniLM-L6-v2-Q8_0.gguf"), model], check=True)
        cases = []
        server, port = start_server(model, *FLAGS, "--reranking")
        try:
            for query, documents in CASES:
                # one document per request: each request's usage is that pair's prompt tokens
                for doc in documents:
                    r = post(port, "/v1/rerank", {"query": query, "documents": [doc]})
                    q = post(port, "/tokenize", {"content": query, "add_special": False})["tokens"]
                    d = post(port, "/tokenize", {"content": doc, "add_special": False})["tokens"]
                    ids = [101] + q + [102] + d + [102]
                    if len(ids) != r["usage"]["prompt_tokens"]:
                        sys.exit(f"{query!r} / {doc!r}: {len(ids)} tokens built, {r['usage']['prompt_tokens']} reranked")
                    cases.append({"query": query, "document": doc, "score": r["results"][0]["relevance_score"],
                                  "prompt_tokens": len(ids), "ids": ids})
        finally:
            server.terminate()
            server.wait()
        server, port = start_server(model, *FLAGS, "--embeddings", "--pooling", "cls")
        try:
            for c in cases:
                e = post(port, "/embedding", {"content": c["ids"], "embd_normalize": -1})
                c["cls_state"] = [float(f"{x:.7g}") for x in e[0]["embedding"][0]]
        finally:
            server.terminate()
            server.wait()
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"llama_cpp": "b11434", "pairs": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{OUT}: {len(cases)} pairs")


if __name__ == "__main__":
    main()
