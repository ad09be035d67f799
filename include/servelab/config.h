/* config.h - a Hugging Face config.json for LlamaForCausalLM / MistralForCausalLM.
 *
 * Every field the forward pass depends on is read and checked; an unsupported
 * architecture or option is an error naming the field, never a silent misread.
 * Fields that only change behaviour we do not implement (sliding_window smaller
 * than max_position_embeddings, rope_scaling other than linear, attention or
 * MLP biases, hidden_act other than silu) are rejected.
 */
#ifndef SERVELAB_CONFIG_H
#define SERVELAB_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "servelab/core.h"
#include "servelab/dtype.h"

#define CONFIG_MAX_EOS 8
#define CONFIG_MAX_NOT_CONVERT 16

/* The checkpoint's quantization (quantization_config, or vLLM's
 * quant_config.json / quantize_config.json next to config.json). */
typedef enum { QUANT_NONE, QUANT_AWQ } quant_method_t;

typedef struct {
    quant_method_t method;
    int32_t bits;           /* 4 */
    int32_t group_size;     /* input rows per group; -1: the whole input */
    /* modules_to_not_convert: a linear whose name contains one of these stays
     * unquantized (vLLM's is_layer_skipped_awq). */
    char not_convert[CONFIG_MAX_NOT_CONVERT][96];
    int n_not_convert;
} quant_config_t;

typedef struct {
    char architecture[64];  /* "LlamaForCausalLM" or "MistralForCausalLM" */
    int64_t vocab_size;     /* V */
    int64_t hidden_size;    /* hidden */
    int64_t intermediate_size;
    int64_t n_layers;       /* L */
    int64_t n_heads;        /* H */
    int64_t n_kv_heads;     /* Hkv; H % Hkv == 0 */
    int64_t head_dim;       /* D; hidden_size / H unless config.json says */
    int64_t max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    double rope_scaling_factor; /* 1.0 when rope_scaling is null; linear factor otherwise */
    bool tie_word_embeddings;
    sl_dtype_t torch_dtype;     /* the checkpoint's declared dtype */
    int32_t bos_token_id;       /* -1 when absent */
    int32_t eos_token_ids[CONFIG_MAX_EOS];
    int n_eos_token_ids;
    quant_config_t quant;
} model_config_t;

/* Whether the linear called `name` ("model.layers.0.self_attn.q_proj") is
 * quantized in a checkpoint of cfg. */
bool config_linear_quantized(const model_config_t *cfg, const char *name);

/* Parses `json` (the text of a config.json; `path` is only used in messages).
 * Returns 0, or -1 with one line in `err` naming the file and the field. */
int config_parse(const char *json, const char *path, model_config_t *cfg, sl_err_t *err);

/* Reads and parses MODEL_DIR/config.json; without a quantization_config in
 * it, MODEL_DIR/quant_config.json or quantize_config.json when present. */
int config_load(const char *model_dir, model_config_t *cfg, sl_err_t *err);

/* Merges generation_config.json's bos/eos ids into `cfg` when the file exists
 * (eos_token_id there may be a list, and wins over config.json's). */
int config_load_generation(const char *model_dir, model_config_t *cfg, sl_err_t *err);

#endif
