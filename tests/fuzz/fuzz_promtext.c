/* fuzz_promtext.c - libFuzzer target for prom_parse (src/lab/promtext.c), the
 * Prometheus text format that `servelab diagnose` reads from any server.
 *
 * A parse either fails with a one-line message naming the line, or gives
 * samples whose names and label keys follow the grammar; two snapshots of
 * the same text then go through the measures and the rules (histograms,
 * deltas, quantiles) without a crash. Seeds: corpus/promtext/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "servelab/diagnose.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    prom_snapshot_t s[2] = {{0}, {0}};
    char err[256] = "";
    int rc = prom_parse((const char *)data, size, &s[0], err, sizeof err);
    if (rc != 0) {
        if (strncmp(err, "line ", 5) || strchr(err, '\n')) abort();
    } else {
        for (int i = 0; i < s[0].n; i++) {
            const prom_sample_t *x = &s[0].samples[i];
            if (!x->name[0] || strchr(x->name, '{') || strchr(x->name, ' ')) abort();
            for (int k = 0; k < x->n_labels; k++)
                if (!x->labels[k].key[0] || strchr(x->labels[k].key, '=')) abort();
        }
        prom_parse((const char *)data, size, &s[1], err, sizeof err);
        s[1].t = 1;
        diag_measures_t m;
        diag_measure(s, 2, 4, NULL, &m);
        cJSON_Delete(diag_report(&m, &m));
    }
    prom_snapshot_free(&s[0]);
    prom_snapshot_free(&s[1]);
    return 0;
}
