/* test_config.c - config.json and generation_config.json parsing.
 *
 * Each test edits one field of a good tiny Llama config (through cJSON, so the
 * rest stays valid) and checks the parsed value or the one-line error: it must
 * name the file, the field and say what is wrong.
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <unistd.h>

#include "servelab/config.h"
#include "test.h"

#define PATH "tiny/config.json"
#define ABSENT "<absent>"

static const char *GOOD =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\","
    " \"vocab_size\": 256, \"hidden_size\": 64, \"intermediate_size\": 172,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 4,"
    " \"max_position_embeddings\": 512, \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0,"
    " \"rope_scaling\": null, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
    " \"bos_token_id\": 1, \"eos_token_id\": 2, \"hidden_act\": \"silu\","
    " \"attention_bias\": false, \"mlp_bias\": false, \"pretraining_tp\": 1}";

/* Parses GOOD with (key, JSON value) pairs applied, NULL-terminated; the value
 * ABSENT removes the key. */
static int parse_edited(model_config_t *cfg, sl_err_t *err, ...) {
    cJSON *root = cJSON_Parse(GOOD);
    va_list ap;
    va_start(ap, err);
    for (const char *key; (key = va_arg(ap, const char *));) {
        const char *value = va_arg(ap, const char *);
        cJSON_DeleteItemFromObjectCaseSensitive(root, key);
        if (strcmp(value, ABSENT) != 0) cJSON_AddItemToObject(root, key, cJSON_Parse(value));
    }
    va_end(ap);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    memset(err, 0, sizeof *err);
    int rc = config_parse(text, PATH, cfg, err);
    free(text);
    return rc;
}

/* The error is one line naming the file and containing each of the words. */
static void check_error(int rc, const sl_err_t *err, const char *w1, const char *w2) {
    CHECK_EQ_INT(rc, -1);
    CHECK(strchr(err->msg, '\n') == NULL);
    CHECK_STR_CONTAINS(err->msg, PATH ": ");
    CHECK_STR_CONTAINS(err->msg, w1);
    if (w2) CHECK_STR_CONTAINS(err->msg, w2);
}

static void test_tiny_llama_config_is_read(void) {
    model_config_t c;
    sl_err_t err;
    CHECK_EQ_INT(parse_edited(&c, &err, NULL), 0);
    CHECK(!strcmp(c.architecture, "LlamaForCausalLM"));
    CHECK_EQ_INT(c.vocab_size, 256);
    CHECK_EQ_INT(c.hidden_size, 64);
    CHECK_EQ_INT(c.intermediate_size, 172);
    CHECK_EQ_INT(c.n_layers, 2);
    CHECK_EQ_INT(c.n_heads, 4);
    CHECK_EQ_INT(c.n_kv_heads, 4);
    CHECK_EQ_INT(c.head_dim, 16);
    CHECK_EQ_INT(c.max_position_embeddings, 512);
    CHECK(c.rms_norm_eps == 1e-5);
    CHECK(c.rope_theta == 500000.0);
    CHECK(c.rope_scaling_factor == 1.0);
    CHECK(c.tie_word_embeddings);
    CHECK_EQ_INT(c.torch_dtype, DTYPE_BF16);
    CHECK_EQ_INT(c.bos_token_id, 1);
    CHECK_EQ_INT(c.n_eos_token_ids, 1);
    CHECK_EQ_INT(c.eos_token_ids[0], 2);
}

static void test_absent_fields_take_transformers_defaults(void) {
    model_config_t c;
    sl_err_t err;
    CHECK_EQ_INT(parse_edited(&c, &err, "num_key_value_heads", ABSENT, "head_dim", ABSENT,
                              "max_position_embeddings", ABSENT, "rms_norm_eps", ABSENT,
                              "rope_theta", ABSENT, "rope_scaling", ABSENT,
                              "tie_word_embeddings", ABSENT, "torch_dtype", ABSENT,
                              "bos_token_id", ABSENT, "eos_token_id", ABSENT, "hidden_act",
                              ABSENT, NULL), 0);
    CHECK_EQ_INT(c.n_kv_heads, 4);
    CHECK_EQ_INT(c.head_dim, 16);
    CHECK_EQ_INT(c.max_position_embeddings, 2048);
    CHECK(c.rms_norm_eps == 1e-6);
    CHECK(c.rope_theta == 10000.0);
    CHECK(c.rope_scaling_factor == 1.0);
    CHECK(!c.tie_word_embeddings);
    CHECK_EQ_INT(c.torch_dtype, DTYPE_F32);
    CHECK_EQ_INT(c.bos_token_id, -1);
    CHECK_EQ_INT(c.n_eos_token_ids, 0);
}

static void test_null_head_dim_means_hidden_over_heads(void) {
    model_config_t c;
    sl_err_t err;
    CHECK_EQ_INT(parse_edited(&c, &err, "head_dim", "null", NULL), 0);
    CHECK_EQ_INT(c.head_dim, 16);
}

static void test_explicit_head_dim_wins_over_hidden_over_heads(void) {
    model_config_t c;
    sl_err_t err;
    /* Mistral-Nemo style: H * D != hidden, and hidden need not divide by H. */
    CHECK_EQ_INT(parse_edited(&c, &err, "head_dim", "32", "num_attention_heads", "3",
                              "num_key_value_heads", "1", NULL), 0);
    CHECK_EQ_INT(c.head_dim, 32);
    CHECK_EQ_INT(c.n_heads, 3);
}

static void test_gqa_keeps_fewer_kv_heads(void) {
    model_config_t c;
    sl_err_t err;
    CHECK_EQ_INT(parse_edited(&c, &err, "num_key_value_heads", "2", NULL), 0);
    CHECK_EQ_INT(c.n_heads, 4);
    CHECK_EQ_INT(c.n_kv_heads, 2);
    CHECK_EQ_INT(c.head_dim, 16);
}

static void test_eos_token_id_list_is_read(void) {
    model_config_t c;
    sl_err_t err;
    CHECK_EQ_INT(parse_edited(&c, &err, "eos_token_id", "[2, 7, 9]", NULL), 0);
    CHECK_EQ_INT(c.n_eos_token_ids, 3);
    CHECK_EQ_INT(c.eos_token_ids[1], 7);
    CHECK_EQ_INT(c.eos_token_ids[2], 9);
    CHECK_EQ_INT(parse_edited(&c, &err, "eos_token_id", "null", "bos_token_id", "null", NULL),
                 0);
    CHECK_EQ_INT(c.n_eos_token_ids, 0);
    CHECK_EQ_INT(c.bos_token_id, -1);
}

static void test_too_many_eos_ids_are_rejected(void) {
    model_config_t c;
    sl_err_t err;
    int rc = parse_edited(&c, &err, "eos_token_id", "[1, 2, 3, 4, 5, 6, 7, 8, 9]", NULL);
    check_error(rc, &err, "eos_token_id: ", "more than 8");
}

static void test_eos_id_outside_vocab_is_rejected(void) {
    model_config_t c;
    sl_err_t err;
    int rc = parse_edited(&c, &err, "eos_token_id", "[2, 256]", NULL);
    check_error(rc, &err, "eos_token_id: 256", "vocab_size is 256");
}

static void test_linear_rope_scaling_sets_factor(void) {
    model_config_t c;
    sl_err_t err;
    CHECK_EQ_INT(parse_edited(&c, &err, "rope_scaling", "{\"type\": \"linear\", \"factor\": 4.0}",
                              NULL), 0);
    CHECK(c.rope_scaling_factor == 4.0);
    CHECK_EQ_INT(parse_edited(&c, &err, "rope_scaling",
                              "{\"rope_type\": \"linear\", \"factor\": 2}", NULL), 0);
    CHECK(c.rope_scaling_factor == 2.0);
}

static void test_linear_rope_scaling_without_positive_factor_is_rejected(void) {
    model_config_t c;
    sl_err_t err;
    int rc = parse_edited(&c, &err, "rope_scaling", "{\"type\": \"linear\", \"factor\": 0}", NULL);
    check_error(rc, &err, "rope_scaling.factor: ", "positive");
}

static void test_yarn_and_other_rope_scalings_are_rejected(void) {
    const char *kinds[] = {"yarn", "dynamic", "llama3", "longrope"};
    for (int i = 0; i < 4; i++) {
        model_config_t c;
        sl_err_t err;
        char v[128];
        snprintf(v, sizeof v, "{\"rope_type\": \"%s\", \"factor\": 4.0}", kinds[i]);
        int rc = parse_edited(&c, &err, "rope_scaling", v, NULL);
        check_error(rc, &err, "rope_scaling.rope_type: unsupported", kinds[i]);
    }
}

static void test_rope_parameters_of_transformers_5_are_read(void) {
    model_config_t c;
    sl_err_t err;
    CHECK_EQ_INT(parse_edited(&c, &err, "rope_theta", ABSENT, "rope_parameters",
                              "{\"rope_type\": \"default\", \"rope_theta\": 1000000.0}", NULL),
                 0);
    CHECK(c.rope_theta == 1e6);
    CHECK(c.rope_scaling_factor == 1.0);
}

static void test_unsupported_architecture_is_rejected(void) {
    model_config_t c;
    sl_err_t err;
    int rc = parse_edited(&c, &err, "architectures", "[\"GPT2LMHeadModel\"]", "model_type",
                          "\"gpt2\"", NULL);
    check_error(rc, &err, "architectures: unsupported architecture", "GPT2LMHeadModel");
}

static void test_model_type_must_match_architecture(void) {
    model_config_t c;
    sl_err_t err;
    int rc = parse_edited(&c, &err, "model_type", "\"mistral\"", NULL);
    check_error(rc, &err, "model_type: ", "does not match");
}

static void test_mistral_without_effective_sliding_window_is_accepted(void) {
    model_config_t c;
    sl_err_t err;
    CHECK_EQ_INT(parse_edited(&c, &err, "architectures", "[\"MistralForCausalLM\"]",
                              "model_type", "\"mistral\"", "sliding_window", "null", NULL), 0);
    CHECK(!strcmp(c.architecture, "MistralForCausalLM"));
    CHECK_EQ_INT(parse_edited(&c, &err, "architectures", "[\"MistralForCausalLM\"]",
                              "model_type", "\"mistral\"", "sliding_window", "512", NULL), 0);
}

static void test_sliding_window_smaller_than_context_is_rejected(void) {
    model_config_t c;
    sl_err_t err;
    int rc = parse_edited(&c, &err, "architectures", "[\"MistralForCausalLM\"]", "model_type",
                          "\"mistral\"", "sliding_window", "128", NULL);
    check_error(rc, &err, "sliding_window: 128", "not supported");
}

/* AutoAWQ's GEMM format is read; every other method or layout is refused by name. */
static void test_quantization_config_awq_is_read_and_others_rejected(void) {
    model_config_t c;
    sl_err_t err;
    int rc = parse_edited(&c, &err, "quantization_config",
                          "{\"quant_method\": \"awq\", \"bits\": 4, \"group_size\": 128, \"zero_point\": true, "
                          "\"version\": \"GEMM\", \"modules_to_not_convert\": [\"mlp.down_proj\"]}", NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK(c.quant.method == QUANT_AWQ && c.quant.bits == 4 && c.quant.group_size == 128);
    CHECK(config_linear_quantized(&c, "model.layers.3.self_attn.q_proj"));
    CHECK(!config_linear_quantized(&c, "model.layers.3.mlp.down_proj"));
    rc = parse_edited(&c, &err, "quantization_config", "{\"quant_method\": \"awq\", \"bits\": 4, "
                      "\"group_size\": -1}", NULL);
    CHECK(rc == 0 && c.quant.group_size == -1);
    rc = parse_edited(&c, &err, "quantization_config", "{\"quant_method\": \"gptq\", \"bits\": 4}", NULL);
    check_error(rc, &err, "quantization_config.quant_method: \"gptq\" is not supported (supported: awq)", NULL);
    rc = parse_edited(&c, &err, "quantization_config", "{\"quant_method\": \"awq\", \"bits\": 4}", NULL);
    check_error(rc, &err, "quantization_config.group_size: missing", NULL);
    rc = parse_edited(&c, &err, "quantization_config", "{\"quant_method\": \"awq\", \"bits\": 8, "
                      "\"group_size\": 128}", NULL);
    check_error(rc, &err, "quantization_config.bits: 8; AWQ checkpoints here are 4-bit", NULL);
    rc = parse_edited(&c, &err, "quantization_config", "{\"quant_method\": \"awq\", \"bits\": 4, "
                      "\"group_size\": 0}", NULL);
    check_error(rc, &err, "quantization_config.group_size: 0", NULL);
    rc = parse_edited(&c, &err, "quantization_config", "{\"quant_method\": \"awq\", \"bits\": 4, "
                      "\"group_size\": 128, \"zero_point\": false}", NULL);
    check_error(rc, &err, "zero_point: false (symmetric AWQ) is not supported", NULL);
    rc = parse_edited(&c, &err, "quantization_config", "{\"quant_method\": \"awq\", \"bits\": 4, "
                      "\"group_size\": 128, \"version\": \"gemv\"}", NULL);
    check_error(rc, &err, "version: \"gemv\" is not supported", "requantize with version gemm");
    rc = parse_edited(&c, &err, "quantization_config", "[]", NULL);
    check_error(rc, &err, "quantization_config: expected an object, found array", NULL);
}

static void test_negative_and_zero_sizes_are_rejected(void) {
    model_config_t c;
    sl_err_t err;
    int rc = parse_edited(&c, &err, "intermediate_size", "-172", NULL);
    check_error(rc, &err, "intermediate_size: must be positive", "-172");
    rc = parse_edited(&c, &err, "num_hidden_layers", "0", NULL);
    check_error(rc, &err, "num_hidden_layers: must be positive", "0");
}

static void test_wrong_json_type_is_rejected(void) {
    model_config_t c;
    sl_err_t err;
    int rc = parse_edited(&c, &err, "hidden_size", "\"64\"", NULL);
    check_error(rc, &err, "hidden_size: expected an integer, found string", NULL);
    rc = parse_edited(&c, &err, "tie_word_embeddings", "\"yes\"", NULL);
    check_error(rc, &err, "tie_word_embeddings: expected true or false, found string", NULL);
}

static void test_fractional_and_huge_sizes_are_rejected(void) {
    model_config_t c;
    sl_err_t err;
    int rc = parse_edited(&c, &err, "vocab_size", "256.5", NULL);
    check_error(rc, &err, "vocab_size: expected an integer", "256.5");
    rc = parse_edited(&c, &err, "vocab_size", "1e300", NULL);
    check_error(rc, &err, "vocab_size: ", "too large");
}

static void test_missing_required_field_is_rejected(void) {
    model_config_t c;
    sl_err_t err;
    int rc = parse_edited(&c, &err, "num_attention_heads", ABSENT, NULL);
    check_error(rc, &err, "num_attention_heads: missing", NULL);
}

static void test_heads_not_divisible_by_kv_heads_are_rejected(void) {
    model_config_t c;
    sl_err_t err;
    int rc = parse_edited(&c, &err, "num_key_value_heads", "3", NULL);
    check_error(rc, &err, "num_attention_heads: 4 is not divisible by num_key_value_heads 3",
                NULL);
}

static void test_hidden_not_divisible_by_heads_without_head_dim_is_rejected(void) {
    model_config_t c;
    sl_err_t err;
    int rc = parse_edited(&c, &err, "num_attention_heads", "3", "num_key_value_heads", "3", NULL);
    check_error(rc, &err, "hidden_size: 64 is not divisible by num_attention_heads 3", NULL);
}

static void test_bad_json_is_rejected_with_position(void) {
    model_config_t c;
    sl_err_t err;
    int rc = config_parse("{\n  \"vocab_size\": 256,\n  \"hidden_size\": ,\n}", PATH, &c, &err);
    check_error(rc, &err, "invalid JSON", "line 3");
    rc = config_parse("[1, 2]", PATH, &c, &err);
    check_error(rc, &err, "expected a JSON object", "array");
    rc = config_parse("", PATH, &c, &err);
    check_error(rc, &err, "invalid JSON", NULL);
}

static void test_unimplemented_options_are_rejected(void) {
    model_config_t c;
    sl_err_t err;
    int rc = parse_edited(&c, &err, "hidden_act", "\"gelu\"", NULL);
    check_error(rc, &err, "hidden_act: unsupported value", "gelu");
    rc = parse_edited(&c, &err, "attention_bias", "true", NULL);
    check_error(rc, &err, "attention_bias: true is not supported", NULL);
    rc = parse_edited(&c, &err, "mlp_bias", "true", NULL);
    check_error(rc, &err, "mlp_bias: true is not supported", NULL);
    rc = parse_edited(&c, &err, "torch_dtype", "\"float8_e4m3fn\"", NULL);
    check_error(rc, &err, "torch_dtype: unsupported value", "float8_e4m3fn");
    CHECK_EQ_INT(parse_edited(&c, &err, "pretraining_tp", "2", NULL), 0);
}

static void test_dtype_key_of_newer_transformers_is_read(void) {
    model_config_t c;
    sl_err_t err;
    CHECK_EQ_INT(parse_edited(&c, &err, "torch_dtype", ABSENT, "dtype", "\"float16\"", NULL), 0);
    CHECK_EQ_INT(c.torch_dtype, DTYPE_F16);
}

static void test_duplicate_key_is_rejected(void) {
    model_config_t c;
    sl_err_t err;
    char *text = sl_strdup(GOOD);
    char *brace = strrchr(text, '}');
    *brace = '\0';
    char buf[2048];
    snprintf(buf, sizeof buf, "%s, \"hidden_size\": 128}", text);
    free(text);
    int rc = config_parse(buf, PATH, &c, &err);
    check_error(rc, &err, "hidden_size: appears more than once", NULL);
}

static void test_dtype_names_match_both_conventions(void) {
    CHECK_EQ_INT(dtype_size(DTYPE_BF16), 2);
    CHECK_EQ_INT(dtype_size(DTYPE_F64), 8);
    CHECK_EQ_INT(dtype_size(DTYPE_BOOL), 1);
    CHECK(!strcmp(dtype_name(DTYPE_BF16), "BF16"));
    CHECK(!strcmp(dtype_name(DTYPE_I64), "I64"));
    CHECK(!strcmp(dtype_torch_name(DTYPE_BF16), "bfloat16"));
    CHECK(!strcmp(dtype_torch_name(DTYPE_F16), "float16"));
}

/* ---- files ---------------------------------------------------------------- */

static void write_text(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK_EQ_INT(test_write_file(path, text, strlen(text)), 0);
}

static void remove_files(const char *dir) {
    const char *names[] = {"config.json", "generation_config.json"};
    for (int i = 0; i < 2; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

static void test_config_load_reads_model_dir(void) {
    char dir[] = "/tmp/servelab-config-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    write_text(dir, "config.json", GOOD);
    model_config_t c;
    sl_err_t err;
    CHECK_EQ_INT(config_load(dir, &c, &err), 0);
    CHECK_EQ_INT(c.vocab_size, 256);
    remove_files(dir);
}

static void test_missing_config_names_path_and_reason(void) {
    char dir[] = "/tmp/servelab-config-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    model_config_t c;
    sl_err_t err;
    CHECK_EQ_INT(config_load(dir, &c, &err), -1);
    char want[512];
    snprintf(want, sizeof want, "%s/config.json: cannot open: No such file or directory", dir);
    CHECK(!strcmp(err.msg, want));
    remove_files(dir);
}

static void test_generation_config_eos_list_overrides_config(void) {
    char dir[] = "/tmp/servelab-config-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    write_text(dir, "config.json", GOOD);
    write_text(dir, "generation_config.json",
               "{\"bos_token_id\": 3, \"eos_token_id\": [5, 6], \"do_sample\": true}");
    model_config_t c;
    sl_err_t err;
    CHECK_EQ_INT(config_load(dir, &c, &err), 0);
    CHECK_EQ_INT(config_load_generation(dir, &c, &err), 0);
    CHECK_EQ_INT(c.bos_token_id, 3);
    CHECK_EQ_INT(c.n_eos_token_ids, 2);
    CHECK_EQ_INT(c.eos_token_ids[0], 5);
    CHECK_EQ_INT(c.eos_token_ids[1], 6);
    remove_files(dir);
}

static void test_absent_generation_config_is_not_an_error(void) {
    char dir[] = "/tmp/servelab-config-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    write_text(dir, "config.json", GOOD);
    model_config_t c;
    sl_err_t err;
    CHECK_EQ_INT(config_load(dir, &c, &err), 0);
    CHECK_EQ_INT(config_load_generation(dir, &c, &err), 0);
    CHECK_EQ_INT(c.n_eos_token_ids, 1);
    CHECK_EQ_INT(c.eos_token_ids[0], 2);
    remove_files(dir);
}

static void test_malformed_generation_config_is_an_error_and_keeps_config(void) {
    char dir[] = "/tmp/servelab-config-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    write_text(dir, "config.json", GOOD);
    write_text(dir, "generation_config.json", "{\"eos_token_id\": [5, 6}");
    model_config_t c;
    sl_err_t err;
    CHECK_EQ_INT(config_load(dir, &c, &err), 0);
    CHECK_EQ_INT(config_load_generation(dir, &c, &err), -1);
    CHECK_STR_CONTAINS(err.msg, "generation_config.json: invalid JSON");
    CHECK_EQ_INT(c.eos_token_ids[0], 2);
    write_text(dir, "generation_config.json", "{\"eos_token_id\": [5, \"x\"]}");
    CHECK_EQ_INT(config_load_generation(dir, &c, &err), -1);
    CHECK_STR_CONTAINS(err.msg, "generation_config.json: eos_token_id: expected an integer");
    CHECK_EQ_INT(c.n_eos_token_ids, 1);
    remove_files(dir);
}

int main(void) {
    RUN(test_tiny_llama_config_is_read);
    RUN(test_absent_fields_take_transformers_defaults);
    RUN(test_null_head_dim_means_hidden_over_heads);
    RUN(test_explicit_head_dim_wins_over_hidden_over_heads);
    RUN(test_gqa_keeps_fewer_kv_heads);
    RUN(test_eos_token_id_list_is_read);
    RUN(test_too_many_eos_ids_are_rejected);
    RUN(test_eos_id_outside_vocab_is_rejected);
    RUN(test_linear_rope_scaling_sets_factor);
    RUN(test_linear_rope_scaling_without_positive_factor_is_rejected);
    RUN(test_yarn_and_other_rope_scalings_are_rejected);
    RUN(test_rope_parameters_of_transformers_5_are_read);
    RUN(test_unsupported_architecture_is_rejected);
    RUN(test_model_type_must_match_architecture);
    RUN(test_mistral_without_effective_sliding_window_is_accepted);
    RUN(test_sliding_window_smaller_than_context_is_rejected);
    RUN(test_quantization_config_awq_is_read_and_others_rejected);
    RUN(test_negative_and_zero_sizes_are_rejected);
    RUN(test_wrong_json_type_is_rejected);
    RUN(test_fractional_and_huge_sizes_are_rejected);
    RUN(test_missing_required_field_is_rejected);
    RUN(test_heads_not_divisible_by_kv_heads_are_rejected);
    RUN(test_hidden_not_divisible_by_heads_without_head_dim_is_rejected);
    RUN(test_bad_json_is_rejected_with_position);
    RUN(test_unimplemented_options_are_rejected);
    RUN(test_dtype_key_of_newer_transformers_is_read);
    RUN(test_duplicate_key_is_rejected);
    RUN(test_dtype_names_match_both_conventions);
    RUN(test_config_load_reads_model_dir);
    RUN(test_missing_config_names_path_and_reason);
    RUN(test_generation_config_eos_list_overrides_config);
    RUN(test_absent_generation_config_is_not_an_error);
    RUN(test_malformed_generation_config_is_an_error_and_keeps_config);
    return test_summary();
}
