#!/usr/bin/env python3
"""The alert rules (tools/prometheus/alerts.yml, recording.yml) in a real Prometheus against real
`servelab serve` instances, one per case, each made sick by the lab's faults (docs/lab.md).

Every case runs at the same time on its own server (models/tiny, --enable-fault-injection), all
scraped by one Prometheus (the Debian package) every second, which evaluates the rules every
second. The rules are loaded with shorter windows so that a case takes seconds, not minutes:
every range `[5m]` becomes `[10s]` and every `for:` becomes `for: 3s`; nothing else in the
expressions changes (the test checks that these were the only edits; the subquery `[5m:]` is a
range too). Cases:

  healthy      2 clients, requests that stop on a stop token     -> no alert
  queueing     step_delay 100 ms, --max-num-seqs 2, 8 clients     -> VLLMQueueing only (the KV
               pool is large: requests wait for a sequence slot, not for memory)
  runaway      suppress_eos, requests that would stop early       -> VLLMRunawayGeneration only
  http_errors  http_error rate=50 (429s and 503s)                 -> VLLMHighErrorRate only
  kv_pressure  160 KV blocks, 64 clients whose sequences grow to   -> VLLMKVCachePressure (seed
               7 blocks each                                         004's "queueing issue" is
                                                                     waiting AND cache full);
                                                                     VLLMQueueing may fire too:
                                                                     whether queue time is half of
                                                                     TTFT depends on how many
                                                                     requests are preempted before
                                                                     their first token (that wait
                                                                     counts as prefill, as in
                                                                     vLLM); so may
                                                                     VLLMPreemptionStorm: 448
                                                                     blocks wanted of 160 come
                                                                     near one preemption a
                                                                     finished request
  engine_stall engine_stall while requests run                    -> VLLMEngineStalled only

Requests end with finish_reason "stop" (a stop token id found by probing the greedy output), so
that only the runaway case has a length share. Prometheus's /api/v1/alerts is polled every second
for the whole run; a case passes when the alerts that reached "firing" on its instance are
exactly its set. Then: every rule evaluated without error, and the recording rules' shares agree
with the faults (queue share of TTFT, length share, error share).
Prints one line per check and "N passed, N failed".
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
RULES = os.path.join(HERE, "..", "..", "tools", "prometheus")
NAME = "tiny"
ADMIN = "alerts-admin-key"
WINDOW, FOR = "10s", "3s"
ALL_ALERTS = {"VLLMQueueing", "VLLMKVCachePressure", "VLLMPreemptionStorm", "VLLMRunawayGeneration",
              "VLLMUpstreamBottleneck", "VLLMEngineStalled", "VLLMHighErrorRate", "VLLMTTFTRegression",
              "VLLMITLRegression"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(base, method, path, body=None, headers=None, timeout=60):
    """(status, parsed JSON or raw bytes) of one request, errors included."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            st, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        st, raw = e.code, e.read()
    try:
        return st, json.loads(raw)
    except ValueError:
        return st, raw


def wait_until(what, fn, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if fn():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not happen in {timeout} s")


class Server:
    def __init__(self, servelab, model, tmp, case, *extra):
        self.case = case
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.instance = f"127.0.0.1:{self.port}"
        self.log = open(os.path.join(tmp, f"servelab-{case}.log"), "w+", errors="replace")
        self.proc = subprocess.Popen(
            [servelab, "serve", model, "--device", "cpu", "--host", "127.0.0.1", "--port", str(self.port),
             "--served-model-name", NAME, "--max-model-len", "512", "--threads", "1",
             "--enable-fault-injection", "--admin-key", ADMIN, *extra],
            stdout=self.log, stderr=subprocess.STDOUT)

    def wait_healthy(self):
        wait_until(f"{self.case} server healthy", lambda: http(self.base, "GET", "/health")[0] == 200)

    def fault(self, name, **params):
        st, body = http(self.base, "POST", "/admin/faults", {"name": name, "params": params},
                        {"Authorization": "Bearer " + ADMIN})
        if st != 200:
            raise RuntimeError(f"{self.case}: setting {name} {params}: {st} {body}")

    def clear_faults(self):
        http(self.base, "DELETE", "/admin/faults", headers={"Authorization": "Bearer " + ADMIN})

    def complete(self, body, timeout=60):
        return http(self.base, "POST", "/v1/completions", dict({"model": NAME, "temperature": 0}, **body),
                    timeout=timeout)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def shortened_rules(tmp):
    """The two rule files with the ranges [5m] and [5m:] (a subquery) -> WINDOW and every for: ->
    FOR, checked to be the only edits."""
    paths = []
    for name in ("alerts.yml", "recording.yml"):
        with open(os.path.join(RULES, name)) as f:
            text = f.read()
        short = text.replace("[5m]", f"[{WINDOW}]").replace("[5m:]", f"[{WINDOW}:]")
        short = re.sub(r"for: \d+[smh]", f"for: {FOR}", short)
        back = short.replace(f"[{WINDOW}]", "[5m]").replace(f"[{WINDOW}:]", "[5m:]")
        if re.sub(r"for: \d+[smh]", "for: X", back) != re.sub(r"for: \d+[smh]", "for: X", text) or \
                re.search(r"\[\d+[smh]:?\]", back.replace("[5m]", "").replace("[5m:]", "")):
            raise RuntimeError(f"{name}: a range other than [5m] would need its own shortening")
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(short)
        paths.append(path)
    return paths


class Prometheus:
    def __init__(self, tmp, targets, rule_files):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cfg = os.path.join(tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                    f"rule_files: {json.dumps(rule_files)}\n"
                    "scrape_configs:\n  - job_name: servelab\n"
                    f"    static_configs: [{{targets: {json.dumps(targets)}}}]\n")
        self.log = open(os.path.join(tmp, "prometheus.log"), "w+")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{self.port}"], stdout=self.log, stderr=subprocess.STDOUT)
        wait_until("prometheus ready", lambda: http(self.base, "GET", "/-/ready")[0] == 200)

    def api(self, path, **params):
        st, out = http(self.base, "GET", "/api/v1/" + path + ("?" + urllib.parse.urlencode(params) if params else ""))
        if st != 200 or out.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {out}")
        return out["data"]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def iso_seconds(stamp):
    """Unix seconds of Prometheus's RFC 3339 timestamps (nanoseconds cut to microseconds)."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", stamp)
    frac = float("0" + m.group(2)) if m.group(2) else 0.0
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    from datetime import datetime
    return datetime.fromisoformat(m.group(1) + tz).timestamp() + frac


def probe_stop_id(srv, prompt, max_tokens, min_tokens):
    """A token id that ends the greedy completion of `prompt` with "stop" after `min_tokens`
    tokens: candidates from the re-tokenized greedy text (not exactly the generated ids, hence
    the check)."""
    st, body = srv.complete({"prompt": prompt, "max_tokens": max_tokens})
    text = body["choices"][0]["text"].replace("\x00", "")  # /tokenize refuses NULs
    st, tok = http(srv.base, "POST", "/tokenize", {"model": NAME, "prompt": text, "add_special_tokens": False})
    if "tokens" not in tok:
        raise RuntimeError(f"/tokenize of the greedy text: {st} {tok}")
    ids = tok["tokens"]
    for cand in ids[min_tokens:] + ids[:min_tokens]:
        st, body = srv.complete({"prompt": prompt, "max_tokens": max_tokens, "min_tokens": min_tokens,
                                 "stop_token_ids": [cand]})
        if body["choices"][0]["finish_reason"] == "stop":
            return cand, body["usage"]["completion_tokens"]
    raise RuntimeError(f"no stop token found for {prompt!r}: {ids}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--min-seconds", type=float, default=25.0, help="observe alerts at least this long")
    ap.add_argument("--max-seconds", type=float, default=60.0, help="and at most this long")
    args = ap.parse_args()
    if not shutil.which("prometheus") or not shutil.which("promtool"):
        print("FAIL prometheus and promtool are required (scripts/install-deps.sh installs them)")
        return 1
    results = []

    def check(name, cond, detail=""):
        results.append(bool(cond))
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + str(detail)[:1500]}", flush=True)

    t_start = time.time()
    tmp = tempfile.mkdtemp(prefix="servelab-alerts-")
    # case -> (extra flags, alerts that must fire, alerts that may fire besides)
    cases = {
        "healthy": (["--max-num-seqs", "4"], set(), set()),
        "queueing": (["--max-num-seqs", "2"], {"VLLMQueueing"}, set()),
        "runaway": (["--max-num-seqs", "4"], {"VLLMRunawayGeneration"}, set()),
        "http_errors": (["--max-num-seqs", "4"], {"VLLMHighErrorRate"}, set()),
        "engine_stall": (["--max-num-seqs", "4"], {"VLLMEngineStalled"}, set()),
        "kv_pressure": (["--max-num-seqs", "64", "--num-gpu-blocks-override", "160", "--no-enable-prefix-caching"],
                        {"VLLMKVCachePressure"}, {"VLLMQueueing", "VLLMPreemptionStorm"}),
    }
    servers = {c: Server(args.servelab, args.model, tmp, c, *extra) for c, (extra, _, _) in cases.items()}
    prom = None
    stop_load = threading.Event()
    threads = []
    try:
        for s in servers.values():
            s.wait_healthy()
        # Requests that end with "stop": a short one (the 2nd token of "hello world"'s greedy
        # output) and a long one (60 to 100 tokens: a sequence grows through up to 7 KV blocks).
        probe = servers["healthy"]
        short_stop, n_short = probe_stop_id(probe, "hello world", 16, 1)
        long_stop, n_long = probe_stop_id(probe, "hello world", 100, 60)
        print(f"     stop ids: {short_stop} ends 'hello world' after {n_short} tokens, "
              f"{long_stop} after {n_long} (min_tokens 60)", flush=True)
        short = {"prompt": "hello world", "max_tokens": 16, "stop_token_ids": [short_stop]}
        long = {"prompt": "hello world", "max_tokens": 100, "min_tokens": 60, "stop_token_ids": [long_stop]}

        # Prometheus after the probes: their "length" finishes predate its first scrape.
        rule_files = shortened_rules(tmp)
        prom = Prometheus(tmp, [s.instance for s in servers.values()], rule_files)
        groups = prom.api("rules")["groups"]
        loaded = {r["name"] for g in groups for r in g["rules"]}
        check("Prometheus loaded the 9 alerts and 17 recording rules",
              len(loaded) == 26 and ALL_ALERTS <= loaded, sorted(loaded))

        servers["queueing"].fault("step_delay", ms=100)
        servers["runaway"].fault("suppress_eos")
        servers["http_errors"].fault("http_error", rate=50, types="rate_limit,server_error")

        finish = {c: {} for c in servers}
        statuses = {c: {} for c in servers}
        lock = threading.Lock()

        def client(case, body, pause):
            srv = servers[case]
            while not stop_load.wait(pause):
                try:
                    st, out = srv.complete(body, timeout=120)
                except OSError:
                    if stop_load.is_set():
                        return
                    raise
                with lock:
                    statuses[case][st] = statuses[case].get(st, 0) + 1
                    if st == 200:
                        r = out["choices"][0]["finish_reason"]
                        finish[case][r] = finish[case].get(r, 0) + 1

        load = {"healthy": (2, short), "queueing": (8, short), "runaway": (2, short), "http_errors": (2, short),
                "kv_pressure": (64, long), "engine_stall": (2, long)}
        for case in servers:
            n, body = load[case]
            # The light cases pause between requests (they need finishing requests, not the CPU).
            pause = 0.02 if case in ("healthy", "runaway", "http_errors") else 0
            for _ in range(n):
                t = threading.Thread(target=client, args=(case, body, pause), daemon=True)
                t.start()
                threads.append(t)
        t_load = time.time()
        # Requests running first (the gauges are published after each step), then no more
        # steps until the fault is cleared.
        time.sleep(1)
        servers["engine_stall"].fault("engine_stall")

        by_instance = {s.instance: c for c, s in servers.items()}
        fired = {c: {} for c in servers}  # case -> alert -> seconds after the load started
        while True:
            now = time.time() - t_load
            for a in prom.api("alerts")["alerts"]:
                case = by_instance.get(a["labels"].get("instance"))
                if a["state"] == "firing" and case and a["labels"]["alertname"] not in fired[case]:
                    fired[case][a["labels"]["alertname"]] = now
                    print(f"     {now:5.1f} s {case}: {a['labels']['alertname']} fires, pending since "
                          f"{iso_seconds(a['activeAt']) - t_load:.1f} s "
                          f"({a['annotations']['description'][:90]}...)", flush=True)
            done = all(set(fired[c]) >= cases[c][1] for c in servers)
            if now >= args.max_seconds or (done and now >= args.min_seconds):
                break
            time.sleep(1)

        # Recording rules, read while the load still runs.
        def recorded(rule, case):
            res = prom.api("query", query=f'{rule}{{instance="{servers[case].instance}"}}')["result"]
            return float(res[0]["value"][1]) if res else None

        queue_share = recorded("model_name:vllm_request_queue_time_seconds_per_time_to_first_token_seconds:ratio_rate5m",
                               "queueing")
        length_share = {c: recorded("model_name:vllm_request_success_length_per_total:ratio_rate5m", c)
                        for c in ("healthy", "runaway")}
        error_share = {c: recorded("instance:http_requests_errors_per_total:ratio_rate5m", c)
                       for c in ("healthy", "http_errors")}
        p95 = recorded("model_name:vllm_time_to_first_token_seconds:p95_5m", "queueing")
        stop_load.set()
        for s in servers.values():
            s.clear_faults()

        for case, (_, expected, may) in cases.items():
            got = set(fired[case])
            with lock:
                load_seen = f"finish reasons {finish[case]}, statuses {statuses[case]}"
            if expected:
                check(f"{case}: exactly {', '.join(sorted(expected))}{' (and perhaps ' + ', '.join(sorted(may)) + ')' if may else ''} fired "
                      f"({', '.join(f'{a} after {t:.0f} s' for a, t in sorted(fired[case].items()))})",
                      expected <= got <= expected | may, f"fired {sorted(got)}; {load_seen}")
            else:
                check(f"{case}: no alert fired ({load_seen})", not got, f"fired {sorted(got)}")
        rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
        bad = [(r["name"], r.get("lastError")) for r in rules if r.get("health") != "ok"]
        check("every rule evaluated without error", not bad, bad)
        check(f"recorded queue share of TTFT on queueing > 0.5 ({queue_share})",
              queue_share is not None and queue_share > 0.5, queue_share)
        check(f"recorded length share: runaway 1, healthy 0 ({length_share})",
              length_share["runaway"] == 1.0 and length_share["healthy"] == 0.0, length_share)
        check(f"recorded error share: http_errors 0.3..0.7, healthy 0 ({error_share})",
              error_share["http_errors"] is not None and 0.3 <= error_share["http_errors"] <= 0.7
              and error_share["healthy"] == 0.0, error_share)
        check(f"recorded p95 TTFT on queueing above the 100 ms step ({p95})", p95 is not None and p95 > 0.1, p95)
    finally:
        stop_load.set()
        if prom:
            prom.stop()
        for s in servers.values():  # all at once
            s.proc.send_signal(signal.SIGTERM)
        for s in servers.values():
            s.stop()
        for t in threads:
            t.join(timeout=10)
    n_ok = sum(results)
    print(f"{n_ok} passed, {len(results) - n_ok} failed ({time.time() - t_start:.0f} s; logs in {tmp})")
    if all(results):
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
