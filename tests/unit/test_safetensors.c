/* test_safetensors.c - safetensors parsing, validation and checkpoint directories.
 *
 * Images are built in memory (8-byte length + header JSON from cJSON + data) in
 * buffers of exactly their size, so an out-of-bounds read shows under ASan. Each
 * rejection test checks that the one-line error names the file, the tensor and
 * what is wrong. Directory tests write shards and an index under /tmp.
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <dirent.h>
#include <unistd.h>

#include "servelab/safetensors.h"
#include "test.h"

#define FNAME "x.safetensors"

typedef struct {
    uint8_t *buf;
    size_t len;
} img_t;

/* 8-byte little-endian length, `n` header bytes, `data_len` bytes of pattern. */
static img_t img_raw(const char *header, size_t n, size_t data_len) {
    img_t m = {sl_malloc(8 + n + data_len), 8 + n + data_len};
    for (int i = 0; i < 8; i++) m.buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(m.buf + 8, header, n);
    for (size_t i = 0; i < data_len; i++) m.buf[8 + n + i] = (uint8_t)(i * 7 + 1);
    return m;
}

/* Prints `hdr` with cJSON_Print, deletes it and builds the image. */
static img_t img_build(cJSON *hdr, size_t data_len) {
    char *json = cJSON_Print(hdr);
    img_t m = img_raw(json, strlen(json), data_len);
    free(json);
    cJSON_Delete(hdr);
    return m;
}

/* Adds {"dtype", "shape" (JSON text), "data_offsets": [b, e]} as `name`. */
static void add_tensor(cJSON *hdr, const char *name, const char *dtype, const char *shape,
                       double b, double e) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "dtype", dtype);
    cJSON_AddItemToObject(t, "shape", cJSON_Parse(shape));
    cJSON *offs = cJSON_CreateArray();
    cJSON_AddItemToArray(offs, cJSON_CreateNumber(b));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber(e));
    cJSON_AddItemToObject(t, "data_offsets", offs);
    cJSON_AddItemToObject(hdr, name, t);
}

/* Parses `m` (then frees it) and expects failure with a one-line message
 * containing FNAME and each non-NULL word. */
static void expect_reject(img_t m, const char *w1, const char *w2, const char *w3) {
    st_header_t h;
    sl_err_t err = {{0}};
    int rc = st_parse(m.buf, m.len, FNAME, &h, &err);
    CHECK_EQ_INT(rc, -1);
    CHECK(h.tensors == NULL && h.n_tensors == 0);
    CHECK(strchr(err.msg, '\n') == NULL);
    CHECK_STR_CONTAINS(err.msg, FNAME ": ");
    if (w1) CHECK_STR_CONTAINS(err.msg, w1);
    if (w2) CHECK_STR_CONTAINS(err.msg, w2);
    if (w3) CHECK_STR_CONTAINS(err.msg, w3);
    free(m.buf);
}

static void test_valid_file_with_each_common_dtype_is_parsed(void) {
    cJSON *hdr = cJSON_CreateObject();
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "format", "pt");
    cJSON_AddItemToObject(hdr, "__metadata__", meta);
    add_tensor(hdr, "f32", "F32", "[2, 3]", 0, 24);
    add_tensor(hdr, "f16", "F16", "[4]", 24, 32);
    add_tensor(hdr, "bf16", "BF16", "[2, 2]", 32, 40);
    add_tensor(hdr, "i32", "I32", "[3]", 40, 52);
    add_tensor(hdr, "i8", "I8", "[5, 1]", 52, 57);
    img_t m = img_build(hdr, 57);
    st_header_t h;
    sl_err_t err;
    CHECK_EQ_INT(st_parse(m.buf, m.len, FNAME, &h, &err), 0);
    CHECK_EQ_INT(h.n_tensors, 5);
    const uint8_t *data = m.buf + m.len - 57;
    const struct {
        const char *name;
        sl_dtype_t dt;
        int n_dims;
        int64_t d0, n_elems;
        size_t begin, n_bytes;
    } want[5] = {{"f32", DTYPE_F32, 2, 2, 6, 0, 24},   {"f16", DTYPE_F16, 1, 4, 4, 24, 8},
                 {"bf16", DTYPE_BF16, 2, 2, 4, 32, 8}, {"i32", DTYPE_I32, 1, 3, 3, 40, 12},
                 {"i8", DTYPE_I8, 2, 5, 5, 52, 5}};
    for (int i = 0; i < 5 && i < h.n_tensors; i++) {
        const st_tensor_t *t = &h.tensors[i];
        CHECK(!strcmp(t->name, want[i].name));
        CHECK_EQ_INT(t->dtype, want[i].dt);
        CHECK_EQ_INT(t->n_dims, want[i].n_dims);
        CHECK_EQ_INT(t->shape[0], want[i].d0);
        CHECK_EQ_INT(t->n_elems, want[i].n_elems);
        CHECK_EQ_INT(t->n_bytes, want[i].n_bytes);
        CHECK(t->data == data + want[i].begin);
    }
    CHECK_EQ_INT(h.tensors[0].shape[1], 3);
    st_header_free(&h);
    free(m.buf);
}

static void test_other_dtypes_and_padded_header_are_accepted(void) {
    /* Writers pad the header with spaces so the data section is aligned. */
    const char *hdr = "{\"u8\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                      "\"i64\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[2,10]},"
                      "\"f64\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[10,18]},"
                      "\"b\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[18,21]}}     ";
    img_t m = img_raw(hdr, strlen(hdr), 21);
    st_header_t h;
    sl_err_t err;
    CHECK_EQ_INT(st_parse(m.buf, m.len, FNAME, &h, &err), 0);
    CHECK_EQ_INT(h.n_tensors, 4);
    CHECK_EQ_INT(h.tensors[2].n_dims, 0);
    CHECK_EQ_INT(h.tensors[2].n_elems, 1);
    CHECK_EQ_INT(h.tensors[3].dtype, DTYPE_BOOL);
    st_header_free(&h);
    free(m.buf);
}

static void test_zero_size_tensors_are_accepted(void) {
    cJSON *hdr = cJSON_CreateObject();
    add_tensor(hdr, "a", "F32", "[2]", 0, 8);
    add_tensor(hdr, "empty", "F32", "[0, 4]", 4, 4); /* inside "a": covers nothing */
    add_tensor(hdr, "empty_end", "BF16", "[3, 0]", 8, 8);
    img_t m = img_build(hdr, 8);
    st_header_t h;
    sl_err_t err;
    CHECK_EQ_INT(st_parse(m.buf, m.len, FNAME, &h, &err), 0);
    CHECK_EQ_INT(h.n_tensors, 3);
    CHECK_EQ_INT(h.tensors[1].n_elems, 0);
    CHECK_EQ_INT(h.tensors[1].n_bytes, 0);
    st_header_free(&h);
    free(m.buf);
    /* A header with no tensor and no data is a valid (empty) file. */
    m = img_raw("{}", 2, 0);
    CHECK_EQ_INT(st_parse(m.buf, m.len, FNAME, &h, &err), 0);
    CHECK_EQ_INT(h.n_tensors, 0);
    st_header_free(&h);
    free(m.buf);
}

static void test_file_shorter_than_length_prefix_is_rejected(void) {
    img_t m = {sl_malloc(5), 5};
    memset(m.buf, 1, 5);
    expect_reject(m, "header: ", "5 bytes", "too short");
    st_header_t h;
    sl_err_t err;
    CHECK_EQ_INT(st_parse((const uint8_t *)"", 0, FNAME, &h, &err), -1);
    CHECK_STR_CONTAINS(err.msg, "0 bytes, too short");
}

static void test_zero_header_length_is_rejected(void) {
    expect_reject(img_raw("", 0, 16), "header: ", "header length is 0", NULL);
}

static void test_huge_header_length_is_rejected(void) {
    img_t m = img_raw("{}", 2, 0);
    uint64_t n = ST_MAX_HEADER_BYTES + 1ull;
    for (int i = 0; i < 8; i++) m.buf[i] = (uint8_t)(n >> (8 * i));
    expect_reject(m, "header: ", "100000001", "over the limit");
    m = img_raw("{}", 2, 0);
    memset(m.buf, 0xff, 8);
    expect_reject(m, "header: ", "18446744073709551615", "over the limit");
}

static void test_header_length_past_end_of_file_is_rejected(void) {
    img_t m = img_raw("{}", 2, 0);
    m.buf[0] = 200;
    expect_reject(m, "header: ", "header length 200", "past the end of the file (10 bytes)");
}

static void test_header_that_is_not_json_is_rejected(void) {
    const char *bad = "{\"a\": {\"dtype\": ";
    expect_reject(img_raw(bad, strlen(bad), 0), "header: ", "invalid JSON", NULL);
    expect_reject(img_raw("{} x", 4, 0), "header: ", "unexpected bytes after the JSON", NULL);
    expect_reject(img_raw("{}\0 ", 4, 0), "header: ", "unexpected bytes after the JSON", NULL);
    expect_reject(img_raw("{\"\xc3\x28\": 1}", 9, 0), "header: ", "not valid UTF-8", "byte 2");
    expect_reject(img_raw("{\"\xed\xa0\x80\": 1}", 10, 0), "header: ", "not valid UTF-8",
                  NULL);
}

static void test_header_that_is_not_an_object_is_rejected(void) {
    expect_reject(img_raw("[1, 2]", 6, 0), "header: ", "expected a JSON object", "array");
    expect_reject(img_raw("\"s\"", 3, 0), "header: ", "expected a JSON object", "string");
}

static void test_unsupported_dtype_is_rejected(void) {
    cJSON *hdr = cJSON_CreateObject();
    add_tensor(hdr, "w", "F32", "[2]", 0, 8);
    add_tensor(hdr, "model.embed_tokens.weight", "F8_E4M3", "[8]", 8, 16);
    expect_reject(img_build(hdr, 16), "tensor model.embed_tokens.weight: ",
                  "unsupported dtype \"F8_E4M3\"", "BF16");
}

static void test_shape_times_dtype_must_equal_byte_length(void) {
    cJSON *hdr = cJSON_CreateObject();
    add_tensor(hdr, "lm_head.weight", "BF16", "[4, 3]", 0, 20);
    expect_reject(img_build(hdr, 20), "tensor lm_head.weight: ", "is 24 bytes",
                  "[0, 20] span 20 bytes");
}

static void test_begin_after_end_is_rejected(void) {
    cJSON *hdr = cJSON_CreateObject();
    add_tensor(hdr, "w", "U8", "[0]", 8, 4);
    expect_reject(img_build(hdr, 8), "tensor w: ", "[8, 4]", "begin is after end");
}

static void test_end_past_data_section_is_rejected(void) {
    cJSON *hdr = cJSON_CreateObject();
    add_tensor(hdr, "w", "F32", "[4]", 0, 16);
    expect_reject(img_build(hdr, 12), "tensor w: ", "[0, 16]",
                  "past the end of the data section (12 bytes)");
}

static void test_overlapping_offsets_are_rejected(void) {
    cJSON *hdr = cJSON_CreateObject();
    add_tensor(hdr, "a", "F32", "[4]", 0, 16);
    add_tensor(hdr, "b", "F32", "[4]", 12, 28);
    expect_reject(img_build(hdr, 28), "tensor b: ", "[12, 28] overlap", "tensor a [0, 16]");
    hdr = cJSON_CreateObject();
    add_tensor(hdr, "same1", "F16", "[2]", 0, 4);
    add_tensor(hdr, "same2", "F16", "[2]", 0, 4);
    expect_reject(img_build(hdr, 4), "tensor same", "overlap", NULL);
}

static void test_bytes_not_covered_by_any_tensor_are_rejected(void) {
    cJSON *hdr = cJSON_CreateObject(); /* a hole between two tensors */
    add_tensor(hdr, "a", "F32", "[1]", 0, 4);
    add_tensor(hdr, "b", "F32", "[1]", 8, 12);
    expect_reject(img_build(hdr, 12), "header: ", "data section has 4 bytes not covered", NULL);
    hdr = cJSON_CreateObject(); /* trailing bytes */
    add_tensor(hdr, "a", "F32", "[1]", 0, 4);
    expect_reject(img_build(hdr, 7), "header: ", "data section has 3 bytes not covered", NULL);
}

static void test_duplicate_tensor_names_are_rejected(void) {
    const char *hdr = "{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                      "\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}";
    expect_reject(img_raw(hdr, strlen(hdr), 4), "tensor w: ", "appears twice", NULL);
}

static void test_bad_shapes_are_rejected(void) {
    const struct {
        const char *shape, *word;
    } bad[] = {{"[2, -3]", "shape[1]: expected a non-negative integer"},
               {"[1.5]", "found 1.5"},
               {"[\"4\"]", "found string \"4\""},
               {"[1, 1, 1, 1, 1, 1, 1, 1, 1]", "9 dims, more than the 8"},
               {"[9007199254740992]", "below 2^53, found 9007199254740992"},
               {"[4294967296, 4294967296]", "more elements than fit in 64 bits"},
               {"[1048576, 1048576, 1048576]", "more bytes than fit in 64 bits"},
               {"{}", "shape: expected an array"}};
    /* Raw text: cJSON_Print keeps only 15 significant digits of 2^53. */
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char hdr[256];
        snprintf(hdr, sizeof hdr, "{\"model.norm.weight\": {\"dtype\": \"F64\", \"shape\": "
                 "%s, \"data_offsets\": [0, 8]}}", bad[i].shape);
        expect_reject(img_raw(hdr, strlen(hdr), 8), "tensor model.norm.weight: ", bad[i].word,
                      NULL);
    }
}

static void test_entries_without_required_fields_are_rejected(void) {
    const struct {
        const char *hdr, *word;
    } bad[] = {{"{\"w\": 3}", "tensor w: expected an object, found 3"},
               {"{\"w\": {\"shape\": [], \"data_offsets\": [0, 0]}}", "tensor w: dtype: missing"},
               {"{\"w\": {\"dtype\": 5, \"shape\": [], \"data_offsets\": [0, 0]}}",
                "tensor w: dtype: expected a string"},
               {"{\"w\": {\"dtype\": \"U8\", \"data_offsets\": [0, 0]}}", "tensor w: shape: missing"},
               {"{\"w\": {\"dtype\": \"U8\", \"shape\": [0]}}", "tensor w: data_offsets: missing"},
               {"{\"w\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [0]}}",
                "tensor w: data_offsets: expected [begin, end]"},
               {"{\"w\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [0, -1]}}",
                "tensor w: data_offsets: expected [begin, end]"},
               {"{\"w\": {\"dtype\": \"U8\", \"dtype\": \"U8\", \"shape\": [0], "
                "\"data_offsets\": [0, 0]}}", "tensor w: dtype: appears more than once"},
               {"{\"__metadata__\": [1]}", "header: __metadata__: expected an object of strings"},
               {"{\"__metadata__\": {\"format\": 1}}", "header: __metadata__: format: expected a "
                "string, found 1"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_reject(img_raw(bad[i].hdr, strlen(bad[i].hdr), 0), bad[i].word, NULL, NULL);
}

static void test_names_from_the_file_are_escaped_in_messages(void) {
    const char *hdr = "{\"bad\\nname\": {\"dtype\": \"X\\u0001\", \"shape\": [], "
                      "\"data_offsets\": [0, 1]}}";
    expect_reject(img_raw(hdr, strlen(hdr), 1), "tensor bad\\x0aname: ", "\"X\\x01\"", NULL);
}

/* ---- directories ------------------------------------------------------------ */

static void dir_write(const char *dir, const char *name, img_t m) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK_EQ_INT(test_write_file(path, m.buf, m.len), 0);
    free(m.buf);
}

static void dir_write_text(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK_EQ_INT(test_write_file(path, text, strlen(text)), 0);
}

static void dir_remove(const char *dir) {
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

/* Two shards of a tiny model: shard 1 holds a and b, shard 2 holds c. */
static void write_two_shards(const char *dir) {
    cJSON *h1 = cJSON_CreateObject();
    add_tensor(h1, "a", "BF16", "[2, 3]", 0, 12);
    add_tensor(h1, "b", "F32", "[1]", 12, 16);
    dir_write(dir, "model-00001-of-00002.safetensors", img_build(h1, 16));
    cJSON *h2 = cJSON_CreateObject();
    add_tensor(h2, "c", "I8", "[3]", 0, 3);
    dir_write(dir, "model-00002-of-00002.safetensors", img_build(h2, 3));
}

static const char *INDEX_OK =
    "{\"metadata\": {\"total_size\": 19}, \"weight_map\": {"
    "\"a\": \"model-00001-of-00002.safetensors\", \"b\": \"model-00001-of-00002.safetensors\","
    " \"c\": \"model-00002-of-00002.safetensors\"}}";

static void test_single_file_directory_opens_and_finds_tensors(void) {
    char dir[] = "/tmp/servelab-st-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    cJSON *hdr = cJSON_CreateObject();
    add_tensor(hdr, "model.norm.weight", "F32", "[4]", 0, 16);
    add_tensor(hdr, "lm_head.weight", "BF16", "[2, 4]", 16, 32);
    dir_write(dir, "model.safetensors", img_build(hdr, 32));
    st_archive_t a;
    sl_err_t err;
    CHECK_EQ_INT(st_open_dir(dir, &a, &err), 0);
    CHECK_EQ_INT(a.n_files, 1);
    CHECK_EQ_INT(a.n_tensors, 2);
    const st_tensor_t *t = st_find(&a, "lm_head.weight");
    CHECK(t != NULL && t->dtype == DTYPE_BF16 && t->n_bytes == 16);
    CHECK(t && t->data == a.maps[0].data + a.maps[0].n_bytes - 16);
    CHECK(st_find(&a, "model.embed_tokens.weight") == NULL);
    int64_t shape[2] = {2, 4};
    CHECK(st_expect(&a, "lm_head.weight", 2, shape, &err) == t);
    st_close(&a);
    CHECK(a.n_files == 0 && a.index == NULL);
    dir_remove(dir);
}

static void test_expect_reports_wrong_shape_and_missing_tensor(void) {
    char dir[] = "/tmp/servelab-st-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    cJSON *hdr = cJSON_CreateObject();
    add_tensor(hdr, "model.layers.0.self_attn.q_proj.weight", "I8", "[128, 64]", 0, 8192);
    dir_write(dir, "model.safetensors", img_build(hdr, 8192));
    st_archive_t a;
    sl_err_t err;
    CHECK_EQ_INT(st_open_dir(dir, &a, &err), 0);
    int64_t shape[2] = {128, 128};
    char want[512];
    CHECK(st_expect(&a, "model.layers.0.self_attn.q_proj.weight", 2, shape, &err) == NULL);
    snprintf(want, sizeof want, "%s/model.safetensors: tensor model.layers.0.self_attn.q_proj."
             "weight: expected shape [128, 128], found [128, 64]", dir);
    CHECK(!strcmp(err.msg, want));
    CHECK(st_expect(&a, "model.layers.0.self_attn.q_proj.weight", 1, shape, &err) == NULL);
    CHECK_STR_CONTAINS(err.msg, "expected shape [128], found [128, 64]");
    CHECK(st_expect(&a, "lm_head.weight", 2, shape, &err) == NULL);
    snprintf(want, sizeof want, "%s/model.safetensors: tensor lm_head.weight: missing", dir);
    CHECK(!strcmp(err.msg, want));
    st_close(&a);
    dir_remove(dir);
}

static void test_sharded_directory_opens_every_shard(void) {
    char dir[] = "/tmp/servelab-st-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    write_two_shards(dir);
    dir_write_text(dir, "model.safetensors.index.json", INDEX_OK);
    st_archive_t a;
    sl_err_t err;
    CHECK_EQ_INT(st_open_dir(dir, &a, &err), 0);
    CHECK_EQ_INT(a.n_files, 2);
    CHECK_EQ_INT(a.n_tensors, 3);
    const st_tensor_t *c = st_find(&a, "c"), *b = st_find(&a, "b");
    CHECK(c && c->file_index == 1 && c->dtype == DTYPE_I8);
    CHECK(b && b->file_index == 0);
    CHECK(c && c->data == a.maps[1].data + a.maps[1].n_bytes - 3);
    int64_t shape[1] = {1};
    CHECK(st_expect(&a, "zzz", 1, shape, &err) == NULL);
    CHECK_STR_CONTAINS(err.msg, "/model.safetensors.index.json: tensor zzz: missing");
    st_close(&a);
    dir_remove(dir);
}

/* Writes `index` next to the two shards and expects st_open_dir to fail. */
static void expect_dir_reject(const char *index, int drop_shard2, const char *w1,
                              const char *w2) {
    char dir[] = "/tmp/servelab-st-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    write_two_shards(dir);
    if (drop_shard2) {
        char path[512];
        snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
        unlink(path);
    }
    if (index) dir_write_text(dir, "model.safetensors.index.json", index);
    st_archive_t a;
    sl_err_t err = {{0}};
    CHECK_EQ_INT(st_open_dir(dir, &a, &err), -1);
    CHECK(a.n_files == 0 && a.index == NULL);
    CHECK(strchr(err.msg, '\n') == NULL);
    CHECK_STR_CONTAINS(err.msg, dir);
    CHECK_STR_CONTAINS(err.msg, w1);
    if (w2) CHECK_STR_CONTAINS(err.msg, w2);
    dir_remove(dir);
}

static void test_missing_shard_is_reported(void) {
    expect_dir_reject(INDEX_OK, 1, "model-00002-of-00002.safetensors: cannot open",
                      "named by model.safetensors.index.json");
}

static void test_tensor_missing_from_its_shard_is_reported(void) {
    expect_dir_reject("{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", "
                      "\"b\": \"model-00001-of-00002.safetensors\", "
                      "\"c\": \"model-00002-of-00002.safetensors\", "
                      "\"d\": \"model-00002-of-00002.safetensors\"}}",
                      0, "model-00002-of-00002.safetensors: tensor d: missing from "
                      "model-00002-of-00002.safetensors", NULL);
    expect_dir_reject("{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", "
                      "\"b\": \"model-00001-of-00002.safetensors\", "
                      "\"c\": \"model-00001-of-00002.safetensors\"}}",
                      0, "tensor c: missing from model-00001-of-00002.safetensors", NULL);
}

static void test_tensor_in_two_shards_is_reported(void) {
    char dir[] = "/tmp/servelab-st-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    write_two_shards(dir);
    cJSON *h2 = cJSON_CreateObject(); /* shard 2 also holds "a" */
    add_tensor(h2, "a", "BF16", "[2, 3]", 0, 12);
    add_tensor(h2, "c", "I8", "[3]", 12, 15);
    dir_write(dir, "model-00002-of-00002.safetensors", img_build(h2, 15));
    dir_write_text(dir, "model.safetensors.index.json", INDEX_OK);
    st_archive_t a;
    sl_err_t err;
    CHECK_EQ_INT(st_open_dir(dir, &a, &err), -1);
    CHECK_STR_CONTAINS(err.msg, "tensor a: also present in");
    CHECK_STR_CONTAINS(err.msg, "model-00001-of-00002.safetensors");
    CHECK_STR_CONTAINS(err.msg, "model-00002-of-00002.safetensors");
    dir_remove(dir);
}

static void test_bad_indexes_are_reported(void) {
    expect_dir_reject("{\"weight_map\": {\"a\": \"../model-00001-of-00002.safetensors\"}}", 0,
                      "weight_map: a: expected a plain file name", NULL);
    expect_dir_reject("{\"weight_map\": {}}", 0, "weight_map: expected a non-empty object",
                      NULL);
    expect_dir_reject("{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", "
                      "\"a\": \"model-00001-of-00002.safetensors\"}}", 0,
                      "weight_map: tensor a: appears twice", NULL);
    expect_dir_reject("{\"weight_map\": ", 0, "model.safetensors.index.json: invalid JSON",
                      NULL);
}

static void test_directory_without_checkpoint_is_reported(void) {
    expect_dir_reject(NULL, 0, ": no model.safetensors or model.safetensors.index.json", NULL);
}

static void test_bad_file_in_directory_names_its_path(void) {
    char dir[] = "/tmp/servelab-st-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    dir_write(dir, "model.safetensors", img_raw("{\"w\": 1}", 8, 0));
    st_archive_t a;
    sl_err_t err;
    CHECK_EQ_INT(st_open_dir(dir, &a, &err), -1);
    char want[512];
    snprintf(want, sizeof want, "%s/model.safetensors: tensor w: expected an object", dir);
    CHECK_STR_CONTAINS(err.msg, want);
    dir_remove(dir);
}

int main(void) {
    RUN(test_valid_file_with_each_common_dtype_is_parsed);
    RUN(test_other_dtypes_and_padded_header_are_accepted);
    RUN(test_zero_size_tensors_are_accepted);
    RUN(test_file_shorter_than_length_prefix_is_rejected);
    RUN(test_zero_header_length_is_rejected);
    RUN(test_huge_header_length_is_rejected);
    RUN(test_header_length_past_end_of_file_is_rejected);
    RUN(test_header_that_is_not_json_is_rejected);
    RUN(test_header_that_is_not_an_object_is_rejected);
    RUN(test_unsupported_dtype_is_rejected);
    RUN(test_shape_times_dtype_must_equal_byte_length);
    RUN(test_begin_after_end_is_rejected);
    RUN(test_end_past_data_section_is_rejected);
    RUN(test_overlapping_offsets_are_rejected);
    RUN(test_bytes_not_covered_by_any_tensor_are_rejected);
    RUN(test_duplicate_tensor_names_are_rejected);
    RUN(test_bad_shapes_are_rejected);
    RUN(test_entries_without_required_fields_are_rejected);
    RUN(test_names_from_the_file_are_escaped_in_messages);
    RUN(test_single_file_directory_opens_and_finds_tensors);
    RUN(test_expect_reports_wrong_shape_and_missing_tensor);
    RUN(test_sharded_directory_opens_every_shard);
    RUN(test_missing_shard_is_reported);
    RUN(test_tensor_missing_from_its_shard_is_reported);
    RUN(test_tensor_in_two_shards_is_reported);
    RUN(test_bad_indexes_are_reported);
    RUN(test_directory_without_checkpoint_is_reported);
    RUN(test_bad_file_in_directory_names_its_path);
    return test_summary();
}
