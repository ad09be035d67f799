"""gguf_hf - a GGUF file's Llama model as a Hugging Face checkpoint's pieces.

Used by tools/import-gguf (the whole checkpoint) and tools/bpe-goldens (the tokenizer only).
Reads with the `gguf` package (PyPI; numpy only). What it rebuilds, and from which metadata:
  config.json             llama.* keys (sizes, heads, RoPE theta, RMS eps, context) and the
                          token ids; tie_word_embeddings when there is no output.weight
  tokenizer.json          tokenizer.ggml.{tokens,token_type,merges,pre} (byte-level BPE only)
  tokenizer_config.json   tokenizer.chat_template and the special tokens' strings
  weights                 every tensor dequantized to float32 under its transformers name, the
                          Q/K rows put back in transformers' order (llama.cpp's converter
                          interleaves the two RoPE halves of each head; see unpermute_rope)
numpy is imported where the weights need it, so that the tokenizer pieces load without it.
"""
import json

# tokenizer.ggml.pre -> the Hugging Face pre-tokenizer that produces it. The regexes are the ones
# llama.cpp's llama-vocab.cpp pairs with each name (and the models' own tokenizer.json files hold).
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}


def _split_then_bytes(regex):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
        dict(BYTE_LEVEL, use_regex=False)]}


PRE_TOKENIZERS = {
    "default": lambda: BYTE_LEVEL,
    "gpt2": lambda: BYTE_LEVEL,
    "smollm": lambda: {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, BYTE_LEVEL]},
    "llama-bpe": lambda: _split_then_bytes(LLAMA3_REGEX),
    "qwen2": lambda: _split_then_bytes(QWEN2_REGEX),
}

# ggml type names the import dequantizes; others are refused rather than guessed at.
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1")


class GGUFError(Exception):
    pass


class Model:
    """One GGUF file, opened (memory-mapped) for reading."""

    def __init__(self, path):
        from gguf import GGUFReader
        self.path = path
        self.r = GGUFReader(path)
        arch = self.get("general.architecture")
        if arch != "llama":
            raise GGUFError(f"{path}: architecture {arch!r}; only llama is supported")

    def has(self, key):
        return key in self.r.fields

    def get(self, key, default=None):
        f = self.r.fields.get(key)
        return default if f is None else f.contents()

    def need(self, key):
        if key not in self.r.fields:
            raise GGUFError(f"{self.path}: no {key} in the metadata")
        return self.get(key)

    def tokens(self):
        return self.need("tokenizer.ggml.tokens")

    # --- config.json -------------------------------------------------------------------------
    def config(self):
        n_heads = int(self.need("llama.attention.head_count"))
        hidden = int(self.need("llama.embedding_length"))
        head_dim = int(self.get("llama.rope.dimension_count", hidden // n_heads))
        names = {t.name for t in self.r.tensors}
        cfg = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_act": "silu",
            "hidden_size": hidden,
            "intermediate_size": int(self.need("llama.feed_forward_length")),
            "num_hidden_layers": int(self.need("llama.block_count")),
            "num_attention_heads": n_heads,
            "num_key_value_heads": int(self.get("llama.attention.head_count_kv", n_heads)),
            "head_dim": head_dim,
            "max_position_embeddings": int(self.need("llama.context_length")),
            "rms_norm_eps": float(self.need("llama.attention.layer_norm_rms_epsilon")),
            "rope_theta": float(self.get("llama.rope.freq_base", 10000.0)),
            "vocab_size": len(self.tokens()),
            "tie_word_embeddings": "output.weight" not in names,
            "attention_bias": False,
            "mlp_bias": False,
            "torch_dtype": "bfloat16",
        }
        if self.has("llama.rope.scaling.type"):
            raise GGUFError(f"{self.path}: RoPE scaling is not supported by the import")
        for key, name in (("bos_token_id", "bos"), ("eos_token_id", "eos"), ("pad_token_id", "padding")):
            v = self.get(f"tokenizer.ggml.{name}_token_id")
            if v is not None:
                cfg[key] = int(v)
        # float32 metadata: print 1e-05, not 9.999999747378752e-06
        cfg["rms_norm_eps"] = float(f"{cfg['rms_norm_eps']:.7g}")
        cfg["rope_theta"] = float(f"{cfg['rope_theta']:.7g}")
        return cfg

    def generation_config(self):
        g = {"_from_model_config": True}
        for key, name in (("bos_token_id", "bos"), ("eos_token_id", "eos"), ("pad_token_id", "padding")):
            v = self.get(f"tokenizer.ggml.{name}_token_id")
            if v is not None:
                g[key] = int(v)
        return g

    # --- tokenizer ---------------------------------------------------------------------------
    def tokenizer_json(self):
        """tokenizer.json as Hugging Face writes it for a byte-level BPE model."""
        model = self.need("tokenizer.ggml.model")
        if model != "gpt2":
            raise GGUFError(f"{self.path}: tokenizer model {model!r}; only byte-level BPE ('gpt2') is supported")
        pre = self.get("tokenizer.ggml.pre", "default")
        if pre not in PRE_TOKENIZERS:
            raise GGUFError(f"{self.path}: pre-tokenizer {pre!r} is not known to the import "
                            f"(known: {', '.join(sorted(PRE_TOKENIZERS))})")
        tokens = self.tokens()
        types = self.need("tokenizer.ggml.token_type")
        merges = [m.split(" ") for m in self.need("tokenizer.ggml.merges")]
        # token_type 3 is CONTROL (special), 4 USER_DEFINED (added, not special)
        added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": False, "special": types[i] == 3}
                 for i, t in enumerate(tokens) if types[i] in (3, 4)]
        return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
                "pre_tokenizer": PRE_TOKENIZERS[pre](), "post_processor": BYTE_LEVEL, "decoder": BYTE_LEVEL,
                "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                          "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                          "ignore_merges": pre == "llama-bpe",
                          "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges}}

    def special_tokens(self):
        """{"bos_token": "<|im_start|>", ...}: the strings of the metadata's special ids."""
        tokens = self.tokens()
        out = {}
        for key, name in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"),
                          ("pad_token", "padding")):
            v = self.get(f"tokenizer.ggml.{name}_token_id")
            if v is not None and 0 <= int(v) < len(tokens):
                out[key] = tokens[int(v)]
        return out

    def tokenizer_config(self):
        c = {"add_bos_token": bool(self.get("tokenizer.ggml.add_bos_token", False)),
             "add_eos_token": bool(self.get("tokenizer.ggml.add_eos_token", False)),
             "clean_up_tokenization_spaces": False, "model_max_length": int(self.need("llama.context_length")),
             "tokenizer_class": "GPT2Tokenizer"}
        c.update(self.special_tokens())
        tmpl = self.get("tokenizer.chat_template")
        if tmpl is not None:
            c["chat_template"] = tmpl
        return c

    # --- weights -----------------------------------------------------------------------------
    def check_tensors(self):
        """Raises GGUFError for a tensor the import cannot read (its type or its name)."""
        for t in self.r.tensors:
            if t.tensor_type.name not in SUPPORTED_TYPES:
                raise GGUFError(f"{self.path}: tensor {t.name} is {t.tensor_type.name}; "
                                f"the import reads {', '.join(SUPPORTED_TYPES)}")
            hf_name(t.name)

    def tensors(self):
        """Yields (transformers name, float32 array of the transformers shape) for every tensor."""
        import numpy as np
        from gguf.quants import dequantize
        n_heads = int(self.need("llama.attention.head_count"))
        n_kv = int(self.get("llama.attention.head_count_kv", n_heads))
        self.check_tensors()
        for t in self.r.tensors:
            name = hf_name(t.name)
            w = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
            # GGUF shapes are innermost first: [cols, rows]
            w = w.reshape([int(d) for d in reversed(t.shape)])
            if name.endswith("self_attn.q_proj.weight"):
                w = unpermute_rope(w, n_heads)
            elif name.endswith("self_attn.k_proj.weight"):
                w = unpermute_rope(w, n_kv)
            yield name, w


def unpermute_rope(w, n_heads):
    """Undoes llama.cpp convert_hf_to_gguf.py's LlamaModel.permute on a Q or K weight (rows, cols).

    transformers rotates the pairs (i, i + D/2) of each head; ggml rotates adjacent pairs
    (2i, 2i + 1), so the converter reorders each head's rows from [first half; second half] to
    interleaved: reshape (H, 2, D/2, C) and swap the middle axes. The inverse reshapes
    (H, D/2, 2, C) and swaps them back."""
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}


def hf_name(gguf_name):
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    if gguf_name == "output.weight":
        return "lm_head.weight"
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.{parts[3]}"
    raise GGUFError(f"tensor {gguf_name!r} has no transformers name known to the import")


def to_bf16(w):
    """float32 -> bfloat16 bits (uint16), rounded to nearest even as torch does."""
    import numpy as np
    u = np.ascontiguousarray(w, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, named_arrays, dtype="BF16"):
    """Writes [(name, float32 array)] as one safetensors file in bf16 (or F32)."""
    import numpy as np
    header, blobs, off = {}, [], 0
    for name, w in named_arrays:
        b = (to_bf16(w) if dtype == "BF16" else np.ascontiguousarray(w, dtype="<f4")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(w.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_f32_gguf(model, path):
    """A copy of the GGUF with every tensor dequantized to F32, in llama.cpp's own layout (Q/K
    rows still permuted) and the same metadata: what llama.cpp computes from it is the quantized
    model's values without its quantized arithmetic (tools/record-llamacpp --dequantized)."""
    import numpy as np
    from gguf import GGUFValueType, GGUFWriter
    from gguf.quants import dequantize
    w = GGUFWriter(path, model.get("general.architecture"))
    for f in model.r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue  # the writer writes these itself
        val = f.contents()
        if f.name == "general.file_type":
            val = 0  # ALL_F32
        vtype = f.types[0]
        sub = f.types[1] if vtype == GGUFValueType.ARRAY and len(f.types) > 1 else None
        w.add_key_value(f.name, val, vtype, sub_type=sub)
    for t in model.r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        w.add_tensor(t.name, a.reshape([int(d) for d in reversed(t.shape)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
