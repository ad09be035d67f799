/* fuzz_config.c - libFuzzer target for config_parse (config.json text).
 *
 * The input is copied into a NUL-terminated buffer, as config_load reads it.
 * A parse must either succeed with sizes that pass the checks config.h
 * promises, or fail with a one-line message naming the file. Seeds: corpus/config/.
 */
#include <stdlib.h>
#include <string.h>

#include "servelab/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    model_config_t cfg;
    sl_err_t err;
    int rc = config_parse(text, "fuzz/config.json", &cfg, &err);
    free(text);
    if (rc != 0) {
        if (strchr(err.msg, '\n') || strncmp(err.msg, "fuzz/config.json: ", 18) != 0) abort();
        return 0;
    }
    if (cfg.vocab_size <= 0 || cfg.hidden_size <= 0 || cfg.n_layers <= 0 || cfg.head_dim <= 0 ||
        cfg.n_kv_heads <= 0 || cfg.n_heads % cfg.n_kv_heads != 0 ||
        cfg.n_eos_token_ids > CONFIG_MAX_EOS || cfg.bos_token_id >= cfg.vocab_size)
        abort();
    return 0;
}
