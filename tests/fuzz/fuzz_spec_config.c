/* fuzz_spec_config.c - libFuzzer target for --speculative-config's JSON (src/engine/spec_decode.c).
 *
 * The input is the flag's value. Either it parses into an ngram config within
 * the limits the engine relies on (1 <= K <= SPEC_MAX_TOKENS, 1 <= min <= max),
 * or it is refused with one line (no newline, whatever the input holds) and the config is off. Seeds: corpus/spec_config/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "servelab/spec_decode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    spec_config_t c;
    sl_err_t err;
    err.msg[0] = '\0';
    int rc = spec_config_parse(&c, text, &err);
    free(text);
    if (rc != 0) {
        if (c.on || !err.msg[0] || strchr(err.msg, '\n')) abort();
        return 0;
    }
    if (!c.on || c.num_speculative_tokens < 1 || c.num_speculative_tokens > SPEC_MAX_TOKENS ||
        c.prompt_lookup_min < 1 || c.prompt_lookup_min > c.prompt_lookup_max)
        abort();
    return 0;
}
