#ifndef RING_H
#define RING_H
#include <stddef.h>
struct ring { unsigned char buf[64]; size_t head, len; };
void ring_init(struct ring *r);
int ring_push(struct ring *r, unsigned char byte);
int ring_pop(struct ring *r, unsigned char *byte);
unsigned crc8(const unsigned char *data, size_t n);
#endif
