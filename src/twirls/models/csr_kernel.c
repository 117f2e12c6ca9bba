/* out = X W on the CPU, for a CSR matrix X (n rows, int32 indices, float32 values) and a
 * row-major float32 W (k rows, m columns); twirls.models.csr_kernel loads it (`make` builds it).
 *
 * Arithmetic: out[i][c] = ((0 + v_1 w_1c) + v_2 w_2c) + ... over row i's stored entries in their
 * stored order, each product rounded to float32 before it is added. Built with
 * -ffp-contract=off, so no multiply and add are fused. This is what MKL's generic CSR kernel
 * computes (the one torch's CPU product runs on AMD CPUs), so the two give the same bits.
 *
 * Speed: a row's sums stay in vector registers while its entries stream by: blocks of 64
 * columns (blocks()), and the last m mod 64 columns in one to eight 8-lane vectors (vectors()),
 * so that each entry's part of W's row is read once. The part of W's row that the entry AHEAD
 * places later reads is prefetched (in vectors() only where W is over PREFETCH_BYTES: a smaller
 * W stays in cache, and there the prefetches cost more than they save). The sums' order does
 * not depend on how the columns are split.
 *
 * twirls_csr_drop_zeros copies a CSR matrix without its stored zeros (what the products skip
 * after input dropout), in one pass. */
#include <stdint.h>
#include <string.h>

#define AHEAD 8
#define PREFETCH_BYTES (1 << 20)
/* On x86-64, one copy per instruction set, chosen when the library loads. */
#if defined(__x86_64__) && defined(__GNUC__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4))); /* an unaligned load or store */

/* Row i's sums in columns 0 to 63 of w and o (the entries lo to hi - 1 of col and val), kept
 * in eight 8-lane vectors and stored from them (a 64-float array instead, GCC zeroed it in
 * memory and copied it out for every row: twice the time at 64 columns). */
static inline void block_64(int32_t lo, int32_t hi, int32_t nnz, int64_t m,
                            const int32_t *restrict col, const float *restrict val,
                            const float *restrict w, float *restrict o) {
    v8 acc[8];
    for (int b = 0; b < 8; b++) acc[b] = (v8){0};
    for (int32_t j = lo; j < hi; j++) {
        if (j + AHEAD < nnz) {
            const char *p = (const char *)(w + (int64_t)col[j + AHEAD] * m);
            for (int b = 0; b < 64 * 4; b += 64) __builtin_prefetch(p + b, 0, 3);
        }
        const float v = val[j];
        const float *restrict wr = w + (int64_t)col[j] * m;
        for (int b = 0; b < 8; b++) acc[b] += v * *(const v8u *)(wr + 8 * b);
    }
    for (int b = 0; b < 8; b++) *(v8u *)(o + 8 * b) = acc[b];
}

/* Columns 0 to full - 1 (a multiple of 64) in blocks of 64. */
static CLONES void blocks(int64_t n, int64_t m, int64_t full, const int32_t *restrict crow,
                          const int32_t *restrict col, const float *restrict val,
                          const float *restrict w, float *restrict out) {
    const int32_t nnz = crow[n];
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < full; c += 64)
            block_64(crow[i], crow[i + 1], nnz, m, col, val, w + c, out + i * m + c);
}

/* Columns c to m - 1 (fewer than 8 V) in V 8-lane vectors: each entry's part of W's row is read
 * once, as 8 V floats from column c on, which may run past the row into the next ones. That
 * read is direct where it stays within W (rows r < safe), else from a zero-padded copy of the
 * row (at most 7 rows). Row i's 8 V sums are stored likewise where they stay within out: the
 * lanes past m land in the next rows, which are written later (twirls_csr_mm runs this before
 * the blocks of 64 columns 0 to c - 1); the last rows store their m - c sums alone. */
#define VECTORS(V)                                                                           \
    static CLONES void vectors_##V(int64_t n, int64_t m, int64_t k, int64_t c,               \
                                   const int32_t *restrict crow, const int32_t *restrict col, \
                                   const float *restrict val, const float *restrict w,       \
                                   float *restrict out) {                                    \
        const int32_t nnz = crow[n];                                                         \
        const int64_t over = (c + 8 * V + m - 1) / m; /* rows a read may touch */            \
        const int64_t safe = k - over + 1 > 0 ? k - over + 1 : 0;                            \
        const int ahead = k * m * (int64_t)sizeof(float) > PREFETCH_BYTES;                    \
        v8 tail[8][V];                                                                       \
        for (int64_t r = safe; r < k; r++) {                                                 \
            float t[8 * V];                                                                  \
            memset(t, 0, sizeof t);                                                          \
            memcpy(t, w + r * m + c, (m - c) * sizeof(float));                               \
            memcpy(tail[r - safe], t, sizeof t);                                             \
        }                                                                                    \
        for (int64_t i = 0; i < n; i++) {                                                    \
            v8 acc[V];                                                                       \
            for (int b = 0; b < V; b++) acc[b] = (v8){0};                                    \
            for (int32_t j = crow[i]; j < crow[i + 1]; j++) {                                \
                if (ahead && j + AHEAD < nnz)                                                \
                    __builtin_prefetch(w + (int64_t)col[j + AHEAD] * m + c, 0, 3);           \
                const int64_t r = col[j];                                                    \
                const float v = val[j];                                                      \
                if (r < safe) {                                                              \
                    for (int b = 0; b < V; b++)                                              \
                        acc[b] += v * *(const v8u *)(w + r * m + c + 8 * b);                 \
                } else {                                                                     \
                    for (int b = 0; b < V; b++) acc[b] += v * tail[r - safe][b];             \
                }                                                                            \
            }                                                                                \
            float *restrict o = out + i * m + c;                                             \
            if (i * m + c + 8 * V <= n * m) {                                                \
                for (int b = 0; b < V; b++) *(v8u *)(o + 8 * b) = acc[b];                    \
            } else {                                                                         \
                float t[8 * V];                                                              \
                memcpy(t, acc, sizeof t);                                                    \
                memcpy(o, t, (m - c) * sizeof(float));                                       \
            }                                                                                \
        }                                                                                    \
    }

VECTORS(1)
VECTORS(2)
VECTORS(3)
VECTORS(4)
VECTORS(5)
VECTORS(6)
VECTORS(7)
VECTORS(8)

static void (*const vectors[9])(int64_t, int64_t, int64_t, int64_t, const int32_t *,
                                const int32_t *, const float *, const float *, float *) = {
    0, vectors_1, vectors_2, vectors_3, vectors_4, vectors_5, vectors_6, vectors_7, vectors_8};

/* Bumped whenever a function's arguments change (or one is added): twirls.models.csr_kernel.VERSION must match,
 * so that a library built from an older source is refused rather than called wrongly. */
int twirls_csr_version(void) { return 3; }

void twirls_csr_mm(int64_t n, int64_t m, int64_t k, const int32_t *restrict crow,
                   const int32_t *restrict col, const float *restrict val,
                   const float *restrict w, float *restrict out) {
    const int64_t full = m - m % 64; /* columns in blocks of 64; the rest in vectors, first */
    if (full < m) vectors[(m - full + 7) / 8](n, m, k, full, crow, col, val, w, out);
    if (full) blocks(n, m, full, crow, col, val, w, out);
}

/* The CSR matrix (crow, col, val[order]) (order NULL: val) without its stored zeros, written to
 * out_crow (n + 1 entries), out_col and out_val (room for crow[n] entries each); returns the
 * number kept. An entry is kept when its value != 0 (so -0 goes and NaN stays, as NumPy's
 * `values != 0`); each entry is written, then counted only if kept, which needs no branch. */
int64_t twirls_csr_drop_zeros(int64_t n, const int32_t *restrict crow,
                              const int32_t *restrict col, const float *restrict val,
                              const int64_t *restrict order, int32_t *restrict out_crow,
                              int32_t *restrict out_col, float *restrict out_val) {
    int32_t kept = 0;
    out_crow[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        for (int32_t j = crow[i]; j < crow[i + 1]; j++) {
            const float v = order ? val[order[j]] : val[j];
            out_col[kept] = col[j];
            out_val[kept] = v;
            kept += v != 0.0f;
        }
        out_crow[i + 1] = kept;
    }
    return kept;
}
