"""A small GGUF writer for the repository's Python tools (the model converters and the fuzz
seeds): metadata of every value type, tensors given as raw bytes of a ggml type, laid out as
llama.cpp lays them out (tensor data aligned, padding zero)."""

import struct

# GGUF metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}

# (ggml type id, elements per block, bytes per block) of the types the engine reads
GGML_TYPES = {
    "F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20),
    "Q5_0": (6, 32, 22), "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34), "Q8_1": (9, 32, 36),
    "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110), "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176),
    "Q6_K": (14, 256, 210), "Q8_K": (15, 256, 292), "BF16": (30, 1, 2),
}


def string(s) -> bytes:
    b = s.encode() if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def value(ty: int, v) -> bytes:
    """A value of type `ty`; an ARRAY is `(element type, items)`."""
    if ty == STRING:
        return string(v)
    if ty == ARRAY:
        elem, items = v
        if elem in _SCALAR:
            return struct.pack("<IQ", elem, len(items)) + struct.pack("<" + _SCALAR[elem][1] * len(items), *items)
        return struct.pack("<IQ", elem, len(items)) + b"".join(value(elem, x) for x in items)
    return struct.pack(_SCALAR[ty], v)


def tensor_bytes(type_name: str, dims) -> int:
    """Bytes of a tensor of this type and shape (`dims` innermost first, as GGUF stores them)."""
    _, block, size = GGML_TYPES[type_name]
    n = 1
    for d in dims:
        n *= d
    assert dims[0] % block == 0, f"a row of {dims[0]} is not whole {type_name} blocks"
    return n // block * size


def write(out, kvs, tensors, version: int = 3, alignment: int = 32) -> None:
    """Writes a GGUF file to the binary stream `out`. `kvs`: [(key, type, value)]; `tensors`:
    [(name, dims innermost first, ggml type name, data bytes)]."""
    out.write(b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)))
    for key, ty, v in kvs:
        out.write(string(key) + struct.pack("<I", ty) + value(ty, v))
    header = 24 + sum(len(string(k)) + 4 + len(value(t, v)) for k, t, v in kvs)
    offset = 0
    for name, dims, type_name, data in tensors:
        record = string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        record += struct.pack("<IQ", GGML_TYPES[type_name][0], offset)
        out.write(record)
        header += len(record)
        offset += len(data) + (-len(data) % alignment)
    out.write(b"\0" * (-header % alignment))
    for _, _, _, data in tensors:
        out.write(data)
        out.write(b"\0" * (-len(data) % alignment))


def to_bytes(kvs, tensors, version: int = 3, alignment: int = 32) -> bytes:
    import io

    buf = io.BytesIO()
    write(buf, kvs, tensors, version, alignment)
    return buf.getvalue()
