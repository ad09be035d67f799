/* test_kbench_report.c - the pure-C half of servelab-kernel-bench
 * (kernels/bench/kbench_report.c), in every build: its options, the minimal
 * bytes and FLOPs it credits each kernel with, the median, the roofline
 * percentage, and the three outputs (table, RESULT lines, JSON), so that a
 * figure printed on a GPU machine rests on arithmetic checked here.
 */
#include <cjson/cJSON.h>

#include "kbench_report.h"
#include "test.h"

static int close_rel(double a, double b, double rel) { return fabs(a - b) <= rel * fmax(fabs(a), fabs(b)); }

static void test_median_of_odd_and_even_counts_leaves_input_alone(void) {
    double odd[5] = {5, 1, 4, 2, 3}, even[4] = {10, 1, 3, 2};
    CHECK(kb_median(odd, 5) == 3.0);
    CHECK(kb_median(even, 4) == 2.5);
    CHECK(odd[0] == 5 && odd[4] == 3 && even[0] == 10); /* sorted a copy */
    double one = 7.25;
    CHECK(kb_median(&one, 1) == 7.25);
    CHECK(kb_median(NULL, 0) == 0.0);
}

static void test_byte_counts_read_inputs_once_and_write_outputs_once(void) {
    /* llama-3-8b, bf16 */
    CHECK(kb_bytes_rmsnorm(2048, 4096, 2) == (2.0 * 2048 * 4096 + 4096) * 2);
    CHECK(kb_bytes_add_rmsnorm(1, 4096, 2) == (4.0 * 4096 + 4096) * 2);
    CHECK(kb_bytes_silu_mul(64 * 14336, 2) == 3.0 * 64 * 14336 * 2);
    /* q 32x128 read + written, k 8x128 read + written, v 8x128 read, two cache rows written,
     * an int32 position and an int64 slot per token */
    CHECK(kb_bytes_rope_kv_write(1, 32, 8, 128, 2) == (2 * 4096 + 2 * 1024 + 1024 + 2 * 1024) * 2 + 12);
    CHECK(kb_bytes_embed(3, 4096, 2) == 3 * (2.0 * 4096 * 2 + 4));
    /* decode: K and V of 4096 tokens x 8 heads x 128, q and out of 32 x 128, 256 block ids + 3 ints */
    double kv = 2.0 * 4096 * 8 * 128 * 2, qo = 2.0 * 32 * 128 * 2, meta = 256 * 4 + 12;
    CHECK(kb_bytes_attn_decode(1, 4096, 32, 8, 128, 16, 2) == kv + qo + meta);
    CHECK(kb_bytes_attn_decode(64, 4096, 32, 8, 128, 16, 2) == 64 * (kv + qo + meta));
    CHECK(kb_bytes_attn_decode(1, 17, 32, 8, 128, 16, 2) == 2.0 * 17 * 1024 * 2 + qo + 2 * 4 + 12);
    CHECK(kb_bytes_attn_prefill(2048, 32, 8, 128, 2) == 2048.0 * (64 + 16) * 128 * 2);
    /* GEMM: in (T, K) and W (N, K) in bf16, logits (T, N) in fp32 */
    CHECK(kb_bytes_gemm(1, 128256, 4096, 2, 4) == (4096.0 + 128256.0 * 4096) * 2 + 128256.0 * 4);
    /* no int overflow at the largest shapes */
    CHECK(kb_bytes_attn_decode(64, 32768, 32, 8, 128, 16, 2) > 8.0 * 1024 * 1024 * 1024);
}

static void test_flops_count_two_per_multiply_add_and_causal_prefill(void) {
    CHECK(kb_flops_gemm(8192, 8192, 8192) == 2.0 * 8192 * 8192 * 8192);
    CHECK(kb_flops_attn_decode(8, 4096, 32, 128) == 8.0 * 32 * 4096 * 128 * 4);
    /* prefill: query i sees keys 0..i; q.k and p.v are D multiply-adds each per (head, key) */
    for (int64_t T = 1; T <= 40; T += 13) {
        double sum = 0;
        for (int64_t i = 0; i < T; i++) sum += 4.0 * 32 * 128 * (double)(i + 1);
        CHECK(kb_flops_attn_prefill(T, 32, 128) == sum);
    }
}

static void test_roofline_percent_uses_the_tighter_bound(void) {
    kb_result_t r = {0};
    /* 1 GB in 1 ms = 1000 GB/s against a 2000 GB/s copy rate: 50% of a memory roofline */
    r.bytes = 1e9, r.flops = 1e9, r.median_us = 1000.0;
    kb_roofline(&r, 2000.0, 500.0);
    CHECK(close_rel(r.gbs, 1000.0, 1e-12));
    CHECK(close_rel(r.tflops, 1.0, 1e-12));
    CHECK(close_rel(r.pct, 50.0, 1e-12));
    CHECK(!strcmp(r.bound, "memory"));
    /* 400 TFLOP in 1 s against 500 TFLOP/s: compute-bound at 80% */
    r.bytes = 1e9, r.flops = 4e14, r.median_us = 1e6;
    kb_roofline(&r, 2000.0, 500.0);
    CHECK(close_rel(r.pct, 80.0, 1e-12));
    CHECK(!strcmp(r.bound, "compute"));
    /* no GEMM rate measured: memory only */
    kb_roofline(&r, 2000.0, 0.0);
    CHECK(!strcmp(r.bound, "memory"));
    CHECK(close_rel(r.pct, 100.0 * (1e9 / 2e12) / 1.0, 1e-12));
    r.median_us = 0;
    kb_roofline(&r, 2000.0, 500.0);
    CHECK(r.pct == 0.0 && r.gbs == 0.0);
}

static int parse(kb_opts_t *o, char *err, const char *a1, const char *a2, const char *a3) {
    char *argv[5] = {"bench", (char *)a1, (char *)a2, (char *)a3, NULL};
    int argc = 1 + (a1 != NULL) + (a2 != NULL) + (a3 != NULL);
    return kb_parse_args(argc, argv, o, err, 256);
}

static void test_options_defaults_values_and_usage_errors(void) {
    kb_opts_t o;
    char err[256];
    CHECK_EQ_INT(parse(&o, err, NULL, NULL, NULL), 0);
    CHECK(o.dt == DTYPE_BF16 && o.iters == 50 && o.warmup == 5 && !o.quick && !o.model && !o.json_path);
    CHECK(kb_opts_wants(&o, "gemm") && kb_opts_wants(&o, "rmsnorm"));
    CHECK_EQ_INT(parse(&o, err, "--dtype=f32", "--iters", "7"), 0);
    CHECK(o.dt == DTYPE_F32 && o.iters == 7);
    CHECK_EQ_INT(parse(&o, err, "--dtype", "float16", "--quick"), 0);
    CHECK(o.dt == DTYPE_F16 && o.quick);
    CHECK_EQ_INT(parse(&o, err, "--only", "rmsnorm,gemm", NULL), 0);
    CHECK_EQ_INT(o.n_only, 2);
    CHECK(kb_opts_wants(&o, "rmsnorm") && kb_opts_wants(&o, "gemm"));
    CHECK(!kb_opts_wants(&o, "add_rmsnorm")); /* names match whole, not as prefixes */
    CHECK_EQ_INT(parse(&o, err, "--model", "tinyllama-1.1b", "--json=out.json"), 0);
    CHECK(!strcmp(o.model, "tinyllama-1.1b") && !strcmp(o.json_path, "out.json"));
    CHECK_EQ_INT(parse(&o, err, "--model", "all", NULL), 0);
    CHECK(o.model == NULL);
    CHECK_EQ_INT(parse(&o, err, "--help", NULL, NULL), 1);

    CHECK_EQ_INT(parse(&o, err, "--only", "rms", NULL), -1);
    CHECK_STR_CONTAINS(err, "unknown kernel 'rms'");
    CHECK_EQ_INT(parse(&o, err, "--dtype", "int8", NULL), -1);
    CHECK_STR_CONTAINS(err, "--dtype");
    CHECK_EQ_INT(parse(&o, err, "--iters", "0", NULL), -1);
    CHECK_EQ_INT(parse(&o, err, "--iters", "12x", NULL), -1);
    CHECK_EQ_INT(parse(&o, err, "--iters", NULL, NULL), -1);
    CHECK_STR_CONTAINS(err, "expected a value");
    CHECK_EQ_INT(parse(&o, err, "--model", "gpt-2", NULL), -1);
    CHECK_EQ_INT(parse(&o, err, "--frobnicate", NULL, NULL), -1);
    CHECK_STR_CONTAINS(err, "unrecognized argument: --frobnicate");
}

static void test_models_and_shape_lists(void) {
    const kb_model_t *m = kb_model_find("llama-3-8b");
    CHECK(m && m->hidden == 4096 && m->H == 32 && m->Hkv == 8 && m->D == 128 && m->inter == 14336 && m->V == 128256);
    m = kb_model_find("tinyllama-1.1b");
    CHECK(m && m->hidden == 2048 && m->H == 32 && m->Hkv == 4 && m->D == 64 && m->inter == 5632 && m->V == 32000);
    CHECK(kb_model_find("llama") == NULL);
    int64_t x[8];
    CHECK_EQ_INT(kb_token_counts(0, x), 5);
    CHECK(x[0] == 1 && x[1] == 64 && x[2] == 256 && x[3] == 2048 && x[4] == 8192);
    CHECK_EQ_INT(kb_token_counts(1, x), 2);
    CHECK_EQ_INT(kb_decode_batches(0, x), 3);
    CHECK(x[0] == 1 && x[1] == 8 && x[2] == 64);
    CHECK_EQ_INT(kb_decode_contexts(0, x), 3);
    CHECK(x[0] == 512 && x[1] == 4096 && x[2] == 32768);
    CHECK_EQ_INT(kb_prefill_lengths(0, x), 2);
    CHECK(x[0] == 2048 && x[1] == 8192);
}

static kb_result_t sample_result(void) {
    kb_result_t r = {0};
    snprintf(r.kernel, sizeof r.kernel, "attn_decode");
    snprintf(r.model, sizeof r.model, "llama-3-8b");
    snprintf(r.shape, sizeof r.shape, "S=64,ctx=4096,H=32,Hkv=8,D=128");
    snprintf(r.dtype, sizeof r.dtype, "bf16");
    r.median_us = 250.0, r.bytes = 1.0e9, r.flops = 4.0e9, r.check = KB_CHECK_PASS;
    kb_roofline(&r, 4000.0, 800.0);
    return r;
}

static void test_table_rows_align_with_the_header_and_result_lines_parse(void) {
    char head[256], row[256], line[512];
    kb_result_t r = sample_result();
    kb_format_header(head, sizeof head);
    kb_format_row(row, sizeof row, &r);
    CHECK_EQ_INT(strlen(head), strlen(row));
    CHECK_STR_CONTAINS(row, "4000.0"); /* GB/s */
    CHECK_STR_CONTAINS(row, "100.0");  /* % of roofline: 1 GB at 4000 GB/s is 250 us */
    CHECK_STR_CONTAINS(row, "PASS");
    /* every column starts where the header's does */
    const char *cols[] = {"model", "shape", "dtype", "bound", "check"};
    for (int i = 0; i < 5; i++) {
        const char *h = strstr(head, cols[i]);
        CHECK(h && h > head && row[h - head - 1] == ' ' && row[h - head] != ' ');
    }
    kb_format_result_line(line, sizeof line, &r);
    CHECK(!strncmp(line, "RESULT kernel=attn_decode model=llama-3-8b shape=S=64,ctx=4096,H=32,Hkv=8,D=128 dtype=bf16 ",
                   strlen("RESULT kernel=attn_decode model=llama-3-8b shape=S=64,ctx=4096,H=32,Hkv=8,D=128 dtype=bf16 ")));
    CHECK_STR_CONTAINS(line, " median_us=250.000 ");
    CHECK_STR_CONTAINS(line, " gbs=4000.00 ");
    CHECK_STR_CONTAINS(line, " pct=100.00 bound=memory check=PASS");
    r.check = KB_CHECK_NONE, r.flops = 0;
    kb_format_row(row, sizeof row, &r);
    CHECK_EQ_INT(strlen(head), strlen(row));
    kb_format_result_line(line, sizeof line, &r);
    CHECK_STR_CONTAINS(line, "check=-");
}

static void test_json_holds_roofline_and_every_result(void) {
    kb_result_t r[2] = {sample_result(), sample_result()};
    r[1].check = KB_CHECK_FAIL;
    kb_opts_t o;
    char err[256];
    CHECK_EQ_INT(parse(&o, err, "--iters", "9", NULL), 0);
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f) return;
    CHECK_EQ_INT(kb_write_json(f, "NVIDIA \"H200\"", &o, 4000.0, 800.0, r, 2), 0);
    long n = ftell(f);
    rewind(f);
    char *buf = calloc((size_t)n + 1, 1);
    CHECK(fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    cJSON *j = cJSON_Parse(buf);
    CHECK(j != NULL);
    if (j) {
        CHECK(!strcmp(cJSON_GetObjectItem(j, "device")->valuestring, "NVIDIA \"H200\""));
        CHECK(!strcmp(cJSON_GetObjectItem(j, "dtype")->valuestring, "bf16"));
        CHECK_EQ_INT(cJSON_GetObjectItem(j, "iters")->valueint, 9);
        cJSON *roof = cJSON_GetObjectItem(j, "roofline");
        CHECK(cJSON_GetObjectItem(roof, "copy_gbs")->valuedouble == 4000.0);
        cJSON *res = cJSON_GetObjectItem(j, "results");
        CHECK_EQ_INT(cJSON_GetArraySize(res), 2);
        cJSON *r1 = cJSON_GetArrayItem(res, 1);
        CHECK(!strcmp(cJSON_GetObjectItem(r1, "check")->valuestring, "FAIL"));
        CHECK(!strcmp(cJSON_GetObjectItem(r1, "shape")->valuestring, "S=64,ctx=4096,H=32,Hkv=8,D=128"));
        CHECK(close_rel(cJSON_GetObjectItem(r1, "pct")->valuedouble, 100.0, 1e-9));
        cJSON_Delete(j);
    }
    free(buf);
}

int main(void) {
    RUN(test_median_of_odd_and_even_counts_leaves_input_alone);
    RUN(test_byte_counts_read_inputs_once_and_write_outputs_once);
    RUN(test_flops_count_two_per_multiply_add_and_causal_prefill);
    RUN(test_roofline_percent_uses_the_tighter_bound);
    RUN(test_options_defaults_values_and_usage_errors);
    RUN(test_models_and_shape_lists);
    RUN(test_table_rows_align_with_the_header_and_result_lines_parse);
    RUN(test_json_holds_roofline_and_every_result);
    return test_summary();
}
