/* One reading of a v2 record's head, shared by the C walks over records sections (`_walk.c`: the append
 * path's timestamp scan and the cleaner's spans; `_clean.c`: the log cleaner's offset map and copy). Each
 * follows Kafka's `DefaultRecord.readFrom` field order: length, attributes, timestamp delta, offset delta,
 * key, value (then headers, which only the append path walks). */
#ifndef CHRONOLOG_RECORDWALK_H
#define CHRONOLOG_RECORDWALK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Big-endian fields of a batch header. */
static inline int64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static inline int32_t be32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

/* An int varint as Kafka reads it (`ByteUtils.readVarint`, Python's `read_raw_varint(..., int32=True)`):
 * at most 5 bytes, bits beyond 32 dropped; 0 when it runs past `n` or goes on after 5 bytes. Record lengths,
 * offset deltas, key, value and header sizes and header counts. */
static inline int read_varint32(const uint8_t *buf, Py_ssize_t n, Py_ssize_t *pos, uint64_t *out)
{
    uint64_t raw = 0;
    Py_ssize_t p = *pos;
    if (p + 1 < n) { /* one or two bytes: every length under 8 KiB, every delta under 8192 */
        if (buf[p] < 0x80) {
            *out = buf[p];
            *pos = p + 1;
            return 1;
        }
        if (buf[p + 1] < 0x80) {
            *out = (uint64_t)(buf[p] & 0x7F) | ((uint64_t)buf[p + 1] << 7);
            *pos = p + 2;
            return 1;
        }
    }
    for (int shift = 0; shift <= 28; shift += 7) {
        if (p >= n)
            return 0;
        uint8_t b = buf[p++];
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *pos = p;
            *out = raw & 0xFFFFFFFFu;
            return 1;
        }
    }
    return 0;
}

/* A long varint (the timestamp delta; Python's `read_raw_varint`), at most 10 bytes: 1 with its value, WIDE
 * when its 10th byte carries bits beyond 64 (Python reads a bigger integer: `out` then holds the low 64
 * bits, so its lowest bit, the zigzag sign, is right, and the value is at least 2**64), 0 when it runs
 * past `n` or goes on after 10 bytes (Python raises). */
#define WIDE 2
static inline int read_varint(const uint8_t *buf, Py_ssize_t n, Py_ssize_t *pos, uint64_t *out)
{
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    if (p + 1 < n) {
        if (buf[p] < 0x80) {
            *out = buf[p];
            *pos = p + 1;
            return 1;
        }
        if (buf[p + 1] < 0x80) {
            *out = (uint64_t)(buf[p] & 0x7F) | ((uint64_t)buf[p + 1] << 7);
            *pos = p + 2;
            return 1;
        }
    }
    for (;;) {
        if (p >= n)
            return 0;
        uint8_t b = buf[p++];
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *pos = p;
            *out = raw;
            return shift == 63 && (b & 0x7E) ? WIDE : 1;
        }
        shift += 7;
        if (shift > 63)
            return 0;
    }
}

static inline int64_t zigzag(uint64_t raw)
{
    return (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
}

/* A record's head: `start` is where its length varint begins (a span copied whole starts there), `end`
 * where the record ends, `after_value_len` where its value starts (the value itself is not skipped: the
 * append path goes on from there to the headers). Lengths are -1 for null. */
typedef struct {
    Py_ssize_t start, end, key_start, value_start;
    int64_t key_len, value_len, ts_delta, offset_delta;
    uint64_t ts_raw;
    int ts_status; /* 1, or WIDE: a timestamp delta beyond 64 bits (ts_delta then holds only its low bits) */
    uint64_t offset_raw;
} RecordHead;

/* Reads the head of the record at `pos` of a records section of `n` bytes: 1 when its length, deltas, key
 * and value length lie inside the record and inside `n`, 0 when they do not (the Python walks reject every
 * such record: their own checks are made against the same bounds or fail later on the same bytes). */
static inline int record_head(const uint8_t *buf, Py_ssize_t n, Py_ssize_t pos, RecordHead *r)
{
    uint64_t raw, klen_raw, vlen_raw;
    r->start = pos;
    if (!read_varint32(buf, n, &pos, &raw))
        return 0;
    int64_t length = zigzag(raw);
    if (length < 3 || length > n - pos)
        return 0;
    Py_ssize_t end = pos + (Py_ssize_t)length;
    Py_ssize_t p = pos + 1; /* after the attributes byte */
    r->ts_status = read_varint(buf, end, &p, &r->ts_raw);
    if (!r->ts_status || !read_varint32(buf, end, &p, &r->offset_raw))
        return 0;
    if (!read_varint32(buf, end, &p, &klen_raw))
        return 0;
    int64_t klen = (int32_t)zigzag(klen_raw);
    r->key_start = p;
    if (klen >= 0) {
        if (klen > end - p)
            return 0;
        p += (Py_ssize_t)klen;
    } else {
        klen = -1;
    }
    if (!read_varint32(buf, end, &p, &vlen_raw))
        return 0;
    int64_t vlen = (int32_t)zigzag(vlen_raw);
    if (vlen >= 0) {
        if (vlen > end - p)
            return 0;
    } else {
        vlen = -1;
    }
    r->value_start = p;
    r->end = end;
    r->key_len = klen;
    r->value_len = vlen;
    r->ts_delta = zigzag(r->ts_raw);
    r->offset_delta = (int32_t)zigzag(r->offset_raw);
    return 1;
}

#endif
