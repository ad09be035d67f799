#!/usr/bin/env python3
"""emu_rewrite.py - copies a kernels/cuda source for the CUDA emulator tier,
rewriting only the three constructs C++ cannot parse or the emulator must see:

  kern<<<grid, block, smem, stream>>>(args);   ->  slemu::launch("kern", __PRETTY_FUNCTION__, kern,
                                                                  slemu::cfg(grid, block, smem, stream), args);
  asm volatile("tpl" : "=r"(o)... : "l"(p)...); ->  slemu::ptx("tpl", {slemu::ptx_out(o)...}, {slemu::ptx_in(p)...});
  (outputs "=r" / "=f", inputs "r" / "l" / "f"; anything else, "+" included, is an error)
  extern __shared__ [__align__(N)] T name[];    ->  T *name = static_cast<T *>(slemu::dyn_smem(N));

Everything else, line breaks included (so compiler messages keep the
original line numbers), is copied as it is. A construct it cannot parse is an
error, never a silent skip.

usage: emu_rewrite.py IN OUT
"""
import re
import sys


def match_paren(s, i, open_ch="(", close_ch=")"):
    """Index of the bracket closing the one at s[i], skipping strings."""
    depth = 0
    j = i
    while j < len(s):
        c = s[j]
        if c == '"':
            j += 1
            while s[j] != '"':
                j += 2 if s[j] == "\\" else 1
        elif c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return j
        j += 1
    raise SystemExit(f"emu_rewrite: unbalanced {open_ch} at offset {i}")


def split_top(s, sep):
    """Splits s at the `sep` characters outside brackets and strings."""
    parts, depth, cur, j = [], 0, "", 0
    while j < len(s):
        c = s[j]
        if c == '"':
            k = j + 1
            while s[k] != '"':
                k += 2 if s[k] == "\\" else 1
            cur += s[j : k + 1]
            j = k + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
        j += 1
    parts.append(cur)
    return parts


def rewrite_launches(s):
    out, pos = "", 0
    while True:
        i = s.find("<<<", pos)
        if i < 0:
            return out + s[pos:]
        # the callee: an identifier, optionally with <template args>, ending at i
        j = i
        if s[j - 1] == ">":
            depth = 0
            while True:
                j -= 1
                if s[j] == ">":
                    depth += 1
                elif s[j] == "<":
                    depth -= 1
                    if depth == 0:
                        break
        m = re.search(r"[A-Za-z_][\w:]*$", s[:j])
        if not m:
            raise SystemExit(f"emu_rewrite: no kernel name before <<< at offset {i}")
        start = m.start()
        callee = s[start:i]
        k = s.find(">>>", i)
        config = s[i + 3 : k]
        a = k + 3
        while s[a].isspace():
            a += 1
        if s[a] != "(":
            raise SystemExit(f"emu_rewrite: no argument list after >>> at offset {k}")
        b = match_paren(s, a)
        args = s[a + 1 : b]
        name = re.sub(r"\s+", " ", callee)
        sep = ", " if args.strip() else ""
        out += s[pos:start] + f'slemu::launch("{name}", __PRETTY_FUNCTION__, {callee}, slemu::cfg({config}){sep}{args})'
        pos = b + 1


def rewrite_asm(s):
    out, pos = "", 0
    pat = re.compile(r"\basm\s+volatile\s*\(")
    while True:
        m = pat.search(s, pos)
        if not m:
            return out + s[pos:]
        a = m.end() - 1
        b = match_paren(s, a)
        body = s[a + 1 : b]
        sections = split_top(body, ":")
        tpl = " ".join(re.findall(r'"((?:[^"\\]|\\.)*)"', sections[0]))
        outs = [o.strip() for o in split_top(sections[1], ",")] if len(sections) > 1 else []
        ins = [o.strip() for o in split_top(sections[2], ",")] if len(sections) > 2 else []

        def operand(o):
            mm = re.fullmatch(r'"([^"]*)"\s*\((.*)\)', o, re.S)
            if not mm:
                raise SystemExit(f"emu_rewrite: cannot read asm operand {o!r}")
            return mm.group(1), mm.group(2)

        out_exprs = []
        for o in filter(None, outs):
            c, e = operand(o)
            if c not in ("=r", "=f"):
                raise SystemExit(f"emu_rewrite: asm output constraint {c!r} is not modelled")
            out_exprs.append(f"slemu::ptx_out({e})")
        in_exprs = []
        for o in filter(None, ins):
            c, e = operand(o)
            if c not in ("r", "l", "f"):
                raise SystemExit(f"emu_rewrite: asm input constraint {c!r} is not modelled")
            in_exprs.append(f"slemu::ptx_in({e})")
        newlines = "\n" * body.count("\n")  # keep the line numbers
        out += s[pos : m.start()] + f'slemu::ptx("{tpl}", {{{", ".join(out_exprs)}}}, {{{", ".join(in_exprs)}}}){newlines}'
        pos = b + 1


def rewrite_extern_shared(s):
    pat = re.compile(r"extern\s+__shared__\s+(?:__align__\((\d+)\)\s+)?([A-Za-z_][\w\s:]*?)\s+(\w+)\s*\[\s*\]\s*;")

    def sub(m):
        align = m.group(1) or "16"
        t = m.group(2)
        return f"{t} *{m.group(3)} = static_cast<{t} *>(slemu::dyn_smem({align}));"

    return pat.sub(sub, s)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    s = open(src).read()
    s = rewrite_extern_shared(rewrite_asm(rewrite_launches(s)))
    for left in ("<<<", "extern __shared__"):
        if left in s:
            raise SystemExit(f"emu_rewrite: {src}: '{left}' left after rewriting")
    if re.search(r"\basm\b", s):
        raise SystemExit(f"emu_rewrite: {src}: an asm statement left after rewriting")
    s = f'#line 1 "{src}"\n' + s
    with open(dst, "w") as f:
        f.write(s)


if __name__ == "__main__":
    main()
