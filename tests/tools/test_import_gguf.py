#!/usr/bin/env python3
"""tools/import-gguf on small GGUF files written here with the gguf package's writer.

A 2-layer Llama with random weights (seeded, printed) in the shapes llama.cpp writes, its Q and
K rows permuted as llama.cpp's convert_hf_to_gguf.py permutes them, each tensor in one of the
types the import reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, quantized by the gguf package):
the import must give back the transformers-order weights (exactly the dequantized values with
--dtype f32; within bf16 rounding by default), the config, tokens and special tokens, and the
safetensors layout servelab reads. A GGUF of another architecture, an unknown pre-tokenizer and
a K-quant tensor are refused with one line naming them. Exits 77 without the gguf package.
Prints one line per check and "N passed, N failed".
"""
import json
import os
import random
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFWriter
    from gguf.quants import dequantize, quantize
except ImportError:
    print("test_import_gguf: the gguf package is not installed (pip install gguf); skipped")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMPORT = os.path.join(ROOT, "tools", "import-gguf")
H, HKV, D, HID, FFN, L = 4, 2, 32, 128, 256, 2
TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [chr(0x100 + i) for i in range(61)] + ["a", "b", "ab"]


def llamacpp_permute(w, n_head):
    """convert_hf_to_gguf.py LlamaModel.permute (what the import undoes)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path, hf, types, arch="llama", pre="smollm"):
    w = GGUFWriter(path, arch)
    w.add_block_count(L)
    w.add_context_length(512)
    w.add_embedding_length(HID)
    w.add_feed_forward_length(FFN)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_rope_freq_base(100000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(D)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(TOKENS)
    w.add_token_types([3, 3, 3] + [1] * (len(TOKENS) - 3))
    w.add_token_merges(["a b"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template("{{ messages[0]['content'] }}")
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    for i in range(L):
        for g, t in [("attn_norm", "input_layernorm"), ("ffn_norm", "post_attention_layernorm"),
                     ("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"), ("attn_v", "self_attn.v_proj"),
                     ("attn_output", "self_attn.o_proj"), ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"),
                     ("ffn_down", "mlp.down_proj")]:
            names[f"model.layers.{i}.{t}.weight"] = f"blk.{i}.{g}.weight"
    for name, a in hf.items():
        if name.endswith("q_proj.weight"):
            a = llamacpp_permute(a, H)
        elif name.endswith("k_proj.weight"):
            a = llamacpp_permute(a, HKV)
        qt = types.get(name, Q.F32)
        if qt == Q.Q4_K:  # the gguf package does not quantize K-quants: any bytes do (144 per 256 values)
            raw = np.random.default_rng(0).integers(0, 256, (a.shape[0], a.shape[1] // 256 * 144), dtype=np.uint8)
            w.add_tensor(names[name], raw, raw_shape=raw.shape, raw_dtype=qt)
        elif qt == Q.F32:
            w.add_tensor(names[name], a)
        elif qt == Q.F16:
            w.add_tensor(names[name], a.astype(np.float16))
        else:
            w.add_tensor(names[name], quantize(a, qt), raw_shape=quantize(a, qt).shape, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = np.frombuffer(data[b:end], dtype=np.uint16 if e["dtype"] == "BF16" else np.float32)
        if e["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        out[name] = raw.reshape(e["shape"])
    return header, n, out


def main():
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    V = len(TOKENS)
    hf = {"model.embed_tokens.weight": rng.standard_normal((V, HID)).astype(np.float32),
          "model.norm.weight": rng.standard_normal(HID).astype(np.float32)}
    for i in range(L):
        p = f"model.layers.{i}."
        hf.update({p + "input_layernorm.weight": rng.standard_normal(HID).astype(np.float32),
                   p + "post_attention_layernorm.weight": rng.standard_normal(HID).astype(np.float32),
                   p + "self_attn.q_proj.weight": rng.standard_normal((H * D, HID)).astype(np.float32),
                   p + "self_attn.k_proj.weight": rng.standard_normal((HKV * D, HID)).astype(np.float32),
                   p + "self_attn.v_proj.weight": rng.standard_normal((HKV * D, HID)).astype(np.float32),
                   p + "self_attn.o_proj.weight": rng.standard_normal((HID, H * D)).astype(np.float32),
                   p + "mlp.gate_proj.weight": rng.standard_normal((FFN, HID)).astype(np.float32),
                   p + "mlp.up_proj.weight": rng.standard_normal((FFN, HID)).astype(np.float32),
                   p + "mlp.down_proj.weight": rng.standard_normal((HID, FFN)).astype(np.float32)})
    # Each quantized type on a Q or K weight (the permuted ones) and on another.
    types = {"model.layers.0.self_attn.q_proj.weight": Q.Q4_1, "model.layers.0.self_attn.k_proj.weight": Q.Q4_0,
             "model.layers.1.self_attn.q_proj.weight": Q.Q8_0, "model.layers.1.self_attn.k_proj.weight": Q.F16,
             "model.embed_tokens.weight": Q.Q8_0, "model.layers.0.mlp.up_proj.weight": Q.Q4_1,
             "model.layers.1.mlp.down_proj.weight": Q.Q4_0, "model.layers.0.self_attn.v_proj.weight": Q.BF16}
    # What the import must give: each weight as its type stores it, in transformers' order.
    want = {n: (dequantize(quantize(a, types[n]), types[n]).reshape(a.shape) if n in types else a)
            for n, a in hf.items()}
    results = []

    def check(name, cond, detail=""):
        results.append(bool(cond))
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + detail}")

    with tempfile.TemporaryDirectory() as tmp:
        g = os.path.join(tmp, "m.gguf")
        write_gguf(g, hf, types)
        for dtype in ("f32", "bf16"):
            out = os.path.join(tmp, dtype)
            res = subprocess.run([sys.executable, IMPORT, g, "--out", out, "--dtype", dtype], capture_output=True,
                                 text=True)
            check(f"{dtype}: import exits 0", res.returncode == 0, res.stderr[-500:])
            if res.returncode:
                continue
            header, n, got = read_safetensors(os.path.join(out, "model.safetensors"))
            check(f"{dtype}: header 8-byte aligned, every tensor under its transformers name and shape",
                  n % 8 == 0 and set(got) == set(want) and all(got[k].shape == want[k].shape for k in want),
                  f"{sorted(set(got) ^ set(want))}")
            tol = 0.0 if dtype == "f32" else 2.0 ** -8  # bf16 keeps 8 significant bits
            worst = max(float(np.max(np.abs(got[k] - want[k]) / np.maximum(np.abs(want[k]), 1e-30)))
                        for k in want if k in got)
            check(f"{dtype}: weights equal the dequantized values, Q/K rows unpermuted (max rel err {worst:.1e})",
                  worst <= tol, f"> {tol}")
        cfg = json.load(open(os.path.join(tmp, "bf16", "config.json")))
        check("config.json from the metadata",
              (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
               cfg["head_dim"], cfg["intermediate_size"], cfg["vocab_size"], cfg["rope_theta"], cfg["rms_norm_eps"],
               cfg["max_position_embeddings"], cfg["tie_word_embeddings"], cfg["eos_token_id"], cfg["torch_dtype"])
              == (L, HID, H, HKV, D, FFN, V, 100000.0, 1e-5, 512, True, 2, "bfloat16"), json.dumps(cfg))
        tok = json.load(open(os.path.join(tmp, "bf16", "tokenizer.json")))
        tc = json.load(open(os.path.join(tmp, "bf16", "tokenizer_config.json")))
        gen = json.load(open(os.path.join(tmp, "bf16", "generation_config.json")))
        check("tokenizer.json: vocab, merges, special tokens, the smollm pre-tokenizer",
              tok["model"]["vocab"]["ab"] == V - 1 and tok["model"]["merges"] == [["a", "b"]] and
              [t["content"] for t in tok["added_tokens"]] == TOKENS[:3] and
              tok["pre_tokenizer"]["pretokenizers"][0]["type"] == "Digits", json.dumps(tok)[:300])
        check("tokenizer_config.json: chat template, bos/eos strings; generation_config.json: eos id",
              tc.get("chat_template") == "{{ messages[0]['content'] }}" and tc.get("bos_token") == "<|im_start|>" and
              tc.get("eos_token") == "<|im_end|>" and gen.get("eos_token_id") == 2, json.dumps([tc, gen]))

        for label, kw, words in [("another architecture", {"arch": "gpt2"}, "architecture 'gpt2'"),
                                 ("an unknown pre-tokenizer", {"pre": "tekken"}, "pre-tokenizer 'tekken'"),
                                 ("a K-quant tensor", {}, "Q4_K")]:
            bad = os.path.join(tmp, "bad.gguf")
            t = dict(types, **({"model.layers.1.mlp.up_proj.weight": Q.Q4_K} if label.startswith("a K") else {}))
            if label.startswith("a K"):
                hf2 = dict(hf)  # Q4_K needs rows of 256
                hf2["model.layers.1.mlp.up_proj.weight"] = rng.standard_normal((FFN, 256)).astype(np.float32)
            else:
                hf2 = hf
            write_gguf(bad, hf2, t, **kw)
            res = subprocess.run([sys.executable, IMPORT, bad, "--out", os.path.join(tmp, "bad")], capture_output=True,
                                 text=True)
            lines = res.stderr.strip().splitlines()
            check(f"{label} refused in one line", res.returncode == 1 and len(lines) == 1 and words in lines[0] and
                  not os.path.exists(os.path.join(tmp, "bad")) and not os.path.exists(os.path.join(tmp, "bad.tmp")),
                  res.stderr[-300:])

    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
