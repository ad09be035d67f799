#!/usr/bin/env python3
"""Renders every (template, conversation) pair of the chat-template corpus with Python
jinja2 configured exactly as Hugging Face transformers configures it, and writes
tests/chat_templates/expected.json, which tests/unit/test_chat_template.c compares
against byte for byte.

transformers (utils/chat_template_utils.py) renders with
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[AssistantTracker, loopcontrols]), a tojson filter that is json.dumps with
ensure_ascii=False, and the globals raise_exception, strftime_now, dict and namespace;
apply_chat_template drops message keys whose value is None and passes the special
tokens as variables. This script reproduces that. With --check-transformers it also
renders every case through transformers' own render_jinja_template and fails on any
difference (needs transformers >= 5 installed).

    python3 tests/chat_templates/make_expected.py [--check-transformers]
"""
import argparse
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))

# name, file, bos_token, eos_token (as the model's tokenizer_config.json sets them)
TEMPLATES = [
    ("zephyr-7b-beta", "zephyr-7b-beta.jinja", "<s>", "</s>"),
    ("llama-2-7b-chat", "llama-2-7b-chat.jinja", "<s>", "</s>"),
    ("mistral-7b-instruct-v0.1", "mistral-7b-instruct-v0.1.jinja", "<s>", "</s>"),
    ("mistral-7b-instruct-v0.2-2023", "mistral-7b-instruct-v0.2-2023.jinja", "<s>", "</s>"),
    ("mistral-7b-instruct-v0.2", "mistral-7b-instruct-v0.2.jinja", "<s>", "</s>"),
    ("mistral-7b-instruct-v0.3", "mistral-7b-instruct-v0.3.jinja", "<s>", "</s>"),
    ("gemma-7b-it", "gemma-7b-it.jinja", "<bos>", "<eos>"),
    ("openhermes-2.5-mistral-7b", "openhermes-2.5-mistral-7b.jinja", "<s>", "<|im_end|>"),
    ("qwen2-7b-instruct", "qwen2-7b-instruct.jinja", None, "<|im_end|>"),
    ("phi-3-mini-4k-instruct", "phi-3-mini-4k-instruct.jinja", "<s>", "<|endoftext|>"),
    ("vicuna-rakutenai-7b-instruct", "vicuna-rakutenai-7b-instruct.jinja", "<s>", "</s>"),
    ("fewshot-metamath-orcavicuna-mistral", "fewshot-metamath-orcavicuna-mistral.jinja", "<s>", "</s>"),
    ("llama-3-8b-instruct", "llama-3-8b-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama-3.3-70b-instruct", "llama-3.3-70b-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    ("smollm2-135m-instruct", "smollm2-135m-instruct.jinja", "<|im_start|>", "<|im_end|>"),
]

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "days": {"type": "integer", "default": 3, "minimum": 1},
                "threshold": {"type": "number", "default": 0.25},
                "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}]

# name -> (messages, tools)
CONVERSATIONS = {
    "single_turn": ([{"role": "user", "content": "Hello, who are you?"}], None),
    "system_user": ([
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the capital of France?"},
    ], None),
    "multi_turn": ([
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello! How can I help you today?"},
        {"role": "user", "content": "Tell me a joke."},
        {"role": "assistant", "content": "Why did the chicken cross the road?"},
        {"role": "user", "content": "Why?"},
    ], None),
    "system_multi_turn": ([
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Sky color?"},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Grass color?"},
    ], None),
    "unicode_quotes": ([
        {"role": "user", "content": "  Héllo — 日本語 😀 \"double\" 'single' back\\slash\ttab\nsecond line  "},
        {"role": "assistant", "content": "Ça va? «oui»\u2028line separator\u00a0nbsp\n\n"},
        {"role": "user", "content": "<s>[INST] not a tag </s> {{ not jinja }} {% raw %} \x01 end"},
    ], None),
    "assistant_last": ([
        {"role": "user", "content": "Count to three."},
        {"role": "assistant", "content": "One, two, three."},
    ], None),
    "not_alternating": ([
        {"role": "user", "content": "First question."},
        {"role": "user", "content": "Second question."},
    ], None),
    "tool_call": ([
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call12345", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
        {"role": "tool", "tool_call_id": "call12345", "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 21.5 °C and clear in Paris."},
    ], TOOLS),
}


class AssistantTracker(Extension):
    """transformers' {% generation %} tag: renders its body (index tracking is off)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


class TemplateDict:
    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class TemplateNamespace(jinja2.utils.Namespace):
    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                "Please rename the attribute."
            )


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env


def special_tokens(bos, eos):
    return {k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v is not None}


def render(env, source, messages, tools, add_generation_prompt, tokens):
    """Returns (output, None) or (None, (error type, message))."""
    messages = [{k: v for k, v in m.items() if v is not None} for m in messages]
    try:
        return env.from_string(source).render(
            messages=messages, tools=tools, documents=None,
            add_generation_prompt=add_generation_prompt, **tokens), None
    except jinja2.exceptions.TemplateError as e:
        kind = "raised" if type(e) is jinja2.exceptions.TemplateError else "render"
        return None, (kind, str(e))
    except Exception as e:  # TypeError, ZeroDivisionError, ...
        return None, ("render", str(e))


def render_with_transformers(source, messages, tools, add_generation_prompt, tokens):
    from transformers.utils.chat_template_utils import render_jinja_template
    messages = [{k: v for k, v in m.items() if v is not None} for m in messages]
    try:
        out, _ = render_jinja_template(conversations=[messages], tools=tools, chat_template=source,
                                       add_generation_prompt=add_generation_prompt, **tokens)
        return out[0], None
    except Exception as e:
        return None, str(e)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check-transformers", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "expected.json"))
    args = ap.parse_args()
    env = make_env()
    cases = []
    mismatches = 0
    for name, fname, bos, eos in TEMPLATES:
        with open(os.path.join(HERE, "templates", fname), encoding="utf-8", newline="") as f:
            source = f.read()
        tokens = special_tokens(bos, eos)
        for conv, (messages, tools) in CONVERSATIONS.items():
            for agp in (True, False):
                out, err = render(env, source, messages, tools, agp, tokens)
                case = {"template": name, "file": "templates/" + fname, "conversation": conv,
                        "add_generation_prompt": agp, "special_tokens": tokens, "messages": messages,
                        "tools": tools}
                if err is None:
                    case["output"] = out
                else:
                    case["error_kind"], case["error"] = err
                cases.append(case)
                if args.check_transformers:
                    t_out, t_err = render_with_transformers(source, messages, tools, agp, tokens)
                    if t_out != out or (t_err is None) != (err is None) or (err and t_err != err[1]):
                        mismatches += 1
                        print(f"MISMATCH {name} {conv} agp={agp}: jinja2={out!r}/{err!r} "
                              f"transformers={t_out!r}/{t_err!r}", file=sys.stderr)
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        json.dump({"generator": "tests/chat_templates/make_expected.py",
                   "jinja2": jinja2.__version__, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for c in cases if "error" in c)
    print(f"{len(cases)} cases ({n_err} rejected by their template) -> {args.out}")
    if args.check_transformers:
        print(f"transformers check: {mismatches} mismatches")
        return 1 if mismatches else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
