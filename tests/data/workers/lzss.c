/* A small LZSS codec: 4 KiB window, 3..18 byte matches, flag byte per 8 items. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define WINDOW 4096
#define MIN_MATCH 3
#define MAX_MATCH 18

struct out { uint8_t *p; size_t n, cap; int overflow; };

static void put(struct out *o, uint8_t b) {
    if (o->n < o->cap) o->p[o->n] = b; else o->overflow = 1;
    o->n++;
}

static size_t match_len(const uint8_t *a, const uint8_t *b, size_t max) {
    size_t n = 0;
    while (n < max && a[n] == b[n]) n++;
    return n;
}

static void longest(const uint8_t *src, size_t pos, size_t len, size_t *best_off, size_t *best_len) {
    size_t start = pos > WINDOW ? pos - WINDOW : 0;
    size_t max = len - pos < MAX_MATCH ? len - pos : MAX_MATCH;
    *best_len = 0;
    for (size_t i = start; i < pos; i++) {
        size_t m = match_len(src + i, src + pos, max);
        if (m > *best_len) { *best_len = m; *best_off = pos - i; }
        if (m == max) break;
    }
}

size_t lzss_compress(const uint8_t *src, size_t len, uint8_t *dst, size_t cap) {
    struct out o = { dst, 0, cap, 0 };
    size_t pos = 0;
    while (pos < len) {
        size_t flag_at = o.n;
        uint8_t flags = 0;
        put(&o, 0);
        for (int bit = 0; bit < 8 && pos < len; bit++) {
            size_t off = 0, m = 0;
            longest(src, pos, len, &off, &m);
            if (m >= MIN_MATCH) {
                flags |= (uint8_t)(1u << bit);
                put(&o, (uint8_t)((off - 1) >> 4));
                put(&o, (uint8_t)(((off - 1) & 15) << 4 | (m - MIN_MATCH)));
                pos += m;
            } else {
                put(&o, src[pos++]);
            }
        }
        if (flag_at < o.cap) o.p[flag_at] = flags;
    }
    return o.overflow ? 0 : o.n;
}

size_t lzss_decompress(const uint8_t *src, size_t len, uint8_t *dst, size_t cap) {
    size_t i = 0, n = 0;
    while (i < len) {
        uint8_t flags = src[i++];
        for (int bit = 0; bit < 8 && i < len; bit++) {
            if (flags & (1u << bit)) {
                if (i + 1 >= len) return 0;
                size_t off = ((size_t)src[i] << 4 | src[i + 1] >> 4) + 1;
                size_t m = (src[i + 1] & 15u) + MIN_MATCH;
                i += 2;
                if (off > n || n + m > cap) return 0;
                for (size_t k = 0; k < m; k++, n++) dst[n] = dst[n - off];
            } else {
                if (n >= cap) return 0;
                dst[n++] = src[i++];
            }
        }
    }
    return n;
}
