#!/usr/bin/env python3
"""make_model.py: write a complete Hugging Face style Llama checkpoint (config, generation config,
safetensors, spm_train tokenizer, Llama-2-chat tokenizer_config) with random weights.
Scaled so the model is not flat: each layer moves the residual stream as much as the embedding,
and logits have a std of ~4, so greedy tokens depend on the context and top-1/top-2 gaps dwarf
fp32 rounding (see the "sanity:" line). Bytes derive from --seed via a counter-based hash and exact
IEEE sums (no numpy generator, no libm), so they match on any machine: golden data depends on them.
Shape-only presets carry no weights (for --load-format dummy) and our 8192-piece sentencepiece
tokenizer, even llama-3-8b whose real tokenizer is a tiktoken BPE: shapes only, not text.
--quantize awq writes the decoder layers' Linears in AutoAWQ's GEMM format (4-bit, zero point,
round-to-nearest per group; see awq_quantize); embeddings, norms and lm_head stay in --dtype
(AutoAWQ keeps them fp16), and config.json gains AutoAWQ's quantization_config.
"""
import argparse, hashlib, json, math, os, random, shutil, subprocess, sys, tempfile, time
import numpy as np

PRESETS = {
    "tiny": dict(vocab_size=1024, hidden_size=128, intermediate_size=352, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                 max_position_embeddings=2048),
    "small": dict(vocab_size=8192, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                  num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=4096),
    "tinyllama-1.1b": dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                           num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                           max_position_embeddings=2048, shape_only=True),
    "llama-2-7b": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                       num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                       max_position_embeddings=4096, shape_only=True),
    "mistral-7b": dict(architectures=["MistralForCausalLM"], model_type="mistral",
                       vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                       num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                       max_position_embeddings=32768, sliding_window=None, shape_only=True),
    "llama-3-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                       num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                       max_position_embeddings=8192, rope_theta=500000.0,
                       bos_token_id=128000, eos_token_id=128001, shape_only=True),
}
SHAPE_ONLY_TOKENIZER_VOCAB = 8192   # shape-only presets carry the same tokenizer as "small"
TRANSFORMERS_VERSION = "4.46.0"
LOGIT_STD = 4.0     # target std of the final logits
OUT_GAIN = 2.0      # gain of o_proj/down_proj: layers must matter as much as the embedding
QK_GAIN = 1.4       # attention scores with std ~2: attention neither uniform nor one-hot

LLAMA2_CHAT_TEMPLATE = (  # meta-llama/Llama-2-7b-chat-hf, verbatim (\n are Jinja escapes)
    r"{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    r"{% set system_message = messages[0]['content'] %}{% else %}"
    r"{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    r"{% for message in loop_messages %}"
    r"{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    r"{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    r"{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    r"{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}"
    r"{% else %}{% set content = message['content'] %}{% endif %}"
    r"{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    r"{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}"
    r"{% endif %}{% endfor %}")


def make_config(name, dtype):
    p = dict(PRESETS[name])
    p.pop("shape_only", None)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
           "head_dim": p["hidden_size"] // p["num_attention_heads"], "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "rope_scaling": None, "tie_word_embeddings": False,
           "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "attention_bias": False,
           "attention_dropout": 0.0, "mlp_bias": False, "initializer_range": 0.02,
           "pretraining_tp": 1, "use_cache": True, "transformers_version": TRANSFORMERS_VERSION}
    cfg.update(p)
    cfg["torch_dtype"] = dtype
    if cfg["model_type"] == "mistral":   # MistralConfig has none of these keys
        for k in ("rope_scaling", "attention_bias", "mlp_bias", "pretraining_tp"):
            del cfg[k]
    return cfg


# ---- deterministic random numbers ----------------------------------------------------------
def _splitmix64(key, n):
    """n 64-bit hashes of (key, 1..n): splitmix64's output sequence, wrapping uint64 math."""
    z = np.uint64(key) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def randn(seed, name, shape):
    """~N(0,1) float64 as a sum of four 32-bit uniforms (Irwin-Hall): only exact IEEE ops."""
    key = int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:8], "little")
    n = int(np.prod(shape))
    z = _splitmix64(key, 2 * n).reshape(n, 2)
    lo, hi = (z & np.uint64(0xFFFFFFFF)).astype(np.float64), (z >> np.uint64(32)).astype(np.float64)
    s = lo.sum(1) + hi.sum(1)                    # < 2**34: exact in float64
    return (((s + 2.0) / 2.0**32 - 2.0) * np.sqrt(3.0)).reshape(shape)


# ---- weights --------------------------------------------------------------------------------
def tensor_specs(cfg):
    """(name, shape, std, mean) in HF's named_parameters order; Linear weights are (out, in).
    math.sqrt, not **0.5: IEEE sqrt is correctly rounded everywhere, libm's pow need not be."""
    V, E, I = cfg["vocab_size"], cfg["hidden_size"], cfg["intermediate_size"]
    H, Hkv, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    specs = [("model.embed_tokens.weight", (V, E), 1.0, 0.0)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        specs += [(p + "self_attn.q_proj.weight", (H * D, E), QK_GAIN / math.sqrt(E), 0.0),
                  (p + "self_attn.k_proj.weight", (Hkv * D, E), QK_GAIN / math.sqrt(E), 0.0),
                  (p + "self_attn.v_proj.weight", (Hkv * D, E), 1 / math.sqrt(E), 0.0),
                  (p + "self_attn.o_proj.weight", (E, H * D), OUT_GAIN / math.sqrt(H * D), 0.0),
                  (p + "mlp.gate_proj.weight", (I, E), 1 / math.sqrt(E), 0.0),
                  (p + "mlp.up_proj.weight", (I, E), 1 / math.sqrt(E), 0.0),
                  (p + "mlp.down_proj.weight", (E, I), OUT_GAIN / math.sqrt(I), 0.0),
                  (p + "input_layernorm.weight", (E,), 0.1, 1.0),
                  (p + "post_attention_layernorm.weight", (E,), 0.1, 1.0)]
    specs.append(("model.norm.weight", (E,), 0.1, 1.0))
    if not cfg["tie_word_embeddings"]:   # rmsnorm output has rms ~1, so logit std ~ std*sqrt(E)
        specs.append(("lm_head.weight", (V, E), LOGIT_STD / math.sqrt(E), 0.0))
    return specs


def to_dtype(x, dtype):
    """float32 array -> (stored bytes, float32 values as stored). BF16 rounds to nearest even."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "float32":
        return x.tobytes(), x
    if dtype == "float16":
        h = x.astype(np.float16)
        return h.tobytes(), h.astype(np.float32)
    u = x.view(np.uint32)
    b = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    b = b.astype(np.uint16)
    return b.tobytes(), (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


ST_DTYPE = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


# ---- AutoAWQ GEMM format ----------------------------------------------------------------------
AWQ_LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]   # nibble i of a packed int32 holds column AWQ_ORDER[i]
AWQ_SHIFTS = np.arange(8, dtype=np.uint32) * np.uint32(4)


def is_awq_linear(name):
    """True for the weight of a decoder layer's Linear, the tensors --quantize awq replaces."""
    return name.startswith("model.layers.") and name.endswith(tuple(m + ".weight"
                                                                   for m in AWQ_LINEARS))


def awq_pack(q):
    """(rows, out) integers in [0, 15] -> (rows, out/8) int32, AutoAWQ's interleaved order."""
    q = q.astype(np.uint32).reshape(q.shape[0], -1, 8)[:, :, AWQ_ORDER]
    return (q << AWQ_SHIFTS).sum(-1, dtype=np.uint32).view(np.int32)   # disjoint bits: sum == or


def awq_unpack(packed):
    """(rows, out/8) int32 -> (rows, out) int32 in [0, 15]; the inverse of awq_pack."""
    nib = (packed.view(np.uint32)[:, :, None] >> AWQ_SHIFTS) & np.uint32(0xF)
    q = np.empty_like(nib)
    q[:, :, AWQ_ORDER] = nib
    return q.reshape(packed.shape[0], -1).astype(np.int32)


def awq_quantize(w, group_size):
    """w: (out, in) float32 Linear weight -> (qweight (in, out/8) int32, qzeros (in/G, out/8)
    int32, scales (in/G, out) float16, clipped (in, out) bool). AutoAWQ's asymmetric 4-bit
    round-to-nearest on W^T, per group of G input rows and per output column:
    s = max(mx - mn, 1e-5) / 15 in float32, rounded to fp16 (the stored scale, so dequantizing
    with it reproduces the grid used here); z = clamp(-round(mn / s), 0, 15);
    q = clamp(round(w / s) + z, 0, 15). Divisions run in float64 so the grid does not depend on
    float32 rounding; round() is half-to-even, like torch.round. clipped marks the elements that
    the clamp of q moved (their error may exceed s/2)."""
    n_out, n_in = w.shape
    G = n_in if group_size == -1 else group_size
    wt = np.ascontiguousarray(w.T, dtype=np.float32).reshape(n_in // G, G, n_out)
    mn, mx = wt.min(1), wt.max(1)                                   # (in/G, out)
    scales = (np.maximum(mx - mn, np.float32(1e-5)) / np.float32(15)).astype(np.float16)
    s = scales.astype(np.float64)
    z = np.clip(-np.round(mn / s), 0, 15)
    r = np.round(wt / s[:, None, :]) + z[:, None, :]
    q = np.clip(r, 0, 15).reshape(n_in, n_out)
    clipped = (r < 0).reshape(n_in, n_out) | (r > 15).reshape(n_in, n_out)
    return awq_pack(q), awq_pack(z), scales, clipped


def awq_dequantize(qweight, qzeros, scales, group_size):
    """AutoAWQ GEMM tensors -> (out, in) float32 weight, w = (q - z) * s per group of
    group_size input rows (-1: one group). Exact in float32: an integer |q - z| <= 15 times an
    fp16 scale needs at most 15 significant bits."""
    q, z = awq_unpack(qweight), awq_unpack(qzeros)
    G = q.shape[0] if group_size == -1 else group_size
    s = scales.astype(np.float32)
    w = (q - np.repeat(z, G, 0)).astype(np.float32) * np.repeat(s, G, 0)
    return np.ascontiguousarray(w.T)


def awq_tensors(prefix, w, group_size):
    """Quantize one Linear and check it: safetensors entries for <prefix>.qweight, .qzeros and
    .scales, and the dequantized (out, in) float32 weight. Every element the clamp left alone
    must lie within s/2 of w (float64 divisions: no float32 rounding slack in that bound)."""
    qweight, qzeros, scales, clipped = awq_quantize(w, group_size)
    deq = awq_dequantize(qweight, qzeros, scales, group_size)
    G = w.shape[1] if group_size == -1 else group_size
    half = np.repeat(scales.astype(np.float64), G, 0).T / 2                     # (out, in)
    err = np.abs(deq.astype(np.float64) - w.astype(np.float64))
    bad = (err > half * (1 + 2.0**-40)) & ~clipped.T
    assert not bad.any(), f"{prefix}: {int(bad.sum())} AWQ weights beyond s/2 of the original"
    return [(prefix + ".qweight", qweight.shape, qweight.tobytes(), "I32"),
            (prefix + ".qzeros", qzeros.shape, qzeros.tobytes(), "I32"),
            (prefix + ".scales", scales.shape, scales.tobytes(), "F16")], deq


def awq_config(group_size):
    """AutoAWQ's quantization_config for config.json."""
    return {"quant_method": "awq", "bits": 4, "group_size": group_size, "zero_point": True,
            "version": "gemm", "modules_to_not_convert": None}


def write_safetensors(path, tensors):
    """tensors: [(name, shape, bytes, safetensors dtype such as "BF16")]. Header and order as the
    reference writer: sorted names, compact JSON, padded with spaces to 8 bytes, data contiguous
    in header order."""
    tensors = sorted(tensors, key=lambda t: t[0])
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, data, st_dtype in tensors:
        header[name] = {"dtype": st_dtype, "shape": list(shape),
                        "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for t in tensors:
            f.write(t[2])


def write_weights(out, tensors, n_shards):
    """One model.safetensors, or n_shards files cut by bytes in parameter order plus an index."""
    if n_shards == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), tensors)
        return ["model.safetensors"]
    total = sum(len(t[2]) for t in tensors)
    shards, off = [[] for _ in range(n_shards)], 0
    for t in tensors:   # a tensor goes to the shard holding its middle byte
        shards[min(n_shards - 1, (off + len(t[2]) // 2) * n_shards // total)].append(t)
        off += len(t[2])
    if any(not s for s in shards):
        sys.exit(f"make_model: --shards {n_shards} leaves a shard empty; use fewer shards")
    files, weight_map = [], {}
    for k, shard in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{n_shards:05d}.safetensors"
        write_safetensors(os.path.join(out, fname), shard)
        files.append(fname)
        weight_map.update({t[0]: fname for t in shard})
    write_json(os.path.join(out, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": weight_map})
    return files + ["model.safetensors.index.json"]


# ---- sanity forward (HF Llama semantics: rotate_half RoPE, GQA by repeat) --------------------
def forward(cfg, w, ids):
    H, Hkv, D, eps = (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"],
                      cfg["rms_norm_eps"])
    T = len(ids)
    rms = lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g
    ang = np.outer(np.arange(T), cfg["rope_theta"] ** (-np.arange(0, D, 2) / D))
    cos, sin = np.cos(np.tile(ang, 2))[:, None], np.sin(np.tile(ang, 2))[:, None]
    rope = lambda q: q * cos + np.concatenate([-q[..., D // 2:], q[..., :D // 2]], -1) * sin
    mask = np.triu(np.full((T, T), -np.inf), 1)
    x = w["model.embed_tokens.weight"][ids].astype(np.float64)
    for i in range(cfg["num_hidden_layers"]):
        L = lambda n: w[f"model.layers.{i}.{n}.weight"]
        h = rms(x, L("input_layernorm"))
        q = rope((h @ L("self_attn.q_proj").T).reshape(T, H, D))
        k = np.repeat(rope((h @ L("self_attn.k_proj").T).reshape(T, Hkv, D)), H // Hkv, 1)
        v = np.repeat((h @ L("self_attn.v_proj").T).reshape(T, Hkv, D), H // Hkv, 1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(D) + mask
        p = np.exp(s - s.max(-1, keepdims=True))
        a = np.einsum("hts,shd->thd", p / p.sum(-1, keepdims=True), v).reshape(T, H * D)
        x = x + a @ L("self_attn.o_proj").T
        h = rms(x, L("post_attention_layernorm"))
        g = h @ L("mlp.gate_proj").T
        x = x + (g / (1 + np.exp(-g)) * (h @ L("mlp.up_proj").T)) @ L("mlp.down_proj").T
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    bigram = rms(w["model.embed_tokens.weight"][ids].astype(np.float64), w["model.norm.weight"])
    return rms(x, w["model.norm.weight"]) @ head.T, bigram @ head.T


def sanity(cfg, w, seed, T=128):
    ids = (_splitmix64(seed, T) % np.uint64(cfg["vocab_size"])).astype(np.int64)
    logits, bigram = forward(cfg, w, ids)
    top2 = np.sort(logits, -1)[:, -2:]
    p1 = 1 / np.exp(logits - top2[:, 1:]).sum(-1)
    gap = top2[:, 1] - top2[:, 0]
    ctx = (logits.argmax(-1) != bigram.argmax(-1)).mean()
    return (f"sanity: logits std {logits.std(-1).mean():.2f}, top-1 prob mean {p1.mean():.3f} "
            f"(1/V = {1 / cfg['vocab_size']:.5f}), top-1/top-2 gap min {gap.min():.4f} "
            f"median {np.median(gap):.3f}, gaps < 1e-2: {(gap < 1e-2).mean():.1%}, "
            f"argmax differs from the embedding-only guess at {ctx:.0%} of {T} positions")


# ---- tokenizer --------------------------------------------------------------------------------
ENGLISH = """the of and to a in is that for it as was with be by on not he this are or his from
at which but have an they you were her she there one all we their been has when who will more
no if out so said what up its about into than them can only other new some could time these two
may then do first any my now such like our over man me even most made after also did many before
must through back years where much your way well down should because each just those people how
too little state good very make world still own see men work long get here between both life
being under never day same another know while last might us great old year off come since
against go came right used take three himself few house use during without again place around
however home small found thought went say part once general high upon school every does got left
number course war until always away something fact though water less public put think almost
hand enough far took head yet government system better set told nothing night end why called
eyes find going look asked later knew point next city give group young let room side social given
present several order national possible rather second face among form important often things
looked early white case become large big need four within felt along children saw best church
ever least power development light thing seemed family interest want members others mind country
area done turned although open service certain kind problem began different door thus help sense
means whole matter perhaps itself times law human line above name example action company hands
local show whether five history gave today either act feet across taken past quite anything
having seen death experience body word half really week field car words already information
tell together college shall money period held keep sure free real probably seems behind cannot
political air question making office brought whose special heard major problems became moment
study available known result street economic boy position reason change south board individual
job areas society west close turn love community true court force full seem front wife policy
model server request token memory cache batch queue latency throughput error kernel""".split()
ACCENTED = """café résumé naïve façade déjà crème brûlée über Straße Müller Zürich Köln schön
Mädchen niño señor mañana español año corazón canción São Paulo coração ação Málaga élève hôpital
forêt garçon noël fiancée très été où français Ångström smörgåsbord København Łódź Dvořák
çok güzel teşekkür İstanbul""".split()
GREEK = """καλημέρα ευχαριστώ παρακαλώ θάλασσα ήλιος νερό φίλος λόγος άνθρωπος σπίτι αγάπη
χρόνος πόλη δρόμος βιβλίο γλώσσα Αθήνα Ελλάδα μέρα νύχτα και το η ένα""".split()
CJK = """你好 世界 我们 中国 学习 时间 今天 天气 很好 谢谢 问题 电脑 朋友 工作 东西 喜欢 北京 上海
大学 语言 模型 数据 服务器 请求 こんにちは ありがとう 東京 日本語 です ます 私 猫 水 さくら カタカナ
안녕하세요 감사합니다 한국어 서울 사랑 친구""".split()
EMOJI = "🙂 🚀 🎉 🔥 👍 🌍 😂 ❤️ 🤖 ✨ 🍕 🐍".split()
ONSETS = "b c d f g h j k l m n p r s t v w z br cr dr fr gr pl st tr ch sh th qu sp".split()
NUCLEI = "a e i o u a e i o ai ea ou ie y".split()
CODAS = ["", "", "", "n", "r", "s", "t", "l", "nd", "st", "ng", "ck", "m", "x"]
CODE = ["def {a}({b}, {c}):", "    return {a} + {b} * {n}", "    if {a} is None:",
        "        raise ValueError(\"{w} {v}\")", "for (int i = 0; i < {n}; i++) {{",
        "    {a}[i] = {b}[i] * {n};", "}}", "{a} = {b}({c}, {n})", "import {a}",
        "from {a}.{b} import {c}", "#include <{a}.h>", "{{\"{a}\": {n}, \"{b}\": \"{w}\"}}",
        "// {w} the {v} {a}", "# TODO: {w} {v}", "printf(\"%d\\n\", {a});",
        "const {A} = await fetch(`/api/{a}/${{id}}`);", "SELECT {a}, {b} FROM {c} WHERE id = {n};",
        "<div class=\"{a}\">{w} {v}</div>", "    self.{a} = {b}.{c}({n}, {n2})",
        "$ curl -s http://localhost:8000/v1/{a} | jq .{b}"]


def make_corpus(seed, n_lines=60000):
    """Deterministic corpus (Python's random.random() stream is stable across versions)."""
    r = random.Random(seed)
    pick = lambda seq: seq[int(r.random() * len(seq))]
    lex = sorted({"".join(pick(ONSETS) + pick(NUCLEI) + pick(CODAS)
                          for _ in range(1 + int(r.random() * 3))) for _ in range(30000)})
    lex = [w for _, w in sorted((r.random(), w) for w in lex)]   # shuffled, random() only
    zipf = lambda seq: seq[int(len(seq) ** r.random()) - 1]   # P(rank k) ~ 1/k
    word = lambda: zipf(lex) if r.random() < 0.3 else zipf(ENGLISH)
    ident = lambda: "_".join(word() for _ in range(1 + int(r.random() * 2)))
    num = lambda: pick([str(int(10 ** (r.random() * 5))), f"{r.random() * 100:.2f}",
                        f"{1900 + int(r.random() * 130)}-{1 + int(r.random() * 12):02d}-"
                        f"{1 + int(r.random() * 28):02d}", f"${int(r.random() * 5000):,}.99",
                        f"{int(r.random() * 100)}%",
                        f"v{int(r.random() * 4)}.{int(r.random() * 20)}"])

    def sentence():
        ws = [word() for _ in range(4 + int(r.random() * 12))]
        for i in range(len(ws)):
            u = r.random()
            ws[i] = (ws[i] + "," if u < 0.08 else num() if u < 0.13 else
                     ws[i].capitalize() if u < 0.18 else ws[i])
        ws[0] = ws[0].capitalize()
        if r.random() < 0.05:
            at = int(r.random() * len(ws))
            ws.insert(at, f'"{word()}"' if r.random() < 0.5 else f"({word()})")
        return " ".join(ws) + pick(".....?!:")

    lines = []
    for _ in range(n_lines):
        u = r.random()
        if u < 0.66:
            line = " ".join(sentence() for _ in range(1 + int(r.random() * 3)))
        elif u < 0.80:
            line = pick(CODE).format(a=ident(), b=ident(), c=ident(), A=word().capitalize(),
                                     w=word(), v=word(), n=int(r.random() * 100),
                                     n2=int(r.random() * 10))
        elif u < 0.86:
            line = " ".join(num() if r.random() < 0.6 else pick(["+", "=", "x", "|", "-", "/"])
                            for _ in range(3 + int(r.random() * 8)))
        elif u < 0.92:
            line = " ".join(pick(ACCENTED) if r.random() < 0.5 else word()
                            for _ in range(4 + int(r.random() * 8))) + "."
        elif u < 0.95:
            line = " ".join(pick(GREEK) for _ in range(3 + int(r.random() * 8))) + "."
        else:
            line = "".join(pick(CJK) + pick(["", "", "，", "。", " "])
                           for _ in range(3 + int(r.random() * 8)))
        if r.random() < 0.003:
            line += " " + pick(EMOJI)   # rare on purpose: emoji should fall back to bytes
        lines.append(line)
    return "\n".join(lines) + "\n"


def run_spm_train(args, cwd):
    """The spm_train program (Debian's 'sentencepiece'); where there is none, the same trainer
    through the Python package's SentencePieceTrainer (same options; its version's bytes)."""
    if shutil.which("spm_train"):
        res = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
        if res.returncode != 0:
            why = f"signal {-res.returncode}" if res.returncode < 0 else f"exit {res.returncode}"
            sys.exit(f"make_model: spm_train failed ({why}):\n{(res.stderr or res.stdout)[-3000:]}")
        return
    try:
        import sentencepiece
    except ImportError:
        sys.exit("make_model: spm_train not found; install the 'sentencepiece' package "
                 "(Debian) or the Python package 'sentencepiece'")
    here = os.getcwd()
    os.chdir(cwd)   # relative names, as spm_train's, which the model's trainer_spec records
    try:
        sentencepiece.SentencePieceTrainer.Train(" ".join(args[1:]))
    finally:
        os.chdir(here)


def train_tokenizer(out, seed, vocab_size):
    """spm_train with Llama's options, single-threaded on a fixed corpus: same bytes every run.
    It runs inside the temp dir with relative names, which the model's trainer_spec records."""
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "corpus.txt"), "w", encoding="utf-8") as f:
            f.write(make_corpus(seed))
        args = ["spm_train", "--input=corpus.txt", "--model_prefix=tokenizer",
                "--model_type=bpe", f"--vocab_size={vocab_size}", "--byte_fallback=true",
                "--split_digits=true", "--allow_whitespace_only_pieces=true",
                "--normalization_rule_name=identity", "--add_dummy_prefix=true",
                "--remove_extra_whitespaces=false", "--unk_id=0", "--bos_id=1", "--eos_id=2",
                "--pad_id=-1", "--character_coverage=0.9995", "--max_sentence_length=4192",
                "--num_threads=1", "--input_sentence_size=1000000",
                "--shuffle_input_sentence=false"]
        run_spm_train(args, tmp)
        with open(os.path.join(tmp, "tokenizer.vocab"), encoding="utf-8") as f:
            n_pieces = sum(1 for _ in f)
        if n_pieces != vocab_size:
            sys.exit(f"make_model: tokenizer has {n_pieces} pieces, wanted {vocab_size}")
        shutil.copyfile(os.path.join(tmp, "tokenizer.model"), os.path.join(out, "tokenizer.model"))
    return n_pieces


def write_json(path, obj):   # as transformers' save_pretrained: sorted keys, indent 2
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def write_tokenizer_configs(out, cfg):
    tok = lambda s: {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                     "single_word": False}
    specials = ["<unk>", "<s>", "</s>"]
    write_json(os.path.join(out, "tokenizer_config.json"), {
        "add_bos_token": True, "add_eos_token": False,
        "added_tokens_decoder": {str(i): dict(tok(s), special=True)
                                 for i, s in enumerate(specials)},
        "bos_token": "<s>", "chat_template": LLAMA2_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False, "eos_token": "</s>", "legacy": False,
        "model_max_length": cfg["max_position_embeddings"], "pad_token": None,
        "padding_side": "right", "sp_model_kwargs": {}, "spaces_between_special_tokens": False,
        "tokenizer_class": "LlamaTokenizer", "unk_token": "<unk>",
        "use_default_system_prompt": False})
    write_json(os.path.join(out, "special_tokens_map.json"),
               {"bos_token": tok("<s>"), "eos_token": tok("</s>"), "unk_token": tok("<unk>")})


def main():
    ap = argparse.ArgumentParser(description="Write a Hugging Face style Llama checkpoint.")
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=sorted(ST_DTYPE), default="bfloat16")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--shape-only", action="store_true",
                    help="no weights (for --load-format dummy)")
    ap.add_argument("--quantize", choices=["awq"],
                    help="decoder Linears in AutoAWQ's 4-bit GEMM format (round-to-nearest)")
    ap.add_argument("--group-size", type=int,
                    help="AWQ group of input rows sharing a scale and zero (default 128; "
                         "-1: the whole input dimension)")
    a = ap.parse_args()
    if a.shards < 1 or a.seed < 0:
        ap.error("--shards must be >= 1 and --seed >= 0")
    t0 = time.time()
    shape_only = a.shape_only or PRESETS[a.preset].get("shape_only", False)
    cfg = make_config(a.preset, a.dtype)
    specs = tensor_specs(cfg)
    if a.group_size is not None and not a.quantize:
        ap.error("--group-size needs --quantize awq")
    if a.quantize:
        G = 128 if a.group_size is None else a.group_size
        if shape_only:
            ap.error("--quantize needs weights; this is a shape-only checkpoint")
        lin = [(n, s) for n, s, _, _ in specs if is_awq_linear(n)]
        if G != -1 and (G < 1 or any(s[1] % G for _, s in lin)):
            ap.error(f"--group-size {G} must be -1 or divide every Linear's input dimension "
                     f"({', '.join(str(d) for d in sorted({s[1] for _, s in lin}))})")
        if any(s[0] % 8 for _, s in lin):
            ap.error("--quantize awq needs every Linear's output dimension to be a multiple of 8")
        cfg["quantization_config"] = awq_config(G)
    n_params = sum(int(np.prod(s[1])) for s in specs)
    os.makedirs(a.out, exist_ok=True)
    for f in os.listdir(a.out):   # stale weights from an earlier run with other --shards
        if f.startswith("model") and (f.endswith(".safetensors") or f.endswith(".index.json")):
            os.remove(os.path.join(a.out, f))
    write_json(os.path.join(a.out, "config.json"), cfg)
    write_json(os.path.join(a.out, "generation_config.json"),
               {"_from_model_config": True, "bos_token_id": cfg["bos_token_id"],
                "eos_token_id": cfg["eos_token_id"], "transformers_version": TRANSFORMERS_VERSION})
    n_pieces = train_tokenizer(a.out, a.seed, SHAPE_ONLY_TOKENIZER_VOCAB
                               if PRESETS[a.preset].get("shape_only") else cfg["vocab_size"])
    write_tokenizer_configs(a.out, cfg)
    files = ["config.json", "generation_config.json", "tokenizer.model",
             "tokenizer_config.json", "special_tokens_map.json"]
    if not shape_only:
        tensors, w = [], {}
        for name, shape, std, mean in specs:
            data, w[name] = to_dtype(mean + std * randn(a.seed, name, shape), a.dtype)
            if a.quantize and is_awq_linear(name):   # sanity() then runs the dequantized model
                qt, w[name] = awq_tensors(name[:-len(".weight")], w[name], G)
                tensors += qt
            else:
                tensors.append((name, shape, data, ST_DTYPE[a.dtype]))
        files += write_weights(a.out, tensors, a.shards)
        print(sanity(cfg, w, a.seed))
    size = sum(os.path.getsize(os.path.join(a.out, f)) for f in files)
    what = "shape only, no weights" if shape_only else a.dtype
    if a.quantize:
        what += f", AWQ 4-bit group size {G}"
    print(f"make_model: wrote {a.out} ({a.preset}, {what}"
          f", {len(files)} files, {size / 1e6:.1f} MB, tokenizer {n_pieces} pieces) "
          f"with {n_params:,} parameters in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
