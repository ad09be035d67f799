/* metrics.c - per-request outputs to vLLM's aggregates (vllm/benchmarks/serve.py,
 * calculate_metrics), one definition per figure:
 *   output tokens   usage.completion_tokens of the final stream event; when a server sends
 *                   no usage the caller re-tokenizes the text; failing that, the number
 *                   of choice events (vLLM would count 1)
 *   TPOT            per request (E2EL - TTFT) / (output - 1), only when output > 1
 *   ITL             every gap between choice events, all requests pooled
 *   goodput         requests meeting every --goodput objective (TPOT taken as 0 for
 *                   one-token outputs), per second of the run
 *   peak output     tokens per one-second bucket counted from the earliest start, each
 *   throughput      choice event counting one token at start + ttft + cumulative ITLs
 *   peak concurrency  an exact sweep over [start, start + latency) intervals (the newest
 *                   vLLM; older ones took the busiest one-second bucket)
 * Distributions are over successful requests, in seconds, scaled to ms after the
 * statistics, as vLLM does.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

void bench_output_free(bench_output_t *o) {
    free(o->itl);
    free(o->text);
    free(o->error);
    memset(o, 0, sizeof *o);
}

typedef struct {
    double *v;
    int64_t n;
} vec_t;

static void push(vec_t *x, double v) { x->v[x->n++] = v; }

static void dist(bench_dist_t *d, vec_t *x, const bench_args_t *a) {
    bench_sort(x->v, x->n);
    d->present = true;
    d->mean = bench_mean(x->v, x->n) * 1000.0;
    d->median = bench_median(x->v, x->n) * 1000.0;
    d->std = bench_std(x->v, x->n) * 1000.0;
    for (int k = 0; k < a->n_pcts; k++) d->pct[k] = bench_percentile(x->v, x->n, a->pcts[k]) * 1000.0;
}

typedef struct {
    double t;
    int delta;
} sweep_t;

static int cmp_sweep(const void *pa, const void *pb) {
    const sweep_t *x = pa, *y = pb;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->delta - y->delta; /* an end (-1) before a start (+1) at the same instant */
}

static void peaks(const bench_output_t *o, int64_t n, bench_metrics_t *m) {
    double t0 = INFINITY, t1 = -INFINITY;
    int64_t n_ok = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!o[i].success) continue;
        n_ok++;
        if (o[i].start_time < t0) t0 = o[i].start_time;
        if (o[i].start_time + o[i].latency > t1) t1 = o[i].start_time + o[i].latency;
    }
    if (n_ok == 0) return;
    int64_t n_buckets = (int64_t)ceil(t1 - t0) + 1;
    double *per_s = sl_calloc((size_t)n_buckets, sizeof *per_s);
    sweep_t *ev = sl_malloc((size_t)(2 * n_ok) * sizeof *ev);
    int64_t n_ev = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!o[i].success) continue;
        double t = o[i].start_time + o[i].ttft;
        for (int64_t k = -1; k < o[i].n_itl; k++) {
            if (k >= 0) t += o[i].itl[k];
            int64_t b = (int64_t)(t - t0);
            if (b >= 0 && b < n_buckets) per_s[b] += 1.0;
        }
        ev[n_ev++] = (sweep_t){o[i].start_time, +1};
        ev[n_ev++] = (sweep_t){o[i].start_time + o[i].latency, -1};
    }
    for (int64_t b = 0; b < n_buckets; b++)
        if (per_s[b] > m->max_output_tokens_per_s) m->max_output_tokens_per_s = per_s[b];
    qsort(ev, (size_t)n_ev, sizeof *ev, cmp_sweep);
    int64_t cur = 0;
    for (int64_t k = 0; k < n_ev; k++) {
        cur += ev[k].delta;
        if (cur > m->max_concurrent_requests) m->max_concurrent_requests = cur;
    }
    free(per_s);
    free(ev);
}

void bench_metrics_compute(const bench_output_t *o, int64_t n, double duration_s, const bench_args_t *a,
                           bench_metrics_t *m) {
    memset(m, 0, sizeof *m);
    m->output_lens = sl_calloc((size_t)(n > 0 ? n : 1), sizeof *m->output_lens);
    int64_t n_itl = 0;
    for (int64_t i = 0; i < n; i++)
        if (o[i].success) n_itl += o[i].n_itl;
    size_t cap = (size_t)(n > 0 ? n : 1) * sizeof(double);
    vec_t v[BM_N], all_tpots = {sl_malloc(cap), 0};
    for (int k = 0; k < BM_N; k++) v[k] = (vec_t){sl_malloc(k == BM_ITL ? (size_t)(n_itl + 1) * sizeof(double) : cap), 0};
    for (int64_t i = 0; i < n; i++) {
        if (!o[i].success) {
            m->failed++;
            continue;
        }
        int64_t out = o[i].output_tokens ? o[i].output_tokens : 1 + o[i].n_itl;
        m->output_lens[i] = out;
        m->total_output += out;
        m->total_input += o[i].prompt_len;
        double tpot = 0.0;
        if (out > 1) {
            tpot = (o[i].latency - o[i].ttft) / (double)(out - 1);
            push(&v[BM_TPOT], tpot);
        }
        push(&all_tpots, tpot);
        for (int64_t k = 0; k < o[i].n_itl; k++) push(&v[BM_ITL], o[i].itl[k]);
        push(&v[BM_TTFT], o[i].ttft);
        push(&v[BM_E2EL], o[i].latency);
        push(&v[BM_QUEUE], o[i].queue_time);
        push(&v[BM_E2EL_Q], o[i].latency + o[i].queue_time);
        m->completed++;
    }
    if (a->goodput_on) {
        int64_t good = 0;
        for (int64_t j = 0; j < m->completed; j++) {
            double got[3] = {v[BM_TTFT].v[j], all_tpots.v[j], v[BM_E2EL].v[j]};
            bool ok = true;
            for (int k = 0; k < 3; k++)
                if (!isnan(a->goodput_ms[k]) && !(a->goodput_ms[k] / 1000.0 >= got[k])) ok = false;
            good += ok;
        }
        m->request_goodput = (double)good / duration_s;
    }
    m->request_throughput = (double)m->completed / duration_s;
    m->output_throughput = (double)m->total_output / duration_s;
    m->total_token_throughput = (double)(m->total_input + m->total_output) / duration_s;
    peaks(o, n, m);
    for (int k = 0; k < BM_N; k++) {
        bool want = a->metric_on[k];
        if (k == BM_QUEUE) want = want && a->max_concurrency > 0;
        if (k == BM_E2EL_Q) want = want && a->max_concurrency > 0 && !isinf(a->request_rate);
        if (want) dist(&m->dist[k], &v[k], a);
        free(v[k].v);
    }
    free(all_tpots.v);
}

void bench_metrics_free(bench_metrics_t *m) {
    free(m->output_lens);
    m->output_lens = NULL;
}
