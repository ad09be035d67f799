/* dataset.c - the prompts of `bench serve`, sized in the served model's own tokens.
 *
 *   random             vLLM's: input lengths uniform in [floor(L(1-r)), ceil(L(1+r))] with
 *                      L = --random-input-len minus the tokens the server adds (BOS), output
 *                      likewise (at least 1), after a shared --random-prefix-len prefix
 *   prefix_repetition  vLLM's: --prefix-repetition-num-prefixes groups, each a shared
 *                      prefix followed by a fresh suffix; num_prompts % groups extra
 *                      prompts go to the first groups (vLLM drops them); shuffled
 *   long-tail          short prompts of --long-tail-input-len tokens with round(n *
 *                      --long-tail-long-fraction) prompts of --long-tail-long-input-len
 *                      placed at random: a long prefill that blocks the queue behind it
 *   custom             vLLM's JSONL: {"prompt": ...} or {"messages": [...]} lines, with
 *                      "max_tokens" or "output_tokens" per line (else --custom-output-len);
 *                      shuffled unless --disable-shuffle, oversampled up to --num-prompts
 *                      unless --no-oversample
 * Synthetic text is made of token ids drawn from the tokens of a fixed English word list
 * (tokenized by the server once), not from the whole vocabulary as vLLM does: the
 * vocabulary size is not something an OpenAI server tells, and real words survive a
 * detokenize/tokenize round trip far more often than arbitrary byte pieces. Where the
 * tokenizer has at least POOL_WHOLE_MIN words of the list as one token each (a token
 * whose pair [t, t] detokenizes to "word word"), only those are drawn: pieces inside a
 * word (SentencePiece's "en" of "▁gard" "en") merge with their neighbours when the text is
 * tokenized again, whole words do not, so one round trip is exact and sizing 1,000 long
 * prompts costs one pass through the server's tokenizer instead of two. Exact
 * lengths: ids -> /detokenize -> text -> /tokenize; if the count is off, cut or extend
 * the new ids and go round again (at most 8 rounds, all prompts batched per round), then
 * a warning with the total mismatch, as vLLM prints. Text prompts go to both backends;
 * custom prompts on the completions backend go through the server's chat template
 * (vLLM applies it client-side) and are sent as token ids, unless
 * --skip-chat-template.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static const char WORDS[] =
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her she there been one all we their has would when if so no will more other what time up about "
    "into than them can only new some could these two may first then do any like my now over such our man me "
    "even most made after also did many before must through back years where much your way well down should "
    "because each just those people how too little state good very make world still own see men work long get "
    "here between both life being under never day same another know while last might us great old year off come "
    "since against go came right used take three house small place found city water river mountain light music "
    "garden window morning evening winter summer question answer number system program market history science";

typedef struct {
    int32_t *ids;
    int64_t n;
} pool_t;

static int32_t pick(const pool_t *p, bench_rng_t *rng) { return p->ids[bench_rng_range(rng, 0, p->n - 1)]; }

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

typedef struct {
    int32_t *ids; /* the ids to detokenize next; after success, what the text tokenizes to */
    int64_t n, target;
    char *text;
    int64_t got;
    bool done;
} shape_t;

/* Makes each v[i].text tokenize (no special tokens) to exactly v[i].target ids where the
 * tokenizer allows; v[i].got is what it came to. Returns the summed mismatch, or -1. */
static int64_t shape_exact(const bench_server_t *s, shape_t *v, int64_t n, const pool_t *pool, bench_rng_t *rng,
                           sl_err_t *err) {
    int64_t *todo = sl_malloc((size_t)(n ? n : 1) * sizeof *todo), n_todo = 0;
    for (int64_t i = 0; i < n; i++) {
        if (v[i].target == 0) {
            v[i].text = sl_strdup(""), v[i].done = true;
            continue;
        }
        todo[n_todo++] = i;
    }
    int32_t **ids = sl_malloc((size_t)(n ? n : 1) * sizeof *ids), **toks = sl_malloc((size_t)(n ? n : 1) * sizeof *toks);
    int64_t *counts = sl_malloc((size_t)(n ? n : 1) * sizeof *counts), *got = sl_malloc((size_t)(n ? n : 1) * sizeof *got);
    char **texts = sl_malloc((size_t)(n ? n : 1) * sizeof *texts);
    int64_t rc = 0;
    for (int round = 0; round < 8 && n_todo > 0; round++) {
        for (int64_t k = 0; k < n_todo; k++) ids[k] = v[todo[k]].ids, counts[k] = v[todo[k]].n;
        if (bench_detokenize(s, ids, counts, n_todo, texts, err) ||
            bench_tokenize(s, texts, n_todo, false, toks, got, err)) {
            rc = -1;
            break;
        }
        int64_t still = 0;
        for (int64_t k = 0; k < n_todo; k++) {
            shape_t *x = &v[todo[k]];
            free(x->text);
            x->text = texts[k];
            x->got = got[k];
            free(x->ids);
            x->ids = toks[k];
            x->n = got[k];
            if (got[k] == x->target) {
                x->done = true;
                continue;
            }
            if (got[k] > x->target) {
                x->n = x->target;
            } else {
                x->ids = sl_realloc(x->ids, (size_t)x->target * sizeof *x->ids);
                for (int64_t t = got[k]; t < x->target; t++) x->ids[t] = pick(pool, rng);
                x->n = x->target;
            }
            todo[still++] = todo[k];
        }
        n_todo = still;
    }
    if (rc == 0)
        for (int64_t i = 0; i < n; i++) rc += llabs(v[i].got - v[i].target);
    free(todo), free(ids), free(toks), free(counts), free(got), free(texts);
    return rc;
}

static void shapes_free(shape_t *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) free(v[i].ids), free(v[i].text);
    free(v);
}

/* Random ids after an optional head, as a shape to make exact. */
static void shape_fill(shape_t *x, const int32_t *head, int64_t n_head, int64_t target, const pool_t *pool,
                       bench_rng_t *rng) {
    x->target = target;
    x->n = target;
    x->ids = sl_malloc((size_t)(target ? target : 1) * sizeof *x->ids);
    for (int64_t k = 0; k < target; k++) x->ids[k] = k < n_head ? head[k] : pick(pool, rng);
}

static void warn_mismatch(int64_t m) {
    if (m)
        LOG_WARNING("Across all generated prompts, there were %lld tokens more or fewer than expected after decoding "
                    "and re-encoding. This is expected due to the imperfect nature of the sampling procedure.",
                    (long long)m);
}

static void shuffle(bench_sample_t *v, int64_t n, bench_rng_t *rng) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t k = bench_rng_range(rng, 0, i);
        bench_sample_t t = v[i];
        v[i] = v[k];
        v[k] = t;
    }
}

/* Shared prefixes made exact on their own, so every prompt of a group starts with the same ids. */
static int make_prefixes(const bench_server_t *s, int64_t count, int64_t len, const pool_t *pool, bench_rng_t *rng,
                         shape_t **out, sl_err_t *err) {
    shape_t *p = sl_calloc((size_t)(count ? count : 1), sizeof *p);
    for (int64_t g = 0; g < count; g++) shape_fill(&p[g], NULL, 0, len, pool, rng);
    int64_t m = shape_exact(s, p, count, pool, rng, err);
    if (m < 0) {
        shapes_free(p, count);
        return -1;
    }
    warn_mismatch(m);
    *out = p;
    return 0;
}

/* Builds n text samples: sample i is prefix head[i] (may be NULL) + random ids, body_len[i]
 * tokens in all, plus n_special tokens the server adds. */
static int text_samples(const bench_server_t *s, int64_t n, shape_t *const *head, const int64_t *body_len,
                        const int64_t *out_len, int64_t n_special, const pool_t *pool, bench_rng_t *rng,
                        bench_sample_t *out, sl_err_t *err) {
    shape_t *v = sl_calloc((size_t)(n ? n : 1), sizeof *v);
    for (int64_t i = 0; i < n; i++)
        shape_fill(&v[i], head[i] ? head[i]->ids : NULL, head[i] ? head[i]->got : 0, body_len[i], pool, rng);
    int64_t m = shape_exact(s, v, n, pool, rng, err);
    if (m >= 0) {
        warn_mismatch(m);
        for (int64_t i = 0; i < n; i++) {
            out[i].prompt = v[i].text;
            v[i].text = NULL;
            out[i].prompt_len = v[i].got + n_special;
            out[i].output_len = out_len[i];
        }
    }
    shapes_free(v, n);
    return m < 0 ? -1 : 0;
}

#define POOL_WHOLE_MIN 16

/* Narrows the pool to the tokens that are a whole word of WORDS (see the header), when there
 * are at least POOL_WHOLE_MIN of them; otherwise, or when the server cannot say, leaves it. */
static void keep_whole_words(const bench_server_t *s, pool_t *pool) {
    const int64_t n = pool->n;
    int32_t **pairs = sl_malloc((size_t)n * sizeof *pairs);
    int64_t *two = sl_malloc((size_t)n * sizeof *two);
    char **texts = sl_calloc((size_t)n, sizeof *texts);
    for (int64_t i = 0; i < n; i++) {
        pairs[i] = sl_malloc(2 * sizeof **pairs);
        pairs[i][0] = pairs[i][1] = pool->ids[i];
        two[i] = 2;
    }
    sl_err_t err;
    int64_t k = 0;
    int32_t *whole = sl_malloc((size_t)n * sizeof *whole);
    if (bench_detokenize(s, pairs, two, n, texts, &err) == 0) {
        for (int64_t i = 0; i < n; i++) {
            const char *t = texts[i] + strspn(texts[i], " ");
            const size_t w = strcspn(t, " ");
            if (w == 0 || t[w] != ' ' || strlen(t + w + 1) != w || strncmp(t, t + w + 1, w)) continue;
            for (const char *p = WORDS; *p; p += strcspn(p, " "), p += *p == ' ')
                if (strcspn(p, " ") == w && !strncmp(p, t, w)) {
                    whole[k++] = pool->ids[i];
                    break;
                }
        }
        for (int64_t i = 0; i < n; i++) free(texts[i]);
    }
    if (k >= POOL_WHOLE_MIN) {
        memcpy(pool->ids, whole, (size_t)k * sizeof *whole);
        pool->n = k;
    }
    for (int64_t i = 0; i < n; i++) free(pairs[i]);
    free(pairs), free(two), free(texts), free(whole);
}

static int make_pool(const bench_server_t *s, pool_t *pool, int64_t *n_special, sl_err_t *err) {
    char *words = (char *)WORDS, *empty = "";
    int32_t *ids = NULL;
    int64_t count = 0;
    if (bench_tokenize(s, &empty, 1, true, NULL, n_special, err) || bench_tokenize(s, &words, 1, false, &ids, &count, err))
        return -1;
    qsort(ids, (size_t)count, sizeof *ids, cmp_i32);
    int64_t k = 0;
    for (int64_t i = 0; i < count; i++)
        if (k == 0 || ids[i] != ids[k - 1]) ids[k++] = ids[i];
    if (k < 2) {
        free(ids);
        return sl_fail(err, "POST %s/tokenize: the server's tokenizer gave %lld distinct tokens for a word list",
                       s->base_url, (long long)k);
    }
    pool->ids = ids;
    pool->n = k;
    keep_whole_words(s, pool);
    return 0;
}

static int build_random(const bench_args_t *a, const bench_server_t *s, const pool_t *pool, int64_t n_special,
                        bench_rng_t *rng, bench_sample_t *out, sl_err_t *err) {
    int64_t n = a->num_prompts, real = a->random_input_len - n_special > 0 ? a->random_input_len - n_special : 0;
    double r = a->random_range_ratio;
    int64_t in_lo = (int64_t)floor((double)real * (1 - r)), in_hi = (int64_t)ceil((double)real * (1 + r));
    int64_t out_lo = (int64_t)floor((double)a->random_output_len * (1 - r));
    int64_t out_hi = (int64_t)ceil((double)a->random_output_len * (1 + r));
    if (out_lo < 1) out_lo = 1;
    if (out_hi < 1) out_hi = 1;
    if (a->random_prefix_len + in_lo < 1)
        return sl_fail(err, "--random-input-len is too small: with tokenizer special tokens %lld and "
                            "--random-range-ratio %g, the minimum possible total input tokens (prefix + sampled) is "
                            "%lld. Increase --random-input-len and/or --random-prefix-len, or decrease "
                            "--random-range-ratio.", (long long)n_special, r, (long long)(a->random_prefix_len + in_lo));
    LOG_INFO("Sampling input_len from [%lld, %lld] and output_len from [%lld, %lld]", (long long)in_lo,
             (long long)in_hi, (long long)out_lo, (long long)out_hi);
    shape_t *prefix = NULL;
    if (a->random_prefix_len > 0 && make_prefixes(s, 1, a->random_prefix_len, pool, rng, &prefix, err)) return -1;
    shape_t **head = sl_malloc((size_t)n * sizeof *head);
    int64_t *body = sl_malloc((size_t)n * sizeof *body), *outl = sl_malloc((size_t)n * sizeof *outl);
    for (int64_t i = 0; i < n; i++) {
        head[i] = prefix;
        body[i] = a->random_prefix_len + bench_rng_range(rng, in_lo, in_hi);
        outl[i] = bench_rng_range(rng, out_lo, out_hi);
    }
    int rc = text_samples(s, n, head, body, outl, n_special, pool, rng, out, err);
    if (prefix) shapes_free(prefix, 1);
    free(head), free(body), free(outl);
    return rc;
}

static int build_prefix_repetition(const bench_args_t *a, const bench_server_t *s, const pool_t *pool,
                                   int64_t n_special, bench_rng_t *rng, bench_sample_t *out, sl_err_t *err) {
    int64_t n = a->num_prompts, groups = a->prefix_rep_num_prefixes;
    if (n / groups == 0)
        return sl_fail(err, "num_requests (%lld) must be greater than or equal to num_prefixes (%lld)", (long long)n,
                       (long long)groups);
    shape_t *prefixes = NULL;
    if (a->prefix_rep_prefix_len > 0 && make_prefixes(s, groups, a->prefix_rep_prefix_len, pool, rng, &prefixes, err))
        return -1;
    shape_t **head = sl_malloc((size_t)n * sizeof *head);
    int64_t *body = sl_malloc((size_t)n * sizeof *body), *outl = sl_malloc((size_t)n * sizeof *outl);
    for (int64_t i = 0; i < n; i++) { /* round robin over the groups, then shuffled */
        int64_t g = i % groups;
        head[i] = prefixes ? &prefixes[g] : NULL;
        body[i] = a->prefix_rep_prefix_len + a->prefix_rep_suffix_len;
        outl[i] = a->prefix_rep_output_len;
    }
    int rc = text_samples(s, n, head, body, outl, n_special, pool, rng, out, err);
    if (prefixes) shapes_free(prefixes, groups);
    free(head), free(body), free(outl);
    if (rc == 0 && !a->disable_shuffle) shuffle(out, n, rng);
    return rc;
}

static int build_long_tail(const bench_args_t *a, const bench_server_t *s, const pool_t *pool, int64_t n_special,
                           bench_rng_t *rng, bench_sample_t *out, sl_err_t *err) {
    int64_t n = a->num_prompts, n_long = (int64_t)llround((double)n * a->long_tail_long_fraction);
    int64_t short_len = a->long_tail_input_len - n_special, long_len = a->long_tail_long_input_len - n_special;
    if (short_len < 1 || long_len < 1)
        return sl_fail(err, "--long-tail-input-len and --long-tail-long-input-len must exceed the %lld token(s) the "
                            "server adds", (long long)n_special);
    bool *is_long = sl_calloc((size_t)n, sizeof *is_long);
    for (int64_t i = 0; i < n_long; i++) is_long[i] = true;
    for (int64_t i = n - 1; i > 0; i--) { /* place the long ones at random */
        int64_t k = bench_rng_range(rng, 0, i);
        bool t = is_long[i];
        is_long[i] = is_long[k], is_long[k] = t;
    }
    LOG_INFO("long-tail: %lld prompts of %lld tokens, %lld of %lld tokens", (long long)(n - n_long),
             (long long)a->long_tail_input_len, (long long)n_long, (long long)a->long_tail_long_input_len);
    shape_t **head = sl_calloc((size_t)n, sizeof *head);
    int64_t *body = sl_malloc((size_t)n * sizeof *body), *outl = sl_malloc((size_t)n * sizeof *outl);
    for (int64_t i = 0; i < n; i++) {
        body[i] = is_long[i] ? long_len : short_len;
        outl[i] = a->long_tail_output_len;
    }
    int rc = text_samples(s, n, head, body, outl, n_special, pool, rng, out, err);
    free(is_long), free(head), free(body), free(outl);
    return rc;
}

/* ---- custom JSONL -------------------------------------------------------------------------------- */

static int read_custom(const bench_args_t *a, bench_sample_t **out, int64_t *n_out, sl_err_t *err) {
    size_t len;
    char *data = sl_read_file(a->dataset_path, (size_t)1 << 32, &len, err);
    if (!data) return -1;
    bench_sample_t *v = NULL;
    int64_t n = 0, cap = 0, line_no = 0;
    int rc = 0;
    for (char *line = data; line && rc == 0;) {
        char *nl = memchr(line, '\n', len - (size_t)(line - data));
        if (nl) *nl = 0;
        line_no++;
        char *p = line;
        line = nl ? nl + 1 : NULL;
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (!*p) continue;
        cJSON *j = cJSON_Parse(p);
        const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(j, "prompt");
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "max_tokens");
        if (!mt) mt = cJSON_GetObjectItemCaseSensitive(j, "output_tokens");
        if (!cJSON_IsObject(j)) rc = sl_fail(err, "%s:%lld: not a JSON object", a->dataset_path, (long long)line_no);
        else if (!cJSON_IsString(prompt) && !(cJSON_IsArray(msgs) && cJSON_GetArraySize(msgs) > 0))
            rc = sl_fail(err, "%s:%lld: needs \"prompt\" (a string) or \"messages\" (a non-empty list)",
                         a->dataset_path, (long long)line_no);
        else if (mt && !(cJSON_IsNumber(mt) && mt->valuedouble >= 1 && mt->valuedouble == floor(mt->valuedouble)))
            rc = sl_fail(err, "%s:%lld: \"%s\" must be an integer >= 1", a->dataset_path, (long long)line_no, mt->string);
        if (rc == 0) {
            if (n == cap) v = sl_realloc(v, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *v);
            bench_sample_t *s = &v[n++];
            memset(s, 0, sizeof *s);
            if (cJSON_IsArray(msgs) && cJSON_GetArraySize(msgs) > 0) s->messages = cJSON_Duplicate(msgs, 1);
            else s->prompt = sl_strdup(prompt->valuestring);
            s->output_len = mt ? (int64_t)mt->valuedouble : a->custom_output_len;
        }
        cJSON_Delete(j);
    }
    free(data);
    if (rc == 0 && n == 0) rc = sl_fail(err, "%s: no prompts in the file", a->dataset_path);
    if (rc) {
        bench_samples_free(v, n);
        return -1;
    }
    *out = v;
    *n_out = n;
    return 0;
}

static cJSON *user_message(const char *text) {
    cJSON *m = cJSON_CreateArray(), *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "role", "user");
    cJSON_AddStringToObject(o, "content", text);
    cJSON_AddItemToArray(m, o);
    return m;
}

static int build_custom(const bench_args_t *a, const bench_server_t *s, bench_rng_t *rng, bench_sample_t **out,
                        int64_t *n_out, sl_err_t *err) {
    bench_sample_t *file;
    int64_t n_file, n = a->num_prompts;
    if (read_custom(a, &file, &n_file, err)) return -1;
    if (!a->disable_shuffle) shuffle(file, n_file, rng);
    if (n_file >= n || a->no_oversample) {
        if (n_file < n) LOG_INFO("Skipping oversampling. Total samples: %lld.", (long long)n_file);
        n = n_file < n ? n_file : n;
    }
    bench_sample_t *v = sl_calloc((size_t)n, sizeof *v);
    for (int64_t i = 0; i < n; i++) { /* the file's lines, then random picks among them */
        const bench_sample_t *src = &file[i < n_file ? i : bench_rng_range(rng, 0, n_file - 1)];
        v[i].prompt = src->prompt ? sl_strdup(src->prompt) : NULL;
        v[i].messages = src->messages ? cJSON_Duplicate(src->messages, 1) : NULL;
        v[i].output_len = src->output_len;
    }
    if (n > n_file) LOG_INFO("Oversampled requests to reach %lld total samples.", (long long)n);
    bench_samples_free(file, n_file);

    bool chat = !strcmp(a->backend, "openai-chat");
    int64_t *counts = sl_calloc((size_t)n, sizeof *counts);
    int rc = 0;
    /* Through the template: chat always (to count), completions unless --skip-chat-template. */
    int64_t *idx = sl_malloc((size_t)n * sizeof *idx), n_t = 0;
    cJSON **conv = sl_calloc((size_t)n, sizeof *conv);
    for (int64_t i = 0; i < n; i++)
        if (chat || v[i].messages || !a->skip_chat_template) {
            conv[n_t] = v[i].messages ? cJSON_Duplicate(v[i].messages, 1) : user_message(v[i].prompt);
            idx[n_t++] = i;
        }
    int32_t **ids = sl_calloc((size_t)(n_t ? n_t : 1), sizeof *ids);
    if (!chat && n_t && s->llama_cpp)
        rc = sl_fail(err, "%s/tokenize cannot apply the chat template on this server (llama.cpp's /tokenize): pass "
                          "--skip-chat-template, or --backend openai-chat", s->base_url);
    else if (n_t)
        rc = bench_tokenize_chat(s, (const cJSON *const *)conv, n_t, chat ? NULL : ids, counts, err);
    if (rc && chat) { /* the chat endpoint templates by itself: the counts are a nicety */
        LOG_WARNING("cannot count prompt tokens (%s); relying on the server's usage", err->msg);
        rc = 0;
        n_t = 0;
    }
    for (int64_t k = 0; k < n_t && rc == 0; k++) {
        bench_sample_t *x = &v[idx[k]];
        x->prompt_len = counts[k];
        if (!chat) {
            x->ids = ids[k], x->n_ids = counts[k], ids[k] = NULL;
            free(x->prompt), x->prompt = NULL;
        }
    }
    for (int64_t k = 0; k < n_t; k++) cJSON_Delete(conv[k]), free(ids[k]);
    free(conv), free(ids);
    /* Plain text prompts (completions with --skip-chat-template): lengths are a nicety. */
    n_t = 0;
    char **texts = sl_malloc((size_t)n * sizeof *texts);
    for (int64_t i = 0; i < n && rc == 0; i++)
        if (v[i].prompt && !chat) texts[n_t] = v[i].prompt, idx[n_t++] = i;
    sl_err_t e2;
    if (rc == 0 && n_t && bench_tokenize(s, texts, n_t, true, NULL, counts, &e2) == 0)
        for (int64_t k = 0; k < n_t; k++) v[idx[k]].prompt_len = counts[k];
    else if (rc == 0 && n_t) LOG_WARNING("cannot count prompt tokens (%s); relying on the server's usage", e2.msg);
    free(texts), free(idx), free(counts);
    if (rc) {
        bench_samples_free(v, n);
        return -1;
    }
    *out = v;
    *n_out = n;
    return 0;
}

int bench_dataset_build(const bench_args_t *a, const bench_server_t *s, bench_sample_t **out, int64_t *n,
                        sl_err_t *err) {
    bench_rng_t rng;
    rng_seed(&rng, (uint64_t)a->seed);
    if (!strcmp(a->dataset_name, "custom")) return build_custom(a, s, &rng, out, n, err);
    pool_t pool = {0};
    int64_t n_special = 0;
    if (make_pool(s, &pool, &n_special, err)) return -1;
    bench_sample_t *v = sl_calloc((size_t)a->num_prompts, sizeof *v);
    int rc;
    if (!strcmp(a->dataset_name, "random")) rc = build_random(a, s, &pool, n_special, &rng, v, err);
    else if (!strcmp(a->dataset_name, "prefix_repetition")) rc = build_prefix_repetition(a, s, &pool, n_special, &rng, v, err);
    else rc = build_long_tail(a, s, &pool, n_special, &rng, v, err);
    free(pool.ids);
    if (rc) {
        bench_samples_free(v, a->num_prompts);
        return -1;
    }
    *out = v;
    *n = a->num_prompts;
    return 0;
}

void bench_samples_free(bench_sample_t *v, int64_t n) {
    for (int64_t i = 0; v && i < n; i++) {
        free(v[i].prompt);
        free(v[i].ids);
        cJSON_Delete(v[i].messages);
    }
    free(v);
}

/* ---- request bodies ------------------------------------------------------------------------------- */

static void set(cJSON *o, const char *k, cJSON *v) {
    if (cJSON_GetObjectItemCaseSensitive(o, k)) cJSON_ReplaceItemInObjectCaseSensitive(o, k, v);
    else cJSON_AddItemToObject(o, k, v);
}

char *bench_payload(const bench_args_t *a, const char *model, const bench_sample_t *s) {
    bool chat = !strcmp(a->backend, "openai-chat");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", model);
    if (chat) {
        cJSON *msgs = s->messages ? cJSON_Duplicate(s->messages, 1) : NULL;
        if (!msgs) { /* vLLM sends the text as one content part */
            msgs = cJSON_CreateArray();
            cJSON *m = cJSON_CreateObject(), *parts = cJSON_CreateArray(), *part = cJSON_CreateObject();
            cJSON_AddStringToObject(part, "type", "text");
            cJSON_AddStringToObject(part, "text", s->prompt ? s->prompt : "");
            cJSON_AddItemToArray(parts, part);
            cJSON_AddStringToObject(m, "role", "user");
            cJSON_AddItemToObject(m, "content", parts);
            cJSON_AddItemToArray(msgs, m);
        }
        cJSON_AddItemToObject(o, "messages", msgs);
        cJSON_AddNumberToObject(o, "max_completion_tokens", (double)s->output_len);
    } else {
        if (s->ids) {
            cJSON *p = cJSON_CreateArray();
            for (int64_t k = 0; k < s->n_ids; k++) cJSON_AddItemToArray(p, cJSON_CreateNumber(s->ids[k]));
            cJSON_AddItemToObject(o, "prompt", p);
        } else {
            cJSON_AddStringToObject(o, "prompt", s->prompt ? s->prompt : "");
        }
        cJSON_AddNumberToObject(o, "repetition_penalty", 1.0);
        cJSON_AddNumberToObject(o, "max_tokens", (double)s->output_len);
        if (a->logprobs == INT64_MIN) cJSON_AddNullToObject(o, "logprobs");
        else cJSON_AddNumberToObject(o, "logprobs", (double)a->logprobs);
    }
    cJSON_AddBoolToObject(o, "stream", 1);
    cJSON *so = cJSON_AddObjectToObject(o, "stream_options");
    cJSON_AddBoolToObject(so, "include_usage", 1);
    if (a->ignore_eos) cJSON_AddBoolToObject(o, "ignore_eos", 1);
    const struct {
        const char *k;
        double v;
    } sp[] = {{"top_p", a->top_p}, {"min_p", a->min_p}, {"temperature", a->temperature},
              {"frequency_penalty", a->frequency_penalty}, {"presence_penalty", a->presence_penalty},
              {"repetition_penalty", a->repetition_penalty}};
    for (size_t i = 0; i < sizeof sp / sizeof *sp; i++)
        if (!isnan(sp[i].v)) set(o, sp[i].k, cJSON_CreateNumber(sp[i].v));
    if (a->top_k != INT64_MIN) set(o, "top_k", cJSON_CreateNumber((double)a->top_k));
    if (a->extra)
        for (const cJSON *e = a->extra->child; e; e = e->next) set(o, e->string, cJSON_Duplicate(e, 1));
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return body;
}
