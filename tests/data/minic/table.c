/* An open-addressing string hash table. */
#include <stdlib.h>
#include <string.h>
#include "minic.h"

static uint32_t fnv1a(const char *s) {
    uint32_t h = 2166136261u;
    while (*s) { h ^= (uint8_t)*s++; h *= 16777619u; }
    return h;
}

static size_t probe(const struct table *t, const char *key) {
    size_t mask = t->cap - 1, i = fnv1a(key) & mask;
    while (t->keys[i] && strcmp(t->keys[i], key) != 0) i = (i + 1) & mask;
    return i;
}

static int grow(struct table *t) {
    struct table bigger = {0};
    bigger.cap = t->cap ? t->cap * 2 : 16;
    bigger.keys = calloc(bigger.cap, sizeof(char *));
    bigger.vals = calloc(bigger.cap, sizeof(long));
    if (!bigger.keys || !bigger.vals) { free(bigger.keys); free(bigger.vals); return -1; }
    for (size_t i = 0; i < t->cap; i++)
        if (t->keys[i]) {
            size_t j = probe(&bigger, t->keys[i]);
            bigger.keys[j] = t->keys[i];
            bigger.vals[j] = t->vals[i];
            bigger.len++;
        }
    free(t->keys); free(t->vals);
    *t = bigger;
    return 0;
}

int table_put(struct table *t, const char *key, long val) {
    if ((t->len + 1) * 4 > t->cap * 3 && grow(t) != 0) return -1;
    size_t i = probe(t, key);
    if (!t->keys[i]) { t->keys[i] = strdup(key); t->len++; }
    t->vals[i] = val;
    return 0;
}

int table_get(const struct table *t, const char *key, long *val) {
    if (!t->cap) return 0;
    size_t i = probe(t, key);
    if (!t->keys[i]) return 0;
    *val = t->vals[i];
    return 1;
}

void table_free(struct table *t) {
    for (size_t i = 0; i < t->cap; i++) free(t->keys[i]);
    free(t->keys); free(t->vals);
    memset(t, 0, sizeof *t);
}
