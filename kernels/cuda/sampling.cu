/* sampling.cu - cpu_sample (kernels/cpu/sampling_cpu.c) on the device: one
 * thread block of 1024 per row of logits, everything in global memory.
 *
 * Per row: copy the logits to the work row; min_tokens mask, logit_bias,
 * penalties (history counted with atomics into the all-zero uint32 scratch
 * row, each distinct token then claimed by one thread with atomicExch, which
 * also leaves the scratch zero); then greedy (argmax, first index on ties)
 * or temperature, min_p, top_k, top_p and the inverse-CDF draw of row.u;
 * then the raw logprobs. top_k, top_p and the top logprobs each find their
 * boundary with a radix select (11, 11, 10 bits) over order-preserving keys,
 * with shared-memory histograms of counts (and double weight sums for top_p):
 * never a sort. Ties at a boundary that keeps only some of them (top_p, top
 * logprobs) go to the lowest ids, found by a block scan of per-thread
 * contiguous chunks; the draw scans the same chunks. Every float32 operation
 * is the CPU's (IEEE __f*_rn intrinsics, no contraction; exp evaluated in
 * double and rounded to float, as glibc's expf); only double sums run in
 * another order, which can move a draw or a top_p cut that falls within
 * rounding of a boundary to the neighbouring token.
 */
#include "common.cuh"
#include "kernels.h"

namespace {

constexpr int THREADS = 1024, WARPS = THREADS / 32;
constexpr unsigned FULL = 0xffffffffu;
constexpr int BINS = 2048; /* radix digits of 11, 11 and 10 bits */

/* What a radix select found: the boundary key, how many selected elements
 * lie above it (and their weight), how many are equal to it. */
struct Cut {
    uint32_t key, n_gt, n_eq;
    double mass_gt;
};

struct Shared {
    uint32_t cnt[BINS];
    double mass[BINS];
    unsigned long long red[WARPS]; /* block reductions and scans */
    Cut cut;                       /* a radix pass's result, broadcast */
    int32_t token;                 /* the draw's owner writes it */
    int32_t n_top;
    int32_t top_ids[SAMPLING_MAX_LOGPROBS];
};

/* ---- keys and block-wide helpers -------------------------------------------- */

/* Order-preserving key of a float: larger value, larger key; -0 as +0; NaN 0 (below -inf). */
__device__ __forceinline__ uint32_t fkey(float x) {
    if (x != x) return 0u;
    const uint32_t u = __float_as_uint(x == 0.0f ? 0.0f : x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_float(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

/* The CPU's float to double weight: exp evaluated in double, rounded once (glibc's expf). */
__device__ __forceinline__ float exp_f32(float x) { return (float)exp((double)x); }

__device__ __forceinline__ int lane_id() { return (int)(threadIdx.x & 31); }
__device__ __forceinline__ int warp_id() { return (int)(threadIdx.x >> 5); }

struct Sum {
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a > b ? a : b; }
};

/* op over the block; every thread gets the same value (butterflies are
 * symmetric and the warps' results are combined in one order). Every thread
 * must call it; the leading barrier keeps a previous call's readers ahead. */
template <typename T, typename Op> __device__ T block_reduce(Shared &sm, T v, Op op) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(FULL, v, o));
    T *buf = reinterpret_cast<T *>(sm.red);
    __syncthreads();
    if (lane_id() == 0) buf[warp_id()] = v;
    __syncthreads();
    T r = buf[0];
    for (int w = 1; w < WARPS; w++) r = op(r, buf[w]);
    return r;
}

/* Exclusive and inclusive prefix sums of v over threads, and the total, such
 * that thread t's inclusive sum is bit for bit thread t + 1's exclusive sum
 * (so the intervals [excl, incl) tile [0, total) even in double). */
template <typename T> struct Scan {
    T excl, incl, total;
};
template <typename T> __device__ Scan<T> block_scan(Shared &sm, T v) {
    const int lane = lane_id(), warp = warp_id();
    T incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const T n = __shfl_up_sync(FULL, incl, o);
        if (lane >= o) incl += n;
    }
    T excl = __shfl_up_sync(FULL, incl, 1);
    if (lane == 0) excl = T(0);
    T *buf = reinterpret_cast<T *>(sm.red);
    __syncthreads();
    if (lane == 31) buf[warp] = incl;
    __syncthreads();
    T before = T(0), total = T(0);
    for (int w = 0; w < WARPS; w++) {
        if (w == warp) before = total;
        total += buf[w];
    }
    return {before + excl, before + incl, total};
}

/* argmax of x (V), first index on ties, NaN never the maximum, but index 0
 * when x[0] is NaN: the CPU's loop `if (x[i] > best)` from x[0]. Reads x
 * in the strided layout (each element by the thread that wrote it last). */
struct ArgMax {
    int64_t index;
    float value;
};
__device__ ArgMax block_argmax(Shared &sm, const float *x, int64_t V) {
    unsigned long long best = 0;
    for (int64_t i = threadIdx.x; i < V; i += THREADS) {
        /* A NaN at 0 gets the top key, whose value reads back as NaN. */
        const uint32_t fk = i == 0 && x[0] != x[0] ? 0xffffffffu : fkey(x[i]);
        const unsigned long long k = ((unsigned long long)fk << 32) | (0xffffffffu - (uint32_t)i);
        best = k > best ? k : best;
    }
    best = block_reduce(sm, best, Max());
    /* The value comes from the key, not from x: its owner may be rewriting x by now. */
    return {(int64_t)(0xffffffffu - (uint32_t)best), key_float((uint32_t)(best >> 32))};
}

/* This thread's contiguous chunk [lo, hi) of V: the layout of every pass
 * that needs id order across threads (ties, the draw). */
__device__ __forceinline__ void chunk(int64_t V, int64_t &lo, int64_t &hi) {
    const int64_t c = (V + THREADS - 1) / THREADS;
    lo = (int64_t)threadIdx.x * c < V ? (int64_t)threadIdx.x * c : V;
    hi = lo + c < V ? lo + c : V;
}

/* ---- radix select ----------------------------------------------------------- */

/* Warp 0: the bin of this pass where the selected mass, counted from the
 * highest bin down after `acc` above, reaches target (count mode: mass =
 * count). The first lane that sees it claims it; if rounding leaves target
 * unreached, the lowest non-empty bin. Writes sm.cut (bin in .key). */
template <bool WEIGHTED> __device__ void find_bin(Shared &sm, int nb, double target, const Cut &acc) {
    const int lane = lane_id(), per = nb / 32, hi = nb - 1 - lane * per;
    double s = 0.0;
    uint32_t c = 0;
    for (int j = 0; j < per; j++) {
        const uint32_t n = sm.cnt[hi - j];
        c += n;
        s += WEIGHTED ? sm.mass[hi - j] : (double)n;
    }
    double s_incl = s;
    uint32_t c_incl = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const double ns = __shfl_up_sync(FULL, s_incl, o);
        const uint32_t nc = __shfl_up_sync(FULL, c_incl, o);
        if (lane >= o) s_incl += ns, c_incl += nc;
    }
    double run = acc.mass_gt + (s_incl - s);
    uint32_t crun = acc.n_gt + (c_incl - c);
    Cut found = {0u, 0u, 0u, 0.0}, last = found;
    bool has_found = false, has_last = false;
    for (int j = 0; j < per; j++) {
        const int b = hi - j;
        const uint32_t n = sm.cnt[b];
        if (!n) continue;
        const double m = WEIGHTED ? sm.mass[b] : (double)n;
        if (!has_found && run < target && run + m >= target) found = {(uint32_t)b, crun, n, run}, has_found = true;
        last = {(uint32_t)b, crun, n, run}, has_last = true;
        run += m, crun += n;
    }
    const unsigned claims = __ballot_sync(FULL, has_found), nonempty = __ballot_sync(FULL, has_last);
    const int src = claims ? __ffs((int)claims) - 1 : nonempty ? 31 - __clz((int)nonempty) : 0;
    const Cut mine = claims ? found : last;
    Cut r;
    r.key = __shfl_sync(FULL, mine.key, src);
    r.n_gt = __shfl_sync(FULL, mine.n_gt, src);
    r.n_eq = __shfl_sync(FULL, mine.n_eq, src);
    r.mass_gt = __shfl_sync(FULL, mine.mass_gt, src);
    if (lane == 0) sm.cut = (claims | nonempty) ? r : Cut{0u, acc.n_gt, 0u, acc.mass_gt};
}

/* The boundary key K among the elements key_of(i, &key, &mass) accepts:
 * count mode, the target-th largest key (target <= the number accepted);
 * WEIGHTED, the largest K whose keys >= K weigh at least target. Three
 * passes over the row, each a histogram of the next digit of the keys that
 * match the digits chosen so far. */
template <bool WEIGHTED, typename KeyOf> __device__ Cut radix_select(Shared &sm, int64_t V, double target, KeyOf key_of) {
    Cut acc = {0u, 0u, 0u, 0.0};
    uint32_t prefix = 0, pmask = 0;
    for (int pass = 0; pass < 3; pass++) {
        const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0, nb = pass < 2 ? 2048 : 1024;
        for (int b = threadIdx.x; b < nb; b += THREADS) {
            sm.cnt[b] = 0;
            if constexpr (WEIGHTED) sm.mass[b] = 0.0;
        }
        __syncthreads();
        for (int64_t i = threadIdx.x; i < V; i += THREADS) {
            uint32_t k;
            double m;
            if (!key_of(i, k, m) || (k & pmask) != prefix) continue;
            const uint32_t d = (k >> shift) & (uint32_t)(nb - 1);
            atomicAdd(&sm.cnt[d], 1u);
            if constexpr (WEIGHTED) atomicAdd(&sm.mass[d], m);
        }
        __syncthreads();
        if (warp_id() == 0) find_bin<WEIGHTED>(sm, nb, target, acc);
        __syncthreads();
        acc = sm.cut;
        prefix |= acc.key << shift;
        pmask |= (uint32_t)(nb - 1) << shift;
    }
    acc.key = prefix;
    return acc;
}

/* Counts, in id order, the elements of this thread's chunk equal to the
 * boundary: returns how many equal ones come before the chunk. */
template <typename IsEq> __device__ uint32_t ties_before(Shared &sm, int64_t V, IsEq is_eq) {
    int64_t lo, hi;
    chunk(V, lo, hi);
    uint32_t n = 0;
    for (int64_t i = lo; i < hi; i++) n += is_eq(i);
    return block_scan(sm, n).excl;
}

/* ---- the row's stages --------------------------------------------------------- */

/* min_tokens mask then logit_bias on the work row (after the copy). A bias
 * id repeated in the list is added in list order by the thread of its
 * first occurrence, as the CPU's loop does. */
__device__ void mask_and_bias(const slk_sample_row_t &r, float *w, int64_t V, const int32_t *ids, const float *bias) {
    if (r.n_mask > 0) {
        __syncthreads();
        for (int32_t i = threadIdx.x; i < r.n_mask; i += THREADS) {
            const int32_t t = ids[r.mask_off + i];
            if (t >= 0 && t < V) w[t] = -INFINITY;
        }
    }
    if (r.n_bias > 0) {
        __syncthreads();
        const int32_t *bi = ids + r.bias_off;
        const float *bv = bias + r.bias_off;
        for (int32_t i = threadIdx.x; i < r.n_bias; i += THREADS) {
            const int32_t t = bi[i];
            bool first = t >= 0 && t < V;
            for (int32_t j = 0; j < i && first; j++) first = bi[j] != t;
            if (!first) continue;
            float x = w[t];
            for (int32_t j = i; j < r.n_bias; j++)
                if (bi[j] == t) x = __fadd_rn(x, bv[j]);
            w[t] = x;
        }
    }
}

/* Repetition (positive divided, others multiplied), then frequency and
 * presence (output occurrences only), once per distinct history token. The
 * scratch row h counts: bit 0 "in the history", 2 per output occurrence. */
__device__ void apply_penalties(const slk_sample_row_t &r, float *w, uint32_t *h, int64_t V, const int32_t *ids) {
    const bool rep = r.repetition_penalty != 1.0f, freq = r.frequency_penalty != 0.0f,
               pres = r.presence_penalty != 0.0f;
    const int32_t n = r.n_prompt + r.n_output;
    if ((!rep && !freq && !pres) || n <= 0) return;
    const int32_t *hist = ids + r.hist_off;
    __syncthreads();
    for (int32_t i = threadIdx.x; i < n; i += THREADS) {
        const int32_t t = hist[i];
        if (t < 0 || t >= V) continue;
        if (i < r.n_prompt) atomicOr(&h[t], 1u);
        else atomicAdd(&h[t], 2u);
    }
    __syncthreads();
    for (int32_t i = threadIdx.x; i < n; i += THREADS) {
        const int32_t t = hist[i];
        if (t < 0 || t >= V) continue;
        const uint32_t v = atomicExch(&h[t], 0u), cnt = v >> 1;
        if (!v) continue; /* another occurrence's thread has it */
        float x = w[t];
        if (rep) x = x > 0.0f ? __fdiv_rn(x, r.repetition_penalty) : __fmul_rn(x, r.repetition_penalty);
        if (cnt && freq) x = __fsub_rn(x, __fmul_rn(r.frequency_penalty, (float)cnt));
        if (cnt && pres) x = __fsub_rn(x, r.presence_penalty);
        w[t] = x;
    }
    __syncthreads();
}

/* top_p on weights w (V): zeroes all but the smallest set, in rank order
 * (weight descending, lower id first), whose weight reaches top_p * total. */
__device__ void top_p_cut(Shared &sm, float *w, int64_t V, float top_p, double total) {
    const double target = (double)top_p * total;
    /* The tokens of weight <= low weigh at most (1 - top_p) * total together:
     * the boundary is above them, so they stay out of the histograms. */
    const float low = (float)((1.0 - (double)top_p) * total / (double)V);
    const Cut c = radix_select<true>(sm, V, target, [&](int64_t i, uint32_t &k, double &m) {
        const float x = w[i];
        k = __float_as_uint(x), m = (double)x;
        return x > low;
    });
    const float B = __uint_as_float(c.key);
    /* The first `keep` tokens of weight B, in id order, reach the target. */
    const double need = ceil((target - c.mass_gt) / (double)B);
    const uint32_t keep = need < 1.0 ? 1u : need >= (double)c.n_eq ? c.n_eq : (uint32_t)need;
    if (keep >= c.n_eq) {
        for (int64_t i = threadIdx.x; i < V; i += THREADS)
            if (w[i] < B) w[i] = 0.0f;
        return;
    }
    uint32_t rank = ties_before(sm, V, [&](int64_t i) { return w[i] == B; });
    int64_t lo, hi;
    chunk(V, lo, hi);
    for (int64_t i = lo; i < hi; i++)
        if (w[i] < B || (w[i] == B && rank++ >= keep)) w[i] = 0.0f;
}

/* The inverse CDF of u over the kept weights (w > 0) in id order; `best`
 * (the argmax) when no weight is kept, as the CPU twin's loop starts from it. */
__device__ int32_t draw(Shared &sm, const float *w, int64_t V, double u, int64_t best) {
    int64_t lo, hi;
    chunk(V, lo, hi);
    double s = 0.0;
    int64_t last = -1;
    for (int64_t i = lo; i < hi; i++)
        if (w[i] != 0.0f) s += w[i], last = i;
    if (threadIdx.x == 0) sm.token = -1;
    const Scan<double> sc = block_scan(sm, s);
    const double target = u * sc.total;
    if (sc.excl <= target && target < sc.incl) {
        /* This chunk holds the target; rounding may leave it to the chunk's last token. */
        double run = sc.excl;
        int64_t tok = last;
        for (int64_t i = lo; i < hi; i++) {
            if (w[i] == 0.0f) continue;
            run += w[i];
            if (target < run) {
                tok = i;
                break;
            }
        }
        sm.token = (int32_t)tok;
    }
    const long long fallback = block_reduce(sm, (long long)last, Max()); /* target reached the total */
    if (sm.token >= 0) return sm.token;
    return fallback >= 0 ? (int32_t)fallback : (int32_t)best;
}

/* Everything after greedy's argmax when the temperature is not 0. */
__device__ int32_t sample_random(Shared &sm, const slk_sample_row_t &r, float *w, int64_t V) {
    const float T = r.temperature;
    if (T != 1.0f)
        for (int64_t i = threadIdx.x; i < V; i += THREADS) w[i] = __fdiv_rn(w[i], T);
    const ArgMax best = block_argmax(sm, w, V);
    const float mx = best.value;
    if (!(mx > -INFINITY)) return (int32_t)best.index; /* every token masked */

    if (r.min_p > 0.0f) {
        const double log_min_p = log((double)r.min_p);
        for (int64_t i = threadIdx.x; i < V; i += THREADS)
            if ((double)w[i] - mx < log_min_p) w[i] = -INFINITY;
    }
    float kth = -INFINITY;
    if (r.top_k > 0 && r.top_k < V) {
        /* A NaN ranks as -inf here (the CPU twin's sel_key): with fewer than
         * top_k numbers left, NaN's key (0) would make the k-th value NaN
         * and keep nothing. */
        const Cut c = radix_select<false>(sm, V, (double)r.top_k, [&](int64_t i, uint32_t &k, double &m) {
            k = w[i] != w[i] ? fkey(-INFINITY) : fkey(w[i]), m = 1.0;
            return true;
        });
        kth = key_float(c.key);
    }
    double total = 0.0;
    for (int64_t i = threadIdx.x; i < V; i += THREADS) {
        const float x = w[i];
        w[i] = x >= kth && x > -INFINITY ? exp_f32(__fsub_rn(x, mx)) : 0.0f;
        total += w[i];
    }
    if (r.top_p < 1.0f) top_p_cut(sm, w, V, r.top_p, block_reduce(sm, total, Sum()));
    __syncthreads(); /* the draw reads other threads' weights */
    return draw(sm, w, V, r.u, best.index);
}

/* The CPU's raw_logprobs: log_softmax of the raw logits x, the token's value
 * and rank, and the n_top best (value descending, lower id first, NaN never). */
__device__ void raw_logprobs(Shared &sm, const float *x, int64_t V, int32_t token, int n_top, sample_result_t &res) {
    const float mx = block_argmax(sm, x, V).value, lt = token >= 0 && token < V ? x[token] : NAN;
    double sum = 0.0;
    uint32_t above = 0, numbers = 0;
    for (int64_t i = threadIdx.x; i < V; i += THREADS) {
        sum += exp_f32(__fsub_rn(x[i], mx));
        above += x[i] > lt;
        numbers += x[i] == x[i];
    }
    const double lse = (double)mx + log(block_reduce(sm, sum, Sum()));
    above = block_reduce(sm, above, Sum());
    numbers = block_reduce(sm, numbers, Sum());
    const int n = numbers < (uint32_t)n_top ? (int)numbers : n_top;
    if (threadIdx.x == 0) res.logprob = (float)((double)lt - lse), res.rank = (int32_t)(1 + above), res.n_top = n;
    if (n == 0) return;

    /* The n-th best key; those above it, then the lowest ids equal to it. */
    const Cut c = radix_select<false>(sm, V, (double)n, [&](int64_t i, uint32_t &k, double &m) {
        k = fkey(x[i]), m = 1.0;
        return true;
    });
    const uint32_t keep = (uint32_t)n - c.n_gt;
    if (threadIdx.x == 0) sm.n_top = 0;
    uint32_t rank = ties_before(sm, V, [&](int64_t i) { return fkey(x[i]) == c.key; });
    int64_t lo, hi;
    chunk(V, lo, hi);
    for (int64_t i = lo; i < hi; i++) {
        const uint32_t k = fkey(x[i]);
        if (k > c.key || (k == c.key && rank++ < keep)) sm.top_ids[atomicAdd(&sm.n_top, 1)] = (int32_t)i;
    }
    __syncthreads();
    /* Sort the n found: each one's place is the number ranked before it. */
    if ((int)threadIdx.x < n) {
        const int32_t id = sm.top_ids[threadIdx.x];
        int place = 0;
        for (int j = 0; j < n; j++) {
            const int32_t o = sm.top_ids[j];
            place += x[o] > x[id] || (x[o] == x[id] && o < id);
        }
        res.top_ids[place] = id;
        res.top_logprobs[place] = (float)((double)x[id] - lse);
    }
}

__global__ void __launch_bounds__(THREADS)
    sample_kernel(const float *__restrict__ logits, int64_t V, const slk_sample_row_t *__restrict__ rows,
                  const int32_t *__restrict__ ids, const float *__restrict__ bias, uint32_t *__restrict__ workspace,
                  sample_result_t *__restrict__ out) {
    __shared__ Shared sm;
    __shared__ sample_result_t res;
    const int64_t s = blockIdx.x;
    const slk_sample_row_t r = rows[s];
    const float *x = logits + s * V;
    uint32_t *h = workspace + s * 2 * V; /* the row's history counts, then its work copy */
    float *w = reinterpret_cast<float *>(h + V);

    if (threadIdx.x == 0) memset(&res, 0, sizeof res);
    for (int64_t i = threadIdx.x; i < V; i += THREADS) w[i] = x[i];
    mask_and_bias(r, w, V, ids, bias);
    apply_penalties(r, w, h, V, ids);
    __syncthreads();
    const int32_t token = r.temperature < 1e-5f ? (int32_t)block_argmax(sm, w, V).index : sample_random(sm, r, w, V);
    if (r.n_logprobs >= 0)
        raw_logprobs(sm, x, V, token, r.n_logprobs < SAMPLING_MAX_LOGPROBS ? r.n_logprobs : SAMPLING_MAX_LOGPROBS, res);
    __syncthreads();
    if (threadIdx.x == 0) {
        res.token = token;
        out[s] = res;
    }
}

}  // namespace

size_t slk_sample_workspace_bytes(int64_t S, int64_t V) {
    return S > 0 && V > 0 ? (size_t)S * (size_t)V * (sizeof(float) + sizeof(uint32_t)) : 0;
}

int slk_sample(const float *logits, int64_t S, int64_t V, const slk_sample_row_t *rows, const int32_t *ids,
               const float *bias, void *workspace, sample_result_t *out, void *stream) {
    if (S == 0) return 0;
    if (S < 0 || S > 0x7fffffff || V <= 0 || V > 0x7fffffff) return (int)cudaErrorInvalidValue;
    sample_kernel<<<(unsigned)S, THREADS, 0, slk::as_stream(stream)>>>(logits, V, rows, ids, bias,
                                                                      static_cast<uint32_t *>(workspace), out);
    return slk::launch_result();
}
