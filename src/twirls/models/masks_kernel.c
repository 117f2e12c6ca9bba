/* Dropout masks from NumPy's PCG64 stream on the CPU, faster than NumPy draws them;
 * twirls.models.masks loads it (`make` builds it).
 *
 * The stream: PCG64 (XSL-RR 128/64, NumPy's BitGenerator PCG64): the 128-bit state steps as
 * s <- a s + inc (mod 2^128) and each step gives the word rotr64(hi(s) ^ lo(s), s >> 122), so
 * twirls_pcg64_words gives exactly PCG64.random_raw's words from the same state (state[0..3]:
 * the state's high and low halves, then inc's; the state is advanced in place). Speed: four
 * steps at once from one state (s_j = a^j s + inc (a^(j-1) + ... + 1)), so the multiplications
 * of four words overlap instead of each waiting for the last (~1.5x NumPy's one at a time).
 *
 * twirls_pcg64_mask: a float32 mask of n entries from (n + 3) / 4 words, entry i kept when the
 * 16-bit lane i mod 4 of word i / 4 (low lane first, NumPy's view of the words as uint16) is
 * below threshold; kept entries are scale, the others +0: the bits of twirls.models.masks'
 * (lanes < threshold) as float32 times scale, in one pass. */
#include <stdint.h>
#include <string.h>

typedef unsigned __int128 u128;

#define MULTIPLIER (((u128)2549297995355413924ULL << 64) + 4865540595714422341ULL)
#define BLOCK 256 /* words drawn at a time by twirls_pcg64_mask */

int twirls_masks_version(void) { return 1; }

static inline uint64_t output(u128 s) {
    const uint64_t v = (uint64_t)(s >> 64) ^ (uint64_t)s;
    const unsigned r = (unsigned)(s >> 122);
    return (v >> r) | (v << ((-r) & 63));
}

/* n words from *s (advanced past them). */
static void draw(u128 *s, u128 inc, int64_t n, uint64_t *restrict out) {
    const u128 a = MULTIPLIER, a2 = a * a, a3 = a2 * a, a4 = a2 * a2;
    const u128 c2 = inc * (a + 1), c3 = inc * (a2 + a + 1), c4 = inc * (a3 + a2 + a + 1);
    u128 t = *s;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const u128 t1 = a * t + inc, t2 = a2 * t + c2, t3 = a3 * t + c3, t4 = a4 * t + c4;
        out[i] = output(t1);
        out[i + 1] = output(t2);
        out[i + 2] = output(t3);
        out[i + 3] = output(t4);
        t = t4;
    }
    for (; i < n; i++) {
        t = a * t + inc;
        out[i] = output(t);
    }
    *s = t;
}

static u128 load(const uint64_t *state, int half) {
    return ((u128)state[2 * half] << 64) | state[2 * half + 1];
}

static void store(uint64_t *state, u128 s) {
    state[0] = (uint64_t)(s >> 64);
    state[1] = (uint64_t)s;
}

void twirls_pcg64_words(uint64_t *state, int64_t n, uint64_t *restrict out) {
    u128 s = load(state, 0);
    draw(&s, load(state, 1), n, out);
    store(state, s);
}

void twirls_pcg64_mask(uint64_t *state, int64_t n, int32_t threshold, float scale,
                       float *restrict out) {
    u128 s = load(state, 0);
    const u128 inc = load(state, 1);
    uint32_t kept;
    memcpy(&kept, &scale, sizeof kept);
    uint64_t words[BLOCK];
    uint16_t lanes[4 * BLOCK];
    for (int64_t done = 0; done < n; done += 4 * BLOCK) {
        const int64_t count = n - done < 4 * BLOCK ? n - done : 4 * BLOCK;
        draw(&s, inc, (count + 3) / 4, words);
        memcpy(lanes, words, sizeof lanes);
        uint32_t *restrict o = (uint32_t *)(out + done);
        for (int64_t i = 0; i < count; i++) /* no branch: scale's bits or 0 */
            o[i] = kept & -(uint32_t)((int32_t)lanes[i] < threshold);
    }
    store(state, s);
}
