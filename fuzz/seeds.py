#!/usr/bin/env python3
"""Writes the seed inputs of every fuzz target into OUT/<target>/ (default fuzz/corpus):
small GGUF files of every value and tensor type, the tokenizer test strings of
tests/fixtures/tokenizer, the template test conversations of tests/fixtures/templates, JSON
schemas covering the keywords structured output supports, a valid body for every POST route,
multipart transcription forms, and audio files (WAV of every sample format, FLAC, MP3, Ogg
Vorbis), and the vision test images (PNG). Deterministic: the same files on every run."""

import hashlib
import json
import random
import re
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"

def post_routes() -> list:
    """The POST routes of fuzz/src/http.rs's POST_ROUTES, in its order (the first byte of an
    http_requests input picks one)."""
    source = (Path(__file__).resolve().parent / "src" / "http.rs").read_text()
    block = source[source.index("pub const POST_ROUTES"):]
    block = block[:block.index("];")]
    return re.findall(r'"(/[^"]*)"', block)


POST_ROUTES = post_routes()


def write(out: Path, target: str, data: bytes) -> None:
    d = out / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()).write_bytes(data)


# ---- GGUF ------------------------------------------------------------------------------------

sys.path.insert(0, str(ROOT / "tools"))
import gguf_writer as gw  # noqa: E402
from gguf_writer import ARRAY, BOOL, F32, F64, I8, I16, I32, I64, STRING, U8, U16, U32, U64  # noqa: E402

GGML_TYPES = gw.GGML_TYPES


def gguf_file(kvs, tensors, version=3, alignment=32) -> bytes:
    return gw.to_bytes(kvs, tensors, version, alignment)


def tensor(rng: random.Random, name: str, tname: str, rows: int):
    _, block, size = GGML_TYPES[tname]
    row_len = block if block > 1 else 64
    n_bytes = rows * (row_len // block) * size
    return (name, [row_len, rows], tname, bytes(rng.getrandbits(8) for _ in range(n_bytes)))


def vocab_kvs(model: str):
    """A tiny vocabulary of each tokenizer kind, as its GGUF metadata."""
    words = ["<unk>", "<s>", "</s>", "\u2581hello", "\u2581world", "he", "llo", "\u2581", "a", "b"]
    if model == "gpt2":
        words = ["<|endoftext|>", "h", "e", "l", "o", "he", "ll", "hell", "hello", "\u0120", "\u0120w"]
    if model == "bert":
        words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s", "a"]
    kvs = [
        ("general.architecture", STRING, "llama" if model != "bert" else "bert"),
        ("tokenizer.ggml.model", STRING, model),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, words)),
        ("tokenizer.ggml.token_type", ARRAY, (I32, [3 if w.startswith(("<", "[")) else 1 for w in words])),
        ("tokenizer.ggml.bos_token_id", U32, 1 if model == "llama" else 0),
        ("tokenizer.ggml.eos_token_id", U32, 2 if model == "llama" else 0),
    ]
    if model == "llama":
        kvs.append(("tokenizer.ggml.scores", ARRAY, (F32, [float(-i) for i in range(len(words))])))
    if model == "gpt2":
        kvs += [("tokenizer.ggml.pre", STRING, "qwen2"), ("tokenizer.ggml.merges", ARRAY, (STRING, ["h e", "l l", "he ll", "hell o", "\u0120 w"]))]
    if model == "bert":
        kvs += [("tokenizer.ggml.seperator_token_id", U32, 3), ("tokenizer.ggml.padding_token_id", U32, 0)]
    return kvs


def gguf_seeds(out: Path) -> None:
    rng = random.Random(0)
    every_value = [
        ("general.architecture", STRING, "llama"),
        ("general.name", STRING, "fuzz"),
        ("v.u8", U8, 7), ("v.i8", I8, -7), ("v.u16", U16, 700), ("v.i16", I16, -700),
        ("v.u32", U32, 70000), ("v.i32", I32, -70000), ("v.f32", F32, 0.5), ("v.bool", BOOL, True),
        ("v.u64", U64, 1 << 40), ("v.i64", I64, -(1 << 40)), ("v.f64", F64, 0.25),
        ("v.strings", ARRAY, (STRING, ["a", "bc", ""])),
        ("v.nested", ARRAY, (ARRAY, [(U8, [1, 2]), (F32, [1.5])])),
        ("llama.context_length", U32, 64),
    ]
    for tname in GGML_TYPES:
        write(out, "gguf", gguf_file(every_value[:3], [tensor(rng, f"t.{tname}", tname, 2)]))
    all_types = [tensor(rng, f"t.{t}", t, 1) for t in GGML_TYPES]
    write(out, "gguf", gguf_file(every_value, all_types))
    write(out, "gguf", gguf_file(every_value + [("general.alignment", U32, 64)], all_types[:4], alignment=64))
    write(out, "gguf", gguf_file(every_value[:5], all_types[:3], version=2))
    write(out, "gguf", gguf_file([], []))
    for model in ["llama", "gpt2", "bert"]:
        write(out, "gguf", gguf_file(vocab_kvs(model), []))


# ---- text targets ----------------------------------------------------------------------------

def tokenizer_seeds(out: Path) -> None:
    for target, vocab in [("tokenizer_spm", "llama-spm"), ("tokenizer_bpe", "qwen2"), ("tokenizer_wpm", "bert-bge")]:
        text = (FIXTURES / "tokenizer" / f"ggml-vocab-{vocab}.gguf.inp").read_bytes()
        for case in text.split(b"\n__ggml_vocab_test__\n"):
            write(out, target, case)
        write(out, target, b"<|im_start|>user\nhi<|im_end|>[CLS] <s></s>\xff\xfe")


def template_seeds(out: Path) -> None:
    templates = sorted(p for p in (FIXTURES / "templates").iterdir() if p.suffix == ".jinja")
    for i, path in enumerate(templates):
        for case in sorted(path.parent.glob(path.stem + ".case*.json")):
            c = json.loads(case.read_text())
            body = {"messages": c["messages"], "tools": c.get("tools"), "add_generation_prompt": c.get("add_generation_prompt", True)}
            write(out, "chat_template", bytes([i]) + json.dumps(body).encode())
        thinking = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4", "reasoning_content": "adding"}],
                    "kwargs": {"enable_thinking": False}}
        write(out, "chat_template", bytes([i]) + json.dumps(thinking).encode())


SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150}}, "required": ["name"]},
    {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3},
    {"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}], "items": False},
    {"enum": ["red", "green", 3, None]},
    {"const": {"a": [1, 2]}},
    {"anyOf": [{"type": "string", "minLength": 2, "maxLength": 5}, {"type": "null"}]},
    {"oneOf": [{"type": "integer", "multipleOf": 3}, {"type": "string", "pattern": "^[a-z]+$"}]},
    {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}}, {"required": ["a"]}]},
    {"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}, "v": {"type": "integer"}}}}, "$ref": "#/$defs/node"},
    {"type": "string", "format": "date-time"},
    {"type": "string", "format": "email"},
    {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    {"type": "object", "additionalProperties": {"type": "integer"}},
    {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": False},
    {"type": ["integer", "string"]},
    {"type": "integer", "minimum": -5, "maximum": 5},
    {"type": "number", "maximum": 1e300},
    {},
    True,
    {"type": "object", "patternProperties": {"^a": {"type": "string"}}},
    {"type": "array", "uniqueItems": True},
    {"not": {"type": "string"}},
]


# GBNF grammars (and one llguidance Lark grammar) for the grammar compiler
GRAMMARS = [
    'root ::= ( "yes" | "no" ) ", " [a-z]{2,5} "."\n',
    'root ::= value\nvalue ::= "[" ( value ( "," value )* )? "]" | [0-9]+\n',
    '# comment\r\nroot ::= [^"\\\\\\x00-\\x1F]* "\\u00e9" .{1,3} ( "a" | )?\r\n',
    'root ::= <[198]> !<[50256]>* "x"\n',
    'root ::= list\nlist ::= list "," item | item\nitem ::= [\\U0001F600-\\U0001F64F] | "\\x41"\n',
    '%llguidance {}\nstart: "a" /[0-9]+/\n',
]


def schema_seeds(out: Path) -> None:
    for schema in SCHEMAS:
        write(out, "json_schema", b"\0" + json.dumps(schema).encode())
    tools = [{"name": "get_weather", "parameters": SCHEMAS[0]}, {"name": "noop"}, {"name": "list", "parameters": SCHEMAS[1]}]
    write(out, "json_schema", b"\1" + json.dumps(tools).encode())
    write(out, "json_schema", b"\1" + json.dumps(tools[:1]).encode())
    for grammar in GRAMMARS:
        write(out, "json_schema", b"\2" + grammar.encode())


# ---- HTTP targets ----------------------------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "weather", "parameters": SCHEMAS[0]}}]
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]

BODIES = {
    "/v1/chat/completions": [
        {"model": "tiny", "messages": CHAT, "max_tokens": 4},
        {"model": "tiny", "messages": CHAT, "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}},
        {"model": "tiny", "messages": CHAT, "max_tokens": 4, "tools": TOOLS, "tool_choice": "required"},
        {"model": "tiny", "messages": CHAT, "max_tokens": 4, "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMAS[0]}}},
        {"model": "tiny", "messages": CHAT, "max_tokens": 4, "grammar": GRAMMARS[0]},
        {"model": "tiny", "messages": CHAT, "max_tokens": 4, "logprobs": True, "top_logprobs": 2, "n": 2, "seed": 1, "temperature": 0.7,
         "top_p": 0.9, "stop": ["\n"], "logit_bias": {"5": -100}, "presence_penalty": 0.5, "timeout": 0.5},
        {"model": "tiny", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                                       {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
                                       {"role": "tool", "tool_call_id": "c1", "content": "sunny"}], "max_tokens": 2},
    ],
    "/v1/completions": [
        {"model": "tiny", "prompt": "Once upon", "max_tokens": 4},
        {"model": "tiny", "prompt": [[1, 2, 3]], "max_tokens": 2, "echo": True, "logprobs": 2, "stream": True},
        {"model": "tiny", "prompt": ["a", "b"], "max_tokens": 2, "suffix": None, "best_of": 1},
        {"model": "tiny", "prompt": "Once upon", "max_tokens": 4, "grammar": GRAMMARS[1]},
    ],
    "/v1/rerank": [
        {"model": "tiny", "query": "What is a panda?", "documents": ["hi", {"text": "A bear."}], "top_n": 1, "return_documents": True},
        {"model": "tiny", "query": "What is a panda?", "texts": ["hi", "A bear."], "return_text": True},
    ],
    "/v1/embeddings": [
        {"model": "tiny", "input": "hello"},
        {"model": "tiny", "input": ["a", "b"], "encoding_format": "base64", "dimensions": 8},
        {"model": "tiny", "input": [[1, 2, 3]]},
    ],
    "/v1/responses": [
        {"model": "tiny", "input": "hi", "max_output_tokens": 4},
        {"model": "tiny", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                                    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                                    {"type": "function_call_output", "call_id": "c", "output": "ok"}],
         "instructions": "Be brief.", "max_output_tokens": 4, "stream": True, "store": False},
        {"model": "tiny", "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": SCHEMAS[0]}], "tool_choice": "required", "max_output_tokens": 4},
        {"model": "tiny", "input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": SCHEMAS[1]}}, "max_output_tokens": 4},
    ],
    "/v1/messages": [
        {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "system": "Be brief."},
        {"model": "tiny", "max_tokens": 4, "stream": True, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
         "tools": [{"name": "f", "input_schema": SCHEMAS[0]}], "tool_choice": {"type": "any"}},
        {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
                                                        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}], "thinking": {"type": "enabled", "budget_tokens": 1024}},
    ],
    "/v1/messages/count_tokens": [{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "system": [{"type": "text", "text": "s"}]}],
    "/v1/guard": [
        {"model": "tiny", "input": {"user": "How do I pick a lock?"}, "risks": ["harm"]},
        {"model": "tiny", "input": {"user": "q", "assistant": "a", "context": "c"}, "risks": ["answer_relevance"], "think": False},
        {"model": "tiny", "input": {"messages": [{"role": "user", "content": "hi"}]}, "risk_definitions": {"pirate": "talks like a pirate"}, "risks": ["pirate"]},
    ],
    "/v1/guard/scan": [{"model": "tiny", "input": {"user": "hello"}, "risks": ["harm", "jailbreak"], "thresholds": {"harm": 0.4}}],
    "/v1/guard/batch": [{"model": "tiny", "inputs": [{"user": "a"}, {"user": "b", "assistant": "c"}], "risks": ["harm"]}],
    "/v1/moderations": [{"model": "tiny", "input": "I want to hurt someone"}, {"input": ["a", {"type": "text", "text": "b"}]}],
    "/tokenize": [{"model": "tiny", "content": "hello world", "add_special": True, "with_pieces": True}],
    "/detokenize": [{"model": "tiny", "tokens": [1, 2, 3, 400]}],
    "/apply-template": [{"model": "tiny", "messages": CHAT, "tools": TOOLS}, {"model": "tiny", "messages": CHAT, "add_generation_prompt": False}],
    "/v1/models": [{"model": "tiny-llama-Q8_0.gguf", "role": "chat"}],
    "/infill": [{"model": "tiny", "input_prefix": "def f(", "input_suffix": "):\n", "input_extra": [{"filename": "a.py", "text": "x = 1"}], "prompt": "x", "n_predict": 4, "stream": True}],
}


def http_seeds(out: Path) -> None:
    for path, bodies in BODIES.items():
        i = POST_ROUTES.index(path)
        for body in bodies:
            write(out, "http_requests", bytes([i]) + json.dumps(body).encode())
        write(out, "http_requests", bytes([i]) + b"{}")


def multipart_seeds(out: Path) -> None:
    wav = b"RIFF" + struct.pack("<I", 36) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16) + b"data" + struct.pack("<I", 0)
    for fields in [
        [("model", b"whisper-fuzz")],
        [("model", b"whisper-fuzz"), ("response_format", b"verbose_json"), ("language", b"en"), ("temperature", b"0.2"), ("prompt", b"names")],
        [("model", b"whisper-fuzz"), ("response_format", b"srt")],
        [("model", b"whisper-fuzz"), ("response_format", b"vtt"), ("timestamp_granularities[]", b"segment")],
        [("model", b"whisper-fuzz"), ("response_format", b"text"), ("stream", b"false")],
    ]:
        body = b""
        for name, value in fields:
            body += b"--XyZ\r\nContent-Disposition: form-data; name=\"" + name.encode() + b"\"\r\n\r\n" + value + b"\r\n"
        body += b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n" + wav + b"\r\n--XyZ--\r\n"
        write(out, "multipart", b"multipart/form-data; boundary=XyZ\n" + body)


def wav(rate: int, channels: int, bits: int, float_samples: bool, frames) -> bytes:
    """A WAV of `bits`-bit samples (IEEE float when `float_samples`)."""
    fmt = {8: "B", 16: "h", 24: None, 32: "f" if float_samples else "i"}[bits]
    data = b""
    for x in frames:
        for _ in range(channels):
            if bits == 8:
                data += struct.pack("<B", int(x * 127) + 128)
            elif bits == 24:
                data += struct.pack("<i", int(x * 8_388_607))[:3]
            elif fmt == "f":
                data += struct.pack("<f", x)
            else:
                data += struct.pack("<" + fmt, int(x * (2 ** (bits - 1) - 1)))
    block = channels * bits // 8
    head = struct.pack("<IHHIIHH", 16, 3 if float_samples else 1, channels, rate, rate * block, block, bits)
    return b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + head + b"data" + struct.pack("<I", len(data)) + data


def audio_seeds(out: Path) -> None:
    import math
    frames = [0.5 * math.sin(2 * math.pi * 440 * i / 8000) for i in range(400)]
    for rate, channels, bits, fl in [(8000, 1, 8, False), (16000, 1, 16, False), (44100, 2, 16, False), (22050, 1, 24, False),
                                     (48000, 2, 32, True), (16000, 1, 32, False)]:
        write(out, "audio", wav(rate, channels, bits, fl, frames))
    for path in sorted((FIXTURES / "audio").glob("tone-440hz.*")):
        write(out, "audio", path.read_bytes())
    write(out, "audio", (FIXTURES / "whisper" / "clips" / "question.wav").read_bytes()[:16384])


def image_seeds(out: Path) -> None:
    for path in sorted((FIXTURES / "vision").glob("*.png")):
        write(out, "image", path.read_bytes())


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "fuzz" / "corpus"
    gguf_seeds(out)
    tokenizer_seeds(out)
    template_seeds(out)
    schema_seeds(out)
    http_seeds(out)
    multipart_seeds(out)
    audio_seeds(out)
    image_seeds(out)


if __name__ == "__main__":
    main()
