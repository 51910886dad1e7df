#include "ring.h"
static unsigned step(unsigned crc, unsigned char byte) {
    crc ^= byte;
    for (int k = 0; k < 8; k++) crc = (crc & 0x80u) ? ((crc << 1) ^ 0x07u) & 0xffu : (crc << 1) & 0xffu;
    return crc;
}
unsigned crc8(const unsigned char *data, size_t n) {
    unsigned crc = 0;
    for (size_t i = 0; i < n; i++) crc = step(crc, data[i]);
    return crc;
}
