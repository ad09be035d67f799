/* request.h - one sequence's state as the engine sees it.
 *
 * A request with n > 1 is fanned out at submission into n sequences (as vLLM
 * V1 does), each a request_t sharing the client's output stream; with prefix
 * caching on, siblings share the prompt's full KV blocks through the cache.
 * Lifecycle: WAITING -> RUNNING -> FINISHED; preemption (recompute) moves a
 * RUNNING request back to the front of WAITING with its blocks freed and
 * n_computed reset to 0, keeping its generated tokens.
 */
#ifndef SERVELAB_REQUEST_H
#define SERVELAB_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "servelab/detok.h"
#include "servelab/kv_pool.h"
#include "servelab/rng.h"
#include "servelab/sampling.h"

typedef enum { REQ_WAITING, REQ_RUNNING, REQ_FINISHED } req_status_t;

typedef enum {
    FINISH_NONE = 0,
    FINISH_STOP,    /* EOS, stop string or stop token id */
    FINISH_LENGTH,  /* max_tokens or max_model_len */
    FINISH_ABORT,   /* client went away or asked */
    FINISH_ERROR,
} finish_reason_t;

/* "stop", "length", "abort", "error" (NULL for FINISH_NONE). */
const char *finish_reason_str(finish_reason_t f);

struct engine_stream;

typedef struct request {
    int32_t index;              /* choice index within its client request (n > 1) */
    req_status_t status;
    int32_t *tokens;            /* (n_tokens) prompt, then generated tokens */
    int32_t n_prompt, n_tokens, cap;
    int32_t n_computed;         /* tokens whose K/V are in the cache */
    int32_t n_spec;             /* speculative drafts, at tokens[n_tokens .. n_tokens + n_spec) (spec_decode.h) */
    int32_t max_tokens;         /* generated-token limit, already capped by max_model_len */
    kv_seq_blocks_t blocks;
    sampling_params_t params;
    sl_rng_t rng;
    detok_t detok;
    finish_reason_t finish;
    int32_t stop_index;         /* matched stop string, or -1 */
    int32_t stop_token;         /* matched stop token id (not EOS), or -1 */
    int32_t n_preemptions;
    int32_t n_cached_prompt;    /* prompt tokens served from the prefix cache at first admission */
    bool scheduled_once;
    /* Timestamps, seconds on the monotonic clock (0 = not yet): arrival at the
     * server, queued in the scheduler, first scheduled, first and last token. */
    double t_arrival, t_queued, t_first_scheduled, t_first_token, t_last_token, t_finished;
    char *request_id;           /* for log lines (shared by the n sequences of one request) */
    uint64_t seq_no;            /* the engine's sequence number, in submission order (trace tracks) */
    struct engine_stream *stream;
} request_t;

/* Number of generated tokens so far. */
static inline int32_t request_n_output(const request_t *r) { return r->n_tokens - r->n_prompt; }

/* Appends a token (grows the array). It overwrites the first draft, if any. */
void request_append(request_t *r, int32_t token);
/* Sets r's drafts to drafts[0 .. n) (n = 0 clears them; grows the array). */
void request_set_drafts(request_t *r, const int32_t *drafts, int32_t n);

#endif
