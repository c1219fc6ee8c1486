#!/usr/bin/env python3
"""Makes the goldens of ggml's own dot products (tests/fixtures/quants/golden/dots/), which
tests/tests/golden/ggml_dots.rs holds every tier's row dot, the CPU backend's products and the
simulated GPU's against.

For every quantized weight type the engine computes, the 256 rows of the tiny llama's
blk.0.ffn_down (768 columns) as llama-quantize wrote them (the shared fixtures' tiny-llama-TYPE.gguf
for the legacy and K-quants; llama-quantize --pure of tiny-llama-F32.gguf for IQ4_NL, IQ4_XS and
MXFP4, which the test quantizes itself; tests/fixtures/quants/tiny-llama-TYPE.blocks for the grid
i-quants) are multiplied by five activation rows by tools/src/ggml-dots.cpp: ggml-cpu's from_float
of the type's vec_dot_type, then its vec_dot, on the build of ../shared/tools/build-llama-cpp.sh.

Writes activations.f32 (5 x 768 f32: normal; normal with outliers 40x; positive; 1e-3 scale;
the exact lattice below),
TYPE.f32 (ggml's dots, [activation row][weight row]) and index.json (per type: the activation
type, the SHA-256 of ggml's quantized activation rows and of the weight rows used).

    tools/make-dot-goldens.py
"""

import hashlib
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

from llama_helpers import ROOT, build_helper, llama_bin

FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "quants", "golden", "dots")
TENSOR = "blk.0.ffn_down.weight"
COLS = 768
FIXTURE_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
QUANTIZED_TYPES = ["IQ4_NL", "IQ4_XS", "MXFP4"]
GRID_TYPES = ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]


def lattice(rng: random.Random) -> list:
    """Values k / 32 (k from -127 to 127) that every activation format holds exactly: each block
    of 32 has one |k| = 127, so its scale is 1/32 in Q8_0, Q8_1 and Q8_K alike, and its sum of k is
    at most 2048, so Q8_1's f16 sum is exact too. The CPU's Q8_K and the GPU's Q8_1 then give the
    same products, and a GPU kernel can be held to ggml's CPU dots as tightly as a CPU tier."""
    row = []
    while len(row) < COLS:
        block = [rng.randint(-127, 127) for _ in range(32)]
        block[rng.randrange(32)] = rng.choice((-127, 127))
        if abs(sum(block)) <= 2048:
            row += [k / 32.0 for k in block]
    return row


def activations() -> bytes:
    rng = random.Random(20261206)
    rows = [
        [rng.gauss(0.0, 1.0) for _ in range(COLS)],
        [rng.gauss(0.0, 1.0) * (40.0 if rng.random() < 0.01 else 1.0) for _ in range(COLS)],
        [rng.random() * 3.0 for _ in range(COLS)],
        [rng.gauss(0.0, 1e-3) for _ in range(COLS)],
        lattice(rng),
    ]
    return b"".join(struct.pack(f"<{COLS}f", *row) for row in rows)


def tensor_blocks(path: str, ty: str) -> bytes:
    from gguf import GGUFReader

    t = next(t for t in GGUFReader(path).tensors if t.name == TENSOR)
    assert t.tensor_type.name == ty, f"{path}: {TENSOR} is {t.tensor_type.name}, not {ty}"
    assert int(t.shape[0]) == COLS, f"{path}: {TENSOR} has {t.shape[0]} columns"
    return bytes(t.data)


def main() -> None:
    bin_dir = llama_bin()
    exe = build_helper("ggml-dots")
    os.makedirs(OUT, exist_ok=True)
    x = activations()
    with open(os.path.join(OUT, "activations.f32"), "wb") as f:
        f.write(x)
    index = {"tensor": TENSOR, "columns": COLS, "activation_rows": len(x) // (4 * COLS), "types": {}}
    with tempfile.TemporaryDirectory() as work:
        x_path = os.path.join(work, "x.f32")
        with open(x_path, "wb") as f:
            f.write(x)
        for ty in FIXTURE_TYPES + QUANTIZED_TYPES + GRID_TYPES:
            if ty in FIXTURE_TYPES:
                source = f"models/tiny-llama-{ty}.gguf"
                blocks = tensor_blocks(os.path.join(FIX, source), ty)
            elif ty in QUANTIZED_TYPES:
                path = os.path.join(work, f"{ty}.gguf")
                ftype = "MXFP4_MOE" if ty == "MXFP4" else ty
                subprocess.run([os.path.join(bin_dir, "llama-quantize"), "--pure",
                                os.path.join(FIX, "models", "tiny-llama-F32.gguf"), path, ftype, "2"],
                               check=True, capture_output=True)
                source = f"llama-quantize --pure tiny-llama-F32.gguf {ftype}"
                blocks = tensor_blocks(path, ty)
            else:
                source = f"quants/tiny-llama-{ty}.blocks"
                entry = json.load(open(os.path.join(FIX, "quants", f"tiny-llama-{ty}.tensors.json")))["tensors"][TENSOR]
                raw = open(os.path.join(FIX, source), "rb").read()
                blocks = raw[entry["offset"]:entry["offset"] + entry["bytes"]]
            rows_path, dots_path, xq_path = (os.path.join(work, f"{ty}.{e}") for e in ("rows", "dots", "xq"))
            with open(rows_path, "wb") as f:
                f.write(blocks)
            subprocess.run([exe, ty, str(COLS), rows_path, x_path, dots_path, xq_path], check=True)
            dots = open(dots_path, "rb").read()
            with open(os.path.join(OUT, f"{ty}.f32"), "wb") as f:
                f.write(dots)
            index["types"][ty] = {
                "weights_from": source,
                "sha256_weights": hashlib.sha256(blocks).hexdigest(),
                "sha256_activations_quantized": hashlib.sha256(open(xq_path, "rb").read()).hexdigest(),
            }
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{OUT}: {len(index['types'])} types", file=sys.stderr)


if __name__ == "__main__":
    main()
