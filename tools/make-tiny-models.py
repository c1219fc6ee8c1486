#!/usr/bin/env python3
"""Write the two tiny random-weight F32 GGUF models behind tests/fixtures/models/ (the other weight
types are made from these by `engine-cli quantize`, which writes llama-quantize --pure's bytes;
tools/make-fixtures.sh runs both and checks every file's sha256 against models/index.json).

  tiny-llama   arch llama,   SentencePiece ("llama") vocab of 512 tokens, untied output.weight
  tiny-granite arch granite, byte-level BPE ("gpt2", pre "refact") vocab of 512 tokens, tied
               embeddings, the four Granite scalars set to non-trivial values

Shapes (both): n_embd 256, 2 layers, 4 heads, 2 KV heads (head_dim 64), FFN 768, context 512.
Every 2-D weight has a row length that is a multiple of 256, so every ggml type (K-quants too)
applies to every weight. Weights N(0, 0.02), except attn_q/attn_k: N(0, 0.08) (llama) and
N(0, 0.16) (granite, whose attention scale is 1/64), so that attention is not uniform (with 0.02
the softmax is almost flat and RoPE / mask / GQA bugs would move the logits less than quantization
noise does); norm weights 1 + N(0, 0.1). Seeded per model and tensor name (numpy default_rng), so
the output is byte-identical on every run.

Vocabularies (derived from llama.cpp's public vocab-only test files, models/ggml-vocab-*.gguf):
  SPM:  <unk> <s> </s>, the 256 byte-fallback tokens <0x00>..<0xFF>, the first 158 of llama-spm's
        merge-ordered pieces that use only printable ASCII + U+2581 and split into two already-kept
        pieces, and the 95 single-character pieces (printable ASCII + U+2581); llama-spm's scores,
        in llama-spm's order.
  BPE:  <|end_of_text|> (id 0), the 256 GPT-2 byte tokens (bytes_to_unicode order), the results
        of starcoder's first 252 merges (in merge order: a closed set, since each merge only uses
        bytes and earlier merges), then <|start_of_role|> <|end_of_role|> <|tool_call|>.

Usage: make-tiny-models.py OUTDIR [--vocab-dir DIR] [--template GRANITE.jinja]
  defaults: --vocab-dir tests/fixtures/tokenizer (ggml-vocab-llama-spm.gguf, ggml-vocab-starcoder.gguf),
            --template tests/fixtures/templates/ibm-granite-granite-3.3-2B-Instruct.jinja
  writes OUTDIR/tiny-llama-base-f32.gguf and OUTDIR/tiny-granite-base-f32.gguf
Needs: pip install gguf==0.19.0 numpy
"""
import argparse
import hashlib
from pathlib import Path

import numpy as np
import gguf
from gguf import GGUFReader, GGUFWriter

N_VOCAB = 512
SHAPE = dict(n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=768, ctx=512)
MODELS = {
    "tiny-llama": dict(arch="llama", vocab="spm", tied=False, rope_theta=10000.0, eps=1e-5, qk_std=0.08),
    "tiny-granite": dict(arch="granite", vocab="bpe", tied=True, rope_theta=100000.0, eps=1e-6, qk_std=0.16,
                         embedding_scale=12.0, residual_scale=0.22, attention_scale=1.0 / 64.0, logit_scale=8.0),
}


def field(r, name):
    f = r.fields.get(name)
    return None if f is None else f.contents()


def spm_vocab(vocab_dir):
    r = GGUFReader(Path(vocab_dir) / "ggml-vocab-llama-spm.gguf")
    toks = field(r, "tokenizer.ggml.tokens")
    scores = field(r, "tokenizer.ggml.scores")
    types = field(r, "tokenizer.ggml.token_type")
    assert toks[0] == "<unk>" and toks[1] == "<s>" and toks[2] == "</s>" and toks[3] == "<0x00>" and toks[258] == "<0xFF>"
    alphabet = {chr(c) for c in range(32, 127)} | {"\u2581"}
    singles = [i for i in range(259, len(toks)) if len(toks[i]) == 1 and toks[i] in alphabet]
    assert len(singles) == 95, len(singles)  # 94 printable ASCII + U+2581 (no plain space in SPM)
    kept = {toks[i] for i in singles}
    n_merges = N_VOCAB - 259 - len(singles)
    merges = []
    for i in range(259, len(toks)):
        if len(merges) == n_merges:
            break
        t = toks[i]
        if len(t) < 2 or any(c not in alphabet for c in t):
            continue
        if any(t[:k] in kept and t[k:] in kept for k in range(1, len(t))):
            merges.append(i)
            kept.add(t)
    ids = list(range(259)) + sorted(merges + singles)
    assert len(ids) == N_VOCAB
    return dict(model="llama", pre=None, tokens=[toks[i] for i in ids], scores=[float(scores[i]) for i in ids],
                types=[int(types[i]) for i in ids], merges=None, bos=1, eos=2, unk=0, pad=None,
                add_bos=True, add_space_prefix=True)


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def bpe_vocab(vocab_dir):
    r = GGUFReader(Path(vocab_dir) / "ggml-vocab-starcoder.gguf")
    merges_all = field(r, "tokenizer.ggml.merges")
    byte_toks = bytes_to_unicode()
    specials_end = ["<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>"]
    n_merges = N_VOCAB - 1 - 256 - len(specials_end)
    merges = merges_all[:n_merges]
    have = set(byte_toks)
    results = []
    for m in merges:
        a, b = m.split(" ")
        assert a in have and b in have, m
        have.add(a + b)
        results.append(a + b)
    assert len(set(results)) == len(results)
    tokens = ["<|end_of_text|>"] + byte_toks + results + specials_end
    types = [gguf.TokenType.CONTROL] + [gguf.TokenType.NORMAL] * (256 + len(results)) + [gguf.TokenType.CONTROL] * 3
    assert len(tokens) == N_VOCAB and len(set(tokens)) == N_VOCAB
    return dict(model="gpt2", pre="refact", tokens=tokens, scores=None, types=[int(t) for t in types],
                merges=list(merges), bos=0, eos=0, unk=0, pad=0, add_bos=False, add_space_prefix=None)


def rng_for(model, name):
    seed = int.from_bytes(hashlib.sha256(f"{model}:{name}".encode()).digest()[:8], "little")
    return np.random.default_rng(seed)


def tensors_for(cfg):
    E, F, H, KV = SHAPE["n_embd"], SHAPE["n_ff"], SHAPE["n_head"], SHAPE["n_head_kv"]
    hd = E // H
    t = [("token_embd.weight", (N_VOCAB, E), "w")]
    for i in range(SHAPE["n_layer"]):
        b = f"blk.{i}."
        t += [(b + "attn_norm.weight", (E,), "norm"),
              (b + "attn_q.weight", (H * hd, E), "w"),
              (b + "attn_k.weight", (KV * hd, E), "w"),
              (b + "attn_v.weight", (KV * hd, E), "w"),
              (b + "attn_output.weight", (E, H * hd), "w"),
              (b + "ffn_norm.weight", (E,), "norm"),
              (b + "ffn_gate.weight", (F, E), "w"),
              (b + "ffn_up.weight", (F, E), "w"),
              (b + "ffn_down.weight", (E, F), "w")]
    t.append(("output_norm.weight", (E,), "norm"))
    if not cfg["tied"]:
        t.append(("output.weight", (N_VOCAB, E), "w"))
    return t


def write_model(name, cfg, voc, template, out):
    E, H = SHAPE["n_embd"], SHAPE["n_head"]
    w = GGUFWriter(str(out), cfg["arch"])
    w.add_name(name)
    w.add_type("model")
    w.add_context_length(SHAPE["ctx"])
    w.add_embedding_length(E)
    w.add_block_count(SHAPE["n_layer"])
    w.add_feed_forward_length(SHAPE["n_ff"])
    w.add_head_count(H)
    w.add_head_count_kv(SHAPE["n_head_kv"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["eps"])
    w.add_rope_dimension_count(E // H)
    w.add_vocab_size(N_VOCAB)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if cfg["arch"] == "granite":
        w.add_embedding_scale(cfg["embedding_scale"])
        w.add_residual_scale(cfg["residual_scale"])
        w.add_attention_scale(cfg["attention_scale"])
        w.add_logit_scale(cfg["logit_scale"])
    w.add_tokenizer_model(voc["model"])
    if voc["pre"]:
        w.add_tokenizer_pre(voc["pre"])
    w.add_token_list(voc["tokens"])
    w.add_token_types(voc["types"])
    if voc["scores"] is not None:
        w.add_token_scores(voc["scores"])
    if voc["merges"] is not None:
        w.add_token_merges(voc["merges"])
    w.add_bos_token_id(voc["bos"])
    w.add_eos_token_id(voc["eos"])
    w.add_unk_token_id(voc["unk"])
    if voc["pad"] is not None:
        w.add_pad_token_id(voc["pad"])
    w.add_add_bos_token(voc["add_bos"])
    w.add_add_eos_token(False)
    if voc["add_space_prefix"] is not None:
        w.add_add_space_prefix(voc["add_space_prefix"])
    if template is not None:
        w.add_chat_template(template)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for tname, shape, kind in tensors_for(cfg):
        rng = rng_for(name, tname)
        if kind == "norm":
            a = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            std = cfg["qk_std"] if (".attn_q." in tname or ".attn_k." in tname) else 0.02
            a = (std * rng.standard_normal(shape)).astype(np.float32)
        w.add_tensor(tname, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    here = Path(__file__).resolve().parent
    ap.add_argument("--vocab-dir", default=str(here.parent / "tests/fixtures/tokenizer"),
                    help="folder with ggml-vocab-llama-spm.gguf and ggml-vocab-starcoder.gguf")
    ap.add_argument("--template", default=str(here.parent / "tests/fixtures/templates/ibm-granite-granite-3.3-2B-Instruct.jinja"),
                    help="chat template for tiny-granite (granite 3.3 jinja)")
    ap.add_argument("outdir")
    a = ap.parse_args()
    out = Path(a.outdir)
    out.mkdir(parents=True, exist_ok=True)
    tmpl = Path(a.template).read_text(encoding="utf-8")
    for name, cfg in MODELS.items():
        voc = spm_vocab(a.vocab_dir) if cfg["vocab"] == "spm" else bpe_vocab(a.vocab_dir)
        dst = out / f"{name}-base-f32.gguf"
        tmp = out / f"{name}-base-f32.gguf.tmp"
        write_model(name, cfg, voc, tmpl if cfg["arch"] == "granite" else None, tmp)
        tmp.replace(dst)
        print("wrote", dst, dst.stat().st_size)


if __name__ == "__main__":
    main()
