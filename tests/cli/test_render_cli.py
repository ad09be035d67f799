#!/usr/bin/env python3
"""`servelab render`: the checkpoint's chat template, then its tokenizer, via the binary.

On the bundled tiny checkpoint (Llama-2-chat template): the rendered text is
the Llama-2 prompt, the ids start with exactly one BOS (the template writes it,
tokenization adds none), `</s>` written by the template becomes the EOS id, a
conversation the template rejects exits 1 with the template's message, an
inline --chat-template overrides the checkpoint's, and a template syntax error
names its line and column. Prints one line per check and "N passed, N failed".
"""
import argparse
import json
import subprocess
import sys


def render(servelab, model, messages, *flags):
    return subprocess.run([servelab, "render", model, "--messages", json.dumps(messages), *flags],
                          capture_output=True, text=True, timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servelab", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    results = []

    def check(name, cond, detail=""):
        results.append(bool(cond))
        print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + detail}")

    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Café? 🙂"}]
    res = render(args.servelab, args.model, conv, "--json")
    out = json.loads(res.stdout) if res.returncode == 0 else {}
    want = "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST] Hello! </s><s>[INST] Café? 🙂 [/INST]"
    check("renders the Llama-2 chat prompt", out.get("prompt") == want, repr(out.get("prompt")) + res.stderr)
    ids = out.get("token_ids", [])
    check("one BOS at the start (none added by tokenization)", ids[:1] == [1] and ids[1:2] != [1], str(ids[:4]))
    check("template's </s> is the EOS id and <s> the BOS id", ids.count(2) == 1 and ids.count(1) == 2, str(ids))

    res = render(args.servelab, args.model, conv)
    check("plain output shows the prompt and the ids", res.returncode == 0 and "[/INST]" in res.stdout and
          str(ids[1]) in res.stdout, res.stdout[-300:] + res.stderr)

    bad = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    res = render(args.servelab, args.model, bad)
    check("a conversation the template rejects exits 1 with its message",
          res.returncode == 1 and "Conversation roles must alternate user/assistant/user/assistant/..." in res.stderr,
          res.stderr)

    res = render(args.servelab, args.model, conv[1:2], "--json",
                 "--chat-template", "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
    out = json.loads(res.stdout) if res.returncode == 0 else {}
    check("--chat-template inline overrides the checkpoint's", out.get("prompt") == "<user>Hi there", res.stderr)

    res = render(args.servelab, args.model, conv[1:2], "--chat-template", "{% for m in messages %}\n{{ m.content }")
    check("a template syntax error names line and column", res.returncode != 0 and "line" in res.stderr and
          "column" in res.stderr, res.stderr)

    res = render(args.servelab, args.model, "not a list")
    check("messages that are not a list are refused", res.returncode != 0 and res.stderr.strip(), res.stderr)

    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
