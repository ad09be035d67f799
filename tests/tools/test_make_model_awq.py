#!/usr/bin/env python3
"""tools/make_model.py --quantize awq on the tiny preset, read back with a small safetensors reader
of its own (JSON header + numpy): AutoAWQ's quantization_config; qweight/qzeros (I32) and
scales (F16) with AutoAWQ's GEMM shapes in place of the decoder Linears' .weight, everything else
byte-identical to the unquantized checkpoint of the same seed; scales, zeros and the packed
nibbles (order 0 2 4 6 1 3 5 7) equal to an independent round-to-nearest of the unquantized
weights; dequantized weights within scale/2 of them; a group size that does not divide every
input dimension refused with exit code 2. Prints one line per check and "N passed, N failed".
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "make_model.py")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_model  # noqa: E402

LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
SEED = 3
passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else f": {detail}"))
    passed, failed = passed + bool(cond), failed + (not cond)


def read_safetensors(path):
    """{name: (dtype string, shape, raw bytes)}."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    return {name: (h["dtype"], tuple(h["shape"]), data[h["data_offsets"][0]:h["data_offsets"][1]])
            for name, h in header.items() if name != "__metadata__"}


def as_array(t):
    dtype, shape, raw = t
    a = np.frombuffer(raw, {"BF16": "<u2", "F16": "<f2", "F32": "<f4", "I32": "<i4"}[dtype])
    if dtype == "BF16":
        a = (a.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return a.reshape(shape)


def unpack(packed):
    """(rows, out/8) int32 -> (rows, out): nibble i of column c is output column 8c + ORDER[i]."""
    rows, n = packed.shape
    u = packed.view(np.uint32)
    q = np.zeros((rows, n * 8), np.int64)
    for i in range(8):
        q[:, ORDER[i]::8] = (u >> np.uint32(4 * i)) & np.uint32(0xF)
    return q


def reference(w, G):
    """AutoAWQ's round-to-nearest of w (out, in) on W^T: (q (in, out), z (in/G, out), s fp16)."""
    n_out, n_in = w.shape
    wt = w.T.reshape(n_in // G, G, n_out)
    mn, mx = wt.min(1), wt.max(1)
    s = (np.maximum(mx - mn, np.float32(1e-5)) / np.float32(15)).astype(np.float16)
    z = np.clip(-np.round(mn / s.astype(np.float64)), 0, 15)
    q = np.clip(np.round(wt / s.astype(np.float64)[:, None]) + z[:, None], 0, 15)
    return q.reshape(n_in, n_out).astype(np.int64), z.astype(np.int64), s


def make(out, *extra):
    return subprocess.run([sys.executable, TOOL, "--preset", "tiny", "--seed", str(SEED),
                           "--out", out, *extra], capture_output=True, text=True)


def check_awq(tmp, base, G):
    out = os.path.join(tmp, f"awq{G}")
    r = make(out, "--quantize", "awq", "--group-size", str(G))
    check(f"g{G}: make_model --quantize awq exits 0", r.returncode == 0, r.stderr[-800:])
    if r.returncode != 0:
        return
    cfg = json.load(open(os.path.join(out, "config.json")))
    want = {"quant_method": "awq", "bits": 4, "group_size": G, "zero_point": True,
            "version": "gemm", "modules_to_not_convert": None}
    check(f"g{G}: config.json quantization_config is AutoAWQ's", cfg.get("quantization_config") == want,
          cfg.get("quantization_config"))
    check(f"g{G}: torch_dtype stays bfloat16", cfg["torch_dtype"] == "bfloat16", cfg["torch_dtype"])
    st = read_safetensors(os.path.join(out, "model.safetensors"))
    lin = {n for n in base if n.startswith("model.layers.") and n.endswith(tuple(m + ".weight" for m in LINEARS))}
    check(f"g{G}: 7 Linears per layer quantized", len(lin) == 7 * cfg["num_hidden_layers"], len(lin))
    want_names = (set(base) - lin) | {n[:-len("weight")] + k for n in lin for k in ("qweight", "qzeros", "scales")}
    check(f"g{G}: tensor set: no .weight for the Linears, qweight/qzeros/scales instead",
          set(st) == want_names, sorted(set(st) ^ want_names)[:6])
    kept = sorted(set(base) - lin)
    check(f"g{G}: embed_tokens, norms and lm_head byte-identical to the unquantized model ({len(kept)})",
          all(st.get(n) == base[n] for n in kept) and "lm_head.weight" in kept
          and "model.embed_tokens.weight" in kept and "model.norm.weight" in kept)
    shapes = deq_ok = grid_ok = bits_ok = range_ok = mine_ok = True
    worst = 0.0
    for n in sorted(lin):
        p = n[:-len("weight")]
        w = as_array(base[n])                       # (out, in) float32, the bf16 values
        n_out, n_in = w.shape
        g = n_in if G == -1 else G
        qw, qz, sc = st.get(p + "qweight"), st.get(p + "qzeros"), st.get(p + "scales")
        if not (qw and qz and sc):
            shapes = False
            continue
        if (qw[:2], qz[:2], sc[:2]) != (("I32", (n_in, n_out // 8)), ("I32", (n_in // g, n_out // 8)),
                                        ("F16", (n_in // g, n_out))):
            shapes = False
            print(f"  {p}: {qw[:2]} {qz[:2]} {sc[:2]}")
            continue
        q, z, s = unpack(as_array(qw)), unpack(as_array(qz)), as_array(sc)
        range_ok &= bool(q.min() >= 0 and q.max() <= 15 and z.min() >= 0 and z.max() <= 15)
        rq, rz, rs = reference(w, g)
        bits_ok &= bool(np.array_equal(q, rq) and np.array_equal(z, rz)
                        and np.array_equal(s.view(np.uint16), rs.view(np.uint16)))
        s64 = np.repeat(s.astype(np.float64), g, 0)                     # (in, out)
        deq = (q - np.repeat(z, g, 0)) * s64                            # exact in float64
        # Error <= s/2 where q was not clipped. Rounding s down to fp16 (relative error <= 2^-11)
        # can stretch a group to 15 * (1 + 2^-11) steps, so its max may clip to q = 15 and miss
        # by up to s * (0.5 + 15 * 2^-11).
        budget = s64 * (0.5 + 15 * 2.0**-11)
        err = np.abs(deq - w.T.astype(np.float64))
        worst = max(worst, float((err / (s64 / 2)).max()))
        deq_ok &= bool((err <= budget).all())
        k = deq / s64 + np.repeat(z, g, 0)
        grid_ok &= bool(np.array_equal(k, np.round(k)) and k.min() >= 0 and k.max() <= 15)
        mine = make_model.awq_dequantize(as_array(qw), as_array(qz), s, G)
        mine_ok &= bool(mine.dtype == np.float32 and np.array_equal(mine.astype(np.float64), deq.T))
    check(f"g{G}: qweight I32 (in, out/8), qzeros I32 (in/G, out/8), scales F16 (in/G, out)", shapes)
    check(f"g{G}: unpacked q and zeros lie in [0, 15]", range_ok)
    check(f"g{G}: scales, zeros and q (order 0 2 4 6 1 3 5 7) equal an independent round-to-nearest",
          bits_ok)
    check(f"g{G}: dequantized weights within scale/2 of the unquantized ones "
          f"(max error {worst:.4f} x scale/2)", deq_ok, f"max error {worst:.4f} x scale/2")
    check(f"g{G}: dequantized weights lie on the grid (w / s + z an integer in [0, 15])", grid_ok)
    check(f"g{G}: make_model.awq_dequantize gives the same float32 (out, in) weights", mine_ok)


def main():
    print(f"seed {SEED}")
    with tempfile.TemporaryDirectory() as tmp:
        r = make(os.path.join(tmp, "base"))
        check("unquantized tiny: make_model exits 0", r.returncode == 0, r.stderr[-800:])
        if r.returncode == 0:
            base = read_safetensors(os.path.join(tmp, "base", "model.safetensors"))
            check("unquantized tiny: no quantization_config",
                  "quantization_config" not in json.load(open(os.path.join(tmp, "base", "config.json"))))
            for G in (32, -1):
                check_awq(tmp, base, G)
        for extra, why in ((["--group-size", "48"], "48 does not divide 128 and 352"),
                           ([], "the default 128 does not divide 352"),
                           (["--group-size", "0"], "0")):
            r = make(os.path.join(tmp, "bad"), "--quantize", "awq", *extra)
            check(f"group size refused with exit code 2 ({why})",
                  r.returncode == 2 and "--group-size" in r.stderr, (r.returncode, r.stderr[-300:]))
        r = subprocess.run([sys.executable, TOOL, "--preset", "llama-2-7b", "--out", os.path.join(tmp, "so"),
                            "--quantize", "awq"], capture_output=True, text=True)
        check("shape-only preset refused with exit code 2", r.returncode == 2 and "shape-only" in r.stderr,
              (r.returncode, r.stderr[-300:]))
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
