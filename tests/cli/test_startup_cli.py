#!/usr/bin/env python3
"""Startup checks of the servelab command line that come before the model loads.

Each mistake must be refused quickly with one precise `servelab: error: ...`
line and exit 1 (or, for --help, print usage and exit 0): a busy --port, an
unreadable --prompts-file, a MODEL_DIR that is not a checkpoint. Also checks
that the chosen device is logged at INFO, that usage lists every command, and
that serve, generate and eval --help describe every flag with its default.
Prints one line per check and "N passed, N failed".
"""
import argparse
import socket
import subprocess
import sys
import time

FAST_S = 5.0  # well under the time any model load takes on these machines


def run(cmd, timeout=120):
    t0 = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return res, time.monotonic() - t0


def error_lines(stderr):
    return [l for l in stderr.splitlines() if l.startswith("servelab: error:")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    sl, model = args.servelab, args.model
    results = []

    def check(name, cond, detail=""):
        results.append(bool(cond))
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + detail}")

    # A busy port: refused before the banner and the model load.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        res, took = run([sl, "serve", model, "--device", "cpu", "--host", "127.0.0.1", "--port", str(port)],
                        timeout=60)
    errs = error_lines(res.stderr)
    check("serve on a busy port exits 1 fast, before the model loads",
          res.returncode == 1 and took < FAST_S and "Loading weights" not in res.stdout + res.stderr,
          f"rc={res.returncode} took={took:.1f}s {res.stderr[-400:]}")
    check("serve on a busy port says so in one line",
          len(errs) == 1 and f"127.0.0.1:{port}" in errs[0] and "address already in use" in errs[0],
          res.stderr[-400:])

    # The device and why it was chosen, at INFO in vLLM's log format.
    res, _ = run([sl, "generate", model, "--prompt", "Hi", "--max-tokens", "2"])
    dev = [l for l in res.stderr.splitlines() if "Using device" in l]
    check("generate --device auto logs the device and why at INFO",
          res.returncode == 0 and len(dev) == 1 and dev[0].startswith("INFO ") and
          ("Using device cuda" in dev[0] or "Using device cpu (--device auto: " in dev[0]), res.stderr[-400:])
    res, _ = run([sl, "generate", model, "--prompt", "Hi", "--max-tokens", "2", "--device", "cpu"])
    check("generate --device cpu logs it at INFO",
          res.returncode == 0 and any(l.startswith("INFO ") and "Using device cpu (--device cpu)" in l
                                      for l in res.stderr.splitlines()), res.stderr[-400:])

    # A MODEL_DIR that is not a checkpoint: one line first, saying what is expected and how to make one.
    for cmd in (["generate", "/nonexistent", "--prompt", "Hi"], ["serve", "/nonexistent", "--port", "0"]):
        res, took = run([sl, *cmd], timeout=60)
        lines = (res.stdout + res.stderr).strip().splitlines()
        check(f"{cmd[0]} /nonexistent: one line naming a checkpoint and tools/make_model.py",
              res.returncode == 1 and len(lines) == 1 and lines[0].startswith("servelab: error: /nonexistent") and
              "Hugging Face checkpoint directory" in lines[0] and "config.json" in lines[0] and
              "python3 tools/make_model.py --preset small --out models/small" in lines[0], "\n".join(lines)[-400:])

    # --tokenizer naming no tokenizer: exit 1, one error line naming what it looked for.
    res, took = run([sl, "serve", model, "--port", "0", "--tokenizer", "/nonexistent"], timeout=60)
    errs = error_lines(res.stderr)
    check("serve --tokenizer /nonexistent: exit 1 with one line naming the tokenizer files",
          res.returncode == 1 and len(errs) == 1 and errs[0].startswith("servelab: error: /nonexistent/") and
          "tokenizer" in errs[0], res.stderr[-400:])

    # --help for every bench form: usage on stdout, exit 0.
    for sub in ([], ["decode"], ["throughput"], ["scheduler"], ["serve"], ["compare"]):
        res, _ = run([sl, "bench", *sub, "--help"], timeout=30)
        check(f"bench {' '.join(sub + ['--help'])} prints usage and exits 0",
              res.returncode == 0 and res.stdout.startswith("usage: servelab bench"), res.stderr[-300:])
    # Top-level usage and the unknown-command message list every command.
    commands = ("serve", "generate", "bench", "render", "eval", "diagnose", "scenario")
    res, _ = run([sl, "--help"], timeout=30)
    check("servelab --help lists every command", res.returncode == 0 and
          all(f"  {c} " in res.stdout for c in commands) and "{serve,generate,bench,render,eval,diagnose,scenario}" in res.stdout,
          res.stdout[-300:])
    res, _ = run([sl, "frobnicate"], timeout=30)
    errs = error_lines(res.stderr)
    check("an unknown command lists every command", res.returncode == 2 and len(errs) == 1 and
          all(f"'{c}'" in errs[0] for c in commands), res.stderr[-300:])

    # diagnose: usage mistakes exit 2 with one line; a server or file it cannot read, 1.
    for args, want in ((["diagnose"], "one of the arguments --url --prometheus is required"),
                       (["diagnose", "--url", "http://127.0.0.1:9", "--window", "soon"], "argument --window"),
                       (["diagnose", "--url", "http://127.0.0.1:9", "--window", "1s", "--interval", "2s"],
                        "argument --interval"),
                       (["diagnose", "--prometheus", "http://127.0.0.1:9", "--golden", "g.json"], "--golden needs --url")):
        res, _ = run([sl, *args], timeout=30)
        errs = error_lines(res.stderr)
        check(f"diagnose {' '.join(args[1:])}: exit 2, one line naming {want!r}",
              res.returncode == 2 and len(errs) == 1 and want in errs[0], res.stderr[-300:])
    res, _ = run([sl, "diagnose", "--url", "http://127.0.0.1:9", "--window", "0.2s", "--interval", "0.1s"], timeout=30)
    check("diagnose of a server that does not answer: exit 1, one line naming the URL",
          res.returncode == 1 and len(error_lines(res.stderr)) == 1 and res.stderr.count("\n") == 1
          and "http://127.0.0.1:9/metrics" in res.stderr,
          res.stderr[-300:])
    res, _ = run([sl, "diagnose", "--url", "http://127.0.0.1:9", "--baseline", "/nonexistent/base.json"], timeout=30)
    check("diagnose with an unreadable baseline: exit 1 naming the file before any scrape",
          res.returncode == 1 and len(error_lines(res.stderr)) == 1 and res.stderr.count("\n") == 1
          and "/nonexistent/base.json" in res.stderr,
          res.stderr[-300:])

    # A prompts file that cannot be opened: refused before the model loads, naming the file.
    res, took = run([sl, "generate", model, "--prompts-file", "/nonexistent/prompts.jsonl"], timeout=60)
    lines = (res.stdout + res.stderr).strip().splitlines()
    check("generate --prompts-file /nonexistent/prompts.jsonl: one line before the model loads",
          res.returncode == 1 and took < FAST_S and len(lines) == 1 and
          lines[0].startswith("servelab: error: --prompts-file /nonexistent/prompts.jsonl: cannot open"),
          "\n".join(lines)[-400:])

    # serve, generate and eval --help describe every flag their usage lists: each flag starts
    # a line of the descriptions below the usage (the usage's own lines do not count).
    import re
    for cmd in ("serve", "generate", "eval"):
        res, _ = run([sl, cmd, "--help"], timeout=30)
        usage, _, described = res.stdout.partition("\n\n")
        flags = sorted(set(re.findall(r"--(?:\[no-\])?[a-z][a-z0-9-]*", usage)))
        starts = {m.group(1) for m in re.finditer(r"^  (--(?:\[no-\])?[a-z][a-z0-9-]*)", described, re.M)}
        missing = [f for f in flags if f not in starts]
        check(f"{cmd} --help describes each of its {len(flags)} flags", res.returncode == 0 and len(flags) > 20
              and not missing, f"not described: {missing}")

    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
