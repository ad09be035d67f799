#!/usr/bin/env python3
"""The engine's trace (--trace FILE) from a real server under load.

Starts `servelab serve` on models/tiny with a KV pool small enough that a burst preempts, sends
24 concurrent completions through the official `openai` package, reads /metrics, stops the
server (SIGTERM: the trace is written as the engine stops) and checks the file:
- it is Chrome/Perfetto trace-event JSON: every event has a name, a phase ("X" complete or "M"
  metadata), pid, tid and a timestamp >= 0, every "X" a duration >= 0;
- one track per sequence, named, whose phases queued, prefill and decode follow each other
  without a gap and sum to the request's e2e latency within 1 ms; over all requests they sum to
  vllm:e2e_request_latency_seconds_sum within 1 ms a request, and there are as many as the
  histogram's count;
- one "step" event per engine step (vllm:iteration_tokens_total_count), and their "preempted"
  args sum to vllm:num_preemptions_total, which this load makes > 0;
- each request's "prefill chunk" events cover its uncached prompt tokens (exactly, when it was
  never preempted; at least, when it recomputed);
- --trace-max-mb bounds the file: a second run with a 1 MB ring under a longer load drops the
  oldest events and says how many.
Stops at the first failed check (test_lab's check); prints "all trace checks passed".
"""
import argparse
import json
import os
import tempfile
import threading

import openai

from test_lab import check, vllm  # noqa: E402
from test_server import KEY, NAME, Server  # noqa: E402

SETTINGS = ("--num-gpu-blocks-override", "24", "--max-num-seqs", "16")  # a pool that a burst preempts


def load(srv, n, max_tokens):
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY)
    errors = []

    def one(i):
        try:
            client.completions.create(model=NAME, prompt="word " * (8 + 3 * (i % 24)), max_tokens=max_tokens,
                                      temperature=0, extra_body={"ignore_eos": True})
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        srv = Server(a.servelab, a.model, *SETTINGS, "--trace", path)
        errors = load(srv, 24, 48)
        check(not errors, f"24 concurrent completions ({errors[:1]})")
        n_steps, pre_metric = vllm(srv, "vllm:iteration_tokens_total_count"), vllm(srv, "vllm:num_preemptions_total")
        n_req = vllm(srv, "vllm:e2e_request_latency_seconds_count")
        e2e_sum = vllm(srv, "vllm:e2e_request_latency_seconds_sum")
        check(srv.stop() == 0, "the server stopped on SIGTERM")
        doc = json.load(open(path))
        ev = doc["traceEvents"]
        good = all(isinstance(e.get("name"), str) and e.get("ph") in ("X", "M") and isinstance(e.get("pid"), int)
                   and isinstance(e.get("tid"), (int, float)) and e.get("ts", -1) >= 0
                   and (e["ph"] != "X" or e.get("dur", -1) >= 0) for e in ev)
        check(good, f"{len(ev)} events, each with a name, phase, pid, tid, ts (and dur)")

        steps = [e for e in ev if e["pid"] == 1 and e["name"] == "step"]
        check(len(steps) == n_steps, f"{len(steps)} step events, {n_steps} steps in vllm:iteration_tokens_total")
        pre_trace = sum(e["args"]["preempted"] for e in steps)
        check(pre_metric > 0 and pre_trace == pre_metric, f"preemptions: {pre_trace} in the steps, {pre_metric} in /metrics")

        tracks = {}
        for e in ev:
            if e["pid"] == 2 and e["name"] != "process_name":
                tracks.setdefault(e["tid"], []).append(e)
        check(len(tracks) == n_req == 24, f"{len(tracks)} request tracks, {n_req} requests in /metrics")
        worst_gap = worst_e2e = 0.0
        total_us, chunks_ok, named = 0.0, True, True
        for tid, es in tracks.items():
            names = [e["args"]["name"] for e in es if e["ph"] == "M"]
            ph = {e["name"]: e for e in es if e["name"] in ("queued", "prefill", "decode")}
            if len(names) != 1 or len(ph) != 3:
                print(f"  track {tid}: names {names}, phases {sorted(ph)}")
                named = False
                continue
            q, p, d = ph["queued"], ph["prefill"], ph["decode"]
            worst_gap = max(worst_gap, abs(q["ts"] + q["dur"] - p["ts"]), abs(p["ts"] + p["dur"] - d["ts"]))
            span = q["dur"] + p["dur"] + d["dur"]
            worst_e2e = max(worst_e2e, abs(span - q["args"]["e2e_ms"] * 1e3))
            total_us += span
            chunk = sum(e["args"]["tokens"] for e in es if e["name"] == "prefill chunk")
            need = q["args"]["prompt_tokens"] - q["args"]["cached_prompt_tokens"]
            chunks_ok &= chunk == need if q["args"]["preemptions"] == 0 else chunk >= need
        check(named, "every track is named and has its three phases")
        check(worst_gap < 1.0, f"phases follow each other (largest gap {worst_gap:.3f} us)")
        check(worst_e2e < 1000.0, f"phases sum to each request's e2e latency (largest difference {worst_e2e:.1f} us)")
        check(abs(total_us / 1e6 - e2e_sum) < 1e-3 * n_req,
              f"all phases {total_us / 1e6:.4f} s, vllm:e2e_request_latency_seconds_sum {e2e_sum:.4f} s")
        check(chunks_ok, "prefill chunks cover each request's uncached prompt tokens")
        check(doc["otherData"]["dropped_oldest"] == 0, "nothing dropped under the default 64 MB")

        # A 1 MB ring under a longer load: the oldest events go, the file says so and stays bounded.
        small = os.path.join(tmp, "small.json")
        srv = Server(a.servelab, a.model, *SETTINGS, "--trace", small, "--trace-max-mb", "1")
        for _ in range(6):
            load(srv, 48, 200)
        check(srv.stop() == 0, "the second server stopped on SIGTERM")
        doc = json.load(open(small))
        size = os.path.getsize(small)
        check(doc["otherData"]["dropped_oldest"] > 0 and size < (1 << 20) + 4096,
              f"--trace-max-mb 1: {doc['otherData']['dropped_oldest']} oldest events dropped, file {size} bytes")
    print("all trace checks passed")


if __name__ == "__main__":
    main()
