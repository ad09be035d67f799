/* faults.c - the fault table (names, parameters with units and ranges,
 * descriptions, symptoms), its parser and validation, and the live state the
 * engine and the server read.
 *
 * The engine reads one atomic mask per step; the parameters live under a mutex
 * and are copied into atomics where the engine needs them (step_delay's ms).
 * New faults are rows in `table` plus, where they act, a check of their bit.
 */
#define _GNU_SOURCE
#include "servelab/lab.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "servelab/core.h"

typedef enum { PARAM_INT, PARAM_FLOAT, PARAM_TYPES } param_kind_t;

typedef struct {
    const char *key;
    param_kind_t kind;
    size_t offset;        /* of its field in fault_params_t (int64_t, double or uint32_t) */
    const char *unit;     /* "ms", "percent", "requests", or the list's meaning */
    double min, max;      /* inclusive; max INT64_MAX: no upper bound */
    const char *def;      /* default, as text; NULL: required or "no limit" (see help) */
    bool required;
    const char *help;
} param_def_t;

typedef struct {
    const char *name, *description, *symptom;
    int n_params;
    param_def_t params[3];
} fault_def_t;

#define OFF(field) offsetof(fault_params_t, field)
#define NO_MAX ((double)INT64_MAX)

static const fault_def_t table[FAULT_COUNT] = {
    [FAULT_STEP_DELAY] = {"step_delay", "the engine thread sleeps ms extra milliseconds every step",
                          "a throttled GPU: step time, ITL and TTFT grow (seed 003 case 1)", 1,
                          {{"ms", PARAM_INT, OFF(ms), "ms", 1, 60000, NULL, true, "extra milliseconds per engine step"}}},
    [FAULT_ENGINE_STALL] = {"engine_stall", "the engine stops stepping (for seconds, or until cleared)",
                            "an unhealthy worker: /health still answers 200, requests stay running, no tokens "
                            "are generated, the queue grows", 1,
                            {{"seconds", PARAM_INT, OFF(seconds), "s", 1, 86400, NULL, false,
                              "stall length, then clear (until cleared)"}}},
    [FAULT_TOKENIZE_COST] = {"tokenize_cost", "real CPU work per prompt token on the request path",
                             "a CPU/tokenizer bottleneck: process CPU time and TTFT grow with prompt tokens while "
                             "the engine is underfed", 1,
                             {{"us_per_token", PARAM_INT, OFF(us_per_token), "us", 1, 100000, NULL, true,
                               "CPU microseconds of work per prompt token"}}},
    [FAULT_STREAM_DELAY] = {"stream_delay", "each streamed event is held ms milliseconds before it is sent",
                            "slow streaming at the client while the server's ITL stays healthy", 1,
                            {{"ms", PARAM_INT, OFF(ms), "ms", 1, 60000, NULL, true, "milliseconds each SSE event is held"}}},
    [FAULT_STREAM_COALESCE] = {"stream_coalesce", "streamed tokens are flushed together, every tokens tokens",
                               "bursty streaming at the client (proxy buffering) while the server's ITL stays "
                               "healthy", 1,
                               {{"tokens", PARAM_INT, OFF(tokens), "tokens", 2, 10000, NULL, true,
                                 "tokens per flushed event"}}},
    [FAULT_KV_LEAK] = {"kv_leak", "blocks KV-cache blocks of every finished request are kept until cleared",
                       "slow degradation (seed 003 case 2): KV usage creeps up, preemptions appear, throughput "
                       "falls while TTFT stays steady", 1,
                       {{"blocks", PARAM_INT, OFF(blocks), "blocks", 1, 1000000, "1", false,
                         "blocks kept per finished request"}}},
    [FAULT_OOM] = {"oom", "requests fail as a CUDA out-of-memory error would, and the server survives",
                   "OOM on a long prompt or at high concurrency: requests end with an error and an ERROR log line", 2,
                   {{"prompt_tokens", PARAM_INT, OFF(prompt_tokens), "tokens", 1, NO_MAX, NULL, false,
                     "a request whose prompt is longer fails (no limit)"},
                    {"running", PARAM_INT, OFF(running), "requests", 1, NO_MAX, NULL, false,
                     "a step with more running requests fails its newest one (no limit)"}}},
    [FAULT_COLD_START] = {"cold_start", "the first steps after boot or after the fault is set are slowed",
                          "a cold start: the first requests' TTFT is far above the rest, as when a first batch "
                          "compiles kernels", 2,
                          {{"steps", PARAM_INT, OFF(steps), "steps", 1, 1000000, "8", false, "steps slowed"},
                           {"ms", PARAM_INT, OFF(ms), "ms", 1, 60000, "1000", false, "extra milliseconds per slowed step"}}},
    [FAULT_SUPPRESS_EOS] = {"suppress_eos", "EOS and stop_token_ids never end a request",
                            "runaway generation: requests end only at max_tokens (finish_reason length), as with "
                            "a generation config lacking the stop token", 0, {{0}}},
    [FAULT_LOGIT_NOISE] = {"logit_noise", "Gaussian noise is added to the logits before sampling",
                           "garbled output, as from a broken quantization or a bad weight file", 1,
                           {{"scale", PARAM_FLOAT, OFF(scale), "logits", 0.001, 1000, NULL, true,
                             "standard deviation of the noise"}}},
    [FAULT_HTTP_ERROR] = {"http_error", "POST /v1/* requests fail before reaching the engine, with OpenAI error bodies",
                          "clients see 4xx/5xx errors while the engine is idle", 3,
                          {{"rate", PARAM_INT, OFF(rate), "percent", 0, 100, "100", false, "percent of requests failed"},
                           {"types", PARAM_TYPES, OFF(types), "list", 0, 0, "server_error", false,
                            "answers drawn from: rate_limit (429), invalid_api_key (401), context_length (400), "
                            "server_error (503), invalid_request (400), model_not_found (404)"},
                           {"count", PARAM_INT, OFF(count), "requests", 1, NO_MAX, NULL, false,
                            "fail exactly the next count requests, then clear (no limit)"}}},
    [FAULT_ALLREDUCE_DELAY] = {"allreduce_delay",
                               "every tensor-parallel all-reduce takes ms longer, or moves its bytes at gbps "
                               "(no effect at -tp 1)",
                               "a slow interconnect (PCIe-only TP): ITL grows by about 2 x layers x the delay "
                               "per token while the step's compute is unchanged", 2,
                               {{"ms", PARAM_FLOAT, OFF(allreduce_ms), "ms", 0.001, 60000, NULL, false,
                                 "extra milliseconds per all-reduce"},
                                {"gbps", PARAM_FLOAT, OFF(gbps), "GB/s", 0.001, 10000, NULL, false,
                                 "bandwidth the reduced bytes move at"}}},
};

static int64_t *int_field(fault_params_t *p, const param_def_t *d) { return (int64_t *)((char *)p + d->offset); }
static double *float_field(fault_params_t *p, const param_def_t *d) { return (double *)((char *)p + d->offset); }
static int64_t int_value(const fault_params_t *p, const param_def_t *d) {
    return *(const int64_t *)((const char *)p + d->offset);
}
static double float_value(const fault_params_t *p, const param_def_t *d) {
    return *(const double *)((const char *)p + d->offset);
}

static const struct {
    const char *name;
    int status;
    const char *type, *message;
} http_types[FAULT_HTTP_N_TYPES] = {
    [FAULT_HTTP_RATE_LIMIT] = {"rate_limit", 429, "RateLimitError", "Rate limit reached. Please retry later."},
    [FAULT_HTTP_INVALID_API_KEY] = {"invalid_api_key", 401, "AuthenticationError", "Incorrect API key provided."},
    [FAULT_HTTP_CONTEXT_LENGTH] = {"context_length", 400, "BadRequestError",
                                   "This model's maximum context length was exceeded. Please reduce the length "
                                   "of the messages or completion."},
    [FAULT_HTTP_SERVER_ERROR] = {"server_error", 503, "ServiceUnavailableError",
                                 "The server is temporarily unable to handle the request."},
    [FAULT_HTTP_INVALID_REQUEST] = {"invalid_request", 400, "BadRequestError", "Invalid request."},
    [FAULT_HTTP_MODEL_NOT_FOUND] = {"model_not_found", 404, "NotFoundError", "The model does not exist."},
};

const char *fault_name(fault_id_t id) { return table[id].name; }
const char *fault_description(fault_id_t id) { return table[id].description; }
const char *fault_symptom(fault_id_t id) { return table[id].symptom; }

/* `in` as it may appear in a one-line error: control bytes become '?', and a
 * long text is cut with "...". */
static const char *printable(const char *in, char *out, size_t len) {
    size_t n = 0;
    for (; in[n] && n + 4 < len; n++) out[n] = (unsigned char)in[n] < 0x20 || in[n] == 0x7f ? '?' : in[n];
    if (in[n]) memcpy(out + n, "...", 3), n += 3;
    out[n] = '\0';
    return out;
}

int fault_lookup(const char *name, fault_id_t *id, char *err, size_t err_len) {
    for (int i = 0; i < FAULT_COUNT; i++)
        if (!strcmp(name, table[i].name)) {
            *id = (fault_id_t)i;
            return 0;
        }
    char shown[64];
    size_t n = (size_t)snprintf(err, err_len, "unknown fault '%s'; valid faults: ", printable(name, shown, sizeof shown));
    for (int i = 0; i < FAULT_COUNT && n < err_len; i++)
        n += (size_t)snprintf(err + n, err_len - n, "%s%s", i ? ", " : "", table[i].name);
    return -1;
}

/* "ms (1..60000 ms, required)" for each parameter, for error messages. */
static void valid_params(const fault_def_t *d, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    if (d->n_params == 0) snprintf(buf, len, "none (%s takes no parameters)", d->name);
    for (int i = 0; i < d->n_params && n < len; i++) {
        const param_def_t *p = &d->params[i];
        const char *sep = i ? ", " : "", *req = p->required ? ", required" : "";
        if (p->kind == PARAM_INT && p->max == NO_MAX)
            n += (size_t)snprintf(buf + n, len - n, "%s%s (integer >= %.0f %s)", sep, p->key, p->min, p->unit);
        else if (p->kind == PARAM_INT)
            n += (size_t)snprintf(buf + n, len - n, "%s%s (%.0f..%.0f %s%s)", sep, p->key, p->min, p->max, p->unit, req);
        else if (p->kind == PARAM_FLOAT)
            n += (size_t)snprintf(buf + n, len - n, "%s%s (number %g..%g %s%s)", sep, p->key, p->min, p->max, p->unit,
                                  req);
        else
            n += (size_t)snprintf(buf + n, len - n, "%s%s (comma list of rate_limit, invalid_api_key, "
                                  "context_length, server_error, invalid_request, model_not_found)", sep, p->key);
    }
}

static int parse_types(const char *v, uint32_t *out) {
    uint32_t m = 0;
    const char *s = v;
    for (;;) {
        const char *e = strchr(s, ',');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        int k = -1;
        for (int i = 0; i < FAULT_HTTP_N_TYPES; i++)
            if (strlen(http_types[i].name) == n && !strncmp(s, http_types[i].name, n)) k = i;
        if (k < 0) return -1;
        m |= FAULT_BIT(k);
        if (!e) break;
        s = e + 1;
    }
    *out = m;
    return 0;
}

/* Parses one value of parameter p into s->p; -1 when it is not valid. */
static int param_parse(fault_params_t *dst, const param_def_t *p, const char *value) {
    char *end;
    errno = 0;
    if (p->kind == PARAM_TYPES) return parse_types(value, (uint32_t *)((char *)dst + p->offset));
    if (p->kind == PARAM_FLOAT) {
        double v = strtod(value, &end);
        if (!*value || *end || errno || !(v >= p->min && v <= p->max)) return -1;
        *float_field(dst, p) = v;
        return 0;
    }
    long long v = strtoll(value, &end, 10);
    if (!*value || *end || errno || (double)v < p->min || (p->max != NO_MAX && (double)v > p->max)) return -1;
    *int_field(dst, p) = v;
    return 0;
}

void fault_spec_init(fault_spec_t *s, fault_id_t id) {
    memset(s, 0, sizeof *s);
    s->id = id;
    const fault_def_t *d = &table[id];
    for (int i = 0; i < d->n_params; i++)
        if (d->params[i].def && param_parse(&s->p, &d->params[i], d->params[i].def)) SL_ASSERT(!"a bad default in the table");
}

int fault_param_set(fault_spec_t *s, const char *key, const char *value, char *err, size_t err_len) {
    const fault_def_t *d = &table[s->id];
    char valid[768];
    valid_params(d, valid, sizeof valid);
    const param_def_t *p = NULL;
    for (int i = 0; i < d->n_params; i++)
        if (!strcmp(key, d->params[i].key)) p = &d->params[i];
    char shown[64];
    if (!p) {
        snprintf(err, err_len, "%s: unknown parameter '%s'; valid parameters: %s", d->name,
                 printable(key, shown, sizeof shown), valid);
        return -1;
    }
    fault_params_t v = s->p;
    if (param_parse(&v, p, value)) {
        snprintf(err, err_len, "%s: invalid %s '%s'; valid parameters: %s", d->name, key,
                 printable(value, shown, sizeof shown), valid);
        return -1;
    }
    s->p = v;
    return 0;
}

int fault_spec_check(const fault_spec_t *s, char *err, size_t err_len) {
    const fault_def_t *d = &table[s->id];
    char valid[768];
    valid_params(d, valid, sizeof valid);
    for (int i = 0; i < d->n_params; i++) {
        const param_def_t *p = &d->params[i];
        bool given = p->kind == PARAM_FLOAT ? float_value(&s->p, p) != 0 : p->kind == PARAM_TYPES || int_value(&s->p, p) != 0;
        if (p->required && !given) {
            snprintf(err, err_len, "%s: missing parameter '%s'; valid parameters: %s", d->name, p->key, valid);
            return -1;
        }
    }
    /* allreduce_delay needs a delay, a bandwidth, or both (they add up). */
    if (s->id == FAULT_ALLREDUCE_DELAY && s->p.allreduce_ms == 0 && s->p.gbps == 0) {
        snprintf(err, err_len, "allreduce_delay: give ms or gbps (or both); valid parameters: %s", valid);
        return -1;
    }
    /* oom with neither limit would never act: one of them is the fault. */
    if (s->id == FAULT_OOM && s->p.prompt_tokens == 0 && s->p.running == 0) {
        snprintf(err, err_len, "oom: give prompt_tokens or running (or both); valid parameters: %s", valid);
        return -1;
    }
    return 0;
}

int fault_parse_spec(const char *text, fault_spec_t *s, char *err, size_t err_len) {
    char *buf = sl_strdup(text);
    char *colon = strchr(buf, ':');
    if (colon) *colon = '\0';
    fault_id_t id;
    int rc = fault_lookup(buf, &id, err, err_len);
    if (rc == 0) fault_spec_init(s, id);
    /* key=value pieces; a piece without '=' continues the previous value. */
    char *key = NULL, val[512] = "";
    char *rest = colon ? colon + 1 : NULL;
    while (rc == 0 && rest) {
        char *comma = strchr(rest, ',');
        if (comma) *comma = '\0';
        char *eq = strchr(rest, '=');
        if (eq) {
            if (key && fault_param_set(s, key, val, err, err_len)) rc = -1;
            *eq = '\0';
            key = rest;
            snprintf(val, sizeof val, "%s", eq + 1);
        } else if (key && *rest) {
            size_t n = strlen(val);
            snprintf(val + n, sizeof val - n, ",%s", rest);
        } else {
            char valid[768], shown[64];
            valid_params(&table[s->id], valid, sizeof valid);
            snprintf(err, err_len, "%s: expected key=value, got '%s'; valid parameters: %s", table[s->id].name,
                     printable(rest, shown, sizeof shown), valid);
            rc = -1;
        }
        rest = comma ? comma + 1 : NULL;
    }
    if (rc == 0 && key && fault_param_set(s, key, val, err, err_len)) rc = -1;
    if (rc == 0) rc = fault_spec_check(s, err, err_len);
    free(buf);
    return rc;
}

int fault_spec_from_json(const char *body, size_t len, fault_spec_t *s, char *err, size_t err_len) {
    cJSON *root = cJSON_ParseWithLength(body, len);
    int rc = -1;
    const cJSON *name = root ? cJSON_GetObjectItemCaseSensitive(root, "name") : NULL;
    const cJSON *params = root ? cJSON_GetObjectItemCaseSensitive(root, "params") : NULL;
    fault_id_t id;
    if (!cJSON_IsObject(root)) snprintf(err, err_len, "the body must be a JSON object {\"name\": ..., \"params\": {...}}");
    else if (!cJSON_IsString(name)) {
        char list[512]; /* fault_lookup's message lists the valid faults */
        fault_lookup("", &id, list, sizeof list);
        snprintf(err, err_len, "'name' must be a string; %s", strstr(list, "valid faults"));
    } else if (params && !cJSON_IsObject(params) && !cJSON_IsNull(params))
        snprintf(err, err_len, "'params' must be an object");
    else if (fault_lookup(name->valuestring, &id, err, err_len) == 0) {
        fault_spec_init(s, id);
        rc = 0;
        const cJSON *p;
        const cJSON *list = cJSON_IsObject(params) ? params : NULL;
        cJSON_ArrayForEach(p, list) {
            char v[512] = "";
            if (cJSON_IsString(p)) snprintf(v, sizeof v, "%s", p->valuestring);
            else if (cJSON_IsNumber(p) && fabs(p->valuedouble) < 9e18 && p->valuedouble == floor(p->valuedouble))
                snprintf(v, sizeof v, "%lld", (long long)p->valuedouble);
            else if (cJSON_IsNumber(p)) snprintf(v, sizeof v, "%.17g", p->valuedouble);
            else if (cJSON_IsArray(p)) {
                const cJSON *x;
                size_t n = 0;
                bool ok = true;
                cJSON_ArrayForEach(x, p) {
                    if (!cJSON_IsString(x) || n + strlen(x->valuestring) + 2 > sizeof v) {
                        ok = false;
                        break;
                    }
                    n += (size_t)snprintf(v + n, sizeof v - n, "%s%s", n ? "," : "", x->valuestring);
                }
                if (!ok || n == 0) snprintf(v, sizeof v, "?");
            } else v[0] = '?'; /* true/false/null/objects: refused by the parameter's check */
            if (fault_param_set(s, p->string, v, err, err_len)) {
                rc = -1;
                break;
            }
        }
        if (rc == 0) rc = fault_spec_check(s, err, err_len);
    }
    cJSON_Delete(root);
    return rc;
}

static void types_format(uint32_t m, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < FAULT_HTTP_N_TYPES && n < len; i++)
        if (m & FAULT_BIT(i)) n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "," : "", http_types[i].name);
}

/* One parameter's value as text that fault_param_set reads back to the same
 * value; false for an optional limit that was not given. */
static bool param_format(const fault_spec_t *s, const param_def_t *p, char *buf, size_t len) {
    if (p->kind == PARAM_TYPES) {
        types_format(s->p.types, buf, len);
    } else if (p->kind == PARAM_FLOAT) {
        /* The shortest spelling that reads back to the same number; an optional one not given
         * (0, below every float's range) is left out. */
        double x = float_value(&s->p, p);
        if (x == 0 && !p->def && p->min > 0) return false;
        for (int prec = 6; prec <= 17; prec++) {
            snprintf(buf, len, "%.*g", prec, x);
            if (strtod(buf, NULL) == x) break;
        }
    } else if (int_value(&s->p, p) != 0 || p->def) { /* optional limits left out when not given */
        snprintf(buf, len, "%lld", (long long)int_value(&s->p, p));
    } else {
        return false;
    }
    return true;
}

void fault_params_format(const fault_spec_t *s, char *buf, size_t len) {
    const fault_def_t *d = &table[s->id];
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < d->n_params && n < len; i++) {
        char value[160];
        if (param_format(s, &d->params[i], value, sizeof value))
            n += (size_t)snprintf(buf + n, len - n, "%s%s=%s", n ? "," : "", d->params[i].key, value);
    }
}

char *fault_spec_to_json(const fault_spec_t *s) {
    const fault_def_t *d = &table[s->id];
    cJSON *o = cJSON_CreateObject(), *params = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", d->name);
    for (int i = 0; i < d->n_params; i++) {
        char value[160];
        if (param_format(s, &d->params[i], value, sizeof value))
            cJSON_AddStringToObject(params, d->params[i].key, value);
    }
    cJSON_AddItemToObject(o, "params", params);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

static const char *torch_size(int64_t n, char *buf, size_t len) {
    if (n <= 1024) snprintf(buf, len, "%lld bytes", (long long)n);
    else if (n <= 1048576) snprintf(buf, len, "%.2f KiB", (double)n / 1024.0);
    else if (n <= 1073741824) snprintf(buf, len, "%.2f MiB", (double)n / 1048576.0);
    else snprintf(buf, len, "%.2f GiB", (double)n / 1073741824.0);
    return buf;
}

void fault_oom_message(char *buf, size_t len, int64_t ask, int64_t total) {
    int64_t free_b = ask / 3, in_use = total - free_b, context = (int64_t)512 << 20;
    int64_t reserved = ask / 8 + in_use / 256, allocated = in_use - reserved - context;
    if (allocated < 0) allocated = 0;
    char a[32], t[32], f[32], u[32], al[32], r[32];
    /* The wording is PyTorch's (c10's CUDA caching allocator, raised as torch.OutOfMemoryError). */
    snprintf(buf, len,
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %s. GPU 0 has a total capacity of %s "
             "of which %s is free. Including non-PyTorch memory, this process has %s memory in use. Of the "
             "allocated memory %s is allocated by PyTorch, and %s is reserved by PyTorch but unallocated. If "
             "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
             "to avoid fragmentation.  See documentation for Memory Management  "
             "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
             torch_size(ask, a, sizeof a), torch_size(total, t, sizeof t), torch_size(free_b, f, sizeof f),
             torch_size(in_use, u, sizeof u), torch_size(allocated, al, sizeof al), torch_size(reserved, r, sizeof r));
}

/* ---- live state -------------------------------------------------------------------- */

faults_t *faults_new(uint64_t seed) {
    faults_t *f = sl_calloc(1, sizeof *f);
    pthread_mutex_t *mu = sl_calloc(1, sizeof *mu);
    pthread_mutex_init(mu, NULL);
    f->mu = mu;
    f->rng = seed;
    for (int i = 0; i < FAULT_COUNT; i++) {
        fault_spec_t s;
        fault_spec_init(&s, (fault_id_t)i);
        f->params[i] = s.p;
    }
    return f;
}

void faults_bind_metrics(faults_t *f, metrics_t *metrics) {
    {
        static const char *const labels[] = {"fault"};
        metric_family_t *act = metrics_add(metrics, "servelab:fault_active", "Whether a lab fault is active (1) or not (0).",
                                           METRIC_GAUGE, 1, labels, NULL, 0, 0);
        metric_family_t *inj = metrics_add(metrics, "servelab:fault_injections_total",
                                           "Times a lab fault acted, in its own unit (steps, stops, stalls, prompt tokens, events, "
                                           "blocks, requests or rows; docs/lab.md).",
                                           METRIC_COUNTER, 1, labels, NULL, 0, 0);
        for (int i = 0; i < FAULT_COUNT; i++) {
            const char *v[] = {table[i].name};
            f->active_metric[i] = metric_child(act, v);
            f->injections_metric[i] = metric_child(inj, v);
        }
    }
}

void faults_free(faults_t *f) {
    if (!f) return;
    pthread_mutex_destroy(f->mu);
    free(f->mu);
    free(f);
}

/* Under mu. */
static void set_locked(faults_t *f, fault_id_t id, bool on, const fault_params_t *p) {
    fault_spec_t s;
    fault_spec_init(&s, id);
    if (on) s.p = *p;
    f->params[id] = s.p;
    if (on) {
        f->epoch[id]++;
        f->set_at[id] = sl_now_s();
    }
    if (id == FAULT_STEP_DELAY) atomic_store(&f->step_delay_ms, (int32_t)s.p.ms);
    if (on) atomic_fetch_or(&f->mask, FAULT_BIT(id));
    else atomic_fetch_and(&f->mask, ~FAULT_BIT(id));
    if (f->active_metric[id]) metric_set(f->active_metric[id], on ? 1.0 : 0.0);
}

void faults_on_change(faults_t *f, void (*fn)(void *), void *ctx) {
    pthread_mutex_lock(f->mu);
    f->on_change = fn;
    f->on_change_ctx = ctx;
    pthread_mutex_unlock(f->mu);
}

/* Runs the change hook, outside the lock (it takes the engine's). */
static void changed(faults_t *f) {
    pthread_mutex_lock(f->mu);
    void (*fn)(void *) = f->on_change;
    void *ctx = f->on_change_ctx;
    pthread_mutex_unlock(f->mu);
    if (fn) fn(ctx);
}

void faults_set(faults_t *f, const fault_spec_t *s) {
    char params[256];
    fault_params_format(s, params, sizeof params);
    pthread_mutex_lock(f->mu);
    set_locked(f, s->id, true, &s->p);
    pthread_mutex_unlock(f->mu);
    LOG_INFO("Fault injection: %s set%s%s", table[s->id].name, params[0] ? " with " : "", params);
    changed(f);
}

void faults_clear(faults_t *f, fault_id_t id) {
    pthread_mutex_lock(f->mu);
    bool was = atomic_load(&f->mask) & FAULT_BIT(id);
    set_locked(f, id, false, NULL);
    pthread_mutex_unlock(f->mu);
    if (was) LOG_INFO("Fault injection: %s cleared", table[id].name);
    if (was) changed(f);
}

void faults_clear_all(faults_t *f) {
    for (int i = 0; i < FAULT_COUNT; i++) faults_clear(f, (fault_id_t)i);
}

bool faults_expire(faults_t *f, fault_id_t id, uint64_t epoch, const char *why) {
    pthread_mutex_lock(f->mu);
    bool match = (atomic_load(&f->mask) & FAULT_BIT(id)) && f->epoch[id] == epoch;
    if (match) set_locked(f, id, false, NULL);
    pthread_mutex_unlock(f->mu);
    if (match) LOG_INFO("Fault injection: %s cleared (%s)", table[id].name, why);
    return match;
}

bool faults_get(faults_t *f, fault_id_t id, fault_params_t *p, uint64_t *epoch, double *set_at) {
    pthread_mutex_lock(f->mu);
    bool on = atomic_load(&f->mask) & FAULT_BIT(id);
    if (on && p) *p = f->params[id];
    if (on && epoch) *epoch = f->epoch[id];
    if (on && set_at) *set_at = f->set_at[id];
    pthread_mutex_unlock(f->mu);
    return on;
}

void faults_count(faults_t *f, fault_id_t id, int64_t n) {
    if (f->injections_metric[id]) metric_inc(f->injections_metric[id], (double)n);
}

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static volatile uint64_t burn_sink; /* the burn's result goes where it must be computed */

uint64_t faults_burn_cpu(int64_t us, const int32_t *ids, int64_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    int64_t at = 0;
    double until = thread_cpu_s() + (double)us * 1e-6;
    do {
        /* FNV-1a over the ids, round and round, 256 of them between clock reads. */
        for (int k = 0; k < 256; k++, at = at + 1 < n ? at + 1 : 0) {
            uint64_t v = n > 0 ? (uint64_t)(uint32_t)ids[at] : (uint64_t)k;
            h = (h ^ v) * 0x100000001b3ull;
        }
    } while (thread_cpu_s() < until);
    burn_sink = h;
    return h;
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t x = *state += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

bool faults_http_error_draw(faults_t *f, int *status, const char **type, const char **message) {
    pthread_mutex_lock(f->mu);
    if (!(atomic_load(&f->mask) & FAULT_BIT(FAULT_HTTP_ERROR))) {
        pthread_mutex_unlock(f->mu);
        return false;
    }
    fault_params_t *p = &f->params[FAULT_HTTP_ERROR];
    /* A counted fault fails exactly the next `count` requests, so no draw for it. */
    bool fail = p->count > 0 || (int)(splitmix64(&f->rng) % 100) < p->rate;
    bool expired = false;
    if (fail) {
        int n = __builtin_popcount(p->types), pick = (int)(splitmix64(&f->rng) % (uint64_t)n), k = 0;
        for (int i = 0; i < FAULT_HTTP_N_TYPES; i++)
            if ((p->types & FAULT_BIT(i)) && k++ == pick) {
                *status = http_types[i].status;
                *type = http_types[i].type;
                *message = http_types[i].message;
            }
        if (p->count > 0 && --p->count == 0) {
            set_locked(f, FAULT_HTTP_ERROR, false, NULL);
            expired = true;
        }
    }
    pthread_mutex_unlock(f->mu);
    if (fail) faults_count(f, FAULT_HTTP_ERROR, 1);
    if (expired) LOG_INFO("Fault injection: http_error cleared (its count ran out)");
    return fail;
}

char *faults_list_json(faults_t *f) {
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "faults");
    pthread_mutex_lock(f->mu);
    uint32_t mask = atomic_load(&f->mask);
    for (int i = 0; i < FAULT_COUNT; i++) {
        const fault_def_t *d = &table[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", d->name);
        cJSON_AddStringToObject(o, "description", d->description);
        cJSON_AddStringToObject(o, "symptom", d->symptom);
        bool on = mask & FAULT_BIT(i);
        cJSON_AddBoolToObject(o, "active", on);
        cJSON_AddNumberToObject(o, "injections", f->injections_metric[i] ? metric_value(f->injections_metric[i]) : 0);
        cJSON *ps = cJSON_AddArrayToObject(o, "params");
        const fault_params_t *v = &f->params[i];
        for (int k = 0; k < d->n_params; k++) {
            const param_def_t *p = &d->params[k];
            cJSON *po = cJSON_CreateObject();
            cJSON_AddStringToObject(po, "name", p->key);
            cJSON_AddStringToObject(po, "type", p->kind == PARAM_INT ? "integer" : p->kind == PARAM_FLOAT ? "number" : "list");
            cJSON_AddStringToObject(po, "unit", p->unit);
            if (p->kind == PARAM_TYPES) {
                cJSON *vals = cJSON_AddArrayToObject(po, "values");
                for (int t = 0; t < FAULT_HTTP_N_TYPES; t++) cJSON_AddItemToArray(vals, cJSON_CreateString(http_types[t].name));
            } else {
                cJSON_AddNumberToObject(po, "min", p->min);
                if (p->max != NO_MAX) cJSON_AddNumberToObject(po, "max", p->max);
            }
            cJSON_AddBoolToObject(po, "required", p->required);
            if (p->def) cJSON_AddStringToObject(po, "default", p->def);
            else cJSON_AddNullToObject(po, "default");
            cJSON_AddStringToObject(po, "help", p->help);
            if (!on) cJSON_AddNullToObject(po, "value");
            else if (p->kind == PARAM_TYPES) {
                char types[160];
                types_format(v->types, types, sizeof types);
                cJSON_AddStringToObject(po, "value", types);
            } else if (p->kind == PARAM_FLOAT) {
                cJSON_AddNumberToObject(po, "value", float_value(v, p));
            } else if (int_value(v, p) == 0 && !p->def) {
                cJSON_AddNullToObject(po, "value"); /* an optional limit not given */
            } else {
                cJSON_AddNumberToObject(po, "value", (double)int_value(v, p));
            }
            cJSON_AddItemToArray(ps, po);
        }
        cJSON_AddItemToArray(arr, o);
    }
    pthread_mutex_unlock(f->mu);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}
