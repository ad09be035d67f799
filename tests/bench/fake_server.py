#!/usr/bin/env python3
"""A scripted OpenAI-compatible SSE server for testing `servelab bench serve` (stdlib only).

Every response is decided by a script, so a test knows what the load generator should
measure: request i (the number after the last '-' of its x-request-id) streams
script(i)["n"] tokens, the first ttft seconds after its body was read, the next ones
itls[k] apart; it may instead fail with an HTTP status and a JSON error body. The server
records, on CLOCK_MONOTONIC (the clock the C client uses), when each request arrived and
when the write of each event's last bytes began ("sent_from") and returned ("events"), and it tracks the most requests in flight and
the most connections open at once among those that carried a generation request (the
tokenizer calls that size prompts are not the load). GET /_log returns all of that; POST /_reset clears it.

Also served, as vLLM serves them: GET /v1/models (id "fake", root "/models/fake-root"),
POST /tokenize and /detokenize over a toy tokenizer (token id k <-> the word "w<k>";
other words hash to an id; add_special_tokens prepends BOS = 1; chat messages render as
"<role> <content>" per message).

With --llama-cpp every answer has the shape llama.cpp's llama-server gives (as recorded from
a real one, docs/load-generator.md names the version): GET /v1/models lists {"id": "fake.gguf",
"owned_by": "llamacpp", "meta"} beside "models"; POST /tokenize {"content", "add_special"} ->
{"tokens"}, and any body without "content" (vLLM's {"prompt"} or {"messages"}) -> 200
{"tokens": []}; POST /detokenize {"tokens"} -> {"content"}; a completions stream ends with a
chunk of text "" that carries finish_reason and usage (whatever include_usage says), a chat
stream opens with {"role", "content": null}, ends with a delta {} that carries finish_reason
and, with include_usage, a chunk of choices [] and usage; errors are {"error": {"code",
"message", "type"}}, and a body that is not JSON gets 500 "server_error" with a parser message.

With --hold N, a generation request waits before its first byte until N of them are in
flight at once (or 60 s have passed), so a test can tell that a client opened N streams
concurrently without depending on how fast a busy machine opens them.

Scripts (--script): "varied" (the metrics test: 2..10 tokens, 10..29 ms TTFT, 2..7 ms
gaps, one event split across two writes 1 ms apart, keep-alive comments, an empty token,
some 503 and 400 failures) or "fixed" (--ttft-ms, --itl-ms, --tokens for every request).
Usage: fake_server.py [--port 0] [--script varied|fixed] ... ; prints "PORT <n>" when ready.
"""
import argparse
import json
import socket
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BOS = 1


def varied(i):
    """The metrics test's script for request i (pure: the test imports it)."""
    n = 2 + (i * 7) % 9
    return {
        "n": n,
        "ttft": 0.010 + (i * 13 % 20) / 1000.0,
        "itls": [0.002 + ((i + 3 * k) % 6) / 1000.0 for k in range(n - 1)],
        "status": 503 if i % 11 == 5 else 400 if i % 11 == 8 else 200,
        "split_event": 1 if i % 4 == 1 else -1,   # this event goes out in two writes, 1 ms apart
        "comment": i % 3 == 0,                    # ": keep-alive" before the first event
        "empty_token": 1,                          # the text of token 1 is ""
    }


def fixed(ttft_ms, itl_ms, tokens):
    def script(i):
        return {"n": tokens, "ttft": ttft_ms / 1000.0, "itls": [itl_ms / 1000.0] * (tokens - 1), "status": 200,
                "split_event": -1, "comment": False, "empty_token": -1}
    return script


LLAMA_MODELS = {
    "models": [{"name": "fake.gguf", "model": "fake.gguf", "modified_at": "", "size": "", "digest": "",
                "type": "model", "description": "", "tags": [""], "capabilities": ["completion"],
                "parameters": "", "details": {"parent_model": "", "format": "gguf", "family": "", "families": [""],
                                              "parameter_size": "", "quantization_level": ""}}],
    "object": "list",
    "data": [{"id": "fake.gguf", "aliases": [], "tags": [], "object": "model", "created": 0, "owned_by": "llamacpp",
              "meta": {"vocab_type": 2, "n_vocab": 49152, "n_ctx": 4096, "n_ctx_train": 8192, "n_embd": 576,
                       "n_params": 134515008, "size": 91849344, "ftype": 3}}],
}
LLAMA_PARSE_ERROR = ("[json.exception.parse_error.101] parse error at line 1, column 2: syntax error while parsing "
                     "object key - invalid literal; last read: '{b'; expected string literal")


def llama_error(message, code, kind):
    return {"error": {"code": code, "message": message, "type": kind}}


class LlamaEvents:
    """The events of one llama.cpp stream: its chunk fields, the opening role delta of a chat
    stream, and the closing chunks (finish_reason apart from the last token; usage)."""

    def __init__(self, body, chat, usage):
        self.body, self.chat = body, chat
        self.usage = dict(usage, prompt_tokens_details={"cached_tokens": 0})
        self.include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    def event(self, choices, **extra):
        ev = {"choices": choices, "created": 0, "id": "chatcmpl-fake", "model": self.body.get("model", "fake.gguf"),
              "system_fingerprint": "b0-fake", "object": "chat.completion.chunk" if self.chat else "text_completion"}
        ev.update(extra)
        return b"data: " + json.dumps(ev).encode() + b"\n\n"

    def token(self, k, text):
        if not self.chat:
            return self.event([{"text": text, "index": 0, "logprobs": None, "finish_reason": None}])
        data = b""
        if k == 0:
            data = self.event([{"finish_reason": None, "index": 0, "delta": {"role": "assistant", "content": None}}])
        return data + self.event([{"finish_reason": None, "index": 0, "delta": {"content": text}}])

    def final(self):
        timings = {"prompt_n": self.usage["prompt_tokens"], "predicted_n": self.usage["completion_tokens"]}
        if not self.chat:
            return self.event([{"text": "", "index": 0, "logprobs": None, "finish_reason": "length"}],
                              usage=self.usage, timings=timings)
        data = self.event([{"finish_reason": "length", "index": 0, "delta": {}}])
        if self.include_usage:
            data += self.event([], usage=self.usage, timings=timings)
        return data


def word_id(w):
    if len(w) > 1 and w[0] == "w" and w[1:].isdigit():
        return int(w[1:])
    return 3 + zlib.crc32(w.encode()) % 5000


def tokenize(text, add_special):
    ids = [word_id(w) for w in text.split()]
    return ([BOS] if add_special else []) + ids


def render_chat(messages):
    parts = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, list):
            c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
        parts.append(f"{m.get('role', 'user')} {c or ''}")
    return " ".join(parts) + " assistant"


class State:
    def __init__(self, script):
        self.script = script
        self.lock = threading.Lock()
        self.gathered = threading.Condition(self.lock)
        self.hold = 0  # --hold
        self.reset()

    def reset(self):
        with self.lock:
            self.requests = {}
            self.arrivals = []
            self.active = self.max_active = 0
            self.conns = self.max_conns = 0
            self.counter = 0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None
    llama_cpp = False  # --llama-cpp: every answer as llama.cpp's llama-server gives it

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.streams = False   # has this connection carried a generation request?

    def finish(self):
        try:
            super().finish()
        finally:
            if self.streams:
                with self.state.lock:
                    self.state.conns -= 1

    def send_json(self, obj, status=200):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models" and self.llama_cpp:
            self.send_json(LLAMA_MODELS)
        elif self.path == "/v1/models":
            self.send_json({"object": "list", "data": [{"id": "fake", "object": "model", "created": 0,
                                                        "owned_by": "vllm", "root": "/models/fake-root",
                                                        "parent": None, "max_model_len": 4096}]})
        elif self.path == "/_log":
            st = self.state
            with st.lock:
                self.send_json({"requests": st.requests, "arrivals": sorted(st.arrivals),
                                "max_active": st.max_active, "max_connections": st.max_conns})
        else:
            self.send_json({"error": "not found"}, 404)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def llama_post(self, body):
        """llama.cpp's /tokenize and /detokenize; True when the path was one of them."""
        if self.path == "/tokenize":  # no "content" (vLLM's body): an empty list, status 200
            ids = tokenize(body["content"], body.get("add_special", False)) if "content" in body else []
            self.send_json({"tokens": ids})
        elif self.path == "/detokenize":
            self.send_json({"content": " ".join(f"w{t}" for t in body.get("tokens", []) if t != BOS)})
        else:
            return False
        return True

    def do_POST(self):
        try:
            body = self.read_body()
        except ValueError:
            if not self.llama_cpp:
                raise
            return self.send_json(llama_error(LLAMA_PARSE_ERROR, 500, "server_error"), 500)
        t_recv = time.monotonic()
        if self.path == "/_reset":
            self.state.reset()
            return self.send_json({})
        if self.llama_cpp and self.llama_post(body):
            return
        if self.path == "/tokenize" and "content" in body:  # llama.cpp's shape
            return self.send_json({"tokens": tokenize(body["content"], body.get("add_special", False))})
        if self.path == "/tokenize":
            if "messages" in body:
                ids = tokenize(render_chat(body["messages"]), body.get("add_special_tokens", False))
            else:
                ids = tokenize(body.get("prompt", ""), body.get("add_special_tokens", True))
            return self.send_json({"count": len(ids), "max_model_len": 4096, "tokens": ids, "token_strs": None})
        if self.path == "/detokenize":
            return self.send_json({"prompt": " ".join(f"w{t}" for t in body.get("tokens", []) if t != BOS)})
        if self.path in ("/v1/completions", "/v1/chat/completions"):
            return self.generate(body, t_recv, self.path == "/v1/chat/completions")
        self.send_json({"error": "not found"}, 404)

    def generate(self, body, t_recv, chat):
        st = self.state
        rid = self.headers.get("x-request-id") or ""
        with st.lock:
            if not self.streams:  # connections count once they carry a stream
                self.streams = True
                st.conns += 1
                st.max_conns = max(st.max_conns, st.conns)
            if rid.rsplit("-", 1)[-1].isdigit():
                i = int(rid.rsplit("-", 1)[-1])
            else:
                i = st.counter
                st.counter += 1
            st.arrivals.append(t_recv)
            st.active += 1
            st.max_active = max(st.max_active, st.active)
            if st.max_active >= st.hold:
                st.gathered.notify_all()
            else:
                st.gathered.wait_for(lambda: st.max_active >= st.hold, timeout=60)
        try:
            self.stream(body, t_recv, chat, rid, i)
        finally:
            with st.lock:
                st.active -= 1

    def stream(self, body, t_recv, chat, rid, i):
        sc = self.state.script(i)
        if chat:
            prompt_tokens = len(tokenize(render_chat(body.get("messages", [])), False))
            max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 1 << 30))
        else:
            p = body.get("prompt", "")
            prompt_tokens = len(p) if isinstance(p, list) else len(tokenize(p, True))
            max_tokens = body.get("max_tokens", 16)
        n = min(sc["n"], max_tokens)
        rec = {"index": i, "request_id": rid, "recv": t_recv, "status": sc["status"], "events": [], "sent_from": [],
               "prompt_tokens": prompt_tokens, "n": n, "body": body}
        with self.state.lock:
            self.state.requests[rid or str(i)] = rec
        if sc["status"] != 200 and self.llama_cpp:
            kind = "unavailable_error" if sc["status"] == 503 else "invalid_request_error"
            return self.send_json(llama_error(f"scripted failure of request {i}", sc["status"], kind), sc["status"])
        if sc["status"] != 200:
            kind = "ServiceUnavailableError" if sc["status"] == 503 else "BadRequestError"
            return self.send_json({"error": {"message": f"scripted failure of request {i}", "type": kind,
                                             "param": None, "code": sc["status"]}}, sc["status"])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

        def chunk(data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def sleep_until(t):
            while True:
                d = t - time.monotonic()
                if d <= 0:
                    return
                time.sleep(d)

        cid = ("chatcmpl-" if chat else "cmpl-") + f"{i:032x}"
        obj = "chat.completion.chunk" if chat else "text_completion"

        def event(choices, usage=None):
            ev = {"id": cid, "object": obj, "created": 0, "model": body.get("model"), "choices": choices}
            if not chat or usage is not None:
                ev["usage"] = usage
            return b"data: " + json.dumps(ev).encode() + b"\n\n"

        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
        if self.llama_cpp:
            llama = LlamaEvents(body, chat, usage)
        t = t_recv + sc["ttft"]
        if sc["comment"]:
            chunk(b": keep-alive\n\n")
        for k in range(n):
            if k > 0:
                t += sc["itls"][k - 1]
            text = "" if k == sc["empty_token"] else f" w{100 + k}"
            fin = "length" if k == n - 1 else None
            if self.llama_cpp:
                data = llama.token(k, text)
            elif chat:
                choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": fin}
                data = b""
                if k == 0:
                    data = event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                   "finish_reason": None}])
                data += event([choice])
            else:
                data = event([{"index": 0, "text": text, "logprobs": None, "finish_reason": fin,
                               "stop_reason": None}])
            if k == sc["split_event"]:
                half = len(data) // 2
                sleep_until(t - 0.001)
                chunk(data[:half])
                data = data[half:]
            sleep_until(t)
            rec["sent_from"].append(time.monotonic())
            chunk(data)
            rec["events"].append(time.monotonic())
        if self.llama_cpp:
            chunk(llama.final())
            chunk(b"data: [DONE]\n\n")
        else:
            chunk(event([], usage) + b"data: [DONE]\n\n")
        chunk(b"")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--script", choices=["varied", "fixed"], default="varied")
    ap.add_argument("--ttft-ms", type=float, default=10)
    ap.add_argument("--itl-ms", type=float, default=5)
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--llama-cpp", action="store_true")
    ap.add_argument("--hold", type=int, default=0)
    args = ap.parse_args()
    Handler.llama_cpp = args.llama_cpp
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass
    if args.script == "varied":  # a woken stream thread gets the GIL quickly: send times stay on script
        sys.setswitchinterval(0.0002)
    Handler.state = State(varied if args.script == "varied" else fixed(args.ttft_ms, args.itl_ms, args.tokens))
    Handler.state.hold = args.hold
    ThreadingHTTPServer.request_queue_size = 4096
    ThreadingHTTPServer.daemon_threads = True
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"PORT {srv.server_address[1]}", flush=True)
    try:
        srv.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
