#!/usr/bin/env python3
"""Write the tiny random-weight models of the architectures beyond the tiny llama and granite
(tests/fixtures/archs/), shaped as llama.cpp's tests/test-llama-archs writes them: a vocabulary of
128 ids whose tokenizer model is "test" (ids only), n_embd 256, 2 layers, FFN 384, context 256,
F32 weights. llama.cpp's logits on these files are the goldens (tools/make-arch-goldens.sh);
tools/make-fixtures.sh runs this script and checks every file against archs/SHA256SUMS.

Each architecture is a row of ARCHS: its metadata and which optional tensors it has. Two seeds per
architecture (SEEDS) give two files, `<arch>-s<seed>.gguf`. Weights are N(0, 0.1) (as
test-llama-archs draws them), norm weights 1 + N(0, 0.1), seeded per file and tensor name (numpy
default_rng), so the output is byte-identical on every run.

Usage: make-arch-models.py OUTDIR [ARCH...]      (default: every row)
Needs: pip install gguf==0.19.0 numpy
"""
import argparse
import hashlib
from pathlib import Path

import numpy as np
import gguf
from gguf import GGUFWriter

N_VOCAB = 128
N_EMBD = 256
N_LAYER = 2
N_FF = 384
N_CTX = 256
SEEDS = (1, 2)

# Per architecture: heads, KV heads, RoPE base and the optional parts its graph uses.
#   n_layer:    layers (default N_LAYER; SmolLM3 needs 4 for its layer without RoPE)
#   qk_norm:    "head": RMS norms of q and k per head (head_dim values); "row": over the whole
#               row of heads (n_head·head_dim and n_head_kv·head_dim values)
#   pre_norms:  attn_norm / ffn_norm before each block (default True)
#   post_norms: post_attention_norm / post_ffw_norm after each block
#   swa:        (window, pattern): attention.sliding_window and .sliding_window_pattern
#   fused_qkv:  one attn_qkv matrix (and attn_qkv bias with qkv_bias) instead of attn_q/k/v
#   fused_up:   one ffn_up of 2·N_FF rows (gate, then up) instead of ffn_gate and ffn_up
#   arch:       the file's architecture when the row's name is not it ("llama-moe": Mixtral-style)
#   moe:        (experts, experts used, expert FFN width): every layer a mixture of experts
#               (ffn_gate_inp and the 3-D ffn_{gate,up,down}_exps instead of the dense FFN)
#   shared:     (width, gated): a shared expert beside the routed ones (ffn_{gate,up,down}_shexp,
#               with ffn_gate_inp_shexp when gated); shared_key: the width the file's
#               expert_shared_feed_forward_length says instead (Llama 4's graph does not read it)
#   keys:       further `<arch>.KEY` values: a float as f32, an int as u32, a str as a string, a
#               bool as a bool (seed2_keys: more for seed 2 only)
#               (Granite's four scalars, Mistral 3's YaRN and attention temperature)
#   dense_lead: this many first layers keep a dense FFN, the others have experts
#   moe_every:  only every n-th layer (the n-th, 2n-th, ...) has experts, the others a dense FFN
#               (Llama 4's interleave_moe_layer_step)
#   probs_bias: exp_probs_b.bias, the experts' selection bias
#   ffn_norm:   the FFN input norm's tensor name (default ffn_norm; GLM-4.5: post_attention_norm)
#   tied:       no output.weight (the token embeddings serve)
#   embd_std:   the token embeddings' standard deviation (default 0.1; Gemma scales them by
#               sqrt(n_embd), so its rows use 0.1 / 16, as its real files are made)
#   rope_dims:  rope.dimension_count (partial rotation; default: the whole head)
#   mrope:      rope.dimension_sections, written for seed 2 only (GLM-4: M-RoPE, whose text
#               positions leave the fourth section's pairs unrotated)
# and the optional tensors llama.cpp's loader creates for the architecture, which
# test-llama-archs writes too:
#   qkv_bias:   attn_q/k/v.bias (or attn_qkv.bias)
#   o_bias, ffn_bias: attn_output.bias; ffn_gate/up/down.bias
#   scales:     every matrix's per-tensor .scale (and the .input_scale llama.cpp loads unused);
#               only where llama.cpp's graph applies every one of them (its phi3, glm4, olmo2 and
#               smollm3 graphs leave the feed-forward ones unused, so those rows have none)
#   rope_freqs: rope_freqs.weight (Llama 3.1's angle divisors)
#   longrope:   rope_factors_short/long.weight (Phi-3); seed 2 sets an original context of 32
#               positions, so that the long factors serve its goldens
#   cls:        cls.output.weight (a reranking head, unused by generation)
#   mla:        (q latent or None, kv latent, nope, rope, value head): multi-head latent attention
#               (attn_q_a / attn_q_a_norm / attn_q_b, or attn_q without a query latent;
#               attn_kv_a_mqa, attn_kv_a_norm, and the per-head attn_k_b and attn_v_b: DeepSeek-V2)
#   fused_exps: the experts' gate and up in one ffn_gate_up_exps (gate first)
#   sinks:      attn_sinks.weight, one logit per query head (gpt-oss)
#   moe_bias:   ffn_gate_inp.bias and the experts' ffn_{gate,up,down}_exps.bias (gpt-oss)
#   shortconv:  (taps, layers): those layers are LFM2's gated short convolutions (shortconv.conv
#               of taps per channel, shortconv.in_proj, shortconv.out_proj) with no attention;
#               head_count_kv becomes one number per layer, 0 in them (as LFM2's converter writes
#               it; llama.cpp takes the head size from layer 0's head_count, so that stays one number)
#   mamba2:     (d_conv, d_state, heads, groups, layers): those layers are Mamba-2 blocks with no
#               attention (ssm_in, ssm_conv1d weight and bias, ssm_dt bias, ssm_a, ssm_d, ssm_norm,
#               ssm_out; an inner size of 2·N_EMBD), head_count_kv per layer as with shortconv
#   deltanet:   (d_conv, head size, key heads, value heads, layers): those layers are Qwen3.5's
#               gated delta nets (attn_qkv, attn_gate, ssm_conv1d without bias, ssm_dt bias, ssm_a,
#               ssm_beta, ssm_alpha, ssm_norm, ssm_out); the others gated attention (attn_q of
#               2·heads·head_dim: each head's queries, then its gate); seed 1 names the layers by
#               full_attention_interval, seed 2 by attention.recurrent_layers
#   output_norm: the final norm's tensor name (default output_norm; LFM2: token_embd_norm)
ARCHS = {
    "llama": dict(n_head=4, n_head_kv=2, rope_base=500000.0, eps=1e-5, qkv_bias=True, o_bias=True, ffn_bias=True,
                  scales=True, rope_freqs=True),
    "llama-moe": dict(arch="llama", n_head=4, n_head_kv=2, rope_base=10000.0, eps=1e-5, moe=(4, 2, N_FF)),
    "qwen3moe": dict(n_head=4, n_head_kv=1, rope_base=1000000.0, eps=1e-6, qk_norm="head", moe=(6, 2, 128)),
    "qwen2moe": dict(n_head=4, n_head_kv=2, rope_base=1000000.0, eps=1e-6, qkv_bias=True, moe=(4, 2, 128),
                     shared=(192, True)),
    "granitemoe": dict(n_head=4, n_head_kv=2, rope_base=10000.0, eps=1e-6, moe=(4, 2, N_FF), shared=(160, False),
                       keys={"embedding_scale": 12.0, "residual_scale": 0.22, "attention.scale": 0.015625,
                               "logit_scale": 8.0}),
    "mistral3": dict(n_head=4, n_head_kv=2, rope_base=1000000.0, eps=1e-5,
                     keys={"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                           "rope.scaling.original_context_length": 16, "rope.scaling.yarn_log_multiplier": 0.1,
                           "rope.scaling.yarn_beta_fast": 16.0, "attention.temperature_scale": 0.1}),
    # Mistral 3 with experts (as test-llama-archs writes its MoE variant): softmax routing, the
    # chosen weights normalised
    "mistral3-moe": dict(arch="mistral3", n_head=4, n_head_kv=2, rope_base=1000000.0, eps=1e-5, moe=(4, 2, N_FF),
                         keys={"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                               "rope.scaling.original_context_length": 16, "rope.scaling.yarn_log_multiplier": 0.1,
                               "rope.scaling.yarn_beta_fast": 16.0, "attention.temperature_scale": 0.1}),
    "gemma2": dict(n_head=4, n_head_kv=2, rope_base=10000.0, eps=1e-6, post_norms=True, tied=True, swa=(8, 2),
                   embd_std=0.1 / 16, keys={"attn_logit_softcapping": 3.0, "final_logit_softcapping": 2.0}),
    "glm4moe": dict(n_head=4, n_head_kv=2, rope_base=10000.0, eps=1e-5, n_layer=3, qkv_bias=True, qk_norm="head",
                    rope_dims=32, moe=(4, 2, 128), shared=(128, False), dense_lead=1, probs_bias=True,
                    ffn_norm="post_attention_norm",
                    keys={"expert_gating_func": 2, "expert_weights_norm": True, "expert_weights_scale": 2.5,
                          "expert_shared_count": 1, "leading_dense_block_count": 1}),
    "qwen3": dict(n_head=4, n_head_kv=1, rope_base=1000000.0, eps=1e-6, qk_norm="head", qkv_bias=True, scales=True,
                  cls=True),
    "smollm3": dict(n_head=4, n_head_kv=2, rope_base=2000000.0, eps=1e-6, n_layer=4, qkv_bias=True),
    "phi3": dict(n_head=4, n_head_kv=2, rope_base=10000.0, eps=1e-5, fused_qkv=True, fused_up=True,
                 longrope=True),
    "glm4": dict(n_head=4, n_head_kv=2, rope_base=10000.0, eps=1e-5, fused_qkv=True, qkv_bias=True, fused_up=True,
                 post_norms=True, rope_dims=32, mrope=(4, 4, 4, 4)),
    "olmoe": dict(n_head=4, n_head_kv=4, rope_base=10000.0, eps=1e-5, qk_norm="row", moe=(6, 2, N_FF)),
    "olmo2": dict(n_head=4, n_head_kv=4, rope_base=500000.0, eps=1e-6, qk_norm="row", pre_norms=False,
                  post_norms=True, swa=(8, 2), qkv_bias=True),
    "gpt-oss": dict(n_head=4, n_head_kv=2, rope_base=150000.0, eps=1e-5, qkv_bias=True, o_bias=True, sinks=True,
                    ffn_norm="post_attention_norm", moe=(4, 2, 128), moe_bias=True, swa=(8, 2),
                    keys={"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                          "rope.scaling.original_context_length": 64}),
    # DeepSeek-V3-like: query latent, sigmoid routing with a selection bias and expert groups,
    # fused gate/up experts, a shared expert, a dense first layer, YaRN over all dimensions
    "deepseek2": dict(n_head=4, n_head_kv=1, rope_base=10000.0, eps=1e-6, n_layer=3, mla=(48, 64, 32, 16, 32),
                      moe=(8, 3, 96), shared=(96, False), dense_lead=1, probs_bias=True, fused_exps=True,
                      keys={"attention.q_lora_rank": 48, "attention.kv_lora_rank": 64, "attention.key_length": 80,
                            "attention.value_length": 64, "attention.key_length_mla": 48,
                            "attention.value_length_mla": 32, "rope.dimension_count": 16,
                            "expert_gating_func": 2, "expert_weights_norm": True, "expert_weights_scale": 2.5,
                            "expert_shared_count": 1, "leading_dense_block_count": 1, "expert_group_count": 4,
                            "expert_group_used_count": 2, "rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                            "rope.scaling.original_context_length": 64,
                            "rope.scaling.yarn_log_multiplier": 0.0707}),
    # DeepSeek-V2-Lite-like: one query projection, softmax routing, separate gate and up experts
    "deepseek2-lite": dict(arch="deepseek2", n_head=4, n_head_kv=1, rope_base=10000.0, eps=1e-6,
                           mla=(None, 64, 32, 16, 32), moe=(4, 2, 96), shared=(192, False), dense_lead=1,
                           # a query latent of 0 (llama.cpp reads the key but for 26/27-layer files)
                           keys={"attention.q_lora_rank": 0, "attention.kv_lora_rank": 64, "attention.key_length": 80,
                                 "attention.value_length": 64, "attention.key_length_mla": 48,
                                 "attention.value_length_mla": 32, "rope.dimension_count": 16,
                                 "expert_shared_count": 2, "leading_dense_block_count": 1}),
    # LFM2: convolution, attention, convolution (the last layer recurrent, as real files' first two)
    "lfm2": dict(n_head=4, n_head_kv=2, rope_base=1000000.0, eps=1e-5, n_layer=3, qk_norm="head",
                 shortconv=(3, (0, 2)), output_norm="token_embd_norm", keys={"shortconv.l_cache": 3},
                 # seed 2: a window over the attention layer (llama.cpp's LFM2 takes every attention
                 # layer as a window layer when the file gives one)
                 seed2_keys={"attention.sliding_window": 8}),
    # LFM2-MoE (LFM2-8B-A1B): LFM2's layers, the first FFN dense, then experts routed by a sigmoid
    # with a selection bias
    "lfm2moe": dict(n_head=4, n_head_kv=2, rope_base=1000000.0, eps=1e-5, n_layer=3, qk_norm="head",
                    shortconv=(3, (0, 2)), output_norm="token_embd_norm", moe=(4, 2, 128), dense_lead=1,
                    probs_bias=True,
                    keys={"shortconv.l_cache": 3, "expert_gating_func": 2, "leading_dense_block_count": 1}),
    # Granite 4's hybrid: Mamba-2, attention, Mamba-2, Granite's four scalars; seed 2 without RoPE
    # (rope.scaling.finetuned false, as the released models' files)
    "granitehybrid": dict(n_head=4, n_head_kv=2, rope_base=10000.0, eps=1e-5, n_layer=3,
                          mamba2=(4, 32, 8, 2, (0, 2)),
                          # scales that keep the logits sensitive to the SSM's numbers
                          keys={"embedding_scale": 12.0, "residual_scale": 0.8, "attention.scale": 0.1,
                                "logit_scale": 0.5, "ssm.conv_kernel": 4, "ssm.inner_size": 2 * N_EMBD,
                                "ssm.state_size": 32, "ssm.time_step_rank": 8, "ssm.group_count": 2},
                          seed2_keys={"rope.scaling.finetuned": False}),
    # Qwen3.5: delta net, gated attention, delta net, gated attention; IMROPE over 32 of 64 values
    # (seed 2's sections leave some pairs unrotated); the FFN's input norm is post_attention_norm
    "qwen35": dict(n_head=4, n_head_kv=2, rope_base=10000000.0, eps=1e-6, n_layer=4, qk_norm="head",
                   deltanet=(4, 32, 2, 4, (0, 2)), rope_dims=32, ffn_norm="post_attention_norm",
                   keys={"ssm.conv_kernel": 4, "ssm.inner_size": 128, "ssm.state_size": 32,
                         "ssm.time_step_rank": 4, "ssm.group_count": 2},
                   seed1_keys={"full_attention_interval": 2},
                   sections={1: (6, 5, 5, 0), 2: (2, 2, 2, 2)}),
    # Qwen3.5-MoE (Qwen3.6's): the same layers, experts and a shared expert with its sigmoid gate
    "qwen35moe": dict(n_head=4, n_head_kv=2, rope_base=10000000.0, eps=1e-6, n_layer=4, qk_norm="head",
                      deltanet=(4, 32, 2, 4, (0, 2)), rope_dims=32, ffn_norm="post_attention_norm",
                      moe=(4, 2, 128), shared=(192, True),
                      keys={"ssm.conv_kernel": 4, "ssm.inner_size": 128, "ssm.state_size": 32,
                            "ssm.time_step_rank": 4, "ssm.group_count": 2},
                      seed1_keys={"full_attention_interval": 2},
                      sections={1: (6, 5, 5, 0), 2: (2, 2, 2, 2)}),
    # Llama 4 (Scout, Llama Guard 4): experts every second layer with a shared expert as wide as a
    # routed one (the width keys say otherwise, as test-llama-archs writes them), the router's
    # sigmoid weighing the experts' inputs; layer 3 without RoPE and with the temperature tuning,
    # the others' queries and keys normalised after RoPE; chunked attention (8192 positions, so
    # whole at these lengths) on all but every fourth layer, seed 2 every other one by the key
    "llama4": dict(n_head=4, n_head_kv=2, rope_base=500000.0, eps=1e-5, n_layer=4, rope_freqs=True,
                   moe=(4, 2, 128), moe_every=2, shared=(128, False), shared_key=64,
                   keys={"interleave_moe_layer_step": 2, "expert_gating_func": 2, "attention.sliding_window": 32},
                   seed2_keys={"attention.sliding_window_pattern": 2}),
    # Granite 4's hybrid with experts and a shared expert (Granite-4.0-H-Tiny/Small)
    "granitehybrid-moe": dict(arch="granitehybrid", n_head=4, n_head_kv=2, rope_base=10000.0, eps=1e-5, n_layer=3,
                              mamba2=(4, 32, 8, 2, (0, 2)), moe=(4, 2, N_FF), shared=(160, False),
                              keys={"embedding_scale": 12.0, "residual_scale": 0.8, "attention.scale": 0.1,
                                    "logit_scale": 0.5, "ssm.conv_kernel": 4, "ssm.inner_size": 2 * N_EMBD,
                                    "ssm.state_size": 32, "ssm.time_step_rank": 8, "ssm.group_count": 2},
                              seed2_keys={"rope.scaling.finetuned": False}),
}


def rng_for(file, name):
    seed = int.from_bytes(hashlib.sha256(f"{file}:{name}".encode()).digest()[:8], "little")
    return np.random.default_rng(seed)


def tensors_for(cfg):
    """(name, numpy shape (rows, cols) or (n,), kind) of every tensor, in file order. Kinds: "w"
    N(0, 0.1); "norm" (and scales) 1 + N(0, 0.1); "factor" (RoPE divisors) 1 + |N(0, 0.5)|;
    "decay" (Mamba-2's a = -exp(A_log)) -(1 + |N(0, 2)|)."""
    e, h, kv = N_EMBD, cfg["n_head"], cfg["n_head_kv"]
    hd = e // h
    pre, post = cfg.get("pre_norms", True), cfg.get("post_norms", False)
    t = [("token_embd.weight", (N_VOCAB, e), "w")]

    def proj(name, rows, cols, bias):
        out = [(name + ".weight", (rows, cols), "w")]
        if bias:
            out.append((name + ".bias", (rows,), "w"))
        if cfg.get("scales"):
            out += [(name + ".scale", (1,), "norm"), (name + ".input_scale", (1,), "norm")]
        return out

    for i in range(cfg.get("n_layer", N_LAYER)):
        b = f"blk.{i}."
        if pre:
            t.append((b + "attn_norm.weight", (e,), "norm"))
        if "deltanet" in cfg and i in cfg["deltanet"][4]:
            d_conv, hs, nk, nv, _ = cfg["deltanet"]
            ch = (2 * nk + nv) * hs
            t += [(b + "attn_qkv.weight", (ch, e), "w"), (b + "attn_gate.weight", (nv * hs, e), "w"),
                  (b + "ssm_conv1d.weight", (ch, d_conv), "w"), (b + "ssm_dt.bias", (nv,), "w"),
                  (b + "ssm_a", (nv,), "decay"), (b + "ssm_beta.weight", (nv, e), "w"),
                  (b + "ssm_alpha.weight", (nv, e), "w"), (b + "ssm_norm.weight", (hs,), "norm"),
                  (b + "ssm_out.weight", (e, nv * hs), "w")]
        elif "deltanet" in cfg:
            # gated attention: each head's queries, then its gate
            t += proj(b + "attn_q", 2 * h * hd, e, False)
            t += proj(b + "attn_k", kv * hd, e, False)
            t += proj(b + "attn_v", kv * hd, e, False)
        elif "mamba2" in cfg and i in cfg["mamba2"][4]:
            d_conv, d_state, heads, groups, _ = cfg["mamba2"]
            inner = 2 * e
            ch = inner + 2 * groups * d_state
            t += [(b + "ssm_in.weight", (inner + ch + heads, e), "w"),
                  (b + "ssm_conv1d.weight", (ch, d_conv), "w"), (b + "ssm_conv1d.bias", (ch,), "w"),
                  (b + "ssm_dt.bias", (heads,), "w"), (b + "ssm_a", (heads, 1), "decay"), (b + "ssm_d", (heads, 1), "norm"),
                  (b + "ssm_norm.weight", (groups, inner // groups), "norm"), (b + "ssm_out.weight", (e, inner), "w")]
        elif "shortconv" in cfg and i in cfg["shortconv"][1]:
            t += [(b + "shortconv.conv.weight", (e, cfg["shortconv"][0]), "w"),
                  (b + "shortconv.in_proj.weight", (3 * e, e), "w"),
                  (b + "shortconv.out_proj.weight", (e, e), "w")]
        elif "mla" in cfg:
            qr, kvr, nope, rope, vh = cfg["mla"]
            if qr:
                t += [(b + "attn_q_a.weight", (qr, e), "w"), (b + "attn_q_a_norm.weight", (qr,), "norm"),
                      (b + "attn_q_b.weight", (h * (nope + rope), qr), "w")]
            else:
                t.append((b + "attn_q.weight", (h * (nope + rope), e), "w"))
            t += [(b + "attn_kv_a_mqa.weight", (kvr + rope, e), "w"), (b + "attn_kv_a_norm.weight", (kvr,), "norm"),
                  (b + "attn_k_b.weight", (h, kvr, nope), "w"), (b + "attn_v_b.weight", (h, vh, kvr), "w")]
        elif cfg.get("fused_qkv"):
            t += proj(b + "attn_qkv", (h + 2 * kv) * hd, e, cfg.get("qkv_bias"))
        else:
            t += proj(b + "attn_q", h * hd, e, cfg.get("qkv_bias"))
            t += proj(b + "attn_k", kv * hd, e, cfg.get("qkv_bias"))
            t += proj(b + "attn_v", kv * hd, e, cfg.get("qkv_bias"))
        conv_layer = any(kind in cfg and i in cfg[kind][idx] for kind, idx in (("shortconv", 1), ("mamba2", 4), ("deltanet", 4)))
        if cfg.get("qk_norm") == "head" and not conv_layer:
            t += [(b + "attn_q_norm.weight", (hd,), "norm"), (b + "attn_k_norm.weight", (hd,), "norm")]
        elif cfg.get("qk_norm") == "row":
            t += [(b + "attn_q_norm.weight", (h * hd,), "norm"), (b + "attn_k_norm.weight", (kv * hd,), "norm")]
        if cfg.get("sinks"):
            t.append((b + "attn_sinks.weight", (h,), "w"))
        if not conv_layer:
            t += proj(b + "attn_output", e, h * (cfg["mla"][4] if "mla" in cfg else hd), cfg.get("o_bias"))
        if post:
            t.append((b + "post_attention_norm.weight", (e,), "norm"))
        if pre:
            t.append((b + cfg.get("ffn_norm", "ffn_norm") + ".weight", (e,), "norm"))
        if "moe" in cfg and i >= cfg.get("dense_lead", 0) and (i + 1) % cfg.get("moe_every", 1) == 0:
            n_exp, _, ff = cfg["moe"]
            if cfg.get("probs_bias"):
                t.append((b + "exp_probs_b.bias", (n_exp,), "w"))
            t.append((b + "ffn_gate_inp.weight", (n_exp, e), "w"))
            if cfg.get("fused_exps"):
                t.append((b + "ffn_gate_up_exps.weight", (n_exp, 2 * ff, e), "w"))
            else:
                t += [(b + "ffn_gate_exps.weight", (n_exp, ff, e), "w"), (b + "ffn_up_exps.weight", (n_exp, ff, e), "w")]
            t.append((b + "ffn_down_exps.weight", (n_exp, e, ff), "w"))
            if cfg.get("moe_bias"):
                t += [(b + "ffn_gate_inp.bias", (n_exp,), "w"),
                      (b + "ffn_gate_exps.bias", (n_exp, ff), "w"),
                      (b + "ffn_up_exps.bias", (n_exp, ff), "w"),
                      (b + "ffn_down_exps.bias", (n_exp, e), "w")]
            if "shared" in cfg:
                sff, gated = cfg["shared"]
                if gated:
                    t.append((b + "ffn_gate_inp_shexp.weight", (e,), "w"))
                t += [(b + "ffn_gate_shexp.weight", (sff, e), "w"),
                      (b + "ffn_up_shexp.weight", (sff, e), "w"),
                      (b + "ffn_down_shexp.weight", (e, sff), "w")]
        elif cfg.get("fused_up"):
            t += proj(b + "ffn_up", 2 * N_FF, e, cfg.get("ffn_bias"))
            t += proj(b + "ffn_down", e, N_FF, cfg.get("ffn_bias"))
        else:
            t += proj(b + "ffn_gate", N_FF, e, cfg.get("ffn_bias"))
            t += proj(b + "ffn_up", N_FF, e, cfg.get("ffn_bias"))
            t += proj(b + "ffn_down", e, N_FF, cfg.get("ffn_bias"))
        if post:
            t.append((b + "post_ffw_norm.weight", (e,), "norm"))
    t.append((cfg.get("output_norm", "output_norm") + ".weight", (e,), "norm"))
    if not cfg.get("tied"):
        t.append(("output.weight", (N_VOCAB, e), "w"))
    rope_pairs = cfg.get("rope_dims", hd) // 2
    if cfg.get("rope_freqs"):
        t.append(("rope_freqs.weight", (rope_pairs,), "factor"))
    if cfg.get("longrope"):
        t += [("rope_factors_long.weight", (rope_pairs,), "factor"), ("rope_factors_short.weight", (rope_pairs,), "factor")]
    if cfg.get("cls"):
        t.append(("cls.output.weight", (e,), "w"))
    return t


def write_model(row, cfg, seed, out):
    name = f"{row}-s{seed}"
    arch = cfg.get("arch", row)
    w = GGUFWriter(str(out), arch)
    # not the architecture's name: llama.cpp gives some names' vocabularies special tokens
    w.add_name(f"tiny random model, seed {seed}")
    w.add_type("model")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(cfg.get("n_layer", N_LAYER))
    w.add_feed_forward_length(N_FF)
    if "shortconv" in cfg or "mamba2" in cfg:
        conv = cfg["shortconv"][1] if "shortconv" in cfg else cfg["mamba2"][4]
        per_layer = lambda n: [0 if i in conv else n for i in range(cfg.get("n_layer", N_LAYER))]
        w.add_head_count(cfg["n_head"])
        w.add_array(f"{arch}.attention.head_count_kv", per_layer(cfg["n_head_kv"]))
    else:
        w.add_head_count(cfg["n_head"])
        w.add_head_count_kv(cfg["n_head_kv"])
    w.add_rope_freq_base(cfg["rope_base"])
    w.add_layer_norm_rms_eps(cfg["eps"])
    if cfg.get("longrope") and seed == 2:
        w.add_uint32(f"{arch}.rope.scaling.original_context_length", 32)
    if "mrope" in cfg and seed == 2:
        w.add_array(f"{arch}.rope.dimension_sections", list(cfg["mrope"]))
    if "moe" in cfg:
        n_exp, n_used, ff = cfg["moe"]
        w.add_expert_count(n_exp)
        w.add_expert_used_count(n_used)
        w.add_expert_feed_forward_length(ff)
        if "shared" in cfg:
            w.add_expert_shared_feed_forward_length(cfg.get("shared_key", cfg["shared"][0]))
    if "deltanet" in cfg and seed == 2:
        layers = cfg["deltanet"][4]
        w.add_array(f"{arch}.attention.recurrent_layers", [i in layers for i in range(cfg.get("n_layer", N_LAYER))])
    if "sections" in cfg:
        w.add_array(f"{arch}.rope.dimension_sections", list(cfg["sections"][seed]))
    seed_keys = cfg.get("seed2_keys", {}) if seed == 2 else cfg.get("seed1_keys", {})
    for key, value in {**cfg.get("keys", {}), **seed_keys}.items():
        if isinstance(value, bool):
            w.add_bool(f"{arch}.{key}", value)
        elif isinstance(value, str):
            w.add_string(f"{arch}.{key}", value)
        elif isinstance(value, int):
            w.add_uint32(f"{arch}.{key}", value)
        else:
            w.add_float32(f"{arch}.{key}", value)
    if "rope_dims" in cfg:
        w.add_rope_dimension_count(cfg["rope_dims"])
    if "swa" in cfg:
        window, pattern = cfg["swa"]
        w.add_sliding_window(window)
        w.add_uint32(f"{arch}.attention.sliding_window_pattern", pattern)
    w.add_vocab_size(N_VOCAB)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("test")
    w.add_token_list([f"tok_{i}" for i in range(N_VOCAB)])
    w.add_token_scores([0.0] * N_VOCAB)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for tname, shape, kind in tensors_for(cfg):
        rng = rng_for(name, tname)
        a = rng.standard_normal(shape) * (cfg.get("embd_std", 0.1) if tname == "token_embd.weight" else 0.1)
        if kind == "norm":
            a += 1.0
        elif kind == "factor":
            a = 1.0 + np.abs(a) * 5.0
        elif kind == "decay":
            a = -(1.0 + np.abs(a) * 20.0)
        w.add_tensor(tname, a.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("archs", nargs="*", help=f"rows of ARCHS (default: all of {', '.join(ARCHS)})")
    a = ap.parse_args()
    out = Path(a.outdir)
    out.mkdir(parents=True, exist_ok=True)
    for arch in a.archs or ARCHS:
        if arch not in ARCHS:
            ap.error(f"no architecture {arch!r} (have: {', '.join(ARCHS)})")
        for seed in SEEDS:
            dst = out / f"{arch}-s{seed}.gguf"
            tmp = out / f"{arch}-s{seed}.gguf.tmp"
            write_model(arch, ARCHS[arch], seed, tmp)
            tmp.replace(dst)
            print("wrote", dst, dst.stat().st_size)


if __name__ == "__main__":
    main()
