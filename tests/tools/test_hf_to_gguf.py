#!/usr/bin/env python3
"""tools/hf-to-gguf on models/tiny, read back with the gguf package's reader: every tensor under
its llama.cpp name with the checkpoint's values (Q/K rows permuted as llama.cpp's converter does,
undone here with tools/gguf_hf.py's unpermute_rope), F32 throughout with --outtype f32, the
matrices' exact bf16 bits with --outtype bf16 and the norms in F32; the llama.* metadata from
config.json; the tokenizer's pieces, scores and types from tokenizer.model. Exits 77 without
the gguf package. Prints one line per check and "N passed, N failed".
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFReader
except ImportError:
    print("test_hf_to_gguf: the gguf package is not installed (pip install gguf); skipped")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import gguf_hf  # noqa: E402

TOOL = os.path.join(ROOT, "tools", "hf-to-gguf")
MODEL = os.path.join(ROOT, "models", "tiny")
passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else f": {detail}"))
    passed, failed = passed + bool(cond), failed + (not cond)


def field(r, key):
    return r.fields[key].contents()


def main():
    cfg = json.load(open(os.path.join(MODEL, "config.json")))
    with open(os.path.join(MODEL, "model.safetensors"), "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    src = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        raw = np.frombuffer(data[a:b], {"BF16": "<u2", "F32": "<f4"}[h["dtype"]]).reshape(h["shape"])
        src[name] = (h["dtype"], raw)
    vocab = gguf_sp = None
    with tempfile.TemporaryDirectory() as tmp:
        for outtype in ("f32", "bf16"):
            out = os.path.join(tmp, f"m-{outtype}.gguf")
            r = subprocess.run([sys.executable, TOOL, MODEL, out, "--outtype", outtype], capture_output=True, text=True)
            check(f"{outtype}: hf-to-gguf exits 0", r.returncode == 0, r.stderr)
            if r.returncode:
                continue
            g = GGUFReader(out)
            check(f"{outtype}: llama.* metadata from config.json",
                  field(g, "general.architecture") == "llama" and
                  field(g, "llama.block_count") == cfg["num_hidden_layers"] and
                  field(g, "llama.embedding_length") == cfg["hidden_size"] and
                  field(g, "llama.attention.head_count") == cfg["num_attention_heads"] and
                  field(g, "llama.attention.head_count_kv") == cfg.get("num_key_value_heads",
                                                                        cfg["num_attention_heads"]) and
                  field(g, "llama.feed_forward_length") == cfg["intermediate_size"] and
                  field(g, "general.file_type") == (0 if outtype == "f32" else 32))
            toks = field(g, "tokenizer.ggml.tokens")
            types = field(g, "tokenizer.ggml.token_type")
            check(f"{outtype}: {cfg['vocab_size']} tokens; <unk> <s> </s> first, typed unknown/control",
                  len(toks) == cfg["vocab_size"] and toks[:3] == ["<unk>", "<s>", "</s>"] and
                  list(types[:3]) == [2, 3, 3], toks[:5])
            if vocab is None:
                vocab = toks
            gguf_sp = toks
            names = {t.name: t for t in g.tensors}
            check(f"{outtype}: one tensor per checkpoint tensor", len(names) == len(src), sorted(names))
            bad = []
            H, Hkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
            for t in g.tensors:
                hf = gguf_hf.hf_name(t.name)
                dtype, raw = src[hf]
                want = (raw.astype(np.uint32) << 16).view(np.float32) if dtype == "BF16" else raw
                shape = [int(d) for d in reversed(t.shape)]
                if t.tensor_type == Q.F32:
                    got = np.asarray(t.data, dtype=np.float32).reshape(shape)
                elif t.tensor_type == Q.BF16:
                    got = (np.asarray(t.data).view(np.uint16).astype(np.uint32).reshape(shape) << 16).view(np.float32)
                else:
                    bad.append(f"{t.name}: type {t.tensor_type}")
                    continue
                want_type = Q.F32 if outtype == "f32" or len(shape) == 1 else Q.BF16
                if t.tensor_type != want_type:
                    bad.append(f"{t.name}: type {t.tensor_type.name}, expected {want_type.name}")
                if hf.endswith("q_proj.weight"):
                    got = gguf_hf.unpermute_rope(got, H)
                elif hf.endswith("k_proj.weight"):
                    got = gguf_hf.unpermute_rope(got, Hkv)
                if got.shape != want.shape or not np.array_equal(got, want):
                    bad.append(t.name)
            check(f"{outtype}: every tensor holds the checkpoint's values (Q/K unpermuted)", not bad, bad[:5])
    check("f32 and bf16 files hold the same tokenizer", vocab == gguf_sp)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
