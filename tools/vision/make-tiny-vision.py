#!/usr/bin/env python3
"""Write the tiny random-weight vision test files of tests/fixtures/vision/:

  tiny-vlm.gguf               a llama-architecture language model (n_embd 64, 2 layers, 4 heads,
                              2 KV heads, FFN 128) with tiny-granite's byte-level BPE vocabulary
                              (512 tokens) plus the image marker tokens of SmolVLM and Gemma 3
                              (<fake_token_around_image>, <global-img>, <row_R_col_C> for R, C in
                              1..6, <image>, <end_of_utterance>, <start_of_image>, <end_of_image>)
                              and a SmolVLM-style chat template over text content
  tiny-idefics3-mmproj.gguf   projector type idefics3: SigLIP ViT (48 wide, 2 blocks, 4 heads,
                              FFN 96, patch 8, tile 32 -> 4 x 4 patches), pixel shuffle 2, fc to 64;
                              preproc_image_size 64 (an image is cut into up to 2 x 2 tiles + overview)
  tiny-gemma3-mmproj.gguf     projector type gemma3: SigLIP ViT (48 wide, 2 blocks, 4 heads, FFN 96,
                              patch 4, image 32 -> 8 x 8 patches), 4 x 4 average pool (the default:
                              no scale_factor key, as Gemma 3's real files), soft_emb_norm, input
                              projection [48, 64]
  tile-32.png, grid-64.png    test images at the sizes the projectors read (no resampling needed for
                              the tiles)

The ViT width (48) differs from the language model's (64) so that a transposed projection cannot
go unnoticed. Every weight is F32. Weights N(0, 0.02), q/k N(0, 0.25) so that attention is not
flat, norms 1 + N(0, 0.1), biases N(0, 0.02). Seeded by tensor name: byte-identical on every run.

Usage: make-tiny-vision.py OUTDIR [--vocab ../shared/fixtures/models/tiny-granite-F32.gguf]
       make-tiny-vision.py --smolvlm-shape OUT.gguf
  the second writes a random-weight idefics3 projector of SmolVLM-256M-Instruct's shape (SigLIP
  base: 768 wide, 12 blocks, 12 heads, FFN 3072, patch 16, tiles of 512, pixel shuffle 4, fc to
  576; preproc_image_size 2048; matrices F16 as ggml-org's mmproj files), for timing only
Needs: pip install gguf==0.19.0 numpy pillow
"""
import argparse
import hashlib
from pathlib import Path

import numpy as np
from PIL import Image
import gguf
from gguf import GGUFReader, GGUFWriter

LM = dict(n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=128, ctx=512)
VIT = dict(n_embd=48, n_layer=2, n_head=4, n_ff=96)
MARKERS = (["<fake_token_around_image>", "<global-img>"]
           + [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
           + ["<image>", "<end_of_utterance>", "<start_of_image>", "<end_of_image>"])
TEMPLATE = ("{% for message in messages %}{{ message['role'] | capitalize }}: {{ message['content'] }}"
            "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}")


def rng(name):
    return np.random.default_rng(int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little"))


def normal(name, shape, std=0.02):
    return (rng(name).standard_normal(shape) * std).astype(np.float32)


def norm_weight(name, n):
    return (1.0 + rng(name).standard_normal(n) * 0.1).astype(np.float32)


def field(r, name):
    f = r.fields.get(name)
    return None if f is None else f.contents()


def write_lm(path, vocab_path):
    r = GGUFReader(vocab_path)
    tokens = list(field(r, "tokenizer.ggml.tokens")) + MARKERS
    types = [int(t) for t in field(r, "tokenizer.ggml.token_type")] + [gguf.TokenType.CONTROL] * len(MARKERS)
    merges = list(field(r, "tokenizer.ggml.merges"))
    n_vocab = len(tokens)
    w = GGUFWriter(str(path), "llama")
    w.add_name("tiny-vlm")
    w.add_context_length(LM["ctx"])
    w.add_embedding_length(LM["n_embd"])
    w.add_block_count(LM["n_layer"])
    w.add_feed_forward_length(LM["n_ff"])
    w.add_head_count(LM["n_head"])
    w.add_head_count_kv(LM["n_head_kv"])
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(LM["n_embd"] // LM["n_head"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("refact")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(tokens.index("<end_of_utterance>"))
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_chat_template(TEMPLATE)
    e, hd = LM["n_embd"], LM["n_embd"] // LM["n_head"]
    kv = LM["n_head_kv"] * hd
    w.add_tensor("token_embd.weight", normal("token_embd", (n_vocab, e), 0.5))
    for i in range(LM["n_layer"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm_weight(p + "attn_norm", e))
        w.add_tensor(p + "attn_q.weight", normal(p + "attn_q", (e, e), 0.25))
        w.add_tensor(p + "attn_k.weight", normal(p + "attn_k", (kv, e), 0.25))
        w.add_tensor(p + "attn_v.weight", normal(p + "attn_v", (kv, e), 0.1))
        w.add_tensor(p + "attn_output.weight", normal(p + "attn_output", (e, e), 0.1))
        w.add_tensor(p + "ffn_norm.weight", norm_weight(p + "ffn_norm", e))
        w.add_tensor(p + "ffn_gate.weight", normal(p + "ffn_gate", (LM["n_ff"], e), 0.1))
        w.add_tensor(p + "ffn_up.weight", normal(p + "ffn_up", (LM["n_ff"], e), 0.1))
        w.add_tensor(p + "ffn_down.weight", normal(p + "ffn_down", (e, LM["n_ff"]), 0.1))
    w.add_tensor("output_norm.weight", norm_weight("output_norm", e))
    w.add_tensor("output.weight", normal("output", (n_vocab, e), 0.1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


SMOLVLM_256M = dict(n_embd=768, n_layer=12, n_head=12, n_ff=3072, image_size=512, patch=16, scale=4, out=576, preproc=2048)


def write_projector(path, kind, shape=None):
    vit, f16 = (shape or VIT), shape is not None
    d, f, n_out = vit["n_embd"], vit["n_ff"], (shape or LM)["out" if shape else "n_embd"]
    scale = shape["scale"] if shape else 2
    if shape:
        image_size, patch, mean, std = shape["image_size"], shape["patch"], [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]
    elif kind == "idefics3":
        image_size, patch, mean, std = 32, 8, [0.48, 0.46, 0.41], [0.27, 0.26, 0.28]
    else:
        image_size, patch, mean, std = 32, 4, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]
    mat = (lambda a: a.astype(np.float16)) if f16 else (lambda a: a)
    n_patches = (image_size // patch) ** 2
    w = GGUFWriter(str(path), "clip")
    w.add_name(f"tiny-{kind}-mmproj")
    w.add_file_type(0)
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.has_text_encoder", False)
    w.add_string("clip.projector_type", kind)
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch)
    w.add_uint32("clip.vision.embedding_length", d)
    w.add_uint32("clip.vision.feed_forward_length", f)
    w.add_uint32("clip.vision.block_count", vit["n_layer"])
    w.add_uint32("clip.vision.attention.head_count", vit["n_head"])
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_uint32("clip.vision.projection_dim", n_out)
    w.add_array("clip.vision.image_mean", mean)
    w.add_array("clip.vision.image_std", std)
    if kind == "idefics3":
        w.add_uint32("clip.vision.projector.scale_factor", scale)
        w.add_uint32("clip.vision.preproc_image_size", shape["preproc"] if shape else 64)
    w.add_tensor("v.patch_embd.weight", mat(normal("v.patch_embd", (d, 3, patch, patch), 0.1)))
    w.add_tensor("v.patch_embd.bias", normal("v.patch_embd.bias", d))
    w.add_tensor("v.position_embd.weight", normal("v.position_embd", (n_patches, d), 0.1))
    for i in range(vit["n_layer"]):
        p = f"v.blk.{i}."
        w.add_tensor(p + "ln1.weight", norm_weight(p + "ln1", d))
        w.add_tensor(p + "ln1.bias", normal(p + "ln1.bias", d))
        for t, s in (("attn_q", 0.25), ("attn_k", 0.25), ("attn_v", 0.1), ("attn_out", 0.1)):
            w.add_tensor(p + t + ".weight", mat(normal(p + t, (d, d), s)))
            w.add_tensor(p + t + ".bias", normal(p + t + ".bias", d))
        w.add_tensor(p + "ln2.weight", norm_weight(p + "ln2", d))
        w.add_tensor(p + "ln2.bias", normal(p + "ln2.bias", d))
        w.add_tensor(p + "ffn_up.weight", mat(normal(p + "ffn_up", (f, d), 0.1)))
        w.add_tensor(p + "ffn_up.bias", normal(p + "ffn_up.bias", f))
        w.add_tensor(p + "ffn_down.weight", mat(normal(p + "ffn_down", (d, f), 0.1)))
        w.add_tensor(p + "ffn_down.bias", normal(p + "ffn_down.bias", d))
    w.add_tensor("v.post_ln.weight", norm_weight("v.post_ln", d))
    w.add_tensor("v.post_ln.bias", normal("v.post_ln.bias", d))
    if kind == "idefics3":
        w.add_tensor("mm.model.fc.weight", mat(normal("mm.model.fc", (n_out, d * scale * scale), 0.1)))
    else:
        w.add_tensor("mm.soft_emb_norm.weight", norm_weight("mm.soft_emb_norm", d))
        w.add_tensor("mm.input_projection.weight", normal("mm.input_projection", (d, LM["n_embd"]), 0.1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_image(path, size, seed):
    # smooth gradients plus a little noise: every pixel different, nothing saturated
    y, x = np.mgrid[0:size, 0:size].astype(np.float64) / size
    noise = np.random.default_rng(seed).integers(-12, 13, (size, size, 3))
    rgb = np.stack([200 * x + 20, 180 * y + 30, 120 * (1 - x * y) + 60], axis=-1) + noise
    Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8), "RGB").save(path, optimize=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir", nargs="?")
    ap.add_argument("--smolvlm-shape", metavar="OUT.gguf")
    ap.add_argument("--vocab", default=str(Path(__file__).resolve().parents[3] / "shared/fixtures/models/tiny-granite-F32.gguf"))
    a = ap.parse_args()
    if a.smolvlm_shape:
        Path(a.smolvlm_shape).parent.mkdir(parents=True, exist_ok=True)
        write_projector(Path(a.smolvlm_shape), "idefics3", SMOLVLM_256M)
        print(a.smolvlm_shape)
        return
    out = Path(a.outdir)
    out.mkdir(parents=True, exist_ok=True)
    write_lm(out / "tiny-vlm.gguf", a.vocab)
    write_projector(out / "tiny-idefics3-mmproj.gguf", "idefics3")
    write_projector(out / "tiny-gemma3-mmproj.gguf", "gemma3")
    write_image(out / "tile-32.png", 32, 1)
    write_image(out / "grid-64.png", 64, 2)
    for p in sorted(out.iterdir()):
        print(p)


if __name__ == "__main__":
    main()
