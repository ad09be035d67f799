#!/usr/bin/env python3
"""GET /lab/snapshot (serve --enable-lab-ui): the engine's queues and KV block map, under load.

Starts `servelab serve` on models/tiny with a 24-block KV pool, a 32-token step budget (prompts
prefill in chunks), steps slowed to ~15 ms by the step_delay fault (so that a few snapshots a
second see the load unfold), the lab UI and an admin key, then:
- the route needs the admin key (401 without, 200 with), answers GET only (405), and is absent
  without --enable-lab-ui (404);
- GET /lab/events streams the same snapshots as SSE, each one different from the last;
- while a long request holds a prompt prefix and 24 more (8 of them on the same prefix) run
  beside it, every snapshot polled is consistent: the map's runs cover the pool and their
  per-state counts are the counts given; free + cached + used + shared = the pool;
  (used + shared) / pool = usage (the value /metrics publishes for that step); every running
  request's blocks are held (used or shared); the step's tokens fit the budget; "steps" never
  goes back;
- the snapshots show the mechanisms: requests running, prefilling and decoding, and blocks
  shared by the requests on the common prefix;
- once idle: no request, no block held, and /metrics agrees (usage 0, nothing running).
Prints one line per check and "N passed, N failed".
"""
import argparse
import json
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import openai

KEY = "lab-key"
passed = failed = 0


def check(ok, what):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    passed, failed = passed + bool(ok), failed + (not ok)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(servelab, model, *extra):
    port = free_port()
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen([servelab, "serve", model, "--device", "cpu", "--host", "127.0.0.1", "--port", str(port),
                             "--served-model-name", "tiny", "--max-model-len", "512", "--num-gpu-blocks-override", "24",
                             "--max-num-seqs", "16", *extra], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, base
        except OSError:
            time.sleep(0.1)
    log.seek(0)
    sys.exit("server did not become healthy:\n" + log.read())


def get(base, path, key=None, method="GET"):
    req = urllib.request.Request(base + path, method=method, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r"(?:\{[^}]*\})? ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else None


def consistent(s):
    """'' when snapshot s is self-consistent, else what is wrong."""
    n = s["config"]["num_blocks"]
    kv = s["kv"]
    runs = {}
    expanded = []
    for state, length in kv["map"]:
        runs[state] = runs.get(state, 0) + length
        expanded += [state] * length
    names = {"f": "free", "c": "cached", "u": "used", "s": "shared"}
    if len(expanded) != n:
        return f"map covers {len(expanded)} of {n} blocks"
    if any(runs.get(k, 0) != kv[v] for k, v in names.items()):
        return f"map counts {runs} differ from {kv}"
    if kv["free"] + kv["cached"] + kv["used"] + kv["shared"] != n:
        return "states do not add up to the pool"
    if abs((kv["used"] + kv["shared"]) / n - kv["usage"]) > 1e-9:
        return f"usage {kv['usage']} but {kv['used'] + kv['shared']} of {n} blocks held"
    fields = {"id": str, "state": str, "prompt_tokens": int, "computed_tokens": int, "output_tokens": int,
              "max_tokens": int, "preemptions": int, "blocks": list}
    for r in s["running"] + s["waiting"]:
        if any(not isinstance(r.get(k), t) for k, t in fields.items()):
            return f"request {r.get('id')}: a field is missing or of the wrong type: {r}"
    for r in s["running"]:
        if any(not 1 <= b <= n or expanded[b - 1] not in "us" for b in r["blocks"]):
            return f"running {r['id']} has a block that is not held: {r['blocks']}"
        if r["state"] not in ("prefilling", "decoding"):
            return f"running {r['id']} in state {r['state']}"
    if any(r["state"] not in ("waiting", "preempted") for r in s["waiting"]):
        return "a waiting request in a running state"
    if s["step"]["prefill_tokens"] + s["step"]["decode_tokens"] > s["config"]["max_num_batched_tokens"]:
        return "the step's tokens exceed the budget"
    return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()

    proc, base = serve(a.servelab, a.model)
    check(get(base, "/lab/snapshot")[0] == 404, "no --enable-lab-ui: 404")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)

    # A 32-token budget: prompts prefill in chunks over several steps, which the snapshots catch.
    # step_delay (a lab fault) stretches each step to ~15 ms, so the load lasts seconds and the
    # snapshots (a few a second) see it unfold.
    proc, base = serve(a.servelab, a.model, "--enable-lab-ui", "--admin-key", KEY, "--max-num-batched-tokens", "32",
                       "--fault", "step_delay:ms=15")
    check(get(base, "/lab/snapshot")[0] == 401, "without the admin key: 401")
    check(get(base, "/lab/snapshot", KEY, "POST")[0] == 405, "POST: 405")
    status, body = get(base, "/lab/snapshot", KEY)
    first = json.loads(body)
    check(status == 200 and first["kv"]["free"] == first["config"]["num_blocks"] == 23,
          f"idle at start: {first['config']['num_blocks']} blocks, all free")

    client = openai.OpenAI(base_url=base + "/v1", api_key="none")
    prefix = "alpha beta gamma delta " * 5  # several full blocks
    errors, snaps = [], []

    def one(prompt, max_tokens):
        try:
            client.completions.create(model="tiny", prompt=prompt, max_tokens=max_tokens, temperature=0,
                                      extra_body={"ignore_eos": True})
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    done = threading.Event()

    def poll():
        while not done.is_set():
            snaps.append(json.loads(get(base, "/lab/snapshot", KEY)[1]))
            time.sleep(0.05)

    events = []

    def follow():  # GET /lab/events: the same snapshots as SSE, for 3 s of the load
        req = urllib.request.Request(base + "/lab/events", headers={"Authorization": f"Bearer {KEY}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            events.append(r.headers.get("Content-Type", ""))
            end = time.time() + 3.0
            for line in r:
                if line.startswith(b"data: "):
                    events.append(json.loads(line[6:]))
                if time.time() > end:
                    break

    poller = threading.Thread(target=poll)
    poller.start()
    follower = threading.Thread(target=follow)
    follower.start()
    holder = threading.Thread(target=one, args=(prefix + "one", 200))
    holder.start()
    time.sleep(0.3)  # the holder's prefix blocks are computed and cached by now
    crowd = [threading.Thread(target=one, args=((prefix if i < 8 else "") + f"word {i} " * (3 + i), 40))
             for i in range(24)]
    for t in crowd:
        t.start()
    for t in crowd + [holder]:
        t.join()
    time.sleep(0.6)  # the idle snapshot is published as the engine goes idle
    done.set()
    poller.join()
    follower.join()
    check(not errors, f"25 completions ({errors[:1]})")

    sse = events[1:]
    check(events and events[0].startswith("text/event-stream") and len(sse) >= 4
          and all(not consistent(s) for s in sse) and len({s["time"] for s in sse}) == len(sse),
          f"/lab/events: {len(sse)} distinct, consistent snapshots in 3 s")
    bad = [(i, consistent(s)) for i, s in enumerate(snaps) if consistent(s)]
    check(not bad, f"{len(snaps)} snapshots, each consistent{': ' + str(bad[0]) if bad else ''}")
    steps = [s["steps"] for s in snaps]
    check(all(x <= y for x, y in zip(steps, steps[1:])), f"steps never go back ({steps[0]} .. {steps[-1]})")
    states = {r["state"] for s in snaps for r in s["running"]}
    check({"prefilling", "decoding"} <= states, f"running states seen: {sorted(states)}")
    shared = max(s["kv"]["shared"] for s in snaps)
    check(shared > 0, f"blocks shared by requests on one prefix (up to {shared} at once)")
    check(max(len(s["running"]) for s in snaps) > 1, "several requests running at once")

    last = json.loads(get(base, "/lab/snapshot", KEY)[1])
    text = get(base, "/metrics")[1]
    idle = not last["running"] and not last["waiting"] and last["kv"]["used"] + last["kv"]["shared"] == 0
    check(idle and metric(text, "vllm:kv_cache_usage_perc") == 0.0 and metric(text, "vllm:num_requests_running") == 0,
          f"idle: nothing running, no block held (cached {last['kv']['cached']}), /metrics agrees")
    proc.send_signal(signal.SIGTERM)
    check(proc.wait(timeout=30) == 0, "the server stopped on SIGTERM")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
