/* test_scenario.c - lab scenario files (src/lab/scenario.c): every committed scenario parses and
 * names a cause the diagnoser has; inheritance from the baseline; every refusal names the field. */
#include <dirent.h>

#include "servelab/core.h"
#include "servelab/diagnose.h"
#include "servelab/lab.h"
#include "servelab/scenario.h"
#include "test.h"

static const char *MINIMAL =
    "{\"title\": \"t\", \"seed\": \"002\", \"section\": \"s\", \"quote\": \"q\", \"model\": \"models/tiny\","
    " \"baseline\": {\"server\": [\"--max-num-seqs\", \"8\"], \"load\": [\"--max-concurrency\", \"8\"]},"
    " \"incident\": {\"server\": [\"--max-num-seqs\", \"2\"], \"faults\": [\"step_delay:ms=5\"]},"
    " \"remedy\": {\"text\": \"more slots\", \"load\": [\"--max-concurrency\", \"2\"]},"
    " \"symptom\": {\"measure\": \"ttft_p50\", \"direction\": \"up\", \"where\": \"TTFT\"},"
    " \"expect\": \"queueing\", \"window_s\": 4}";

static void test_incident_and_remedy_inherit_what_they_leave_out(void) {
    scenario_t s;
    char err[256];
    CHECK_EQ_INT(scenario_parse(MINIMAL, strlen(MINIMAL), "q", &s, err, sizeof err), 0);
    CHECK(!strcmp(s.name, "q") && !strcmp(s.expect, "queueing") && !strcmp(s.measure, "ttft_p50"));
    CHECK_EQ_INT(s.direction, 1);
    CHECK(s.window_s == 4.0 && s.settle_s == 2.0);
    /* The incident overrides the server and adds a fault; its load is the baseline's. */
    CHECK(s.incident.server.n == 2 && !strcmp(s.incident.server.v[1], "2"));
    CHECK(s.incident.faults.n == 1 && !strcmp(s.incident.faults.v[0], "step_delay:ms=5"));
    CHECK(s.incident.load.n == 2 && !strcmp(s.incident.load.v[1], "8"));
    /* The remedy overrides the load; its server and faults are the baseline's (none). */
    CHECK(s.remedy.server.n == 2 && !strcmp(s.remedy.server.v[1], "8"));
    CHECK_EQ_INT(s.remedy.faults.n, 0);
    CHECK(s.remedy.load.n == 2 && !strcmp(s.remedy.load.v[1], "2"));
    CHECK(!strcmp(s.remedy_text, "more slots"));
    scenario_free(&s);
}

/* MINIMAL with `from` replaced by `to` must be refused with `says`. */
static void refused(const char *from, const char *to, const char *says) {
    const char *at = strstr(MINIMAL, from);
    SL_ASSERT(at);
    char doc[4096];
    snprintf(doc, sizeof doc, "%.*s%s%s", (int)(at - MINIMAL), MINIMAL, to, at + strlen(from));
    scenario_t s;
    char err[512] = "";
    CHECK_EQ_INT(scenario_parse(doc, strlen(doc), "x", &s, err, sizeof err), -1);
    CHECK_STR_CONTAINS(err, says);
    CHECK(!strchr(err, '\n'));
    CHECK(s.name == NULL && s.title == NULL);
}

/* The optional fields: golden prompts, watching from boot, a warm-up run (inherited like the rest). */
static void test_golden_watch_and_warmup(void) {
    scenario_t s;
    char err[256];
    CHECK_EQ_INT(scenario_parse(MINIMAL, strlen(MINIMAL), "q", &s, err, sizeof err), 0);
    CHECK(s.golden == NULL && !s.watch_boot && s.baseline.warmup.n == 0 && s.remedy.warmup.n == 0);
    scenario_free(&s);
    const char *doc =
        "{\"title\": \"t\", \"seed\": \"000\", \"section\": \"s\", \"quote\": \"q\", \"model\": \"m\","
        " \"watch\": \"boot\", \"baseline\": {\"load\": [\"--max-concurrency\", \"4\"], \"warmup\": [\"--num-prompts\", \"4\"]},"
        " \"incident\": {\"faults\": [\"cold_start:steps=3,ms=600\"]},"
        " \"remedy\": {\"text\": \"warm up\", \"warmup\": [\"--num-prompts\", \"8\"]},"
        " \"symptom\": {\"measure\": \"first_ttft_ratio\", \"direction\": \"up\", \"where\": \"TTFT\"},"
        " \"expect\": \"cold_start\"}";
    CHECK_EQ_INT(scenario_parse(doc, strlen(doc), "c", &s, err, sizeof err), 0);
    CHECK(s.watch_boot);
    CHECK(s.incident.warmup.n == 2 && !strcmp(s.incident.warmup.v[1], "4")); /* the baseline's */
    CHECK(s.remedy.warmup.n == 2 && !strcmp(s.remedy.warmup.v[1], "8"));
    scenario_free(&s);
    refused("\"window_s\": 4", "\"window_s\": 4, \"golden\": \"g.json\", \"watch\": \"boot\"",
            "\"golden\" needs \"watch\": \"load\"");
    refused("\"window_s\": 4", "\"window_s\": 4, \"expected_inflight\": 2.5", "\"expected_inflight\" must be a whole number");
    refused("\"window_s\": 4", "\"window_s\": 4, \"expected_inflight\": 0", "\"expected_inflight\" must be a whole number");
    refused("\"window_s\": 4", "\"window_s\": 4, \"watch\": \"later\"", "\"watch\" must be \"load\" or \"boot\"");
    refused("\"window_s\": 4", "\"window_s\": 4, \"golden\": \"\"", "\"golden\" must be a non-empty string");
    refused("\"load\": [\"--max-concurrency\", \"2\"]", "\"warmup\": \"--num-prompts 4\"",
            "remedy: \"warmup\" must be an array of strings");
    const char *golden = "{\"title\": \"t\", \"seed\": \"000\", \"section\": \"s\", \"quote\": \"q\", \"model\": \"m\","
                         " \"golden\": \"lab/g.json\", \"baseline\": {\"load\": [\"--num-prompts\", \"4\"]},"
                         " \"incident\": {}, \"expect\": \"healthy\"}";
    CHECK_EQ_INT(scenario_parse(golden, strlen(golden), "g", &s, err, sizeof err), 0);
    CHECK(!strcmp(s.golden, "lab/g.json") && s.expected_inflight == 0);
    CHECK(!s.baseline.golden_request && !s.incident.golden_request);
    scenario_free(&s);
    /* The request fields the golden prompts go with: a setup's own, else the baseline's. */
    const char *sampled =
        "{\"title\": \"t\", \"seed\": \"001\", \"section\": \"s\", \"quote\": \"q\", \"model\": \"m\","
        " \"golden\": \"lab/g.json\", \"baseline\": {\"load\": [\"--num-prompts\", \"4\"], \"golden_request\": {\"top_p\": 1}},"
        " \"incident\": {\"golden_request\": {\"temperature\": null, \"seed\": null}}, \"remedy\": {\"text\": \"t0\"},"
        " \"symptom\": {\"measure\": \"golden_unstable\", \"direction\": \"up\", \"where\": \"answers\"},"
        " \"expect\": \"nondeterministic_output\"}";
    CHECK_EQ_INT(scenario_parse(sampled, strlen(sampled), "g", &s, err, sizeof err), 0);
    CHECK(!strcmp(s.incident.golden_request, "{\"temperature\":null,\"seed\":null}"));
    CHECK(!strcmp(s.baseline.golden_request, "{\"top_p\":1}") && !strcmp(s.remedy.golden_request, "{\"top_p\":1}"));
    CHECK(scenario_remedy_is_baseline(&s));
    scenario_free(&s);
    refused("\"faults\": [", "\"golden_request\": {\"temperature\": 1}, \"faults\": [",
            "\"golden_request\" needs \"golden\"");
    refused("\"faults\": [", "\"golden_request\": 0.7, \"faults\": [", "incident: \"golden_request\" must be an object");
    refused("\"faults\": [", "\"golden_request\": {\"messages\": []}, \"faults\": [",
            "incident: \"golden_request\": \"messages\" is the golden file's or the replay's");
}

static void test_refusals_name_the_field(void) {
    refused("\"expect\": \"queueing\"", "\"expect\": \"slow\"", "\"slow\" is not a cause servelab diagnose names");
    refused("\"measure\": \"ttft_p50\"", "\"measure\": \"ttft\"", "\"ttft\" is not a servelab diagnose measure");
    refused("\"direction\": \"up\"", "\"direction\": \"sideways\"", "must be \"up\" or \"down\"");
    refused("\"step_delay:ms=5\"", "\"step_delay:ms=0\"", "incident: faults[0]:");
    refused("\"step_delay:ms=5\"", "\"no_such_fault\"", "incident: faults[0]:");
    refused("\"window_s\": 4", "\"window_s\": 0", "\"window_s\" must be a number of seconds");
    refused("\"title\": \"t\", ", "", "\"title\" is required");
    refused("\"model\": \"models/tiny\"", "\"model\": \"\"", "\"model\" must be a non-empty string");
    refused("\"text\": \"more slots\", ", "", "remedy: \"text\" is required");
    refused("\"load\": [\"--max-concurrency\", \"8\"]", "\"load\": [8]", "baseline: \"load\"[0] must be a non-empty string");
    refused("\"window_s\": 4", "\"windows\": 4", "unknown key \"windows\"");
    refused("\"faults\": [", "\"fault\": [", "incident: unknown key \"fault\"");
    refused("{\"text\": \"more slots\", ", "{", "remedy: \"text\" is required");
    /* File text in a message is shown on one line: a key or a cause with a newline. */
    refused("\"window_s\": 4", "\"win\\ndow\": 4", "unknown key \"win?dow\"");
    refused("\"expect\": \"queueing\"", "\"expect\": \"slow\\nqueue\"", "\"slow?queue\" is not a cause");
    const char *bad[] = {"", "[]", "{", "null", "{\"title\": 1}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        scenario_t s;
        char err[256] = "";
        CHECK_EQ_INT(scenario_parse(bad[i], strlen(bad[i]), "x", &s, err, sizeof err), -1);
        CHECK(err[0] != '\0' && !strchr(err, '\n'));
    }
}

/* Every file in lab/scenarios parses; together they cover the causes listed here. */
/* One baseline serves the scenarios that would run it alike, and only those. */
/* A proxy in front (nginx directives, inherited like the rest) and replicas behind it; a remedy
 * that is the baseline's setup again. */
static void test_proxy_replicas_and_remedy_as_baseline(void) {
    scenario_t s;
    char err[256];
    CHECK_EQ_INT(scenario_parse(MINIMAL, strlen(MINIMAL), "q", &s, err, sizeof err), 0);
    CHECK(!s.baseline.proxied && !s.remedy.proxied && s.replicas == 1);
    CHECK(!scenario_remedy_is_baseline(&s)); /* its remedy changes the load */
    scenario_free(&s);
    const char *doc =
        "{\"title\": \"t\", \"seed\": \"003\", \"section\": \"s\", \"quote\": \"q\", \"model\": \"m\", \"replicas\": 2,"
        " \"baseline\": {\"load\": [\"--max-concurrency\", \"8\"], \"proxy\": []},"
        " \"incident\": {\"faults\": [\"step_delay:ms=25\"]},"
        " \"remedy\": {\"text\": \"balance on load\", \"faults\": [\"step_delay:ms=25\"], \"proxy\": [\"least_conn\"]},"
        " \"symptom\": {\"measure\": \"queue_share_of_ttft\", \"direction\": \"up\", \"where\": \"queue\"},"
        " \"expect\": \"queueing\"}";
    CHECK_EQ_INT(scenario_parse(doc, strlen(doc), "r", &s, err, sizeof err), 0);
    CHECK(s.replicas == 2 && s.baseline.proxied && s.baseline.proxy.n == 0);
    CHECK(s.incident.proxied && s.incident.proxy.n == 0); /* the baseline's */
    CHECK(s.remedy.proxied && s.remedy.proxy.n == 1 && !strcmp(s.remedy.proxy.v[0], "least_conn"));
    CHECK(!scenario_remedy_is_baseline(&s));
    scenario_free(&s);
    /* a remedy that undoes the incident's change is the baseline again; another proxy is not */
    const char *again = "{\"title\": \"t\", \"seed\": \"004\", \"section\": \"s\", \"quote\": \"q\", \"model\": \"m\","
                        " \"baseline\": {\"load\": [\"-n\"], \"proxy\": []}, \"incident\": {\"proxy\": [\"limit_req zone=g\"]},"
                        " \"remedy\": {\"text\": \"lift it\", \"proxy\": []}, \"expect\": \"upstream_bottleneck\","
                        " \"symptom\": {\"measure\": \"inflight_vs_expected\", \"direction\": \"down\", \"where\": \"w\"}}";
    CHECK_EQ_INT(scenario_parse(again, strlen(again), "g", &s, err, sizeof err), 0);
    CHECK(scenario_remedy_is_baseline(&s));
    scenario_free(&s);
    /* a remedy that swaps the incident's checkpoint back to the scenario's own is the baseline again;
     * a third checkpoint is not */
    const char *swap = "{\"title\": \"t\", \"seed\": \"000\", \"section\": \"s\", \"quote\": \"q\", \"model\": \"m-awq\","
                       " \"baseline\": {\"load\": [\"-n\"]}, \"incident\": {\"model\": \"m\"},"
                       " \"remedy\": {\"text\": \"quantize\", \"model\": \"m-awq\"}, \"expect\": \"decode_bound\","
                       " \"symptom\": {\"measure\": \"itl_p50\", \"direction\": \"up\", \"where\": \"w\"}}";
    CHECK_EQ_INT(scenario_parse(swap, strlen(swap), "u", &s, err, sizeof err), 0);
    CHECK(scenario_remedy_is_baseline(&s));
    scenario_free(&s);
    char third[1024];
    snprintf(third, sizeof third, "%s", swap);
    memcpy(strstr(third, "\"model\": \"m-awq\"}") + 10, "m-gq", 4);
    CHECK_EQ_INT(scenario_parse(third, strlen(third), "u", &s, err, sizeof err), 0);
    CHECK(!scenario_remedy_is_baseline(&s));
    scenario_free(&s);
    refused("\"window_s\": 4", "\"window_s\": 4, \"replicas\": 2", "\"replicas\": 2 servers need a \"proxy\"");
    refused("\"window_s\": 4", "\"window_s\": 4, \"replicas\": 9", "\"replicas\" must be a whole number");
    refused("\"load\": [\"--max-concurrency\", \"2\"]", "\"proxy\": [\"least_conn; return 200\"]",
            "remedy: \"proxy\"[0]: one nginx directive");
    refused("\"load\": [\"--max-concurrency\", \"2\"]", "\"proxy\": [\"location / { }\"]",
            "remedy: \"proxy\"[0]: one nginx directive");
    refused("\"load\": [\"--max-concurrency\", \"2\"]", "\"proxy\": \"least_conn\"",
            "remedy: \"proxy\" must be an array of strings");
}

/* A setup serving another checkpoint under the scenario's model name, and how it is made. */
static void test_model_swap_and_make_models(void) {
    const char *doc =
        "{\"title\": \"t\", \"seed\": \"000\", \"section\": \"s\", \"quote\": \"q\", \"model\": \"models/a\","
        " \"make_models\": {\"models/a-q\": [\"tools/quantize-awq\", \"models/a\", \"--out\", \"models/a-q\"]},"
        " \"baseline\": {\"load\": [\"--max-concurrency\", \"2\"]}, \"incident\": {\"model\": \"models/a-q\"},"
        " \"remedy\": {\"text\": \"back off\"}, \"expect\": \"output_regression\","
        " \"symptom\": {\"measure\": \"golden_mismatches\", \"direction\": \"up\", \"where\": \"answers\"}}";
    scenario_t s;
    char err[256];
    CHECK_EQ_INT(scenario_parse(doc, strlen(doc), "q", &s, err, sizeof err), 0);
    CHECK(s.baseline.model == NULL && s.incident.model && !strcmp(s.incident.model, "models/a-q"));
    CHECK(s.remedy.model == NULL);            /* the remedy inherits from the baseline */
    CHECK(scenario_remedy_is_baseline(&s));   /* the checkpoint again */
    CHECK(s.n_make == 1 && !strcmp(s.make_dir[0], "models/a-q") && s.make_cmd[0].n == 4 &&
          !strcmp(s.make_cmd[0].v[0], "tools/quantize-awq"));
    scenario_free(&s);
    refused("\"load\": [\"--max-concurrency\", \"8\"]}", "\"load\": [\"--max-concurrency\", \"8\"], \"model\": \"m2\"}",
            "baseline: \"model\" belongs to the incident or the remedy");
    refused("\"window_s\": 4", "\"window_s\": 4, \"make_models\": {\"m\": [\"/bin/sh\", \"-c\", \"x\"]}",
            "make_models: \"m\": the command must start with one of the repository's tools");
    refused("\"window_s\": 4", "\"window_s\": 4, \"make_models\": {\"m\": [\"tools/../x\"]}",
            "the command must start with one of the repository's tools");
    refused("\"window_s\": 4", "\"window_s\": 4, \"make_models\": {\"m\": \"tools/x\"}",
            "make_models: \"m\" must be an array of strings");
    refused("\"window_s\": 4", "\"window_s\": 4, \"make_models\": [\"tools/x\"]", "\"make_models\" must be an object");
}

/* Release gates: bench compare's limits, and the size of the run they judge. */
static void test_gates(void) {
    scenario_t s;
    char err[256], doc[4096];
    const char *at = strstr(MINIMAL, "\"window_s\": 4");
    SL_ASSERT(at);
    snprintf(doc, sizeof doc, "%.*s\"window_s\": 4, \"gates\": [\"ttft_median=+50%%\", \"throughput=-20%%\"]}",
             (int)(at - MINIMAL), MINIMAL);
    CHECK_EQ_INT(scenario_parse(doc, strlen(doc), "g", &s, err, sizeof err), 0);
    CHECK(s.gates.n == 2 && !strcmp(s.gates.v[1], "throughput=-20%") && s.gate_prompts == 50);
    scenario_free(&s);
    refused("\"window_s\": 4", "\"window_s\": 4, \"gate_prompts\": 10", "\"gate_prompts\" needs \"gates\"");
    refused("\"window_s\": 4", "\"window_s\": 4, \"gates\": [\"x=+1%\"], \"gate_prompts\": 0",
            "\"gate_prompts\" must be a whole number");
    refused("\"window_s\": 4", "\"window_s\": 4, \"gates\": \"ttft_median=+50%\"", "\"gates\" must be an array");
}

static void test_same_baseline_is_every_field_of_the_baseline_phase(void) {
    scenario_t a, b;
    char err[256], doc[4096];
    CHECK_EQ_INT(scenario_parse(MINIMAL, strlen(MINIMAL), "a", &a, err, sizeof err), 0);
    /* another incident and remedy: the same baseline */
    const char *other = "{\"title\": \"u\", \"seed\": \"003\", \"section\": \"z\", \"quote\": \"w\","
                        " \"model\": \"models/tiny\", \"baseline\": {\"server\": [\"--max-num-seqs\", \"8\"],"
                        " \"load\": [\"--max-concurrency\", \"8\"]}, \"incident\": {\"faults\": [\"step_delay:ms=9\"]},"
                        " \"remedy\": {\"text\": \"restore the clocks\"}, \"expect\": \"decode_bound\", \"symptom\": {\"measure\": \"itl_p50\", \"direction\": \"up\","
                        " \"where\": \"ITL\"}, \"window_s\": 4}";
    CHECK_EQ_INT(scenario_parse(other, strlen(other), "b", &b, err, sizeof err), 0);
    CHECK(scenario_same_baseline(&a, &b) && scenario_same_baseline(&b, &a));
    scenario_free(&b);
    /* each field of the baseline phase makes it another one */
    const char *edits[][2] = {
        {"\"model\": \"models/tiny\"", "\"model\": \"models/small\""},
        {"[\"--max-num-seqs\", \"8\"], \"load\"", "[\"--max-num-seqs\", \"9\"], \"load\""},
        {"\"load\": [\"--max-concurrency\", \"8\"]}", "\"load\": [\"--max-concurrency\", \"8\", \"--seed\", \"1\"]}"},
        {"\"window_s\": 4", "\"window_s\": 5"},
        {"\"window_s\": 4", "\"window_s\": 4, \"settle_s\": 1"},
        {"\"window_s\": 4", "\"window_s\": 4, \"expected_inflight\": 3"},
        {"\"window_s\": 4", "\"window_s\": 4, \"golden\": \"g.json\""},
        {"\"load\": [\"--max-concurrency\", \"8\"]}", "\"load\": [\"--max-concurrency\", \"8\"], \"proxy\": []}"},
        {"\"window_s\": 4", "\"window_s\": 4, \"golden\": \"g.json\", \"baseline\": {\"server\": [\"--max-num-seqs\", "
         "\"8\"], \"load\": [\"--max-concurrency\", \"8\"], \"golden_request\": {\"seed\": 1}}"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        const char *at = strstr(MINIMAL, edits[i][0]);
        SL_ASSERT(at);
        snprintf(doc, sizeof doc, "%.*s%s%s", (int)(at - MINIMAL), MINIMAL, edits[i][1], at + strlen(edits[i][0]));
        CHECK_EQ_INT(scenario_parse(doc, strlen(doc), "b", &b, err, sizeof err), 0);
        if (scenario_same_baseline(&a, &b)) fprintf(stderr, "  edit %zu: still the same baseline\n", i);
        CHECK(!scenario_same_baseline(&a, &b));
        scenario_free(&b);
    }
    scenario_free(&a);
}

static int count(const char *text, const char *what) {
    int n = 0;
    for (const char *p = strstr(text, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

/* --prometheus loads the committed alert rules with windows of seconds: only ranges and `for:` change. */
static void test_alert_rules_shortened_for_a_short_run(void) {
    char err[256] = "";
    const char *text = "expr: rate(x[5m]) > 0 and avg_over_time((y > bool 0)[5m:]) > 0.5 offset 1h\n"
                       "for: 10m\n  description: for: the rest, [0-9] and [a], an offset 1h, the offset 1hx\n";
    char *s = scenario_shorten_rules(text, "10s", "3s", NULL, err, sizeof err);
    CHECK(s && !strcmp(s, "expr: rate(x[10s]) > 0 and avg_over_time((y > bool 0)[10s:]) > 0.5 offset 1h\n"
                          "for: 3s\n  description: for: the rest, [0-9] and [a], an offset 1h, the offset 1hx\n"));
    free(s);
    /* "an hour ago" made the baseline phase's time: every `offset D` word, nothing else */
    s = scenario_shorten_rules(text, "10s", "3s", "42s", err, sizeof err);
    CHECK(s && !strcmp(s, "expr: rate(x[10s]) > 0 and avg_over_time((y > bool 0)[10s:]) > 0.5 offset 42s\n"
                          "for: 3s\n  description: for: the rest, [0-9] and [a], an offset 42s, the offset 1hx\n"));
    free(s);
    CHECK(scenario_shorten_rules("rate(x[1h])", "10s", "3s", NULL, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "[1h]");

    size_t len;
    sl_err_t rerr;
    char *rules = sl_read_file("tools/prometheus/alerts.yml", 1 << 20, &len, &rerr);
    CHECK(rules != NULL);
    if (!rules) return;
    char *short_rules = scenario_shorten_rules(rules, "10s", "3s", "30s", err, sizeof err);
    CHECK(short_rules != NULL);
    if (short_rules) {
        CHECK(count(short_rules, "[5m") == 0 && count(short_rules, "[10s]") == count(rules, "[5m]") &&
              count(short_rules, "[10s:]") == count(rules, "[5m:]"));
        CHECK(count(short_rules, "for: 3s") == count(rules, "for: ") && count(rules, "for: ") > 0);
        CHECK(count(short_rules, "offset 30s") == count(rules, "offset 1h") && count(rules, "offset 1h") > 0 &&
              count(short_rules, "offset 1h") == 0);
    }
    free(rules), free(short_rules);
}

static void test_committed_scenarios_parse(void) {
    DIR *d = opendir("lab/scenarios");
    CHECK(d != NULL);
    if (!d) return;
    int n = 0;
    bool healthy = false;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || strcmp(e->d_name + len - 5, ".json")) continue;
        char path[512], name[256], err[512];
        snprintf(path, sizeof path, "lab/scenarios/%s", e->d_name);
        snprintf(name, sizeof name, "%.*s", (int)(len - 5), e->d_name);
        size_t size;
        sl_err_t rerr;
        char *text = sl_read_file(path, 1 << 20, &size, &rerr);
        CHECK(text != NULL);
        scenario_t s;
        int rc = text ? scenario_parse(text, size, name, &s, err, sizeof err) : -1;
        if (rc) fprintf(stderr, "  %s: %s\n", path, err);
        CHECK_EQ_INT(rc, 0);
        if (!rc) {
            healthy |= !strcmp(s.expect, "healthy");
            CHECK(!strcmp(s.expect, "healthy") || (s.remedy_text && s.measure));
            scenario_free(&s);
        }
        free(text);
        n++;
    }
    closedir(d);
    printf("  %d scenario files\n", n);
    CHECK(n >= 8);
    CHECK(healthy);
}

int main(void) {
    test_seed();
    RUN(test_incident_and_remedy_inherit_what_they_leave_out);
    RUN(test_refusals_name_the_field);
    RUN(test_golden_watch_and_warmup);
    RUN(test_committed_scenarios_parse);
    RUN(test_proxy_replicas_and_remedy_as_baseline);
    RUN(test_model_swap_and_make_models);
    RUN(test_gates);
    RUN(test_same_baseline_is_every_field_of_the_baseline_phase);
    RUN(test_alert_rules_shortened_for_a_short_run);
    return test_summary();
}
