/* slemu_wmma.h - nvcuda::wmma 16x16x16 fragments for the emulator.
 *
 * Which (row, column) of the tile each lane's element x[i] holds is not
 * documented by CUDA; here it is a random permutation of the 256 positions,
 * one per fragment type, drawn from SERVELAB_EMU_SEED. Code that only moves
 * fragments through load/store/mma/fill, or combines two fragments of the
 * same type element by element, gives the same result under every
 * permutation; code that assumes a layout does not. The loads, stores and
 * mma are warp collectives (every lane must arrive, with the same pointer and
 * ldm); mma_sync accumulates in fp32 the exact products of the 16-bit inputs.
 */
#ifndef SLEMU_WMMA_H
#define SLEMU_WMMA_H

namespace slemu {
/* The permutation of fragment type `id`: lane l's element i is tile position
 * perm[8 l + i] = 16 row + col. */
const uint8_t *wmma_perm(int id);
int wmma_type_id();
template <typename F> static inline const uint8_t *frag_perm() {
    static const int id = wmma_type_id();
    return wmma_perm(id);
}
static inline float wmma_f32(float x) { return x; }
static inline float wmma_f32(__half x) { return __half2float(x); }
static inline float wmma_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
}  // namespace slemu

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulator knows the 16x16x16 shape only");
    static constexpr int num_elements = 8;
    T x[8];
};

namespace detail {
template <typename F> static inline void check_ptr(const void *p, unsigned ldm, size_t elem, const char *file, int line) {
    if ((uintptr_t)p % 32) slemu::fail(file, line, "wmma: pointer %p is not 256-bit aligned", p);
    if ((ldm * elem) % 16) slemu::fail(file, line, "wmma: ldm %u is not a multiple of 16 bytes", ldm);
}
/* Every lane passes the same pointer and ldm (the collective checks it). */
static inline uint64_t key(const void *p, unsigned ldm) { return (uint64_t)(uintptr_t)p * 131u + ldm; }
template <typename T, typename F>
static inline void load(F &f, const T *p, unsigned ldm, bool col, const char *file, int line) {
    check_ptr<F>(p, ldm, sizeof(T), file, line);
    slemu::Coll c{slemu::C_WMMA_LOAD, 0xffffffffu, 0, 0, 32, key(p, ldm), nullptr, nullptr};
    slemu::warp_collective(c, file, line);
    /* after every lane arrived, each loads its own elements as it resumes */
    const uint8_t *perm = slemu::frag_perm<F>();
    const int lane = slemu::lane_id();
    for (int i = 0; i < 8; i++) {
        const int pos = perm[8 * lane + i], r = pos / 16, cc = pos % 16;
        f.x[i] = col ? p[(size_t)cc * ldm + r] : p[(size_t)r * ldm + cc];
    }
}
}  // namespace detail

template <typename Use, typename T, typename Layout>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm,
                                    const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    static_assert(!std::is_same<Use, accumulator>::value, "an accumulator load takes a layout");
    detail::load(f, p, ldm, std::is_same<Layout, col_major>::value, file, line);
}
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ldm,
                                    layout_t layout, const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    detail::load(f, p, ldm, layout == mem_col_major, file, line);
}
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm,
                                     layout_t layout, const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    using F = fragment<accumulator, 16, 16, 16, float>;
    detail::check_ptr<F>(p, ldm, sizeof(float), file, line);
    slemu::Coll c{slemu::C_WMMA_STORE, 0xffffffffu, 0, 0, 32, detail::key(p, ldm), nullptr, nullptr};
    slemu::warp_collective(c, file, line);
    const uint8_t *perm = slemu::frag_perm<F>();
    const int lane = slemu::lane_id();
    for (int i = 0; i < 8; i++) {
        const int pos = perm[8 * lane + i], r = pos / 16, cc = pos % 16;
        if (layout == mem_col_major) p[(size_t)cc * ldm + r] = f.x[i];
        else p[(size_t)r * ldm + cc] = f.x[i];
    }
}
template <typename Use, typename T, typename Layout, typename V>
static inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, const V &v) {
    for (int i = 0; i < 8; i++) f.x[i] = T(v);
}

template <typename T, typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, T, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, T, LB> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c, const char *file = __builtin_FILE(),
                            int line = __builtin_LINE()) {
    using FA = fragment<matrix_a, 16, 16, 16, T, LA>;
    using FB = fragment<matrix_b, 16, 16, 16, T, LB>;
    using FC = fragment<accumulator, 16, 16, 16, float>;
    struct Args {
        FC *d;
        const FA *a;
        const FB *b;
        const FC *c;
    } args{&d, &a, &b, &c};
    slemu::Coll coll{slemu::C_WMMA_MMA, 0xffffffffu, 0, 0, 32, 0, &args, [](void *const *payloads) {
                         const uint8_t *pa = slemu::frag_perm<FA>(), *pb = slemu::frag_perm<FB>(),
                                       *pc = slemu::frag_perm<FC>();
                         float A[256], B[256], C[256];
                         for (int l = 0; l < 32; l++) {
                             const Args *x = static_cast<const Args *>(payloads[l]);
                             for (int i = 0; i < 8; i++) {
                                 A[pa[8 * l + i]] = slemu::wmma_f32(x->a->x[i]);
                                 B[pb[8 * l + i]] = slemu::wmma_f32(x->b->x[i]);
                                 C[pc[8 * l + i]] = x->c->x[i];
                             }
                         }
                         float D[256];
                         for (int r = 0; r < 16; r++)
                             for (int cc = 0; cc < 16; cc++) {
                                 float s = C[16 * r + cc];
                                 for (int k = 0; k < 16; k++) s += A[16 * r + k] * B[16 * k + cc];
                                 D[16 * r + cc] = s;
                             }
                         for (int l = 0; l < 32; l++) {
                             const Args *x = static_cast<const Args *>(payloads[l]);
                             for (int i = 0; i < 8; i++) x->d->x[i] = D[pc[8 * l + i]];
                         }
                     }};
    slemu::warp_collective(coll, file, line);
}
}  // namespace wmma
}  // namespace nvcuda

#endif
