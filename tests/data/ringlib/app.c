#include <stdio.h>
#include "ring.h"
int main(void) {
    struct ring r;
    unsigned char out[8], b;
    size_t n = 0;
    ring_init(&r);
    for (unsigned char c = 'a'; c < 'a' + 8; c++) ring_push(&r, c);
    while (ring_pop(&r, &b) == 0) out[n++] = b;
    printf("crc8=%u\n", crc8(out, n));
    return crc8(out, n) == 0 ? 1 : 0;
}
