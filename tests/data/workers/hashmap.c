/* Open-addressing string -> int map with Robin Hood probing and tombstone-free deletion. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct slot { char *key; uint32_t hash; uint32_t dist; int value; };
struct map { struct slot *slots; uint32_t cap, len; };

static uint32_t fnv1a(const char *s) {
    uint32_t h = 2166136261u;
    while (*s) { h ^= (uint8_t)*s++; h *= 16777619u; }
    return h | 1; /* 0 marks an empty slot */
}

static char *dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static void swap(struct slot *a, struct slot *b) { struct slot t = *a; *a = *b; *b = t; }

static void place(struct map *m, struct slot s) {
    uint32_t i = s.hash & (m->cap - 1);
    s.dist = 0;
    for (;;) {
        struct slot *cur = &m->slots[i];
        if (!cur->hash) { *cur = s; return; }
        if (cur->dist < s.dist) swap(cur, &s);
        i = (i + 1) & (m->cap - 1);
        s.dist++;
    }
}

static int grow(struct map *m) {
    uint32_t old_cap = m->cap;
    struct slot *old = m->slots;
    m->cap = old_cap ? old_cap * 2 : 16;
    m->slots = calloc(m->cap, sizeof *m->slots);
    if (!m->slots) { m->slots = old; m->cap = old_cap; return -1; }
    for (uint32_t i = 0; i < old_cap; i++)
        if (old[i].hash) place(m, old[i]);
    free(old);
    return 0;
}

static struct slot *find(const struct map *m, const char *key, uint32_t h) {
    if (!m->cap) return NULL;
    uint32_t i = h & (m->cap - 1), dist = 0;
    for (;;) {
        struct slot *s = &m->slots[i];
        if (!s->hash || s->dist < dist) return NULL;
        if (s->hash == h && strcmp(s->key, key) == 0) return s;
        i = (i + 1) & (m->cap - 1);
        dist++;
    }
}

int map_put(struct map *m, const char *key, int value) {
    uint32_t h = fnv1a(key);
    struct slot *s = find(m, key, h);
    if (s) { s->value = value; return 0; }
    if ((m->len + 1) * 4 > m->cap * 3 && grow(m)) return -1;
    struct slot n = { dup(key), h, 0, value };
    if (!n.key) return -1;
    place(m, n);
    m->len++;
    return 0;
}

int map_get(const struct map *m, const char *key, int *value) {
    struct slot *s = find(m, key, fnv1a(key));
    if (!s) return 0;
    *value = s->value;
    return 1;
}

int map_del(struct map *m, const char *key) {
    struct slot *s = find(m, key, fnv1a(key));
    if (!s) return 0;
    free(s->key);
    uint32_t i = (uint32_t)(s - m->slots);
    for (;;) { /* backward-shift deletion keeps probe sequences intact */
        uint32_t j = (i + 1) & (m->cap - 1);
        if (!m->slots[j].hash || m->slots[j].dist == 0) break;
        m->slots[i] = m->slots[j];
        m->slots[i].dist--;
        i = j;
    }
    memset(&m->slots[i], 0, sizeof m->slots[i]);
    m->len--;
    return 1;
}

void map_free(struct map *m) {
    for (uint32_t i = 0; i < m->cap; i++) free(m->slots[i].key);
    free(m->slots);
    m->slots = NULL;
    m->cap = m->len = 0;
}
