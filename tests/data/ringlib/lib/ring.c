#include "ring.h"
static size_t wrap(size_t i) { return i % sizeof(((struct ring *)0)->buf); }
void ring_init(struct ring *r) { r->head = 0; r->len = 0; }
int ring_push(struct ring *r, unsigned char byte) {
    if (r->len == sizeof r->buf) return -1;
    r->buf[wrap(r->head + r->len)] = byte;
    r->len++;
    return 0;
}
int ring_pop(struct ring *r, unsigned char *byte) {
    if (r->len == 0) return -1;
    *byte = r->buf[r->head];
    r->head = wrap(r->head + 1);
    r->len--;
    return 0;
}
