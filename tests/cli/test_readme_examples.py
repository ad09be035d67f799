#!/usr/bin/env python3
"""The README's `generate --prompts-file`, `render --messages @FILE` and `eval perplexity models/tiny`
commands, run verbatim.

Takes each such command from README.md's code blocks, checks that every file
it names exists in the repository, and runs it from the repository root with
build/servelab replaced by --servelab (models/tiny is what the README uses).
Prints one line per command and "N passed, N failed".
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys


def readme_commands(readme):
    cmds = []
    for line in open(readme, encoding="utf-8"):
        line = line.split("  #")[0].strip()
        if not line.startswith("build/servelab "):
            continue
        if (("generate" in line and "--prompts-file" in line) or ("render" in line and "--messages @" in line)
                or ("eval perplexity models/tiny" in line)):
            cmds.append(line)
    return cmds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--root", required=True, help="the repository root (README.md, examples/, models/tiny)")
    args = ap.parse_args()
    results = []

    def check(name, cond, detail=""):
        results.append(bool(cond))
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + detail}")

    cmds = readme_commands(os.path.join(args.root, "README.md"))
    check("README has a generate --prompts-file and a render --messages @FILE example",
          any("generate" in c for c in cmds) and any("render" in c for c in cmds), repr(cmds))
    check("README has an eval perplexity example on models/tiny", any("eval perplexity" in c for c in cmds))
    for cmd in cmds:
        argv = shlex.split(cmd)
        files = [a.lstrip("@") for i, a in enumerate(argv)
                 if a.startswith("@") or (i and argv[i - 1] in ("--prompts-file", "--chat-template", "--text"))]
        missing = [f for f in files if not os.path.isfile(os.path.join(args.root, f))]
        check(f"files exist: {' '.join(files)}", files and not missing, f"missing {missing}")
        res = subprocess.run([args.servelab] + argv[1:], cwd=args.root, capture_output=True, text=True,
                             timeout=300)
        ok = res.returncode == 0 and res.stdout.strip()
        if ok and "--json" in argv:
            ok = all(isinstance(json.loads(l), dict) for l in res.stdout.splitlines() if l.strip())
        check(f"runs: {cmd}", ok, f"rc={res.returncode} {res.stderr[-300:]}")

    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
