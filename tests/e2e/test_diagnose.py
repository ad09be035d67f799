#!/usr/bin/env python3
"""`servelab diagnose` against real servers (docs/lab.md): for each fault a CPU can show, a
baseline window of healthy load, then the fault switched on through the admin API, and
`servelab diagnose --json --baseline` must name the fault's cause; cleared, it must say
`healthy` again. The load is `servelab bench serve` (models/tiny) or chat requests through the
official `openai` package (the real SmolLM2, where output matters: runaway generation, garbled
output against golden answers). Every case runs --repeat times (2 by default), so a verdict that
depends on one run's timings shows up as a failure here, not in a lab.

Thresholds are the diagnoser's own (src/lab/diagnose.c), relative to the baseline window; this
test chooses only the faults' sizes, large against the noise of a 2-core machine."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import KEY, NAME, Server, free_port, raw  # noqa: E402
from test_lab import ADMIN, admin, check  # noqa: E402


class BenchLoad:
    """`servelab bench serve` at a fixed concurrency, run after run until stopped (a run sizes
    its prompts first, so a short one starts at once)."""

    def __init__(self, a, srv, concurrency=4, input_len=32, output_len=16):
        self.cmd = [a.servelab, "bench", "serve", "--base-url", srv.base, "--model", NAME, "--dataset-name",
                    "random", "--num-prompts", "3000", "--max-concurrency", str(concurrency),
                    "--random-input-len", str(input_len), "--random-output-len", str(output_len), "--seed", "1"]
        self.env = dict(os.environ, OPENAI_API_KEY=KEY)
        self.stopping = threading.Event()
        self.proc = None
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        self.srv = srv
        # Its own requests flowing (a few dozen), not a stopped run's last ones.
        gen = lambda: metric_sum(srv, "vllm:generation_tokens_total")  # noqa: E731
        before, deadline = gen(), time.monotonic() + 30
        while gen() < before + 500 and time.monotonic() < deadline:
            time.sleep(0.1)
        check(gen() >= before + 500, "bench serve is loading the server")

    def run(self):
        while not self.stopping.is_set():
            with self.lock:
                if self.stopping.is_set():
                    return
                self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                             env=self.env)
            self.proc.wait()

    def stop(self):
        with self.lock:
            self.stopping.set()
            if self.proc:
                self.proc.terminate()
        self.thread.join(timeout=15)
        # Until the server has nothing left of it, running or waiting.
        deadline = time.monotonic() + 15
        while (metric_sum(self.srv, "vllm:num_requests_running") + metric_sum(self.srv, "vllm:num_requests_waiting")
               > 0 and time.monotonic() < deadline):
            time.sleep(0.1)


def metric_sum(srv, name):
    _, _, b = raw(srv.base, "GET", "/metrics")
    return sum(float(line.rsplit(" ", 1)[1]) for line in b.decode().splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


class ChatLoad:
    """Chat questions a model answers briefly, `clients` at a time, until stopped."""
    QUESTIONS = ["What is the capital of France?", "What is 2 + 2?",
                 "Answer with one word: what color is the sky?", "Say hello."]

    def __init__(self, srv, clients=2, max_tokens=48):
        from openai import OpenAI
        self.client = OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=120)
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i, max_tokens), daemon=True) for i in range(clients)]
        for t in self.threads:
            t.start()

    def run(self, i, max_tokens):
        k = i
        while not self.stopping.is_set():
            q = self.QUESTIONS[k % len(self.QUESTIONS)]
            k += 1
            try:
                self.client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": q}],
                                                    max_tokens=max_tokens, temperature=0)
            except Exception:  # noqa: BLE001 - the server's verdict is what is tested
                time.sleep(0.1)

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=120)


def diagnose(a, srv, window, *extra):
    cmd = [a.servelab, "diagnose", "--url", srv.base, "--window", f"{window}s", "--interval", "0.5s", "--json",
           *extra]  # a later --window (Prometheus' cases) wins
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=window + 120,
                       env=dict(os.environ, OPENAI_API_KEY=KEY))
    if p.returncode not in (0, 3):
        raise AssertionError(f"diagnose exited {p.returncode}: {p.stderr}")
    report = json.loads(p.stdout)
    check(p.returncode == (0 if report["cause"] == "healthy" else 3), "exit status 0 healthy, 3 otherwise")
    return report


def expect(report, cause, what):
    ranked = [(r["cause"], r["score"]) for r in report["ranked"]]
    numbers = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in report["metrics"].items() if v is not None}
    base = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in (report["baseline"] or {}).items()
            if v is not None}
    detail = (f"got {report['cause']}; ranked {ranked}; evidence {report['evidence']}; metrics {numbers}; "
              f"baseline {base}")
    check(report["cause"] == cause, f"{what}: diagnose says {cause}" + ("" if report["cause"] == cause else
                                                                      f" ({detail})"))


def set_fault(srv, name, params):
    st, b = admin(srv, "POST", body={"name": name, "params": params})
    check(st == 200, f"{name} set with {params}")


def clear_faults(srv):
    check(admin(srv, "DELETE")[0] == 200, "faults cleared")


# (fault, params, expected cause, settle seconds before the window, extra diagnose flags)
TINY_CASES = [
    ("step_delay", {"ms": 25}, "decode_bound", 1.0, []),
    ("http_error", {"rate": 50, "types": ["server_error", "rate_limit"]}, "http_errors", 1.0, []),
    ("engine_stall", {}, "engine_stalled", 1.0, []),
    ("kv_leak", {"blocks": 2}, "kv_leak", 1.0, []),
    ("tokenize_cost", {"us_per_token": 2000}, "tokenizer_bound", 1.0, []),
    ("oom", {"prompt_tokens": 16}, "oom", 1.0, ["--log", "{log}"]),
    # Streams held between server and client: the engine is fine; fewer requests reach it than
    # the clients have in flight (seed 004's sanity check), and nothing else fires.
    ("stream_delay", {"ms": 30}, "upstream_bottleneck", 1.0, ["--expected-inflight", "4"]),
    # Bursty streams change only what the client sees: the server is healthy, and says so.
    ("stream_coalesce", {"tokens": 4}, "healthy", 1.0, []),
]


def tiny_cases(a, tmp, rep):
    srv = Server(a.servelab, a.model, "--enable-fault-injection", "--admin-key", ADMIN)
    load = None
    try:
        load = BenchLoad(a, srv)
        base = diagnose(a, srv, a.window)
        expect(base, "healthy", "healthy load, no baseline")
        base_path = os.path.join(tmp, f"baseline-tiny-{rep}.json")
        with open(base_path, "w") as f:
            json.dump(base, f)
        expect(diagnose(a, srv, a.window, "--baseline", base_path), "healthy", "healthy load against its baseline")
        if rep == 0:  # seed 003's one-click collector
            bundle = os.path.join(tmp, "bundle")
            diagnose(a, srv, 1, "--collect", bundle, "--log", srv.log.name)
            files = sorted(os.listdir(bundle))
            check(files == ["cache_config_info.txt", "log_tail.txt", "metrics.txt", "models.json", "verdict.json",
                            "verdict.txt", "version.json"], f"--collect writes the bundle ({files})")
            with open(os.path.join(bundle, "cache_config_info.txt")) as f:
                check(f.read().startswith("vllm:cache_config_info{") , "the bundle has vllm:cache_config_info")
            with open(os.path.join(bundle, "verdict.json")) as f:
                check(json.load(f)["cause"] == "healthy", "the bundle has the verdict")
            with open(os.path.join(bundle, "log_tail.txt")) as f:
                tail = f.read()
            check(len(tail) > 200 and tail[-200:] in srv.logs(), "the bundle has the log tail")
        load.stop()
        for fault, params, cause, settle, flags in TINY_CASES:
            if a.only and fault not in a.only:
                continue
            # A fresh load per case: a fault that fails requests fast ends a bench run early, and
            # a new run sizes its prompts through /tokenize, which tokenize_cost slows too.
            load = BenchLoad(a, srv)
            set_fault(srv, fault, params)
            time.sleep(settle)
            extra = [srv.log.name if f == "{log}" else f for f in flags]
            expect(diagnose(a, srv, a.window, "--baseline", base_path, *extra), cause, fault)
            clear_faults(srv)
            if rep == 0:  # once: cleared, the server is healthy again
                time.sleep(2.0)
                expect(diagnose(a, srv, a.window, "--baseline", base_path), "healthy", f"{fault} cleared")
            load.stop()
        load = None
    finally:
        if load:
            load.stop()
        srv.stop()


class Prometheus:
    """A real Prometheus (the Debian package) scraping one server every second."""

    def __init__(self, tmp, srv):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cfg = os.path.join(tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
                    f"scrape_configs: [{{job_name: servelab, static_configs: [{{targets: ['127.0.0.1:{srv.port}']}}]}}]\n")
        self.log = open(os.path.join(tmp, "prometheus.log"), "w+")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{self.port}"], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not self.ready():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.log.seek(0)
                raise AssertionError("prometheus did not start: " + self.log.read()[-2000:])
            time.sleep(0.2)

    def scraped(self):
        """Whether the server's series are in: `up` is 1 for it."""
        st, _, b = raw(self.base, "GET", "/api/v1/query?query=up")
        return st == 200 and any(r["value"][1] == "1" for r in json.loads(b)["data"]["result"])

    def ready(self):
        try:
            return raw(self.base, "GET", "/-/ready")[0] == 200
        except OSError:  # not listening yet
            return False

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def prometheus_case(a, tmp):
    """The same verdicts from a Prometheus that scrapes the server as from scraping it."""
    srv = Server(a.servelab, a.model, "--enable-fault-injection", "--admin-key", ADMIN)
    prom = load = None
    try:
        prom = Prometheus(tmp, srv)
        load = BenchLoad(a, srv)
        deadline = time.monotonic() + 30
        while not prom.scraped() and time.monotonic() < deadline:
            time.sleep(0.5)
        check(prom.scraped(), "Prometheus scrapes the server")
        time.sleep(a.window + 1)  # the window Prometheus is asked about must be all load
        q = ["--prometheus", prom.base, "--window", f"{a.window}s", "--interval", "1s"]
        base = diagnose(a, srv, a.window, *q)
        expect(base, "healthy", "healthy load, read from Prometheus")
        base_path = os.path.join(tmp, "baseline-prometheus.json")
        with open(base_path, "w") as f:
            json.dump(base, f)
        check(base["metrics"]["requests_finished"] > 0 and base["metrics"]["ttft_p50"] is not None,
              "Prometheus' series give the measures")
        set_fault(srv, "http_error", {"rate": 50})
        time.sleep(a.window + 1)
        expect(diagnose(a, srv, a.window, *q, "--baseline", base_path), "http_errors", "http_error, read from Prometheus")
        clear_faults(srv)
    finally:
        if load:
            load.stop()
        if prom:
            prom.stop()
        srv.stop()


# Load shapes, not faults: (name, server flags, clients, prompt and output tokens, cause). No
# baseline: these rules read the run's own shares.
LOAD_CASES = [
    # 8 clients for 2 sequence slots: requests wait for a slot, queue time is most of TTFT.
    ("queueing", ["--max-num-seqs", "2"], 8, 32, 16, "queueing"),
    # 16 clients of 6 blocks each for a 40-block cache: full, requests wait, some are preempted,
    # fewer than finish (kv_pressure ranks above the queueing it causes; a storm would rank
    # above it: scenario preemption_storm).
    ("kv_pressure", [], 16, 64, 32, "kv_pressure"),
]


def load_cases(a):
    for name, flags, clients, input_len, output_len, cause in LOAD_CASES:
        if a.only and name not in a.only:
            continue
        srv = Server(a.servelab, a.model, *flags)
        load = None
        try:
            load = BenchLoad(a, srv, clients, input_len, output_len)
            time.sleep(1)
            report = diagnose(a, srv, a.window)
            expect(report, cause, f"{name} load")
            if name == "kv_pressure":
                ranked = [r["cause"] for r in report["ranked"]]
                n, per = report["metrics"].get("preemptions"), report["metrics"].get("preemptions_per_request")
                known = isinstance(n, (int, float)) and isinstance(per, (int, float))  # null: no data
                check(known and n >= 1 and per < 1 and "queueing" in ranked,
                      f"with preemptions, fewer than finished requests ({n} preemptions, {per} a request), "
                      f"and the queue ranked below it ({ranked})")
        finally:
            if load:
                load.stop()
            srv.stop()


class CompletionLoad:
    """`clients` closed-loop completions straight away (no prompt sizing first), until stopped."""

    def __init__(self, srv, clients=4):
        self.srv, self.stopping = srv, threading.Event()
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(clients)]
        for t in self.threads:
            t.start()

    def run(self):
        body = json.dumps({"model": NAME, "prompt": "hello world, the weather today", "max_tokens": 16}).encode()
        headers = {"Content-Type": "application/json", "Authorization": "Bearer " + KEY}
        while not self.stopping.is_set():
            raw(self.srv.base, "POST", "/v1/completions", body, headers)

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=60)


def cold_start_case(a):
    """A server booted with `--fault cold_start`, its first requests arriving while diagnose
    watches (seed 000: the first request after load)."""
    srv = Server(a.servelab, a.model, "--fault", "cold_start:steps=3,ms=600")
    load = None
    try:
        cmd = [a.servelab, "diagnose", "--url", srv.base, "--window", f"{a.window + 3}s", "--interval", "0.5s",
               "--json"]
        watch = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)
        load = CompletionLoad(srv)
        out, err = watch.communicate(timeout=a.window + 60)
        report = json.loads(out)
        expect(report, "cold_start", "cold_start at boot")
    finally:
        if load:
            load.stop()
        srv.stop()


def smollm_cases(a, tmp, rep):
    srv = Server(a.servelab, a.smollm, "--enable-fault-injection", "--admin-key", ADMIN)
    load = None
    try:
        # Golden answers, recorded from the healthy model (temperature 0, no other load).
        golden = os.path.join(tmp, f"golden-{rep}.json")
        with open(golden, "w") as f:
            json.dump({"prompts": [{"prompt": "The capital of France is", "max_tokens": 12},
                                   {"prompt": "Water boils at a temperature of", "max_tokens": 12}]}, f)
        p = subprocess.run([a.servelab, "diagnose", "--url", srv.base, "--record-golden", golden],
                           capture_output=True, text=True, env=dict(os.environ, OPENAI_API_KEY=KEY), timeout=120)
        check(p.returncode == 0, "golden answers recorded: " + p.stderr.strip())
        expect(diagnose(a, srv, 1, "--golden", golden), "healthy", "golden prompts replay identically")
        set_fault(srv, "logit_noise", {"scale": 8})
        report = diagnose(a, srv, 1, "--golden", golden)
        expect(report, "output_regression", "logit_noise")
        check(report["metrics"]["golden_mismatches"] >= 1, "the garbled answers differ from the golden ones")
        clear_faults(srv)
        expect(diagnose(a, srv, 1, "--golden", golden), "healthy", "logit_noise cleared: the golden answers again")
        # Sampled golden prompts: a seed replays alike; without one each replay answers anew, and
        # asked again a changed prompt answers a third way (sampling, not a changed model).
        seeded, unseeded = '{"temperature": 1.5, "seed": 7}', '{"temperature": 1.5, "seed": null}'
        sampled = os.path.join(tmp, f"golden-sampled-{rep}.json")
        with open(golden) as f, open(sampled, "w") as g:
            g.write(f.read())
        p = subprocess.run([a.servelab, "diagnose", "--url", srv.base, "--record-golden", sampled,
                            "--golden-request", seeded],
                           capture_output=True, text=True, env=dict(os.environ, OPENAI_API_KEY=KEY), timeout=120)
        check(p.returncode == 0, "sampled golden answers recorded with a seed: " + p.stderr.strip())
        expect(diagnose(a, srv, 1, "--golden", sampled, "--golden-request", seeded), "healthy",
               "a seeded sampled replay gives the recorded answers")
        report = diagnose(a, srv, 1, "--golden", sampled, "--golden-request", unseeded)
        expect(report, "nondeterministic_output", "no seed: each replay samples anew")
        m = report["metrics"]
        check(1 <= m["golden_unstable"] <= m["golden_mismatches"], f"unstable answers counted: {m}")
        check(not any(r["cause"] == "output_regression" for r in report["ranked"]),
              "answers that change on each replay are not an output regression")
        # A client's token budget that cuts the prompts: the server counts fewer tokens than /tokenize.
        report = diagnose(a, srv, 1, "--golden", golden, "--golden-request", '{"truncate_prompt_tokens": 3}')
        expect(report, "prompt_truncated", "truncate_prompt_tokens 3")
        check(report["metrics"]["golden_truncated"] == 2, f"both prompts cut: {report['metrics']['golden_truncated']}")
        report = diagnose(a, srv, 1, "--golden", golden, "--golden-request", '{"truncate_prompt_tokens": 64}')
        expect(report, "healthy", "truncate_prompt_tokens above the prompts' length cuts nothing")
        p = subprocess.run([a.servelab, "diagnose", "--url", srv.base, "--golden", golden, "--golden-request", "[1]"],
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == 2 and "--golden-request must be a JSON object" in p.stderr,
              "a --golden-request that is not an object exits 2: " + p.stderr.strip())

        load = ChatLoad(srv)
        time.sleep(1)
        base = diagnose(a, srv, a.chat_window)
        base_path = os.path.join(tmp, f"baseline-smollm-{rep}.json")
        with open(base_path, "w") as f:
            json.dump(base, f)
        check(base["metrics"]["finished_length_share"] is not None and base["metrics"]["finished_length_share"] < 0.5,
              "SmolLM2 ends most answers on its own")
        set_fault(srv, "suppress_eos", {})
        time.sleep(2)
        expect(diagnose(a, srv, a.chat_window, "--baseline", base_path), "runaway_generation", "suppress_eos")
        clear_faults(srv)
    finally:
        if load:
            load.stop()
        srv.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--model", required=True, help="models/tiny")
    ap.add_argument("--smollm", help="the SmolLM2 checkpoint (scripts/demo-model.sh); its cases need it")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--window", type=float, default=3.0)
    ap.add_argument("--chat-window", type=float, default=5.0)
    ap.add_argument("--only", nargs="*", help="run only these tiny-model faults")
    a = ap.parse_args()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.repeat):
            print(f"--- run {rep + 1} of {a.repeat}")
            tiny_cases(a, tmp, rep)
            cold_start_case(a)
            load_cases(a)
            if rep == 0:
                prometheus_case(a, tmp)
            if a.smollm:
                smollm_cases(a, tmp, rep)
    print(f"PASS test_diagnose in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
