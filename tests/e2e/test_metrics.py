#!/usr/bin/env python3
"""vLLM's metrics and log lines, checked through a real Prometheus.

Starts `servelab serve` on the tiny checkpoint (an API key, which /metrics
must not need; a small KV pool and 4 sequences at most, so that requests
queue and get preempted; stats logged every second) and a real Prometheus
(Debian package) on loopback that scrapes it every second, twice: as is, and
through a relabelling that rewrites ':' to '_' in metric names, as
OpenTelemetry and Datadog pipelines do. Then:

1. Exposition: the Prometheus text format and, when Accept asks, OpenMetrics;
   `promtool check metrics` finds nothing but the colons vLLM's names have;
   every V1 family of vLLM with its type, labels and buckets.
2. Load: streaming clients (completions and chat, shared prefixes, some that
   hang up) keep the server saturated for a fixed time. Every expression of
   the serving playbooks (tests/metrics/seed_queries.promql) is evaluated
   through Prometheus's HTTP API at a moment when requests were waiting, and
   must return data. histogram_quantile over TTFT and ITL must agree with the
   clients' own percentiles within the histogram's bucket resolution.
3. Accuracy: a run of known requests moves the token counters by exactly
   their token counts and the TTFT and e2e sums by the clients' timings
   (inside them, and short of them by at most 5% plus three HTTP round
   trips a request, measured in the run).
4. Logs: the periodic "Engine 000: ..." line (with "Preemptions: N"), the
   preemption warning, the startup lines, all matched with regexes built
   from vLLM's format strings. --disable-log-stats removes the line and the
   vllm:* series.
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
SEED_QUERIES = os.path.join(HERE, "..", "metrics", "seed_queries.promql")
KEY = "metrics-key"
NAME = "tiny"

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0]
LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                   240.0, 480.0, 960.0, 1920.0, 7680.0]
TOKEN_BUCKETS = [1, 2, 5, 10, 20, 50, 100, 200, 500]  # 1-2-5 up to max_model_len 512
ENGINE = ["engine", "model_name"]
# vLLM 0.10.2's V1 families (v1/metrics/loggers.py): exposed name -> (type, label names, buckets).
VLLM_FAMILIES = {
    "vllm:num_requests_running": ("gauge", ENGINE, None),
    "vllm:num_requests_waiting": ("gauge", ENGINE, None),
    "vllm:gpu_cache_usage_perc": ("gauge", ENGINE, None),
    "vllm:gpu_prefix_cache_queries_total": ("counter", ENGINE, None),
    "vllm:gpu_prefix_cache_hits_total": ("counter", ENGINE, None),
    "vllm:kv_cache_usage_perc": ("gauge", ENGINE, None),
    "vllm:prefix_cache_queries_total": ("counter", ENGINE, None),
    "vllm:prefix_cache_hits_total": ("counter", ENGINE, None),
    "vllm:num_preemptions_total": ("counter", ENGINE, None),
    "vllm:prompt_tokens_total": ("counter", ENGINE, None),
    "vllm:generation_tokens_total": ("counter", ENGINE, None),
    "vllm:request_success_total": ("counter", ["engine", "finished_reason", "model_name"], None),
    "vllm:request_prompt_tokens": ("histogram", ENGINE, TOKEN_BUCKETS),
    "vllm:request_generation_tokens": ("histogram", ENGINE, TOKEN_BUCKETS),
    "vllm:iteration_tokens_total": ("histogram", ENGINE,
                                    [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]),
    "vllm:request_max_num_generation_tokens": ("histogram", ENGINE, TOKEN_BUCKETS),
    "vllm:request_params_n": ("histogram", ENGINE, [1, 2, 5, 10, 20]),
    "vllm:request_params_max_tokens": ("histogram", ENGINE, TOKEN_BUCKETS),
    "vllm:time_to_first_token_seconds": ("histogram", ENGINE, TTFT_BUCKETS),
    "vllm:time_per_output_token_seconds": ("histogram", ENGINE, ITL_BUCKETS),
    "vllm:inter_token_latency_seconds": ("histogram", ENGINE, ITL_BUCKETS),
    "vllm:request_time_per_output_token_seconds": ("histogram", ENGINE, ITL_BUCKETS),
    "vllm:e2e_request_latency_seconds": ("histogram", ENGINE, LATENCY_BUCKETS),
    "vllm:request_queue_time_seconds": ("histogram", ENGINE, LATENCY_BUCKETS),
    "vllm:request_inference_time_seconds": ("histogram", ENGINE, LATENCY_BUCKETS),
    "vllm:request_prefill_time_seconds": ("histogram", ENGINE, LATENCY_BUCKETS),
    "vllm:request_decode_time_seconds": ("histogram", ENGINE, LATENCY_BUCKETS),
    "vllm:cache_config_info": ("gauge", None, None),
}
LOG_PREFIX = r"(DEBUG|INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+:\d+\] "
STATS_LINE = re.compile(
    "^" + LOG_PREFIX + r"Engine 000: Avg prompt throughput: (\d+\.\d) tokens/s, Avg generation throughput: "
    r"(\d+\.\d) tokens/s, Running: (\d+) reqs, Waiting: (\d+) reqs, (Preemptions: (\d+), )?"
    r"GPU KV cache usage: (\d+\.\d)%, Prefix cache hit rate: (\d+\.\d)%$", re.M)
PREEMPT_LINE = re.compile(
    "^WARNING " + LOG_PREFIX[len("(DEBUG|INFO|WARNING|ERROR) "):] +
    r"Sequence group \S+ is preempted by PreemptionMode\.RECOMPUTE mode because there is not enough KV cache "
    r"space\. This can affect the end-to-end performance\. Increase gpu_memory_utilization or "
    r"tensor_parallel_size to provide more KV cache memory\. total_num_cumulative_preemption=(\d+)$", re.M)
STARTUP_LINES = [
    r"Model loading took \d+\.\d{4} GiB and \d+\.\d{6} seconds$",
    r"Available KV cache memory: \d+\.\d\d GiB$",
    r"GPU KV cache size: [\d,]+ tokens$",
    r"Maximum concurrency for [\d,]+ tokens per request: \d+\.\d\dx$",
    r"Chunked prefill is enabled with max_num_batched_tokens=\d+\.$",
    r"init engine \(profile, create kv cache, warmup model\) took \d+\.\d\d seconds$",
    r"Starting vLLM API server on http://127\.0\.0\.1:\d+$",
    r"Route: /metrics, Methods: GET$",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, fn, timeout=60, log=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if fn():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not happen in {timeout} s" + ("\n" + log() if log else ""))


class Server:
    def __init__(self, servelab, model, tmp, *extra):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(tmp, f"servelab-{self.port}.log"), "w+")
        env = dict(os.environ, VLLM_LOG_STATS_INTERVAL="1")
        self.proc = subprocess.Popen(
            [servelab, "serve", model, "--device", "cpu", "--host", "127.0.0.1", "--port", str(self.port), "--served-model-name",
             NAME, "--api-key", KEY, "--max-model-len", "512", "--num-gpu-blocks-override", "24",
             "--max-num-seqs", "4", *extra], stdout=self.log, stderr=subprocess.STDOUT, env=env)
        wait_until("servelab healthy", lambda: get(self.base + "/health")[0] == 200, log=self.logs)

    def logs(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None


def get(url, headers=None, timeout=30):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def parse_exposition(text):
    """{family: {"type", "help", "samples": [(name, labels dict, value)]}} of the text format."""
    fams, cur = {}, None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_ = line[7:].partition(" ")
            cur = fams.setdefault(name, {"samples": []})
            cur["help"] = help_
        elif line.startswith("# TYPE "):
            name, _, typ = line[7:].partition(" ")
            fams.setdefault(name, {"samples": []})["type"] = typ
            cur = fams[name]
        elif line and not line.startswith("#"):
            m = re.match(r'^([a-zA-Z_:][\w:]*)(\{(.*)\})? (\S+)$', line)
            assert m, line
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
            cur["samples"].append((m.group(1), labels, float(m.group(4))))
    return fams


def series(text, name, **labels):
    """The value of one sample (None when absent)."""
    for fam in parse_exposition(text).values():
        for n, l, v in fam["samples"]:
            if n == name and all(l.get(k) == v2 for k, v2 in labels.items()):
                return v
    return None


def percentile(xs, q):
    """numpy's default (linear) percentile."""
    xs = sorted(xs)
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def stream(base, body, chat=False, hang_up_after=None, sent=None):
    """One streaming request: (ttft, [gaps], e2e, usage) measured as `vllm bench serve` does.
    With a list `sent`, also appends when the response's headers arrived (seconds after the
    start): the server sends them once it has read the request, before the first token."""
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body = dict(body, stream=True, stream_options={"include_usage": True})
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft, last, gaps, usage, n_chunks = None, None, [], None, 0
    with urllib.request.urlopen(req, timeout=300) as r:
        if sent is not None:
            sent.append(time.perf_counter() - t0)
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            now = time.perf_counter()
            if ev.get("choices"):
                if ttft is None:
                    ttft = now - t0
                else:
                    gaps.append(now - last)
                last = now
                n_chunks += 1
                if hang_up_after is not None and n_chunks >= hang_up_after:
                    break  # closing the response hangs up mid-stream
            if ev.get("usage"):
                usage = ev["usage"]
    return ttft, gaps, (last or time.perf_counter()) - t0, usage


class Prometheus:
    def __init__(self, tmp, target_port):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cfg = os.path.join(tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: servelab
    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]
  - job_name: servelab-underscored
    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]
    metric_relabel_configs:
      - source_labels: [__name__]
        regex: '([^:]*):(.*)'
        target_label: __name__
        replacement: '${{1}}_${{2}}'
""")
        self.log = open(os.path.join(tmp, "prometheus.log"), "w+")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{self.port}"], stdout=self.log, stderr=subprocess.STDOUT)
        wait_until("prometheus ready", lambda: get(self.base + "/-/ready")[0] == 200, log=self.logs)

    def logs(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-3000:]

    def query(self, expr, at=None):
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        status, _, body = get(self.base + "/api/v1/query?" + urllib.parse.urlencode(params))
        out = json.loads(body)
        if status != 200 or out.get("status") != "success":
            raise RuntimeError(f"{expr}: {out}")
        return out["data"]["result"]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def seed_queries():
    out = []
    with open(SEED_QUERIES) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                seed, _, expr = line.partition("|")
                out.append((seed.strip(), expr.strip()))
    return out


def as_promql(expr):
    """The seed expression as it is evaluated (see seed_queries.promql)."""
    m = re.match(r"^(.*\S)\s*~\s*\S+$", expr)
    if m:
        return m.group(1)
    return re.sub(r"^(vllm:gpu_cache_usage_perc) > ", r"\1 > bool ", expr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--load-seconds", type=float, default=10.0)
    args = ap.parse_args()
    if not shutil.which("prometheus") or not shutil.which("promtool"):
        print("FAIL prometheus and promtool are required (scripts/install-deps.sh installs them)")
        return 1
    results = []

    def check(name, cond, detail=""):
        results.append(bool(cond))
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + str(detail)[:900]}", flush=True)

    tmp = tempfile.mkdtemp(prefix="servelab-metrics-")
    srv = Server(args.servelab, args.model, tmp)
    prom = None
    try:
        # ---- 1. exposition ---------------------------------------------------------------
        status, headers, body = get(srv.base + "/metrics")
        text = body.decode()
        check("/metrics needs no API key; Prometheus text format 0.0.4",
              status == 200 and headers.get("Content-Type") == "text/plain; version=0.0.4; charset=utf-8",
              (status, headers))
        status, headers, om = get(srv.base + "/metrics", {
            "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"})
        check("OpenMetrics when Accept asks for it",
              headers.get("Content-Type") == "application/openmetrics-text; version=1.0.0; charset=utf-8" and
              om.decode().endswith("# EOF\n") and "# TYPE vllm:prompt_tokens counter" in om.decode(),
              (headers, om[-200:]))
        lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        # promtool parses the exposition (a format error fails with "error while linting"), then lints
        # names. vLLM's own exposition gets the same lint findings: ':' in every vllm: name, and a
        # "_total" suffix on the histogram vllm:iteration_tokens_total (vLLM's name for it).
        vllm_lint = ("metric names should not contain ':'",
                     'vllm:iteration_tokens_total non-counter metrics should not have "_total" suffix')
        problems = [l for l in (lint.stdout + lint.stderr).splitlines()
                    if l.strip() and not any(w in l for w in vllm_lint)]
        check("promtool check metrics: parses, and finds only the lint vLLM's names get", not problems and
              lint.returncode in (0, 3), (lint.returncode, problems[:10]))
        fams = parse_exposition(text)
        bad = []
        for name, (typ, labels, buckets) in VLLM_FAMILIES.items():
            fam = fams.get(name)
            if not fam or fam.get("type") != typ or not fam["samples"]:
                bad.append(f"{name}: missing or not a {typ}")
                continue
            for n, l, v in fam["samples"]:
                keys = sorted(k for k in l if k != "le")
                if labels is not None and keys != labels:
                    bad.append(f"{name}: labels {keys}")
                if l.get("engine") != "0" or (labels is not None and l.get("model_name") != NAME):
                    bad.append(f"{name}: label values {l}")
            if typ == "histogram":
                les = [l["le"] for n, l, v in fam["samples"] if n.endswith("_bucket")]
                want = [repr(float(b)) for b in buckets] + ["+Inf"]
                if les != want:
                    bad.append(f"{name}: buckets {les}")
            base = name[:-len("_total")] if typ == "counter" else name
            if typ in ("counter", "histogram") and base + "_created" not in fams:
                bad.append(f"{name}: no _created family")
        reasons = sorted(l["finished_reason"] for n, l, v in fams["vllm:request_success_total"]["samples"])
        check("every vLLM V1 family: type, labels, buckets, _created", not bad, bad[:10])
        check("request_success has a child per finish reason at 0 from startup",
              reasons == ["abort", "error", "length", "stop"] and
              all(v == 0 for _, _, v in fams["vllm:request_success_total"]["samples"]), reasons)
        info = fams["vllm:cache_config_info"]["samples"][0][1]
        check("cache_config_info carries the cache config", info.get("block_size") == "16" and
              info.get("num_gpu_blocks") == "24" and info.get("enable_prefix_caching") == "True" and
              info.get("prefix_caching_hash_algo") == "sha256", info)
        check("process_* metrics", all(f in fams for f in (
            "process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds",
            "process_start_time_seconds")), sorted(fams)[:20])

        # ---- 2. Prometheus under load ----------------------------------------------------
        prom = Prometheus(tmp, srv.port)
        wait_until("two scrapes", lambda: len(prom.query("vllm:num_requests_running")) == 1 and
                   prom.query("count_over_time(vllm:num_requests_running[1m])")[0]["value"][1] >= "2",
                   timeout=30, log=prom.logs)
        ttfts, itls, lock = [], [], threading.Lock()
        sent = {"/v1/completions": 0, "/v1/chat/completions": 0}
        http_before = get(srv.base + "/metrics")[2].decode()
        deadline = time.time() + args.load_seconds
        shared = "You are a careful assistant. " * 6

        def client(k):
            i = 0
            while time.time() < deadline:
                i += 1
                chat = (k + i) % 3 == 0
                hang = 3 if (k + i) % 7 == 0 else None
                prompt = (shared if k % 2 else "") + f"Question {k}-{i}: tell me a story."
                body = ({"model": NAME, "messages": [{"role": "user", "content": prompt}]} if chat
                        else {"model": NAME, "prompt": prompt})
                body.update(max_tokens=40 + 13 * ((k * 7 + i) % 9), ignore_eos=True, temperature=0.7)
                ttft, gaps, _, _ = stream(srv.base, body, chat=chat, hang_up_after=hang)
                with lock:
                    sent["/v1/chat/completions" if chat else "/v1/completions"] += 1
                    if ttft is not None:
                        ttfts.append(ttft)
                    itls.extend(gaps)

        t_load = time.time()
        threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        t_end = time.time()
        time.sleep(2.5)  # the last scrapes
        # A moment Prometheus saw requests waiting (the saturated server of the playbooks).
        window = f"[{int(t_end - t_load) + 3}s]"
        waiting = prom.query(f"vllm:num_requests_waiting{window}", at=t_end + 1)
        sat = [float(t) for t, v in waiting[0]["values"] if float(v) > 0] if waiting else []
        check("Prometheus saw a saturated server (requests waiting)", sat, waiting)
        at = sat[len(sat) // 2] if sat else t_end
        empty = []
        for seed, expr in seed_queries():
            res = prom.query(as_promql(expr), at=at)
            if not res:
                empty.append(f"seed {seed}: {expr}")
        check(f"every seed query returns data ({len(seed_queries())} expressions)", not empty, empty)

        span = f"[{int(time.time() - t_load) + 2}s]"
        for name, client_vals, buckets in (("time_to_first_token_seconds", ttfts, TTFT_BUCKETS),
                                           ("inter_token_latency_seconds", itls, ITL_BUCKETS)):
            for q in (0.5, 0.99):
                res = prom.query(f"histogram_quantile({q}, sum by (le) "
                                 f"(increase(vllm:{name}_bucket{{job=\"servelab\"}}{span})))")
                est = float(res[0]["value"][1]) if res else float("nan")
                want = percentile(client_vals, q)
                lo = max([0.0] + [b for b in buckets if b <= want * 0.9])
                hi = min([b for b in buckets if b >= want * 1.1] + [float("inf")])
                check(f"histogram_quantile({q}) of {name} within the buckets around the clients' "
                      f"p{int(q * 100)} ({len(client_vals)} samples)", lo <= est <= hi,
                      f"prometheus {est:.4f}, clients {want:.4f}, bucket range [{lo}, {hi}]")
        prom.stop()
        prom = None
        http_after = get(srv.base + "/metrics")[2].decode()
        moved = {h: series(http_after, "http_requests_total", handler=h, method="POST", status="2xx") -
              (series(http_before, "http_requests_total", handler=h, method="POST", status="2xx") or 0)
              for h in sent}
        check("http_requests_total{status=\"2xx\"} counts every request by handler", moved == sent and
              series(http_after, "http_requests_total", handler="/metrics") is None, (moved, sent))

        # ---- 3. accuracy -------------------------------------------------------------------
        wait_until("an idle server", lambda: series(get(srv.base + "/metrics")[2].decode(),
                                                     "vllm:num_requests_running") == 0, timeout=60)
        before = get(srv.base + "/metrics")[2].decode()
        lens, outs = [7, 19, 33, 48, 64, 80, 21, 40], [200, 180, 160, 220, 140, 200, 120, 100]
        timings, headers = [None] * len(lens), [[] for _ in lens]

        def known(i):
            prompt = [1] + [5 + (i * 37 + j * 11) % 900 for j in range(lens[i] - 1)]
            timings[i] = stream(srv.base, {"model": NAME, "prompt": prompt, "max_tokens": outs[i],
                                           "ignore_eos": True, "temperature": 0}, sent=headers[i])
        threads = [threading.Thread(target=known, args=(i,)) for i in range(len(lens))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wait_until("the last request recorded", lambda: series(get(srv.base + "/metrics")[2].decode(),
                   "vllm:e2e_request_latency_seconds_count") - series(before, "vllm:e2e_request_latency_seconds_count")
                   >= len(lens), timeout=30)
        after = get(srv.base + "/metrics")[2].decode()

        def delta(name, **labels):
            return series(after, name, **labels) - series(before, name, **labels)
        check("prompt_tokens_total moved by the exact prompt tokens", delta("vllm:prompt_tokens_total") == sum(lens),
              (delta("vllm:prompt_tokens_total"), sum(lens)))
        check("generation_tokens_total moved by the exact output tokens",
              delta("vllm:generation_tokens_total") == sum(outs), (delta("vllm:generation_tokens_total"), sum(outs)))
        check("request_success_total{finished_reason=length} moved by the request count",
              delta("vllm:request_success_total", finished_reason="length") == len(lens))
        check("usage events agree", [t[3]["completion_tokens"] for t in timings] == outs and
              [t[3]["prompt_tokens"] for t in timings] == lens, [t[3] for t in timings])
        # The server's interval (from reading the request to the token, or to the last one)
        # lies inside the client's, which also holds connecting and sending: the server's sum
        # is at most the clients' (1 ms a request for the clocks). Connecting eight clients at
        # once costs them up to several ms each on a busy machine, so the lower bound starts
        # each client's interval when the response's headers arrived (the server sends them
        # once it has read the request): short of the server's by at most 5% plus, per
        # request, three round trips of a trivial request (the token's way back).
        rtts = []
        for _ in range(21):
            t0 = time.perf_counter()
            get(srv.base + "/health")
            rtts.append(time.perf_counter() - t0)
        rtt = sorted(rtts)[len(rtts) // 2]
        for metric, idx in (("vllm:time_to_first_token_seconds_sum", 0), ("vllm:e2e_request_latency_seconds_sum", 2)):
            server_sum, client_sum = delta(metric), sum(t[idx] for t in timings)
            after_headers = sum(t[idx] - h[0] for t, h in zip(timings, headers))
            slack = 0.05 * after_headers + len(timings) * 3 * rtt
            check(f"{metric} agrees with the clients' timings (inside them; short of them from the response "
                  f"headers on by at most 5% + 3 round trips a request)",
                  server_sum <= client_sum + 0.001 * len(timings) and after_headers - server_sum <= slack,
                  f"server {server_sum:.4f} s, clients {client_sum:.4f} s ({after_headers:.4f} s from the "
                  f"headers), round trip {rtt * 1e3:.2f} ms")

        # ---- 4. logs -----------------------------------------------------------------------
        logs = srv.logs()
        lines = STATS_LINE.findall(logs)
        check("periodic stats line in vLLM's format", lines and any(int(l[3]) > 0 for l in lines),
              [l for l in logs.splitlines() if "Engine 000" in l][:3])
        check("stats line shows Preemptions: N during preemptions", any(l[4] for l in lines),
              [l for l in logs.splitlines() if "Engine 000" in l][-3:])
        warn = PREEMPT_LINE.findall(logs)
        total_preempt = series(after, "vllm:num_preemptions_total")
        check("preemption warning with V0's wording, every 50th from the first",
              warn and warn[0] == "1" and all((int(c) - 1) % 50 == 0 for c in warn) and
              len(warn) == (int(total_preempt) + 49) // 50, (warn, total_preempt))
        missing = [p for p in STARTUP_LINES if not re.search("^" + LOG_PREFIX + p, logs, re.M)]
        check("startup lines", not missing, missing)
    finally:
        if prom:
            prom.stop()
        code = srv.stop()
    check("graceful exit", code == 0, code)

    # --disable-log-stats: no stats line, no vllm:* series (process_* and http_* remain).
    quiet = Server(args.servelab, args.model, tmp, "--disable-log-stats")
    try:
        time.sleep(1.5)
        text = get(quiet.base + "/metrics")[2].decode()
        check("--disable-log-stats: no vllm:* series, process_* still there",
              "vllm:" not in text and "process_resident_memory_bytes" in text, text[:300])
        check("--disable-log-stats: no stats line", "Engine 000" not in quiet.logs())
    finally:
        quiet.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
