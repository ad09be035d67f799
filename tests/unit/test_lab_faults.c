/* test_lab_faults.c - the lab's fault table (src/lab/faults.c): parsing
 * `NAME[:key=value,...]`, each parameter's validation and units, the errors
 * that list the valid names, and the live state (set, clear without residue,
 * http_error's counted and seeded draws, the metrics).
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <time.h>

#include "servelab/lab.h"
#include "test.h"

static void test_parse_step_delay_with_ms(void) {
    fault_spec_t s;
    char err[768];
    CHECK(fault_parse_spec("step_delay:ms=200", &s, err, sizeof err) == 0);
    CHECK_EQ_INT(s.id, FAULT_STEP_DELAY);
    CHECK_EQ_INT(s.p.ms, 200);
    CHECK(fault_parse_spec("step_delay:ms=60000", &s, err, sizeof err) == 0);
}

static void test_parse_suppress_eos_takes_no_params(void) {
    fault_spec_t s;
    char err[768];
    CHECK(fault_parse_spec("suppress_eos", &s, err, sizeof err) == 0);
    CHECK_EQ_INT(s.id, FAULT_SUPPRESS_EOS);
    CHECK(fault_parse_spec("suppress_eos:ms=1", &s, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, "takes no parameters");
}

static void test_parse_http_error_defaults(void) {
    fault_spec_t s;
    char err[768];
    CHECK(fault_parse_spec("http_error", &s, err, sizeof err) == 0);
    CHECK_EQ_INT(s.p.rate, 100);
    CHECK_EQ_INT(s.p.types, FAULT_BIT(FAULT_HTTP_SERVER_ERROR));
    CHECK_EQ_INT(s.p.count, 0);
}

static void test_parse_types_list_continues_across_commas(void) {
    fault_spec_t s;
    char err[768];
    CHECK(fault_parse_spec("http_error:rate=50,types=rate_limit,model_not_found,count=3", &s, err, sizeof err) == 0);
    CHECK_EQ_INT(s.p.rate, 50);
    CHECK_EQ_INT(s.p.types, FAULT_BIT(FAULT_HTTP_RATE_LIMIT) | FAULT_BIT(FAULT_HTTP_MODEL_NOT_FOUND));
    CHECK_EQ_INT(s.p.count, 3);
    char buf[256];
    fault_params_format(&s, buf, sizeof buf);
    CHECK(!strcmp(buf, "rate=50,types=rate_limit,model_not_found,count=3"));
}

static void test_unknown_fault_lists_the_valid_ones(void) {
    fault_spec_t s;
    char err[768];
    CHECK(fault_parse_spec("gpu_on_fire:x=1", &s, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, "unknown fault 'gpu_on_fire'");
    CHECK_STR_CONTAINS(err, "step_delay, engine_stall, tokenize_cost");
    CHECK_STR_CONTAINS(err, "logit_noise, http_error");
}

static void test_out_of_range_and_malformed_values_are_refused(void) {
    fault_spec_t s;
    char err[768];
    const char *bad[] = {"step_delay:ms=0",  "step_delay:ms=60001", "step_delay:ms=-5",     "step_delay:ms=1.5",
                         "step_delay:ms=",   "step_delay:ms=12x",   "http_error:rate=101",  "http_error:rate=-1",
                         "http_error:count=0", "http_error:types=",  "http_error:types=rate_limit,,server_error",
                         "http_error:types=teapot", "step_delay:ms", "step_delay:speed=3", "step_delay"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        CHECK(fault_parse_spec(bad[i], &s, err, sizeof err) == -1);
        CHECK(err[0] != '\0');
    }
    CHECK(fault_parse_spec("step_delay:speed=3", &s, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, "unknown parameter 'speed'");
    CHECK_STR_CONTAINS(err, "ms (1..60000 ms, required)");
    CHECK(fault_parse_spec("http_error:types=teapot", &s, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, "rate_limit, invalid_api_key, context_length, server_error");
}

static void test_param_set_leaves_spec_unchanged_on_error(void) {
    fault_spec_t s;
    char err[768];
    fault_spec_init(&s, FAULT_HTTP_ERROR);
    CHECK(fault_param_set(&s, "rate", "250", err, sizeof err) == -1);
    CHECK_EQ_INT(s.p.rate, 100);
    CHECK(fault_param_set(&s, "rate", "0", err, sizeof err) == 0);
    CHECK_EQ_INT(s.p.rate, 0);
}

static void test_set_and_clear_leave_no_residue(void) {
    metrics_t *m = metrics_new();
    faults_t *f = faults_new(1);
    faults_bind_metrics(f, m);
    CHECK_EQ_INT(faults_mask(f), 0);
    CHECK_EQ_INT(faults_mask(NULL), 0);
    fault_spec_t s;
    char err[768];
    CHECK(fault_parse_spec("step_delay:ms=30", &s, err, sizeof err) == 0);
    faults_set(f, &s);
    CHECK_EQ_INT(faults_mask(f), FAULT_BIT(FAULT_STEP_DELAY));
    CHECK_EQ_INT(atomic_load(&f->step_delay_ms), 30);
    CHECK(metric_value(f->active_metric[FAULT_STEP_DELAY]) == 1.0);
    faults_count(f, FAULT_STEP_DELAY, 2);
    faults_clear(f, FAULT_STEP_DELAY);
    CHECK_EQ_INT(faults_mask(f), 0);
    CHECK_EQ_INT(atomic_load(&f->step_delay_ms), 0);
    CHECK_EQ_INT(f->params[FAULT_STEP_DELAY].ms, 0);
    CHECK(metric_value(f->active_metric[FAULT_STEP_DELAY]) == 0.0);
    CHECK(metric_value(f->injections_metric[FAULT_STEP_DELAY]) == 2.0); /* a counter stays */
    char *js = faults_list_json(f);
    cJSON *root = cJSON_Parse(js);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(root, "faults")) == FAULT_COUNT);
    cJSON_Delete(root);
    free(js);
    faults_free(f);
    metrics_free(m);
}

static void test_http_error_count_fails_exactly_n_then_clears(void) {
    faults_t *f = faults_new(1);
    fault_spec_t s;
    char err[768];
    CHECK(fault_parse_spec("http_error:count=2,types=rate_limit", &s, err, sizeof err) == 0);
    faults_set(f, &s);
    int status = 0;
    const char *type = NULL, *msg = NULL;
    CHECK(faults_http_error_draw(f, &status, &type, &msg));
    CHECK_EQ_INT(status, 429);
    CHECK(!strcmp(type, "RateLimitError"));
    CHECK(faults_http_error_draw(f, &status, &type, &msg));
    CHECK(!faults_http_error_draw(f, &status, &type, &msg));
    CHECK_EQ_INT(faults_mask(f), 0);
    faults_free(f);
}

/* The same seed gives the same failures; rate=0 never fails. */
static void test_http_error_draws_are_seeded(void) {
    fault_spec_t s;
    char err[768];
    CHECK(fault_parse_spec("http_error:rate=50,types=rate_limit,server_error,model_not_found", &s, err, sizeof err) == 0);
    int seq[2][64];
    for (int run = 0; run < 2; run++) {
        faults_t *f = faults_new(42);
        faults_set(f, &s);
        for (int i = 0; i < 64; i++) {
            int status = 0;
            const char *type, *msg;
            seq[run][i] = faults_http_error_draw(f, &status, &type, &msg) ? status : 0;
        }
        faults_free(f);
    }
    int n_fail = 0;
    for (int i = 0; i < 64; i++) {
        CHECK_EQ_INT(seq[0][i], seq[1][i]);
        n_fail += seq[0][i] != 0;
        CHECK(seq[0][i] == 0 || seq[0][i] == 429 || seq[0][i] == 503 || seq[0][i] == 404);
    }
    CHECK(n_fail > 10 && n_fail < 54);
    faults_t *f = faults_new(42);
    CHECK(fault_parse_spec("http_error:rate=0", &s, err, sizeof err) == 0);
    faults_set(f, &s);
    for (int i = 0; i < 64; i++) {
        int status;
        const char *type, *msg;
        CHECK(!faults_http_error_draw(f, &status, &type, &msg));
    }
    faults_free(f);
}

static void test_new_faults_parse_with_their_units_and_defaults(void) {
    fault_spec_t s;
    char err[768], buf[256];
    CHECK(fault_parse_spec("engine_stall", &s, err, sizeof err) == 0);
    CHECK_EQ_INT(s.p.seconds, 0); /* until cleared */
    CHECK(fault_parse_spec("engine_stall:seconds=5", &s, err, sizeof err) == 0);
    CHECK_EQ_INT(s.p.seconds, 5);
    CHECK(fault_parse_spec("cold_start", &s, err, sizeof err) == 0);
    CHECK_EQ_INT(s.p.steps, 8);
    CHECK_EQ_INT(s.p.ms, 1000);
    fault_params_format(&s, buf, sizeof buf);
    CHECK(!strcmp(buf, "steps=8,ms=1000"));
    CHECK(fault_parse_spec("kv_leak", &s, err, sizeof err) == 0);
    CHECK_EQ_INT(s.p.blocks, 1);
    CHECK(fault_parse_spec("logit_noise:scale=2.5", &s, err, sizeof err) == 0);
    CHECK(s.p.scale == 2.5);
    fault_params_format(&s, buf, sizeof buf);
    CHECK(!strcmp(buf, "scale=2.5"));
    CHECK(fault_parse_spec("oom:running=4", &s, err, sizeof err) == 0);
    CHECK_EQ_INT(s.p.running, 4);
    CHECK_EQ_INT(s.p.prompt_tokens, 0);
    fault_params_format(&s, buf, sizeof buf);
    CHECK(!strcmp(buf, "running=4"));
    CHECK(fault_parse_spec("stream_coalesce:tokens=4", &s, err, sizeof err) == 0);
    CHECK(fault_parse_spec("tokenize_cost:us_per_token=50", &s, err, sizeof err) == 0);
    CHECK_EQ_INT(s.p.us_per_token, 50);
    const char *bad[] = {"logit_noise", "logit_noise:scale=0", "logit_noise:scale=nan", "logit_noise:scale=1e9",
                         "logit_noise:scale=1x", "oom", "stream_coalesce:tokens=1", "tokenize_cost",
                         "engine_stall:seconds=0", "cold_start:steps=0", "kv_leak:blocks=-1", "stream_delay"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        CHECK(fault_parse_spec(bad[i], &s, err, sizeof err) == -1);
        CHECK(err[0] != '\0');
    }
    CHECK(fault_parse_spec("oom", &s, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, "give prompt_tokens or running");
    CHECK(fault_parse_spec("logit_noise", &s, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, "scale (number 0.001..1000 logits, required)");
}

static void test_spec_from_json_validates_like_the_flag(void) {
    fault_spec_t s;
    char err[768];
    const char *ok = "{\"name\": \"http_error\", \"params\": {\"types\": [\"rate_limit\", \"server_error\"], \"count\": 2}}";
    CHECK(fault_spec_from_json(ok, strlen(ok), &s, err, sizeof err) == 0);
    CHECK_EQ_INT(s.id, FAULT_HTTP_ERROR);
    CHECK_EQ_INT(s.p.count, 2);
    CHECK_EQ_INT(s.p.types, FAULT_BIT(FAULT_HTTP_RATE_LIMIT) | FAULT_BIT(FAULT_HTTP_SERVER_ERROR));
    const char *noise = "{\"name\": \"logit_noise\", \"params\": {\"scale\": 0.25}}";
    CHECK(fault_spec_from_json(noise, strlen(noise), &s, err, sizeof err) == 0);
    CHECK(s.p.scale == 0.25);
    const char *bad[] = {"", "[]", "{\"name\": 3}", "{\"name\": \"step_delay\"}",
                         "{\"name\": \"step_delay\", \"params\": {\"ms\": 1.5}}",
                         "{\"name\": \"step_delay\", \"params\": {\"ms\": true}}",
                         "{\"name\": \"step_delay\", \"params\": []}",
                         "{\"name\": \"http_error\", \"params\": {\"types\": [1]}}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        CHECK(fault_spec_from_json(bad[i], strlen(bad[i]), &s, err, sizeof err) == -1);
        CHECK(err[0] != '\0');
    }
}

static void test_get_reports_params_epoch_and_time(void) {
    faults_t *f = faults_new(1);
    fault_spec_t s;
    char err[768];
    fault_params_t p;
    uint64_t epoch = 0;
    CHECK(!faults_get(f, FAULT_COLD_START, &p, &epoch, NULL));
    CHECK(fault_parse_spec("cold_start:steps=3", &s, err, sizeof err) == 0);
    faults_set(f, &s);
    CHECK(faults_get(f, FAULT_COLD_START, &p, &epoch, NULL));
    CHECK_EQ_INT(p.steps, 3);
    CHECK_EQ_INT(epoch, 1);
    faults_set(f, &s);
    CHECK(faults_get(f, FAULT_COLD_START, NULL, &epoch, NULL));
    CHECK_EQ_INT(epoch, 2); /* a new setting: the engine counts its steps again */
    faults_clear(f, FAULT_COLD_START);
    CHECK(!faults_get(f, FAULT_COLD_START, &p, &epoch, NULL));
    faults_free(f);
}

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* tokenize_cost's work is this thread's CPU time, not a sleep, with or without ids. */
static void test_burn_cpu_spends_thread_cpu_time(void) {
    int32_t ids[] = {5, 17, 1023, 2};
    double t0 = thread_cpu_s();
    uint64_t a = faults_burn_cpu(30000, ids, 4);
    double spent = thread_cpu_s() - t0;
    CHECK(spent >= 0.030 && spent < 0.5);
    t0 = thread_cpu_s();
    faults_burn_cpu(10000, NULL, 0);
    CHECK(thread_cpu_s() - t0 >= 0.010);
    CHECK(a != 0);
}

/* fault_spec_to_json gives the admin API's body for a spec, which reads back to the same spec. */
static void test_spec_to_json_reads_back(void) {
    const char *specs[] = {"step_delay:ms=25", "suppress_eos", "engine_stall", "engine_stall:seconds=5",
                           "http_error:rate=50,types=server_error,rate_limit", "http_error:types=rate_limit,count=2",
                           "kv_leak:blocks=2", "tokenize_cost:us_per_token=2000", "oom:prompt_tokens=16",
                           "logit_noise:scale=0.37", "allreduce_delay:ms=0.5,gbps=12.5", "allreduce_delay:ms=2",
                           "allreduce_delay:gbps=3", "cold_start:steps=3,ms=600", "stream_coalesce:tokens=4"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        fault_spec_t a, b;
        char err[256], fa[256], fb[256];
        CHECK_EQ_INT(fault_parse_spec(specs[i], &a, err, sizeof err), 0);
        char *json = fault_spec_to_json(&a);
        CHECK_EQ_INT(fault_spec_from_json(json, strlen(json), &b, err, sizeof err), 0);
        fault_params_format(&a, fa, sizeof fa);
        fault_params_format(&b, fb, sizeof fb);
        const fault_params_t *x = &a.p, *y = &b.p; /* every field, not only what the format shows */
        bool same = a.id == b.id && x->ms == y->ms && x->seconds == y->seconds && x->us_per_token == y->us_per_token &&
                    x->tokens == y->tokens && x->blocks == y->blocks && x->prompt_tokens == y->prompt_tokens &&
                    x->running == y->running && x->steps == y->steps && x->scale == y->scale && x->rate == y->rate &&
                    x->types == y->types && x->count == y->count && x->allreduce_ms == y->allreduce_ms &&
                    x->gbps == y->gbps;
        if (!same) fprintf(stderr, "  %s -> %s -> %s\n", specs[i], json, fb);
        CHECK(same);
        free(json);
    }
}

int main(void) {
    RUN(test_parse_step_delay_with_ms);
    RUN(test_spec_to_json_reads_back);
    RUN(test_parse_suppress_eos_takes_no_params);
    RUN(test_parse_http_error_defaults);
    RUN(test_parse_types_list_continues_across_commas);
    RUN(test_unknown_fault_lists_the_valid_ones);
    RUN(test_out_of_range_and_malformed_values_are_refused);
    RUN(test_param_set_leaves_spec_unchanged_on_error);
    RUN(test_set_and_clear_leave_no_residue);
    RUN(test_http_error_count_fails_exactly_n_then_clears);
    RUN(test_http_error_draws_are_seeded);
    RUN(test_new_faults_parse_with_their_units_and_defaults);
    RUN(test_spec_from_json_validates_like_the_flag);
    RUN(test_get_reports_params_epoch_and_time);
    RUN(test_burn_cpu_spends_thread_cpu_time);
    return test_summary();
}
