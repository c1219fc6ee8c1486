#!/usr/bin/env python3
"""Write a tiny Granite Guardian test model of another version from the committed 3.3 one.

The three files of tests/fixtures/guardian/models/ hold the same weights and metadata except
`general.name` and `tokenizer.chat_template`; this rewrites those two string values in place (the
keys keep their positions), pads the header to the alignment again and copies the tensor data, so
the result is the file llama.cpp's goldens were computed on, byte for byte
(tools/make-fixtures.sh checks it against guardian/models/SHA256SUMS).

Usage: guardian-variant.py SRC.gguf VERSION OUT.gguf      VERSION: 3.0 or 3.2
The template comes from tests/fixtures/guardian/templates/granite-guardian-VERSION.jinja.
Needs only the standard library.
"""
import struct
import sys
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent.parent / "tests/fixtures/guardian/templates"
# GGUF value type id -> fixed size in bytes (8 = string, 9 = array are variable)
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
ALIGNMENT = 32  # the files carry no general.alignment


def skip_value(buf, pos, ty):
    if ty in FIXED:
        return pos + FIXED[ty]
    if ty == 8:
        (n,) = struct.unpack_from("<Q", buf, pos)
        return pos + 8 + n
    if ty == 9:
        elem, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if elem in FIXED:
            return pos + FIXED[elem] * count
        for _ in range(count):
            pos = skip_value(buf, pos, elem)
        return pos
    raise ValueError(f"unknown GGUF value type {ty}")


def skip_tensor_info(buf, pos):
    (n,) = struct.unpack_from("<Q", buf, pos)
    pos += 8 + n
    (n_dims,) = struct.unpack_from("<I", buf, pos)
    return pos + 4 + 8 * n_dims + 4 + 8  # dims, type, offset


def gguf_string(text):
    raw = text.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def main():
    if len(sys.argv) != 4 or sys.argv[2] not in ("3.0", "3.2"):
        sys.exit("usage: guardian-variant.py SRC.gguf 3.0|3.2 OUT.gguf")
    src, version, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    new = {
        "general.name": f"granite-guardian-{version}-tiny-synthetic",
        "tokenizer.chat_template": (TEMPLATES / f"granite-guardian-{version}.jinja").read_text(encoding="utf-8"),
    }
    buf = src.read_bytes()
    magic, _version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
    assert magic == b"GGUF", f"{src}: not a GGUF file"
    pos, header = 24, bytearray(buf[:24])
    for _ in range(n_kv):
        (klen,) = struct.unpack_from("<Q", buf, pos)
        key = buf[pos + 8 : pos + 8 + klen].decode("utf-8")
        (ty,) = struct.unpack_from("<I", buf, pos + 8 + klen)
        value_at = pos + 12 + klen
        end = skip_value(buf, value_at, ty)
        header += buf[pos:value_at]
        if key in new:
            assert ty == 8, f"{key} is not a string"
            header += gguf_string(new.pop(key))
        else:
            header += buf[value_at:end]
        pos = end
    assert not new, f"{src} lacks {sorted(new)}"
    infos_at = pos
    for _ in range(n_tensors):
        pos = skip_tensor_info(buf, pos)
    header += buf[infos_at:pos]
    data_at = -(-pos // ALIGNMENT) * ALIGNMENT
    header += bytes(-len(header) % ALIGNMENT)
    out.write_bytes(bytes(header) + buf[data_at:])
    print(f"wrote {out} ({len(header) + len(buf) - data_at} bytes)")


if __name__ == "__main__":
    main()
