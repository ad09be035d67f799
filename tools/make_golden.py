#!/usr/bin/env python3
"""Record Hugging Face transformers' greedy output on a checkpoint, as golden data.

For each prompt: the prompt's token ids (transformers' tokenizer), 32 greedy
tokens computed by LlamaForCausalLM in float32 (the full sequence is re-run at
every step, no KV cache, so nothing of ours is shared), the log-softmax of the
chosen token at every step, and the top-5 (id, logprob) pairs. The result is
committed under tests/golden/ and checked by tests/golden/check_golden.py,
which needs no transformers. Needs torch + transformers 4.x (not used by CI):
the tokenizer is the slow, sentencepiece-backed LlamaTokenizer, which encodes
exactly as sentencepiece does (the fast conversion drops a leading double
space, and transformers 5 has only the fast one).

    pip install torch "transformers==4.46.3" sentencepiece protobuf
    python3 tools/make_golden.py models/tiny tests/golden/tiny.json
"""
import argparse
import json

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello",
    "In 1984, 42 engineers wrote 7 servers in 365 days.",
    "Ünïcödé: café, naïve, Ελληνικά, 中文 and emoji 🚀🙂.",
    "def main():\n    return 0\n",
    " leading and  double  spaces",
    # Long enough to span many 16-token KV blocks and several prefill chunks.
    " ".join(["The server batches requests, pages the cache and streams tokens."] * 12),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--top-k", type=int, default=5)
    args = ap.parse_args()

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(args.model_dir, use_fast=False)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, torch_dtype=torch.float32)
    model.eval()

    cases = []
    for prompt in PROMPTS:
        prompt_ids = tok(prompt).input_ids
        ids = list(prompt_ids)
        out_ids, logprobs, top = [], [], []
        with torch.no_grad():
            for _ in range(args.max_tokens):
                logits = model(torch.tensor([ids]), use_cache=False).logits[0, -1]
                lp = torch.log_softmax(logits.double(), dim=-1)
                nxt = int(torch.argmax(logits))
                vals, idx = torch.topk(lp, args.top_k)
                out_ids.append(nxt)
                logprobs.append(float(lp[nxt]))
                top.append([[int(i), float(v)] for v, i in zip(vals, idx)])
                ids.append(nxt)
        cases.append({"prompt": prompt, "prompt_token_ids": prompt_ids, "token_ids": out_ids,
                      "logprobs": logprobs, "top_logprobs": top})
        print(f"{len(prompt_ids):4d} prompt tokens -> {out_ids[:8]}...")

    data = {"model": args.model_dir, "dtype": "float32", "max_tokens": args.max_tokens,
            "transformers_version": transformers.__version__, "torch_version": torch.__version__,
            "tokenizer_class": type(tok).__name__, "cases": cases}
    with open(args.out, "w") as f:
        json.dump(data, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}: {len(cases)} prompts x {args.max_tokens} tokens")


if __name__ == "__main__":
    main()
