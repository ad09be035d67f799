/* config.c - reads a Hugging Face config.json (Llama / Mistral) into model_config_t.
 *
 * Defaults are transformers' LlamaConfig ones (max_position_embeddings 2048,
 * rms_norm_eps 1e-6, rope_theta 10000, torch_dtype float32). An option that would
 * change the forward pass in a way we do not implement is an error naming the field:
 * a model that loads but computes something else is worse than one that does not
 * load. Keys match case-sensitively; a key given twice is an error (Python keeps the
 * last, cJSON the first). Errors are one line: "PATH: FIELD: what is wrong". */
#include "servelab/config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Integers must be exact in a double and fit the int32 math of the kernels. */
#define CONFIG_INT_MAX 2147483647.0

/* ---- JSON helpers ------------------------------------------------------- */

static const char *json_type_name(const cJSON *v) {
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "boolean";
    if (cJSON_IsNumber(v)) return "number";
    if (cJSON_IsString(v)) return "string";
    if (cJSON_IsArray(v)) return "array";
    if (cJSON_IsObject(v)) return "object";
    return "invalid value";
}

/* Describes a value for a message: numbers by value, strings quoted (shortened,
 * non-printable bytes as '?'), the rest by type. */
static const char *json_describe(const cJSON *v, char *buf, size_t cap) {
    if (cJSON_IsNumber(v)) {
        snprintf(buf, cap, "%.17g", v->valuedouble);
    } else if (cJSON_IsString(v)) {
        size_t o = 0;
        o += (size_t)snprintf(buf, cap, "\"");
        for (const unsigned char *s = (const unsigned char *)v->valuestring; *s && o + 8 < cap; s++)
            buf[o++] = (*s >= 0x20 && *s < 0x7f && *s != '"') ? (char)*s : '?';
        snprintf(buf + o, cap - o, "\"");
    } else {
        snprintf(buf, cap, "%s", json_type_name(v));
    }
    return buf;
}

typedef struct {
    const char *path;
    sl_err_t *err;
} ctx_t;

/* Finds `key` in `obj` (case-sensitively). Sets *out to NULL when absent;
 * returns -1 when the key appears twice. */
static int obj_get(const ctx_t *c, const cJSON *obj, const char *key, const cJSON **out) {
    *out = NULL;
    for (const cJSON *it = obj->child; it; it = it->next) {
        if (!it->string || strcmp(it->string, key) != 0) continue;
        if (*out) return sl_fail(c->err, "%s: %s: appears more than once", c->path, key);
        *out = it;
    }
    return 0;
}

/* An integer in [lo, CONFIG_INT_MAX]. Absent or null: `dflt`, or an error when
 * `required`. */
static int get_int(const ctx_t *c, const cJSON *obj, const char *key, int required,
                   int64_t dflt, int64_t lo, int64_t *out) {
    const cJSON *v;
    char d[96];
    if (obj_get(c, obj, key, &v)) return -1;
    if (!v || cJSON_IsNull(v)) {
        if (required)
            return sl_fail(c->err, "%s: %s: %s", c->path, key,
                           v ? "expected an integer, found null" : "missing");
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsNumber(v))
        return sl_fail(c->err, "%s: %s: expected an integer, found %s", c->path, key,
                       json_type_name(v));
    double x = v->valuedouble;
    if (x != floor(x) || !isfinite(x))
        return sl_fail(c->err, "%s: %s: expected an integer, found %s", c->path, key,
                       json_describe(v, d, sizeof d));
    if (x < (double)lo)
        return sl_fail(c->err, "%s: %s: must be %s, found %s", c->path, key,
                       lo > 0 ? "positive" : "non-negative", json_describe(v, d, sizeof d));
    if (x > CONFIG_INT_MAX)
        return sl_fail(c->err, "%s: %s: %s is too large (limit %.0f)", c->path, key,
                       json_describe(v, d, sizeof d), CONFIG_INT_MAX);
    *out = (int64_t)x;
    return 0;
}

/* A finite number > 0; absent or null: `dflt`. */
static int get_positive(const ctx_t *c, const cJSON *obj, const char *key, double dflt,
                        double *out) {
    const cJSON *v;
    char d[96];
    if (obj_get(c, obj, key, &v)) return -1;
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsNumber(v))
        return sl_fail(c->err, "%s: %s: expected a number, found %s", c->path, key,
                       json_type_name(v));
    if (!(v->valuedouble > 0) || !isfinite(v->valuedouble))
        return sl_fail(c->err, "%s: %s: must be a positive number, found %s", c->path, key,
                       json_describe(v, d, sizeof d));
    *out = v->valuedouble;
    return 0;
}

/* A boolean; absent or null: `dflt`. */
static int get_bool(const ctx_t *c, const cJSON *obj, const char *key, bool dflt, bool *out) {
    const cJSON *v;
    if (obj_get(c, obj, key, &v)) return -1;
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsBool(v))
        return sl_fail(c->err, "%s: %s: expected true or false, found %s", c->path, key,
                       json_type_name(v));
    *out = cJSON_IsTrue(v);
    return 0;
}

/* A string; absent or null: NULL. */
static int get_str(const ctx_t *c, const cJSON *obj, const char *key, const char **out) {
    const cJSON *v;
    if (obj_get(c, obj, key, &v)) return -1;
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v))
        return sl_fail(c->err, "%s: %s: expected a string, found %s", c->path, key,
                       json_type_name(v));
    *out = v->valuestring;
    return 0;
}

/* A token id in [0, vocab). */
static int token_id(const ctx_t *c, const char *key, const cJSON *v, int64_t vocab,
                    int32_t *out) {
    char d[96];
    if (!cJSON_IsNumber(v))
        return sl_fail(c->err, "%s: %s: expected an integer or a list of integers, found %s",
                       c->path, key, json_type_name(v));
    double x = v->valuedouble;
    if (x != floor(x) || !(x >= 0) || x >= (double)vocab)
        return sl_fail(c->err, "%s: %s: %s is not a token id (vocab_size is %lld)", c->path,
                       key, json_describe(v, d, sizeof d), (long long)vocab);
    *out = (int32_t)x;
    return 0;
}

/* bos_token_id: an int, or null / absent (left unchanged). */
static int parse_bos(const ctx_t *c, const cJSON *obj, model_config_t *cfg) {
    const cJSON *v;
    if (obj_get(c, obj, "bos_token_id", &v)) return -1;
    if (!v || cJSON_IsNull(v)) return 0;
    return token_id(c, "bos_token_id", v, cfg->vocab_size, &cfg->bos_token_id);
}

/* eos_token_id: an int, a list of ints, or null / absent (left unchanged). */
static int parse_eos(const ctx_t *c, const cJSON *obj, model_config_t *cfg) {
    const cJSON *v;
    if (obj_get(c, obj, "eos_token_id", &v)) return -1;
    if (!v || cJSON_IsNull(v)) return 0;
    int32_t ids[CONFIG_MAX_EOS];
    int n = 0;
    if (cJSON_IsArray(v)) {
        for (const cJSON *it = v->child; it; it = it->next) {
            if (n == CONFIG_MAX_EOS)
                return sl_fail(c->err, "%s: eos_token_id: more than %d ids", c->path,
                               CONFIG_MAX_EOS);
            if (token_id(c, "eos_token_id", it, cfg->vocab_size, &ids[n++])) return -1;
        }
    } else {
        if (token_id(c, "eos_token_id", v, cfg->vocab_size, &ids[n++])) return -1;
    }
    memcpy(cfg->eos_token_ids, ids, sizeof ids);
    cfg->n_eos_token_ids = n;
    return 0;
}

/* ---- the sections of config.json ---------------------------------------- */

static int parse_architecture(const ctx_t *c, const cJSON *root, model_config_t *cfg) {
    static const char *const archs[] = {"LlamaForCausalLM", "MistralForCausalLM"};
    static const char *const types[] = {"llama", "mistral"};
    const cJSON *a;
    const char *model_type;
    char d[96];
    if (obj_get(c, root, "architectures", &a) || get_str(c, root, "model_type", &model_type))
        return -1;
    int found = -1;
    if (!a || cJSON_IsNull(a)) {
        /* Old configs may omit architectures; model_type then decides. */
        for (int i = 0; i < 2 && model_type; i++)
            if (!strcmp(model_type, types[i])) found = i;
        if (found < 0)
            return sl_fail(c->err, "%s: architectures: missing (expected LlamaForCausalLM or "
                           "MistralForCausalLM)", c->path);
    } else {
        if (!cJSON_IsArray(a))
            return sl_fail(c->err, "%s: architectures: expected a list of strings, found %s",
                           c->path, json_type_name(a));
        for (const cJSON *it = a->child; it && found < 0; it = it->next) {
            if (!cJSON_IsString(it))
                return sl_fail(c->err, "%s: architectures: expected a list of strings, found "
                               "%s in it", c->path, json_type_name(it));
            for (int i = 0; i < 2; i++)
                if (!strcmp(it->valuestring, archs[i])) found = i;
        }
        if (found < 0)
            return sl_fail(c->err, "%s: architectures: unsupported architecture %s (supported: "
                           "LlamaForCausalLM, MistralForCausalLM)", c->path,
                           a->child ? json_describe(a->child, d, sizeof d) : "(empty list)");
    }
    if (model_type && strcmp(model_type, types[found]) != 0) {
        cJSON *mt = cJSON_CreateString(model_type);
        sl_fail(c->err, "%s: model_type: %s does not match architecture %s (expected \"%s\")",
                c->path, json_describe(mt, d, sizeof d), archs[found], types[found]);
        cJSON_Delete(mt);
        return -1;
    }
    snprintf(cfg->architecture, sizeof cfg->architecture, "%s", archs[found]);
    return 0;
}

static int parse_sizes(const ctx_t *c, const cJSON *root, model_config_t *cfg) {
    if (get_int(c, root, "vocab_size", 1, 0, 1, &cfg->vocab_size) ||
        get_int(c, root, "hidden_size", 1, 0, 1, &cfg->hidden_size) ||
        get_int(c, root, "intermediate_size", 1, 0, 1, &cfg->intermediate_size) ||
        get_int(c, root, "num_hidden_layers", 1, 0, 1, &cfg->n_layers) ||
        get_int(c, root, "num_attention_heads", 1, 0, 1, &cfg->n_heads) ||
        get_int(c, root, "num_key_value_heads", 0, cfg->n_heads, 1, &cfg->n_kv_heads) ||
        get_int(c, root, "head_dim", 0, 0, 1, &cfg->head_dim) ||
        get_int(c, root, "max_position_embeddings", 0, 2048, 1, &cfg->max_position_embeddings))
        return -1;
    if (cfg->n_heads % cfg->n_kv_heads != 0)
        return sl_fail(c->err, "%s: num_attention_heads: %lld is not divisible by "
                       "num_key_value_heads %lld", c->path, (long long)cfg->n_heads,
                       (long long)cfg->n_kv_heads);
    if (cfg->head_dim == 0) {
        if (cfg->hidden_size % cfg->n_heads != 0)
            return sl_fail(c->err, "%s: hidden_size: %lld is not divisible by "
                           "num_attention_heads %lld (and head_dim is not given)", c->path,
                           (long long)cfg->hidden_size, (long long)cfg->n_heads);
        cfg->head_dim = cfg->hidden_size / cfg->n_heads;
    }
    return 0;
}

/* rope_scaling (transformers 4.x) or rope_parameters (transformers 5, which
 * also moves rope_theta inside it). Only linear scaling is implemented. */
static int parse_rope(const ctx_t *c, const cJSON *root, model_config_t *cfg) {
    const cJSON *rs, *rp;
    char d[96];
    if (get_positive(c, root, "rope_theta", 10000.0, &cfg->rope_theta) ||
        obj_get(c, root, "rope_scaling", &rs) || obj_get(c, root, "rope_parameters", &rp))
        return -1;
    cfg->rope_scaling_factor = 1.0;
    const char *field = "rope_scaling";
    if (rp && !cJSON_IsNull(rp)) {
        if (rs && !cJSON_IsNull(rs))
            return sl_fail(c->err, "%s: rope_parameters: given together with rope_scaling",
                           c->path);
        if (!cJSON_IsObject(rp))
            return sl_fail(c->err, "%s: rope_parameters: expected an object, found %s",
                           c->path, json_type_name(rp));
        ctx_t sub = {c->path, c->err};
        if (get_positive(&sub, rp, "rope_theta", cfg->rope_theta, &cfg->rope_theta)) return -1;
        rs = rp;
        field = "rope_parameters";
    }
    if (!rs || cJSON_IsNull(rs)) return 0;
    if (!cJSON_IsObject(rs))
        return sl_fail(c->err, "%s: %s: expected an object or null, found %s", c->path, field,
                       json_type_name(rs));
    const cJSON *type, *factor;
    if (obj_get(c, rs, "rope_type", &type) || (!type && obj_get(c, rs, "type", &type)))
        return -1;
    if (!type || !cJSON_IsString(type))
        return sl_fail(c->err, "%s: %s.rope_type: expected a string, found %s", c->path, field,
                       type ? json_type_name(type) : "nothing");
    if (!strcmp(type->valuestring, "default")) return 0;
    if (strcmp(type->valuestring, "linear") != 0)
        return sl_fail(c->err, "%s: %s.rope_type: unsupported value %s (supported: linear)",
                       c->path, field, json_describe(type, d, sizeof d));
    if (obj_get(c, rs, "factor", &factor)) return -1;
    if (!factor || !cJSON_IsNumber(factor) || !(factor->valuedouble > 0) ||
        !isfinite(factor->valuedouble))
        return sl_fail(c->err, "%s: %s.factor: expected a positive number, found %s", c->path,
                       field, factor ? json_describe(factor, d, sizeof d) : "nothing");
    cfg->rope_scaling_factor = factor->valuedouble;
    return 0;
}

/* Options that would change the math: refused unless they are the default. */
static int parse_unsupported(const ctx_t *c, const cJSON *root, model_config_t *cfg) {
    const char *act;
    bool attn_bias, mlp_bias;
    int64_t window;
    char d[96];
    if (get_str(c, root, "hidden_act", &act)) return -1;
    /* transformers maps "swish" to the same nn.SiLU. */
    if (act && strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0) {
        cJSON *s = cJSON_CreateString(act);
        sl_fail(c->err, "%s: hidden_act: unsupported value %s (supported: silu)", c->path,
                json_describe(s, d, sizeof d));
        cJSON_Delete(s);
        return -1;
    }
    if (get_bool(c, root, "attention_bias", false, &attn_bias) ||
        get_bool(c, root, "mlp_bias", false, &mlp_bias))
        return -1;
    if (attn_bias)
        return sl_fail(c->err, "%s: attention_bias: true is not supported (the q/k/v/o "
                       "projections have no bias here)", c->path);
    if (mlp_bias)
        return sl_fail(c->err, "%s: mlp_bias: true is not supported (the MLP projections "
                       "have no bias here)", c->path);
    /* pretraining_tp only splits the matmuls differently during pretraining; the
     * result is the same function, so it is ignored, as transformers does at
     * inference. */
    if (get_int(c, root, "sliding_window", 0, 0, 1, &window)) return -1;
    if (window && window < cfg->max_position_embeddings)
        return sl_fail(c->err, "%s: sliding_window: %lld is smaller than "
                       "max_position_embeddings %lld, and sliding-window attention is not "
                       "supported", c->path, (long long)window,
                       (long long)cfg->max_position_embeddings);
    return 0;
}

/* The first of `keys` present in obj (vLLM's get_from_keys: AutoAWQ's
 * quant_config.json says w_bit and q_group_size where config.json says bits
 * and group_size), or NULL. */
static const char *first_key(const ctx_t *c, const cJSON *obj, const char *const *keys, int n, const cJSON **out) {
    for (int i = 0; i < n; i++) {
        if (obj_get(c, obj, keys[i], out)) return NULL;
        if (*out) return keys[i];
    }
    return keys[0];
}

/* s as a JSON string for a one-line message (json_describe: escaped, cut). */
static const char *describe_str(const char *s, char *buf, size_t cap) {
    cJSON *v = cJSON_CreateString(s);
    json_describe(v, buf, cap);
    cJSON_Delete(v);
    return buf;
}

/* AutoAWQ's GEMM format: quant_method awq, 4 bits, zero points, version gemm. */
static int parse_quant_object(const ctx_t *c, const cJSON *q, const char *where, quant_config_t *out) {
    char d[96];
    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject(q))
        return sl_fail(c->err, "%s: %s: expected an object, found %s", c->path, where, json_type_name(q));
    const char *method;
    if (get_str(c, q, "quant_method", &method)) return -1;
    if (method && strcmp(method, "awq") != 0)
        return sl_fail(c->err, "%s: %s.quant_method: %s is not supported (supported: awq)", c->path, where,
                       describe_str(method, d, sizeof d));
    if (!method && strcmp(where, "quantization_config") == 0)
        return sl_fail(c->err, "%s: quantization_config.quant_method: missing", c->path);
    static const char *const bits_keys[] = {"bits", "w_bit"}, *const group_keys[] = {"group_size", "q_group_size"};
    const cJSON *v;
    const char *key = first_key(c, q, bits_keys, 2, &v);
    if (!key) return -1;
    if (!v || !cJSON_IsNumber(v) || v->valuedouble != 4)
        return sl_fail(c->err, "%s: %s.%s: %s; AWQ checkpoints here are 4-bit", c->path, where, key,
                       v ? json_describe(v, d, sizeof d) : "missing");
    out->bits = 4;
    if (!(key = first_key(c, q, group_keys, 2, &v))) return -1;
    if (!v || !cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        !(v->valuedouble == -1 || (v->valuedouble >= 1 && v->valuedouble <= 1 << 20)))
        return sl_fail(c->err, "%s: %s.%s: %s; expected a positive group size or -1 (the whole input)", c->path,
                       where, key, v ? json_describe(v, d, sizeof d) : "missing");
    out->group_size = (int32_t)v->valuedouble;
    bool zero_point;
    if (get_bool(c, q, "zero_point", true, &zero_point)) return -1;
    if (!zero_point)
        return sl_fail(c->err, "%s: %s.zero_point: false (symmetric AWQ) is not supported; AutoAWQ's GEMM "
                       "checkpoints have zero points", c->path, where);
    const char *version;
    if (get_str(c, q, "version", &version)) return -1;
    if (version && strcasecmp(version, "gemm") != 0)
        return sl_fail(c->err, "%s: %s.version: %s is not supported: only AutoAWQ's GEMM layout (version "
                       "\"gemm\") loads here%s", c->path, where, describe_str(version, d, sizeof d),
                       !strcasecmp(version, "gemv") ? "; requantize with version gemm" : "");
    if (obj_get(c, q, "modules_to_not_convert", &v)) return -1;
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsArray(v))
            return sl_fail(c->err, "%s: %s.modules_to_not_convert: expected a list of names, found %s", c->path,
                           where, json_type_name(v));
        for (const cJSON *it = v->child; it; it = it->next) {
            if (!cJSON_IsString(it) || strlen(it->valuestring) >= sizeof out->not_convert[0] ||
                out->n_not_convert == CONFIG_MAX_NOT_CONVERT)
                return sl_fail(c->err, "%s: %s.modules_to_not_convert: expected at most %d names of under %zu "
                               "characters", c->path, where, CONFIG_MAX_NOT_CONVERT, sizeof out->not_convert[0]);
            snprintf(out->not_convert[out->n_not_convert++], sizeof out->not_convert[0], "%s", it->valuestring);
        }
    }
    out->method = QUANT_AWQ;
    return 0;
}

static int parse_quant(const ctx_t *c, const cJSON *root, model_config_t *cfg) {
    const cJSON *q;
    if (obj_get(c, root, "quantization_config", &q)) return -1;
    if (!q || cJSON_IsNull(q)) return 0;
    return parse_quant_object(c, q, "quantization_config", &cfg->quant);
}

bool config_linear_quantized(const model_config_t *cfg, const char *name) {
    if (cfg->quant.method == QUANT_NONE) return false;
    for (int i = 0; i < cfg->quant.n_not_convert; i++)
        if (strstr(name, cfg->quant.not_convert[i])) return false;
    return true;
}

static int parse_dtype(const ctx_t *c, const cJSON *root, model_config_t *cfg) {
    const char *s, *key = "torch_dtype";
    char d[96];
    if (get_str(c, root, key, &s)) return -1;
    if (!s) { /* transformers >= 4.56 writes "dtype" */
        key = "dtype";
        if (get_str(c, root, key, &s)) return -1;
    }
    cfg->torch_dtype = DTYPE_F32;
    if (!s) return 0;
    static const sl_dtype_t ok[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, dtype_torch_name(ok[i]))) {
            cfg->torch_dtype = ok[i];
            return 0;
        }
    cJSON *v = cJSON_CreateString(s);
    sl_fail(c->err, "%s: %s: unsupported value %s (supported: float32, float16, bfloat16)",
            c->path, key, json_describe(v, d, sizeof d));
    cJSON_Delete(v);
    return -1;
}

/* Parses `json`; on success *root_out is an object the caller deletes. */
static int parse_root(const char *json, const char *path, cJSON **root_out, sl_err_t *err) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root) {
        int line = 1, col = 1;
        for (const char *p = json; end && p < end && *p; p++) {
            if (*p == '\n') line++, col = 1;
            else col++;
        }
        return sl_fail(err, "%s: invalid JSON at line %d, column %d", path, line, col);
    }
    if (!cJSON_IsObject(root)) {
        sl_fail(err, "%s: expected a JSON object, found %s", path, json_type_name(root));
        cJSON_Delete(root);
        return -1;
    }
    *root_out = root;
    return 0;
}

int config_parse(const char *json, const char *path, model_config_t *cfg, sl_err_t *err) {
    cJSON *root;
    if (parse_root(json, path, &root, err)) return -1;
    ctx_t c = {path, err};
    model_config_t m;
    memset(&m, 0, sizeof m);
    m.bos_token_id = -1;
    int rc = -1;
    if (parse_architecture(&c, root, &m) || parse_sizes(&c, root, &m) ||
        get_positive(&c, root, "rms_norm_eps", 1e-6, &m.rms_norm_eps) ||
        parse_rope(&c, root, &m) ||
        get_bool(&c, root, "tie_word_embeddings", false, &m.tie_word_embeddings) ||
        parse_dtype(&c, root, &m) || parse_unsupported(&c, root, &m) || parse_quant(&c, root, &m) ||
        parse_bos(&c, root, &m) || parse_eos(&c, root, &m))
        goto out;
    *cfg = m;
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

/* config.json and generation_config.json are a few KB; this only stops absurd files. */
#define CONFIG_MAX_FILE_BYTES (16u << 20)

int config_load(const char *model_dir, model_config_t *cfg, sl_err_t *err) {
    char path[4096];
    if (sl_path_join(path, sizeof path, model_dir, "config.json"))
        return sl_fail(err, "%s: path too long", model_dir);
    char *text = sl_read_file(path, CONFIG_MAX_FILE_BYTES, NULL, err);
    if (!text) return -1;
    int rc = config_parse(text, path, cfg, err);
    free(text);
    if (rc || cfg->quant.method != QUANT_NONE) return rc;
    /* vLLM's other places for an AWQ config: AutoAWQ's older files. */
    static const char *const files[] = {"quant_config.json", "quantize_config.json"};
    for (int i = 0; i < 2; i++) {
        if (sl_path_join(path, sizeof path, model_dir, files[i])) return sl_fail(err, "%s: path too long", model_dir);
        if (!sl_file_exists(path)) continue;
        if (!(text = sl_read_file(path, CONFIG_MAX_FILE_BYTES, NULL, err))) return -1;
        cJSON *root;
        rc = parse_root(text, path, &root, err);
        free(text);
        if (rc) return -1;
        ctx_t c = {path, err};
        rc = parse_quant_object(&c, root, files[i], &cfg->quant);
        cJSON_Delete(root);
        return rc;
    }
    return 0;
}

int config_load_generation(const char *model_dir, model_config_t *cfg, sl_err_t *err) {
    char path[4096];
    if (sl_path_join(path, sizeof path, model_dir, "generation_config.json"))
        return sl_fail(err, "%s: path too long", model_dir);
    if (!sl_file_exists(path)) return 0;
    char *text = sl_read_file(path, CONFIG_MAX_FILE_BYTES, NULL, err);
    if (!text) return -1;
    cJSON *root;
    int rc = parse_root(text, path, &root, err);
    free(text);
    if (rc) return -1;
    /* Work on a copy so that `cfg` is unchanged when the file is bad. */
    model_config_t m = *cfg;
    ctx_t c = {path, err};
    rc = parse_bos(&c, root, &m) || parse_eos(&c, root, &m) ? -1 : 0;
    if (!rc) *cfg = m;
    cJSON_Delete(root);
    return rc;
}
