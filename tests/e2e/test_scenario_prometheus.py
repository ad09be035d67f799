#!/usr/bin/env python3
"""`servelab scenario run --prometheus` (docs/lab.md, "Scenarios"): the queueing scenario with its
remedy, each phase watched by a real Prometheus (the Debian package) evaluating the committed
alert rules with windows of seconds. The incident fires VLLMQueueing, which its baseline did not;
every alert new in the incident names a cause the diagnoser found too; the remedy does not fire
VLLMQueueing; the JSON carries each phase's alerts. Then the refusal when no prometheus binary is
on PATH. Prints one line per check and "N passed, N failed".
"""
import argparse
import json
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--root", required=True, help="the repository root (lab/scenarios, tools/prometheus)")
    args = ap.parse_args()
    results = []

    def check(name, cond, detail=""):
        results.append(bool(cond))
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + str(detail)}", flush=True)

    p = subprocess.run([args.servelab, "scenario", "run", "queueing", "--remedy", "--prometheus", "--json"],
                       cwd=args.root, capture_output=True, text=True, timeout=600)
    try:
        r = json.loads(p.stdout)[0]
    except (ValueError, IndexError):
        r = {}
    check(f"run queueing --remedy --prometheus: one JSON result (exit {p.returncode})", r.get("name") == "queueing",
          p.stdout[-500:] + p.stderr[-2000:])
    if not r:
        return 1
    base, inc, rem = r["baseline"], r["incident"], r["remedy"]
    check("the diagnosis matched and the remedy helped", r["matched"] and r["remedy_helped"], r)
    check(f"the incident fired VLLMQueueing (alerts {inc.get('alerts')}), the baseline did not ({base.get('alerts')})",
          r.get("alert_rule") == "VLLMQueueing" and "VLLMQueueing" in inc.get("alerts", []) and
          "VLLMQueueing" not in base.get("alerts", ["VLLMQueueing"]), r)
    check(f"the remedy did not fire VLLMQueueing ({rem.get('alerts')})",
          "VLLMQueueing" not in rem.get("alerts", ["VLLMQueueing"]), r)
    check("the alerts agree with the diagnosis, and the exit status says so",
          r.get("alerts_agree") is True and p.returncode == 0, r)

    env = dict(os.environ, PATH="/nonexistent")
    p = subprocess.run([os.path.abspath(args.servelab), "scenario", "run", "queueing", "--prometheus"],
                       cwd=args.root, capture_output=True, text=True, timeout=60, env=env)
    check("no prometheus on PATH: exit 2, one line", p.returncode == 2 and "prometheus" in p.stderr and
          p.stderr.strip().count("\n") == 0, p.stderr)

    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
