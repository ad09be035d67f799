/* runner.h - turns a scheduler step into the flat batch the model runs.
 *
 * For each scheduled request: its next n_new tokens (from n_computed), their
 * positions and KV slots through the request's blocks, its block-table row,
 * and a logits row when the step completes everything the request knows
 * (its prompt, or the one sampled token of a decode). Pure host code.
 */
#ifndef SERVELAB_RUNNER_H
#define SERVELAB_RUNNER_H

#include "servelab/batch.h"
#include "servelab/scheduler.h"

void runner_prepare(sl_batch_t *b, const sched_output_t *so, int32_t block_size);

#endif
