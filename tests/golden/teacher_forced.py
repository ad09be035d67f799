"""teacher_forced.py - what the golden checks share: `servelab generate --prompts-file`, and
servelab's greedy token after each prefix of a reference's answers, judged by vLLM's
check_logprobs_close rule (where the top-1 tokens differ, each must be in the other's top 5).
Free-running greedy answers diverge at the first flipped near-tie; teacher-forcing judges every
step on its own.
"""
import json
import os
import subprocess
import sys
import tempfile


def run_generate(servelab, model, lines, extra=(), env=None):
    """`servelab generate --json` on JSON request lines: (the finished process, its output
    objects, one per line), for callers that judge the exit status and stderr themselves."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)
        path = f.name
    try:
        res = subprocess.run([servelab, "generate", model, "--device", "cpu", "--prompts-file", path, "--json",
                              *extra], capture_output=True, text=True, timeout=600, env=env)
    finally:
        os.unlink(path)
    return res, [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]


def generate(servelab, model, lines, extra=()):
    """servelab's outputs (the --json objects) for JSON request lines, one per line."""
    res, outs = run_generate(servelab, model, lines, extra)
    if res.returncode != 0:
        sys.exit(f"servelab failed ({res.returncode}):\n{res.stderr[-2000:]}")
    return outs


def forced_steps(prompts, outs):
    """Greedy one-token requests along each answer in outs (the --json objects for prompts):
    (the request lines, the answer's token at each), for a top-1 agreement count."""
    steps, want = [], []
    for p, o in zip(prompts, outs):
        for j, t in enumerate(o["token_ids"]):
            steps.append({"prompt_token_ids": p + o["token_ids"][:j], "max_tokens": 1, "temperature": 0})
            want.append(t)
    return steps, want


def teacher_forced(servelab, model, cases, whose):
    """cases: (prompt_token_ids, the reference's token_ids, its top-5 ids at each step).
    Returns (ok, name, detail) for the caller's check line."""
    lines, want, theirs_top5 = [], [], []
    for prompt, tokens, top5 in cases:
        for j, t in enumerate(tokens):
            lines.append({"prompt_token_ids": prompt + tokens[:j], "max_tokens": 1, "temperature": 0,
                          "logprobs": 5})
            want.append(t)
            theirs_top5.append(top5[j])
    outs = generate(servelab, model, lines)
    if len(outs) != len(want):
        return False, f"teacher-forced along {whose} answers", f"{len(outs)} answers for {len(want)} steps"
    agree, bad = 0, []
    for i, (o, t, top) in enumerate(zip(outs, want, theirs_top5)):
        ours = o["token_ids"][0]
        agree += ours == t
        if ours != t and (t not in [x["id"] for x in o["top_logprobs"][0]] or ours not in top):
            bad.append((i, ours, t))
    name = (f"teacher-forced along {whose} answers: top-1 equal at {agree} of {len(want)} steps "
            f"({100 * agree / max(len(want), 1):.1f}%); where not, each token in the other's top 5")
    return not bad, name, f"{len(bad)} steps (step, ours, theirs), first {bad[:4]}"
