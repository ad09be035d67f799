/* scenario.c - a scenario file into a scenario_t (see scenario.h), every field checked.
 *
 * The format is JSON, the project's one configuration syntax (cJSON parses it). Unknown keys
 * are refused, so a misspelt field cannot silently fall back to the baseline. The cause must be
 * one the diagnoser can name and the symptom one of its measures: a scenario cannot expect what
 * the lab cannot report.
 */
#include "servelab/scenario.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "servelab/core.h"
#include "servelab/diagnose.h"
#include "servelab/lab.h"

static int fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return -1;
}

/* s for an error message: control characters as '?', at most 60 bytes, so
 * the message stays one line whatever the file holds. */
static const char *shown(const char *s, char *buf, size_t cap) {
    size_t n = 0;
    for (; s[n] && n + 1 < cap && n < 60; n++) buf[n] = (unsigned char)s[n] < 0x20 || s[n] == 0x7f ? '?' : s[n];
    buf[n] = '\0';
    return buf;
}

static bool only_keys(const cJSON *o, const char *const *keys, const char **bad) {
    for (const cJSON *it = o->child; it; it = it->next) {
        bool ok = false;
        for (const char *const *k = keys; *k; k++) ok |= !strcmp(it->string, *k);
        if (!ok) {
            *bad = it->string;
            return false;
        }
    }
    return true;
}

/* A string field: required or not; *out NULL when absent. */
static int get_str(const cJSON *o, const char *key, bool required, char **out, const char *where, char *err,
                   size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = NULL;
    if (!v) return required ? fail(err, cap, "%s\"%s\" is required", where, key) : 0;
    if (!cJSON_IsString(v) || !v->valuestring[0])
        return fail(err, cap, "%s\"%s\" must be a non-empty string", where, key);
    *out = sl_strdup(v->valuestring);
    return 0;
}

static void args_free(scn_args_t *a) {
    for (int i = 0; i < a->n; i++) free(a->v[i]);
    free(a->v);
    memset(a, 0, sizeof *a);
}

static void args_copy(scn_args_t *dst, const scn_args_t *src) {
    dst->n = src->n;
    dst->v = sl_calloc((size_t)(src->n ? src->n : 1), sizeof *dst->v);
    for (int i = 0; i < src->n; i++) dst->v[i] = sl_strdup(src->v[i]);
}

/* v, the value of `key`, an array of non-empty strings, into *a. */
static int args_from(const cJSON *v, const char *key, scn_args_t *a, const char *where, char *err, size_t cap) {
    if (!cJSON_IsArray(v)) return fail(err, cap, "%s\"%s\" must be an array of strings", where, key);
    int n = cJSON_GetArraySize(v);
    if (n > 256) return fail(err, cap, "%s\"%s\" has %d entries (at most 256)", where, key, n);
    a->v = sl_calloc((size_t)(n ? n : 1), sizeof *a->v);
    for (const cJSON *it = v->child; it; it = it->next) {
        if (!cJSON_IsString(it) || !it->valuestring[0])
            return fail(err, cap, "%s\"%s\"[%d] must be a non-empty string", where, key, a->n);
        a->v[a->n++] = sl_strdup(it->valuestring);
    }
    return 0;
}

/* An array of non-empty strings into *a; absent: *present false. */
static int get_args(const cJSON *o, const char *key, scn_args_t *a, bool *present, const char *where, char *err,
                    size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *present = v != NULL;
    return v ? args_from(v, key, a, where, err, cap) : 0;
}

/* One setup; the parts it leaves out come from `inherit` (NULL: empty). */
static int get_setup(const cJSON *root, const char *key, bool required, scn_setup_t *s, const scn_setup_t *inherit,
                     char **text, char *err, size_t cap) {
    memset(s, 0, sizeof *s);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, key);
    char where[48];
    snprintf(where, sizeof where, "%s: ", key);
    if (!o && required) return fail(err, cap, "\"%s\" is required", key);
    if (o && !cJSON_IsObject(o)) return fail(err, cap, "\"%s\" must be an object", key);
    static const char *const keys[] = {"server", "faults", "load", "warmup", "proxy", "model", "golden_request",
                                       "text", NULL};
    const char *bad;
    if (o && !only_keys(o, keys, &bad))
        return fail(err, cap,
                    "%sunknown key \"%s\" (expected server, faults, load, warmup, proxy, model, golden_request%s)",
                    where, shown(bad, (char[64]){0}, 64), text ? ", text" : "");
    if (o && get_str(o, "model", false, &s->model, where, err, cap)) return -1;
    if (s->model && !inherit)
        return fail(err, cap, "%s\"model\" belongs to the incident or the remedy (the scenario's \"model\" is the "
                    "baseline's)", where);
    if (!s->model && inherit && inherit->model) s->model = sl_strdup(inherit->model);
    const cJSON *gr = o ? cJSON_GetObjectItemCaseSensitive(o, "golden_request") : NULL;
    if (gr && (!cJSON_IsObject(gr) || cJSON_GetArraySize(gr) > 16))
        return fail(err, cap, "%s\"golden_request\" must be an object of at most 16 request fields "
                    "({\"temperature\": null}: not sent)", where);
    for (const cJSON *f = gr ? gr->child : NULL; f; f = f->next)
        if (!strcmp(f->string, "model") || !strcmp(f->string, "prompt") || !strcmp(f->string, "messages") ||
            !strcmp(f->string, "stream"))
            return fail(err, cap, "%s\"golden_request\": \"%s\" is the golden file's or the replay's", where,
                        f->string);
    if (gr) s->golden_request = cJSON_PrintUnformatted(gr);
    else if (inherit && inherit->golden_request) s->golden_request = sl_strdup(inherit->golden_request);
    if (o && !text && cJSON_GetObjectItemCaseSensitive(o, "text"))
        return fail(err, cap, "%s\"text\" belongs to the remedy", where);
    struct { const char *k; scn_args_t *dst; const scn_args_t *from; } parts[] = {
        {"server", &s->server, inherit ? &inherit->server : NULL},
        {"faults", &s->faults, inherit ? &inherit->faults : NULL},
        {"load", &s->load, inherit ? &inherit->load : NULL},
        {"warmup", &s->warmup, inherit ? &inherit->warmup : NULL},
    };
    for (int i = 0; i < 4; i++) {
        bool present = false;
        if (o && get_args(o, parts[i].k, parts[i].dst, &present, where, err, cap)) return -1;
        if (!present && parts[i].from) args_copy(parts[i].dst, parts[i].from);
    }
    if (o && get_args(o, "proxy", &s->proxy, &s->proxied, where, err, cap)) return -1;
    if (!s->proxied && inherit && inherit->proxied) args_copy(&s->proxy, &inherit->proxy), s->proxied = true;
    for (int i = 0; i < s->proxy.n; i++) /* one simple directive each: no block, no second directive */
        if (strpbrk(s->proxy.v[i], ";{}\n\r#"))
            return fail(err, cap, "%s\"proxy\"[%d]: one nginx directive without ';', braces, '#' or newlines",
                        where, i);
    if (text && o && get_str(o, "text", true, text, where, err, cap)) return -1;
    return 0;
}

static int get_seconds(const cJSON *root, const char *key, double dflt, double lo, double hi, double *out, char *err,
                       size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *out = dflt;
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
        return fail(err, cap, "\"%s\" must be a number of seconds in [%g, %g]", key, lo, hi);
    *out = v->valuedouble;
    return 0;
}

/* "watch": "load" (the default: diagnose watches once the load flows) or "boot". */
static int get_watch(const cJSON *root, bool *boot, char *err, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "watch");
    *boot = false;
    if (!v) return 0;
    if (!cJSON_IsString(v) || (strcmp(v->valuestring, "load") && strcmp(v->valuestring, "boot")))
        return fail(err, cap, "\"watch\" must be \"load\" or \"boot\"");
    *boot = !strcmp(v->valuestring, "boot");
    return 0;
}

/* "make_models": {"DIR": ["tools/PROGRAM", "ARG", ...], ...}: how a model the scenario serves is
 * made when DIR has no config.json. The program must be one of the repository's tools. */
static int get_make_models(const cJSON *root, scenario_t *s, char *err, size_t cap) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "make_models");
    if (!o) return 0;
    if (!cJSON_IsObject(o)) return fail(err, cap, "\"make_models\" must be an object {\"DIR\": [\"tools/...\", ...]}");
    const int n = cJSON_GetArraySize(o);
    if (n > 16) return fail(err, cap, "\"make_models\" has %d entries (at most 16)", n);
    s->make_dir = sl_calloc((size_t)(n ? n : 1), sizeof *s->make_dir);
    s->make_cmd = sl_calloc((size_t)(n ? n : 1), sizeof *s->make_cmd);
    for (const cJSON *it = o->child; it; it = it->next) {
        if (!it->string[0]) return fail(err, cap, "make_models: a model directory must be non-empty");
        s->make_dir[s->n_make] = sl_strdup(it->string);
        scn_args_t *cmd = &s->make_cmd[s->n_make++];
        char dir[64], where[96];
        shown(it->string, dir, sizeof dir);
        if (args_from(it, dir, cmd, "make_models: ", err, cap)) return -1;
        snprintf(where, sizeof where, "make_models: \"%s\": ", dir);
        if (!cmd->n || strncmp(cmd->v[0], "tools/", 6) || strstr(cmd->v[0], ".."))
            return fail(err, cap, "%sthe command must start with one of the repository's tools (\"tools/NAME\")",
                        where);
    }
    return 0;
}

static int parse_root(const cJSON *root, scenario_t *s, char *err, size_t cap) {
    static const char *const keys[] = {"title", "seed", "section", "quote", "model", "imitation", "baseline",
                                       "incident", "remedy", "symptom", "expect", "window_s", "settle_s", "golden",
                                       "watch", "expected_inflight", "replicas", "make_models", "gates",
                                       "gate_prompts", NULL};
    const char *bad;
    if (!only_keys(root, keys, &bad)) return fail(err, cap, "unknown key \"%s\"", shown(bad, (char[64]){0}, 64));
    if (get_str(root, "title", true, &s->title, "", err, cap) || get_str(root, "seed", true, &s->seed, "", err, cap) ||
        get_str(root, "section", true, &s->section, "", err, cap) ||
        get_str(root, "quote", true, &s->quote, "", err, cap) || get_str(root, "model", true, &s->model, "", err, cap) ||
        get_str(root, "imitation", false, &s->imitation, "", err, cap) ||
        get_str(root, "golden", false, &s->golden, "", err, cap) ||
        get_watch(root, &s->watch_boot, err, cap) ||
        get_str(root, "expect", true, &s->expect, "", err, cap))
        return -1;
    if (!diag_is_cause(s->expect))
        return fail(err, cap, "\"expect\": \"%s\" is not a cause servelab diagnose names (docs/lab.md)",
                    shown(s->expect, (char[64]){0}, 64));
    if (get_setup(root, "baseline", true, &s->baseline, NULL, NULL, err, cap) ||
        get_setup(root, "incident", true, &s->incident, &s->baseline, NULL, err, cap) ||
        get_setup(root, "remedy", false, &s->remedy, &s->baseline, &s->remedy_text, err, cap))
        return -1;
    const cJSON *inflight = cJSON_GetObjectItemCaseSensitive(root, "expected_inflight");
    if (inflight && !(cJSON_IsNumber(inflight) && inflight->valuedouble >= 1 && inflight->valuedouble <= 100000 &&
                      inflight->valuedouble == floor(inflight->valuedouble)))
        return fail(err, cap, "\"expected_inflight\" must be a whole number of requests in [1, 100000]");
    s->expected_inflight = inflight ? (int)inflight->valuedouble : 0;
    const cJSON *replicas = cJSON_GetObjectItemCaseSensitive(root, "replicas");
    const double nr = cJSON_IsNumber(replicas) ? replicas->valuedouble : 0;
    if (replicas && !(nr >= 1 && nr <= SCN_MAX_REPLICAS && nr == floor(nr)))
        return fail(err, cap, "\"replicas\" must be a whole number of servers in [1, %d]", SCN_MAX_REPLICAS);
    s->replicas = replicas ? (int)replicas->valuedouble : 1;
    if (get_make_models(root, s, err, cap)) return -1;
    bool gated;
    if (get_args(root, "gates", &s->gates, &gated, "", err, cap)) return -1;
    const cJSON *gp = cJSON_GetObjectItemCaseSensitive(root, "gate_prompts");
    if (gp && !(cJSON_IsNumber(gp) && gp->valuedouble >= 1 && gp->valuedouble <= 100000 &&
                gp->valuedouble == floor(gp->valuedouble)))
        return fail(err, cap, "\"gate_prompts\" must be a whole number of requests in [1, 100000]");
    if (gp && !s->gates.n) return fail(err, cap, "\"gate_prompts\" needs \"gates\"");
    s->gate_prompts = gp ? (int)gp->valuedouble : 50;
    if (s->replicas > 1 && !(s->baseline.proxied && s->incident.proxied && s->remedy.proxied))
        return fail(err, cap, "\"replicas\": %d servers need a \"proxy\" in front of them (the baseline's, "
                    "which the other setups inherit)", s->replicas);
    if (!s->golden && (s->baseline.golden_request || s->incident.golden_request || s->remedy.golden_request))
        return fail(err, cap, "\"golden_request\" needs \"golden\" (the prompts it is sent with)");
    if (s->golden && s->watch_boot)
        return fail(err, cap, "\"golden\" needs \"watch\": \"load\" (recording its answers would warm the server)");
    bool healthy = !strcmp(s->expect, "healthy");
    if (!s->remedy_text && cJSON_GetObjectItemCaseSensitive(root, "remedy"))
        return fail(err, cap, "remedy: \"text\" is required");
    if (!s->remedy_text && !healthy) return fail(err, cap, "\"remedy\" is required (what the playbook prescribes)");
    if (s->baseline.load.n == 0) return fail(err, cap, "baseline: \"load\" is required (bench serve flags)");
    const scn_setup_t *setups[] = {&s->baseline, &s->incident, &s->remedy};
    const char *setup_names[] = {"baseline", "incident", "remedy"};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < setups[k]->faults.n; i++) {
            fault_spec_t spec;
            char ferr[400];
            if (fault_parse_spec(setups[k]->faults.v[i], &spec, ferr, sizeof ferr))
                return fail(err, cap, "%s: faults[%d]: %s", setup_names[k], i, ferr);
        }

    const cJSON *sym = cJSON_GetObjectItemCaseSensitive(root, "symptom");
    if (!sym && healthy) /* nothing is meant to move */
        return get_seconds(root, "window_s", 3.0, 1.0, 600.0, &s->window_s, err, cap) ||
                       get_seconds(root, "settle_s", 2.0, 0.0, 600.0, &s->settle_s, err, cap)
                   ? -1
                   : 0;
    if (!cJSON_IsObject(sym)) return fail(err, cap, "\"symptom\" is required: {\"measure\", \"direction\", \"where\"}");
    static const char *const sym_keys[] = {"measure", "direction", "where", NULL};
    if (!only_keys(sym, sym_keys, &bad))
        return fail(err, cap, "symptom: unknown key \"%s\"", shown(bad, (char[64]){0}, 64));
    char *dir = NULL;
    if (get_str(sym, "measure", true, &s->measure, "symptom: ", err, cap) ||
        get_str(sym, "where", true, &s->where, "symptom: ", err, cap) ||
        get_str(sym, "direction", true, &dir, "symptom: ", err, cap))
        return -1;
    s->direction = !strcmp(dir, "up") ? 1 : !strcmp(dir, "down") ? -1 : 0;
    free(dir);
    if (!s->direction) return fail(err, cap, "symptom: \"direction\" must be \"up\" or \"down\"");
    if (diag_measure_index(s->measure) < 0)
        return fail(err, cap, "symptom: \"measure\": \"%s\" is not a servelab diagnose measure",
                    shown(s->measure, (char[64]){0}, 64));
    return get_seconds(root, "window_s", 3.0, 1.0, 600.0, &s->window_s, err, cap) ||
                   get_seconds(root, "settle_s", 2.0, 0.0, 600.0, &s->settle_s, err, cap)
               ? -1
               : 0;
}

int scenario_parse(const char *json, size_t len, const char *name, scenario_t *s, char *err, size_t err_len) {
    memset(s, 0, sizeof *s);
    cJSON *root = cJSON_ParseWithLength(json, len);
    int rc;
    const char *at = root ? NULL : cJSON_GetErrorPtr();
    ptrdiff_t off = at && at >= json && at <= json + len ? at - json : 0;
    if (!root) rc = fail(err, err_len, "not valid JSON (near byte %td)", off);
    else if (!cJSON_IsObject(root)) rc = fail(err, err_len, "expected a JSON object");
    else rc = parse_root(root, s, err, err_len);
    cJSON_Delete(root);
    if (rc) {
        scenario_free(s);
        return -1;
    }
    s->name = sl_strdup(name);
    return 0;
}

static void setup_free(scn_setup_t *s) {
    args_free(&s->server);
    args_free(&s->faults);
    args_free(&s->load);
    args_free(&s->warmup);
    args_free(&s->proxy);
    free(s->model);
    free(s->golden_request);
}

void scenario_free(scenario_t *s) {
    free(s->name);
    free(s->title);
    free(s->seed);
    free(s->section);
    free(s->quote);
    free(s->model);
    free(s->imitation);
    free(s->golden);
    args_free(&s->gates);
    for (int i = 0; i < s->n_make; i++) free(s->make_dir[i]), args_free(&s->make_cmd[i]);
    free(s->make_dir);
    free(s->make_cmd);
    setup_free(&s->baseline);
    setup_free(&s->incident);
    setup_free(&s->remedy);
    free(s->remedy_text);
    free(s->expect);
    free(s->measure);
    free(s->where);
    memset(s, 0, sizeof *s);
}

static bool same_str(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

static bool same_args(const scn_args_t *a, const scn_args_t *b) {
    if (a->n != b->n) return false;
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->v[i], b->v[i])) return false;
    return true;
}

/* x and y serve the same, where model is the scenario's (what a setup without a "model" serves). */
static bool same_setup(const scn_setup_t *x, const scn_setup_t *y, const char *model) {
    return same_str(x->model ? x->model : model, y->model ? y->model : model) &&
           same_str(x->golden_request, y->golden_request) &&
           same_args(&x->server, &y->server) && same_args(&x->faults, &y->faults) && same_args(&x->load, &y->load) &&
           same_args(&x->warmup, &y->warmup) && x->proxied == y->proxied && same_args(&x->proxy, &y->proxy);
}

bool scenario_same_baseline(const scenario_t *a, const scenario_t *b) {
    return same_str(a->model, b->model) && same_str(a->golden, b->golden) && a->watch_boot == b->watch_boot &&
           a->window_s == b->window_s && a->settle_s == b->settle_s && a->expected_inflight == b->expected_inflight &&
           a->replicas == b->replicas && same_args(&a->gates, &b->gates) && a->gate_prompts == b->gate_prompts &&
           same_setup(&a->baseline, &b->baseline, a->model);
}

bool scenario_remedy_is_baseline(const scenario_t *s) {
    return s->remedy_text && same_setup(&s->baseline, &s->remedy, s->model);
}

/* ---- alert rules for a short run ---------------------------------------------------- */

/* Appends n bytes of p to the growing string *out (len, cap). */
static void put(char **out, size_t *len, size_t *cap, const char *p, size_t n) {
    if (*len + n + 1 > *cap) {
        *cap = (*len + n + 1) * 2;
        *out = sl_realloc(*out, *cap);
    }
    memcpy(*out + *len, p, n);
    *len += n;
    (*out)[*len] = 0;
}

/* The length of a duration at p ("5m", "10s", "1h"): digits then one of s, m, h; 0 if none. */
static size_t duration_len(const char *p) {
    size_t n = 0;
    while (p[n] >= '0' && p[n] <= '9') n++;
    return n && (p[n] == 's' || p[n] == 'm' || p[n] == 'h') ? n + 1 : 0;
}

char *scenario_shorten_rules(const char *text, const char *window, const char *hold, const char *earlier, char *err,
                             size_t err_len) {
    size_t len = 0, cap = strlen(text) + 64;
    char *out = sl_malloc(cap);
    out[0] = 0;
    for (const char *p = text; *p;) {
        size_t d;
        /* `offset D` (a word of its own): the earlier time, when given */
        if (earlier && !strncmp(p, "offset ", 7) && (d = duration_len(p + 7)) &&
            (p == text || !isalnum((unsigned char)p[-1])) && !isalnum((unsigned char)p[7 + d]) && p[7 + d] != '_') {
            put(&out, &len, &cap, "offset ", 7);
            put(&out, &len, &cap, earlier, strlen(earlier));
            p += 7 + d;
            continue;
        }
        if (*p == '[' && (d = duration_len(p + 1)) && (p[1 + d] == ']' || (p[1 + d] == ':' && p[2 + d] == ']'))) {
            if (d != 2 || strncmp(p + 1, "5m", 2)) {
                snprintf(err, err_len, "the rules have the range [%.*s]: only [5m] and [5m:] are shortened",
                         (int)d, p + 1);
                free(out);
                return NULL;
            }
            put(&out, &len, &cap, "[", 1);
            put(&out, &len, &cap, window, strlen(window));
            p += 1 + d;
        } else if (!strncmp(p, "for: ", 5) && (d = duration_len(p + 5))) {
            put(&out, &len, &cap, "for: ", 5);
            put(&out, &len, &cap, hold, strlen(hold));
            p += 5 + d;
        } else {
            put(&out, &len, &cap, p, 1);
            p++;
        }
    }
    return out;
}
