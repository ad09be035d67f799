/* fuzz_lab_faults.c - libFuzzer target for the lab's fault parsers (src/lab/faults.c):
 * `--fault NAME[:key=value,...]` and the admin API's JSON body.
 *
 * The first byte picks the parser (odd: the JSON body, even: the spec text); the
 * rest is the input. Either parse succeeds with a spec that passes the table's
 * checks and formats, or fails with a one-line message. Seeds: corpus/lab_faults/ (their
 * first byte is the digit '0' or '1', so they stay text).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "servelab/lab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    bool json = data[0] & 1;
    char *text = malloc(size);
    if (!text) return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    fault_spec_t s;
    char err[1024] = "";
    int rc = json ? fault_spec_from_json(text, size - 1, &s, err, sizeof err)
                  : fault_parse_spec(text, &s, err, sizeof err);
    free(text);
    if (rc != 0) {
        if (!err[0] || strchr(err, '\n')) abort();
        return 0;
    }
    if ((unsigned)s.id >= FAULT_COUNT || fault_spec_check(&s, err, sizeof err) != 0) abort();
    char buf[512];
    fault_params_format(&s, buf, sizeof buf);
    /* What the format prints parses back to the same parameters. */
    char again[600];
    snprintf(again, sizeof again, "%s%s%s", fault_name(s.id), buf[0] ? ":" : "", buf);
    fault_spec_t t;
    if (fault_parse_spec(again, &t, err, sizeof err) != 0 || memcmp(&t.p, &s.p, sizeof s.p) != 0) abort();
    return 0;
}
