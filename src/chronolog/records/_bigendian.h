/* Big-endian stores for the C extensions that write record batch headers (records/_clean.c,
 * records/_encode.c): Kafka's wire and log formats are big-endian. One source, a static copy each. */
#ifndef CHRONOLOG_BIGENDIAN_H
#define CHRONOLOG_BIGENDIAN_H
#include <stdint.h>

static inline void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static inline void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void put_be16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

#endif
