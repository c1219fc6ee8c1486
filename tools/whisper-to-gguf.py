#!/usr/bin/env python3
"""Converts a Whisper model in CTranslate2's format (a folder with model.bin, config.json,
vocabulary.txt and tokenizer.json, as faster-whisper uses it) into one GGUF file that the
engine reads: architecture `whisper`.

    tools/whisper-to-gguf.py MODEL_DIR OUT.gguf [--name NAME] [--type f16|q8_0]

Pure Python (the standard library only). Weight matrices, convolutions and the token embeddings
keep CTranslate2's f16, or with `--type q8_0` are quantized to Q8_0 as llama-quantize writes it
(blocks of 32: scale = max |x| / 127 as f16, values rounded half away from zero; a matrix whose
rows are not whole blocks, the first convolution's 80 x 3 taps, stays f16); biases, norms and
position tables become f32.

model.bin (little-endian): u32 format version (6), the spec name, u32 spec revision, u32
variable count; each variable: its name, u8 rank, u32 dims (outermost first), u8 dtype (0 f32,
1 i8, 2 i16, 3 i32, 4 f16, 5 bf16), u32 byte count, the raw values; then u32 alias count and
(alias, target) name pairs (`decoder/projection/weight` -> the token embeddings: the output
projection is tied). Names are u16-length-prefixed strings ending in a NUL.

The GGUF (dims innermost first, as GGUF stores them):
  metadata  whisper.audio.n_mels, whisper.{encoder,decoder}.{context_length, embedding_length,
            block_count, attention.head_count}, whisper.attention.layer_norm_epsilon,
            whisper.alignment_heads (layer, head pairs, flattened), whisper.suppress_tokens,
            whisper.suppress_tokens_begin, whisper.language_token_ids; the tokenizer as
            tokenizer.ggml.* (model gpt2, pre-tokenizer gpt-2, tokens, token types (every token
            from <|endoftext|> on, the timestamps included, is a control token), merges,
            bos = <|startoftranscript|>, eos = <|endoftext|>)
  encoder   enc.conv{1,2}.{weight [3, in, out], bias}, enc.position [d, 1500],
            enc.blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_out, ffn_norm, ffn_up,
            ffn_down}.{weight, bias} (no attn_k.bias: Whisper's keys have none),
            enc.output_norm.{weight, bias}
  decoder   dec.token_embd.weight [d, n_vocab], dec.position [d, 448],
            dec.blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_out, cross_norm, cross_q,
            cross_k, cross_v, cross_out, ffn_norm, ffn_up, ffn_down}.{weight, bias} (no k
            biases), dec.output_norm.{weight, bias}
  (CTranslate2 fuses q, k and v, and the cross-attention's k and v, as stacked output rows:
  they are split back.)
"""

import argparse
import json
import math
import re
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gguf_writer as gw  # noqa: E402

CT2_DTYPES = {0: ("f", 4), 1: ("b", 1), 2: ("h", 2), 3: ("i", 4), 4: ("e", 2)}
F16 = 4

# CTranslate2 name (layer index as N) -> GGUF name
# (a fused projection is split into the listed parts, stacked as output rows in that order)
LAYER_NAMES = {
    "self_attention/layer_norm": ["attn_norm"],
    "self_attention/linear_0": ["attn_q", "attn_k", "attn_v"],
    "self_attention/linear_1": ["attn_out"],
    "attention/layer_norm": ["cross_norm"],
    "attention/linear_0": ["cross_q"],
    "attention/linear_1": ["cross_k", "cross_v"],
    "attention/linear_2": ["cross_out"],
    "ffn/layer_norm": ["ffn_norm"],
    "ffn/linear_0": ["ffn_up"],
    "ffn/linear_1": ["ffn_down"],
}
PARAM_NAMES = {"weight": "weight", "bias": "bias", "gamma": "weight", "beta": "bias"}


class Variable:
    def __init__(self, dims, dtype, data):
        self.dims, self.dtype, self.data = dims, dtype, data

    def scalar(self):
        fmt, _ = CT2_DTYPES[self.dtype]
        return struct.unpack("<" + fmt, self.data)[0]

    def split(self, n: int):
        """The variable cut into `n` equal parts along its outer dimension."""
        rows = self.dims[0] // n
        size = len(self.data) // n
        return [Variable([rows, *self.dims[1:]], self.dtype, self.data[i * size:(i + 1) * size]) for i in range(n)]

    def is_zero(self) -> bool:
        return not any(self.data)

    def as_f32(self) -> bytes:
        fmt, size = CT2_DTYPES[self.dtype]
        n = len(self.data) // size
        return struct.pack(f"<{n}f", *struct.unpack(f"<{n}{fmt}", self.data))


def read_ct2(path: Path):
    b = path.read_bytes()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, b, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def name():
        nonlocal pos
        n = take("H")
        s = b[pos:pos + n].rstrip(b"\0").decode()
        pos += n
        return s

    version = take("I")
    if version not in (5, 6):
        raise SystemExit(f"{path}: CTranslate2 format version {version} is not supported (5 or 6)")
    spec = name()
    if spec != "WhisperSpec":
        raise SystemExit(f"{path}: a {spec}, not a Whisper model")
    take("I")  # spec revision
    variables = {}
    for _ in range(take("I")):
        key = name()
        rank = take("B")
        dims = [take("I") for _ in range(rank)]
        dtype = take("B")
        n_bytes = take("I")
        if dtype not in CT2_DTYPES:
            raise SystemExit(f"{path}: {key} has dtype {dtype}; only f32, f16 and integers are supported")
        variables[key] = Variable(dims, dtype, b[pos:pos + n_bytes])
        pos += n_bytes
    for _ in range(take("I")):
        alias, target = name(), name()
        variables[alias] = variables[target]
    return variables


def quantize_q8_0(values) -> bytes:
    """ggml's quantize_row_q8_0_ref: per block of 32, d = amax / 127, q = round(x / d)."""
    def f32(x):
        return struct.unpack("<f", struct.pack("<f", x))[0]

    out = bytearray()
    for i in range(0, len(values), 32):
        block = values[i:i + 32]
        amax = max(abs(x) for x in block)
        # each step rounded to f32, as ggml computes it
        d = f32(amax / 127.0)
        inv = f32(1.0 / d) if d else 0.0
        scaled = struct.unpack("<32f", struct.pack("<32f", *[x * inv for x in block]))
        q = [int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1) for x in scaled]
        out += struct.pack("<e", d) + struct.pack("<32b", *q)
    return bytes(out)


# the weight type of matrices: "f16" or "q8_0" (set by --type)
MATRIX_TYPE = "f16"


def tensor(gguf_name, var: Variable, matrix: bool):
    dims = list(reversed(var.dims))
    if matrix and MATRIX_TYPE == "q8_0" and dims[0] % 32 == 0 and len(dims) == 2:
        n = len(var.data) // 2
        values = struct.unpack(f"<{n}f", var.as_f32())
        return (gguf_name, dims, "Q8_0", quantize_q8_0(values))
    if matrix and var.dtype == F16:
        return (gguf_name, dims, "F16", var.data)
    return (gguf_name, dims, "F32", var.as_f32())


def convert(model_dir: Path, out: Path, name: str) -> None:
    v = read_ct2(model_dir / "model.bin")
    config = json.loads((model_dir / "config.json").read_text())
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    tokens = (model_dir / "vocabulary.txt").read_text(encoding="utf-8").split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()

    def n_layers(side):
        return len({m.group(1) for k in v for m in [re.match(rf"{side}/layer_(\d+)/", k)] if m})

    embd = v["decoder/embeddings/weight"]
    n_vocab, d_model = embd.dims
    if n_vocab != len(tokens):
        raise SystemExit(f"vocabulary.txt has {len(tokens)} tokens, the embeddings {n_vocab}")
    eot = tokens.index("<|endoftext|>")
    sot = tokens.index("<|startoftranscript|>")
    merges = tokenizer["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    alignment = [x for pair in config.get("alignment_heads", []) for x in pair]

    U32, I32, F32, STRING, ARRAY = gw.U32, gw.I32, gw.F32, gw.STRING, gw.ARRAY
    kvs = [
        ("general.architecture", STRING, "whisper"),
        ("general.name", STRING, name),
        ("general.file_type", U32, 7 if MATRIX_TYPE == "q8_0" else 1),
        ("whisper.audio.n_mels", U32, v["encoder/conv1/weight"].dims[1]),
        ("whisper.encoder.context_length", U32, v["encoder/position_encodings/encodings"].dims[0]),
        ("whisper.encoder.embedding_length", U32, v["encoder/conv1/weight"].dims[0]),
        ("whisper.encoder.block_count", U32, n_layers("encoder")),
        ("whisper.encoder.attention.head_count", U32, v["encoder/num_heads"].scalar()),
        ("whisper.decoder.context_length", U32, v["decoder/position_encodings/encodings"].dims[0]),
        ("whisper.decoder.embedding_length", U32, d_model),
        ("whisper.decoder.block_count", U32, n_layers("decoder")),
        ("whisper.decoder.attention.head_count", U32, v["decoder/num_heads"].scalar()),
        ("whisper.attention.layer_norm_epsilon", F32, 1e-5),
        ("whisper.alignment_heads", ARRAY, (I32, alignment)),
        ("whisper.suppress_tokens", ARRAY, (I32, config.get("suppress_ids", []))),
        ("whisper.suppress_tokens_begin", ARRAY, (I32, config.get("suppress_ids_begin", []))),
        ("whisper.language_token_ids", ARRAY, (I32, config.get("lang_ids", []))),
        ("tokenizer.ggml.model", STRING, "gpt2"),
        ("tokenizer.ggml.pre", STRING, "gpt-2"),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
        ("tokenizer.ggml.token_type", ARRAY, (I32, [3 if i >= eot else 1 for i in range(n_vocab)])),
        ("tokenizer.ggml.merges", ARRAY, (STRING, merges)),
        ("tokenizer.ggml.bos_token_id", U32, sot),
        ("tokenizer.ggml.eos_token_id", U32, eot),
        ("tokenizer.ggml.add_bos_token", gw.BOOL, False),
    ]

    tensors = []
    for i in (1, 2):
        tensors.append(tensor(f"enc.conv{i}.weight", v[f"encoder/conv{i}/weight"], True))
        tensors.append(tensor(f"enc.conv{i}.bias", v[f"encoder/conv{i}/bias"], False))
    tensors.append(tensor("enc.position", v["encoder/position_encodings/encodings"], False))
    for side, short in (("encoder", "enc"), ("decoder", "dec")):
        if side == "decoder":
            tensors.append(tensor("dec.token_embd.weight", embd, True))
            tensors.append(tensor("dec.position", v["decoder/position_encodings/encodings"], False))
        for layer in range(n_layers(side)):
            for ct2, parts in LAYER_NAMES.items():
                for param, suffix in PARAM_NAMES.items():
                    key = f"{side}/layer_{layer}/{ct2}/{param}"
                    if key not in v:
                        continue
                    for ours, part in zip(parts, v[key].split(len(parts))):
                        # Whisper's key projections have no bias: CTranslate2 fused zeros in
                        if suffix == "bias" and ours.endswith("_k") and part.is_zero():
                            continue
                        tensors.append(tensor(f"{short}.blk.{layer}.{ours}.{suffix}", part, param == "weight"))
        tensors.append(tensor(f"{short}.output_norm.weight", v[f"{side}/layer_norm/gamma"], False))
        tensors.append(tensor(f"{short}.output_norm.bias", v[f"{side}/layer_norm/beta"], False))

    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as f:
        gw.write(f, kvs, tensors)
    tmp.replace(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--name", default=None)
    p.add_argument("--type", choices=["f16", "q8_0"], default="f16", help="the weight matrices' type")
    a = p.parse_args()
    global MATRIX_TYPE
    MATRIX_TYPE = a.type
    convert(a.model_dir, a.out, a.name or a.model_dir.name)


if __name__ == "__main__":
    main()
