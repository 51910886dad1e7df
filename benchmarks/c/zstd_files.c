/* A small zstd program for binary_size.py: the zstandard PyPI sdist ships the zstd library
 * (as one amalgamated file) but not the zstd command-line tool. For every file named on
 * the command line it compresses and decompresses the contents one-shot at five levels
 * (a negative "fast" level up to the optimal parser), through the streaming API with two
 * worker threads and a checksum, feeding the decoder in small pieces; then it trains a
 * dictionary on 4 KiB pieces of all the files and round-trips pieces with it. Every round
 * trip must give the input back. Exit 0 and print the compressed sizes on success.
 * Prototypes are declared here so the driver needs no zstd headers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const void *src; size_t size; size_t pos; } InBuffer;
typedef struct { void *dst; size_t size; size_t pos; } OutBuffer;
size_t ZSTD_compressBound(size_t srcSize);
size_t ZSTD_compress(void *dst, size_t cap, const void *src, size_t n, int level);
size_t ZSTD_decompress(void *dst, size_t cap, const void *src, size_t n);
unsigned ZSTD_isError(size_t code);
const char *ZSTD_getErrorName(size_t code);
void *ZSTD_createCCtx(void);
size_t ZSTD_freeCCtx(void *cctx);
void *ZSTD_createDCtx(void);
size_t ZSTD_freeDCtx(void *dctx);
size_t ZSTD_CCtx_setParameter(void *cctx, int param, int value);
size_t ZSTD_compressStream2(void *cctx, OutBuffer *out, InBuffer *in, int end_op);
size_t ZSTD_decompressStream(void *dctx, OutBuffer *out, InBuffer *in);
size_t ZSTD_compress_usingDict(void *cctx, void *dst, size_t cap, const void *src, size_t n,
                               const void *dict, size_t dict_size, int level);
size_t ZSTD_decompress_usingDict(void *dctx, void *dst, size_t cap, const void *src,
                                 size_t n, const void *dict, size_t dict_size);
size_t ZDICT_trainFromBuffer(void *dict, size_t cap, const void *samples,
                             const size_t *sample_sizes, unsigned nb_samples);
unsigned ZDICT_isError(size_t code);

enum { C_LEVEL = 100, C_CHECKSUM = 201, C_WORKERS = 400 };  /* ZSTD_cParameter */
enum { E_CONTINUE = 0, E_END = 2 };                        /* ZSTD_EndDirective */
#define PIECE 4096
#define MAX_FILES 64

static unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0, got;
    unsigned char *buf = malloc(cap);
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *n = len;
    return buf;
}

static int differs(const char *path, const char *how, const void *a, size_t n, const void *b,
                   size_t got) {
    if (got == n && memcmp(a, b, n) == 0) return 0;
    fprintf(stderr, "zstd_files: %s: %s round trip differs\n", path, how);
    return 1;
}

/* Compress through the streaming API in 64 KiB input pieces; returns the frame size. */
static size_t stream_compress(void *cctx, const unsigned char *src, size_t n, void *dst,
                              size_t cap) {
    OutBuffer out = {dst, cap, 0};
    for (size_t pos = 0;;) {
        size_t take = n - pos < 65536 ? n - pos : 65536;
        InBuffer in = {src + pos, take, 0};
        int last = pos + take == n;
        size_t left;
        do {
            left = ZSTD_compressStream2(cctx, &out, &in, last ? E_END : E_CONTINUE);
            if (ZSTD_isError(left)) return left;
        } while (last ? left != 0 : in.pos < in.size);
        pos += take;
        if (last) return out.pos;
    }
}

/* Decompress a frame fed 1000 bytes at a time; returns the decoded size. */
static size_t stream_decompress(void *dctx, const void *src, size_t n, void *dst, size_t cap) {
    OutBuffer out = {dst, cap, 0};
    for (size_t pos = 0; pos < n;) {
        InBuffer in = {(const unsigned char *)src + pos, n - pos < 1000 ? n - pos : 1000, 0};
        while (in.pos < in.size) {
            size_t r = ZSTD_decompressStream(dctx, &out, &in);
            if (ZSTD_isError(r)) return (size_t)-1;
            if (out.pos == out.size && in.pos < in.size) return (size_t)-1;
        }
        pos += in.size;
    }
    return out.pos;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > MAX_FILES + 1) {
        fprintf(stderr, "usage: zstd_files FILE... (at most %d)\n", MAX_FILES);
        return 2;
    }
    static const int levels[] = {-5, 1, 3, 9, 19};
    unsigned char *files[MAX_FILES];
    size_t sizes[MAX_FILES], total = 0;
    void *cctx = ZSTD_createCCtx(), *dctx = ZSTD_createDCtx();
    if (!cctx || !dctx) return 2;
    for (int i = 1; i < argc; i++) {
        size_t n;
        unsigned char *src = read_file(argv[i], &n);
        if (!src) {
            fprintf(stderr, "zstd_files: cannot read %s\n", argv[i]);
            return 2;
        }
        files[i - 1] = src;
        sizes[i - 1] = n;
        total += n;
        size_t cap = ZSTD_compressBound(n);
        unsigned char *dst = malloc(cap), *back = malloc(n + 1);
        if (!dst || !back) return 2;
        printf("%s %zu:", argv[i], n);
        for (int k = 0; k < 5; k++) {
            size_t c = ZSTD_compress(dst, cap, src, n, levels[k]);
            if (ZSTD_isError(c)) return 3;
            size_t d = ZSTD_decompress(back, n + 1, dst, c);
            if (ZSTD_isError(d) || differs(argv[i], "one-shot", src, n, back, d)) return 4;
            printf(" l%d=%zu", levels[k], c);
        }
        ZSTD_CCtx_setParameter(cctx, C_LEVEL, 6);
        ZSTD_CCtx_setParameter(cctx, C_CHECKSUM, 1);
        if (ZSTD_isError(ZSTD_CCtx_setParameter(cctx, C_WORKERS, 2))) return 5;
        size_t c = stream_compress(cctx, src, n, dst, cap);
        if (ZSTD_isError(c)) {
            fprintf(stderr, "zstd_files: stream: %s\n", ZSTD_getErrorName(c));
            return 5;
        }
        size_t d = stream_decompress(dctx, dst, c, back, n + 1);
        if (d == (size_t)-1 || differs(argv[i], "streaming", src, n, back, d)) return 6;
        printf(" stream=%zu\n", c);
        free(dst);
        free(back);
    }

    /* A dictionary trained on 4 KiB pieces of all the files, used both ways on each piece. */
    size_t nb = 0;
    for (int i = 0; i < argc - 1; i++) nb += sizes[i] / PIECE;
    if (nb >= 16) {
        unsigned char *samples = malloc(nb * PIECE), dict[16384], dst[2 * PIECE],
                      back[PIECE];
        size_t *sample_sizes = malloc(nb * sizeof *sample_sizes), k = 0;
        if (!samples || !sample_sizes) return 2;
        for (int i = 0; i < argc - 1; i++)
            for (size_t off = 0; off + PIECE <= sizes[i]; off += PIECE, k++) {
                memcpy(samples + k * PIECE, files[i] + off, PIECE);
                sample_sizes[k] = PIECE;
            }
        size_t dict_size = ZDICT_trainFromBuffer(dict, sizeof dict, samples, sample_sizes,
                                                 (unsigned)nb);
        if (ZDICT_isError(dict_size)) return 7;
        size_t packed = 0;
        for (k = 0; k < nb; k++) {
            const unsigned char *piece = samples + k * PIECE;
            size_t c = ZSTD_compress_usingDict(cctx, dst, sizeof dst, piece, PIECE, dict,
                                               dict_size, 3);
            if (ZSTD_isError(c)) return 8;
            size_t d = ZSTD_decompress_usingDict(dctx, back, PIECE, dst, c, dict, dict_size);
            if (ZSTD_isError(d) || differs("dictionary", "piece", piece, PIECE, back, d))
                return 9;
            packed += c;
        }
        printf("dict=%zu pieces=%zu packed=%zu\n", dict_size, nb, packed);
        free(samples);
        free(sample_sizes);
    }
    for (int i = 0; i < argc - 1; i++) free(files[i]);
    ZSTD_freeCCtx(cctx);
    ZSTD_freeDCtx(dctx);
    printf("ok %zu bytes\n", total);
    return 0;
}
