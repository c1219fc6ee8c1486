#!/usr/bin/env python3
"""Makes tests/fixtures/lora/: llama.cpp's logits with LoRA adapters on the tiny architecture
models. The tests' adapters (engine_tests::lora, seeded random pairs in llama.cpp's adapter
layout) are written to files by the `lora-adapters` binary; tools/src/lora-logits.cpp, built
against llama.cpp b11434 (../shared/tools/build-llama-cpp.sh), loads each case's base model and
adapters (llama_adapter_lora_init, llama_set_adapters_lora at the case's scales) and writes the
logits of every position of the case's ids (one llama_decode, f32 KV cache; an activated
adapter's case decodes the ids before its `from` without the adapters, then the rest with them). cases.json records
each adapter file's sha256, which the test (tests/tests/golden/lora.rs) checks against the bytes
it builds in memory before comparing its logits.

    tools/make-lora-goldens.py
"""

import hashlib
import json
import os
import re
import subprocess
import tempfile

from llama_helpers import ROOT, build_helper

FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "lora")


def rust_table(name: str) -> str:
    """The text of the `NAME: &[...] = &[ ... ];` table of tests/src/lora.rs."""
    text = open(os.path.join(ROOT, "tests", "src", "lora.rs"), encoding="utf-8").read()
    return text[text.index(f"pub const {name}"):].split("];", 1)[0]


def main() -> None:
    exe = build_helper("lora-logits")
    subprocess.run(["cargo", "build", "-q", "-p", "engine-tests", "--bin", "lora-adapters"], check=True, cwd=ROOT)
    ids = re.findall(r"\d+", rust_table("IDS").split("=", 1)[1])
    cases = re.findall(r'name: "([^"]+)",\s*base: "([^"]+)",\s*adapters: &\[([^\]]*)\],\s*from: (\d+)', rust_table("CASES"))
    os.makedirs(OUT, exist_ok=True)
    index = {"llama_cpp": "b11434", "ids": [int(i) for i in ids], "adapters": {}, "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([os.path.join(ROOT, "target", "debug", "lora-adapters"), tmp], check=True)
        for f in sorted(os.listdir(tmp)):
            index["adapters"][f[:-5]] = hashlib.sha256(open(os.path.join(tmp, f), "rb").read()).hexdigest()
        for name, base, adapters, start in cases:
            pairs = re.findall(r'\("([^"]+)", ([0-9.]+)\)', adapters)
            args = [exe, "-m", os.path.join(FIX, base), "--ids", ",".join(ids), "-o", os.path.join(OUT, f"{name}.logits.bin")]
            if start != "0":
                args += ["--from", start]
            for adapter, scale in pairs:
                args += ["--lora", f"{os.path.join(tmp, adapter)}.gguf:{scale}"]
            n_vocab = int(subprocess.run(args, check=True, capture_output=True, text=True).stdout.strip())
            index["cases"].append({"name": name, "n_vocab": n_vocab})
            print(f"{name}: {len(ids)} rows of {n_vocab} logits")
    with open(os.path.join(OUT, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
