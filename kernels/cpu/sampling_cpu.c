/* sampling_cpu.c - vLLM V1's sampling pipeline on one resolved row of logits:
 * the CPU twin of kernels/cuda/sampling.cu.
 *
 * What: on a sampling_row_t (sample_row.h: the request's parameters already
 * resolved by the engine, the draw u included): min_tokens mask, logit_bias,
 * penalties, then greedy or temperature, min_p, top_k, top_p and an
 * inverse-CDF draw of u; raw logprobs. The CPU backend's `sample` op runs it
 * on each row (cpu_backend.c), and the device sampler is tested against it.
 * Why this way: a row at a time keeps a request's tokens independent of its
 * batch; the common case (top_k and top_p off) is a few O(V) passes without
 * allocation; top_k is one heap pass and top_p a quickselect over the few
 * tokens that can matter, never a sort of the vocabulary.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ops_cpu.h"
#include "servelab/core.h"

/* A resolved temperature below this is greedy (the engine writes 0 for greedy
 * rows; vLLM's _SAMPLING_EPS). */
#define CPU_SAMPLE_GREEDY_EPS 1e-5f

void cpu_sample_scratch_init(cpu_sample_scratch_t *s, int64_t V) {
    SL_ASSERT(V > 0);
    s->V = V;
    s->work = sl_malloc((size_t)V * sizeof(float));
    s->idx = sl_malloc((size_t)V * sizeof(int32_t));
    /* Zero between calls: cpu_sample sets and resets only the entries of the history. */
    s->counts = sl_calloc((size_t)V, sizeof(uint32_t));
    s->in_prompt = sl_calloc((size_t)V, sizeof(uint8_t));
}

void cpu_sample_scratch_free(cpu_sample_scratch_t *s) {
    free(s->work);
    free(s->idx);
    free(s->counts);
    free(s->in_prompt);
    memset(s, 0, sizeof *s);
}

/* ---- logits processing (the part greedy sees too) --------------------------- */

static void mask_ids(float *w, int64_t V, const int32_t *ids, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < V) w[ids[i]] = -INFINITY;
}

/* In the order of the ids (a repeated id adds twice, in that order). */
static void add_bias(float *w, int64_t V, const int32_t *ids, const float *bias, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < V) w[ids[i]] += bias[i];
}

/* Repetition penalty over prompt + output, each distinct token once (HF and
 * vLLM: positive logits divided, others multiplied); then frequency
 * (count × penalty) and presence penalties over output tokens only (OpenAI's
 * definition). Touches only the history's entries of the scratch and leaves
 * them zero again, so the cost is O(len(prompt) + len(output)). Ids outside
 * [0, V) are ignored: no logit to change. */
static void apply_penalties(const sampling_row_t *p, float *w, int64_t V, const int32_t *prompt,
                            int32_t n_prompt, const int32_t *output, int32_t n_output,
                            cpu_sample_scratch_t *s) {
    bool rep = p->repetition_penalty != 1.0f, freq = p->frequency_penalty != 0.0f,
         pres = p->presence_penalty != 0.0f;
    if (!rep && !freq && !pres) return;
    uint8_t *seen = s->in_prompt; /* 1: in the history, 2: repetition penalty applied */
    uint32_t *cnt = s->counts;
#define IN_VOCAB(t) ((t) >= 0 && (t) < V)
    for (int32_t i = 0; i < n_prompt; i++)
        if (IN_VOCAB(prompt[i])) seen[prompt[i]] = 1;
    for (int32_t i = 0; i < n_output; i++)
        if (IN_VOCAB(output[i])) seen[output[i]] = 1, cnt[output[i]]++;
    if (rep) {
        float r = p->repetition_penalty;
        for (int pass = 0; pass < 2; pass++) {
            const int32_t *h = pass ? output : prompt;
            for (int32_t i = 0, n = pass ? n_output : n_prompt; i < n; i++) {
                int32_t t = h[i];
                if (!IN_VOCAB(t) || seen[t] != 1) continue;
                w[t] = w[t] > 0.0f ? w[t] / r : w[t] * r;
                seen[t] = 2;
            }
        }
    }
    for (int32_t i = 0; i < n_output; i++) {
        int32_t t = output[i];
        if (!IN_VOCAB(t) || !cnt[t]) continue;
        /* Two float32 subtractions, in vLLM's order. */
        if (freq) w[t] -= p->frequency_penalty * (float)cnt[t];
        if (pres) w[t] -= p->presence_penalty;
        cnt[t] = 0;
    }
    for (int32_t i = 0; i < n_prompt; i++)
        if (IN_VOCAB(prompt[i])) seen[prompt[i]] = 0;
    for (int32_t i = 0; i < n_output; i++)
        if (IN_VOCAB(output[i])) seen[output[i]] = 0;
#undef IN_VOCAB
}

/* ---- selection (top_k, top_p) ----------------------------------------------- */

/* The total order of candidates: higher logit first, lower id first on ties.
 * It makes every selection below deterministic and tie-breaking explicit. */
static inline bool ranks_before(const float *w, int32_t a, int32_t b) {
    return w[a] > w[b] || (w[a] == w[b] && a < b);
}

static inline void swap_i32(int32_t *x, int32_t *y) {
    int32_t t = *x;
    *x = *y;
    *y = t;
}

/* Partitions idx[lo, hi) around a median-of-three pivot: what ranks before it,
 * then the pivot (its final position is returned), then the rest. */
static int64_t partition(int32_t *idx, int64_t lo, int64_t hi, const float *w) {
    int64_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (ranks_before(w, idx[mid], idx[lo])) swap_i32(&idx[mid], &idx[lo]);
    if (ranks_before(w, idx[last], idx[lo])) swap_i32(&idx[last], &idx[lo]);
    if (ranks_before(w, idx[mid], idx[last])) swap_i32(&idx[mid], &idx[last]);
    int32_t pivot = idx[last]; /* now the median of the three */
    int64_t store = lo;
    for (int64_t j = lo; j < last; j++)
        if (ranks_before(w, idx[j], pivot)) swap_i32(&idx[store++], &idx[j]);
    swap_i32(&idx[store], &idx[last]);
    return store;
}

/* The key the top_k selection ranks by: a NaN counts as -inf, so it never
 * takes one of the k places from a number (the device sampler's rule too). */
static inline float sel_key(float x) { return x != x ? -INFINITY : x; }

/* The k-th largest value of w[0, V) (1 <= k <= V), with a min-heap of the k
 * best ids in heap[0, k). Most values lose one comparison against the heap's
 * minimum, kept in a register, so it is one streaming pass: expected
 * O(V + k log k log(V/k)), no sort, no second array of V. */
static float kth_largest(const float *w, int64_t V, int64_t k, int32_t *heap) {
    int64_t n = 0;
    for (int64_t i = 0; i < V && n < k; i++) { /* the first k, sifted up */
        int64_t c = n++;
        float v = sel_key(w[i]);
        while (c > 0 && sel_key(w[heap[(c - 1) / 2]]) > v) heap[c] = heap[(c - 1) / 2], c = (c - 1) / 2;
        heap[c] = (int32_t)i;
    }
    float top = sel_key(w[heap[0]]);
    for (int64_t i = k; i < V; i++) {
        float v = sel_key(w[i]);
        if (!(v > top)) continue;
        int64_t c = 0; /* replace the minimum, sift down */
        for (;;) {
            int64_t l = 2 * c + 1, r = l + 1, m = c;
            float least = v;
            if (l < k && sel_key(w[heap[l]]) < least) m = l, least = sel_key(w[heap[l]]);
            if (r < k && sel_key(w[heap[r]]) < least) m = r;
            if (m == c) break;
            heap[c] = heap[m];
            c = m;
        }
        heap[c] = (int32_t)i;
        top = sel_key(w[heap[0]]);
    }
    return top;
}

/* top_p on candidates idx[0, m) with weights w > 0 (exp(logit - max)):
 * returns c such that, in rank order, the first c candidates are the
 * smallest set whose weight reaches `target` (top_p of the total: vLLM drops
 * the tail whose cumulative probability is <= 1 - top_p; the best token
 * always stays), and partitions idx so that those c come first. Quickselect
 * on the cumulative weight, expected O(m); the sums are in double. */
static int64_t top_p_cut(int32_t *idx, int64_t m, const float *w, double target) {
    double acc = 0.0;         /* weight of idx[0, lo), all kept, < target */
    int64_t lo = 0, hi = m;   /* the cut lies in (lo, hi] */
    while (lo < hi) {
        int64_t q = partition(idx, lo, hi, w);
        double before = 0.0; /* weight of idx[lo, q): what ranks before the pivot */
        for (int64_t j = lo; j < q; j++) before += w[idx[j]];
        if (acc + before >= target)
            hi = q; /* reached without the pivot: the cut is before it */
        else if (acc + before + w[idx[q]] >= target)
            return q + 1;
        else
            acc += before + w[idx[q]], lo = q + 1;
    }
    return hi; /* only by rounding: acc summed in another order fell short */
}

/* ---- the draw --------------------------------------------------------------- */

/* argmax, first index on ties (torch.argmax's rule), with the running
 * maximum kept in a register: this is on the hot path of every request. */
static int64_t argmax(const float *w, int64_t V) {
    int64_t best = 0;
    float bv = w[0];
    for (int64_t i = 1; i < V; i++)
        if (w[i] > bv) bv = w[i], best = i;
    return best;
}

/* The draw of row p (not greedy) on processed logits w, which end up as the
 * kept tokens' weights (0: not drawable). */
static int32_t sample_random(const sampling_row_t *p, float *w, int64_t V, cpu_sample_scratch_t *s) {
    float T = p->temperature;
    if (T != 1.0f)
        for (int64_t i = 0; i < V; i++) w[i] /= T; /* float32 division, as vLLM's logits.div_ */
    int64_t best = argmax(w, V);
    float mx = w[best];
    if (!(mx > -INFINITY)) return (int32_t)best; /* nothing can be drawn: every token masked */

    if (p->min_p > 0.0f) {
        /* p_i >= min_p * p_max  <=>  logit_i - max >= log(min_p). */
        double log_min_p = log((double)p->min_p);
        for (int64_t i = 0; i < V; i++)
            if ((double)w[i] - mx < log_min_p) w[i] = -INFINITY;
    }
    /* vLLM keeps every token >= the k-th value: ties at the boundary stay.
     * (A k-th value of -inf, fewer than k tokens left, keeps them all.) */
    float kth = p->top_k > 0 && p->top_k < V ? kth_largest(w, V, p->top_k, s->idx) : -INFINITY;

    /* From here w holds weights exp(logit - max) in float32 as vLLM's softmax
     * (0: not drawable); sums are in double. */
    double total = 0.0;
    for (int64_t i = 0; i < V; i++) {
        w[i] = w[i] >= kth && w[i] > -INFINITY ? expf(w[i] - mx) : 0.0f;
        total += w[i];
    }
    if (p->top_p < 1.0f) {
        /* The V tokens of weight <= low weigh at most (1 - top_p) * total
         * together, so the others reach top_p: the cut is among them, which
         * are few for a peaked distribution. */
        float low = (float)((1.0 - p->top_p) * total / (double)V);
        int32_t *idx = s->idx;
        int64_t m = 0;
        for (int64_t i = 0; i < V; i++) {
            if (w[i] > low)
                idx[m++] = (int32_t)i;
            else
                w[i] = 0.0f;
        }
        for (int64_t j = top_p_cut(idx, m, w, (double)p->top_p * total); j < m; j++) w[idx[j]] = 0.0f;
        total = 0.0;
        for (int64_t i = 0; i < V; i++) total += w[i];
    }

    /* Inverse CDF over the kept tokens in id order, both passes summing the
     * same floats in the same order, so the draw lands on a kept token. */
    double u = p->u * total, run = 0.0;
    int64_t last = best;
    for (int64_t i = 0; i < V; i++) {
        if (w[i] == 0.0f) continue;
        run += w[i];
        last = i;
        if (u < run) return (int32_t)i;
    }
    return (int32_t)last; /* u reached the total by rounding: the last kept token */
}

/* ---- logprobs ----------------------------------------------------------------- */

/* vLLM's raw logprobs: log_softmax of the model's logits, the chosen token's
 * value and rank, and the n_top best (logit descending, lower id first). */
static void raw_logprobs(const float *logits, int64_t V, int32_t token, int n_top, sample_result_t *out) {
    float mx = logits[argmax(logits, V)];
    double sum = 0.0; /* float32 terms as vLLM's log_softmax, summed in double */
    for (int64_t i = 0; i < V; i++) sum += expf(logits[i] - mx);
    double lse = mx + log(sum);
    float lt = logits[token];
    int32_t rank = 1;
    int n = 0;
    for (int64_t i = 0; i < V; i++) {
        float x = logits[i];
        rank += x > lt;
        /* Ids come in increasing order, so an equal value ranks after what is there. */
        if (n_top == 0 || (n == n_top && !(x > logits[out->top_ids[n - 1]]))) continue;
        if (isnan(x)) continue;
        int j = n < n_top ? n++ : n - 1;
        while (j > 0 && x > logits[out->top_ids[j - 1]]) {
            out->top_ids[j] = out->top_ids[j - 1];
            j--;
        }
        out->top_ids[j] = (int32_t)i;
    }
    out->n_top = n;
    for (int j = 0; j < n; j++) out->top_logprobs[j] = (float)((double)logits[out->top_ids[j]] - lse);
    out->logprob = (float)((double)lt - lse);
    out->rank = rank;
}

/* ---- the pipeline ------------------------------------------------------------- */

void cpu_sample(const sampling_row_t *row, const int32_t *ids, const float *bias, const float *logits,
                   int64_t V, cpu_sample_scratch_t *scratch, sample_result_t *out) {
    SL_ASSERT(V > 0 && scratch->V >= V);
    memset(out, 0, sizeof *out);
    float *w = scratch->work;
    memcpy(w, logits, (size_t)V * sizeof(float));

    mask_ids(w, V, ids + row->mask_off, row->n_mask);
    add_bias(w, V, ids + row->bias_off, bias + row->bias_off, row->n_bias);
    const int32_t *hist = ids + row->hist_off;
    apply_penalties(row, w, V, hist, row->n_prompt, hist + row->n_prompt, row->n_output, scratch);

    out->token = row->temperature < CPU_SAMPLE_GREEDY_EPS ? (int32_t)argmax(w, V) : sample_random(row, w, V, scratch);
    if (row->n_logprobs >= 0)
        raw_logprobs(logits, V, out->token, row->n_logprobs < SAMPLING_MAX_LOGPROBS ? row->n_logprobs
                                                                                   : SAMPLING_MAX_LOGPROBS, out);
}
