#!/usr/bin/env python3
"""`servelab generate -tp N`: tensor parallelism on the CPU through the real binary.

- float32: -tp 2 and -tp 4 give -tp 1's greedy tokens over the golden prompts, on
  models/tiny (GQA: 2 KV heads, so 4 ranks replicate them; the tokens must also be
  transformers' recorded ones) and on models/small;
- bfloat16 (the default path): teacher-forced along -tp 1's greedy answers, -tp N's top-1 is
  -tp 1's at >= 99% of steps on models/tiny (-tp 2, 4) and the trained SmolLM2 (-tp 3); on
  models/small, whose random weights amplify any rounding, TP must cost no more agreement
  than bf16 itself (bf16 -tp 1 against float32, in the same run);
- `-tp` is `--tensor-parallel-size`; a size that does not divide the heads exits 1 with
  vLLM's line.
Prints one line per check and "N passed, N failed".
"""
import argparse
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))
from teacher_forced import run_generate, forced_steps  # noqa: E402


def generate(servelab, model, lines, *flags):
    return run_generate(servelab, model, lines, flags)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--tiny", required=True)
    ap.add_argument("--small", required=True)
    ap.add_argument("--golden", required=True)
    ap.add_argument("--smollm2", help="the demo model (SmolLM2-135M-Instruct), trained weights")
    args = ap.parse_args()
    results = []

    def check(name, cond, detail=""):
        results.append(cond)
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + detail}", flush=True)

    golden = json.load(open(args.golden))
    cases = golden["cases"]

    # float32 on tiny: the golden prompts' token ids, greedy, against transformers' tokens too.
    lines = [{"prompt_token_ids": c["prompt_token_ids"], "max_tokens": golden["max_tokens"], "temperature": 0,
              "ignore_eos": True} for c in cases]
    want = [c["token_ids"] for c in cases]
    for tp in (1, 2, 4):
        res, outs = generate(args.servelab, args.tiny, lines, "--dtype", "float32", "-tp", str(tp))
        got = [o["token_ids"] for o in outs]
        same = sum(g == w for g, w in zip(got, want))
        check(f"tiny float32 -tp {tp}: transformers' greedy tokens for {same} of {len(want)} prompts",
              res.returncode == 0 and same == len(want), res.stderr[-800:])

    # float32 on small: the golden prompts' text through small's tokenizer.
    lines = [{"prompt": c["prompt"], "max_tokens": 32, "temperature": 0, "ignore_eos": True} for c in cases]
    base = None
    for tp in (1, 2, 4):
        res, outs = generate(args.servelab, args.small, lines, "--dtype", "float32", "-tp", str(tp))
        got = [o["token_ids"] for o in outs]
        if tp == 1:
            base = got
            check("small float32 -tp 1 answers every prompt", res.returncode == 0 and len(got) == len(lines),
                  res.stderr[-800:])
            continue
        same = sum(g == b for g, b in zip(got, base))
        check(f"small float32 -tp {tp}: -tp 1's greedy tokens for {same} of {len(base)} prompts",
              res.returncode == 0 and same == len(base), res.stderr[-800:])

    # bfloat16, the default path: teacher-forced along -tp 1's greedy answers.
    def teacher_forced(model, vocab, n_prompts, n_tokens, ref_flags, flags, prompt_len=16):
        rng = random.Random(0)
        prompts = [[rng.randrange(3, vocab) for _ in range(prompt_len)] for _ in range(n_prompts)]
        res, ref = generate(args.servelab, model, [{"prompt_token_ids": p, "max_tokens": n_tokens, "temperature": 0,
                                                    "ignore_eos": True} for p in prompts], *ref_flags)
        steps, want = forced_steps(prompts, ref)
        res, outs = generate(args.servelab, model, steps, *flags)
        if res.returncode != 0 or len(outs) != len(want):
            return 0, max(1, len(want)), res.stderr[-800:]
        return sum(o["token_ids"][0] == t for o, t in zip(outs, want)), len(want), ""

    trained = [(args.tiny, 1024, tp) for tp in (2, 4)]
    if args.smollm2:
        trained.append((args.smollm2, 49152, 3)) # 9 query heads, 3 KV heads: 3 ranks
    for model, vocab, tp in trained:
        agree, n, err = teacher_forced(model, vocab, 16 if model == args.tiny else 8, 32, (), ("-tp", str(tp)))
        check(f"{os.path.basename(model)} bf16 -tp {tp}: top-1 equals -tp 1's at {agree} of {n} teacher-forced "
              f"steps ({100 * agree / n:.1f}%, >= 99%)", agree >= 0.99 * n, err)

    # models/small's random weights amplify any rounding layer after layer (docs/benchmarks.md):
    # there the ranks' reordered sums must cost no more agreement than bf16 itself does
    # (tools/bf16-agreement's steps: 16 prompts of 32 tokens, 64 answer tokens each).
    base, n0, err0 = teacher_forced(args.small, 8192, 16, 64, ("--dtype", "float32"), (), 32)
    for tp in (2, 4):
        agree, n, err = teacher_forced(args.small, 8192, 16, 64, (), ("-tp", str(tp)), 32)
        check(f"small bf16 -tp {tp}: top-1 equals -tp 1's at {agree} of {n} teacher-forced steps, bf16 -tp 1 "
              f"equals float32's at {base} of {n0}", n == n0 and agree >= base and not err0, err or err0)

    # A size that does not divide the heads: one line, exit 1.
    res, _ = generate(args.servelab, args.tiny, [{"prompt": "x", "max_tokens": 1}], "-tp", "3")
    line = "Total number of attention heads (4) must be divisible by tensor parallel size (3)."
    check("-tp 3 on 4 heads exits 1 with vLLM's line", res.returncode == 1 and line in res.stderr,
          f"exit {res.returncode}: {res.stderr[-400:]}")

    # `bench decode -tp 1,2` on every core: the rate is timed by the engine, not by a reader that
    # may run only after it (which once reported -tp 2 at thousands of times -tp 1's rate).
    res = subprocess.run([args.servelab, "bench", "decode", args.tiny, "-tp", "1,2", "--threads", "2",
                          "--output-len", "64"], capture_output=True, text=True, timeout=300)
    rows = [l.split() for l in res.stdout.splitlines() if l[:1].isdigit()]
    rate = {int(r[0]): float(r[2]) for r in rows}
    ok = res.returncode == 0 and set(rate) == {1, 2} and rate[1] > 0 and 0.05 < rate[2] / rate[1] < 5
    check(f"bench decode -tp 1,2: {rate} tok/s, -tp 2 within 0.05-5x of -tp 1", ok, res.stderr[-300:])

    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
