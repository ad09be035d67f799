#!/usr/bin/env python3
"""Check servelab's greedy output against golden data recorded with transformers.

Runs `servelab generate --json --temperature 0 --ignore-eos` on every golden
prompt in the golden's dtype (float32: the checkpoint's bf16 weights widened,
a float32 KV cache), once with the default prefill budget and once with a
7-token budget and 4 sequences per step (so prompts are prefilled in chunks
that straddle KV blocks, mixed with other prompts' decodes), and checks:
prompt token ids identical (our tokenizer = transformers'), generated token ids
identical, and each chosen token's logprob within --atol of transformers'.
Then, in the checkpoint's own dtype (what the CPU runs by default: packed bf16
linears, which on a CPU with AVX512_BF16 round activations to bf16, and a bf16
KV cache), teacher-forced along transformers' answers (each prefix as a prompt,
one greedy token): where the top-1 differs, each token must be in the other's
top 5 (vLLM's check_logprobs_close rule); the share of equal top-1 steps is
printed (bf16 rounding flips near-ties; a wrong kernel breaks the top-5 rule).
Prints one line per prompt and a final "N passed, N failed".
"""
import argparse
import json
import subprocess
import sys

from teacher_forced import teacher_forced


def run(servelab, model, cases, max_tokens, extra):
    cmd = [servelab, "generate", model, "--device", "cpu", "--json", "--temperature", "0", "--ignore-eos",
           "--max-tokens", str(max_tokens)] + extra
    for c in cases:
        cmd += ["--prompt", c["prompt"]]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        sys.exit(f"servelab failed ({res.returncode}):\n{res.stderr}")
    return [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--golden", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--atol", type=float, default=1e-4)
    args = ap.parse_args()
    golden = json.load(open(args.golden, encoding="utf-8"))
    cases = golden["cases"]
    passed = failed = 0
    dtype = ["--dtype", golden["dtype"]]
    runs = [("default budget", dtype),
            ("7-token budget, 4 seqs", dtype + ["--max-num-batched-tokens", "7", "--max-num-seqs", "4"])]
    for label, extra in runs:
        outs = run(args.servelab, args.model, cases, golden["max_tokens"], extra)
        if len(outs) != len(cases):
            print(f"FAIL {label}: {len(outs)} outputs for {len(cases)} prompts")
            failed += 1
            continue
        for i, (g, o) in enumerate(zip(cases, outs)):
            problems = []
            if o["prompt_token_ids"] != g["prompt_token_ids"]:
                problems.append(f"prompt ids differ: ours {o['prompt_token_ids']} "
                                f"transformers {g['prompt_token_ids']}")
            if o["token_ids"] != g["token_ids"]:
                k = next((j for j, (a, b) in enumerate(zip(o["token_ids"], g["token_ids"])) if a != b),
                         min(len(o["token_ids"]), len(g["token_ids"])))
                problems.append(f"tokens differ from step {k}: ours {o['token_ids'][k:k+4]} "
                                f"transformers {g['token_ids'][k:k+4]}")
            n = min(len(o["logprobs"]), len(g["logprobs"]))
            err = max((abs(a - b) for a, b in zip(o["logprobs"][:n], g["logprobs"][:n])), default=0.0)
            if err > args.atol:
                problems.append(f"logprob error {err:.2e} > {args.atol:.0e}")
            if problems:
                failed += 1
                print(f"FAIL {label} prompt {i}: " + "; ".join(problems))
            else:
                passed += 1
                print(f"ok   {label} prompt {i}: {len(g['prompt_token_ids'])} prompt tokens, "
                      f"{len(g['token_ids'])} tokens identical, max logprob error {err:.1e}")
    ok, name, detail = teacher_forced(
        args.servelab, args.model,
        [(c["prompt_token_ids"], c["token_ids"], [[i for i, _ in step] for step in c["top_logprobs"]])
         for c in cases],
        "transformers'")
    passed, failed = passed + ok, failed + (not ok)
    print(f"ok   checkpoint dtype, {name}" if ok else f"FAIL checkpoint dtype, {name}: {detail}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
