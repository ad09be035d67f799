#!/usr/bin/env python3
"""test_bad_checkpoints.py - servelab refuses each kind of broken checkpoint with one clear line.

Copies a good checkpoint (models/tiny) into temporary directories, breaks each copy
in one way (truncated file, bad header, bad dtype, overlapping offsets, missing or
misshapen tensor, bad config.json, missing shard, ...), runs
`servelab generate DIR --prompt hi --max-tokens 1` and checks that it exits with
status 1 (never a crash) and writes exactly one stderr line, "servelab: error: ...",
naming the file and the tensor or field at fault. The intact copy must generate.
Python 3 standard library only; safetensors headers are rewritten with struct + json,
keeping the data section byte for byte.

usage: test_bad_checkpoints.py --servelab build/servelab --model models/tiny [-k NAME]
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ST = "model.safetensors"
INDEX = "model.safetensors.index.json"
ERROR_PREFIX = "servelab: error: "


# ---- safetensors and config helpers -------------------------------------------------

def st_read(path):
    """Returns (header dict in file order, header bytes length, data bytes)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    return header, n, raw[8 + n:]


def st_write(path, header, data):
    """Writes header (padded with spaces to a multiple of 8, as the Rust writer does) + data."""
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def tensors_by_offset(header):
    """[(name, info)] of the tensors (not __metadata__), sorted by data offset."""
    items = [(k, v) for k, v in header.items() if k != "__metadata__"]
    return sorted(items, key=lambda kv: tuple(kv[1]["data_offsets"]))


def nbytes(info):
    b, e = info["data_offsets"]
    return e - b


def pick_tensor(header, preferred, want=lambda info: True):
    """The first name of `preferred` present and satisfying `want`, else any that does."""
    for name in preferred:
        if name in header and want(header[name]):
            return name
    for name, info in tensors_by_offset(header):
        if want(info):
            return name
    raise RuntimeError("no tensor in the checkpoint fits this case")


def config_edit(d, fn):
    path = os.path.join(d, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    fn(cfg)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)


def header_edit(d, fn):
    """Applies fn(header) -> words to model.safetensors' header; returns the words."""
    path = os.path.join(d, ST)
    header, _, data = st_read(path)
    words = fn(header)
    st_write(path, header, data)
    return words


# ---- the cases: each breaks directory d and returns the words the error must contain --

def case_truncated_file(d):
    path = os.path.join(d, ST)
    header, n, data = st_read(path)
    keep = len(data) // 2
    with open(path, "r+b") as f:
        f.truncate(8 + n + keep)
    # The parser checks entries in header order: the first one that ends past the cut.
    first = next(k for k, v in header.items()
                 if k != "__metadata__" and v["data_offsets"][1] > keep)
    return [ST, first, "past the end of the data section"]


def case_file_shorter_than_length_prefix(d):
    path = os.path.join(d, ST)
    with open(path, "r+b") as f:
        f.truncate(5)
    return [ST, "header", "too short"]


def case_header_length_past_end(d):
    path = os.path.join(d, ST)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.write(struct.pack("<Q", size))
    return [ST, "header", "past the end of the file"]


def case_garbage_json_header(d):
    path = os.path.join(d, ST)
    _, n, data = st_read(path)
    garbage = b'{"model.embed_tokens.weight": {"dtype": "BF16", "shape": [1, @@'
    garbage = (garbage + b"@" * n)[:n]
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", n) + garbage + data)
    return [ST, "header", "invalid JSON"]


def case_unsupported_dtype(d):
    def fn(h):
        name = pick_tensor(h, ["model.layers.0.self_attn.q_proj.weight"])
        h[name]["dtype"] = "F8_E4M3"
        return [ST, name, "unsupported dtype", "F8_E4M3"]
    return header_edit(d, fn)


def case_shape_does_not_match_bytes(d):
    def fn(h):
        name = pick_tensor(h, ["model.layers.0.mlp.up_proj.weight"],
                           lambda i: len(i["shape"]) >= 1 and nbytes(i) > 0)
        h[name]["shape"][0] *= 2
        return [ST, name, "bytes", "data_offsets"]
    return header_edit(d, fn)


def case_overlapping_offsets(d):
    def fn(h):
        ts = [(k, v) for k, v in tensors_by_offset(h) if nbytes(v) > 0]
        (a, ai), (b, bi) = ts[0], ts[1]
        size = nbytes(bi)
        bi["data_offsets"] = [ai["data_offsets"][0], ai["data_offsets"][0] + size]
        return [ST, a, b, "overlap"]
    return header_edit(d, fn)


def case_tensor_missing(d):
    with open(os.path.join(d, "config.json")) as f:
        tied = json.load(f).get("tie_word_embeddings", False)

    def fn(h):
        # A rename of equal length keeps the header layout; the tensor is then missing.
        name = "lm_head.weight" if "lm_head.weight" in h and not tied else "model.norm.weight"
        renamed = name[:-1] + ("X" if name[-1] != "X" else "Y")
        h[renamed] = h.pop(name)
        return [ST, name, "missing"]
    return header_edit(d, fn)


def case_wrong_shape(d):
    def fn(h):
        name = pick_tensor(h, ["model.layers.0.mlp.gate_proj.weight"],
                           lambda i: len(i["shape"]) == 2 and i["shape"][0] != i["shape"][1])
        s = h[name]["shape"]
        s[0], s[1] = s[1], s[0]
        return [ST, name, "expected shape"]
    return header_edit(d, fn)


def case_unsupported_architecture(d):
    config_edit(d, lambda c: c.__setitem__("architectures", ["GPT2LMHeadModel"]))
    return ["config.json", "architectures", "GPT2LMHeadModel"]


def case_config_missing(d):
    os.remove(os.path.join(d, "config.json"))
    return ["config.json", "No such file or directory"]


AWQ = {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True, "version": "gemm"}


def case_quantization_gptq(d):
    config_edit(d, lambda c: c.__setitem__("quantization_config", {"quant_method": "gptq", "bits": 4}))
    return ["config.json", "quant_method", "gptq", "not supported"]


def case_awq_8_bits(d):
    config_edit(d, lambda c: c.__setitem__("quantization_config", dict(AWQ, bits=8)))
    return ["config.json", "bits", "4-bit"]


def case_awq_gemv_layout(d):
    config_edit(d, lambda c: c.__setitem__("quantization_config", dict(AWQ, version="gemv")))
    return ["config.json", "version", "gemv", "gemm"]


def case_awq_group_size_not_dividing(d):
    config_edit(d, lambda c: c.__setitem__("quantization_config", dict(AWQ, group_size=96)))
    return ["q_proj", "group_size 96", "128 input features"]


def case_awq_config_on_unquantized_weights(d):
    config_edit(d, lambda c: c.__setitem__("quantization_config", AWQ))
    return [ST, "model.layers.0.self_attn.q_proj.qweight"]


def case_awq_quant_config_json_bits(d):
    with open(os.path.join(d, "quant_config.json"), "w") as f:
        json.dump({"zero_point": True, "q_group_size": 32, "w_bit": 3, "version": "GEMM"}, f)
    return ["quant_config.json", "w_bit", "4-bit"]


def case_yarn_rope_scaling(d):
    config_edit(d, lambda c: c.__setitem__("rope_scaling", {"rope_type": "yarn", "factor": 4.0}))
    return ["config.json", "rope_scaling", "yarn"]


def make_sharded(d, extra=None):
    """Turns model.safetensors into shard 1 of 2; the index maps the second half of the
    tensors to shard 2, which does not exist (unless extra says otherwise)."""
    header, _, _ = st_read(os.path.join(d, ST))
    names = [k for k in header if k != "__metadata__"]
    s1, s2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    os.rename(os.path.join(d, ST), os.path.join(d, s1))
    wm = {k: (s1 if i < len(names) // 2 else s2) for i, k in enumerate(names)}
    if extra is not None:
        wm = {k: s1 for k in names}
        wm.update(extra)
    with open(os.path.join(d, INDEX), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f, indent=2)
    return s1, s2


def case_index_names_missing_shard(d):
    _, s2 = make_sharded(d)
    return [s2, "cannot open", "No such file or directory"]


def case_tensor_missing_from_its_shard(d):
    fake = "model.layers.0.self_attn.q_proj.bias"
    s1, _ = make_sharded(d, extra={fake: "model-00001-of-00002.safetensors"})
    return [s1, fake, "missing from"]


CASES = [
    ("truncated_model_safetensors", case_truncated_file),
    ("file_shorter_than_length_prefix", case_file_shorter_than_length_prefix),
    ("header_length_past_end_of_file", case_header_length_past_end),
    ("garbage_json_header", case_garbage_json_header),
    ("unsupported_dtype_f8", case_unsupported_dtype),
    ("shape_times_dtype_is_not_byte_length", case_shape_does_not_match_bytes),
    ("overlapping_offsets", case_overlapping_offsets),
    ("tensor_missing", case_tensor_missing),
    ("wrong_shape_swapped_dims", case_wrong_shape),
    ("unsupported_architecture", case_unsupported_architecture),
    ("config_json_missing", case_config_missing),
    ("quantization_gptq", case_quantization_gptq),
    ("awq_8_bits", case_awq_8_bits),
    ("awq_gemv_layout", case_awq_gemv_layout),
    ("awq_group_size_not_dividing", case_awq_group_size_not_dividing),
    ("awq_config_on_unquantized_weights", case_awq_config_on_unquantized_weights),
    ("awq_quant_config_json_3_bits", case_awq_quant_config_json_bits),
    ("yarn_rope_scaling", case_yarn_rope_scaling),
    ("index_names_missing_shard", case_index_names_missing_shard),
    ("tensor_missing_from_its_shard", case_tensor_missing_from_its_shard),
]


# ---- running -------------------------------------------------------------------------

def run_servelab(servelab, d, timeout_s):
    cmd = [servelab, "generate", d, "--prompt", "hi", "--max-tokens", "1"]
    return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=timeout_s)


def check_refusal(proc, words):
    """Returns None when proc failed the way it should, else what is wrong."""
    err = proc.stderr.decode("utf-8", errors="replace")
    rc = proc.returncode
    if rc < 0 or rc in (134, 139):
        return "crashed (exit status %d)" % rc
    if rc != 1:
        return "exit status %d, expected 1" % rc
    lines = err.splitlines()
    if len(lines) != 1:
        return "stderr has %d lines, expected exactly 1" % len(lines)
    line = lines[0]
    if not line.startswith(ERROR_PREFIX):
        return "stderr does not start with %r" % ERROR_PREFIX
    missing = [w for w in words if w not in line]
    if missing:
        return "error line lacks %s" % ", ".join(repr(w) for w in missing)
    return None


def one_line(b):
    s = b.decode("utf-8", errors="replace").strip().replace("\n", " | ")
    return s if len(s) <= 400 else s[:400] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--servelab", required=True, help="path to the servelab binary")
    ap.add_argument("--model", required=True, help="a good checkpoint directory (models/tiny)")
    ap.add_argument("-k", default="", help="only run cases whose name contains this")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    args = ap.parse_args()

    servelab = os.path.abspath(args.servelab)
    if not os.access(servelab, os.X_OK):
        print("error: %s is not an executable" % servelab, file=sys.stderr)
        return 2
    for f in ("config.json", ST):
        if not os.path.isfile(os.path.join(args.model, f)):
            print("error: %s has no %s (run tools/make_model.py first)" % (args.model, f),
                  file=sys.stderr)
            return 2

    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="servelab-badckpt-") as tmp:
        cases = [("intact_checkpoint_generates", None)] + CASES
        for name, breaker in cases:
            if args.k not in name:
                continue
            d = os.path.join(tmp, name)
            shutil.copytree(args.model, d)
            try:
                words = breaker(d) if breaker else None
                proc = run_servelab(servelab, d, args.timeout)
                if breaker is None:
                    problem = (None if proc.returncode == 0 else
                               "exit status %d, expected 0" % proc.returncode)
                else:
                    problem = check_refusal(proc, words)
            except subprocess.TimeoutExpired:
                proc, problem = None, "no exit within %.0f s" % args.timeout
            except Exception as e:  # a case that cannot be set up is a failure, not a skip
                proc, problem = None, "setup failed: %s: %s" % (type(e).__name__, e)
            if problem is None:
                passed += 1
                msg = one_line(proc.stderr) if breaker else "exit 0"
                print("ok   %-40s %s" % (name, msg))
            else:
                failed += 1
                print("FAIL %-40s %s" % (name, problem))
                if proc is not None:
                    print("     stderr: %s" % one_line(proc.stderr))
            sys.stdout.flush()
            shutil.rmtree(d, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
