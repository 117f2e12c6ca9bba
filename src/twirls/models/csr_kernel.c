/* out = X W on the CPU, for a CSR matrix X (n rows, int32 indices, float32 values) and a
 * row-major float32 W (m columns); twirls.models.csr_kernel loads it (`make` builds it).
 *
 * Arithmetic: out[i][c] = ((0 + v_1 w_1c) + v_2 w_2c) + ... over row i's stored entries in their
 * stored order, each product rounded to float32 before it is added. Built with
 * -ffp-contract=off, so no multiply and add are fused. This is what MKL's generic CSR kernel
 * computes (the one torch's CPU product runs on AMD CPUs), so the two give the same bits.
 *
 * Speed: the columns go in blocks of 64, 32, 16, 8, 4, 2 and 1 whose sums stay in vector
 * registers while a row's entries stream by, and the part of W's row that the entry AHEAD
 * places later reads is prefetched. The sums' order does not depend on the blocks. */
#include <stdint.h>

#define AHEAD 8

#define BLOCK(B)                                                                          \
    static inline void block_##B(int32_t lo, int32_t hi, int32_t nnz, int64_t m,          \
                                 const int32_t *restrict col, const float *restrict val, \
                                 const float *restrict w, float *restrict o) {            \
        float acc[B];                                                                     \
        for (int c = 0; c < B; c++) acc[c] = 0.0f;                                        \
        for (int32_t j = lo; j < hi; j++) {                                               \
            if (j + AHEAD < nnz) {                                                        \
                const char *p = (const char *)(w + (int64_t)col[j + AHEAD] * m);          \
                for (int b = 0; b < B * 4; b += 64) __builtin_prefetch(p + b, 0, 3);      \
            }                                                                             \
            const float v = val[j];                                                       \
            const float *restrict wr = w + (int64_t)col[j] * m;                           \
            for (int c = 0; c < B; c++) acc[c] += v * wr[c];                              \
        }                                                                                 \
        for (int c = 0; c < B; c++) o[c] = acc[c];                                        \
    }

BLOCK(64)
BLOCK(32)
BLOCK(16)
BLOCK(8)
BLOCK(4)
BLOCK(2)
BLOCK(1)

/* On x86-64, one copy per instruction set, chosen when the library loads. */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void twirls_csr_mm(int64_t n, int64_t m, const int32_t *restrict crow,
                   const int32_t *restrict col, const float *restrict val,
                   const float *restrict w, float *restrict out) {
    const int32_t nnz = crow[n];
    for (int64_t i = 0; i < n; i++) {
        const int32_t lo = crow[i], hi = crow[i + 1];
        float *restrict o = out + i * m;
        int64_t c = 0;
        for (; c + 64 <= m; c += 64) block_64(lo, hi, nnz, m, col, val, w + c, o + c);
        if (c + 32 <= m) { block_32(lo, hi, nnz, m, col, val, w + c, o + c); c += 32; }
        if (c + 16 <= m) { block_16(lo, hi, nnz, m, col, val, w + c, o + c); c += 16; }
        if (c + 8 <= m) { block_8(lo, hi, nnz, m, col, val, w + c, o + c); c += 8; }
        if (c + 4 <= m) { block_4(lo, hi, nnz, m, col, val, w + c, o + c); c += 4; }
        if (c + 2 <= m) { block_2(lo, hi, nnz, m, col, val, w + c, o + c); c += 2; }
        if (c < m) block_1(lo, hi, nnz, m, col, val, w + c, o + c);
    }
}
