/* Merge sort and a few numeric helpers over long arrays. */
#include <stdlib.h>
#include <string.h>
#include "minic.h"

static void merge(long *a, long *tmp, size_t lo, size_t mid, size_t hi) {
    size_t i = lo, j = mid, k = lo;
    while (i < mid && j < hi) tmp[k++] = a[i] <= a[j] ? a[i++] : a[j++];
    while (i < mid) tmp[k++] = a[i++];
    while (j < hi) tmp[k++] = a[j++];
    memcpy(a + lo, tmp + lo, (hi - lo) * sizeof *a);
}

static void sort_range(long *a, long *tmp, size_t lo, size_t hi) {
    if (hi - lo < 2) return;
    size_t mid = lo + (hi - lo) / 2;
    sort_range(a, tmp, lo, mid);
    sort_range(a, tmp, mid, hi);
    merge(a, tmp, lo, mid, hi);
}

int sort_longs(long *a, size_t n) {
    long *tmp = malloc(n * sizeof *a);
    if (!tmp) return -1;
    sort_range(a, tmp, 0, n);
    free(tmp);
    return 0;
}

static long clamp(long v, long lo, long hi) { return v < lo ? lo : v > hi ? hi : v; }
static long sq(long v) { return v * v; }

long sum_clamped_squares(const long *a, size_t n, long lo, long hi) {
    long s = 0;
    for (size_t i = 0; i < n; i++) s += sq(clamp(a[i], lo, hi));
    return s;
}

long median(long *a, size_t n) {
    if (!n || sort_longs(a, n)) return 0;
    return n % 2 ? a[n / 2] : (a[n / 2 - 1] + a[n / 2]) / 2;
}
