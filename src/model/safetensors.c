/* safetensors.c - parses and validates safetensors files; opens checkpoint directories.
 *
 * Rules of the reference Rust crate (SafeTensors::deserialize): header length <= 100 MB
 * and inside the file, header UTF-8 JSON (trailing spaces allowed), byte length ==
 * product(shape) x dtype size, tensors tiling the data section exactly (no overlap, no
 * uncovered byte; one relaxation: a zero-size tensor may sit anywhere). All sizes are
 * 64-bit with overflow checks; names from the file are escaped in messages, so an
 * error is always one printable line. Tensor data is never copied. */
#define _POSIX_C_SOURCE 200809L
#include "servelab/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* JSON numbers are doubles: integers at or above 2^53 are not exact. */
#define ST_EXACT_LIMIT 9007199254740992.0
#define ST_INDEX_NAME "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"
#define ST_MAX_INDEX_BYTES (64u << 20)

/* Copies an untrusted string into `buf` for a message: printable ASCII as is,
 * everything else as \xNN, cut with "..." when long. */
static const char *show(const char *s, char *buf, size_t cap) {
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (o + 8 >= cap) {
            memcpy(buf + o, "...", 4);
            return buf;
        }
        if (*p >= 0x20 && *p < 0x7f) buf[o++] = (char)*p;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", *p);
    }
    buf[o] = '\0';
    return buf;
}
#define SHOW_LEN 128

static const char *shape_str(const int64_t *shape, int n, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}

static const char *json_what(const cJSON *v, char *buf, size_t cap) {
    if (cJSON_IsNumber(v)) snprintf(buf, cap, "%.17g", v->valuedouble);
    else if (cJSON_IsString(v)) {
        char s[48];
        snprintf(buf, cap, "string \"%s\"", show(v->valuestring, s, sizeof s));
    } else if (cJSON_IsNull(v)) snprintf(buf, cap, "null");
    else if (cJSON_IsBool(v)) snprintf(buf, cap, "boolean");
    else if (cJSON_IsArray(v)) snprintf(buf, cap, "array");
    else if (cJSON_IsObject(v)) snprintf(buf, cap, "object");
    else snprintf(buf, cap, "invalid value");
    return buf;
}

/* 0 when `v` is an integer in [0, 2^53). */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double x = v->valuedouble;
    if (!(x >= 0) || x >= ST_EXACT_LIMIT || x != floor(x)) return -1;
    *out = (uint64_t)x;
    return 0;
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF), as
 * Rust's str::from_utf8. Returns the offset of the first bad byte, or n. */
static size_t utf8_valid_prefix(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint8_t lo = 0x80, hi = 0xbf;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xc2 && c <= 0xdf) k = 1;
        else if (c >= 0xe0 && c <= 0xef) {
            k = 2;
            if (c == 0xe0) lo = 0xa0;
            if (c == 0xed) hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            k = 3;
            if (c == 0xf0) lo = 0x90;
            if (c == 0xf4) hi = 0x8f;
        } else return i;
        if (n - i <= k) return i;
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t j = 2; j <= k; j++)
            if ((s[i + j] & 0xc0) != 0x80) return i;
        i += k + 1;
    }
    return n;
}

static int dtype_parse(const char *s, sl_dtype_t *out) {
    for (int d = 0; d < DTYPE_CHECKPOINT_COUNT; d++) /* fp8 is the KV cache's, not a weight's */
        if (!strcmp(s, dtype_name((sl_dtype_t)d))) {
            *out = (sl_dtype_t)d;
            return 0;
        }
    return -1;
}

typedef struct {
    const char *fname;
    sl_err_t *err;
    uint64_t data_len;
    const uint8_t *data;
} pctx_t;

/* Fails with "FILE: tensor NAME: <fmt>". */
#define TFAIL(c, name, fmt, ...)                                                        \
    do {                                                                                \
        char nb_[SHOW_LEN];                                                             \
        return sl_fail((c)->err, "%s: tensor %s: " fmt, (c)->fname,                     \
                       show((name), nb_, sizeof nb_), __VA_ARGS__);                     \
    } while (0)

static int parse_shape(const pctx_t *c, const char *name, const cJSON *shape, st_tensor_t *t) {
    char w[200];
    if (!shape) TFAIL(c, name, "%s", "shape: missing");
    if (!cJSON_IsArray(shape)) TFAIL(c, name, "shape: expected an array, found %s",
                                     json_what(shape, w, sizeof w));
    int n = cJSON_GetArraySize(shape);
    if (n > ST_MAX_DIMS)
        TFAIL(c, name, "shape has %d dims, more than the %d supported", n, ST_MAX_DIMS);
    int i = 0, has_zero = 0;
    for (const cJSON *d = shape->child; d; d = d->next, i++) {
        uint64_t v;
        if (json_uint(d, &v))
            TFAIL(c, name, "shape[%d]: expected a non-negative integer below 2^53, found %s",
                  i, json_what(d, w, sizeof w));
        t->shape[i] = (int64_t)v;
        has_zero |= v == 0;
    }
    t->n_dims = n;
    int64_t elems = 1;
    for (i = 0; i < n && !has_zero; i++) {
        if (elems > INT64_MAX / t->shape[i])
            TFAIL(c, name, "shape %s has more elements than fit in 64 bits",
                  shape_str(t->shape, n, w, sizeof w));
        elems *= t->shape[i];
    }
    t->n_elems = has_zero ? 0 : elems;
    if (t->n_elems > INT64_MAX / (int64_t)dtype_size(t->dtype))
        TFAIL(c, name, "shape %s x %s is more bytes than fit in 64 bits",
              shape_str(t->shape, n, w, sizeof w), dtype_name(t->dtype));
    return 0;
}

/* Validates one header entry against the data section; *begin is its offset. */
static int parse_entry(const pctx_t *c, const cJSON *item, st_tensor_t *t, uint64_t *begin) {
    const char *name = item->string;
    char w[200];
    if (!cJSON_IsObject(item))
        TFAIL(c, name, "expected an object, found %s", json_what(item, w, sizeof w));
    const cJSON *dt = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *f = item->child; f; f = f->next) {
        const cJSON **slot = !strcmp(f->string, "dtype")          ? &dt
                             : !strcmp(f->string, "shape")        ? &shape
                             : !strcmp(f->string, "data_offsets") ? &offs
                                                                  : NULL;
        if (!slot) continue; /* unknown fields are ignored, as serde does */
        if (*slot) TFAIL(c, name, "%s: appears more than once", f->string);
        *slot = f;
    }
    if (!dt) TFAIL(c, name, "%s", "dtype: missing");
    if (!cJSON_IsString(dt))
        TFAIL(c, name, "dtype: expected a string, found %s", json_what(dt, w, sizeof w));
    if (dtype_parse(dt->valuestring, &t->dtype))
        TFAIL(c, name, "unsupported dtype \"%s\" (supported: F32, F16, BF16, I32, I8, U8, I64, "
              "F64, BOOL)", show(dt->valuestring, w, 40));
    if (parse_shape(c, name, shape, t)) return -1;

    uint64_t b, e;
    if (!offs) TFAIL(c, name, "%s", "data_offsets: missing");
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || json_uint(offs->child, &b) ||
        json_uint(offs->child->next, &e))
        TFAIL(c, name, "%s", "data_offsets: expected [begin, end], two non-negative integers "
              "below 2^53");
    if (b > e)
        TFAIL(c, name, "data_offsets [%llu, %llu]: begin is after end", (unsigned long long)b,
              (unsigned long long)e);
    if (e > c->data_len)
        TFAIL(c, name, "data_offsets [%llu, %llu]: end is past the end of the data section "
              "(%llu bytes)", (unsigned long long)b, (unsigned long long)e,
              (unsigned long long)c->data_len);
    uint64_t want = (uint64_t)t->n_elems * dtype_size(t->dtype);
    if (e - b != want)
        TFAIL(c, name, "shape %s x %s (%zu bytes each) is %llu bytes, but data_offsets "
              "[%llu, %llu] span %llu bytes", shape_str(t->shape, t->n_dims, w, sizeof w),
              dtype_name(t->dtype), dtype_size(t->dtype), (unsigned long long)want,
              (unsigned long long)b, (unsigned long long)e, (unsigned long long)(e - b));
    t->name = sl_strdup(name);
    t->n_bytes = (size_t)want;
    t->data = c->data + b;
    *begin = b;
    return 0;
}

static int metadata_check(const pctx_t *c, const cJSON *meta) {
    char w[96], k[SHOW_LEN];
    if (!cJSON_IsObject(meta))
        return sl_fail(c->err, "%s: header: __metadata__: expected an object of strings, "
                       "found %s", c->fname, json_what(meta, w, sizeof w));
    for (const cJSON *it = meta->child; it; it = it->next)
        if (!cJSON_IsString(it))
            return sl_fail(c->err, "%s: header: __metadata__: %s: expected a string, found %s",
                           c->fname, show(it->string, k, sizeof k), json_what(it, w, sizeof w));
    return 0;
}

typedef struct {
    uint64_t begin, end;
    int idx;
} span_t;

static int span_cmp(const void *a, const void *b) {
    const span_t *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int tensor_ptr_cmp(const void *a, const void *b) {
    return strcmp((*(const st_tensor_t *const *)a)->name, (*(const st_tensor_t *const *)b)->name);
}

/* Duplicates, overlaps and uncovered bytes, over the whole file. */
static int layout_check(const pctx_t *c, st_header_t *h, span_t *spans) {
    int n = h->n_tensors;
    st_tensor_t **by_name = sl_malloc((size_t)(n ? n : 1) * sizeof *by_name);
    for (int i = 0; i < n; i++) by_name[i] = &h->tensors[i];
    qsort(by_name, (size_t)n, sizeof *by_name, tensor_ptr_cmp);
    for (int i = 1; i < n; i++)
        if (!strcmp(by_name[i - 1]->name, by_name[i]->name)) {
            char nb[SHOW_LEN];
            sl_fail(c->err, "%s: tensor %s: appears twice in the header", c->fname,
                    show(by_name[i]->name, nb, sizeof nb));
            free(by_name);
            return -1;
        }
    free(by_name);

    qsort(spans, (size_t)n, sizeof *spans, span_cmp);
    uint64_t covered = 0;
    const span_t *prev = NULL; /* the last non-empty span: it ends furthest so far */
    for (int i = 0; i < n; i++) {
        const span_t *s = &spans[i];
        if (s->begin == s->end) continue;
        if (prev && s->begin < prev->end) {
            char n1[SHOW_LEN], n2[SHOW_LEN];
            return sl_fail(c->err, "%s: tensor %s: data_offsets [%llu, %llu] overlap tensor "
                           "%s [%llu, %llu]", c->fname,
                           show(h->tensors[s->idx].name, n1, sizeof n1),
                           (unsigned long long)s->begin, (unsigned long long)s->end,
                           show(h->tensors[prev->idx].name, n2, sizeof n2),
                           (unsigned long long)prev->begin, (unsigned long long)prev->end);
        }
        covered += s->end - s->begin;
        prev = s;
    }
    if (covered != c->data_len)
        return sl_fail(c->err, "%s: header: data section has %llu bytes not covered by any "
                       "tensor", c->fname, (unsigned long long)(c->data_len - covered));
    return 0;
}

/* Parses the header JSON (`n` bytes at `p`) into a cJSON object. */
static cJSON *header_json(const uint8_t *p, size_t n, const char *fname, sl_err_t *err) {
    size_t bad = utf8_valid_prefix(p, n);
    if (bad != n) {
        sl_fail(err, "%s: header: not valid UTF-8 at byte %zu", fname, bad);
        return NULL;
    }
    char *text = sl_malloc(n + 1);
    memcpy(text, p, n);
    text[n] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 0);
    if (!root) {
        size_t at = end ? (size_t)(end - text) : 0;
        sl_fail(err, "%s: header: invalid JSON at byte %zu of %zu", fname, at, n);
        free(text);
        return NULL;
    }
    /* The writer may pad the header with spaces (to align the data section). */
    size_t at = (size_t)(end - text);
    while (at < n && strchr(" \t\r\n", text[at]) && text[at]) at++;
    free(text);
    if (at != n) {
        sl_fail(err, "%s: header: unexpected bytes after the JSON object at byte %zu", fname, at);
        cJSON_Delete(root);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        char w[96];
        sl_fail(err, "%s: header: expected a JSON object, found %s", fname,
                json_what(root, w, sizeof w));
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int st_parse(const uint8_t *buf, size_t len, const char *fname, st_header_t *out, sl_err_t *err) {
    memset(out, 0, sizeof *out);
    if (len < 8)
        return sl_fail(err, "%s: header: file is %zu bytes, too short for the 8-byte header "
                       "length", fname, len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | buf[i];
    if (n == 0) return sl_fail(err, "%s: header: header length is 0", fname);
    if (n > ST_MAX_HEADER_BYTES)
        return sl_fail(err, "%s: header: header length %llu is over the limit of %u bytes",
                       fname, (unsigned long long)n, ST_MAX_HEADER_BYTES);
    if (n > len - 8)
        return sl_fail(err, "%s: header: header length %llu runs past the end of the file "
                       "(%zu bytes)", fname, (unsigned long long)n, len);
    cJSON *root = header_json(buf + 8, (size_t)n, fname, err);
    if (!root) return -1;

    pctx_t c = {fname, err, (uint64_t)(len - 8 - n), buf + 8 + n};
    int count = 0, n_meta = 0;
    for (const cJSON *it = root->child; it; it = it->next) count++;
    out->tensors = sl_calloc((size_t)(count ? count : 1), sizeof *out->tensors);
    span_t *spans = sl_malloc((size_t)(count ? count : 1) * sizeof *spans);
    int rc = 0;
    for (const cJSON *it = root->child; it && !rc; it = it->next) {
        if (!strcmp(it->string, "__metadata__")) {
            rc = n_meta++ ? sl_fail(err, "%s: header: __metadata__ appears twice", fname)
                          : metadata_check(&c, it);
            continue;
        }
        int i = out->n_tensors;
        st_tensor_t *t = &out->tensors[i];
        rc = parse_entry(&c, it, t, &spans[i].begin);
        if (rc) break; /* t->name is only set on success */
        spans[i].end = spans[i].begin + t->n_bytes;
        spans[i].idx = i;
        out->n_tensors++;
    }
    cJSON_Delete(root);
    if (!rc) rc = layout_check(&c, out, spans);
    free(spans);
    if (rc) st_header_free(out);
    return rc;
}

void st_header_free(st_header_t *h) {
    for (int i = 0; i < h->n_tensors; i++) free(h->tensors[i].name);
    free(h->tensors);
    memset(h, 0, sizeof *h);
}

/* ---- checkpoint directories --------------------------------------------- */

/* Maps and parses file `i` of the archive (its path already in file_names). */
static int archive_load_file(st_archive_t *a, int i, int from_index, sl_err_t *err) {
    if (sl_mmap_open(a->file_names[i], &a->maps[i], err)) {
        if (from_index) {
            char m[SL_ERR_LEN];
            snprintf(m, sizeof m, "%s", err ? err->msg : "");
            sl_fail(err, "%s (a shard named by " ST_INDEX_NAME ")", m);
        }
        return -1;
    }
    if (st_parse(a->maps[i].data, a->maps[i].n_bytes, a->file_names[i], &a->headers[i], err))
        return -1;
    for (int k = 0; k < a->headers[i].n_tensors; k++) a->headers[i].tensors[k].file_index = i;
    return 0;
}

static void archive_alloc(st_archive_t *a, int n_files) {
    a->n_files = n_files;
    a->file_names = sl_calloc((size_t)n_files, sizeof *a->file_names);
    a->maps = sl_calloc((size_t)n_files, sizeof *a->maps);
    a->headers = sl_calloc((size_t)n_files, sizeof *a->headers);
}

/* The sorted name index over all files; a tensor in two files is an error. */
static int archive_index(st_archive_t *a, sl_err_t *err) {
    int64_t total = 0;
    for (int i = 0; i < a->n_files; i++) total += a->headers[i].n_tensors;
    if (total > INT32_MAX) return sl_fail(err, "%s: too many tensors", a->file_names[0]);
    a->index = sl_malloc((size_t)(total ? total : 1) * sizeof *a->index);
    a->n_tensors = 0;
    for (int i = 0; i < a->n_files; i++)
        for (int k = 0; k < a->headers[i].n_tensors; k++)
            a->index[a->n_tensors++] = &a->headers[i].tensors[k];
    qsort(a->index, (size_t)a->n_tensors, sizeof *a->index, tensor_ptr_cmp);
    for (int i = 1; i < a->n_tensors; i++) {
        const st_tensor_t *x = a->index[i - 1], *y = a->index[i];
        if (strcmp(x->name, y->name) != 0) continue;
        char nb[SHOW_LEN];
        return sl_fail(err, "%s: tensor %s: also present in %s", a->file_names[y->file_index],
                       show(y->name, nb, sizeof nb), a->file_names[x->file_index]);
    }
    return 0;
}

static int shard_name_ok(const char *s) {
    return s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int cstr_ptr_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checks the weight_map against the opened shards (`shards[k]` is the base
 * name of file k): no name twice, every tensor in the shard the map names. */
static int archive_check_map(st_archive_t *a, const cJSON *wm, const char **shards,
                             const char *index_path, sl_err_t *err) {
    char nb[SHOW_LEN];
    int n = cJSON_GetArraySize(wm), i = 0;
    const char **keys = sl_malloc((size_t)n * sizeof *keys);
    for (const cJSON *it = wm->child; it; it = it->next) keys[i++] = it->string;
    qsort(keys, (size_t)n, sizeof *keys, cstr_ptr_cmp);
    for (i = 1; i < n; i++)
        if (!strcmp(keys[i - 1], keys[i])) break;
    if (i < n) {
        sl_fail(err, "%s: weight_map: tensor %s: appears twice", index_path,
                show(keys[i], nb, sizeof nb));
        free(keys);
        return -1;
    }
    free(keys);
    for (const cJSON *it = wm->child; it; it = it->next) {
        const st_tensor_t *t = st_find(a, it->string);
        int want = 0;
        while (strcmp(shards[want], it->valuestring) != 0) want++;
        if (!t || t->file_index != want)
            return sl_fail(err, "%s: tensor %s: missing from %s (" ST_INDEX_NAME " maps it "
                           "there)%s%s", a->file_names[want], show(it->string, nb, sizeof nb),
                           shards[want], t ? "; it is in " : "",
                           t ? a->file_names[t->file_index] : "");
    }
    /* A shard may hold tensors the map does not list: they are loaded like the
     * others, as vLLM reads every tensor of every shard the index names. */
    return 0;
}

/* Opens the shards named by the index's weight_map and checks the map. */
static int archive_open_index(st_archive_t *a, const char *dir, const char *index_path,
                              sl_err_t *err) {
    char *text = sl_read_file(index_path, ST_MAX_INDEX_BYTES, NULL, err);
    if (!text) return -1;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    free(text);
    const cJSON *wm = NULL;
    const char **shards = NULL;
    char w[96], nb[SHOW_LEN];
    int rc = -1;
    if (!root) {
        sl_fail(err, "%s: invalid JSON", index_path);
        goto out;
    }
    if (cJSON_IsObject(root))
        for (const cJSON *it = root->child; it; it = it->next)
            if (!strcmp(it->string, "weight_map")) wm = it;
    if (!wm || !cJSON_IsObject(wm) || !wm->child) {
        sl_fail(err, "%s: weight_map: expected a non-empty object of tensor name -> file name, "
                "found %s", index_path, wm ? json_what(wm, w, sizeof w) : "nothing");
        goto out;
    }
    /* Distinct shard names, in order of first use; each file is mapped once. */
    int n_shards = 0;
    shards = sl_malloc((size_t)cJSON_GetArraySize(wm) * sizeof *shards);
    for (const cJSON *it = wm->child; it; it = it->next) {
        if (!cJSON_IsString(it) || !shard_name_ok(it->valuestring)) {
            sl_fail(err, "%s: weight_map: %s: expected a plain file name in the same "
                    "directory, found %s", index_path, show(it->string, nb, sizeof nb),
                    json_what(it, w, sizeof w));
            goto out;
        }
        int k = 0;
        while (k < n_shards && strcmp(shards[k], it->valuestring) != 0) k++;
        if (k == n_shards) shards[n_shards++] = it->valuestring;
    }
    archive_alloc(a, n_shards);
    for (int k = 0; k < n_shards; k++) {
        char path[4096];
        if (sl_path_join(path, sizeof path, dir, shards[k])) {
            sl_fail(err, "%s: path too long", dir);
            goto out;
        }
        a->file_names[k] = sl_strdup(path);
    }
    for (int k = 0; k < n_shards; k++)
        if (archive_load_file(a, k, 1, err)) goto out;
    if (archive_index(a, err) || archive_check_map(a, wm, shards, index_path, err)) goto out;
    rc = 0;
out:
    free(shards);
    cJSON_Delete(root);
    return rc;
}

int st_open_dir(const char *model_dir, st_archive_t *out, sl_err_t *err) {
    memset(out, 0, sizeof *out);
    char single[4096], index[4096];
    if (sl_path_join(single, sizeof single, model_dir, ST_SINGLE_NAME) ||
        sl_path_join(index, sizeof index, model_dir, ST_INDEX_NAME))
        return sl_fail(err, "%s: path too long", model_dir);
    int rc;
    if (sl_file_exists(single)) {
        archive_alloc(out, 1);
        out->file_names[0] = sl_strdup(single);
        rc = archive_load_file(out, 0, 0, err) || archive_index(out, err) ? -1 : 0;
    } else if (sl_file_exists(index)) {
        rc = archive_open_index(out, model_dir, index, err);
    } else {
        return sl_fail(err, "%s: no " ST_SINGLE_NAME " or " ST_INDEX_NAME, model_dir);
    }
    if (rc) st_close(out);
    return rc;
}

void st_close(st_archive_t *a) {
    for (int i = 0; i < a->n_files; i++) {
        if (a->headers) st_header_free(&a->headers[i]);
        if (a->maps) sl_mmap_close(&a->maps[i]);
        if (a->file_names) free(a->file_names[i]);
    }
    free(a->headers);
    free(a->maps);
    free(a->file_names);
    free(a->index);
    memset(a, 0, sizeof *a);
}

static int tensor_key_cmp(const void *key, const void *elem) {
    return strcmp((const char *)key, (*(const st_tensor_t *const *)elem)->name);
}

const st_tensor_t *st_find(const st_archive_t *a, const char *name) {
    if (!a->index || a->n_tensors == 0) return NULL;
    st_tensor_t *const *p =
        bsearch(name, a->index, (size_t)a->n_tensors, sizeof *a->index, tensor_key_cmp);
    return p ? *p : NULL;
}

/* The file named in messages about the archive as a whole: model.safetensors,
 * or the index of a sharded checkpoint. */
static void archive_source(const st_archive_t *a, char *buf, size_t cap) {
    if (a->n_files == 0) {
        snprintf(buf, cap, "(no checkpoint)");
        return;
    }
    const char *f = a->file_names[0], *slash = strrchr(f, '/');
    const char *base = slash ? slash + 1 : f;
    if (a->n_files == 1 && !strcmp(base, ST_SINGLE_NAME)) snprintf(buf, cap, "%s", f);
    else snprintf(buf, cap, "%.*s" ST_INDEX_NAME, (int)(base - f), f);
}

const st_tensor_t *st_expect(const st_archive_t *a, const char *name, int n_dims,
                             const int64_t *shape, sl_err_t *err) {
    char nb[SHOW_LEN];
    SL_ASSERT(n_dims >= 0 && n_dims <= ST_MAX_DIMS);
    const st_tensor_t *t = st_find(a, name);
    if (!t) {
        char src[4096];
        archive_source(a, src, sizeof src);
        sl_fail(err, "%s: tensor %s: missing", src, show(name, nb, sizeof nb));
        return NULL;
    }
    int same = t->n_dims == n_dims;
    for (int i = 0; same && i < n_dims; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char want[200], got[200];
        sl_fail(err, "%s: tensor %s: expected shape %s, found %s", a->file_names[t->file_index],
                show(name, nb, sizeof nb), shape_str(shape, n_dims, want, sizeof want),
                shape_str(t->shape, t->n_dims, got, sizeof got));
        return NULL;
    }
    return t;
}
