/* tokenize.c - the served model's tokenizer, reached over HTTP.
 *
 * The load generator has no tokenizer of its own: prompt lengths come from the server
 * it measures, through vLLM's POST /tokenize {"model", "prompt" | "messages",
 * "add_special_tokens"} -> {"tokens": [...]} and POST /detokenize {"model", "tokens"}
 * -> {"prompt": "..."}, or llama.cpp's {"content", "add_special"} and {"content": "..."}
 * when vLLM's shape is refused or gives no ids (probed once). So lengths are exact for
 * whatever model is served, and nothing has to be downloaded. GET /v1/models names the
 * model when --model is not given.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define PARALLEL 32

static char *url_of(const bench_server_t *s, const char *path) {
    char *u = NULL;
    if (asprintf(&u, "%s%s", s->base_url, path) < 0) sl_die("out of memory");
    return u;
}

int bench_first_model(const bench_server_t *s, char **id, char **root, sl_err_t *err) {
    bench_call_t c = {.url = url_of(s, "/v1/models")};
    bench_http_run(s->http, &c, 1, 1);
    int rc = 0;
    if (c.status < 200 || c.status > 299) {
        rc = bench_call_fail(&c, err);
    } else {
        cJSON *j = cJSON_ParseWithLength(c.resp ? c.resp : "", c.resp_len);
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(j, "data");
        const cJSON *first = cJSON_IsArray(data) ? cJSON_GetArrayItem(data, 0) : NULL;
        const cJSON *jid = cJSON_GetObjectItemCaseSensitive(first, "id");
        const cJSON *jroot = cJSON_GetObjectItemCaseSensitive(first, "root");
        if (!cJSON_IsString(jid)) {
            rc = sl_fail(err, "No models found on the server at %s. Make sure the server is running and has models "
                              "loaded.", s->base_url);
        } else {
            *id = sl_strdup(jid->valuestring);
            *root = sl_strdup(cJSON_IsString(jroot) ? jroot->valuestring : jid->valuestring);
        }
        cJSON_Delete(j);
    }
    bench_call_free(&c);
    return rc;
}

/* Reads {"tokens": [ints]} of each finished call into ids/counts. */
static int read_tokens(bench_call_t *calls, int64_t n, int32_t **ids, int64_t *counts, sl_err_t *err) {
    int rc = 0;
    for (int64_t i = 0; i < n && rc == 0; i++) {
        bench_call_t *c = &calls[i];
        if (c->status < 200 || c->status > 299) {
            rc = bench_call_fail(c, err);
            break;
        }
        cJSON *j = cJSON_ParseWithLength(c->resp ? c->resp : "", c->resp_len);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokens");
        if (!cJSON_IsArray(t)) {
            rc = sl_fail(err, "POST %s: the response has no \"tokens\" list: %.120s", c->url, c->resp ? c->resp : "");
        } else {
            int64_t k = cJSON_GetArraySize(t), m = 0;
            counts[i] = k;
            if (ids) {
                ids[i] = sl_malloc((size_t)(k ? k : 1) * sizeof **ids);
                for (const cJSON *x = t->child; x; x = x->next) ids[i][m++] = (int32_t)x->valuedouble;
            }
        }
        cJSON_Delete(j);
    }
    return rc;
}

static int run_tokenize(const bench_server_t *s, cJSON **bodies, int64_t n, int32_t **ids, int64_t *counts,
                        sl_err_t *err) {
    bench_call_t *calls = sl_calloc((size_t)(n ? n : 1), sizeof *calls);
    for (int64_t i = 0; i < n; i++) {
        calls[i].url = url_of(s, "/tokenize");
        calls[i].body = cJSON_PrintUnformatted(bodies[i]);
        cJSON_Delete(bodies[i]);
    }
    bench_http_run(s->http, calls, n, PARALLEL);
    if (ids) memset(ids, 0, (size_t)n * sizeof *ids);
    int rc = read_tokens(calls, n, ids, counts, err);
    for (int64_t i = 0; i < n; i++) bench_call_free(&calls[i]);
    free(calls);
    if (rc && ids)
        for (int64_t i = 0; i < n; i++) free(ids[i]), ids[i] = NULL;
    return rc;
}

static cJSON *tokenize_body(const bench_server_t *s, const char *text, bool add_special, bool llama_cpp) {
    cJSON *b = cJSON_CreateObject();
    if (llama_cpp) {
        cJSON_AddStringToObject(b, "content", text);
        cJSON_AddBoolToObject(b, "add_special", add_special);
    } else {
        cJSON_AddStringToObject(b, "model", s->model);
        cJSON_AddStringToObject(b, "prompt", text);
        cJSON_AddBoolToObject(b, "add_special_tokens", add_special);
    }
    return b;
}

/* One probe call: POST /tokenize {"hello"} in one dialect. Returns 0 when the server
 * answered with at least one token id. An empty list is no answer: llama.cpp answers
 * 200 {"tokens": []} to vLLM's body, which has no "content". *transport is set when
 * nothing answered at all. */
static int probe_dialect(const bench_server_t *s, bool llama_cpp, bool *transport, sl_err_t *err) {
    bench_call_t c = {.url = url_of(s, "/tokenize")};
    cJSON *b = tokenize_body(s, "hello", false, llama_cpp);
    c.body = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    bench_http_run(s->http, &c, 1, 1);
    int64_t count = 0;
    int rc = read_tokens(&c, 1, NULL, &count, err);
    if (rc == 0 && count < 1)
        rc = sl_fail(err, "POST %s: the server's tokenizer gave no token ids for \"hello\": %.120s",
                     c.url, c.resp ? c.resp : "");
    *transport = c.status == 0;
    bench_call_free(&c);
    return rc;
}

int bench_probe_tokenizer(bench_server_t *s, sl_err_t *err) {
    sl_err_t first;
    for (int dialect = 0; dialect < 2; dialect++) {
        bool transport = false;
        int rc = probe_dialect(s, dialect == 1, &transport, dialect == 0 ? &first : err);
        if (rc == 0) {
            s->llama_cpp = dialect == 1;
            return 0;
        }
        if (transport) break; /* nothing answered: no point trying the other shape */
    }
    *err = first;
    return -1;
}

int bench_tokenize(const bench_server_t *s, char *const *texts, int64_t n, bool add_special, int32_t **ids,
                   int64_t *counts, sl_err_t *err) {
    cJSON **b = sl_malloc((size_t)(n ? n : 1) * sizeof *b);
    for (int64_t i = 0; i < n; i++) b[i] = tokenize_body(s, texts[i], add_special, s->llama_cpp);
    int rc = run_tokenize(s, b, n, ids, counts, err);
    free(b);
    return rc;
}

int bench_tokenize_chat(const bench_server_t *s, const cJSON *const *messages, int64_t n, int32_t **ids,
                        int64_t *counts, sl_err_t *err) {
    cJSON **b = sl_malloc((size_t)(n ? n : 1) * sizeof *b);
    for (int64_t i = 0; i < n; i++) {
        b[i] = cJSON_CreateObject();
        cJSON_AddStringToObject(b[i], "model", s->model);
        cJSON_AddItemToObject(b[i], "messages", cJSON_Duplicate(messages[i], 1));
        cJSON_AddBoolToObject(b[i], "add_generation_prompt", 1);
    }
    int rc = run_tokenize(s, b, n, ids, counts, err);
    free(b);
    return rc;
}

int bench_detokenize(const bench_server_t *s, int32_t *const *ids, const int64_t *counts, int64_t n, char **texts,
                     sl_err_t *err) {
    bench_call_t *calls = sl_calloc((size_t)(n ? n : 1), sizeof *calls);
    for (int64_t i = 0; i < n; i++) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "model", s->model);
        cJSON *t = cJSON_AddArrayToObject(b, "tokens");
        for (int64_t k = 0; k < counts[i]; k++) cJSON_AddItemToArray(t, cJSON_CreateNumber(ids[i][k]));
        calls[i].url = url_of(s, "/detokenize");
        calls[i].body = cJSON_PrintUnformatted(b);
        cJSON_Delete(b);
    }
    bench_http_run(s->http, calls, n, PARALLEL);
    int rc = 0;
    memset(texts, 0, (size_t)n * sizeof *texts);
    for (int64_t i = 0; i < n && rc == 0; i++) {
        bench_call_t *c = &calls[i];
        if (c->status < 200 || c->status > 299) {
            rc = bench_call_fail(c, err);
            break;
        }
        cJSON *j = cJSON_ParseWithLength(c->resp ? c->resp : "", c->resp_len);
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
        if (!cJSON_IsString(p)) p = cJSON_GetObjectItemCaseSensitive(j, "content");
        if (!cJSON_IsString(p)) rc = sl_fail(err, "POST %s: the response has no \"prompt\": %.120s", c->url, c->resp);
        else texts[i] = sl_strdup(p->valuestring);
        cJSON_Delete(j);
    }
    for (int64_t i = 0; i < n; i++) bench_call_free(&calls[i]);
    free(calls);
    if (rc)
        for (int64_t i = 0; i < n; i++) free(texts[i]), texts[i] = NULL;
    return rc;
}
