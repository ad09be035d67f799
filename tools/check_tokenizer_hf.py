#!/usr/bin/env python3
"""check_tokenizer_hf.py - compare servelab's tokenizer with transformers' LlamaTokenizer.

    tools/check_tokenizer_hf.py MODEL_DIR --tok-encode build/tok_encode [--random 500]

Encodes a list of tricky strings (spaces, newlines, special tokens inside text,
U+2581 in the input, emoji, digits, ...) with both, then decodes transformers'
ids with both (skip_special_tokens false and true, clean_up_tokenization_spaces
and spaces_between_special_tokens off), plus a few hand-made id lists
(broken byte sequences, special tokens mid-text). Prints each mismatch and exits
1 if there is any. One deviation is deliberate and counted apart: where
transformers 4.x decodes leading spaces to literal U+2581 characters, we print
spaces. A development tool: it needs transformers 4.x (whose LlamaTokenizer is
the slow, sentencepiece one) and sentencepiece, which CI does not have.
"""
import argparse
import json
import random
import subprocess
import sys

TEXTS = [
    "Hello world", "hello", " Hello", "  two leading", "trailing  ", "a  b   c", "\n",
    "line one\nline two\n\nthree", "tabs\tand\r\nCRLF", " ", "   ", "",
    "café naïve résumé über", "Ζεύς ήταν", "日本語のテキスト", "emoji 😀 and 🎉🎉",
    "mixed: café 😀 日本 ok", "digits 1234567890 and 3.14", "x=y+1; (a,b)",
    "<s>", "</s>", "<s>Hello", "<s> Hello", "a</s>b", "a </s> b", "Hello</s>", "</s>Hello",
    "<s>[INST] Hi there [/INST] Hello! </s><s>[INST] more [/INST]", "<unk>", "a<unk>b",
    "▁", "▁Hello", "a▁b", " ▁ x", "<s><s>", "</s></s>x", "<<s>>", "<s", "s>",
    "\u00a0nbsp and \u3000 ideographic", "zero\u200bwidth", "end with space ",
    "The quick brown fox jumps over the lazy dog.",
    # added tokens of a test config (plain text elsewhere): lstrip/rstrip, non-special
    "a <|im_end|>  b", "<|im_end|>\n\nnext", "x [TOOL] y", "[TOOL]z", "q  <|sep|>  r",
]

# Decode-only cases: ids are filled in from pieces of the model.
PIECE_LISTS = [
    ["<0xE2>", "<0x96>"],                 # truncated sequence at the end
    ["<0xE2>", "▁the"],                   # truncated sequence then a piece
    ["<0xF0>", "<0x9F>", "<0x98>", "<0x80>"],
    ["<0x80>", "<0xFF>", "<0xC0>", "<0xAF>"],  # lone continuation, invalid leads
    ["<s>", "▁the", "</s>"], ["<s>", "the"], ["▁", "▁the"], ["▁▁", "the"],
    ["the", "</s>", "▁the", "<s>", "the"], ["</s>", "</s>", "▁the"], ["<unk>", "▁the"],
    ["▁a", "[TOOL]", "▁b"], ["[TOOL]", "▁b", "</s>"], ["▁the", "<|im_end|>", "▁the"],
]
POOL = ["a", "b", "the", " ", "  ", "\n", "\t", "▁", "<s>", "</s>", "<unk>", "é", "日", "😀",
        "7", "42", ".", "<", ">", "[TOOL]", "<|im_end|>", "\u00a0", "\r\n"]


def hf_tokenizer(model_dir):
    """The slow tokenizer only treats added tokens listed in special_tokens_map as
    special; servelab (like the fast tokenizers and vLLM) honours `special: true`
    in added_tokens_decoder, so those are listed here to compare like with like."""
    import os
    import transformers
    from transformers import LlamaTokenizer
    print(f"transformers {transformers.__version__}: {LlamaTokenizer.__module__}.LlamaTokenizer")
    extra = []
    cfg = os.path.join(model_dir, "tokenizer_config.json")
    if os.path.exists(cfg):
        with open(cfg) as f:
            dec = json.load(f).get("added_tokens_decoder", {})
        extra = [t["content"] for t in dec.values() if t.get("special")]
    tok = LlamaTokenizer.from_pretrained(model_dir)
    extra = [t for t in extra if t not in tok.all_special_tokens]
    if extra:
        tok = LlamaTokenizer.from_pretrained(model_dir, additional_special_tokens=extra)
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--tok-encode", required=True, help="path of the tok_encode tool")
    ap.add_argument("--random", type=int, default=0, metavar="N",
                    help="also compare N random strings drawn from a pool of tricky parts")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    for _ in range(args.random):
        TEXTS.append("".join(rng.choice(POOL) for _ in range(rng.randint(1, 12))))
    hf = hf_tokenizer(args.model_dir)
    vocab = hf.get_vocab()
    hf_ids = [hf.encode(t, add_special_tokens=True) for t in TEXTS]
    lists = hf_ids + [[vocab[p] for p in ps] for ps in PIECE_LISTS if all(p in vocab for p in ps)]
    req = {"encode": TEXTS, "decode": lists}
    out = subprocess.run([args.tok_encode, args.model_dir], input=json.dumps(req),
                         capture_output=True, text=True, check=True)
    ours = json.loads(out.stdout)

    bad = known = 0
    for text, want, got in zip(TEXTS, hf_ids, ours["encode"]):
        if want != got:
            bad += 1
            print(f"encode {text!r}:\n  hf   {want} {hf.convert_ids_to_tokens(want)}\n  ours {got}")
    for i, ids in enumerate(lists):
        for skip, key in ((False, "decode"), (True, "decode_skip")):
            want = hf.decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False,
                             spaces_between_special_tokens=False)
            if want != ours[key][i] and want.replace("\u2581", " ") == ours[key][i]:
                known += 1  # transformers 4.x prints U+2581 where a space was (see tokenizer.c)
            elif want != ours[key][i]:
                bad += 1
                print(f"decode {hf.convert_ids_to_tokens(ids)} skip={skip}:\n"
                      f"  hf   {want!r}\n  ours {ours[key][i]!r}")
    n = len(TEXTS) + 2 * len(lists)
    print(f"{len(TEXTS)} encodes, {2 * len(lists)} decodes: {n - bad - known} equal, "
          f"{known} known deviations (U+2581 printed as a space), {bad} different")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
