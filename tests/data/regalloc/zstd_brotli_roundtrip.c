/* Round trips through zstd and brotli at levels that reach different parts of each library
 * (zstd: fast, double-fast, lazy, binary-tree and optimal match finders, a trained
 * dictionary; brotli: the one- and two-pass fragment compressors, the hashers of the middle
 * qualities and the Zopfli-style quality 11), on text-like and on incompressible data.
 * Linked against library objects register-allocated by a policy: wrong advice can
 * miscompile, so every decompressed buffer is compared with its input. Exit 0 and print
 * the compressed sizes on success. Prototypes are declared here and in demo_codecs.h:
 * no library headers needed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo_codecs.h"

void *ZSTD_createCCtx(void);
size_t ZSTD_freeCCtx(void *cctx);
void *ZSTD_createDCtx(void);
size_t ZSTD_freeDCtx(void *dctx);
size_t ZSTD_compress_usingDict(void *cctx, void *dst, size_t cap, const void *src, size_t n,
                               const void *dict, size_t dict_size, int level);
size_t ZSTD_decompress_usingDict(void *dctx, void *dst, size_t cap, const void *src,
                                 size_t n, const void *dict, size_t dict_size);
size_t ZDICT_trainFromBuffer(void *dict, size_t cap, const void *samples,
                             const size_t *sample_sizes, unsigned nb_samples);
unsigned ZDICT_isError(size_t code);

#define SAMPLES 64
#define SAMPLE_SIZE 512

static void noise(unsigned char *buf, size_t n, unsigned seed) {
    unsigned x = seed;
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(next(&x) >> 24);
}

static int same(const char *what, int level, const void *a, size_t n, const void *b,
                size_t got) {
    if (got != n || memcmp(a, b, n) != 0) {
        fprintf(stderr, "zstd_brotli_roundtrip: %s level %d round trip differs\n", what, level);
        return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? (size_t)atol(argv[1]) : 65536;
    size_t cap = BrotliEncoderMaxCompressedSize(n) + ZSTD_compressBound(n) + 1024;
    unsigned char *src = malloc(n), *back = malloc(n), *dst = malloc(cap);
    if (!src || !back || !dst) return 2;
    static const int zstd_levels[] = {1, 3, 7, 13, 19};
    static const int brotli_qualities[] = {0, 1, 5, 9, 11};

    for (int kind = 0; kind < 2; kind++) {
        if (kind == 0) text(src, n, 4242u + (unsigned)n);
        else noise(src, n, 77u);
        printf("%s:", kind == 0 ? "text" : "noise");
        for (int i = 0; i < 5; i++) {
            size_t c = ZSTD_compress(dst, cap, src, n, zstd_levels[i]);
            if (ZSTD_isError(c)) return 3;
            size_t d = ZSTD_decompress(back, n, dst, c);
            if (ZSTD_isError(d) || !same("zstd", zstd_levels[i], src, n, back, d)) return 4;
            printf(" zstd%d=%zu", zstd_levels[i], c);
        }
        for (int i = 0; i < 5; i++) {
            size_t c = cap;
            if (!BrotliEncoderCompress(brotli_qualities[i], 22, 0, n, src, &c, dst)) return 5;
            size_t d = n;
            if (BrotliDecoderDecompress(c, dst, &d, back) != 1 ||
                !same("brotli", brotli_qualities[i], src, n, back, d))
                return 6;
            printf(" brotli%d=%zu", brotli_qualities[i], c);
        }
        printf("\n");
    }

    /* A dictionary trained on small text samples, then used both ways. */
    static unsigned char samples[SAMPLES * SAMPLE_SIZE], dict[4096];
    size_t sizes[SAMPLES];
    for (int i = 0; i < SAMPLES; i++) {
        text(samples + i * SAMPLE_SIZE, SAMPLE_SIZE, 9000u + (unsigned)i);
        sizes[i] = SAMPLE_SIZE;
    }
    size_t dict_size = ZDICT_trainFromBuffer(dict, sizeof dict, samples, sizes, SAMPLES);
    if (ZDICT_isError(dict_size)) return 7;
    void *cctx = ZSTD_createCCtx(), *dctx = ZSTD_createDCtx();
    if (!cctx || !dctx) return 2;
    unsigned char sample[SAMPLE_SIZE];
    text(sample, SAMPLE_SIZE, 123456u);
    size_t c = ZSTD_compress_usingDict(cctx, dst, cap, sample, SAMPLE_SIZE, dict, dict_size, 3);
    if (ZSTD_isError(c)) return 8;
    size_t d = ZSTD_decompress_usingDict(dctx, back, n, dst, c, dict, dict_size);
    if (ZSTD_isError(d) || !same("zstd+dict", 3, sample, SAMPLE_SIZE, back, d)) return 9;
    printf("dict=%zu zstd3+dict=%zu\nok\n", dict_size, c);
    ZSTD_freeCCtx(cctx);
    ZSTD_freeDCtx(dctx);
    free(src);
    free(back);
    free(dst);
    return 0;
}
