#!/usr/bin/env python3
"""AWQ checkpoints through the real binary: `tools/make_model.py --quantize awq` writes AutoAWQ's
GEMM format, servelab loads and runs it on its W4A16 CPU kernels.

- its greedy answers, teacher-forced, agree with the dequantized twin's (the same weights as
  (q - z) * s in float32, an ordinary checkpoint) at >= 99% of steps, both in float32, for group
  sizes 32 and -1 (whole inputs), at a level whose linears keep activations in float32 (avx512
  where the CPU has avx512_bf16);
- at avx512_bf16, whose AWQ linears round activations to bf16 as its bf16 linears do, the AWQ
  model's top-1 on the same steps agrees with its own float32-activation answers at >= 95%;
- a checkpoint with modules_to_not_convert (one linear kept unquantized) loads and agrees too;
- `--quantization awq` is accepted on it and refused on an unquantized checkpoint with vLLM's
  line; the startup log names the quantization;
- split over 2 and 4 tensor-parallel ranks (group size 8), it gives -tp 1's greedy tokens in
  float32; a split that would cut a group is refused with vLLM's line;
- `--load-format dummy` on an AWQ config alone makes random 4-bit weights (the shapes for speed runs),
  the same for -tp 1 and -tp 2.
Needs numpy (and spm_train, as make_model.py does). Prints one line per check and
"N passed, N failed".
"""
import argparse
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))
from teacher_forced import run_generate, forced_steps  # noqa: E402

ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def st_read(path):
    """{name: (dtype, shape, bytes)} of a safetensors file."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def st_write(path, tensors):
    """tensors: {name: (dtype, shape, bytes)}, written in sorted order."""
    header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name in sorted(tensors):
        dt, shape, b = tensors[name]
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def unpack(packed):
    """int32 (rows, cols / 8) -> uint8 (rows, cols) in AutoAWQ's column order."""
    p = packed.view(np.uint32)
    out = np.zeros((p.shape[0], p.shape[1] * 8), np.uint8)
    for i, col in enumerate(ORDER):
        out[:, col::8] = (p >> np.uint32(4 * i)) & np.uint32(15)
    return out


def dequantize(qweight, qzeros, scales, group):
    """(out, in) float32 weights: W^T[k, n] = (q[k, n] - z[k / G, n]) * s[k / G, n]."""
    q, z = unpack(qweight).astype(np.float32), unpack(qzeros).astype(np.float32)
    s = scales.astype(np.float32)
    g = np.arange(q.shape[0]) // group
    return ((q - z[g]) * s[g]).T.copy()


def make_twin(awq_dir, twin_dir):
    """An ordinary float32 checkpoint of the AWQ checkpoint's dequantized weights."""
    os.makedirs(twin_dir, exist_ok=True)
    cfg = json.load(open(os.path.join(awq_dir, "config.json")))
    group = cfg["quantization_config"]["group_size"]
    src = st_read(os.path.join(awq_dir, "model.safetensors"))
    out = {}
    for name, (dt, shape, b) in src.items():
        if name.endswith(".qweight"):
            prefix = name[:-len(".qweight")]
            qw = np.frombuffer(b, np.int32).reshape(shape)
            qz = np.frombuffer(src[prefix + ".qzeros"][2], np.int32).reshape(src[prefix + ".qzeros"][1])
            sc = np.frombuffer(src[prefix + ".scales"][2], np.float16).reshape(src[prefix + ".scales"][1])
            w = dequantize(qw, qz, sc, shape[0] if group == -1 else group)
            out[prefix + ".weight"] = ("F32", list(w.shape), w.astype(np.float32).tobytes())
        elif not name.endswith((".qzeros", ".scales")):
            out[name] = (dt, shape, b)
    st_write(os.path.join(twin_dir, "model.safetensors"), out)
    del cfg["quantization_config"]
    json.dump(cfg, open(os.path.join(twin_dir, "config.json"), "w"), indent=2)
    for f in os.listdir(awq_dir):
        if f not in ("config.json", "model.safetensors"):
            open(os.path.join(twin_dir, f), "wb").write(open(os.path.join(awq_dir, f), "rb").read())


def keep_unquantized(awq_dir, out_dir, module):
    """A copy of the AWQ checkpoint with `module` stored dequantized (float32 .weight) and named
    in modules_to_not_convert: the same function, one linear on the unquantized path."""
    make_twin(awq_dir, out_dir)   # the tokenizer files and a float32 copy of every weight
    cfg = json.load(open(os.path.join(awq_dir, "config.json")))
    cfg["quantization_config"]["modules_to_not_convert"] = [module]
    json.dump(cfg, open(os.path.join(out_dir, "config.json"), "w"), indent=2)
    src = st_read(os.path.join(awq_dir, "model.safetensors"))
    twin = st_read(os.path.join(out_dir, "model.safetensors"))
    out = {k: v for k, v in src.items() if not k.startswith(module + ".")}
    out[module + ".weight"] = twin[module + ".weight"]
    st_write(os.path.join(out_dir, "model.safetensors"), out)


def has_avx512_bf16():
    try:
        return "avx512_bf16" in open("/proc/cpuinfo").read().split()
    except OSError:
        return False


# The CPU level for the float32 comparisons: the best one that keeps activations in float32.
EXACT_ENV = dict(os.environ, SERVELAB_CPU_ISA="avx512") if has_avx512_bf16() else None


def generate(servelab, model, lines, *flags, env=EXACT_ENV):
    return run_generate(servelab, model, lines, flags, env)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--make-model", required=True, help="tools/make_model.py")
    ap.add_argument("--tiny", required=True, help="models/tiny (an unquantized checkpoint)")
    args = ap.parse_args()
    results = []

    def check(name, cond, detail=""):
        results.append(bool(cond))
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + detail}", flush=True)

    tmp = tempfile.mkdtemp(prefix="servelab-awq-")
    vocab = json.load(open(os.path.join(args.tiny, "config.json")))["vocab_size"]
    for group in (32, -1):
        awq = os.path.join(tmp, f"tiny-awq-g{group}")
        r = subprocess.run([sys.executable, args.make_model, "--preset", "tiny", "--out", awq, "--quantize", "awq",
                            "--group-size", str(group)], capture_output=True, text=True)
        check(f"make_model --quantize awq --group-size {group}", r.returncode == 0, r.stderr[-500:])
        if r.returncode:
            continue
        twin = awq + "-twin"
        make_twin(awq, twin)
        rng = random.Random(group)
        prompts = [[rng.randrange(3, vocab) for _ in range(16)] for _ in range(8)]
        res, ref = generate(args.servelab, awq, [{"prompt_token_ids": p, "max_tokens": 32, "temperature": 0,
                                                  "ignore_eos": True} for p in prompts], "--dtype", "float32")
        check(f"g{group}: the AWQ checkpoint generates, and logs its quantization",
              res.returncode == 0 and len(ref) == len(prompts) and "Quantization: awq" in res.stderr,
              res.stderr[-800:])
        if res.returncode:
            continue
        steps, want = forced_steps(prompts, ref)
        res, outs = generate(args.servelab, twin, steps, "--dtype", "float32")
        agree = sum(o["token_ids"][0] == t for o, t in zip(outs, want))
        check(f"g{group}: the dequantized float32 twin's top-1 equals the AWQ model's at {agree} of {len(want)} "
              f"teacher-forced steps (>= 99%)", res.returncode == 0 and agree >= 0.99 * len(want), res.stderr[-500:])
        if EXACT_ENV is not None:
            native = dict(os.environ)
            native.pop("SERVELAB_CPU_ISA", None)
            res, outs = generate(args.servelab, awq, steps, "--dtype", "float32", env=native)
            agree = sum(o["token_ids"][0] == t for o, t in zip(outs, want))
            check(f"g{group}: at avx512_bf16 (activations rounded to bf16) the AWQ model's top-1 equals its float32-"
                  f"activation one at {agree} of {len(want)} teacher-forced steps (>= 95%)",
                  res.returncode == 0 and agree >= 0.95 * len(want), res.stderr[-500:])
        res, _ = generate(args.servelab, awq, [{"prompt": "hi", "max_tokens": 2}], "--quantization", "awq")
        check(f"g{group}: --quantization awq is accepted", res.returncode == 0, res.stderr[-300:])
        if group != 32:
            continue
        mixed = awq + "-mixed"
        keep_unquantized(awq, mixed, "model.layers.0.mlp.down_proj")
        res, outs = generate(args.servelab, mixed, steps, "--dtype", "float32")
        agree = sum(o["token_ids"][0] == t for o, t in zip(outs, want))
        check(f"modules_to_not_convert (layer 0's down_proj unquantized): top-1 equals the AWQ model's at {agree} "
              f"of {len(want)} steps (>= 99%)", res.returncode == 0 and agree >= 0.99 * len(want), res.stderr[-500:])

    # Tensor parallelism over AWQ weights: with group size 8 every rank's block keeps whole groups
    # and whole int32s at 2 and 4 ranks; group size 32 leaves down_proj 88 inputs per rank at 4.
    awq8 = os.path.join(tmp, "tiny-awq-g8")
    r = subprocess.run([sys.executable, args.make_model, "--preset", "tiny", "--out", awq8, "--quantize", "awq",
                        "--group-size", "8"], capture_output=True, text=True)
    check("make_model --quantize awq --group-size 8", r.returncode == 0, r.stderr[-500:])
    lines = [{"prompt_token_ids": p, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
             for p in [[5 + 7 * i + j for j in range(12)] for i in range(6)]]
    _, one = generate(args.servelab, awq8, lines, "--dtype", "float32")
    for tp in (2, 4):
        res, many = generate(args.servelab, awq8, lines, "--dtype", "float32", "-tp", str(tp))
        same = sum(a["token_ids"] == b["token_ids"] for a, b in zip(one, many))
        check(f"g8 -tp {tp}: -tp 1's greedy tokens for {same} of {len(lines)} prompts",
              res.returncode == 0 and len(one) == len(lines) and same == len(lines), res.stderr[-500:])
    # --load-format dummy on an AWQ config (no weights file): random 4-bit tensors, a pure function of
    # the seed, made whole and cut per rank, so -tp 2 gives -tp 1's tokens; finite log-probabilities.
    shapes = awq8 + "-config-only"
    os.makedirs(shapes)
    for name in os.listdir(awq8):
        if not name.endswith(".safetensors"):
            shutil.copy(os.path.join(awq8, name), shapes)
    _, one = generate(args.servelab, shapes, lines, "--dtype", "float32", "--load-format", "dummy")
    res, two = generate(args.servelab, shapes, lines, "--dtype", "float32", "--load-format", "dummy", "-tp", "2")
    same = sum(a["token_ids"] == b["token_ids"] for a, b in zip(one, two))
    finite = all(math.isfinite(lp) and lp <= 0 for o in one for lp in o["logprobs"])
    check(f"--load-format dummy on an AWQ config: -tp 2 gives -tp 1's greedy tokens for {same} of {len(lines)} "
          f"prompts, log-probabilities finite", res.returncode == 0 and len(one) == len(lines) and
          same == len(lines) and finite, res.stderr[-500:])
    res, _ = generate(args.servelab, os.path.join(tmp, "tiny-awq-g32"), [{"prompt": "hi", "max_tokens": 2}], "-tp", "4")
    check("g32 -tp 4 (88 inputs of down_proj per rank) exits 1 with vLLM's line",
          res.returncode == 1 and "The input size is not aligned with the quantized weight shape" in res.stderr,
          f"exit {res.returncode}: {res.stderr[-300:]}")

    res, _ = generate(args.servelab, args.tiny, [{"prompt": "hi", "max_tokens": 2}], "-q", "awq")
    line = ("Quantization method specified in the model config (None) does not match the quantization method "
            "specified in the `quantization` argument (awq).")
    check("-q awq on an unquantized checkpoint exits 1 with vLLM's line", res.returncode == 1 and line in res.stderr,
          f"exit {res.returncode}: {res.stderr[-300:]}")
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
