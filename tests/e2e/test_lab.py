#!/usr/bin/env python3
"""The lab's fault injection (docs/lab.md) against a real `servelab serve` on models/tiny:
the admin API's guards (404 without --enable-fault-injection, 401 without the admin key, the API
key refused as one), its list, step_delay slowing real completions (and nothing left once
cleared), suppress_eos running past stop_token_ids to max_tokens, http_error's counted 429s,
400s listing the valid names, --fault at startup and its precise errors; the server-side faults:
tokenize_cost's real CPU time and TTFT, stream_delay's slow stream beside a healthy ITL,
stream_coalesce's fewer events with the same text, finish_reason and usage; the engine's faults
(engine_stall, kv_leak, oom, cold_start, logit_noise) each measured where it acts; allreduce_delay
on a -tp 2 server, moving ITL and servelab:tp_allreduce_seconds_total by (2 x layers + 1) x the
delay per token, and nothing at -tp 1."""
import argparse
import http.client
import json
import math
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import KEY, NAME, Server, raw  # noqa: E402

ADMIN = "lab-admin-key"


def admin(srv, method, path="/admin/faults", body=None, key=ADMIN):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    st, _, b = raw(srv.base, method, path, data, headers)
    return st, b


def complete(srv, max_tokens, prompt="hello world", **extra):
    body = {"model": NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **extra}
    t0 = time.monotonic()
    st, _, b = raw(srv.base, "POST", "/v1/completions", json.dumps(body).encode(),
                   {"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
    return st, json.loads(b), time.monotonic() - t0


def metric(srv, name, fault):
    st, _, b = raw(srv.base, "GET", "/metrics")
    assert st == 200
    m = re.search(r'^%s\{fault="%s"\} (\S+)$' % (re.escape(name), fault), b.decode(), re.M)
    assert m, f"{name}{{fault={fault}}} missing"
    return float(m.group(1))


def series(srv, name):
    """The sum of every sample of `name` (all its labels) on /metrics."""
    st, _, b = raw(srv.base, "GET", "/metrics")
    assert st == 200
    vals = re.findall(r'^%s(?:\{[^}]*\})? (\S+)$' % re.escape(name), b.decode(), re.M)
    assert vals, f"{name} missing"
    return sum(float(v) for v in vals)


def stream(srv, path, body):
    """A streamed request: (seconds until [DONE], [(seconds, parsed event or "[DONE]")])."""
    host, port = srv.base[len("http://"):].split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=120)
    t0 = time.monotonic()
    c.request("POST", path, json.dumps({"model": NAME, "temperature": 0, "stream": True, **body}),
              {"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
    resp = c.getresponse()
    assert resp.status == 200, resp.read()
    events = []
    for line in resp:
        line = line.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[len("data: "):]
        events.append((time.monotonic() - t0, data if data == "[DONE]" else json.loads(data)))
        if data == "[DONE]":
            break
    c.close()
    return time.monotonic() - t0, events


def content(events, chat):
    """The events that carry a choice's tokens (chat: not the role event), and their text joined."""
    out = [e for _, e in events if e != "[DONE]" and e["choices"] and
           not (chat and "role" in e["choices"][0]["delta"])]
    text = "".join(e["choices"][0]["delta"].get("content", "") if chat else e["choices"][0]["text"] for e in out)
    return out, text
def vllm(srv, name):
    """The value of an engine series of vLLM's (one child: this server's model)."""
    st, _, b = raw(srv.base, "GET", "/metrics")
    assert st == 200
    m = re.search(r'^%s\{[^}]*\} (\S+)$' % re.escape(name), b.decode(), re.M)
    assert m, f"{name} missing"
    return float(m.group(1))


def in_thread(fn, *args, **kw):
    """Runs fn in a thread; the returned list gets its result."""
    out = []
    t = threading.Thread(target=lambda: out.append(fn(*args, **kw)), daemon=True)
    t.start()
    return t, out


def wait_for(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)
    print("ok:", msg)


def test_admin_api_absent_without_flag(a):
    srv = Server(a.servelab, a.model, "--admin-key", ADMIN)
    try:
        st, _ = admin(srv, "GET")
        check(st == 404, "without --enable-fault-injection /admin/faults is 404")
        st, _, b = raw(srv.base, "GET", "/metrics")
        check(b"servelab:fault_active" not in b, "without the lab no servelab:fault_* series")
    finally:
        srv.stop()


def test_lab(a):
    srv = Server(a.servelab, a.model, "--enable-fault-injection", "--admin-key", ADMIN, "--seed", "7")
    try:
        check(admin(srv, "GET", key=None)[0] == 401, "no admin key: 401")
        check(admin(srv, "GET", key="wrong")[0] == 401, "wrong admin key: 401")
        check(admin(srv, "GET", key=KEY)[0] == 401, "the API key is not an admin key: 401")
        st, b = admin(srv, "GET")
        faults = {f["name"]: f for f in json.loads(b)["faults"]}
        check(st == 200 and list(faults) == ["step_delay", "engine_stall", "tokenize_cost", "stream_delay", "stream_coalesce",
                                            "kv_leak", "oom", "cold_start", "suppress_eos", "logit_noise", "http_error",
                                            "allreduce_delay"],
              "GET lists every fault, in the table's order")
        check(faults["logit_noise"]["params"][0]["type"] == "number" and faults["oom"]["params"][1]["default"] is None,
              "a float parameter is a number; an optional limit has no default")
        check([p["name"] for p in faults["step_delay"]["params"]] == ["ms"] and
              faults["step_delay"]["params"][0]["unit"] == "ms", "step_delay's ms, with its unit")
        check([p["name"] for p in faults["http_error"]["params"]] == ["rate", "types", "count"], "http_error's params")
        check(not any(f["active"] for f in faults.values()), "every fault off at start")

        # Bad names, parameters and bodies: 400s that list the valid ones.
        st, b = admin(srv, "POST", body={"name": "nope"})
        check(st == 400 and b"step_delay" in b and b"http_error" in b, "unknown fault: 400 listing the faults")
        st, b = admin(srv, "POST", body={"name": "step_delay", "params": {"ms": 0}})
        check(st == 400 and b"1..60000" in b, "ms=0: 400 with the valid range")
        st, b = admin(srv, "POST", body={"name": "step_delay", "params": {"bogus": 1}})
        check(st == 400 and b"ms" in b, "unknown parameter: 400 listing the valid ones")
        st, b = admin(srv, "POST", body={"name": "step_delay"})
        check(st == 400 and b"missing" in b, "step_delay without ms: 400")
        st, b = admin(srv, "POST", body={"name": "http_error", "params": {"types": ["teapot"]}})
        check(st == 400 and b"rate_limit" in b, "unknown http_error type: 400 listing the types")
        st, b = admin(srv, "POST", body=b"{not json")
        check(st == 400, "bad JSON: 400")
        st, b = admin(srv, "DELETE", "/admin/faults/nope")
        check(st == 400 and b"suppress_eos" in b, "DELETE of an unknown fault: 400 listing the faults")

        # step_delay: real latency, per step.
        n = 8
        complete(srv, n)  # warm
        base = min(complete(srv, n)[2] for _ in range(3))
        st, b = admin(srv, "POST", body={"name": "step_delay", "params": {"ms": 200}})
        check(st == 200, "step_delay ms=200 set")
        check(metric(srv, "servelab:fault_active", "step_delay") == 1, "fault_active{step_delay} 1")
        inj0 = metric(srv, "servelab:fault_injections_total", "step_delay")
        st, body, slow = complete(srv, n)
        check(st == 200 and body["usage"]["completion_tokens"] == n, "the completion still succeeds")
        check(slow >= base + (n - 1) * 0.2, f"latency grew by >= steps x 200 ms ({base:.3f} s -> {slow:.3f} s)")
        inj1 = metric(srv, "servelab:fault_injections_total", "step_delay")
        check(inj1 - inj0 >= n, f"injections_total counts the delayed steps (+{inj1 - inj0:.0f})")
        st, _ = admin(srv, "DELETE", "/admin/faults/step_delay")
        check(st == 200 and metric(srv, "servelab:fault_active", "step_delay") == 0, "DELETE clears: fault_active 0")
        after = min(complete(srv, n)[2] for _ in range(3))
        check(after < base + (n - 1) * 0.2 / 2, f"latency back to baseline ({after:.3f} s vs {base:.3f} s)")
        faults = {f["name"]: f for f in json.loads(admin(srv, "GET")[1])["faults"]}
        check(not faults["step_delay"]["active"] and faults["step_delay"]["params"][0]["value"] is None,
              "no residue: inactive, no value")

        # suppress_eos: a stop token id that ends the request early, then not.
        st, body, _ = complete(srv, 16)
        first = raw(srv.base, "POST", "/tokenize", json.dumps({"model": NAME, "prompt": body["choices"][0]["text"],
                    "add_special_tokens": False}).encode(), {"Content-Type": "application/json"})
        ids = json.loads(first[2])["tokens"]
        stop_id = ids[1] if len(ids) > 1 else ids[0]
        st, body, _ = complete(srv, 16, stop_token_ids=[stop_id])
        check(body["choices"][0]["finish_reason"] == "stop" and body["usage"]["completion_tokens"] < 16,
              f"stop_token_ids [{stop_id}] ends the request early without the fault")
        st, _ = admin(srv, "POST", body={"name": "suppress_eos"})
        check(st == 200, "suppress_eos set")
        st, body, _ = complete(srv, 16, stop_token_ids=[stop_id])
        check(body["choices"][0]["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 16,
              "with suppress_eos the request runs to max_tokens (finish_reason length)")
        check(metric(srv, "servelab:fault_injections_total", "suppress_eos") >= 1, "suppressed stops counted")
        admin(srv, "DELETE", "/admin/faults/suppress_eos")
        st, body, _ = complete(srv, 16, stop_token_ids=[stop_id])
        check(body["choices"][0]["finish_reason"] == "stop", "cleared: the stop token ends it again")

        # http_error: exactly the next 2 requests fail with 429, the third succeeds.
        st, _ = admin(srv, "POST", body={"name": "http_error", "params": {"count": 2, "types": "rate_limit"}})
        check(st == 200, "http_error count=2 types=rate_limit set")
        for i in range(2):
            st, body, _ = complete(srv, 2)
            check(st == 429 and body["error"]["type"] == "RateLimitError" and body["error"]["code"] == 429,
                  f"request {i + 1}: 429 with an OpenAI error body")
        st, body, _ = complete(srv, 2)
        check(st == 200, "the third request succeeds")
        check(metric(srv, "servelab:fault_injections_total", "http_error") == 2, "injections_total counts 2")
        check(metric(srv, "servelab:fault_active", "http_error") == 0, "the counted fault cleared itself")

        test_server_faults(srv)

        # DELETE /admin/faults clears every fault.
        admin(srv, "POST", body={"name": "suppress_eos"})
        admin(srv, "POST", body={"name": "http_error", "params": {"rate": 0}})
        st, b = admin(srv, "DELETE")
        check(st == 200 and not any(f["active"] for f in json.loads(b)["faults"]), "DELETE /admin/faults clears all")
        logs = srv.logs()
        check("Fault injection: step_delay set with ms=200" in logs and "Fault injection: step_delay cleared" in logs,
              "each change logged")
    finally:
        srv.stop()


def test_server_faults(srv):
    # tokenize_cost: CPU time and TTFT grow by the prompt's tokens x us_per_token, then back.
    prompt, us = "hello world " * 70, 2000

    def long_prompt():
        cpu0, ttft0 = series(srv, "process_cpu_seconds_total"), series(srv, "vllm:time_to_first_token_seconds_sum")
        n0 = series(srv, "vllm:time_to_first_token_seconds_count")
        st, body, t = complete(srv, 1, prompt=prompt)
        assert st == 200, body
        # The engine records a finished request's TTFT after posting its last event, so the
        # answer can reach us first: wait for the observation.
        wait_for(lambda: series(srv, "vllm:time_to_first_token_seconds_count") > n0, 5)
        return (body["usage"]["prompt_tokens"], series(srv, "process_cpu_seconds_total") - cpu0,
                series(srv, "vllm:time_to_first_token_seconds_sum") - ttft0, t)
    long_prompt()  # warm
    n, cpu_base, ttft_base, t_base = long_prompt()
    check(admin(srv, "POST", body={"name": "tokenize_cost", "params": {"us_per_token": us}})[0] == 200,
          f"tokenize_cost us_per_token={us} set")
    inj0 = metric(srv, "servelab:fault_injections_total", "tokenize_cost")
    n, cpu, ttft, t = long_prompt()
    want = n * us * 1e-6
    check(cpu >= 0.7 * want, f"process CPU grew {cpu:.3f} s for {n} prompt tokens (>= 70% of {want:.3f} s; "
          f"{cpu_base:.3f} s without)")
    check(t - t_base >= 0.7 * want and ttft - ttft_base >= 0.7 * want,
          f"latency and TTFT grew ({t_base:.3f} -> {t:.3f} s, TTFT {ttft_base:.3f} -> {ttft:.3f} s)")
    check(metric(srv, "servelab:fault_injections_total", "tokenize_cost") - inj0 == n,
          f"injections_total counts the {n} prompt tokens charged")
    admin(srv, "DELETE", "/admin/faults/tokenize_cost")
    n, cpu, ttft, t = long_prompt()
    check(cpu < 0.35 * want and t < t_base + 0.35 * want,
          f"cleared: CPU {cpu:.3f} s, latency {t:.3f} s, as before ({cpu_base:.3f} s, {t_base:.3f} s)")

    # stream_delay: each event held ms at the client while the engine's ITL stays healthy.
    n, ms = 8, 150
    body = {"prompt": "hello world", "max_tokens": n}
    t_base, _ = stream(srv, "/v1/completions", body)
    check(admin(srv, "POST", body={"name": "stream_delay", "params": {"ms": ms}})[0] == 200, f"stream_delay ms={ms} set")
    itl_s0, itl_n0 = series(srv, "vllm:inter_token_latency_seconds_sum"), series(srv, "vllm:inter_token_latency_seconds_count")
    inj0 = metric(srv, "servelab:fault_injections_total", "stream_delay")
    t, events = stream(srv, "/v1/completions", body)
    itl_n = series(srv, "vllm:inter_token_latency_seconds_count") - itl_n0
    itl = (series(srv, "vllm:inter_token_latency_seconds_sum") - itl_s0) / max(itl_n, 1)
    check(len(content(events, False)[0]) == n and t >= n * ms * 1e-3,
          f"a stream of {n} tokens takes {t:.3f} s at the client (>= {n} x {ms} ms; {t_base:.3f} s without)")
    check(itl_n >= n - 1 and itl < 0.25 * ms * 1e-3, f"the server's ITL stays healthy ({itl * 1e3:.1f} ms per token)")
    check(metric(srv, "servelab:fault_injections_total", "stream_delay") - inj0 == len(events),
          f"injections_total counts the {len(events)} held events")
    # Held events park their connections: three delayed streams at once take one stream's time, and a
    # non-streaming request beside them is not held.
    results, t0 = [], time.monotonic()
    threads = [threading.Thread(target=lambda: results.append(stream(srv, "/v1/completions", body)[0]))
               for _ in range(3)]
    for th in threads:
        th.start()
    time.sleep(0.2)
    st, _, t_plain = complete(srv, n)
    for th in threads:
        th.join()
    wall = time.monotonic() - t0
    check(len(results) == 3 and min(results) >= n * ms * 1e-3 and wall < 2 * n * ms * 1e-3,
          f"three delayed streams at once take {wall:.3f} s in all, not three times one")
    check(st == 200 and t_plain < 0.5, f"a non-streaming request beside them is not held ({t_plain:.3f} s)")
    admin(srv, "DELETE", "/admin/faults/stream_delay")
    t, events = stream(srv, "/v1/completions", body)
    check(t < n * ms * 1e-3 / 2, f"cleared: the stream is fast again ({t:.3f} s)")

    # stream_coalesce: ceil(n / tokens) events with the same text, finish_reason and usage.
    n, k = 10, 3
    for path, chat, req in [("/v1/completions", False, {"prompt": "hello world"}),
                            ("/v1/chat/completions", True, {"messages": [{"role": "user", "content": "hi"}]})]:
        body = {**req, "max_tokens": n, "stream_options": {"include_usage": True}}
        _, base = stream(srv, path, body)
        base_ev, base_text = content(base, chat)
        check(len(base_ev) == n, f"{path}: one event per token without the fault ({len(base_ev)})")
        check(admin(srv, "POST", body={"name": "stream_coalesce", "params": {"tokens": k}})[0] == 200,
              f"stream_coalesce tokens={k} set")
        inj0 = metric(srv, "servelab:fault_injections_total", "stream_coalesce")
        _, got = stream(srv, path, body)
        ev, text = content(got, chat)
        check(len(ev) == math.ceil(n / k) and text == base_text,
              f"{path}: {len(ev)} events (ceil({n}/{k})) whose text equals the uncoalesced stream's")
        check(ev[-1]["choices"][0]["finish_reason"] == base_ev[-1]["choices"][0]["finish_reason"] == "length" and
              all(e["choices"][0]["finish_reason"] is None for e in ev[:-1]), f"{path}: finish_reason intact")
        check(got[-2][1]["usage"] == base[-2][1]["usage"] and got[-2][1]["usage"]["completion_tokens"] == n and
              got[-1][1] == "[DONE]", f"{path}: the usage event and [DONE] intact")
        if chat:
            check(sum(1 for _, e in got if e != "[DONE]" and e["choices"] and "role" in e["choices"][0]["delta"]) == 1,
                  f"{path}: one role event first")
        check(metric(srv, "servelab:fault_injections_total", "stream_coalesce") - inj0 == n - len(ev),
              f"injections_total counts the {n - len(ev)} events merged away")
        admin(srv, "DELETE", "/admin/faults/stream_coalesce")
        _, after = stream(srv, path, body)
        ev, text = content(after, chat)
        check(len(ev) == n and text == base_text, f"{path}: cleared: one event per token again")


def test_startup_fault(a):
    srv = Server(a.servelab, a.model, "--fault", "step_delay:ms=50")
    try:
        check(metric(srv, "servelab:fault_active", "step_delay") == 1, "--fault step_delay:ms=50 active from boot")
        st, _, t = complete(srv, 4)
        check(st == 200 and t >= 4 * 0.05, f"startup step_delay slows a completion ({t:.3f} s)")
        check(admin(srv, "GET")[0] == 404, "--fault alone has no admin API")
    finally:
        srv.stop()
    for spec, want in [("nope", "unknown fault 'nope'"), ("step_delay", "missing parameter 'ms'"),
                       ("step_delay:ms=99999", "invalid ms '99999'"), ("http_error:types=x", "invalid types 'x'")]:
        p = subprocess.run([a.servelab, "serve", a.model, "--device", "cpu", "--fault", spec],
                           capture_output=True, text=True, timeout=60)
        lines = p.stderr.strip().splitlines()
        check(p.returncode == 2 and len(lines) == 1 and want in lines[0] and lines[0].startswith("servelab: error:"),
              f"--fault {spec}: one precise error line, exit 2")
    p = subprocess.run([a.servelab, "serve", a.model, "--enable-fault-injection"], capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 2 and "--admin-key" in p.stderr, "--enable-fault-injection without --admin-key: exit 2")
    p = subprocess.run([a.servelab, "serve", a.model, "--api-key", "k", "--admin-key", "k"], capture_output=True,
                       text=True, timeout=60)
    check(p.returncode == 2 and "differ" in p.stderr, "an admin key equal to an API key: exit 2")


N_BLOCKS = 40  # test_server.Server's --num-gpu-blocks-override; usage is over N_BLOCKS - 1 (the null block)


def test_engine_stall(srv):
    # A request running (slowed by step_delay so the stall catches it mid-way) when the stall begins.
    admin(srv, "POST", body={"name": "step_delay", "params": {"ms": 20}})
    gen0 = vllm(srv, "vllm:generation_tokens_total")
    t1, r1 = in_thread(complete, srv, 60)
    check(wait_for(lambda: vllm(srv, "vllm:generation_tokens_total") >= gen0 + 3), "a request is generating")
    st, _ = admin(srv, "POST", body={"name": "engine_stall"})
    admin(srv, "DELETE", "/admin/faults/step_delay")
    check(st == 200, "engine_stall set (until cleared)")
    time.sleep(0.1)
    gen1 = vllm(srv, "vllm:generation_tokens_total")
    t2, r2 = in_thread(complete, srv, 4)
    time.sleep(0.8)
    check(vllm(srv, "vllm:generation_tokens_total") == gen1 and not r1,
          f"stalled: generation_tokens_total frozen at {gen1:.0f}, the request not done")
    check(vllm(srv, "vllm:num_requests_running") >= 1, "stalled: num_requests_running stays >= 1")
    check(vllm(srv, "vllm:num_requests_waiting") >= 1, "stalled: a new submission waits (the queue grows)")
    check(raw(srv.base, "GET", "/health")[0] == 200, "stalled: /health still 200")
    check(metric(srv, "servelab:fault_injections_total", "engine_stall") == 1, "one injection per stall begun")
    admin(srv, "DELETE", "/admin/faults/engine_stall")
    t1.join(30)
    t2.join(30)
    check(r1 and r1[0][0] == 200 and r1[0][1]["usage"]["completion_tokens"] == 60 and r2 and r2[0][0] == 200,
          "cleared: both requests complete")
    # With seconds, it clears itself.
    admin(srv, "POST", body={"name": "engine_stall", "params": {"seconds": 1}})
    st, body, t = complete(srv, 2)
    check(st == 200 and t >= 0.8, f"a 1 s stall holds a request ({t:.2f} s), then it completes")
    check(metric(srv, "servelab:fault_active", "engine_stall") == 0 and
          "Fault injection: engine_stall cleared (its time ran out)" in srv.logs(), "the stall cleared itself, logged")


def test_kv_leak(srv):
    wait_for(lambda: vllm(srv, "vllm:kv_cache_usage_perc") == 0, 5)
    idle = vllm(srv, "vllm:kv_cache_usage_perc")
    check(idle == 0, "idle KV usage 0")
    inj0 = metric(srv, "servelab:fault_injections_total", "kv_leak")
    st, _ = admin(srv, "POST", body={"name": "kv_leak", "params": {"blocks": 2}})
    check(st == 200, "kv_leak blocks=2 set")
    for _ in range(3):  # 3 prompt tokens + 40 = 3 blocks of 16 each, 2 of them kept
        st, body, _ = complete(srv, 40)
        assert st == 200 and body["usage"]["completion_tokens"] == 40
    # The gauge is published after the step that posted the last event: wait for that step.
    want = idle + 6 / (N_BLOCKS - 1)
    wait_for(lambda: abs(vllm(srv, "vllm:kv_cache_usage_perc") - want) < 1e-6, 5)
    leaked = vllm(srv, "vllm:kv_cache_usage_perc")
    check(abs(leaked - want) < 1e-6, f"after 3 finished requests KV usage is up by 6 blocks ({idle:.4f} -> {leaked:.4f})")
    check(vllm(srv, "vllm:gpu_cache_usage_perc") == leaked, "gpu_cache_usage_perc moves alike")
    check(metric(srv, "servelab:fault_injections_total", "kv_leak") - inj0 == 6, "6 leaked blocks counted")
    # Cleared while idle: the engine wakes for it, no request needed.
    admin(srv, "DELETE", "/admin/faults/kv_leak")
    wait_for(lambda: vllm(srv, "vllm:kv_cache_usage_perc") == idle, 5)
    check(vllm(srv, "vllm:kv_cache_usage_perc") == idle, "cleared while idle: KV usage back to idle at once")
    st, _, _ = complete(srv, 4)
    check(st == 200, "and requests run")


def test_oom(srv):
    st, _ = admin(srv, "POST", body={"name": "oom", "params": {"prompt_tokens": 20}})
    check(st == 200, "oom prompt_tokens=20 set")
    st, body, _ = complete(srv, 4, prompt="hello world " * 20)
    check(st == 200 and body["choices"][0]["finish_reason"] == "error",
          "a long prompt fails: finish_reason error")
    logs = srv.logs()
    check("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in logs and "ERROR" in logs,
          "an ERROR line with PyTorch's OOM wording")
    st, body, _ = complete(srv, 4)
    check(st == 200 and body["choices"][0]["finish_reason"] == "length", "a short prompt still succeeds")
    check(metric(srv, "servelab:fault_injections_total", "oom") == 1, "one failed request counted")
    # running=1: requests beyond the first fail while it runs.
    admin(srv, "POST", body={"name": "oom", "params": {"running": 1}})
    admin(srv, "POST", body={"name": "step_delay", "params": {"ms": 20}})
    ts = [in_thread(complete, srv, 20) for _ in range(3)]
    for t, _ in ts:
        t.join(60)
    fins = sorted(r[0][1]["choices"][0]["finish_reason"] for _, r in ts)
    admin(srv, "DELETE", "/admin/faults/step_delay")
    check("error" in fins and "length" in fins, f"running=1: the newest running requests fail, one succeeds ({fins})")
    admin(srv, "DELETE", "/admin/faults/oom")
    st, body, _ = complete(srv, 4, prompt="hello world " * 20)
    check(st == 200 and body["choices"][0]["finish_reason"] == "length", "cleared: the long prompt succeeds")


def test_cold_start(srv):
    base = min(complete(srv, 8)[2] for _ in range(2))
    st, _ = admin(srv, "POST", body={"name": "cold_start", "params": {"steps": 4, "ms": 250}})
    check(st == 200, "cold_start steps=4 ms=250 set")
    st, _, cold = complete(srv, 8)
    # The sleeps are real: at least 4 x 250 ms (not base + that: base's overhead varies more than 0).
    check(st == 200 and cold >= 4 * 0.25, f"the first request pays 4 x 250 ms ({base:.3f} s -> {cold:.3f} s)")
    check(metric(srv, "servelab:fault_active", "cold_start") == 0 and
          "Fault injection: cold_start cleared (its steps ran out)" in srv.logs(), "then it cleared itself, logged")
    check(metric(srv, "servelab:fault_injections_total", "cold_start") == 4, "4 slowed steps counted")
    st, _, warm = complete(srv, 8)
    check(warm < base + 0.25, f"the next request is fast again ({warm:.3f} s)")
    admin(srv, "POST", body={"name": "cold_start", "params": {"steps": 2, "ms": 250}})
    st, _, again = complete(srv, 8)
    check(again >= 2 * 0.25, f"set again: its steps count anew ({again:.3f} s)")


PROMPT = "the quick brown fox"


def test_logit_noise(srv):
    st, body, _ = complete(srv, 16, prompt=PROMPT)
    clean = body["choices"][0]["text"]
    st, _ = admin(srv, "POST", body={"name": "logit_noise", "params": {"scale": 10}})
    check(st == 200, "logit_noise scale=10 set")
    noisy = [complete(srv, 16, prompt=PROMPT)[1]["choices"][0]["text"] for _ in range(2)]
    check(noisy[0] != clean, "temperature 0 with noise: the output differs")
    check(noisy[0] == noisy[1], "the noise repeats: the same request twice gives the same text")
    check(metric(srv, "servelab:fault_injections_total", "logit_noise") >= 32, "noised rows counted")
    admin(srv, "DELETE", "/admin/faults/logit_noise")
    check(complete(srv, 16, prompt=PROMPT)[1]["choices"][0]["text"] == clean, "cleared: the output is back")
    return clean, noisy[0]


def test_engine_faults(a):
    srv = Server(a.servelab, a.model, "--enable-fault-injection", "--admin-key", ADMIN, "--seed", "7")
    try:
        complete(srv, 4)  # warm
        test_engine_stall(srv)
        test_kv_leak(srv)
        test_oom(srv)
        test_cold_start(srv)
        clean, noisy = test_logit_noise(srv)
        # Shutdown works while stalled: the engine loop sees the stop between its polls.
        admin(srv, "POST", body={"name": "engine_stall"})
        t, _ = in_thread(complete, srv, 4)
        time.sleep(0.2)
    finally:
        rc = srv.stop()
    check(rc is not None, f"a stalled server shuts down (exit {rc})")
    # Another server, the same --seed, both faults from boot: the same noisy text, and a cold first request.
    srv = Server(a.servelab, a.model, "--seed", "7", "--fault", "logit_noise:scale=10",
                 "--fault", "cold_start:steps=3,ms=300")
    try:
        st, body, t = complete(srv, 16, prompt=PROMPT)
        check(body["choices"][0]["text"] == noisy, "the same --seed in another server: the same noisy text")
        check(t >= 0.9, f"--fault cold_start: the first request after boot is slow ({t:.3f} s)")
        check(metric(srv, "servelab:fault_active", "cold_start") == 0, "cold_start cleared itself after boot")
    finally:
        srv.stop()
    srv = Server(a.servelab, a.model, "--seed", "8", "--fault", "logit_noise:scale=10")
    try:
        text = complete(srv, 16, prompt=PROMPT)[1]["choices"][0]["text"]
        check(text != noisy and text != clean, "another --seed: other noise")
    finally:
        srv.stop()


def decode_itl(srv, n=24):
    """Mean ITL (s) and all-reduce seconds per generated token of one greedy completion."""
    itl_s0, itl_n0 = series(srv, "vllm:inter_token_latency_seconds_sum"), series(srv, "vllm:inter_token_latency_seconds_count")
    ar0 = series(srv, "servelab:tp_allreduce_seconds_total")
    complete(srv, n, prompt=PROMPT, ignore_eos=True)
    itl_n = series(srv, "vllm:inter_token_latency_seconds_count") - itl_n0
    itl = (series(srv, "vllm:inter_token_latency_seconds_sum") - itl_s0) / max(itl_n, 1)
    return itl, (series(srv, "servelab:tp_allreduce_seconds_total") - ar0) / n


def test_allreduce_delay(a):
    layers = json.load(open(os.path.join(a.model, "config.json")))["num_hidden_layers"]
    per_step = 2 * layers + 1  # o_proj's and down_proj's per layer, and the embedding's
    ms = 3.0
    srv = Server(a.servelab, a.model, "--enable-fault-injection", "--admin-key", ADMIN, "-tp", "2")
    try:
        complete(srv, 4)  # warm
        itl0, ar0 = decode_itl(srv)
        st, _ = admin(srv, "POST", body={"name": "allreduce_delay", "params": {"ms": ms}})
        check(st == 200, "allreduce_delay set")
        itl1, ar1 = decode_itl(srv)
        want = per_step * ms * 1e-3
        check(0.9 * want <= itl1 - itl0 <= 1.5 * want,
              f"-tp 2, allreduce_delay ms={ms}: ITL {itl0 * 1e3:.1f} -> {itl1 * 1e3:.1f} ms, +{want * 1e3:.0f} ms "
              f"expected ({per_step} all-reduces per token)")
        check(0.9 * want <= ar1 - ar0 <= 1.5 * want,
              f"servelab:tp_allreduce_seconds_total per token {ar0 * 1e3:.2f} -> {ar1 * 1e3:.2f} ms")
        check(metric(srv, "servelab:fault_injections_total", "allreduce_delay") >= 23 * per_step,
              "each slowed all-reduce counts as an injection")
        admin(srv, "DELETE", path="/admin/faults/allreduce_delay")
        itl2, _ = decode_itl(srv)
        check(itl2 - itl0 < 0.5 * want, f"cleared: ITL back to {itl2 * 1e3:.1f} ms")
    finally:
        srv.stop()
    srv = Server(a.servelab, a.model, "--fault", f"allreduce_delay:ms={ms}")
    try:
        complete(srv, 4)
        itl, ar = decode_itl(srv)
        check(itl < 0.5 * per_step * ms * 1e-3 and ar == 0, f"-tp 1: no all-reduce to slow (ITL {itl * 1e3:.1f} ms)")
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    test_admin_api_absent_without_flag(a)
    test_lab(a)
    test_startup_fault(a)
    test_engine_faults(a)
    test_allreduce_delay(a)
    print("all lab tests passed")


if __name__ == "__main__":
    main()
