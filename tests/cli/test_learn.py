#!/usr/bin/env python3
"""docs/learn.md, the guided tour, run: its commands and its pointers into the code cannot rot.

- every ```sh block runs under `bash -euo pipefail` in a scratch folder that holds links to the
  binary (build/servelab), models/, tools/ and examples/ of the repository; port 8000 becomes a
  free port; the block's process group is killed afterwards (a server it left behind); each
  `# expect: REGEX` line of the block must match its output (stdout and stderr together,
  re.MULTILINE);
- a ```sh gpu block runs only where `nvidia-smi -L` lists a GPU; elsewhere it is checked by
  `bash -n` and reported as not run, counted neither passed nor failed;
- every repository path the tour names in backquotes exists, and each function named after it,
  "`path` (`function`, ...)", is defined in that file.
Prints one line per check and "N passed, N failed".
"""
import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile

PATH_RE = re.compile(r"`((?:src|kernels|tools|tests|include|scripts|docs)/[\w./-]+)`(?: \(((?:`\w+`(?:, )?)+)\))?")


def blocks(text):
    """[(info string, code)] of the fenced blocks."""
    return re.findall(r"^```([^\n]*)\n(.*?)^```", text, re.M | re.S)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def has_gpu():
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout.startswith("GPU")
    except (OSError, subprocess.TimeoutExpired):
        return False


def defines(path, name):
    """Whether the C/C++/CUDA file defines function `name` (a definition line, not a declaration)."""
    pat = re.compile(r'^(?:extern "C" )?[A-Za-z_][\w \*]*?\b' + re.escape(name) + r"\s*\(.*$", re.M)
    return any("{" in m.group(0) or not m.group(0).rstrip().endswith(";")
               for m in pat.finditer(open(path, encoding="utf-8").read()))


def run_block(code, root, servelab, timeout=240):
    """(exit status, output) of one block run in a scratch folder."""
    with tempfile.TemporaryDirectory(prefix="servelab-learn-") as tmp:
        os.makedirs(os.path.join(tmp, "build"))
        os.symlink(os.path.abspath(servelab), os.path.join(tmp, "build", "servelab"))
        for d in ("models", "tools", "examples"):
            os.symlink(os.path.join(root, d), os.path.join(tmp, d))
        code = re.sub(r"\b8000\b", str(free_port()), code)
        p = subprocess.Popen(["bash", "-euo", "pipefail", "-c", code], cwd=tmp, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            out, rc = "(timed out)", 124
        else:
            rc = p.returncode
        try:
            os.killpg(p.pid, signal.SIGKILL)   # whatever the block left running
        except ProcessLookupError:
            pass
        if rc == 124:
            p.wait()
        return rc, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--root", required=True, help="the repository root")
    args = ap.parse_args()
    args.root = os.path.abspath(args.root)
    text = open(os.path.join(args.root, "docs", "learn.md"), encoding="utf-8").read()
    results = []

    def check(name, cond, detail=""):
        results.append(bool(cond))
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + detail}", flush=True)

    # The pointers into the code.
    named = PATH_RE.findall(text)
    check("the tour names files and functions", len(named) >= 20, f"{len(named)} found")
    for path, funcs in named:
        full = os.path.join(args.root, path)
        if not os.path.exists(full):
            check(f"{path} exists", False, "missing")
            continue
        for f in re.findall(r"`(\w+)`", funcs):
            check(f"{path} defines {f}", defines(full, f), "no definition found")

    # The commands.
    gpu = has_gpu()
    chapter = ""
    runs = 0
    for info, code in blocks(text):
        info = info.split()
        if not info or info[0] != "sh":
            continue
        heading = [h for h in re.findall(r"^## (.+)$", text[:text.index(code)], re.M)]
        chapter = heading[-1] if heading else "?"
        if "gpu" in info[1:] and not gpu:
            syntax = subprocess.run(["bash", "-n", "-c", code], capture_output=True, text=True)
            check(f"[{chapter}] the GPU block parses (not run: no GPU here)", syntax.returncode == 0, syntax.stderr)
            results.pop()   # counted neither passed nor failed
            print(f"     (the GPU block of '{chapter}' was not run)")
            continue
        runs += 1
        rc, out = run_block(code, args.root, args.servelab)
        check(f"[{chapter}] runs", rc == 0, f"exit {rc}: {out[-1500:]}")
        for want in re.findall(r"^# expect: (.+)$", code, re.M):
            check(f"[{chapter}] output matches {want!r}", re.search(want, out, re.M), out[-1500:])
    check("the tour has commands to run", runs >= 9, f"{runs} blocks ran")

    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
