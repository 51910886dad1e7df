/* Compress and decompress a fixed buffer with lz4 (fast, HC and frame formats) and check
 * that every round trip gives the input back. Linked against lz4 objects compiled by
 * pymlgo with a register-allocation policy: wrong advice can miscompile, and this is the
 * check that the program still works. Exit 0 and print a checksum on success.
 * Prototypes are declared here so the test needs no lz4 headers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LZ4_compressBound(int inputSize);
int LZ4_compress_default(const char *src, char *dst, int srcSize, int dstCapacity);
int LZ4_decompress_safe(const char *src, char *dst, int compressedSize, int dstCapacity);
int LZ4_compress_HC(const char *src, char *dst, int srcSize, int dstCapacity, int level);
size_t LZ4F_compressFrameBound(size_t srcSize, const void *prefs);
size_t LZ4F_compressFrame(void *dst, size_t dstCapacity, const void *src, size_t srcSize,
                          const void *prefs);
unsigned LZ4F_isError(size_t code);
typedef struct LZ4F_dctx_s LZ4F_dctx;
size_t LZ4F_createDecompressionContext(LZ4F_dctx **ctx, unsigned version);
size_t LZ4F_freeDecompressionContext(LZ4F_dctx *ctx);
size_t LZ4F_decompress(LZ4F_dctx *ctx, void *dst, size_t *dstSize, const void *src,
                       size_t *srcSize, const void *opts);
unsigned XXH32(const void *input, size_t length, unsigned seed);

#define LZ4F_VERSION 100

/* Text-like data with repeats at many distances: exercises match finding and literals. */
static void fill(char *buf, int n, unsigned seed) {
    static const char *words[] = {"register ", "allocation ", "eviction ", "spill ",
                                  "reload ", "copy ", "live range ", "interference ",
                                  "priority ", "greedy "};
    unsigned x = seed;
    int i = 0;
    while (i < n) {
        x = x * 1103515245u + 12345u;
        const char *w = words[(x >> 16) % 10];
        if ((x >> 8) % 7 == 0) { /* a literal run of noise */
            for (int k = 0; k < 13 && i < n; k++) {
                x = x * 1103515245u + 12345u;
                buf[i++] = (char)(x >> 24);
            }
            continue;
        }
        for (const char *p = w; *p && i < n; p++) buf[i++] = *p;
    }
}

static int check(const char *what, const char *a, const char *b, int n) {
    if (memcmp(a, b, (size_t)n) != 0) {
        fprintf(stderr, "lz4_roundtrip: %s round trip differs\n", what);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1 << 20;
    int rounds = argc > 2 ? atoi(argv[2]) : 1;
    char *src = malloc((size_t)n), *back = malloc((size_t)n);
    int cap = LZ4_compressBound(n);
    size_t fcap = LZ4F_compressFrameBound((size_t)n, NULL);
    char *dst = malloc((size_t)cap > fcap ? (size_t)cap : fcap);
    if (!src || !back || !dst) return 2;
    unsigned sum = 0;
    for (int r = 0; r < rounds; r++) {
        fill(src, n, 12345u + (unsigned)r);
        int c = LZ4_compress_default(src, dst, n, cap);
        if (c <= 0 || LZ4_decompress_safe(dst, back, c, n) != n) return 3;
        if (check("fast", src, back, n)) return 4;
        sum += (unsigned)c;
        c = LZ4_compress_HC(src, dst, n, cap, 9);
        memset(back, 0, (size_t)n);
        if (c <= 0 || LZ4_decompress_safe(dst, back, c, n) != n) return 5;
        if (check("hc", src, back, n)) return 6;
        sum += (unsigned)c;
        size_t fc = LZ4F_compressFrame(dst, fcap, src, (size_t)n, NULL);
        if (LZ4F_isError(fc)) return 7;
        LZ4F_dctx *ctx;
        if (LZ4F_isError(LZ4F_createDecompressionContext(&ctx, LZ4F_VERSION))) return 8;
        size_t out = (size_t)n, in = fc;
        memset(back, 0, (size_t)n);
        size_t rc = LZ4F_decompress(ctx, back, &out, dst, &in, NULL);
        LZ4F_freeDecompressionContext(ctx);
        if (LZ4F_isError(rc) || out != (size_t)n) return 9;
        if (check("frame", src, back, n)) return 10;
        sum += (unsigned)fc ^ XXH32(back, (size_t)n, 0);
    }
    printf("ok %u\n", sum);
    free(src);
    free(back);
    free(dst);
    return 0;
}
