/* fuzz_metrics_accept.c - libFuzzer target for the Accept header of GET /metrics.
 *
 * metrics_accept_openmetrics reads a client's header: it must never crash, and
 * may only choose OpenMetrics when the header names its media type.
 * Seeds: corpus/metrics_accept/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "servelab/metrics.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *header = malloc(size + 1);
    if (!header) return 0;
    memcpy(header, data, size);
    header[size] = '\0';
    bool om = metrics_accept_openmetrics(header);
    if (om && !strstr(header, "application/openmetrics-text")) abort();
    free(header);
    return 0;
}
