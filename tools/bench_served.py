#!/usr/bin/env python3
"""Served vs offline throughput on the same workload, and the HTTP layer's CPU cost.

Starts `servelab serve`, runs N concurrent streaming clients (asyncio, raw
sockets; random token-id prompts of --input-len, --output-len tokens each,
ignore_eos), then runs `servelab bench throughput` offline on the same shape
of workload, and prints: both output-token rates and their ratio; the CPU
time of the server's HTTP threads (libmicrohttpd's, by name) per streamed
token; the client-side TTFT p50/p99; and the TTFT the HTTP layer adds (mean
client TTFT minus the server's own vllm:time_to_first_token_seconds, which
starts once the body is read). A benchmark: it prints figures.

    python3 tools/bench_served.py build/servelab models/small --clients 256
"""
import argparse
import asyncio
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_thread_cpu_s(pid):
    """CPU seconds of the process's libmicrohttpd threads (named MHD-*)."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        if comm.startswith("MHD"):
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def server_ttft(port):
    """(sum, count) of the server's TTFT histogram: arrival (after the body) -> first token queued."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    get = lambda s: float(re.search("^vllm:time_to_first_token_seconds_" + s + r"\{.*\} (\S+)$", text, re.M).group(1))
    return get("sum"), get("count")


async def client(port, prompt, max_tokens, ttfts, counts):
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
                       "stream": True}).encode()
    t0 = time.perf_counter()
    r, w = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    w.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
            str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
    await w.drain()
    first, n = None, 0
    while True:
        line = await r.readline()
        if not line:
            break
        if line.startswith(b"data: {"):
            if first is None:
                first = time.perf_counter() - t0
            n += 1
    w.close()
    ttfts.append(first or 0.0)
    counts.append(n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("servelab")
    ap.add_argument("model")
    ap.add_argument("--clients", type=int, default=256)
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=32)
    args = ap.parse_args()
    port = free_port()
    proc = subprocess.Popen([args.servelab, "serve", args.model, "--host", "127.0.0.1", "--port", str(port),
                             "--served-model-name", "m"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                time.sleep(0.1)
        rnd = random.Random(0)
        prompts = [[rnd.randrange(3, 1000) for _ in range(args.input_len)] for _ in range(args.clients)]
        ttfts, counts = [], []
        ttft0 = server_ttft(port)
        cpu0 = http_thread_cpu_s(proc.pid)
        t0 = time.perf_counter()

        async def run():
            await asyncio.gather(*(client(port, p, args.output_len, ttfts, counts) for p in prompts))
        asyncio.run(run())
        wall = time.perf_counter() - t0
        http_cpu = http_thread_cpu_s(proc.pid) - cpu0
        ttft1 = server_ttft(port)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    tokens = sum(counts)
    served = tokens / wall
    out = subprocess.run([args.servelab, "bench", "throughput", args.model, "--num-prompts", str(args.clients),
                          "--input-len", str(args.input_len), "--output-len", str(args.output_len)],
                         capture_output=True, text=True).stdout
    offline = float(re.search(r"([\d.]+) output tokens/s", out).group(1))
    ttfts.sort()
    print(f"{args.clients} streaming clients, input {args.input_len}, output {args.output_len} tokens")
    print(f"served:  {served:.1f} output tok/s ({tokens} streamed events in {wall:.2f} s)")
    print(f"offline: {offline:.1f} output tok/s (servelab bench throughput, same shape)")
    print(f"served / offline: {served / offline:.2f}x")
    print(f"HTTP threads' CPU per streamed token: {http_cpu / max(tokens, 1) * 1e6:.1f} us")
    print(f"TTFT p50 {statistics.median(ttfts) * 1e3:.1f} ms, p99 {ttfts[int(0.99 * (len(ttfts) - 1))] * 1e3:.1f} ms")
    engine_mean = (ttft1[0] - ttft0[0]) / max(ttft1[1] - ttft0[1], 1)
    client_mean = statistics.mean(ttfts)
    print(f"TTFT mean: clients {client_mean * 1e3:.2f} ms, server's vllm:time_to_first_token_seconds "
          f"{engine_mean * 1e3:.2f} ms: HTTP adds {(client_mean - engine_mean) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
