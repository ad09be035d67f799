/* test_lab_faults.c - the lab's fault table (src/lab/faults.c): parsing
 * `NAME[:key=value,...]`, each parameter's validation and units, the errors
 * that list the valid names, and the live state (set, clear without residue,
 * http_error's counted and seeded draws, the metrics).
 */
#include <cjson/cJSON.h>

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
    CHECK_STR_CONTAINS(err, "step_delay, suppress_eos, http_error");
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

int main(void) {
    RUN(test_parse_step_delay_with_ms);
    RUN(test_parse_suppress_eos_takes_no_params);
    RUN(test_parse_http_error_defaults);
    RUN(test_parse_types_list_continues_across_commas);
    RUN(test_unknown_fault_lists_the_valid_ones);
    RUN(test_out_of_range_and_malformed_values_are_refused);
    RUN(test_param_set_leaves_spec_unchanged_on_error);
    RUN(test_set_and_clear_leave_no_residue);
    RUN(test_http_error_count_fails_exactly_n_then_clears);
    RUN(test_http_error_draws_are_seeded);
    return test_summary();
}
