/* Self-checking driver: exits 0 only if every check passes. */
#include <stdio.h>
#include <string.h>
#include "minic.h"

int main(void) {
    const char *msg = "pymlgo inlines for size";
    char enc[64]; uint8_t dec[64];
    size_t n = b64_encode((const uint8_t *)msg, strlen(msg), enc);
    long m = b64_decode(enc, n, dec);
    if (m != (long)strlen(msg) || memcmp(dec, msg, (size_t)m) != 0) return 1;
    struct table t = {0};
    char key[16];
    for (long i = 0; i < 100; i++) { snprintf(key, sizeof key, "k%ld", i); table_put(&t, key, i * i); }
    long v = 0;
    if (!table_get(&t, "k42", &v) || v != 1764) return 2;
    table_free(&t);
    long a[] = {9, 3, 7, 1, 5};
    if (median(a, 5) != 5 || a[0] != 1 || a[4] != 9) return 3;
    if (sum_clamped_squares(a, 5, 2, 8) != 4 + 9 + 25 + 49 + 64) return 4;
    puts("ok");
    return 0;
}
