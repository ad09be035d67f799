#!/usr/bin/env python3
"""The lab page (GET /lab) in a real browser: headless Chromium (Debian's package) under load.

Starts `servelab serve` on models/tiny with --enable-lab-ui and an admin key, a 24-block pool,
a 32-token step budget and steps slowed to ~15 ms (the step_delay fault), runs a load of
concurrent completions, and while it runs has Chromium load /lab#key=KEY:
- after 4 s of the page's life (Chromium driven over the DevTools protocol): its self-check
  (#selfcheck, written by the page after each snapshot it draws from GET /lab/events) says it
  updated several times with no error, drew one cell per KV block of the pool, filled the
  running table while requests ran, and plotted the timeline; its charts, read from GET /metrics
  each second, plotted several points, with generation throughput > 0, a TTFT p50, an ITL p50
  above 10 ms (every step sleeps 15 ms: the chart shows the fault's effect), KV usage in [0, 1],
  and step_delay among the active faults;
- a screenshot of the page under load, kept as build/lab-page.png (a CI artifact);
- without the key the page reports the 401 (self-check errors > 0, no update).
Exits 77 when no Chromium is installed (ctest counts that a failure: scripts/install-deps.sh
installs it). Stops at the first failed check (test_lab's check).
"""
import argparse
import base64
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

import openai

from test_lab import check  # noqa: E402
from test_server import KEY, NAME, Server, raw  # noqa: E402

ADMIN = "page-key"


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


class Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe:
    NUL-terminated JSON on fds 3 and 4, no websocket library needed)."""

    def __init__(self, binary):
        # Chromium's helpers can still be writing the profile as it is removed: errors ignored.
        self.profile = tempfile.TemporaryDirectory(ignore_cleanup_errors=True)
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()

        # Chromium's own output goes to a file, shown if it fails (see start).
        self.log = tempfile.NamedTemporaryFile(prefix="chromium-", suffix=".log")
        devnull = os.open(os.devnull, os.O_WRONLY)
        # posix_spawn's dup2 puts the pipes at 3 and 4 exactly (and clears close-on-exec there).
        self.pid = os.posix_spawn(binary, [binary, "--headless", "--no-sandbox", "--disable-gpu",
                                           "--disable-dev-shm-usage", "--remote-debugging-pipe",
                                           f"--user-data-dir={self.profile.name}", "--window-size=1100,800",
                                           "about:blank"], os.environ,
                                  file_actions=[(os.POSIX_SPAWN_DUP2, to_r, 3), (os.POSIX_SPAWN_DUP2, from_w, 4),
                                                (os.POSIX_SPAWN_DUP2, devnull, 1),
                                                (os.POSIX_SPAWN_DUP2, self.log.fileno(), 2)],
                                  setsid=True)  # its own process group: close kills its helpers too
        os.close(devnull)
        os.close(to_r)
        os.close(from_w)
        self.buf, self.next_id, self.session = b"", 0, None
        try:
            target = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
            self.session = self.call("Target.attachToTarget", targetId=target["targetId"], flatten=True)["sessionId"]
        except Exception:
            self.close()
            raise

    @classmethod
    def start(cls, binary, tries=2):
        """A started browser. Its start is the environment's, not servelab's: one retry, and the
        failure names Chromium's own last words."""
        for attempt in range(1, tries + 1):
            try:
                return cls(binary)
            except (RuntimeError, StopIteration, OSError) as e:
                print(f"chromium did not start (try {attempt} of {tries}): {e!r}", flush=True)
        raise RuntimeError("chromium did not start")

    def call(self, method, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if self.session:
            msg["sessionId"] = self.session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self.buf:
                chunk = os.read(self.from_r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the pipe")
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def open(self, url, seconds):
        """Loads url in a 1100 x 1000 viewport, lets the page live `seconds` of real time."""
        self.call("Emulation.setDeviceMetricsOverride", width=1100, height=1000, deviceScaleFactor=1, mobile=False)
        self.call("Page.navigate", url=url)
        time.sleep(seconds)

    def eval(self, expression):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def screenshot(self, path):
        with open(path, "wb") as f:
            f.write(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))

    def close(self):
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        os.close(self.to_w)
        os.close(self.from_r)
        self.log.seek(0)
        tail = self.log.read()[-1500:].decode(errors="replace").strip()
        if self.session is None and tail:
            print(f"chromium's output:\n{tail}", flush=True)
        self.log.close()
        self.profile.cleanup()


def selfcheck(browser):
    text = browser.eval("document.getElementById('selfcheck').textContent")
    return json.loads(text) if text else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--screenshot", default="lab-page.png")
    a = ap.parse_args()
    browser = chromium()
    if not browser:
        print("no chromium: skipped")
        sys.exit(77)
    srv = Server(a.servelab, a.model, "--num-gpu-blocks-override", "24", "--max-num-seqs", "16",
                 "--max-num-batched-tokens", "32", "--fault", "step_delay:ms=15", "--enable-lab-ui", "--admin-key", ADMIN)
    base = srv.base
    status, headers, page = raw(base, "GET", "/lab")
    check(status == 200 and headers.get("Content-Type", "").startswith("text/html") and b"selfcheck" in page,
          "GET /lab serves the page")

    client = openai.OpenAI(base_url=base + "/v1", api_key=KEY)
    stop = threading.Event()

    def worker(i):
        while not stop.is_set():
            try:
                client.completions.create(model=NAME, prompt="lab page " * (4 + i), max_tokens=60, temperature=0,
                                          extra_body={"ignore_eos": True})
            except Exception:  # noqa: BLE001 (the load only has to keep the engine busy)
                time.sleep(0.1)

    # Daemons, and stopped in `finally`: nothing that fails below can leave them running (the
    # process would never exit).
    workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(12)]
    for w in workers:
        w.start()
    b = None
    try:
        time.sleep(1.0)
        b = Chromium.start(browser)
        b.open(f"{base}/lab#key={ADMIN}", 4.0)
        c = selfcheck(b) or {}
        status = b.eval("document.getElementById('status').textContent")
        check(bool(c), f"the page's self-check: {c}; status: {status}")
        check(c.get("updates", 0) >= 5 and c.get("errors", 1) == 0, f"{c.get('updates')} updates in 4 s, no error")
        check(c.get("num_blocks") == 23 and c.get("blocks_drawn") == 23, "one cell per KV block of the pool (23)")
        check(c.get("max_running", 0) > 1, f"the running table filled under load (up to {c.get('max_running')})")
        check(c.get("timeline_points", 0) >= 5, f"the timeline plotted {c.get('timeline_points')} snapshots")
        check(c.get("metrics_points", 0) >= 2 and c.get("metrics_errors", 1) == 0,
              f"the charts plotted {c.get('metrics_points')} scrapes of /metrics, no error")
        check(c.get("gen_tps_max", 0) > 0 and (c.get("ttft_p50") or 0) > 0,
              f"generation {c.get('gen_tps_max')} tok/s at most, TTFT p50 {c.get('ttft_p50')} s")
        check((c.get("itl_p50") or 0) > 0.010, f"ITL p50 {c.get('itl_p50')} s: above 10 ms under the 15 ms step_delay")
        check(c.get("kv_usage") is not None and 0 <= c["kv_usage"] <= 1, f"KV usage {c.get('kv_usage')}")
        check("step_delay" in c.get("faults_seen", []), f"active faults shown: {c.get('faults_seen')}")
        shot = os.path.abspath(a.screenshot)
        b.screenshot(shot)
        check(os.path.getsize(shot) > 10000, f"screenshot {shot}")
        b.open(f"{base}/lab", 1.5)
        c = selfcheck(b) or {}
        check(c.get("updates") == 0 and c.get("errors", 0) > 0, "without the key: no update, the 401 reported")
    finally:
        stop.set()
        if b:
            b.close()
        for w in workers:
            w.join(timeout=30)  # each ends after its request in flight
        srv.stop()
    print("all lab page checks passed")


if __name__ == "__main__":
    main()
