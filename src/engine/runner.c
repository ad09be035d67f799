/* runner.c - scheduler output to flat batch (see runner.h). */
#include "servelab/runner.h"

#include <string.h>

void runner_prepare(sl_batch_t *b, const sched_output_t *so, int32_t B) {
    b->n_tokens = b->n_seqs = b->n_logits = 0;
    for (int32_t s = 0; s < so->n; s++) {
        const request_t *r = so->reqs[s];
        int32_t t0 = b->n_tokens, start = r->n_computed, n = so->n_new[s];
        for (int32_t i = 0; i < n; i++) {
            int32_t pos = start + i;
            b->token_ids[t0 + i] = r->tokens[pos];
            b->positions[t0 + i] = pos;
            b->slot_mapping[t0 + i] = (int64_t)r->blocks.ids[pos / B] * B + pos % B;
        }
        b->n_tokens += n;
        b->query_start[s] = t0;
        b->query_start[s + 1] = b->n_tokens;
        b->seq_lens[s] = start + n;
        int32_t *row = b->block_tables + (size_t)s * (size_t)b->max_blocks;
        memcpy(row, r->blocks.ids, (size_t)r->blocks.n * sizeof *row);
        if (start + n == r->n_tokens) b->logits_index[b->n_logits++] = b->n_tokens - 1;
    }
    b->n_seqs = so->n;
}
