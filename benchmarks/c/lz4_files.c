/* A small lz4 program for binary_size.py: the lz4 PyPI sdist ships the library only, no
 * command-line tool. For every file named on the command line it compresses and
 * decompresses the whole contents with the block API (fast at two accelerations, HC at
 * three levels), the frame API (one shot) and the streaming frame decoder fed in small
 * pieces, and checks that each round trip gives the file back. Exit 0 and print one line
 * per file on success; non-zero at the first mismatch.
 * Prototypes are declared here so the driver needs no lz4 headers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LZ4_compressBound(int inputSize);
int LZ4_compress_fast(const char *src, char *dst, int srcSize, int dstCapacity, int accel);
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

#define LZ4F_VERSION 100

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *n = len;
    return buf;
}

static int differs(const char *path, const char *how, const char *a, size_t n,
                   const char *b, size_t got) {
    if (got == n && memcmp(a, b, n) == 0) return 0;
    fprintf(stderr, "lz4_files: %s: %s round trip differs\n", path, how);
    return 1;
}

/* The frame decoder fed 1000 compressed bytes at a time, as a reader of a pipe would. */
static size_t frame_decode_in_pieces(const char *src, size_t n, char *dst, size_t cap) {
    LZ4F_dctx *ctx;
    if (LZ4F_isError(LZ4F_createDecompressionContext(&ctx, LZ4F_VERSION))) return (size_t)-1;
    size_t in_pos = 0, out_pos = 0, hint = 1;
    while (in_pos < n && hint != 0) {
        size_t in = n - in_pos < 1000 ? n - in_pos : 1000, out = cap - out_pos;
        hint = LZ4F_decompress(ctx, dst + out_pos, &out, src + in_pos, &in, NULL);
        if (LZ4F_isError(hint)) {
            out_pos = (size_t)-1;
            break;
        }
        in_pos += in;
        out_pos += out;
    }
    LZ4F_freeDecompressionContext(ctx);
    return out_pos;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: lz4_files FILE...\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        size_t n;
        char *src = read_file(argv[i], &n);
        if (!src) {
            fprintf(stderr, "lz4_files: cannot read %s\n", argv[i]);
            return 2;
        }
        int cap = LZ4_compressBound((int)n);
        size_t fcap = LZ4F_compressFrameBound(n, NULL);
        size_t dcap = (size_t)cap > fcap ? (size_t)cap : fcap;
        char *dst = malloc(dcap), *back = malloc(n + 1);
        if (!dst || !back) return 2;
        printf("%s %zu:", argv[i], n);
        static const int accels[] = {1, 8};
        for (int k = 0; k < 2; k++) {
            int c = LZ4_compress_fast(src, dst, (int)n, cap, accels[k]);
            int d = LZ4_decompress_safe(dst, back, c, (int)n);
            if (c <= 0 || d < 0 || differs(argv[i], "fast", src, n, back, (size_t)d)) return 3;
            printf(" fast%d=%d", accels[k], c);
        }
        static const int levels[] = {4, 9, 12};
        for (int k = 0; k < 3; k++) {
            int c = LZ4_compress_HC(src, dst, (int)n, cap, levels[k]);
            int d = LZ4_decompress_safe(dst, back, c, (int)n);
            if (c <= 0 || d < 0 || differs(argv[i], "hc", src, n, back, (size_t)d)) return 4;
            printf(" hc%d=%d", levels[k], c);
        }
        size_t fc = LZ4F_compressFrame(dst, fcap, src, n, NULL);
        if (LZ4F_isError(fc)) return 5;
        size_t fd = frame_decode_in_pieces(dst, fc, back, n + 1);
        if (fd == (size_t)-1 || differs(argv[i], "frame", src, n, back, fd)) return 6;
        printf(" frame=%zu\n", fc);
        free(src);
        free(dst);
        free(back);
    }
    printf("ok\n");
    return 0;
}
