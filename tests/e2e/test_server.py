#!/usr/bin/env python3
"""The real server over real HTTP, driven by the official `openai` package and raw sockets.

Starts `servelab serve` on the bundled tiny checkpoint (a small KV pool on
purpose, and an API key), then checks: models list; chat and completions,
streaming and not; n > 1; logprobs; stop strings; seed reproducibility; usage
accounting; errors as the SDK's exception types with vLLM's messages; exact
SSE framing and [DONE]; 401/404/405 (with Allow)/413/400 bodies; the API key
(scheme in any case, as vLLM); /health, /version,
/tokenize, /detokenize; hostile X-Request-Id headers (ids read as latin-1,
valid JSON, escaped log lines); ambiguous framing (RFC 9112 400s, the
connection closed); slow clients (request heads and bodies cut at their
deadlines, a slow reader of a stream not); clients that hang up mid-stream (after which the
server's /metrics shows nothing running or waiting and no KV block held, and
a request needing most of the KV pool completes); and
a graceful SIGTERM (exit status 0). Prints one line per check and
"N passed, N failed".
"""
import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import openai

KEY = "test-key-123"
NAME = "tiny"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, servelab, model, *extra):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"servelab-e2e-{self.port}.log"), "w+",
                        errors="replace")
        self.proc = subprocess.Popen(
            [servelab, "serve", model, "--device", "cpu", "--host", "127.0.0.1", "--port", str(self.port),
             "--served-model-name", NAME, "--api-key", KEY, "--max-model-len", "512",
             "--num-gpu-blocks-override", "40", "--enable-log-requests", *extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("server did not become healthy:\n" + self.logs())

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


def raw(base, method, path, body=None, headers=None):
    """(status, headers, body bytes) of one request, errors included."""
    req = urllib.request.Request(base + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def raw_exchange(port, head, body=b"", timeout=60):
    """Sends `head` (request line and header lines, without the blank line) and `body` on a fresh
    connection that the server closes after answering; returns (status, {lower name: [values]},
    body bytes, chunked decoded), or (None, {}, whatever came) when no response head came back."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head + b"\r\nConnection: close\r\n\r\n" + body)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    top, sep, rest = data.partition(b"\r\n\r\n")
    if not sep or not top.startswith(b"HTTP/1."):
        return None, {}, data
    lines = top.split(b"\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers.setdefault(k.strip().lower().decode("latin-1"), []).append(v.strip())
    if headers.get("transfer-encoding") == [b"chunked"]:
        out = b""
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size, 16)
            if n == 0:
                break
            out += rest[:n]
            rest = rest[n + 2:]
        rest = out
    return int(lines[0].split()[1]), headers, rest


def check_request_ids(srv, check):
    """Hostile X-Request-Id headers: the id is the header read as latin-1 (vLLM's Starlette), in
    valid JSON in bodies and in every SSE chunk; short valid ones are echoed as sent; no control
    character reaches the log."""
    ids = [b"a\xff\xfe\"}\\u0000\\\x01\x1b[31m\x7f", "caf\u00e9".encode(), b"z" * 10240, b"y" * 25000]
    for raw_id in ids:
        label = repr(raw_id[:24]) + (f"... ({len(raw_id)} bytes)" if len(raw_id) > 24 else "")
        want = "cmpl-" + raw_id.decode("latin-1")
        for stream in (False, True):
            body = json.dumps({"model": NAME, "prompt": "Hi", "max_tokens": 3, "stream": stream}).encode()
            head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                    b"\r\nContent-Type: application/json\r\nX-Request-Id: " + raw_id +
                    b"\r\nContent-Length: " + str(len(body)).encode())
            st, hd, data = raw_exchange(srv.port, head, body)
            try:
                if stream:
                    events = data.decode("utf-8").split("\n\n")
                    docs = [json.loads(e[6:]) for e in events if e.startswith("data: {")]
                    ok_json = len(docs) >= 2 and events[-2] == "data: [DONE]"
                else:
                    docs = [json.loads(data.decode("utf-8"))]
                    ok_json = True
            except ValueError as e:
                docs, ok_json = [], repr(e)
            echoed = hd.get("x-request-id", [None])[0]
            want_echo = raw_id if len(raw_id) <= 4096 and not any(c < 0x20 or c == 0x7f for c in raw_id) else None
            check(f"X-Request-Id {label} ({'stream' if stream else 'body'}): valid JSON, id read as latin-1, "
                  "echoed only when short and printable",
                  st == 200 and ok_json is True and all(d.get("id") == want for d in docs) and echoed == want_echo,
                  (st, ok_json, [d.get("id", "")[:40] for d in docs][:3], (echoed or b"")[:40], data[:200]))
    srv.logs()  # flushes
    with open(srv.log.name, "rb") as f:
        lines = [l for l in f.read().split(b"\n") if b"request cmpl-a\xc3\xbf" in l or b"request cmpl-a\xff" in l]
    want_line = b"Received request cmpl-a\xc3\xbf\xc3\xbe\"}\\\\u0000\\\\\\x01\\x1b[31m\\x7f: prompt"

    def utf8(b):
        try:
            return b.decode("utf-8") is not None
        except UnicodeDecodeError:
            return False
    check("X-Request-Id in the log: escaped, no control character, valid UTF-8",
          lines and any(want_line in l for l in lines) and
          all(utf8(l) and not any(c < 0x20 or c == 0x7f for c in l) for l in lines),
          [l[:120] for l in lines][:3])


def exchange_until_close(port, raw, timeout=10):
    """Sends `raw` and reads until the server closes; returns (bytes, closed): closed is False when
    the connection was still open after `timeout` seconds."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(raw)
        data = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    return data, True
                data += chunk
        except socket.timeout:
            return data, False
        except ConnectionResetError:
            return data, True


def check_framing(srv, check):
    """Request heads whose framing is ambiguous (RFC 9112: 400) are refused and the connection is
    closed, so nothing after them is read as a request; plain heads still work."""
    body = json.dumps({"model": NAME, "prompt": "Hi", "max_tokens": 2}).encode()
    cl = b"Content-Length: " + str(len(body)).encode()
    auth_line = b"Authorization: Bearer " + KEY.encode()
    # Each is followed by a second, valid request: a server that misreads the framing answers it.
    smuggled = (b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + auth_line + b"\r\n\r\n")
    chunked_body = hex(len(body))[2:].encode() + b"\r\n" + body + b"\r\n0\r\n\r\n"
    cases = [
        ("two different Content-Length", [b"Host: x", cl, b"Content-Length: 5"], body),
        ("HTTP/1.1 without Host", [cl], body),
        ("two Host headers", [b"Host: x", b"Host: y", cl], body),
        # Its body is a request: a server that ignores "Content-Length :" answers it.
        ("whitespace before the colon", [b"Host: x", b"Content-Length : " + str(len(smuggled)).encode()], smuggled),
        ("Transfer-Encoding gzip", [b"Host: x", b"Transfer-Encoding: gzip", cl], body),
        ("Transfer-Encoding chunked with Content-Length", [b"Host: x", b"Transfer-Encoding: chunked", cl],
         chunked_body),
    ]
    for name, lines, payload in cases:
        raw = (b"POST /v1/completions HTTP/1.1\r\n" + b"\r\n".join(lines + [auth_line]) + b"\r\n\r\n" +
               payload + smuggled)
        data, closed = exchange_until_close(srv.port, raw)
        check(f"framing: {name} -> 400, connection closed, nothing after it answered",
              data.startswith(b"HTTP/1.1 400 ") and closed and b"HTTP/1.1 200" not in data and
              b'"object":"list"' not in data, (closed, data[:300]))
    # The same requests, unambiguous, are served.
    for name, lines, payload in [("one Content-Length", [b"Host: x", cl], body),
                                 ("the same Content-Length twice", [b"Host: x", cl, cl], body),
                                 ("chunked body", [b"Host: x", b"Transfer-Encoding: chunked"], chunked_body)]:
        raw = (b"POST /v1/completions HTTP/1.1\r\n" + b"\r\n".join(lines + [auth_line, b"Connection: close"]) +
               b"\r\n\r\n" + payload)
        data, closed = exchange_until_close(srv.port, raw)
        check(f"framing: {name} -> 200", data.startswith(b"HTTP/1.1 200 ") and b'"text_completion"' in data,
              data[:300])


def trickle(port, prefix, drip, gap_s, give_up_s):
    """Sends `prefix`, then `drip` one byte every gap_s seconds (far below the 5 s idle timeout),
    until the server closes the connection or give_up_s pass. Returns (seconds until the server
    closed it or None, bytes of drip sent, what the server sent)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    t0, sent, got = time.time(), 0, b""
    try:
        s.sendall(prefix)
        s.setblocking(False)
        for b in drip:
            if time.time() - t0 > give_up_s:
                return None, sent, got
            time.sleep(gap_s)
            try:
                chunk = s.recv(4096)
                if not chunk:
                    return time.time() - t0, sent, got
                got += chunk
            except BlockingIOError:
                pass
            s.send(bytes([b]))
            sent += 1
        return None, sent, got
    except OSError:
        return time.time() - t0, sent, got
    finally:
        s.close()


def check_slow_clients(servelab, model, check):
    """Request heads and bodies trickled slowly are cut at --request-header-timeout /
    --request-body-timeout (1 s here), while a client that reads a long stream slowly for several
    times those limits gets all of it."""
    srv = Server(servelab, model, "--request-header-timeout", "1", "--request-body-timeout", "1")
    try:
        head = b"Host: x\r\nAuthorization: Bearer " + KEY.encode() + b"\r\nX-Pad: " + b"p" * 60 + b"\r\n\r\n"
        closed_s, sent, got = trickle(srv.port, b"POST /v1/completions HTTP/1.1\r\n", head, 0.25, 8)
        check("slow client: headers at 1 byte / 0.25 s are cut at --request-header-timeout 1",
              closed_s is not None and closed_s < 3 and sent < len(head) and b"HTTP/1.1 200" not in got,
              (closed_s, sent, got[:200]))
        body = json.dumps({"model": NAME, "prompt": "Hi " * 20, "max_tokens": 2}).encode()
        prefix = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
        closed_s, sent, got = trickle(srv.port, prefix, body, 0.25, 8)
        check("slow client: a body at 1 byte / 0.25 s is cut at --request-body-timeout 1",
              closed_s is not None and closed_s < 3 and sent < len(body) and b"HTTP/1.1 200" not in got,
              (closed_s, sent, got[:200]))
        logs = srv.logs()
        check("slow client: each cut is logged", "request headers did not arrive within 1 s" in logs and
              "request body did not arrive within 1 s" in logs, logs[-600:])

        # A slow reader: a small receive buffer, 256 bytes every 20 ms, for several seconds.
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        s.settimeout(30)
        s.connect(("127.0.0.1", srv.port))
        b = json.dumps({"model": NAME, "prompt": "Hi", "max_tokens": 300, "ignore_eos": True,
                        "stream": True}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                  b"\r\nConnection: close\r\nContent-Length: " + str(len(b)).encode() + b"\r\n\r\n" + b)
        t0, data = time.time(), b""
        try:
            while True:
                chunk = s.recv(256)
                if not chunk:
                    break
                data += chunk
                time.sleep(0.02)
        except OSError as e:
            data += repr(e).encode()
        s.close()
        took = time.time() - t0
        check("slow client: a stream read slowly for over 3x the limits arrives whole",
              took > 3 and data.count(b"data: {") == 300 and b"data: [DONE]" in data,
              (round(took, 2), data.count(b"data: {"), data[-200:]))
        check("slow client: the server stays healthy", raw(srv.base, "GET", "/health")[0] == 200)
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    results = []

    def check(name, cond, detail=""):
        results.append(bool(cond))
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + str(detail)[:600]}", flush=True)

    srv = Server(args.servelab, args.model)
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=120)
    auth = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    try:
        models = client.models.list()
        check("models list names the served model", [m.id for m in models.data] == [NAME], models)

        msgs = [{"role": "user", "content": "Tell me about servers."}]
        chat = client.chat.completions.create(model=NAME, messages=msgs, max_tokens=12, temperature=0)
        ch = chat.choices[0]
        check("chat: id, object, role", chat.id.startswith("chatcmpl-") and chat.object == "chat.completion"
              and ch.message.role == "assistant", chat)
        check("chat: length finish and usage arithmetic", ch.finish_reason == "length" and
              chat.usage.completion_tokens == 12 and
              chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens, chat.usage)

        parts, roles, usage, finish = [], [], None, None
        for ev in client.chat.completions.create(model=NAME, messages=msgs, max_tokens=12, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}):
            if ev.usage:
                usage = ev.usage
            for c in ev.choices:
                if c.delta.role:
                    roles.append(c.delta.role)
                if c.delta.content:
                    parts.append(c.delta.content)
                if c.finish_reason:
                    finish = c.finish_reason
        check("chat stream: one role event, same text as non-streaming", roles == ["assistant"] and
              "".join(parts) == ch.message.content, (roles, "".join(parts), ch.message.content))
        check("chat stream: finish reason and include_usage totals", finish == "length" and usage and
              usage.completion_tokens == 12, (finish, usage))

        comp = client.completions.create(model=NAME, prompt=["The quick brown fox", "Once upon"], max_tokens=5,
                                         temperature=0, n=2)
        idx = sorted(c.index for c in comp.choices)
        check("completions: two prompts x n=2 give choices 0..3", idx == [0, 1, 2, 3] and
              comp.usage.completion_tokens == 20, (idx, comp.usage))
        echo = client.completions.create(model=NAME, prompt="The quick brown fox", max_tokens=4, temperature=0,
                                         echo=True)
        check("completions: echo prepends the prompt", echo.choices[0].text.startswith("The quick brown fox"),
              echo.choices[0].text)
        lp = client.completions.create(model=NAME, prompt="Hello", max_tokens=4, temperature=0, logprobs=3)
        l = lp.choices[0].logprobs
        check("completions: logprobs=3", l and len(l.tokens) == 4 and len(l.token_logprobs) == 4 and
              all(len(t) >= 3 for t in l.top_logprobs), l)
        clp = client.chat.completions.create(model=NAME, messages=msgs, max_tokens=3, temperature=0,
                                             logprobs=True, top_logprobs=2)
        c0 = clp.choices[0].logprobs
        check("chat: logprobs with top_logprobs=2", c0 and len(c0.content) == 3 and
              all(len(t.top_logprobs) == 2 for t in c0.content), c0)

        full = client.completions.create(model=NAME, prompt="The server", max_tokens=16, temperature=0)
        text = full.choices[0].text
        if len(text) > 6:
            stop = text[3:6]
            st = client.completions.create(model=NAME, prompt="The server", max_tokens=16, temperature=0, stop=[stop])
            check("stop string ends the text", st.choices[0].finish_reason == "stop" and
                  st.choices[0].text == text[:text.index(stop)], (st.choices[0], text, stop))
        else:
            check("greedy text long enough for a stop test", False, text)

        a = client.completions.create(model=NAME, prompt="Seeded", max_tokens=10, temperature=1.0, seed=42)
        b = client.completions.create(model=NAME, prompt="Seeded", max_tokens=10, temperature=1.0, seed=42)
        check("same seed, same text", a.choices[0].text == b.choices[0].text, (a.choices[0].text, b.choices[0].text))

        # Errors, as the SDK raises them.
        for name, fn, exc, words in [
            ("unknown model -> NotFoundError",
             lambda: client.completions.create(model="nope", prompt="x", max_tokens=2), openai.NotFoundError,
             "The model `nope` does not exist."),
            ("logprobs 21 -> BadRequestError",
             lambda: client.completions.create(model=NAME, prompt="x", max_tokens=2, logprobs=21),
             openai.BadRequestError, "Requested sample logprobs of 21, which is greater than max allowed: 20"),
            ("context length -> BadRequestError",
             lambda: client.completions.create(model=NAME, prompt="word " * 600, max_tokens=2),
             openai.BadRequestError, "maximum context length is 512 tokens"),
            ("temperature -1 -> BadRequestError",
             lambda: client.completions.create(model=NAME, prompt="x", max_tokens=2, temperature=-1),
             openai.BadRequestError, "temperature"),
            # -1 is a value, not "absent": it must not generate up to the context limit.
            ("max_tokens -1 -> BadRequestError",
             lambda: client.completions.create(model=NAME, prompt="x", max_tokens=-1),
             openai.BadRequestError, "max_tokens must be at least 1, got -1."),
            ("chat max_completion_tokens -1 -> BadRequestError",
             lambda: client.chat.completions.create(model=NAME, messages=msgs, max_completion_tokens=-1),
             openai.BadRequestError, "max_tokens must be at least 1, got -1."),
            # The range is checked on the number sent, not on its float32 rounding (1.0).
            ("top_p 1.0000000000000002 -> BadRequestError",
             lambda: client.completions.create(model=NAME, prompt="x", max_tokens=2, top_p=1.0000000000000002),
             openai.BadRequestError, "top_p must be in (0, 1], got 1.0000000000000002."),
        ]:
            try:
                fn()
                check(name, False, "no exception")
            except exc as e:
                check(name, words in str(e), str(e))
            except Exception as e:  # noqa: BLE001
                check(name, False, repr(e))

        # Raw HTTP: SSE framing, status codes and bodies.
        body = json.dumps({"model": NAME, "prompt": "Hi", "max_tokens": 3, "temperature": 0, "stream": True}).encode()
        st, hd, data = raw(srv.base, "POST", "/v1/completions", body, auth)
        events = data.decode().split("\n\n")
        check("SSE: text/event-stream, data: events, [DONE] last",
              st == 200 and hd.get("Content-Type", "").startswith("text/event-stream") and
              events[-2] == "data: [DONE]" and events[-1] == "" and
              all(e.startswith("data: {") for e in events[:-2]), data[-300:])
        first = json.loads(events[0][6:])
        check("SSE: completions events carry every field", list(first) == ["id", "object", "created", "model",
              "choices", "usage"] and first["object"] == "text_completion", first)
        st, _, data = raw(srv.base, "POST", "/v1/completions", body, {"Content-Type": "application/json"})
        check("no key -> 401 {\"error\":\"Unauthorized\"}", st == 401 and json.loads(data) == {"error": "Unauthorized"}, data)
        for scheme in ("bearer", "BEARER", "bEaReR"):
            st, _, data = raw(srv.base, "GET", "/v1/models", None, {"Authorization": f"{scheme} {KEY}"})
            check(f"auth: scheme '{scheme}' accepted, as vLLM", st == 200, (st, data))
        for value in (f"Bearer {KEY}x", f"Bearer {KEY[:-1]}", f"Bearer  {KEY}", f"Basic {KEY}", "Bearer"):
            st, _, data = raw(srv.base, "GET", "/v1/models", None, {"Authorization": value})
            check(f"auth: '{value}' -> 401", st == 401 and json.loads(data) == {"error": "Unauthorized"}, (st, data))
        st, _, data = raw(srv.base, "GET", "/health")
        check("/health needs no key", st == 200 and data == b"", (st, data))
        st, _, data = raw(srv.base, "GET", "/nope")
        check("unknown path -> 404", st == 404, (st, data))
        for method, path, allow in (("GET", "/v1/completions", "POST"), ("PUT", "/v1/chat/completions", "POST"),
                                    ("POST", "/v1/models", "GET"), ("DELETE", "/health", "GET"),
                                    ("POST", "/version", "GET"), ("GET", "/tokenize", "POST")):
            st, hd, data = raw(srv.base, method, path, None, auth)
            check(f"wrong method {method} {path} -> 405, Allow: {allow} (Starlette's)",
                  st == 405 and hd.get("Allow") == allow and json.loads(data) == {"detail": "Method Not Allowed"},
                  (st, hd.get("Allow"), data))
        st, _, data = raw(srv.base, "POST", "/v1/completions", b"{not json", auth)
        err = json.loads(data) if data.startswith(b"{") else {}
        check("malformed JSON -> 400 error envelope", st == 400 and err.get("error", {}).get("code") == 400 and
              err["error"].get("type") == "BadRequestError", data)
        st, _, data = raw(srv.base, "POST", "/v1/completions", b'{"prompt": "\xff\xfe", "model": "tiny"}', auth)
        check("invalid UTF-8 -> 400", st == 400, (st, data))
        # Raw control characters in strings are invalid JSON (Python's json refuses them); a raw NUL
        # would otherwise cut the prompt short.
        for name, body in [
            ("raw NUL in a prompt", b'{"model": "tiny", "prompt": "abc\x00def", "max_tokens": 1}'),
            ("raw U+0001 in a prompt", b'{"model": "tiny", "prompt": "a\x01b", "max_tokens": 1}'),
            ("raw newline in chat content",
             b'{"model": "tiny", "messages": [{"role": "user", "content": "a\nb"}], "max_tokens": 1}'),
        ]:
            st, _, data = raw(srv.base, "POST", "/v1/chat/completions" if b"messages" in body else "/v1/completions",
                              body, auth)
            err = json.loads(data) if data.startswith(b"{") else {}
            check(f"{name} -> 400 invalid JSON", st == 400 and err.get("error", {}).get("code") == 400 and
                  "not valid JSON" in err["error"].get("message", ""), (st, data))
        st, _, data = raw(srv.base, "POST", "/v1/completions",
                          json.dumps({"model": NAME, "prompt": "abc\u0000def", "max_tokens": 1}).encode(), auth)
        check("escaped \\u0000 in a prompt -> 400 naming the NUL", st == 400 and b"NUL character" in data, (st, data))
        # A 1 GiB body is refused from its headers: nothing needs to be sent.
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                      b"\r\nContent-Type: application/json\r\nContent-Length: " + str(1 << 30).encode() + b"\r\n\r\n")
            resp = b""
            while b"\r\n\r\n" not in resp or not resp.rstrip().endswith(b"}"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                resp += chunk
        check("1 GiB body -> 413 before the body is sent", resp.startswith(b"HTTP/1.1 413") and
              b"--max-request-bytes" in resp, resp[:300])
        st, _, data = raw(srv.base, "POST", "/v1/completions", json.dumps({"model": NAME, "prompt": "x",
                          "stream_options": {"include_usage": True}}).encode(), auth)
        check("stream_options without stream -> 400", st == 400, data)
        st, _, data = raw(srv.base, "GET", "/version")
        check("/version", st == 200 and "version" in json.loads(data), data)
        st, _, data = raw(srv.base, "POST", "/tokenize", json.dumps({"model": NAME, "prompt": "Hello"}).encode(),
                          {"Content-Type": "application/json"})
        tok = json.loads(data)
        st2, _, data2 = raw(srv.base, "POST", "/detokenize", json.dumps({"model": NAME, "tokens": tok.get("tokens", [])}).encode(),
                            {"Content-Type": "application/json"})
        check("/tokenize then /detokenize round-trips", st == 200 and tok["count"] == len(tok["tokens"]) and
              tok["max_model_len"] == 512 and st2 == 200 and json.loads(data2)["prompt"].endswith("Hello"),
              (data, data2))
        # Token 3 of the tiny checkpoint is the byte piece <0x00>: its NUL is text like any other byte.
        st, _, data = raw(srv.base, "POST", "/detokenize", json.dumps({"model": NAME, "tokens": [100, 3, 101]}).encode(),
                          {"Content-Type": "application/json"})
        text = json.loads(data).get("prompt", "") if st == 200 else ""
        check("/detokenize keeps a NUL byte and what follows it", "\x00" in text and not text.endswith("\x00"), data)
        st, hd, _ = raw(srv.base, "POST", "/v1/completions", json.dumps({"model": NAME, "prompt": "x", "max_tokens": 1}).encode(),
                        dict(auth, **{"X-Request-Id": "my-req-7"}))
        check("X-Request-Id is echoed", hd.get("X-Request-Id") == "my-req-7", hd)
        check_request_ids(srv, check)
        check_framing(srv, check)

        # Clients that hang up mid-stream, at random points.
        def hang_up(seed):
            rnd = random.Random(seed)
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
            b = json.dumps({"model": NAME, "prompt": "Story " * rnd.randint(1, 40), "max_tokens": 400,
                            "stream": rnd.random() < 0.7, "ignore_eos": True}).encode()
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                      b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(b)).encode() + b"\r\n\r\n" + b)
            want = rnd.randint(0, 3000)
            got = 0
            s.settimeout(5)  # a request still queued sends nothing: hang up anyway
            try:
                while got < want:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += len(chunk)
            except OSError:
                pass
            s.close()

        def big_request():
            t0 = time.time()
            out = client.completions.create(model=NAME, prompt=[1] + [5] * 300, max_tokens=170, temperature=0,
                                            extra_body={"ignore_eos": True})
            return out, time.time() - t0

        _, baseline_s = big_request()
        threads = [threading.Thread(target=hang_up, args=(i,)) for i in range(60)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Every hung-up request is aborted and lets go of its blocks: the server's own gauges go to
        # zero (a 400-token request that was not aborted would hold blocks for seconds).
        def gauges():
            text = raw(srv.base, "GET", "/metrics")[2].decode()
            vals = {}
            for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
                m = re.search("^" + re.escape(name) + r"\{[^}]*\} (\S+)$", text, re.M)
                vals[name] = float(m.group(1)) if m else None
            return vals
        deadline = time.time() + 10
        while time.time() < deadline and any(v != 0 for v in gauges().values()):
            time.sleep(0.05)
        aborted = raw(srv.base, "GET", "/metrics")[2].decode()
        n_aborted = re.search(r'^vllm:request_success_total\{[^}]*finished_reason="abort"[^}]*\} (\S+)$', aborted, re.M)
        check("after 60 hang-ups: no request running or waiting, no KV block held, aborts counted",
              all(v == 0 for v in gauges().values()) and n_aborted and float(n_aborted.group(1)) > 0,
              (gauges(), n_aborted and n_aborted.group(1)))
        # 40 blocks of 16 tokens: this needs 30 of them, so it needs the pool the hang-ups held.
        big_req, after_s = big_request()
        check("after 60 hang-ups a 470-token request completes",
              big_req.choices[0].finish_reason == "length" and big_req.usage.completion_tokens == 170,
              (big_req.usage, round(baseline_s, 2), round(after_s, 2)))
        check("server is healthy after the hostile clients", raw(srv.base, "GET", "/health")[0] == 200)
        logs = srv.logs()
        check("vLLM request log lines", "Received request cmpl-" in logs and "Aborted request" in logs and
              '"POST /v1/completions HTTP/1.1" 200 OK' in logs, logs[-800:])
    finally:
        code = srv.stop()
    check("SIGTERM: graceful exit 0", code == 0, (code, srv.logs()[-600:]))

    # A misspelt flag is a usage error that names the closest valid one.
    res = subprocess.run([args.servelab, "serve", args.model, "--prot", "8000"], capture_output=True, text=True,
                         timeout=30)
    check("unknown flag names the closest one", res.returncode == 2 and "did you mean --port?" in res.stderr,
          res.stderr[-300:])

    # Admission control. One sequence at a time and 3 waiting at most; 30 clients released together.
    # Each admitted request decodes 200 tokens, so the engine can start at most a few of them while
    # the burst arrives: requests beyond 1 running + 3 waiting must be refused with 503 and
    # Retry-After, the admitted ones must complete, and the server must serve again afterwards.
    adm = Server(args.servelab, args.model, "--max-num-seqs", "1", "--max-waiting-requests", "3")
    try:
        barrier = threading.Barrier(30)
        outcomes = [None] * 30
        body = json.dumps({"model": NAME, "prompt": [1, 5, 6, 7], "max_tokens": 200, "ignore_eos": True}).encode()

        def burst(i):
            barrier.wait()
            outcomes[i] = raw(adm.base, "POST", "/v1/completions", body, auth)
        threads = [threading.Thread(target=burst, args=(i,)) for i in range(30)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        refused = [o for o in outcomes if o[0] == 503]
        served = [o for o in outcomes if o[0] == 200]
        err = json.loads(refused[0][2]) if refused else {}
        check("admission control: 503 + Retry-After + OpenAI error body beyond --max-waiting-requests",
              refused and len(served) + len(refused) == 30 and len(served) >= 4 and
              all(o[1].get("Retry-After") == "1" for o in refused) and
              err.get("error", {}).get("code") == 503 and "--max-waiting-requests" in err["error"]["message"],
              ([o[0] for o in outcomes], err))
        check("admission control: admitted requests complete",
              all(json.loads(o[2])["usage"]["completion_tokens"] == 200 for o in served))
        check("admission control: served again once the queue drained",
              raw(adm.base, "POST", "/v1/completions", body, auth)[0] == 200)
    finally:
        adm.stop()

    check_slow_clients(args.servelab, args.model, check)

    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
