#!/usr/bin/env python3
"""A float64 Llama forward in numpy, and Hugging Face's sliding-window perplexity over it.

The reference `servelab eval perplexity` is checked against: nothing of
servelab's is shared. Reads a checkpoint's config.json and safetensors
(bfloat16, float16 or float32; one file or an index of shards), widens every
weight to float64 and runs LlamaForCausalLM's arithmetic: RMSNorm, rotate_half
RoPE (no rope_scaling), grouped-query attention by repeating K/V heads, SiLU
MLP, an untied or tied lm_head. Needs numpy only.

    python3 tests/cli/ppl_reference.py MODEL_DIR --tokens IDS_FILE [--max-model-len N] [--stride S]
"""
import argparse
import json
import math
import os
import struct

import numpy as np


def _read_safetensors(path, out):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = data[a:b]
        if t["dtype"] == "BF16":
            x = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif t["dtype"] == "F16":
            x = np.frombuffer(raw, np.float16)
        elif t["dtype"] == "F32":
            x = np.frombuffer(raw, np.float32)
        else:
            raise SystemExit(f"{path}: {name}: dtype {t['dtype']} not supported by the reference")
        out[name] = x.astype(np.float64).reshape(t["shape"])


def load(model_dir):
    """(config dict, {name: float64 array})."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("rope_scaling"):
        raise SystemExit("the reference has no rope_scaling")
    w = {}
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    for fn in files:
        _read_safetensors(os.path.join(model_dir, fn), w)
    return cfg, w


def forward(cfg, w, ids):
    """Logits (T, V) float64 of the token ids, positions 0..T-1."""
    H, Hkv, hid = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"]
    D = cfg.get("head_dim") or hid // H
    eps, theta = cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    ids = np.asarray(ids, dtype=np.int64)
    T = len(ids)

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    inv_freq = 1.0 / theta ** (np.arange(0, D, 2, dtype=np.float64) / D)
    ang = np.outer(np.arange(T, dtype=np.float64), inv_freq)
    emb = np.concatenate([ang, ang], -1)  # HF: cat(freqs, freqs)
    cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]

    def rope(x):  # (T, heads, D), rotate_half
        return x * cos + np.concatenate([-x[..., D // 2:], x[..., :D // 2]], -1) * sin

    mask = np.triu(np.full((T, T), -np.inf), 1)
    x = w["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = rope((h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, H, D))
        k = rope((h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, Hkv, D))
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, Hkv, D)
        k, v = np.repeat(k, H // Hkv, 1), np.repeat(v, H // Hkv, 1)
        s = np.einsum("thd,shd->hts", q, k) / math.sqrt(D) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        a = np.einsum("hts,shd->thd", s / s.sum(-1, keepdims=True), v).reshape(T, H * D)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        g = h @ w[p + "mlp.gate_proj.weight"].T
        x = x + (g / (1.0 + np.exp(-g)) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return rms(x, w["model.norm.weight"]) @ head.T


def windows(n, max_len, stride):
    """Hugging Face's loop: [(begin, end, n_scored)]. The model shifts the labels by one, so a
    window's first token is never scored: n_scored is end - prev_end, at most end - begin - 1."""
    out, prev_end = [], 0
    for begin in range(0, n, stride):
        end = min(begin + max_len, n)
        trg = min(end - prev_end, end - begin - 1)
        out.append((begin, end, trg))
        prev_end = end
        if end == n:
            break
    return out


def perplexity(cfg, w, ids, max_len, stride):
    """(perplexity, total NLL, scored tokens, windows): the token-weighted mean over every window."""
    nll, scored = 0.0, 0
    wins = windows(len(ids), max_len, stride)
    for begin, end, trg in wins:
        x = ids[begin:end]
        logits = forward(cfg, w, x)
        m = logits.max(-1, keepdims=True)
        logp = logits - m - np.log(np.exp(logits - m).sum(-1, keepdims=True))
        for p in range(len(x) - trg - 1, len(x) - 1):
            nll -= logp[p, x[p + 1]]
            scored += 1
    return math.exp(nll / scored), nll, scored, len(wins)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True, help="whitespace-separated token ids")
    ap.add_argument("--max-model-len", type=int, default=0)
    ap.add_argument("--stride", type=int, default=0)
    a = ap.parse_args()
    cfg, w = load(a.model)
    with open(a.tokens) as f:
        ids = [int(t) for t in f.read().replace(",", " ").split()]
    n = a.max_model_len or cfg["max_position_embeddings"]
    ppl, nll, scored, nw = perplexity(cfg, w, ids, n, a.stride or (n + 1) // 2)
    print(f"Perplexity: {ppl:.9f}\nMean NLL: {nll / scored:.12f} nats/token\nScored tokens: {scored}\nWindows: {nw}")


if __name__ == "__main__":
    main()
