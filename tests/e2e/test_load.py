#!/usr/bin/env python3
"""Many clients at once against a real `servelab serve` (asyncio raw sockets).

- 2000 concurrent streaming clients all complete: every stream is well-formed
  SSE, ends with [DONE], and carries the tokens it asked for.
- 500 clients hang up at random points (before, during and after their
  stream starts); afterwards the server is healthy and a request needing most
  of the KV pool still completes, so no block was leaked.
- Slow-loris connections that trickle header bytes slower than the idle
  timeout (VLLM_HTTP_TIMEOUT_KEEP_ALIVE) are closed by the server, while a
  normal request goes through.
Prints one line per check and "N passed, N failed".
"""
import argparse
import asyncio
import json
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request

NAME = "tiny"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request_bytes(body):
    b = json.dumps(body).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(b)).encode() + b"\r\nConnection: close\r\n\r\n" + b)


async def stream_one(port, i, max_tokens):
    r, w = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    w.write(request_bytes({"model": NAME, "prompt": f"Client {i} says", "max_tokens": max_tokens,
                           "temperature": 0, "ignore_eos": True, "stream": True}))
    await w.drain()
    data = await asyncio.wait_for(r.read(), timeout=600)
    w.close()
    head, _, body = data.partition(b"\r\n\r\n")
    if b" 200 " not in head.split(b"\r\n")[0]:
        return f"status {head[:60]!r}"
    # Chunked transfer encoding: strip the chunk framing.
    text, rest = b"", body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        n = int(size_line, 16)
        if n == 0:
            break
        text += rest[:n]
        rest = rest[n + 2:]
    events = [e for e in text.decode().split("\n\n") if e and not e.startswith(":")]
    if not events or events[-1] != "data: [DONE]":
        return f"no [DONE]: {text[-120:]!r}"
    n_tok = 0
    for e in events[:-1]:
        if not e.startswith("data: {"):
            return f"bad event {e[:80]!r}"
        ev = json.loads(e[6:])
        n_tok += sum(1 for c in ev["choices"] if c.get("text") is not None)
    return None if n_tok >= max_tokens else f"{n_tok} events for {max_tokens} tokens"


async def hang_up(port, seed):
    rnd = random.Random(seed)
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(request_bytes({"model": NAME, "prompt": "Story " * rnd.randint(1, 30), "max_tokens": 100,
                               "ignore_eos": True, "stream": rnd.random() < 0.7}))
        await w.drain()
        want = rnd.choice([0, rnd.randint(1, 400), rnd.randint(400, 4000)])
        got = 0
        try:
            while got < want:
                chunk = await asyncio.wait_for(r.read(4096), timeout=3)
                if not chunk:
                    break
                got += len(chunk)
        except asyncio.TimeoutError:
            pass
        w.close()
    except OSError:
        pass


async def slow_loris(port, period):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    await w.drain()
    t0 = time.time()
    try:
        for _ in range(20):
            await asyncio.sleep(period)
            w.write(b"X")
            await w.drain()
            if r.at_eof():
                break
        data = await asyncio.wait_for(r.read(), timeout=period * 3)
        return time.time() - t0, data
    except (OSError, asyncio.TimeoutError):
        return time.time() - t0, b""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--clients", type=int, default=2000)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    results = []

    def check(name, cond, detail=""):
        results.append(bool(cond))
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + str(detail)[:600]}", flush=True)

    port = free_port()
    log = open(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"servelab-load-{port}.log"), "w+")
    env = dict(os.environ, VLLM_HTTP_TIMEOUT_KEEP_ALIVE="2")
    proc = subprocess.Popen([args.servelab, "serve", args.model, "--device", "cpu", "--host", "127.0.0.1", "--port", str(port),
                             "--served-model-name", NAME, "--max-model-len", "512",
                             "--num-gpu-blocks-override", "600", "--max-num-seqs", "256"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as rr:
                if rr.status == 200:
                    break
        except OSError:
            time.sleep(0.1)
    try:
        async def all_streams():
            return await asyncio.gather(*(stream_one(port, i, 4) for i in range(args.clients)),
                                        return_exceptions=True)
        t0 = time.time()
        outcomes = asyncio.run(all_streams())
        bad = [o for o in outcomes if o is not None]
        check(f"{args.clients} concurrent streaming clients all complete ({time.time() - t0:.1f} s)", not bad,
              bad[:5])

        async def all_hangups():
            await asyncio.gather(*(hang_up(port, s) for s in range(500)))
        asyncio.run(all_hangups())
        time.sleep(1.5)
        with urllib.request.urlopen(base + "/health", timeout=10) as rr:
            check("healthy after 500 hang-ups", rr.status == 200)
        # 600 blocks of 16 tokens; every block must be free again for this to be admitted at once.
        big = {"model": NAME, "prompt": [1] + [5] * 300, "max_tokens": 200, "temperature": 0, "ignore_eos": True,
               "n": 30}
        req = urllib.request.Request(base + "/v1/completions", data=json.dumps(big).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as rr:
            out = json.loads(rr.read())
        check("a request holding most of the KV pool completes after the hang-ups",
              len(out["choices"]) == 30 and all(c["finish_reason"] == "length" for c in out["choices"]),
              out.get("usage"))

        async def loris():
            slow = [slow_loris(port, 3.0) for _ in range(20)]
            normal = asyncio.create_task(stream_one(port, 0, 4))
            res = await asyncio.gather(*slow)
            return res, await normal
        res, normal = asyncio.run(loris())
        closed = [t for t, data in res if t < 30]
        check("slow-loris connections are closed by the idle timeout", len(closed) == 20,
              [round(t, 1) for t, _ in res])
        check("a normal request goes through meanwhile", normal is None, normal)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = None
    check("graceful exit 0", code == 0, code)
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
