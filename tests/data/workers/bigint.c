/* Little-endian base 2^32 unsigned big integers: add, multiply, divide by small, decimal. */
#include <stddef.h>
#include <stdint.h>

#define LIMBS 64

typedef struct { uint32_t d[LIMBS]; int n; } big;

static void trim(big *a) { while (a->n > 0 && a->d[a->n - 1] == 0) a->n--; }

static void set_u64(big *a, uint64_t v) {
    a->n = 0;
    while (v) { a->d[a->n++] = (uint32_t)v; v >>= 32; }
}

static int add(big *r, const big *a, const big *b) {
    uint64_t carry = 0;
    int n = a->n > b->n ? a->n : b->n;
    for (int i = 0; i < n; i++) {
        uint64_t s = carry + (i < a->n ? a->d[i] : 0) + (i < b->n ? b->d[i] : 0);
        r->d[i] = (uint32_t)s;
        carry = s >> 32;
    }
    r->n = n;
    if (carry) { if (n == LIMBS) return -1; r->d[r->n++] = (uint32_t)carry; }
    return 0;
}

static int mul(big *r, const big *a, const big *b) {
    uint32_t t[2 * LIMBS] = {0};
    for (int i = 0; i < a->n; i++) {
        uint64_t carry = 0;
        for (int j = 0; j < b->n; j++) {
            uint64_t cur = t[i + j] + (uint64_t)a->d[i] * b->d[j] + carry;
            t[i + j] = (uint32_t)cur;
            carry = cur >> 32;
        }
        t[i + b->n] = (uint32_t)carry;
    }
    int n = a->n + b->n;
    while (n > 0 && t[n - 1] == 0) n--;
    if (n > LIMBS) return -1;
    for (int i = 0; i < n; i++) r->d[i] = t[i];
    r->n = n;
    return 0;
}

static uint32_t divmod_small(big *a, uint32_t m) {
    uint64_t rem = 0;
    for (int i = a->n - 1; i >= 0; i--) {
        uint64_t cur = rem << 32 | a->d[i];
        a->d[i] = (uint32_t)(cur / m);
        rem = cur % m;
    }
    trim(a);
    return (uint32_t)rem;
}

static size_t to_decimal(big a, char *out, size_t cap) {
    char tmp[LIMBS * 10 + 1];
    size_t n = 0;
    if (a.n == 0) tmp[n++] = '0';
    while (a.n > 0) {
        uint32_t chunk = divmod_small(&a, 1000000000u);
        for (int k = 0; k < 9 && (a.n > 0 || chunk); k++) { tmp[n++] = (char)('0' + chunk % 10); chunk /= 10; }
    }
    if (n + 1 > cap) return 0;
    for (size_t i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
    out[n] = 0;
    return n;
}

/* n! in decimal; 0 if it does not fit. */
size_t factorial_decimal(unsigned n, char *out, size_t cap) {
    big acc, k;
    set_u64(&acc, 1);
    for (unsigned i = 2; i <= n; i++) {
        set_u64(&k, i);
        if (mul(&acc, &acc, &k)) return 0;
    }
    return to_decimal(acc, out, cap);
}

/* The n-th Fibonacci number in decimal; 0 if it does not fit. */
size_t fibonacci_decimal(unsigned n, char *out, size_t cap) {
    big a, b, c;
    set_u64(&a, 0);
    set_u64(&b, 1);
    for (unsigned i = 0; i < n; i++) {
        if (add(&c, &a, &b)) return 0;
        a = b;
        b = c;
    }
    return to_decimal(a, out, cap);
}
