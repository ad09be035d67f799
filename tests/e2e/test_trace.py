#!/usr/bin/env python3
"""The engine's trace (--trace FILE) from a real server under load.

Starts `servelab serve` on models/tiny with a KV pool small enough that a burst preempts, sends
24 concurrent completions through the official `openai` package, reads /metrics, stops the
server (SIGTERM: the trace is written as the engine stops) and checks the file:
- it is valid against docs/schemas/trace.schema.json, and Chrome/Perfetto trace-event JSON: every event has a name, a phase ("X" complete or "M"
  metadata), pid, tid and a timestamp >= 0, every "X" a duration >= 0;
- one track per sequence, named, whose phases queued, prefill and decode follow each other
  without a gap and sum to the request's e2e latency within 1 ms; over all requests they sum to
  vllm:e2e_request_latency_seconds_sum within 1 ms a request, and there are as many as the
  histogram's count;
- one "step" event per engine step (vllm:iteration_tokens_total_count), and their "preempted"
  args sum to vllm:num_preemptions_total, which this load makes > 0;
- each request's "prefill chunk" events cover its uncached prompt tokens (exactly, when it was
  never preempted; at least, when it recomputed);
- the HTTP side: one async span ("b", "n" first byte, "e") per completion, status 200, naming the
  engine request whose track it holds, and containing that track's phases;
- --trace-max-mb bounds the file: a second run with a 1 MB ring under a longer load drops the
  oldest events and says how many; with --enable-lab-ui, POST /lab/trace/start is refused (409)
  while the --trace FILE records;
- POST /lab/trace/start|stop (--enable-lab-ui, no --trace): stop before start and a second start
  are 409s with OpenAI's error body, GET is a 405; the stop's body is the trace of what ran in
  between (a load of 8: 8 request tracks, 8 HTTP spans, every step), a request that arrived
  before the start is left out, and a second stop is a 409.
Stops at the first failed check (test_lab's check); prints "all trace checks passed".
"""
import argparse
import json
import os
import tempfile
import threading

import jsonschema
import openai

from test_lab import check, vllm  # noqa: E402
from test_server import KEY, NAME, Server, raw  # noqa: E402

SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "schemas", "trace.schema.json")
SETTINGS = ("--num-gpu-blocks-override", "24", "--max-num-seqs", "16")  # a pool that a burst preempts


def load(srv, n, max_tokens):
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY)
    errors = []
    go = threading.Barrier(n)   # sent together, so the burst overlaps (and preempts)

    def one(i):
        try:
            go.wait()
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


def valid(doc):
    """The schema's first complaint about a trace document, or ''."""
    err = next(jsonschema.Draft202012Validator(json.load(open(SCHEMA))).iter_errors(doc), None)
    return f"{err.message} at {list(err.absolute_path)}" if err else ""


def well_formed(ev):
    """Every event has a name, a known phase, pid, tid and ts >= 0; "X" a dur, async ones an id."""
    return all(isinstance(e.get("name"), str) and e.get("ph") in ("X", "M", "b", "n", "e")
               and isinstance(e.get("pid"), int) and isinstance(e.get("tid"), (int, float)) and e.get("ts", -1) >= 0
               and (e["ph"] != "X" or e.get("dur", -1) >= 0)
               and (e["ph"] not in "bne" or (e.get("cat") == "http" and isinstance(e.get("id"), str))) for e in ev)


def http_spans(ev):
    """{async id: {"name", "b", "n", "e" (their ts), "args" (the end's)}} of pid 3's events."""
    spans = {}
    for e in ev:
        if e["pid"] == 3 and e["ph"] in "bne":
            h = spans.setdefault(e["id"], {})
            h[e["ph"]] = e["ts"]
            if e["ph"] == "b":
                h["name"] = e["name"]
            if e["ph"] == "e":
                h["args"] = e["args"]
    return spans


def check_lab_trace(a):
    """POST /lab/trace/start and /lab/trace/stop on a server without --trace."""
    srv = Server(a.servelab, a.model, *SETTINGS, "--enable-lab-ui")
    try:
        status, _, body = raw(srv.base, "POST", "/lab/trace/stop")
        err = json.loads(body) if status == 409 else {}
        check(status == 409 and err.get("error", {}).get("type") == "ConflictError",
              f"stop with no trace: {status} {body[:160]}")
        status, headers, _ = raw(srv.base, "GET", "/lab/trace/start")
        check(status == 405 and headers.get("Allow") == "POST", f"GET /lab/trace/start: {status}, Allow {headers.get('Allow')}")
        # A stream that arrives before the start and runs across it: left out of the trace.
        streaming = threading.Event()

        def across():
            client = openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY)
            for _ in client.completions.create(model=NAME, prompt="word " * 8, max_tokens=300, temperature=0,
                                               stream=True, extra_body={"ignore_eos": True}):
                streaming.set()

        before = threading.Thread(target=across)
        before.start()
        check(streaming.wait(60), "a stream started before the trace")
        status, _, body = raw(srv.base, "POST", "/lab/trace/start")
        check(status == 200 and json.loads(body) == {"status": "recording"}, f"start: {status} {body[:120]}")
        status, _, _ = raw(srv.base, "POST", "/lab/trace/start")
        check(status == 409, f"a second start: {status}")
        steps0 = vllm(srv, "vllm:iteration_tokens_total_count")
        errors = load(srv, 8, 24)
        before.join()
        steps1 = vllm(srv, "vllm:iteration_tokens_total_count")
        status, headers, body = raw(srv.base, "POST", "/lab/trace/stop")
        check(status == 200 and headers.get("Content-Type") == "application/json" and not errors,
              f"stop: {status} {headers.get('Content-Type')} ({errors[:1]})")
        doc = json.loads(body)
        ev = doc["traceEvents"]
        check(well_formed(ev) and not valid(doc), f"the stop's trace: {len(ev)} events, valid against the schema {valid(doc)}")
        names = [e["args"]["name"] for e in ev if e["pid"] == 2 and e["ph"] == "M" and e["name"] == "thread_name"]
        posts = [h for h in http_spans(ev).values() if h["name"] == "POST /v1/completions"]
        check(len(names) == 8 and len(posts) == 8 and all(h["args"]["status"] == 200 for h in posts),
              f"{len(names)} request tracks and {len(posts)} completion spans: the load of 8, not the earlier stream")
        steps = sum(1 for e in ev if e["pid"] == 1 and e["name"] == "step")
        # A step that began before the start is left out: at most one of those counted after it.
        check(steps >= steps1 - steps0 - 1 > 0, f"{steps} steps traced, {steps1 - steps0} counted during the load")
        status, _, _ = raw(srv.base, "POST", "/lab/trace/stop")
        check(status == 409, f"a second stop: {status}")
    finally:
        srv.stop()


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
        check(well_formed(ev), f"{len(ev)} events, each with a name, phase, pid, tid, ts (and dur, or an async id)")
        why = valid(doc)
        check(not why, f"the file is valid against docs/schemas/trace.schema.json {why}")

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
        spans = http_spans(ev)
        posts = [h for h in spans.values() if h["name"] == "POST /v1/completions"]
        check(len(posts) == 24 and all(h["args"]["status"] == 200 for h in posts),
              f"{len(posts)} HTTP spans of POST /v1/completions, all 200")
        by_name = {e["args"]["name"]: tid for tid, es in tracks.items() for e in es if e["ph"] == "M"}
        inside = 0
        for h in posts:
            es = tracks.get(by_name.get(h["args"].get("engine_request", "") + "[0]"), [])
            ph = {e["name"]: e for e in es if e["name"] in ("queued", "decode")}
            if len(ph) == 2 and h["b"] <= ph["queued"]["ts"] and ph["decode"]["ts"] + ph["decode"]["dur"] <= h["e"] \
                    and h["b"] <= h.get("n", -1) <= h["e"]:
                inside += 1
        check(inside == 24, f"{inside} of 24 HTTP spans name their engine request and hold its phases and first byte")

        # A 1 MB ring under a longer load: the oldest events go, the file says so and stays bounded.
        small = os.path.join(tmp, "small.json")
        srv = Server(a.servelab, a.model, *SETTINGS, "--trace", small, "--trace-max-mb", "1", "--enable-lab-ui")
        status, _, body = raw(srv.base, "POST", "/lab/trace/start")
        check(status == 409 and b"--trace" in body, f"POST /lab/trace/start under --trace FILE: {status} {body[:120]}")
        for _ in range(6):
            load(srv, 48, 200)
        check(srv.stop() == 0, "the second server stopped on SIGTERM")
        doc = json.load(open(small))
        size = os.path.getsize(small)
        check(doc["otherData"]["dropped_oldest"] > 0 and size < (1 << 20) + 4096,
              f"--trace-max-mb 1: {doc['otherData']['dropped_oldest']} oldest events dropped, file {size} bytes")
    check_lab_trace(a)
    print("all trace checks passed")


if __name__ == "__main__":
    main()
