/* What the regalloc test drivers over zstd and brotli share: the prototypes of the library
 * functions they call (declared here, so no library headers are needed) and one
 * deterministic input generator. */
#ifndef PYMLGO_DEMO_CODECS_H
#define PYMLGO_DEMO_CODECS_H

#include <stddef.h>

size_t ZSTD_compressBound(size_t srcSize);
size_t ZSTD_compress(void *dst, size_t cap, const void *src, size_t n, int level);
size_t ZSTD_decompress(void *dst, size_t cap, const void *src, size_t n);
unsigned ZSTD_isError(size_t code);
size_t BrotliEncoderMaxCompressedSize(size_t input_size);
int BrotliEncoderCompress(int quality, int lgwin, int mode, size_t input_size,
                          const unsigned char *input, size_t *encoded_size,
                          unsigned char *encoded);
int BrotliDecoderDecompress(size_t encoded_size, const unsigned char *encoded,
                            size_t *decoded_size, unsigned char *decoded);

static unsigned next(unsigned *x) { return *x = *x * 1103515245u + 12345u; }

/* Words with repeats at many distances, broken by short runs of noise: exercises match
 * finding and literals. */
static void text(unsigned char *buf, size_t n, unsigned seed) {
    static const char *words[] = {"register ", "allocation ", "eviction ", "spill ",
                                  "reload ", "copy ", "live range ", "interference ",
                                  "priority ", "greedy ", "{\"k\": 17, ", "0x3f2a, "};
    unsigned x = seed;
    size_t i = 0;
    while (i < n) {
        if ((next(&x) >> 8) % 9 == 0) {
            for (int k = 0; k < 11 && i < n; k++) buf[i++] = (unsigned char)(next(&x) >> 24);
            continue;
        }
        for (const char *p = words[(x >> 16) % 12]; *p && i < n; p++) buf[i++] = *p;
    }
}

#endif
