#!/usr/bin/env python3
"""tools/compare-llamacpp without llama.cpp: its usage and argument errors, then one whole run
against stand-ins (a fake llama-bench, llama-batched-bench and servelab that print canned figures
in the real tools' formats and record the arguments they got), and, given
--servelab and --tiny, that the real bench decode prints the header the fake copies): the commands it builds, the
figures it reads back, the medians, ratios and roofline fractions it prints, and its --json.
Prints one line per check and "N passed, N failed".
"""
import argparse
import json
import os
import stat
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "compare-llamacpp")

FAKE_LLAMA_BENCH = r'''#!/usr/bin/env python3
import json, os, sys
a = sys.argv[1:]
open(os.environ["FAKE_LOG"], "a").write("llama-bench " + " ".join(a) + "\n")
if a == ["--version"]:
    print("version: 9999 (fake)"); sys.exit(0)
v = dict(zip(a[::2], a[1::2]))
gguf = os.path.basename(v["-m"])  # not the temporary directory's name, which could hold "q4"
bf16 = "bf16" in gguf
t = int(v["-t"])
if v["-n"] != "0":   # decode: 100 tok/s per thread in bf16, half in f32, twice in Q4_0
    ts = 100.0 * t * (1 if bf16 else 2 if "q4" in gguf else 0.5)
else:                # prefill
    ts = 1000.0 * t * (1 if bf16 else 0.5)
print(json.dumps([{"n_prompt": int(v["-p"]), "n_gen": int(v["-n"]), "n_depth": int(v["-d"]),
                   "n_threads": t, "avg_ts": ts}]))
'''

FAKE_BATCHED = r'''#!/usr/bin/env python3
import json, os, sys
a = sys.argv[1:]
open(os.environ["FAKE_LOG"], "a").write("llama-batched-bench " + " ".join(a) + "\n")
v = dict(zip(a[::2], a[1::2]))
pl = int(v["-npl"])
print("some log line")
print(json.dumps({"pp": int(v["-npp"]), "tg": int(v["-ntg"]), "pl": pl, "t": pl * 64 / 400.0}))
'''

FAKE_SERVELAB = r'''#!/usr/bin/env python3
import os, sys
a = sys.argv[1:]
open(os.environ["FAKE_LOG"], "a").write("servelab " + " ".join(a) + "\n")
if a[1] == "peak":   # 100 fp32 / 200 bf16 GFLOP/s per thread
    t = int(a[3])
    print("threads  fp32 FMA GFLOP/s   bf16 dot GFLOP/s")
    print("%-8d %-18.1f %-18.1f" % (t, 100.0 * t, 200.0 * t))
    sys.exit(0)
v = dict(zip(a[3::2], a[4::2]))
t = int(v["--threads"])
k = 2 if "awq" in os.path.basename(a[2]) else 1 if v["--dtype"] == "bfloat16" else 0.5
if a[1] == "decode":
    print(@DECODE_HEADER@)
    print("%-4d %-8d %-12.1f %-14.2f %-16.2f %-10.2f %-10.1f" % (1, t, 120.0 * t * k, 1.0, 20.0 * t, 0.5, 0.0))
    sys.stderr.write("model: m (97536768 parameters, %.1f MB of weights read per decode step)\n" % (200.0 / k))
else:
    n, i, o = int(v["--num-prompts"]), int(v["--input-len"]), int(v["--output-len"])
    secs = (n * i + n * o) / (500.0 * t * k)
    print("%d prompts: ..." % n)
    print("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s" % (n / secs, (n * i + n * o) / secs, n * o / secs))
    print("Total num prompt tokens:  %d\nTotal num output tokens:  %d" % (n * i, n * o))
'''

# What servelab's bench decode prints above its rows (src/cli/bench.c); checked against the real
# binary when the test is given one.
DECODE_HEADER = "%-4s %-8s %-12s %-14s %-16s %-10s %-10s" % (
    "tp", "threads", "decode tok/s", "weights GB/s", "memory read GB/s", "fraction", "all-reduce %")
FAKE_SERVELAB = FAKE_SERVELAB.replace("@DECODE_HEADER@", repr(DECODE_HEADER))

passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else f": {detail}"))
    if cond:
        passed += 1
    else:
        failed += 1


def tool(*args, env=None):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, env=env, timeout=60)


def write_exe(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", help="the real binary: its bench decode header must be the fake's")
    ap.add_argument("--tiny", help="a model for that run (models/tiny)")
    args = ap.parse_args()
    if args.servelab and args.tiny:
        real = subprocess.run([args.servelab, "bench", "decode", args.tiny, "--threads", "1", "--input-len", "4",
                               "--output-len", "8"], capture_output=True, text=True, timeout=120)
        check("the fake servelab's bench decode header is the real one's",
              real.returncode == 0 and real.stdout.splitlines()[:1] == [DECODE_HEADER], real.stdout[:300])
    r = tool("--help")
    check("--help exits 0", r.returncode == 0, r.stderr)
    check("--help names the flags", all(f in r.stdout for f in ("--llama-build", "--gguf-f32", "--gguf-bf16",
                                                                   "--model", "--servelab", "--runs", "--threads",
                                                                   "--json")), r.stdout)
    r = tool()
    check("no arguments: usage error (2)", r.returncode == 2 and "required" in r.stderr, r.stderr)

    with tempfile.TemporaryDirectory() as tmp:
        build = os.path.join(tmp, "llama", "build", "bin")
        os.makedirs(build)
        model = os.path.join(tmp, "model")
        os.makedirs(model)
        # Llama-3-8B's shapes: 2 x 32 x 218,103,808 = 13,958,643,712 FLOP per token through the linears
        open(os.path.join(model, "config.json"), "w").write(json.dumps(
            {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "head_dim": 128}))
        g32, g16 = os.path.join(tmp, "m-f32.gguf"), os.path.join(tmp, "m-bf16.gguf")
        for g in (g32, g16):
            open(g, "wb").close()
        sl = os.path.join(tmp, "servelab")
        write_exe(sl, FAKE_SERVELAB)
        base = ["--llama-build", os.path.join(tmp, "llama"), "--gguf-f32", g32, "--gguf-bf16", g16,
                "--model", model, "--servelab", sl]

        r = tool(*base, "--threads", "1,x")
        check("--threads 1,x: usage error", r.returncode == 2 and "--threads" in r.stderr, r.stderr)
        r = tool(*base, "--runs", "0")
        check("--runs 0: usage error", r.returncode == 2 and "--runs" in r.stderr, r.stderr)
        r = tool(*base, "--phases", "decode,warp")
        check("--phases with an unknown phase: usage error", r.returncode == 2 and "warp" in r.stderr, r.stderr)
        r = tool(*[x if x != g32 else g32 + ".missing" for x in base])
        check("a missing GGUF: usage error", r.returncode == 2 and "--gguf-f32" in r.stderr, r.stderr)
        r = tool(*[x if x != model else tmp for x in base])
        check("a model dir without config.json: usage error", r.returncode == 2 and "--model" in r.stderr, r.stderr)
        r = tool(*base)
        check("a llama.cpp build without llama-bench: error naming it",
              r.returncode == 2 and "no llama-bench under" in r.stderr, r.stderr)

        write_exe(os.path.join(build, "llama-bench"), FAKE_LLAMA_BENCH)
        write_exe(os.path.join(build, "llama-batched-bench"), FAKE_BATCHED)
        log = os.path.join(tmp, "log")
        env = dict(os.environ, FAKE_LOG=log)
        r = tool(*base, "--runs", "3", "--json", os.path.join(tmp, "out.json"), env=env)
        check("a whole run against stand-ins exits 0", r.returncode == 0, r.stderr + r.stdout)
        out = r.stdout
        rows = [ln for ln in out.splitlines() if ln.startswith("| ") and "---" not in ln]
        want = {  # (phase label start, dtype, threads) -> (llama.cpp, servelab, ratio)
            ("decode", "bf16", "1"): ("100.0", "120.0", "1.20"),
            ("decode", "f32", "2"): ("100.0", "120.0", "1.20"),
            # 256 / the run's (256 + 1) tokens / its total tokens/s
            ("prefill 256", "bf16", "1"): ("1000.0", str(round(500 * 256 / 257, 1)), "0.50"),
            ("prefill 256", "f32", "2"): ("1000.0", str(round(500 * 256 / 257, 1)), "0.50"),
            ("batch 8", "bf16", "1"): ("400.0", str(round(500 * 64 / 96, 1)), "0.83"),
            ("batch 32", "bf16", "2"): ("400.0", str(round(1000 * 64 / 96, 1)), "1.67"),
        }
        for (ph, dt, t), (ll, s, ratio) in want.items():
            hit = [c for c in (ln.split(" | ") for ln in rows)
                   if c[0].lstrip("| ").startswith(ph) and c[1] == dt and c[2] == t]
            check(f"table row {ph} {dt} {t} threads = {ll} | {s} | {ratio}",
                  len(hit) == 1 and hit[0][3:6] == [ll, s, ratio + " |"], hit)
        check("the table has 12 rows (4 phases, 2 threads)", len([x for x in rows if x.startswith(("| decode (", "| prefill 256", "| batch"))]) == 12, rows)
        check("the roofline table: bf16, 1 thread: 200 MB, 20 GB/s, llama.cpp 1.00, servelab 1.20",
              "| bf16 | 1 | 200.0 MB | 20.0 | 1.00 | 1.20 |" in out, out)
        check("the roofline table: f32, 2 threads: 400 MB, 40 GB/s, llama.cpp 1.00, servelab 1.20",
              "| f32 | 2 | 400.0 MB | 40.0 | 1.00 | 1.20 |" in out, out)
        check("the header names llama.cpp's version", "version: 9999 (fake)" in out, out)
        fpt = 13958643712
        sl16, sl32 = 500 * 256 / 257 * fpt / 1e9, 1000 * 0.5 * 256 / 257 * fpt / 1e9
        check("the prefill GFLOP/s table: bf16, 1 thread, against the bf16 dot peak",
              f"| bf16 | 1 | 200.0 (bf16 dot) | {1000 * fpt / 1e9:.1f} | {1000 * fpt / 1e9 / 200:.2f} | "
              f"{sl16:.1f} | {sl16 / 200:.2f} |" in out, out)
        check("the prefill GFLOP/s table: f32, 2 threads, against the fp32 FMA peak",
              f"| f32 | 2 | 200.0 (fp32 FMA) | {1000 * fpt / 1e9:.1f} | {1000 * fpt / 1e9 / 200:.2f} | "
              f"{sl32:.1f} | {sl32 / 200:.2f} |" in out, out)
        all_cmds = open(log).read().splitlines()
        peak = [c for c in all_cmds if c.startswith("servelab bench peak")]
        check("bench peak once per round and thread count", len(peak) == 6 and
              sum("--threads 2" in c for c in peak) == 3, peak)
        cmds = [c for c in all_cmds if not c.startswith("servelab bench peak")]
        check("each side ran 3 x 12 cells", sum(c.startswith("servelab ") for c in cmds) == 36 and
              sum(c.startswith("llama-") and "--version" not in c for c in cmds) == 36, cmds)
        check("interleaved: llama.cpp then servelab, cell by cell",
              all(cmds[i].startswith("llama-") and cmds[i + 1].startswith("servelab ")
                  for i in range(1, len(cmds), 2)), cmds[:6])
        check("decode: llama-bench -p 0 -n 128 -d 32 -r 1 / bench decode --input-len 32 --output-len 128",
              any("-t 1 -p 0 -n 128 -d 32 -r 1 -o json" in c for c in cmds) and
              any("bench decode" in c and "--input-len 32 --output-len 128 --dtype bfloat16" in c for c in cmds), cmds)
        check("prefill: llama-bench -p 256 -n 0 -d 0 / bench throughput --num-prompts 1 --input-len 256",
              any("-p 256 -n 0 -d 0 -r 1" in c for c in cmds) and
              any("--num-prompts 1 --input-len 256 --output-len 1 --dtype float32" in c for c in cmds), cmds)
        check("batch 32: llama-batched-bench -npp 32 -ntg 63 -npl 32, 2 threads / bench throughput 32 x 32 in, 64 out",
              any("-t 2 -tb 2 -c 3056 -npp 32 -ntg 63 -npl 32" in c for c in cmds) and
              any("--threads 2 --num-prompts 32 --input-len 32 --output-len 64 --dtype bfloat16" in c for c in cmds),
              cmds)
        # The 4-bit decode row: llama.cpp on a Q4_0 GGUF, servelab on an AWQ checkpoint; llama.cpp's
        # bytes a step from the GGUF (a real one, written by the gguf package): output.weight's
        # 1,000,000 and one 1,000,000-byte row of token_embd's 4.
        awq = os.path.join(tmp, "model-awq")
        os.makedirs(awq)
        open(os.path.join(awq, "config.json"), "w").write("{}")
        q4 = os.path.join(tmp, "m-q4_0.gguf")
        try:
            import gguf
            import numpy as np
            w = gguf.GGUFWriter(q4, "llama")
            w.add_tensor("token_embd.weight", np.zeros((4, 250000), np.float32))
            w.add_tensor("output.weight", np.zeros((250, 1000), np.float32))
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
            have_gguf = True
        except ImportError:
            open(q4, "wb").close()
            have_gguf = False
        r = tool(*base, "--gguf-q4", q4)
        check("--gguf-q4 without --awq-model: usage error", r.returncode == 2 and "--awq-model" in r.stderr, r.stderr)
        r = tool(*base, "--gguf-q4", q4, "--awq-model", tmp)
        check("--awq-model without config.json: usage error", r.returncode == 2 and "--awq-model" in r.stderr,
              r.stderr)
        open(log, "w").close()
        r = tool(*base, "--gguf-q4", q4, "--awq-model", awq, "--runs", "1", "--phases", "decode", env=env)
        out = r.stdout
        check("--gguf-q4 --awq-model: a 4-bit decode row per thread count, 200 vs 240 tok/s at 1 thread",
              r.returncode == 0 and "| 4-bit | 1 | 200.0 | 240.0 | 1.20 |" in out and
              "| 4-bit | 2 | 400.0 | 480.0 | 1.20 |" in out, out + r.stderr)
        cmds = open(log).read().splitlines()
        check("4-bit: llama-bench on the Q4_0 GGUF, bench decode on the AWQ checkpoint without --dtype",
              any(c.startswith("llama-bench -m " + q4 + " -t 1 -p 0 -n 128 -d 32") for c in cmds) and
              any(c.startswith(f"servelab bench decode {awq} --threads 1") and "--dtype" not in c for c in cmds),
              cmds)
        if have_gguf:
            check("the 4-bit roofline: each side's own bytes (llama.cpp's from its GGUF)",
                  "| 4-bit | 1 | llama.cpp 2.0 MB, servelab 100.0 MB | 20.0 | 0.02 | 1.20 |" in out, out)
        else:
            check("the 4-bit roofline without the gguf package: llama.cpp's bytes unknown",
                  "| 4-bit | 1 | llama.cpp ?, servelab 100.0 MB | 20.0 | - | 1.20 |" in out, out)

        doc = json.load(open(os.path.join(tmp, "out.json")))
        c0 = doc["cells"][0]
        check("--json FILE: every run's figures", len(doc["cells"]) == 12 and c0["phase"] == "decode" and
              c0["llama.cpp"] == [100.0] * 3 and c0["servelab"] == [120.0] * 3 and c0["read_gbs"] == [20.0] * 3, c0)
        r = tool(*base, "--runs", "1", "--threads", "1", "--phases", "decode", "--json", env=env)
        try:
            doc = json.loads(r.stdout)
            ok = r.returncode == 0 and len(doc["cells"]) == 2 and "| phase |" in r.stderr
        except ValueError:
            ok = False
        check("--json alone: JSON on stdout, the tables on stderr", ok, r.stdout + r.stderr)

    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
