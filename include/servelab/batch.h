/* batch.h - the flat batch: one forward step over T tokens of S sequences.
 *
 * Prefill chunks and decodes are mixed freely (docs/architecture.md, "The flat batch").
 * Attention for token t of sequence s attends to positions 0..positions[t] of
 * s, read through s's block table: one definition covers prefill, chunked
 * prefill, prefix-cache hits and decode. All arrays are host memory; the model runner
 * copies them to the backend once per step.
 */
#ifndef SERVELAB_BATCH_H
#define SERVELAB_BATCH_H

#include <stdint.h>

typedef struct {
    int32_t n_tokens;          /* T */
    int32_t n_seqs;            /* S */
    int32_t n_logits;          /* rows that produce logits (<= S) */
    int32_t max_blocks;        /* row stride of block_tables */
    int32_t *token_ids;        /* (T) */
    int32_t *positions;        /* (T) position of each token in its sequence */
    int32_t *query_start;      /* (S+1) sequence s owns tokens query_start[s] .. query_start[s+1]-1 */
    int32_t *seq_lens;         /* (S) tokens in the KV cache for s after this step */
    int64_t *slot_mapping;     /* (T) block_id * block_size + offset of each new token's K/V */
    int32_t *block_tables;     /* (S, max_blocks) KV blocks of each sequence, in order */
    int32_t *logits_index;     /* (n_logits) rows of T whose hidden state becomes logits */
} sl_batch_t;

/* Allocates the arrays for up to `max_tokens` tokens, `max_seqs` sequences
 * and `max_blocks` blocks per sequence (all counts set to 0). */
void batch_init(sl_batch_t *b, int32_t max_tokens, int32_t max_seqs, int32_t max_blocks);
void batch_free(sl_batch_t *b);

#endif
