#!/usr/bin/env python3
"""`servelab generate --prompts-file`: offline batches through the real binary.

Checks that outputs keep input order whatever the engine interleaves, that
per-line sampling fields apply (max_tokens, n, stop, logprobs, seed, greedy),
that a request's greedy tokens are the same in a batch as alone and with
--batching static and with xxhash block hashes (a repeated prompt then hits
the prefix cache), that a bad line is refused with FILE:LINE and exit 1, and
that a --prefix-caching-hash-algo vLLM has but servelab lacks exits 2.
Prints one line per check and "N passed, N failed".
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def generate(servelab, model, lines, *flags):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
        path = f.name
    try:
        res = subprocess.run([servelab, "generate", model, "--device", "cpu", "--prompts-file", path, "--json", *flags],
                             capture_output=True, text=True, timeout=300)
    finally:
        os.unlink(path)
    outs = [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]
    return res, outs, path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    results = []

    def check(name, cond, detail=""):
        results.append(cond)
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + detail}")

    prompts = [f"Request number {i} says" + " word" * (i * 7 % 23) for i in range(12)]
    lines = [{"prompt": p, "max_tokens": 3 + i, "temperature": 0, "ignore_eos": True} for i, p in enumerate(prompts)]
    lines[3].update(n=3, temperature=0.9, seed=11)
    lines[5].update(logprobs=4)
    res, outs, _ = generate(args.servelab, args.model, lines)
    check("exit status 0", res.returncode == 0, res.stderr[-500:])
    check("one output per line, in order", [o["prompt"] for o in outs] == prompts)
    check("max_tokens per line", all(len(o["token_ids"]) == 3 + i for i, o in enumerate(outs) if i != 3))
    check("finish_reason length", all(o["finish_reason"] == "length" for o in outs))
    three = outs[3]
    check("n=3 gives three outputs", len(three.get("outputs", [])) == 3 and
          [c["index"] for c in three["outputs"]] == [0, 1, 2])
    check("n=3 siblings sample differently", len({tuple(c["token_ids"]) for c in three.get("outputs", [])}) > 1)
    top = outs[5].get("top_logprobs", [])
    check("logprobs=4 gives 4 sorted alternatives per token",
          len(top) == len(outs[5]["token_ids"]) and all(len(s) == 4 for s in top) and
          all(s[0]["logprob"] >= s[-1]["logprob"] for s in top))
    check("chosen logprob <= 0", all(lp <= 0 for o in outs for lp in o["logprobs"]))

    # The same greedy request alone, and inside a static batch.
    target = lines[7]
    _, alone, _ = generate(args.servelab, args.model, [target])
    _, static, _ = generate(args.servelab, args.model, lines, "--batching", "static", "--max-num-seqs", "4")
    check("greedy tokens same alone and in the batch", alone and alone[0]["token_ids"] == outs[7]["token_ids"])
    check("greedy tokens same with static batching", static and static[7]["token_ids"] == outs[7]["token_ids"])
    # xxh3_128 block hashes: the same greedy tokens, and a repeated prompt (lines[9], 47 tokens) hits the cache.
    _, xx, _ = generate(args.servelab, args.model, lines + [lines[9]], "--prefix-caching-hash-algo", "xxhash")
    check("greedy tokens same with --prefix-caching-hash-algo xxhash, repeated prompt served from the cache",
          len(xx) == len(outs) + 1 and all(xx[i]["token_ids"] == outs[i]["token_ids"] for i in range(len(outs))
                                           if i != 3) and
          xx[-1]["token_ids"] == outs[9]["token_ids"] and xx[-1]["num_cached_tokens"] > 0,
          json.dumps(xx[-1] if xx else None)[-300:])

    # vLLM's TokensPrompt: the same ids as prompt_token_ids give the same greedy tokens, and the
    # prompt's decode as "prompt".
    ids_line = {k: v for k, v in target.items() if k != "prompt"}
    ids_line["prompt_token_ids"] = outs[7]["prompt_token_ids"]
    _, by_ids, _ = generate(args.servelab, args.model, [ids_line])
    check("prompt_token_ids: same greedy tokens as the text prompt", by_ids and
          by_ids[0]["token_ids"] == outs[7]["token_ids"] and by_ids[0]["prompt_token_ids"] == outs[7]["prompt_token_ids"],
          json.dumps(by_ids[0] if by_ids else None)[-300:])

    # A stop string taken from the greedy text itself.
    text = outs[11]["text"]
    if len(text) >= 6:
        stop = text[3:6]
        _, got, _ = generate(args.servelab, args.model, [dict(lines[11], stop=[stop])])
        check("stop string ends the text before it", got and got[0]["finish_reason"] == "stop" and
              got[0]["stop_reason"] == stop and got[0]["text"] == text[:text.index(stop)],
              json.dumps(got[0] if got else None))
    else:
        check("greedy text long enough for a stop test", False, repr(text))

    # Bad input: one precise line, exit 1, nothing generated.
    for name, bad, words in [
        ("unknown field", '{"prompt": "x", "max_token": 3}', 'unknown field "max_token"'),
        ("wrong type", '{"prompt": "x", "temperature": "hot"}', "temperature: expected a number"),
        ("not JSON", '{"prompt": ', "not a JSON object"),
        ("missing prompt", '{"max_tokens": 3}', "prompt: expected a string"),
        ("prompt and prompt_token_ids", '{"prompt": "x", "prompt_token_ids": [1]}', "not both"),
        ("prompt_token_ids not ids", '{"prompt_token_ids": [1, "a"]}', "prompt_token_ids: expected integers"),
        ("prompt_token_ids empty", '{"prompt_token_ids": []}', "non-empty array"),
    ]:
        res, outs_bad, path = generate(args.servelab, args.model, [lines[0], bad])
        err = res.stderr.strip().splitlines()
        check(f"bad line ({name}) refused", res.returncode == 1 and not outs_bad and err and
              err[-1].startswith("servelab: error: ") and ":2: " in err[-1] and words in err[-1],
              res.stderr[-300:])
    # An engine flag's bad choice: argparse's message, exit 2. The CBOR variants of vLLM's hash are not offered.
    for algo in ["sha256_cbor", "builtin"]:
        res, outs_bad, _ = generate(args.servelab, args.model, [lines[0]], "--prefix-caching-hash-algo", algo)
        want = (f"servelab: error: argument --prefix-caching-hash-algo: invalid choice: '{algo}' "
                "(choose from 'sha256', 'xxhash')")
        check(f"--prefix-caching-hash-algo {algo} refused", res.returncode == 2 and not outs_bad and
              res.stderr.strip().splitlines()[-1:] == [want], res.stderr[-300:])
    res, outs_bad, _ = generate(args.servelab, args.model, [dict(lines[0], temperature=-1)])
    check("out-of-range parameter refused per prompt", res.returncode == 1 and "temperature" in res.stderr,
          res.stderr[-300:])

    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
