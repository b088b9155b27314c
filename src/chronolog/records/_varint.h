/* The zigzag varint reader and failure record shared by the columnar decoder (_columns.c) and the
 * timeline's late-record placement (_timeline.c): one reading of a record's bytes for both. */
#ifndef CHRONOLOG_VARINT_H
#define CHRONOLOG_VARINT_H

#include <stdint.h>

#define DONE 0
#define FULL 1
#define PYTHON 2
#define CORRUPT 3
#define INVALID 4

typedef struct {
    int status;          /* INVALID or CORRUPT; 0 for a Python exception already set */
    const char *message; /* a static message */
    char text[96];       /* or a formatted one */
} Fail;

static int fail(Fail *f, int status, const char *message)
{
    f->status = status;
    f->message = message;
    return -1;
}

/* A zigzag varint within [*pos, end): int32 as Kafka's ByteUtils.readVarint (5 bytes, bits beyond 32
 * dropped), else a long (10 bytes; a value beyond 64 bits is refused). */
static inline int varint(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, int int32, int64_t *out, Fail *f)
{
    Py_ssize_t p = *pos;
    if (p < end && buf[p] < 0x80) { /* the common one-byte case */
        uint8_t b = buf[p];
        *out = (int64_t)(b >> 1) ^ -(int64_t)(b & 1);
        *pos = p + 1;
        return 0;
    }
    uint64_t raw = 0;
    int shift = 0;
    for (;;) {
        if (p >= end)
            return fail(f, INVALID, "varint runs past the record");
        uint8_t b = buf[p++];
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            if (int32) {
                raw &= 0xFFFFFFFFu;
                uint32_t r = (uint32_t)raw;
                *out = (int64_t)(r >> 1) ^ -(int64_t)(r & 1);
            } else {
                if (shift == 63 && (b & 0x7E))
                    return fail(f, INVALID, "timestamp delta beyond 64 bits");
                *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            }
            *pos = p;
            return 0;
        }
        shift += 7;
        if (shift > (int32 ? 28 : 63))
            return fail(f, INVALID, int32 ? "varint is longer than 5 bytes" : "varint is longer than 10 bytes");
    }
}

static inline int16_t be16(const uint8_t *p)
{
    return (int16_t)(((uint16_t)p[0] << 8) | p[1]);
}

#endif
