#!/usr/bin/env python3
"""`servelab bench compare BASE.json NEW.json [--gate ...]`: gates and exit codes.

On small result files written here: a + gate fails only past the allowed increase, a -
gate only past the allowed decrease, at the exact bound it passes; short names
(ttft_p99, p99_itl, throughput) reach their JSON keys; every shared numeric key is
printed with its change; exit 0 when all gates hold, 1 when one fails or a file is bad
or lacks the gated key (one "servelab: error:" line), 2 for bad usage; a file written
with --append-result (one JSON per line) compares its last result.
Prints one line per check and "N passed, N failed".
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

results = []


def check(name, cond, detail=""):
    results.append(bool(cond))
    print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + str(detail)[:800]}", flush=True)


BASE = {"date": "20250101-000000", "backend": "openai", "model_id": "m", "num_prompts": 100, "request_rate": "inf",
        "duration": 10.0, "completed": 100, "failed": 0, "output_throughput": 200.0, "request_throughput": 10.0,
        "total_token_throughput": 1200.0, "mean_ttft_ms": 50.0, "median_ttft_ms": 45.0, "p99_ttft_ms": 120.0,
        "mean_itl_ms": 10.0, "p99_itl_ms": 30.0, "mean_tpot_ms": 9.0, "max_concurrent_requests": 64}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()

    def write(name, obj, extra=None):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            if extra is not None:
                f.write(json.dumps(extra) + "\n")
            f.write(json.dumps(obj) if not isinstance(obj, str) else obj)
        return path

    def compare(*a):
        p = subprocess.run([args.servelab, "bench", "compare", *a], capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout, p.stderr

    base = write("base.json", BASE)
    new = dict(BASE, p99_ttft_ms=132.0, output_throughput=190.0, p99_itl_ms=33.1, mean_ttft_ms=40.0)
    newp = write("new.json", new)

    rc, out, err = compare(base, newp, "--gate", "ttft_p99=+10%", "--gate", "output_throughput=-5%")
    check("a +10% gate at exactly +10% and a -5% gate at exactly -5% pass (exit 0)", rc == 0 and
          "gate ttft_p99=+10% (p99_ttft_ms): 120 -> 132 (+10.00%): pass" in out and
          "gate output_throughput=-5% (output_throughput): 200 -> 190 (-5.00%): pass" in out, (rc, out, err))
    rows = {l.split()[0]: l.split()[1:] for l in out.splitlines() if l and not l.startswith(("gate", "base:", "new:"))}
    check("every shared numeric key is listed with base, new and change", rows.get("p99_ttft_ms") == ["120", "132", "+10.00%"]
          and rows.get("mean_ttft_ms") == ["50", "40", "-20.00%"] and rows.get("duration") == ["10", "10", "+0.00%"]
          and "date" not in rows and "request_rate" not in rows, rows)

    rc, out, _ = compare(base, newp, "--gate", "ttft_p99=+9%")
    check("+9% on a +10% increase fails (exit 1)", rc == 1 and "(+10.00%): FAIL" in out and "1 of 1 gates failed" in out,
          (rc, out))
    rc, out, _ = compare(base, newp, "--gate", "throughput=-4.9%")
    check("-4.9% on a -5% decrease fails (short name throughput)", rc == 1 and "(output_throughput)" in out, (rc, out))
    rc, out, _ = compare(base, newp, "--gate", "p99_itl=+10%", "mean_ttft_ms=+0%")
    check("STAT_METRIC form, several values after one --gate; a decrease never fails a + gate",
          rc == 1 and "gate p99_itl=+10% (p99_itl_ms): 30 -> 33.10 (+10.33%): FAIL" in out and
          "gate mean_ttft_ms=+0% (mean_ttft_ms): 50 -> 40 (-20.00%): pass" in out, (rc, out))
    rc, out, _ = compare(base, newp, "--gate=ttft_mean=-0%")
    check("a - gate fails on any decrease at -0% (--gate=... form)", rc == 1 and "FAIL" in out, (rc, out))
    rc, out, _ = compare(base, newp)
    check("no gates: exit 0", rc == 0 and "p99_ttft_ms" in out, rc)

    for gate, why in (("ttft_p99=10%", "sign"), ("ttft_p99", "NAME="), ("ttft_p99=+10", "percentage")):
        rc, out, err = compare(base, newp, "--gate", gate)
        check(f"bad gate {gate!r} -> exit 2, one error line", rc == 2 and err.strip().splitlines()[-1].startswith(
            "servelab: error: argument --gate") and not out, (rc, err))
    rc, _, err = compare(base)
    check("one file -> exit 2", rc == 2 and "expected two result files" in err, err)
    rc, _, err = compare(base, newp, "--frob")
    check("unknown flag -> exit 2", rc == 2 and "unrecognized arguments: --frob" in err, err)

    rc, _, err = compare(base, newp, "--gate", "e2el_p99=+5%")
    check("a gated key missing from the files -> exit 1 naming it", rc == 1 and
          err.strip() == f"servelab: error: --gate e2el_p99: {base} has no number under \"p99_e2el_ms\"", err)
    bad = write("bad.json", '{"mean_ttft_ms": 1,')
    rc, _, err = compare(base, bad)
    check("invalid JSON -> exit 1, one line", rc == 1 and err.strip().startswith(f"servelab: error: {bad}: not a JSON")
          and len(err.strip().splitlines()) == 1, err)
    rc, _, err = compare(base, os.path.join(tmp, "missing.json"))
    check("missing file -> exit 1", rc == 1 and err.startswith("servelab: error:"), err)
    arr = write("array.json", "[1, 2]")
    rc, _, err = compare(arr, base)
    check("not an object -> exit 1", rc == 1 and "expected an object" in err, err)

    appended = write("appended.json", dict(BASE, p99_ttft_ms=500.0), extra=dict(BASE))
    rc, out, _ = compare(base, appended, "--gate", "ttft_p99=+10%")
    check("--append-result file: the last result is compared", rc == 1 and "120 -> 500" in out, (rc, out))

    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
