/* A small real program over all three demo libraries: compress and decompress a fixed
 * buffer with lz4 (fast and HC), zstd (level 3) and brotli (quality 5), check every round
 * trip, print a checksum. Used to measure executed instructions and time of a build whose
 * library objects were compiled with a register-allocation policy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo_codecs.h"

int LZ4_compressBound(int inputSize);
int LZ4_compress_default(const char *src, char *dst, int srcSize, int dstCapacity);
int LZ4_compress_HC(const char *src, char *dst, int srcSize, int dstCapacity, int level);
int LZ4_decompress_safe(const char *src, char *dst, int compressedSize, int dstCapacity);

static int same(const char *what, const void *a, const void *b, size_t n, size_t got) {
    if (got != n || memcmp(a, b, n) != 0) {
        fprintf(stderr, "codec_bench: %s round trip differs\n", what);
        return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? (size_t)atol(argv[1]) : (size_t)1 << 20;
    unsigned char *src = malloc(n), *back = malloc(n);
    size_t cap = BrotliEncoderMaxCompressedSize(n) + ZSTD_compressBound(n) + 2 * n + 1024;
    unsigned char *dst = malloc(cap);
    if (!src || !back || !dst) return 2;
    text(src, n, 4242u);
    unsigned long sum = 0;

    int c = LZ4_compress_default((char *)src, (char *)dst, (int)n, (int)cap);
    int d = LZ4_decompress_safe((char *)dst, (char *)back, c, (int)n);
    if (c <= 0 || !same("lz4", src, back, n, (size_t)d)) return 3;
    sum += (unsigned long)c;
    c = LZ4_compress_HC((char *)src, (char *)dst, (int)n, (int)cap, 9);
    d = LZ4_decompress_safe((char *)dst, (char *)back, c, (int)n);
    if (c <= 0 || !same("lz4hc", src, back, n, (size_t)d)) return 4;
    sum += (unsigned long)c;

    size_t z = ZSTD_compress(dst, cap, src, n, 3);
    if (ZSTD_isError(z)) return 5;
    size_t zd = ZSTD_decompress(back, n, dst, z);
    if (ZSTD_isError(zd) || !same("zstd", src, back, n, zd)) return 6;
    sum += z;

    size_t b = cap;
    if (!BrotliEncoderCompress(5, 22, 0, n, src, &b, dst)) return 7;
    size_t bd = n;
    if (BrotliDecoderDecompress(b, dst, &bd, back) != 1 || !same("brotli", src, back, n, bd))
        return 8;
    sum += b;

    printf("ok %lu\n", sum);
    free(src);
    free(back);
    free(dst);
    return 0;
}
