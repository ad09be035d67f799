#!/usr/bin/env python3
"""`servelab bench serve` against a real `servelab serve` on the tiny checkpoint.

The server runs with an API key, which the load generator takes from OPENAI_API_KEY.
Three runs, each with zero failures:
  random             completions at 40 req/s: every prompt is exactly --random-input-len
                     tokens as the server counts them (sized through /tokenize and
                     /detokenize with the real sentencepiece tokenizer), every output
                     exactly --random-output-len (ignore_eos)
  prefix_repetition  openai-chat: groups sharing a 64-token prefix
  long-tail          short prompts with 10% long ones, the long ones where the dataset put them
Then the runs' totals equal the server's own counters on /metrics (the change of
vllm:prompt_tokens_total, vllm:generation_tokens_total, vllm:request_success_total).
Prints one line per check and "N passed, N failed".
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

KEY = "bench-key"
results = []


def check(name, cond, detail=""):
    results.append(bool(cond))
    print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + str(detail)[:1200]}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def counters(base):
    """The three counters, summed over their label sets; None when /metrics is not served."""
    try:
        with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return None
    out = {"vllm:prompt_tokens_total": 0.0, "vllm:generation_tokens_total": 0.0, "vllm:request_success_total": 0.0}
    for line in text.splitlines():
        m = re.match(r"^(vllm:[a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
        if m and m.group(1) in out:
            out[m.group(1)] += float(m.group(3))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    tmp = tempfile.mkdtemp()
    log = open(os.path.join(tmp, "server.log"), "w+")
    srv = subprocess.Popen([args.servelab, "serve", args.model, "--device", "cpu", "--host", "127.0.0.1", "--port", str(port),
                            "--served-model-name", "tiny", "--api-key", KEY, "--max-model-len", "512"],
                           stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        before = counters(base)
        env = dict(os.environ, OPENAI_API_KEY=KEY)
        runs = [
            ("random", ["--num-prompts", "40", "--random-input-len", "48", "--random-output-len", "12",
                        "--request-rate", "40", "--percentile-metrics", "ttft,tpot,itl,e2el"]),
            ("prefix_repetition", ["--backend", "openai-chat", "--dataset-name", "prefix_repetition",
                                   "--num-prompts", "12", "--prefix-repetition-prefix-len", "64",
                                   "--prefix-repetition-suffix-len", "16", "--prefix-repetition-num-prefixes", "3",
                                   "--prefix-repetition-output-len", "8", "--max-concurrency", "4"]),
            ("long-tail", ["--dataset-name", "long-tail", "--num-prompts", "20", "--long-tail-input-len", "16",
                           "--long-tail-long-input-len", "300", "--long-tail-long-fraction", "0.1",
                           "--long-tail-output-len", "6", "--seed", "3"]),
        ]
        totals = {"in": 0, "out": 0, "done": 0}
        for name, flags in runs:
            out = os.path.join(tmp, f"{name}.json")
            log.flush()
            log_at = os.path.getsize(log.name)
            p = subprocess.run([args.servelab, "bench", "serve", "--base-url", base + "/", "--disable-tqdm",
                                "--save-result", "--save-detailed", "--result-filename", out, *flags],
                               capture_output=True, text=True, timeout=300, env=env)
            if name == "random":
                print(p.stdout[p.stdout.find("====="):], end="")
            d = json.load(open(out)) if p.returncode == 0 else {}
            check(f"{name}: completes with zero failures", p.returncode == 0 and d["failed"] == 0 and
                  d["completed"] == int(flags[flags.index("--num-prompts") + 1]), (p.returncode, p.stderr[-1500:],
                                                                                  d.get("errors", [])[:3]))
            if not d:
                continue
            totals["in"] += d["total_input_tokens"]
            totals["out"] += d["total_output_tokens"]
            totals["done"] += d["completed"]
            if name == "random":
                check("random: every prompt exactly 48 tokens as the server counts them",
                      d["input_lens"] == [48] * 40, d["input_lens"])
                check("random: every output exactly 12 tokens (ignore_eos)", d["output_lens"] == [12] * 40,
                      d["output_lens"])
                check("random: the model came from /v1/models behind the API key", d["model_id"] == args.model,
                      d["model_id"])
                # Sizing is one pass through the tokenizer: the probe, the special tokens, the word
                # list, then each prompt once (its text drawn from whole-word tokens, which a second
                # tokenization does not merge; docs/load-generator.md).
                with open(log.name) as f:
                    f.seek(log_at)
                    n_tok = sum('"POST /tokenize' in line for line in f)
                check("random: 40 prompts sized in one tokenizer pass (3 + 40 POST /tokenize)", n_tok == 43, n_tok)
            if name == "long-tail":
                check("long-tail: 18 prompts of 16 tokens and 2 of 300", sorted(d["input_lens"]) == [16] * 18 + [300] * 2,
                      d["input_lens"])
            if name == "prefix_repetition":
                check("prefix_repetition: chat prompts carry the template on top of 80 tokens",
                      min(d["input_lens"]) > 80 and d["total_output_tokens"] == 12 * 8, d["input_lens"])

        # The server's own counters must have moved by exactly the runs' totals. /metrics is
        # updated by the engine once per step, so give it a moment after the last stream.
        want = {"vllm:prompt_tokens_total": totals["in"], "vllm:generation_tokens_total": totals["out"],
                "vllm:request_success_total": totals["done"]}
        delta = None
        for _ in range(50):
            after = counters(base)
            if before is None or after is None:
                break
            delta = {k: after[k] - before[k] for k in want}
            if delta == want:
                break
            time.sleep(0.1)
        check("totals equal the server's /metrics counters (prompt, generation tokens; successful requests)",
              delta == want, f"/metrics not served" if before is None else (delta, want))
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
