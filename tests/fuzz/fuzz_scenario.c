/* fuzz_scenario.c - libFuzzer target for lab scenario files (src/lab/scenario.c).
 *
 * The input is a scenario document. Either it parses into a scenario whose
 * every field the runner reads is set and checked (a cause the diagnoser
 * names, a measure it has, faults that parse), or it is refused with one
 * line. Seeds: corpus/scenario/ (copies of lab/scenarios/ and near misses).
 * The same bytes as an alert rule file for `scenario run --prometheus`
 * (scenario_shorten_rules): shortened or refused with one line.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "servelab/diagnose.h"
#include "servelab/scenario.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void rules(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1), err[256] = "";
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = 0;
    char *short_rules = scenario_shorten_rules(text, "10s", "3s", size % 2 ? "7s" : NULL, err, sizeof err);
    if (!short_rules && (!err[0] || strchr(err, '\n'))) abort();
    free(short_rules);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rules(data, size);
    scenario_t s;
    char err[512] = "";
    if (scenario_parse((const char *)data, size, "fuzz", &s, err, sizeof err) != 0) {
        if (!err[0] || strchr(err, '\n')) abort();
        return 0;
    }
    if (!s.name || !s.title || !s.model || !s.expect || !diag_is_cause(s.expect)) abort();
    if (s.measure && diag_measure_index(s.measure) < 0) abort();
    if (!(s.window_s >= 1 && s.window_s <= 600) || !(s.settle_s >= 0 && s.settle_s <= 600)) abort();
    if (!s.remedy_text && strcmp(s.expect, "healthy")) abort();
    if (s.baseline.load.n == 0) abort();
    scenario_free(&s);
    return 0;
}
