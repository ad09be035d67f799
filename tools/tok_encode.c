/* tok_encode.c - servelab's tokenizer as a JSON filter, for cross-checks by scripts.
 *
 *   tok_encode MODEL_DIR < request.json
 * request:  {"encode": ["text", ...], "decode": [[id, ...], ...]}
 * answer:   {"encode": [[id, ...] or null if rejected, ...],
 *            "decode": ["text", ...], "decode_skip": ["text", ...]}
 * Encoding adds special tokens; decode_skip uses skip_special_tokens.
 * tools/check_tokenizer_hf.py drives it against transformers.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "servelab/core.h"
#include "servelab/tokenizer.h"

static cJSON *encode_all(const tokenizer_t *tok, const cJSON *texts) {
    cJSON *out = cJSON_CreateArray();
    const cJSON *t;
    cJSON_ArrayForEach(t, texts) {
        int32_t *ids = NULL;
        sl_err_t err;
        int n = cJSON_IsString(t) ? tok_encode(tok, t->valuestring, strlen(t->valuestring), true,
                                               &ids, &err)
                                  : -1;
        cJSON *row = n < 0 ? cJSON_CreateNull() : cJSON_CreateArray();
        for (int i = 0; i < n; i++) cJSON_AddItemToArray(row, cJSON_CreateNumber(ids[i]));
        cJSON_AddItemToArray(out, row);
        free(ids);
    }
    return out;
}

static void decode_all(const tokenizer_t *tok, const cJSON *lists, cJSON *plain, cJSON *skip) {
    const cJSON *l;
    cJSON_ArrayForEach(l, lists) {
        int n = cJSON_GetArraySize(l);
        int32_t *ids = sl_malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
        for (int i = 0; i < n; i++) ids[i] = (int32_t)cJSON_GetArrayItem(l, i)->valuedouble;
        char *a = tok_decode(tok, ids, (size_t)n, false, NULL);
        char *b = tok_decode(tok, ids, (size_t)n, true, NULL);
        cJSON_AddItemToArray(plain, cJSON_CreateString(a));
        cJSON_AddItemToArray(skip, cJSON_CreateString(b));
        free(a);
        free(b);
        free(ids);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s MODEL_DIR < request.json\n", argv[0]);
        return 2;
    }
    sl_log_to_stderr(); /* stdout carries the JSON answer */
    sl_err_t err;
    tokenizer_t *tok = tok_load(argv[1], &err);
    if (!tok) sl_die("%s", err.msg);
    char *in = sl_read_file("/dev/stdin", 256u << 20, NULL, &err);
    if (!in) sl_die("%s", err.msg);
    cJSON *req = cJSON_Parse(in);
    free(in);
    if (!cJSON_IsObject(req)) sl_die("stdin: expected a JSON object");
    cJSON *ans = cJSON_CreateObject();
    cJSON_AddItemToObject(ans, "encode",
                          encode_all(tok, cJSON_GetObjectItemCaseSensitive(req, "encode")));
    cJSON *plain = cJSON_AddArrayToObject(ans, "decode");
    cJSON *skip = cJSON_AddArrayToObject(ans, "decode_skip");
    decode_all(tok, cJSON_GetObjectItemCaseSensitive(req, "decode"), plain, skip);
    char *s = cJSON_PrintUnformatted(ans);
    puts(s);
    free(s);
    cJSON_Delete(ans);
    cJSON_Delete(req);
    tok_free(tok);
    return 0;
}
