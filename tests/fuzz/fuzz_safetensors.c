/* fuzz_safetensors.c - libFuzzer target for st_parse, the parser of checkpoint bytes.
 *
 * Any input must either parse into tensors that lie inside the input, or fail
 * with a one-line message; anything else (a crash, a sanitizer report, a leak,
 * a tensor pointing outside the buffer) is a finding. Seeds: corpus/safetensors/.
 */
#include <stdlib.h>
#include <string.h>

#include "servelab/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_header_t h;
    sl_err_t err;
    if (st_parse(data, size, "fuzz.safetensors", &h, &err) != 0) {
        if (strchr(err.msg, '\n') || strncmp(err.msg, "fuzz.safetensors: ", 18) != 0) abort();
        return 0;
    }
    uint64_t total = 0;
    for (int i = 0; i < h.n_tensors; i++) {
        const st_tensor_t *t = &h.tensors[i];
        const uint8_t *p = t->data;
        if (p < data + 8 || p + t->n_bytes > data + size) abort();
        if ((uint64_t)t->n_elems * dtype_size(t->dtype) != t->n_bytes) abort();
        if (t->n_bytes) total += p[0] + p[t->n_bytes - 1]; /* ASan checks the ends */
    }
    (void)total;
    st_header_free(&h);
    return 0;
}
