#!/usr/bin/env python3
"""`servelab eval perplexity` against a float64 numpy reference, and its window rules.

- test_matches_float64_reference_*: on fresh random token ids (seed printed),
  the command in float32 (CPU) equals ppl_reference.py's float64 forward to
  1e-4 relative: one window, and overlapping windows fed in chunks smaller
  than a window (chunked prefill), on models/tiny and models/small if present.
- test_scored_tokens_*: with a stride below the window every token but the
  text's first is scored exactly once; with stride == window (no overlap),
  every token but each window's first (transformers' label shift, as in the
  guide); the window count is Hugging Face's loop's; a text shorter than one
  window is one window.
- test_chunked_equals_unchunked: --max-num-batched-tokens changes nothing.
- test_float32_and_bfloat16_agree_on_text: tiny written in float32
  (tools/make_model.py --dtype float32) run with --dtype float32 and with
  --dtype bfloat16 (weights rounded to bf16; the CPU's activations stay fp32)
  give perplexities within 0.5% on tests/data/ppl/lighthouse.txt. With random
  weights the perplexity is far above the vocabulary size (confident, wrong
  guesses), so this checks the machinery's stability, not a language model.
- test_bad_input_*: a missing file, --stride 0, --stride above the window, an
  empty or one-token text: one "servelab: error:" line, exit 2.
Prints one line per check and "N passed, N failed".
"""
import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ppl_reference  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
TEXT = os.path.join(ROOT, "tests", "data", "ppl", "lighthouse.txt")


def run(servelab, model, *flags):
    res = subprocess.run([servelab, "eval", "perplexity", model, "--device", "cpu", *flags],
                         capture_output=True, text=True, timeout=600)
    out = {}
    for key, pat in (("ppl", r"^Perplexity: (\S+)"), ("nll", r"^Mean NLL: (\S+)"),
                     ("scored", r"^Scored tokens: (\d+) of (\d+)"), ("windows", r"^Windows: (\d+)"),
                     ("tok_s", r"^Tokens/s: (\S+)")):
        m = re.search(pat, res.stdout, re.M)
        if m:
            out[key] = tuple(float(g) for g in m.groups()) if key == "scored" else float(m.group(1))
    return res, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    sl, tiny = args.servelab, args.model
    results = []
    tmp = tempfile.mkdtemp(prefix="ppl-test-")

    def check(name, cond, detail=""):
        results.append(bool(cond))
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + detail}", flush=True)

    def write(name, content):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(content)
        return path

    seed = random.SystemRandom().randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)

    # ---- float64 reference ----------------------------------------------------------------
    models = [tiny]
    small = os.path.join(os.path.dirname(tiny), "small")
    if os.path.exists(os.path.join(small, "model.safetensors")):
        models.append(small)
    for model in models:
        cfg, w = ppl_reference.load(model)
        V = cfg["vocab_size"]
        name = os.path.basename(model)
        for label, n, N, S, extra in (("one_window", 48, 64, 64, []),
                                      ("windows_without_overlap", 70, 32, 32, []),
                                      ("overlapping_windows_chunked", 90, 32, 12,
                                       ["--max-num-batched-tokens", "7"])):
            ids = [rng.randrange(3, V) for _ in range(n)]
            path = write(f"{name}-{label}.ids", " ".join(map(str, ids)))
            ref_ppl, ref_nll, ref_scored, ref_windows = ppl_reference.perplexity(cfg, w, ids, N, S)
            res, out = run(sl, model, "--tokens", path, "--max-model-len", str(N), "--stride", str(S),
                           "--dtype", "float32", *extra)
            ok = res.returncode == 0 and "ppl" in out
            rel = abs(out["ppl"] / ref_ppl - 1) if ok else float("inf")
            check(f"test_matches_float64_reference_{label} ({name}, {n} tokens, window {N}, stride {S}): "
                  f"{out.get('ppl')} vs {ref_ppl:.6f}, relative {rel:.2e}",
                  ok and rel < 1e-4 and out["scored"][0] == ref_scored and out["windows"] == ref_windows,
                  res.stderr[-500:])

    # ---- window rules ------------------------------------------------------------------------
    ids = [rng.randrange(3, 1024) for _ in range(200)]
    path = write("rules.ids", " ".join(map(str, ids)))
    for N, S in ((64, 64), (64, 16), (64, 1), (50, 33), (256, 100)):
        res, out = run(sl, tiny, "--tokens", path, "--max-model-len", str(N), "--stride", str(S))
        want_windows = len(ppl_reference.windows(len(ids), N, S))
        want = len(ids) - (want_windows if S == N else 1)
        check(f"test_scored_tokens_are_all_but_each_windows_first (window {N}, stride {S}): {out.get('scored')}, "
              f"{out.get('windows')} windows (want {want} scored, {want_windows} windows)",
              res.returncode == 0 and out.get("scored") == (want, len(ids))
              and out.get("windows") == want_windows, res.stderr[-500:])
    res_a, a = run(sl, tiny, "--tokens", path, "--max-model-len", "64", "--stride", "16")
    res_b, b = run(sl, tiny, "--tokens", path, "--max-model-len", "64", "--stride", "16",
                   "--max-num-batched-tokens", "5")
    check(f"test_chunked_equals_unchunked: {a.get('nll')} vs {b.get('nll')}",
          res_a.returncode == 0 and res_b.returncode == 0 and abs(a["nll"] - b["nll"]) <= 1e-6 * abs(a["nll"]))
    res, out = run(sl, tiny, "--text", write("short.txt", "A short text, far shorter than one window."),
                   "--max-model-len", "512")
    check(f"test_text_shorter_than_a_window: {out.get('windows')} window, {out.get('scored')} scored",
          res.returncode == 0 and out.get("windows") == 1 and out["scored"][0] == out["scored"][1] - 1,
          res.stderr[-500:])

    # ---- float32 vs bfloat16 on the shipped text -----------------------------------------------
    if shutil.which("spm_train"):
        f32 = os.path.join(tmp, "tiny-f32")
        mk = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_model.py"), "--preset", "tiny",
                             "--dtype", "float32", "--out", f32], capture_output=True, text=True)
        check("tiny written in float32", mk.returncode == 0, mk.stderr[-500:])
        if mk.returncode == 0:
            _, x = run(sl, f32, "--text", TEXT, "--dtype", "float32")
            _, y = run(sl, f32, "--text", TEXT, "--dtype", "bfloat16")
            rel = abs(y["ppl"] / x["ppl"] - 1) if "ppl" in x and "ppl" in y else float("inf")
            print(f"lighthouse.txt on tiny: float32 {x.get('ppl')}, bfloat16 {y.get('ppl')}")
            check(f"test_float32_and_bfloat16_agree_on_text: relative {rel:.2e} (at most 5e-3)", rel <= 5e-3)
    else:
        print("skip test_float32_and_bfloat16_agree_on_text: spm_train (sentencepiece) not installed")

    # ---- bad input ----------------------------------------------------------------------------
    def bad(name, flags, want):
        res = subprocess.run([sl, "eval", "perplexity", tiny, "--device", "cpu", *flags],
                             capture_output=True, text=True, timeout=120)
        lines = [l for l in res.stderr.splitlines() if l.strip()]
        errors = [l for l in lines if l.startswith("servelab: error:")]
        check(f"test_bad_input_{name}: exit {res.returncode}, {errors[-1] if errors else lines}",
              res.returncode == 2 and len(errors) == 1 and want in errors[0] and not res.stdout)

    bad("missing_text_file", ["--text", os.path.join(tmp, "nope.txt")], "nope.txt")
    bad("stride_zero", ["--text", TEXT, "--stride", "0"], "--stride")
    bad("stride_above_window", ["--text", TEXT, "--max-model-len", "64", "--stride", "65"],
        "greater than the window")
    bad("empty_text", ["--text", write("empty.txt", "")], "at least 2")
    bad("one_token", ["--tokens", write("one.ids", "5")], "at least 2")
    bad("text_and_tokens", ["--text", TEXT, "--tokens", path], "either --text or --tokens")

    shutil.rmtree(tmp, ignore_errors=True)
    n_fail = results.count(False)
    print(f"{results.count(True)} passed, {n_fail} failed")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
