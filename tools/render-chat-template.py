#!/usr/bin/env python3
"""Render a chat template exactly as Hugging Face transformers does, to make golden files.

Usage:
    tools/render-chat-template.py TEMPLATE.jinja CASE.json [OUT]
    tools/render-chat-template.py --from-gguf MODEL.gguf OUT.jinja
    tools/render-chat-template.py --probes PROBES.json

The first form renders TEMPLATE.jinja for the inputs in CASE.json and writes the result to OUT
(or stdout) as UTF-8 bytes, nothing added or stripped. When rendering raises, it writes
`ExceptionType: message` to OUT with `.error` in place of its extension (or to stderr without
OUT) and exits with status 2.

CASE.json holds (the shape of the corpus in tests/fixtures/templates/):
    messages               list of OpenAI/HF messages (required)
    tools                  null or a list of JSON-schema tools
    bos_token, eos_token   the tokenizer's special-token texts; absent when it has none
    add_generation_prompt  bool (default false)
    strftime_now           null, or an ISO date-time ("2025-01-15T09:30:00") that freezes the
                           clock seen by the template's `strftime_now`
    extra                  optional object of further template variables (enable_thinking, ...)

The --probes form reads a JSON list of `{"template": ..., "vars": {...}}` (vars may hold
`messages`; everything else is passed as a template variable, with tools=None,
add_generation_prompt=False and the clock frozen at 2025-01-15T09:30:00), renders each entry and
writes the list back with `expected` (the text) or `error` (`Type: message`) set on each.

The --from-gguf form extracts `tokenizer.chat_template` from a GGUF file (with the `gguf` package if it
is installed, else with the small reader below) and writes it verbatim.

Renderer: `transformers.utils.chat_template_utils.render_jinja_template` (transformers 5.x, which
needs jinja2 >= 3.1.6 and no torch), the function behind
`tokenizer.apply_chat_template(..., tokenize=False)`:
    pip install transformers jinja2
"""

import datetime as _dt
import json
import struct
import sys


def render(template_path, case_path):
    from transformers.utils import chat_template_utils as ctu

    with open(template_path, encoding="utf-8") as f:
        source = f.read()
    with open(case_path, encoding="utf-8") as f:
        case = json.load(f)

    if case.get("strftime_now"):
        freeze_clock(ctu, case["strftime_now"])

    kwargs = dict(case.get("extra") or {})
    # apply_chat_template passes only the special tokens the tokenizer has.
    for key in ("bos_token", "eos_token"):
        if case.get(key) is not None:
            kwargs[key] = case[key]
    out = ctu.render_jinja_template(
        conversations=[case["messages"]],
        tools=case.get("tools"),
        chat_template=source,
        add_generation_prompt=bool(case.get("add_generation_prompt", False)),
        **kwargs,
    )
    rendered = out[0] if isinstance(out, tuple) else out
    return rendered[0] if isinstance(rendered, list) else rendered


def freeze_clock(ctu, iso):
    fixed = _dt.datetime.fromisoformat(iso)

    class FrozenDatetime(_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return fixed

    # `strftime_now` looks the module's `datetime` up at call time.
    ctu.datetime = FrozenDatetime


def render_probes(path):
    from transformers.utils import chat_template_utils as ctu

    freeze_clock(ctu, "2025-01-15T09:30:00")
    with open(path, encoding="utf-8") as f:
        probes = json.load(f)
    for probe in probes:
        probe.pop("expected", None)
        probe.pop("error", None)
        variables = dict(probe["vars"])
        messages = variables.pop("messages", [])
        try:
            out = ctu.render_jinja_template(
                conversations=[messages], tools=None, chat_template=probe["template"],
                add_generation_prompt=False, **variables,
            )
            rendered = out[0] if isinstance(out, tuple) else out
            probe["expected"] = rendered[0]
        except Exception as e:
            probe["error"] = f"{type(e).__name__}: {e}"
    with open(path, "w", encoding="utf-8", newline="") as f:
        json.dump(probes, f, indent=1, ensure_ascii=False)
        f.write("\n")


def gguf_chat_template(path):
    try:
        import gguf  # type: ignore

        reader = gguf.GGUFReader(path)
        field = reader.fields["tokenizer.chat_template"]
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    except ImportError:
        pass
    # Minimal GGUF v2/v3 metadata walk: enough to find one string key.
    with open(path, "rb") as f:
        data = f.read(64 << 20)
    if data[:4] != b"GGUF":
        raise SystemExit(f"{path}: not a GGUF file")
    pos = 8
    (_n_tensors, n_kv) = struct.unpack_from("<QQ", data, pos)
    pos += 16
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def read_str(p):
        (n,) = struct.unpack_from("<Q", data, p)
        return data[p + 8 : p + 8 + n], p + 8 + n

    def skip(t, p):
        if t == 8:
            return read_str(p)[1]
        if t == 9:
            (et, n) = struct.unpack_from("<IQ", data, p)
            p += 12
            for _ in range(n):
                p = skip(et, p)
            return p
        return p + sizes[t]

    for _ in range(n_kv):
        key, pos = read_str(pos)
        (t,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if key == b"tokenizer.chat_template" and t == 8:
            return read_str(pos)[0].decode("utf-8")
        pos = skip(t, pos)
    raise SystemExit(f"{path}: no tokenizer.chat_template")


def main(argv):
    if len(argv) == 3 and argv[0] == "--from-gguf":
        with open(argv[2], "w", encoding="utf-8", newline="") as f:
            f.write(gguf_chat_template(argv[1]))
        return 0
    if len(argv) == 2 and argv[0] == "--probes":
        render_probes(argv[1])
        return 0
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 1
    out_path = argv[2] if len(argv) == 3 else None
    try:
        text = render(argv[0], argv[1])
    except Exception as e:  # the template's own failure is a golden result too
        msg = f"{type(e).__name__}: {e}"
        if out_path is None:
            print(msg, file=sys.stderr)
        else:
            err_path = out_path.rsplit(".", 1)[0] + ".error"
            with open(err_path, "w", encoding="utf-8", newline="") as f:
                f.write(msg)
        return 2
    if out_path is None:
        sys.stdout.buffer.write(text.encode("utf-8"))
    else:
        with open(out_path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
