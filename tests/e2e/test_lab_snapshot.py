#!/usr/bin/env python3
"""GET /lab/snapshot (serve --enable-lab-ui): the engine's queues and KV block map, under load.

Starts `servelab serve` on models/tiny with a 24-block KV pool, a 32-token step budget (prompts
prefill in chunks), steps slowed to ~15 ms by the step_delay fault (so that a few snapshots a
second see the load unfold), the lab UI and an admin key, then:
- every snapshot (polled and streamed) is valid against docs/schemas/lab-snapshot.schema.json;
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
Stops at the first failed check (test_lab's check); prints "all lab snapshot checks passed".
"""
import argparse
import json
import os
import threading
import time
import urllib.request

import jsonschema
import openai

from test_lab import check, vllm  # noqa: E402
from test_server import KEY, NAME, Server, raw  # noqa: E402

SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "schemas",
                      "lab-snapshot.schema.json")

ADMIN = "lab-key"
SETTINGS = ("--num-gpu-blocks-override", "24", "--max-num-seqs", "16")


def get(srv, path, key=None, method="GET"):
    status, _, body = raw(srv.base, method, path, headers={"Authorization": f"Bearer {key}"} if key else None)
    return status, body.decode()


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

    srv = Server(a.servelab, a.model, *SETTINGS)
    check(get(srv, "/lab/snapshot")[0] == 404, "no --enable-lab-ui: 404")
    srv.stop()

    # A 32-token budget: prompts prefill in chunks over several steps, which the snapshots catch.
    # step_delay (a lab fault) stretches each step to ~15 ms, so the load lasts seconds and the
    # snapshots (a few a second) see it unfold.
    srv = Server(a.servelab, a.model, *SETTINGS, "--enable-lab-ui", "--admin-key", ADMIN,
                 "--max-num-batched-tokens", "32", "--fault", "step_delay:ms=15")
    check(get(srv, "/lab/snapshot")[0] == 401, "without the admin key: 401")
    check(get(srv, "/lab/snapshot", ADMIN, "POST")[0] == 405, "POST: 405")
    status, body = get(srv, "/lab/snapshot", ADMIN)
    first = json.loads(body)
    check(status == 200 and first["kv"]["free"] == first["config"]["num_blocks"] == 23,
          f"idle at start: {first['config']['num_blocks']} blocks, all free")

    client = openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY)
    prefix = "alpha beta gamma delta " * 5  # several full blocks
    errors, snaps = [], []

    def one(prompt, max_tokens):
        try:
            client.completions.create(model=NAME, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                      extra_body={"ignore_eos": True})
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    done = threading.Event()

    def poll():
        while not done.is_set():
            snaps.append(json.loads(get(srv, "/lab/snapshot", ADMIN)[1]))
            time.sleep(0.05)

    events = []

    def follow():  # GET /lab/events: the same snapshots as SSE, for 3 s of the load
        req = urllib.request.Request(srv.base + "/lab/events", headers={"Authorization": f"Bearer {ADMIN}"})
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
    schema = jsonschema.Draft202012Validator(json.load(open(SCHEMA)))
    invalid = [(i, e.message) for i, s in enumerate(snaps + sse + [first]) for e in schema.iter_errors(s)]
    check(not invalid, f"{len(snaps) + len(sse) + 1} snapshots valid against docs/schemas/lab-snapshot.schema.json"
          f"{': ' + str(invalid[0]) if invalid else ''}")
    bad = [(i, consistent(s)) for i, s in enumerate(snaps) if consistent(s)]
    check(not bad, f"{len(snaps)} snapshots, each consistent{': ' + str(bad[0]) if bad else ''}")
    steps = [s["steps"] for s in snaps]
    check(all(x <= y for x, y in zip(steps, steps[1:])), f"steps never go back ({steps[0]} .. {steps[-1]})")
    states = {r["state"] for s in snaps for r in s["running"]}
    check({"prefilling", "decoding"} <= states, f"running states seen: {sorted(states)}")
    shared = max(s["kv"]["shared"] for s in snaps)
    check(shared > 0, f"blocks shared by requests on one prefix (up to {shared} at once)")
    check(max(len(s["running"]) for s in snaps) > 1, "several requests running at once")

    last = json.loads(get(srv, "/lab/snapshot", ADMIN)[1])
    idle = not last["running"] and not last["waiting"] and last["kv"]["used"] + last["kv"]["shared"] == 0
    check(idle and vllm(srv, "vllm:kv_cache_usage_perc") == 0.0 and vllm(srv, "vllm:num_requests_running") == 0,
          f"idle: nothing running, no block held (cached {last['kv']['cached']}), /metrics agrees")
    check(srv.stop() == 0, "the server stopped on SIGTERM")
    print("all lab snapshot checks passed")


if __name__ == "__main__":
    main()
