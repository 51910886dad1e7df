#ifndef MINIC_H
#define MINIC_H
#include <stddef.h>
#include <stdint.h>
struct table { char **keys; long *vals; size_t cap, len; };
size_t b64_encode(const uint8_t *in, size_t n, char *out);
long b64_decode(const char *in, size_t n, uint8_t *out);
int table_put(struct table *t, const char *key, long val);
int table_get(const struct table *t, const char *key, long *val);
void table_free(struct table *t);
int sort_longs(long *a, size_t n);
long sum_clamped_squares(const long *a, size_t n, long lo, long hi);
long median(long *a, size_t n);
#endif
