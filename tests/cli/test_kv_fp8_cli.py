#!/usr/bin/env python3
"""`--kv-cache-dtype fp8` (fp8_e4m3, fp8_e5m2) through the real binary, on the CPU.

- capacity: in the same --kv-cache-memory-bytes, "GPU KV cache size" holds 2x the tokens of the
  bf16 cache of a bf16 model and 4x the fp32 cache of an fp32 one (within one block), and the
  startup log has vLLM's "Using fp8 data type to store kv cache" line;
- `serve`: vllm:cache_config_info says cache_dtype="fp8";
- accuracy, teacher-forced along the bf16-KV model's greedy answers: on the trained SmolLM2
  (the golden chat prompts) e4m3's top-1 agrees at >= 90% of steps, and on it and on
  models/small e4m3 agrees more often than e5m2 (one more mantissa bit; no saturation at these
  activations). The rates are printed: docs/benchmarks.md records them;
- bad values: an unknown dtype exits 2 with argparse's line; --device cuda with float32 activations
  exits 1 with one line, before any device is probed (the CUDA kernels keep fp8 with 16-bit
  activations only; their parity tests are tests/kernels' fp8 cases).
Prints one line per check and "N passed, N failed".
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))
from teacher_forced import run_generate, forced_steps  # noqa: E402

TOKENS_RE = re.compile(r"GPU KV cache size: ([\d,]+) tokens")


def kv_tokens(servelab, model, *flags):
    res = subprocess.run([servelab, "generate", model, "--prompt", "hi", "--max-tokens", "1", "--device", "cpu",
                          "--kv-cache-memory-bytes", "512M", *flags], capture_output=True, text=True, timeout=300)
    m = TOKENS_RE.search(res.stderr)
    return (int(m.group(1).replace(",", "")) if m else None), res


def agreement(servelab, model, prompts, kv):
    """(agreeing steps, steps) of --kv-cache-dtype kv, teacher-forced along the default cache's answers."""
    _, ref = run_generate(servelab, model, [{"prompt_token_ids": p, "max_tokens": 32, "temperature": 0,
                                             "ignore_eos": True} for p in prompts])
    steps, want = forced_steps(prompts, ref)
    res, outs = run_generate(servelab, model, steps, ("--kv-cache-dtype", kv))
    if res.returncode or len(outs) != len(want):
        return 0, max(len(want), 1)
    return sum(o["token_ids"][0] == t for o, t in zip(outs, want)), len(want)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--small", required=True, help="models/small (bf16, random weights)")
    ap.add_argument("--smollm2", required=True, help="the demo model (SmolLM2-135M-Instruct)")
    ap.add_argument("--golden", required=True, help="tests/golden/smollm2_llamacpp_f32.json (its chat prompts)")
    args = ap.parse_args()
    results = []

    def check(name, cond, detail=""):
        results.append(bool(cond))
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + detail}", flush=True)

    # Capacity in the same memory.
    bf16, _ = kv_tokens(args.servelab, args.small)
    f32, _ = kv_tokens(args.servelab, args.small, "--dtype", "float32")
    e4m3, res = kv_tokens(args.servelab, args.small, "--kv-cache-dtype", "fp8")
    e5m2, _ = kv_tokens(args.servelab, args.small, "--kv-cache-dtype", "fp8_e5m2")
    block = 16
    check(f"KV tokens in 512 MiB: bf16 {bf16}, fp32 {f32}, fp8 {e4m3}, fp8_e5m2 {e5m2}",
          None not in (bf16, f32, e4m3, e5m2) and abs(e4m3 - 2 * bf16) <= 2 * block and
          abs(e4m3 - 4 * f32) <= 4 * block and e5m2 == e4m3, res.stderr[-400:])
    check("the startup log has vLLM's fp8 line and the cache's dtype",
          "Using fp8 data type to store kv cache." in res.stderr and "KV cache dtype float8_e4m3fn" in res.stderr,
          res.stderr[-600:])

    # serve: cache_config_info.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = subprocess.Popen([args.servelab, "serve", args.small, "--device", "cpu", "--port", str(port),
                            "--kv-cache-dtype", "fp8", "--kv-cache-memory-bytes", "256M"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        text = ""
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
                break
            except OSError:
                time.sleep(0.1)
        line = next((l for l in text.splitlines() if l.startswith("vllm:cache_config_info{")), "")
        check('vllm:cache_config_info has cache_dtype="fp8"', 'cache_dtype="fp8"' in line, line or text[-300:])
    finally:
        srv.terminate()
        srv.wait(timeout=60)

    # Accuracy.
    golden = json.load(open(args.golden))
    chats = [c["prompt_token_ids"] for c in golden["cases"]]
    vocab = json.load(open(os.path.join(args.small, "config.json")))["vocab_size"]
    rnd = [[(17 * i + 5 * j) % (vocab - 3) + 3 for j in range(24)] for i in range(8)]
    for name, model, prompts, floor in (("SmolLM2", args.smollm2, chats, 0.90), ("small", args.small, rnd, None)):
        a4, n = agreement(args.servelab, model, prompts, "fp8")
        a5, _ = agreement(args.servelab, model, prompts, "fp8_e5m2")
        print(f"     {name}: fp8_e4m3 {a4}/{n} = {100 * a4 / n:.1f}%, fp8_e5m2 {a5}/{n} = {100 * a5 / n:.1f}% "
              f"of teacher-forced steps agree with the bf16 cache")
        if floor is not None:
            check(f"{name}: fp8 (e4m3) agrees at {100 * a4 / n:.1f}% (>= {100 * floor:.0f}%)", a4 >= floor * n)
        check(f"{name}: e4m3 agrees more than e5m2 ({a4} > {a5} of {n})", a4 > a5)

    # Bad values.
    res = subprocess.run([args.servelab, "generate", args.small, "--prompt", "x", "--kv-cache-dtype", "int8"],
                         capture_output=True, text=True)
    check("--kv-cache-dtype int8 exits 2 with argparse's line",
          res.returncode == 2 and "argument --kv-cache-dtype: invalid choice: 'int8'" in res.stderr, res.stderr[-300:])
    res = subprocess.run([args.servelab, "generate", args.small, "--prompt", "x", "--device", "cuda",
                          "--dtype", "float32", "--kv-cache-dtype", "fp8"], capture_output=True, text=True)
    check("--device cuda --dtype float32 --kv-cache-dtype fp8 exits 1 with one line",
          res.returncode == 1 and "keeps an fp8 KV cache with bfloat16 or float16 activations only" in res.stderr,
          res.stderr[-300:])

    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
