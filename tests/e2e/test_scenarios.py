#!/usr/bin/env python3
"""`servelab scenario` (docs/lab.md, "Scenarios"): every scenario in lab/scenarios, run for real
with its remedy (`run --all --remedy --json`, but for the six that e2e.scenario_prometheus runs
with --prometheus and the same checks, left out with --skip): the diagnoser names each incident's expected cause
against the scenario's own healthy baseline, the symptom measure moves the way the scenario says,
the remedy removes the cause and moves the measure back, and the healthy scenario raises nothing.
Then `list`, `show`, and the refusals: an unknown scenario, a bad file (one line naming the file
and the field), bad usage. Prints one line per check and "N passed, N failed".
"""
import argparse
import copy
import json
import os
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_scenario_prometheus import RULES  # noqa: E402

# Run by e2e.scenario_prometheus (with --prometheus), which checks them as below.
PROMETHEUS_SCENARIOS = tuple(RULES)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--root", required=True, help="the repository root (lab/scenarios, models/)")
    args = ap.parse_args()
    results = []

    def check(name, cond, detail=""):
        results.append(bool(cond))
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + str(detail)}", flush=True)

    def run(*a, timeout=120):
        return subprocess.run([args.servelab, "scenario", *a], cwd=args.root, capture_output=True, text=True,
                              timeout=timeout)

    files = sorted(f[:-5] for f in os.listdir(os.path.join(args.root, "lab", "scenarios")) if f.endswith(".json"))
    p = run("list")
    listed = [line.split()[0] for line in p.stdout.splitlines()]
    check(f"list: the {len(files)} scenario files", p.returncode == 0 and listed == files, p.stdout + p.stderr)
    p = run("show", "queueing")
    check("show queueing: the commands, the symptom, the expected cause and the remedy",
          p.returncode == 0 and "servelab serve models/tiny" in p.stdout and "--max-num-seqs 2" in p.stdout and
          "expected: servelab diagnose names queueing" in p.stdout and "remedy:" in p.stdout, p.stdout + p.stderr)
    p = run("show", "speculation_wasted")
    line = next((ln for ln in p.stdout.splitlines() if ln.lstrip().startswith("incident")), "")
    words = shlex.split(line.split(None, 1)[1]) if line else []
    spec = words[words.index("--speculative-config") + 1] if "--speculative-config" in words else "{}"
    check("show: a shown command pastes into a shell (the JSON flag quoted)",
          words[:3] == ["servelab", "serve", "models/tiny"] and json.loads(spec).get("method") == "ngram", line)
    p = run("show", "no_such_scenario")
    check("an unknown scenario exits 2 with one line", p.returncode == 2 and "no_such_scenario" in p.stderr and
          p.stderr.count("\n") == 1, p.stderr)
    p = run("run")
    check("run without names or --all exits 2", p.returncode == 2 and "run takes scenario names or --all" in p.stderr,
          p.stderr)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "broken.json"), "w") as f:
            json.dump({"title": "t", "seed": "000", "section": "s", "quote": "q", "model": "models/tiny",
                       "baseline": {"load": ["--num-prompts", "1"]}, "incident": {}, "expect": "slow"}, f)
        p = run("list", "--dir", d)
        check("a bad scenario file exits 2 naming the file and the field",
              p.returncode == 2 and "broken.json" in p.stderr and '"expect": "slow"' in p.stderr, p.stderr)
        good = json.load(open(os.path.join(args.root, "lab", "scenarios", "gateway_queue.json")))
        two_directives = copy.deepcopy(good)
        two_directives["baseline"]["proxy"] = ["limit_req zone=x; return 200"]
        no_proxy = copy.deepcopy(good)
        no_proxy["replicas"] = 2
        for phase in ("baseline", "incident", "remedy"):
            no_proxy[phase].pop("proxy", None)
        bad_gate = copy.deepcopy(good)
        bad_gate["gates"] = ["ttft_median=+50%", "speed=+5"]
        for bad, field in ((two_directives, 'baseline: "proxy"[0]'), (no_proxy, '"replicas"'),
                           (bad_gate, '"gates"[1]')):
            with open(os.path.join(d, "broken.json"), "w") as f:
                json.dump(bad, f)
            p = run("list", "--dir", d)
            check(f"a bad setting exits 2 with one line naming {field}",
                  p.returncode == 2 and p.stderr.count("\n") == 1 and field in p.stderr, p.stderr)
    p = run("show", "unhealthy_replica")
    check("show: the replicas and the nginx directives of each setup",
          p.returncode == 0 and "replicas: 2 servers behind the proxy" in p.stdout and
          "proxy: nginx in front: least_conn;" in p.stdout, p.stdout + p.stderr)

    p = run("run", "--all", "--skip", "queueing,no_such_scenario")
    check("run --all --skip with an unknown name exits 2 with one line",
          p.returncode == 2 and "--skip: no scenario no_such_scenario" in p.stderr and p.stderr.count("\n") == 1,
          p.stderr)
    p = run("run", "queueing", "--skip", "healthy")
    check("--skip without --all exits 2", p.returncode == 2 and "--skip goes with run --all" in p.stderr, p.stderr)

    p = run("run", "--all", "--skip", ",".join(PROMETHEUS_SCENARIOS), "--remedy", "--json", timeout=1800)
    try:
        report = json.loads(p.stdout)
    except ValueError:
        report = []
    check(f"run --all --skip (the six e2e.scenario_prometheus runs) --remedy: a JSON result per other scenario, "
          f"in file order (exit {p.returncode})",
          [r["name"] for r in report] == [f for f in files if f not in PROMETHEUS_SCENARIOS],
          p.stdout[-500:] + p.stderr[-2000:])
    for r in report:
        inc = r["incident"]
        line = (f"{r['name']}: expected {r['expected']}, found {r['found']} (fired: {inc.get('ranked') or '-'})")
        if r.get("measure"):
            line += (f"; {r['measure']} {r['baseline'].get(r['measure'])} -> {inc.get(r['measure'])}")
        if "remedy" in r:
            line += f" -> remedy {r['remedy'].get('cause')} {r['remedy'].get(r['measure'])}"
        check(line, r["matched"] and r["symptom_moved"] and (r["expected"] == "healthy" or r.get("remedy_helped")), r)
        if r["name"] == "unhealthy_replica" and r["incident"].get("ok") and r.get("remedy", {}).get("ok"):
            # the first replica is the slow one: round-robin gives it every other request, so the
            # fast one waits for it; least_conn sends it only what it can take
            a, b = r["incident"]["served"]
            check(f"unhealthy_replica: round-robin served both replicas alike ({a:.0f} / {b:.0f})",
                  abs(a - b) <= 0.1 * (a + b) + 2, r["incident"])
            a, b = r["remedy"]["served"]
            check(f"unhealthy_replica: least_conn routed around the slow replica ({a:.0f} / {b:.0f})",
                  4 * a < b, r["remedy"])
        if "gates_broken" in r:
            broke = r["gates_broken"]
            check(f"{r['name']}: the incident broke a release gate ({broke.get('incident')}), the remedy none",
                  broke.get("incident") and broke.get("remedy") == [], broke)
        if r["expected"] == "healthy":
            check("healthy: the baseline and the incident raise nothing",
                  r["baseline"].get("cause") == "healthy" and inc.get("cause") == "healthy" and not inc.get("ranked"),
                  r)
    check("exit status 0 when every scenario matched and every remedy helped",
          p.returncode == (0 if all(results) else 1), p.returncode)

    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
