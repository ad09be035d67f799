#!/usr/bin/env python3
"""n-gram speculative decoding (`--speculative-config`) through the real server and the official
`openai` client, on SmolLM2-135M-Instruct.

- bad configs exit 2 with one line naming the problem;
- greedy: the same text, token ids and logprobs with and without speculation (chat, streamed
  and not; completions); streamed, the tokens one step keeps arrive in one chunk (as vLLM sends
  them), with a logprobs entry each;
- the counters, exactly: for each greedy request, the drafts, draft tokens and accepted tokens per
  position that vLLM's rule gives, replayed here on the request's own tokens with a Python port of
  vLLM's NgramProposer (KMP on the reversed context, not the server's algorithm), equal the
  deltas of vllm:spec_decode_num_*; accepted_tokens_per_pos sums to accepted_tokens;
- the "SpecDecoding metrics: ..." log line in vLLM's format; no spec_decode series without it;
- seeded sampling: the same text with and without speculation;
- the output distribution at temperature 1, with and without speculation, by chi-square tests
  (p > 0.001): each emitted token's rank in its own position's distribution (the top-20
  logprobs), binned, against the expected counts (4 degrees of freedom); and how often the drafts
  vLLM's rule verifies (replayed) are kept, against the sum of their probabilities (1 degree of
  freedom): rejection sampling keeps a draft d with probability p(d).
Prints one line per check and "N passed, N failed".
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import openai

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 2}
K = SPEC["num_speculative_tokens"]
REPEAT = "Repeat this text exactly, nothing else: " + "The quick brown fox jumps over the lazy dog. " * 3
PROMPTS = [REPEAT, "What is the capital of France?", "List the days of the week, one per line."]
# Drafts that are often wrong at temperature 1: the next letter is a guess among three.
LETTERS = "Continue this random sequence of the letters A, B and C: A B C B A C C A B A B C A A C B C B"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, servelab, model, tmp, *extra):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(tmp, f"servelab-{self.port}.log"), "w+")
        env = dict(os.environ, VLLM_LOG_STATS_INTERVAL="1")
        self.proc = subprocess.Popen([servelab, "serve", model, "--device", "cpu", "--host", "127.0.0.1", "--port",
                                      str(self.port), "--max-model-len", "1024", "--seed", "0", *extra],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("servelab did not start:\n" + self.logs()[-2000:])
        self.client = openai.OpenAI(base_url=self.base + "/v1", api_key="none", max_retries=0, timeout=300)

    def logs(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def settled(self, before, n_tokens):
        """The metrics once the engine has published the step that finished the last request:
        the response can reach the client before the step's counters do."""
        deadline = time.time() + 10
        key = ("vllm:generation_tokens_total", None)
        while True:
            m, _ = self.metrics()
            if m.get(key, 0) - before.get(key, 0) >= n_tokens or time.time() > deadline:
                return m

    def metrics(self):
        with urllib.request.urlopen(self.base + "/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            m = re.match(r'(vllm:spec_decode_\w+?|vllm:generation_tokens_total)(?:\{[^}]*position="(\d+)"[^}]*\}|'
                         r'\{[^}]*\})? (\S+)$', line)
            if m:
                out[(m.group(1), m.group(2))] = float(m.group(3))
        return out, text

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def ngram_propose(tokens, min_n, max_n, k, max_model_len):
    """vLLM's _find_longest_matched_ngram_and_propose_tokens, in Python."""
    total = len(tokens)
    if total < min_n:
        return []
    k = min(k, max_model_len - total)
    if k <= 0:
        return []
    rev = tokens[::-1]
    lps = [0] * max_n
    longest, position, prev, i = 0, 0, 0, 1
    while i < total:
        if rev[prev] == rev[i]:
            prev += 1
            if prev >= longest:
                longest, position = prev, i
            if i < max_n:
                lps[i] = prev
            if prev == max_n:
                prev = lps[max_n - 1]
            i += 1
        elif prev != 0:
            prev = lps[prev - 1]
        else:
            i += 1
    if longest < min_n:
        return []
    start = total - 1 - position + longest
    return tokens[start:start + min(k, total - start)]


def replay(prompt, output, max_model_len=1024):
    """The counters vLLM's rule gives a lone greedy request whose tokens are `output`: (drafts,
    draft tokens, accepted low, accepted high, per-position low/high). The last step verifies
    drafts past the request's end against tokens the server sampled and dropped: there the
    accepted count is known only to be at least what the output shows."""
    drafts = draft_tokens = acc_lo = acc_hi = 0
    pos_lo, pos_hi = [0] * K, [0] * K
    m = 1  # the prefill step gives the first token; drafts follow it
    while m < len(output):
        d = ngram_propose(prompt + output[:m], SPEC["prompt_lookup_min"], SPEC["prompt_lookup_max"], K,
                          max_model_len)
        a = 0
        while a < len(d) and m + a < len(output) - 1 and d[a] == output[m + a]:
            a += 1
        lo = hi = a
        if m + a == len(output) - 1 and a < len(d) and d[a] == output[-1]:
            lo, hi = a + 1, len(d)  # the final token was a draft: the next ones met samples it dropped
        if d:
            drafts += 1
            draft_tokens += len(d)
            acc_lo += lo
            acc_hi += hi
            for j in range(lo):
                pos_lo[j] += 1
            for j in range(hi):
                pos_hi[j] += 1
        m += a + 1
    return drafts, draft_tokens, acc_lo, acc_hi, pos_lo, pos_hi


def render_ids(servelab, model, text):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([{"role": "user", "content": text}], f)
    try:
        res = subprocess.run([servelab, "render", model, "--json", "--messages", "@" + f.name], capture_output=True,
                             text=True, timeout=60, check=True)
    finally:
        os.unlink(f.name)
    return json.loads(res.stdout)["token_ids"]


def completion_ids(server, prompt_ids, **kw):
    r = server.client.completions.create(model=server.model, prompt=prompt_ids, max_tokens=kw.pop("max_tokens", 64),
                                         logprobs=kw.pop("logprobs", 1),
                                         extra_body={"return_tokens_as_token_ids": True, **kw.pop("extra", {})}, **kw)
    c = r.choices[0]
    ids = [int(t.split(":")[1]) for t in c.logprobs.tokens]
    return c.text, ids, c.logprobs


# Rank bins for the distribution test: 1, 2, 3-5, 6-20, beyond the top 20.
BINS = [(1, 1), (2, 2), (3, 5), (6, 20), (21, 10 ** 9)]


def sampled_stats(server, prompt_ids, seeds, n_tokens):
    """Over every token of `seeds` requests at temperature 1 (the sampled distribution is then the
    raw softmax the top-20 logprobs describe): the observed and expected counts per rank bin, and,
    at each position where vLLM's rule (replayed) verified a draft d of probability p(d) known from
    the top 20, whether d was kept: (kept, sum of p, sum of p (1 - p)). The rule must keep d with
    probability p(d), no more (a draft kept too often) and no less."""
    import math
    observed, expected = [0] * len(BINS), [0.0] * len(BINS)
    kept, e_kept, var = 0, 0.0, 0.0
    for seed in seeds:
        r = server.client.completions.create(model=server.model, prompt=prompt_ids, max_tokens=n_tokens,
                                             temperature=1.0, seed=seed, logprobs=20,
                                             extra_body={"return_tokens_as_token_ids": True, "ignore_eos": True})
        lp = r.choices[0].logprobs
        out = [int(t.split(":")[1]) for t in lp.tokens]
        for tok, top in zip(lp.tokens, lp.top_logprobs):
            ranked = sorted(top.items(), key=lambda kv: -kv[1])
            probs = [math.exp(v) for _, v in ranked]
            rank = next((i + 1 for i, (t, _) in enumerate(ranked) if t == tok), 21)
            for b, (lo, hi) in enumerate(BINS):
                if lo <= rank <= hi:
                    observed[b] += 1
                if lo <= 20:
                    expected[b] += sum(probs[lo - 1:min(hi, 20)])
            expected[-1] += max(0.0, 1.0 - sum(probs))
        m = 1
        while m < len(out):
            d = ngram_propose(prompt_ids + out[:m], SPEC["prompt_lookup_min"], SPEC["prompt_lookup_max"], K, 1024)
            a = 0
            while a < len(d) and m + a < len(out):
                p = math.exp(lp.top_logprobs[m + a].get(f"token_id:{d[a]}", -math.inf))
                if p > 0:  # d in the position's top 20: its probability is known
                    kept += d[a] == out[m + a]
                    e_kept += p
                    var += p * (1 - p)
                if d[a] != out[m + a]:
                    break
                a += 1
            m += a + 1
    return observed, expected, (kept, e_kept, var)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--smollm2", required=True, help="the demo model (SmolLM2-135M-Instruct)")
    args = ap.parse_args()
    results = []

    def check(name, cond, detail=""):
        results.append(bool(cond))
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + str(detail)}", flush=True)

    for bad, says in (('{"method": "ngram"}', "num_speculative_tokens must be provided"),
                      ('{"method": "eagle", "num_speculative_tokens": 2}', 'method "eagle" is not supported')):
        res = subprocess.run([args.servelab, "serve", args.smollm2, "--speculative-config", bad],
                             capture_output=True, text=True, timeout=60)
        check(f"--speculative-config '{bad}' exits 2 naming the problem",
              res.returncode == 2 and "argument --speculative-config" in res.stderr and says in res.stderr,
              res.stderr[-300:])

    tmp = tempfile.mkdtemp(prefix="servelab-spec-")
    plain = Server(args.servelab, args.smollm2, tmp)
    spec = Server(args.servelab, args.smollm2, tmp, "--speculative-config", json.dumps(SPEC))
    try:
        for s in (plain, spec):
            s.model = s.client.models.list().data[0].id
        m0, text0 = plain.metrics()
        check("no vllm:spec_decode series without --speculative-config",
              not [k for k in m0 if k[0].startswith("vllm:spec_decode")], list(m0)[:3])
        m_start, text = spec.metrics()
        check("the spec_decode counters exist at 0 from startup, one per position",
              all(m_start.get((n, None)) == 0 for n in ("vllm:spec_decode_num_drafts_total",
                                                        "vllm:spec_decode_num_draft_tokens_total",
                                                        "vllm:spec_decode_num_accepted_tokens_total")) and
              [m_start.get(("vllm:spec_decode_num_accepted_tokens_per_pos_total", str(i))) for i in range(K)] ==
              [0] * K, text[-800:])

        # Greedy: identical answers, and counters equal to the replay.
        for i, text_prompt in enumerate(PROMPTS):
            ids = render_ids(args.servelab, args.smollm2, text_prompt)
            before, _ = spec.metrics()
            t_plain, o_plain, lp_plain = completion_ids(plain, ids, temperature=0)
            t_spec, o_spec, lp_spec = completion_ids(spec, ids, temperature=0)
            after = spec.settled(before, len(o_spec))
            check(f"prompt {i}: greedy completion identical with speculation ({len(o_spec)} tokens)",
                  t_plain == t_spec and o_plain == o_spec, (t_plain[:80], t_spec[:80]))
            check(f"prompt {i}: the same logprobs",
                  all(abs(a - b) < 1e-4 for a, b in zip(lp_plain.token_logprobs, lp_spec.token_logprobs)))
            delta = {key: after.get(key, 0) - before.get(key, 0) for key in after}
            drafts, dtok, lo, hi, pos_lo, pos_hi = replay(ids, o_spec)
            got = (delta[("vllm:spec_decode_num_drafts_total", None)],
                   delta[("vllm:spec_decode_num_draft_tokens_total", None)],
                   delta[("vllm:spec_decode_num_accepted_tokens_total", None)])
            per_pos = [delta[("vllm:spec_decode_num_accepted_tokens_per_pos_total", str(j))] for j in range(K)]
            check(f"prompt {i}: counters {got[0]:.0f} drafts, {got[2]:.0f}/{got[1]:.0f} accepted = vLLM's rule "
                  f"replayed ({drafts}, {lo}..{hi}/{dtok}); per position {[int(p) for p in per_pos]}",
                  got[0] == drafts and got[1] == dtok and lo <= got[2] <= hi and sum(per_pos) == got[2] and
                  all(a <= p <= b for a, p, b in zip(pos_lo, per_pos, pos_hi)), (got, per_pos, pos_lo, pos_hi))
            if i == 0:
                check(f"prompt 0 (repetitive): most drafts accepted ({got[2]:.0f}/{got[1]:.0f})", got[2] > got[1] / 2)

        # A streamed chat with logprobs: a step's tokens arrive in one chunk, with an entry each.
        seen = []
        for s in (plain, spec):
            chunks = list(s.client.chat.completions.create(
                model=s.model, messages=[{"role": "user", "content": PROMPTS[0]}], max_tokens=48, temperature=0,
                stream=True, logprobs=True, top_logprobs=2, stream_options={"include_usage": True}))
            entries = [e.token for c in chunks if c.choices and c.choices[0].logprobs
                       for e in c.choices[0].logprobs.content]
            n_chunks = sum(1 for c in chunks if c.choices and c.choices[0].logprobs and c.choices[0].logprobs.content)
            seen.append((entries, n_chunks, chunks[-1].usage.completion_tokens))
        (e0, c0, n0), (e1, c1, n1) = seen
        check(f"streamed chat with logprobs: the same {n1} entries; {c0} chunks without speculation, {c1} with "
              f"(a step's tokens in one chunk)", e0 == e1 and len(e1) == n1 == n0 and c0 == n0 and c1 < n1 / 2,
              (len(e0), len(e1), c0, c1, n0, n1))

        # Chat through the openai client, streamed and not.
        for stream in (False, True):
            answers = []
            for s in (plain, spec):
                kw = dict(model=s.model, messages=[{"role": "user", "content": PROMPTS[0]}], max_tokens=48,
                          temperature=0)
                if stream:
                    answers.append("".join(c.choices[0].delta.content or "" for c in
                                           s.client.chat.completions.create(stream=True, **kw) if c.choices))
                else:
                    answers.append(s.client.chat.completions.create(**kw).choices[0].message.content)
            check(f"chat ({'streamed' if stream else 'not streamed'}): the same answer", answers[0] == answers[1],
                  answers)

        # Seeded sampling: the same tokens.
        ids = render_ids(args.servelab, args.smollm2, PROMPTS[2])
        same = all(completion_ids(plain, ids, temperature=0.8, seed=seed)[1] ==
                   completion_ids(spec, ids, temperature=0.8, seed=seed)[1] for seed in (1, 2, 3))
        check("seeded sampling (temperature 0.8, seeds 1-3): the same tokens with speculation", same)

        # The distribution at temperature 1.
        ids = render_ids(args.servelab, args.smollm2, LETTERS)
        for name, s in (("without", plain), ("with", spec)):
            before, _ = s.metrics()
            obs, exp, (kept, e_kept, var) = sampled_stats(s, ids, range(100, 124), 32)
            after = s.settled(before, 24 * 32)
            chi2 = sum((o - e) ** 2 / e for o, e in zip(obs, exp))
            verified = after.get(("vllm:spec_decode_num_draft_tokens_total", None), 0) - \
                before.get(("vllm:spec_decode_num_draft_tokens_total", None), 0)
            check(f"temperature 1 {name} speculation: ranks {obs} vs expected {[round(e, 1) for e in exp]}, "
                  f"chi2 = {chi2:.2f} < 18.47 (4 dof, p = 0.001); {verified:.0f} draft tokens verified",
                  chi2 < 18.47 and (name == "without" or verified > 100))
            chi2_kept = (kept - e_kept) ** 2 / var if var > 0 else float("inf")
            check(f"temperature 1 {name} speculation: drafts kept {kept} times, expected {e_kept:.1f}: chi2 = "
                  f"{chi2_kept:.2f} < 10.83 (1 dof, p = 0.001)", chi2_kept < 10.83 and var > 5)

        deadline = time.time() + 5
        pat = re.compile(r"SpecDecoding metrics: Mean acceptance length: \d+\.\d\d, Accepted throughput: "
                         r"\d+\.\d\d tokens/s, Drafted throughput: \d+\.\d\d tokens/s, Accepted: \d+ tokens, "
                         r"Drafted: \d+ tokens, Per-position acceptance rate: (\d\.\d{3}, ){3}\d\.\d{3}, "
                         r"Avg Draft acceptance rate: \d+\.\d%")
        while time.time() < deadline and not pat.search(spec.logs()):
            time.sleep(0.2)
        line = next((l for l in spec.logs().splitlines() if "SpecDecoding metrics" in l), "")
        check("the log has vLLM's SpecDecoding metrics line", pat.search(line), line or spec.logs()[-600:])
        print("     " + line)
    finally:
        plain.stop()
        spec.stop()

    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
