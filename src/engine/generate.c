/* generate.c - one request through the flat batch: chunked prefill, then decode.
 *
 * EOS is any of the checkpoint's eos ids (config.json or generation_config.json).
 * A request also stops with "length" when it reaches max_model_len, as vLLM's
 * does. Text is produced by the streaming detokenizer, so it keeps the space in
 * front of the first generated word, as vLLM's output text does.
 */
#include "servelab/generate.h"

#include <stdlib.h>
#include <string.h>

#include "servelab/sampler.h"

int gen_init(gen_ctx_t *g, llama_model_t *model, const tokenizer_t *tok, int32_t max_model_len,
             int32_t max_num_batched_tokens, int32_t block_size, sl_err_t *err) {
    memset(g, 0, sizeof *g);
    g->model = model;
    g->tok = tok;
    g->max_model_len = max_model_len;
    g->max_num_batched_tokens = max_num_batched_tokens;
    g->block_size = block_size;
    int32_t max_blocks = (max_model_len + block_size - 1) / block_size;
    SL_ASSERT(model->max_tokens >= max_num_batched_tokens && model->max_blocks >= max_blocks);
    if (kv_cache_init(&g->kv, model, max_blocks + 1, block_size, err)) return -1;
    batch_init(&g->batch, max_num_batched_tokens, 1, max_blocks);
    for (int32_t i = 0; i < max_blocks; i++) g->batch.block_tables[i] = i + 1;
    g->logits = sl_malloc((size_t)model->cfg.vocab_size * sizeof(float));
    return 0;
}

void gen_free(gen_ctx_t *g) {
    if (g->model) kv_cache_free(&g->kv, g->model);
    batch_free(&g->batch);
    free(g->logits);
    memset(g, 0, sizeof *g);
}

/* Fills the batch with tokens [start, start + n) of `ids` and runs one step;
 * logits are produced when `want_logits`. */
static void step(gen_ctx_t *g, const int32_t *ids, int32_t start, int32_t n, bool want_logits) {
    sl_batch_t *b = &g->batch;
    b->n_tokens = n;
    b->n_seqs = 1;
    b->query_start[0] = 0;
    b->query_start[1] = n;
    b->seq_lens[0] = start + n;
    for (int32_t i = 0; i < n; i++) {
        int32_t pos = start + i;
        b->token_ids[i] = ids[pos];
        b->positions[i] = pos;
        b->slot_mapping[i] = (int64_t)b->block_tables[pos / g->block_size] * g->block_size +
                             pos % g->block_size;
    }
    b->n_logits = want_logits ? 1 : 0;
    b->logits_index[0] = n - 1;
    llama_forward(g->model, b, &g->kv, g->logits);
}

static bool is_eos(const model_config_t *c, int32_t id) {
    for (int i = 0; i < c->n_eos_token_ids; i++)
        if (c->eos_token_ids[i] == id) return true;
    return false;
}

int gen_run(gen_ctx_t *g, const int32_t *prompt_ids, int32_t n_prompt, const gen_params_t *p,
            gen_stream_fn stream, void *user, gen_output_t *out, sl_err_t *err) {
    memset(out, 0, sizeof *out);
    if (n_prompt <= 0) return sl_fail(err, "the prompt is empty");
    if (n_prompt >= g->max_model_len)
        return sl_fail(err,
                       "This model's maximum context length is %d tokens. However, your request "
                       "has %d input tokens. Please reduce the length of the input messages.",
                       g->max_model_len, n_prompt);
    const model_config_t *c = &g->model->cfg;
    int32_t cap = g->max_model_len - n_prompt;
    int32_t max_new = p->max_tokens < cap ? p->max_tokens : cap;
    int32_t *ids = sl_malloc((size_t)(n_prompt + max_new) * sizeof(int32_t));
    memcpy(ids, prompt_ids, (size_t)n_prompt * sizeof(int32_t));
    out->token_ids = sl_malloc((size_t)(max_new ? max_new : 1) * sizeof(int32_t));
    out->logprobs = sl_malloc((size_t)(max_new ? max_new : 1) * sizeof(double));
    size_t text_cap = 256, text_len = 0;
    out->text = sl_malloc(text_cap);
    out->text[0] = '\0';
    out->finish_reason = "length";

    sl_rng_t rng;
    rng_seed(&rng, p->seed);
    tok_stream_t ts;
    tok_stream_init(&ts, true);
    char piece[512];

    double t0 = sl_now_s();
    for (int32_t start = 0; start < n_prompt; start += g->max_num_batched_tokens) {
        int32_t n = n_prompt - start < g->max_num_batched_tokens ? n_prompt - start
                                                                  : g->max_num_batched_tokens;
        step(g, ids, start, n, start + n == n_prompt);
    }
    double t1 = sl_now_s();
    int32_t len = n_prompt;
    while (out->n < max_new) {
        int32_t next = sampler_sample(g->logits, c->vocab_size, p->temperature, &rng);
        out->logprobs[out->n] = sampler_logprob(g->logits, c->vocab_size, next);
        out->token_ids[out->n++] = next;
        ids[len++] = next;
        bool stop = !p->ignore_eos && is_eos(c, next);
        if (!stop) {
            int k = tok_stream_push(g->tok, &ts, next, piece, sizeof piece);
            if (k > 0) {
                if (text_len + (size_t)k + 1 > text_cap) {
                    text_cap = 2 * (text_len + (size_t)k + 1);
                    out->text = sl_realloc(out->text, text_cap);
                }
                memcpy(out->text + text_len, piece, (size_t)k);
                out->text[text_len += (size_t)k] = '\0';
                if (stream) stream(user, piece, k);
            }
        }
        if (stop) {
            out->finish_reason = "stop";
            break;
        }
        if (out->n == max_new) break;
        step(g, ids, len - 1, 1, true);
    }
    int k = tok_stream_flush(&ts, piece, sizeof piece);
    if (k > 0) {
        out->text = sl_realloc(out->text, text_len + (size_t)k + 1);
        memcpy(out->text + text_len, piece, (size_t)k);
        out->text[text_len + (size_t)k] = '\0';
        if (stream) stream(user, piece, k);
    }
    out->prefill_s = t1 - t0;
    out->decode_s = sl_now_s() - t1;
    free(ids);
    return 0;
}

void gen_output_free(gen_output_t *out) {
    free(out->token_ids);
    free(out->logprobs);
    free(out->text);
    memset(out, 0, sizeof *out);
}
