#!/usr/bin/env python3
"""`servelab scenario run --prometheus` (docs/lab.md, "Scenarios"): six scenarios with their
remedies (queueing, the KV pool too small, long prompts, a hung engine, runaway generation, a
gateway that holds requests back), each phase watched by a real Prometheus (the Debian package)
evaluating the committed alert rules with windows of seconds, the incident and the remedy with
the baseline's data as their "hour earlier", and the gateway's nginx by the Debian
nginx-prometheus-exporter. Each incident fires its cause's rule (VLLMQueueing,
VLLMKVCachePressure, VLLMTTFTRegression, VLLMEngineStalled, VLLMRunawayGeneration,
VLLMUpstreamBottleneck), which its baseline did not; every alert new in the incident names a cause the diagnoser found too; the
remedy does not fire the rule; the JSON carries each phase's alerts. Then the refusal when no
prometheus binary is on PATH. These six are checked here as e2e.scenarios checks the others (it
leaves them out: --skip), the symptom's move included. Prints one line per check and "N passed, N failed".
"""
import argparse
import json
import os
import subprocess
import sys

# The scenarios run here, each with the alert its incident must fire (tests/e2e/test_scenarios.py
# leaves these out of its run --all).
RULES = {"queueing": "VLLMQueueing", "kv_pool_too_small": "VLLMKVCachePressure", "long_prompts": "VLLMTTFTRegression",
         "engine_hung": "VLLMEngineStalled", "missing_stop_token": "VLLMRunawayGeneration",
         "gateway_queue": "VLLMUpstreamBottleneck"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--root", required=True, help="the repository root (lab/scenarios, tools/prometheus)")
    args = ap.parse_args()
    results = []

    def check(name, cond, detail=""):
        results.append(bool(cond))
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + str(detail)}", flush=True)

    p = subprocess.run([args.servelab, "scenario", "run", *RULES, "--remedy", "--prometheus", "--json"],
                       cwd=args.root, capture_output=True, text=True, timeout=900)
    try:
        report = json.loads(p.stdout)
    except ValueError:
        report = []
    check(f"run {' '.join(RULES)} --remedy --prometheus: a JSON result each (exit {p.returncode})",
          [r.get("name") for r in report] == list(RULES), p.stdout[-500:] + p.stderr[-2000:])
    for r in report:
        name, rule = r["name"], RULES.get(r["name"])
        base, inc, rem = r["baseline"], r["incident"], r["remedy"]
        line = f"{name}: expected {r['expected']}, found {r['found']} (fired: {inc.get('ranked') or '-'})"
        if r.get("measure"):
            line += (f"; {r['measure']} {base.get(r['measure'])} -> {inc.get(r['measure'])} -> remedy "
                     f"{rem.get('cause')} {rem.get(r['measure'])}")
        check(f"{line}: matched, the symptom moved, the remedy helped",
              r["matched"] and r["symptom_moved"] and r["remedy_helped"], r)
        check(f"{name}: the incident fired {rule} (alerts {inc.get('alerts')}), the baseline did not "
              f"({base.get('alerts')})", r.get("alert_rule") == rule and rule in inc.get("alerts", []) and
              rule not in base.get("alerts", [rule]), r)
        check(f"{name}: the remedy did not fire {rule} ({rem.get('alerts')})", rule not in rem.get("alerts", [rule]), r)
        check(f"{name}: the alerts agree with the diagnosis", r.get("alerts_agree") is True, r)
    check("the exit status says they all agreed", p.returncode == 0, p.returncode)

    env = dict(os.environ, PATH="/nonexistent")
    p = subprocess.run([os.path.abspath(args.servelab), "scenario", "run", "queueing", "--prometheus"],
                       cwd=args.root, capture_output=True, text=True, timeout=60, env=env)
    check("no prometheus on PATH: exit 2, one line", p.returncode == 2 and "prometheus" in p.stderr and
          p.stderr.strip().count("\n") == 0, p.stderr)

    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
