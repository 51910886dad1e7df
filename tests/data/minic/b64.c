/* A small base64 codec: several small helpers the inliner has to decide about. */
#include <stddef.h>
#include <stdint.h>
#include "minic.h"

static const char ALPHABET[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int decode_char(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

static void encode_block(const uint8_t *in, size_t n, char *out) {
    uint32_t v = (uint32_t)in[0] << 16;
    if (n > 1) v |= (uint32_t)in[1] << 8;
    if (n > 2) v |= in[2];
    out[0] = ALPHABET[(v >> 18) & 63];
    out[1] = ALPHABET[(v >> 12) & 63];
    out[2] = n > 1 ? ALPHABET[(v >> 6) & 63] : '=';
    out[3] = n > 2 ? ALPHABET[v & 63] : '=';
}

size_t b64_encode(const uint8_t *in, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        encode_block(in + i, n - i < 3 ? n - i : 3, out + o);
        o += 4;
    }
    out[o] = 0;
    return o;
}

long b64_decode(const char *in, size_t n, uint8_t *out) {
    size_t o = 0;
    if (n % 4) return -1;
    for (size_t i = 0; i < n; i += 4) {
        int a = decode_char(in[i]), b = decode_char(in[i + 1]);
        int c = in[i + 2] == '=' ? 0 : decode_char(in[i + 2]);
        int d = in[i + 3] == '=' ? 0 : decode_char(in[i + 3]);
        if (a < 0 || b < 0 || c < 0 || d < 0) return -1;
        uint32_t v = ((uint32_t)a << 18) | ((uint32_t)b << 12) | ((uint32_t)c << 6) | (uint32_t)d;
        out[o++] = (uint8_t)(v >> 16);
        if (in[i + 2] != '=') out[o++] = (uint8_t)(v >> 8);
        if (in[i + 3] != '=') out[o++] = (uint8_t)v;
    }
    return (long)o;
}
