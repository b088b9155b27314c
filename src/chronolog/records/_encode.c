/* Kafka v2 record batches written straight from Arrow column buffers (records/encode.py), for writers
 * that hold their rows as Arrow (the Spark sink): no Python object per record.
 *
 * Columns come in as tuples of buffers, as Arrow lays them out, each with the array's offset:
 *   binary  (validity or None, int32 offsets, data, offset)       keys, values, header keys and values
 *           optionally (..., offset, gap): row i is data[offsets[i] : offsets[i + 1] - gap], so that the
 *           lines of a block of text are rows without a copy (gap 1 skips each `\n`; records/_lines.c)
 *   int64   (validity or None, data, offset)                      timestamps in ms (null: `now_ms`)
 *   headers (validity or None, int32 list offsets, offset, key binary, value binary): entry i of a row
 *           is element i of the key and value children (their own offsets already in their tuples).
 * A column given as None is null in every row. With an index (buffer of int64 or uint64 row numbers,
 * offset, count), the records are rows index[0..count) in that order (a partition's rows of a task's
 * columns, without copying them first); every number is checked against `rows`. Records go into batches of at most `max_bytes` (the
 * batch's 61-byte header included; a record bigger than that alone gets a batch of its own: the caller
 * has checked sizes against the topic's limit). Each batch is what Kafka's MemoryRecordsBuilder writes
 * for a plain producer: base offset 0, partition leader epoch -1, no producer id, CreateTime,
 * uncompressed, base timestamp the first record's, CRC-32C over attributes..end (DefaultRecordBatch).
 * With a producer ((producer id, epoch, base sequence)), the batches are an idempotent producer's
 * (KIP-98): each carries that id and epoch, and the sequence of its first record, counted on from the
 * base sequence over the batches written (wrapping after 2^31 - 1, as Kafka's DefaultRecordBatch).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_bigendian.h"
#include "_crc32c.h"

#define HEADER_SIZE 61

typedef struct {
    int present;
    Py_buffer valid, offs, data;
    int has_valid;
    Py_ssize_t offset, gap;
} Bin;

typedef struct {
    int present;
    Py_buffer valid, data;
    int has_valid;
    Py_ssize_t offset;
} I64;

typedef struct {
    int present;
    Py_buffer valid, offs;
    int has_valid;
    Py_ssize_t offset;
    Bin key, value;
} Hdr;

static int get_buf(PyObject *o, Py_buffer *b)
{
    return PyObject_GetBuffer(o, b, PyBUF_SIMPLE);
}

static void bin_release(Bin *c)
{
    if (!c->present)
        return;
    if (c->has_valid)
        PyBuffer_Release(&c->valid);
    PyBuffer_Release(&c->offs);
    PyBuffer_Release(&c->data);
    c->present = 0;
}

static int bin_parse(PyObject *t, Bin *c, const char *what)
{
    memset(c, 0, sizeof(*c));
    if (t == Py_None)
        return 0;
    PyObject *v, *o, *d;
    Py_ssize_t off, gap = 0;
    if (!PyArg_ParseTuple(t, "OOOn|n", &v, &o, &d, &off, &gap) || gap < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: (validity, offsets, data, offset[, gap >= 0]) expected", what);
        return -1;
    }
    if (v != Py_None) {
        if (get_buf(v, &c->valid) < 0)
            return -1;
        c->has_valid = 1;
    }
    if (get_buf(o, &c->offs) < 0) {
        if (c->has_valid)
            PyBuffer_Release(&c->valid);
        return -1;
    }
    if (get_buf(d, &c->data) < 0) {
        if (c->has_valid)
            PyBuffer_Release(&c->valid);
        PyBuffer_Release(&c->offs);
        return -1;
    }
    c->offset = off;
    c->gap = gap;
    c->present = 1;
    return 0;
}

static inline int bit(const Py_buffer *b, Py_ssize_t i)
{
    return (((const uint8_t *)b->buf)[i >> 3] >> (i & 7)) & 1;
}

/* (pointer, length) of row i; length -1 for null. Offsets are checked against the data buffer. */
static inline int bin_get(const Bin *c, Py_ssize_t i, const uint8_t **p, int32_t *n)
{
    if (!c->present) {
        *n = -1;
        return 0;
    }
    Py_ssize_t j = c->offset + i;
    if (c->has_valid && ((j >> 3) >= c->valid.len || !bit(&c->valid, j))) {
        *n = -1;
        return 0;
    }
    if ((j + 2) * 4 > c->offs.len)
        return -1;
    const int32_t *o = (const int32_t *)c->offs.buf;
    int64_t a = o[j], b = (int64_t)o[j + 1] - c->gap;
    if (a < 0 || b < a || b > c->data.len)
        return -1;
    *p = (const uint8_t *)c->data.buf + a;
    *n = (int32_t)(b - a);
    return 0;
}

static inline int varint_len(int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *put_varint(uint8_t *out, int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) {
        *out++ = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    *out++ = (uint8_t)z;
    return out;
}

static int64_t ts_get(const I64 *t, Py_ssize_t i, int64_t now_ms)
{
    if (!t->present)
        return now_ms;
    Py_ssize_t j = t->offset + i;
    if (t->has_valid && ((j >> 3) >= t->valid.len || !bit(&t->valid, j)))
        return now_ms;
    return ((const int64_t *)t->data.buf)[j];
}

/* The header entries [first, end) of row i; first == end when none (a null list is no headers). */
static int hdr_range(const Hdr *h, Py_ssize_t i, int32_t *first, int32_t *end)
{
    *first = *end = 0;
    if (!h->present)
        return 0;
    Py_ssize_t j = h->offset + i;
    if (h->has_valid && ((j >> 3) >= h->valid.len || !bit(&h->valid, j)))
        return 0;
    if ((j + 2) * 4 > h->offs.len)
        return -1;
    const int32_t *o = (const int32_t *)h->offs.buf;
    if (o[j] < 0 || o[j + 1] < o[j])
        return -1;
    *first = o[j];
    *end = o[j + 1];
    return 0;
}

static PyObject *corrupt(void)
{
    PyErr_SetString(PyExc_ValueError, "Arrow offsets point outside their buffer");
    return NULL;
}

static uint8_t *put_bytes(uint8_t *out, const Bin *c, Py_ssize_t i, int null_as_empty)
{
    const uint8_t *p = NULL;
    int32_t n = -1;
    bin_get(c, i, &p, &n);  /* checked in pass 1 */
    if (n < 0 && null_as_empty)
        n = 0;
    out = put_varint(out, n);
    if (n > 0) {
        memcpy(out, p, (size_t)n);
        out += n;
    }
    return out;
}

static PyObject *encode_batches(PyObject *self, PyObject *args)
{
    Py_ssize_t rows;
    PyObject *key_t, *value_t, *ts_t, *hdr_t, *index_t = Py_None, *producer_t = Py_None;
    long long now_ms, max_bytes;
    if (!PyArg_ParseTuple(args, "nOOOOLL|OO", &rows, &key_t, &value_t, &ts_t, &hdr_t, &now_ms, &max_bytes, &index_t,
                          &producer_t))
        return NULL;
    long long producer_id = -1;
    int producer_epoch = -1;
    long long sequence = -1;
    if (producer_t != Py_None) {
        if (!PyArg_ParseTuple(producer_t, "LiL", &producer_id, &producer_epoch, &sequence))
            return NULL;
        if (producer_id < 0 || producer_epoch < 0 || producer_epoch > 32767 || sequence < 0 || sequence > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "producer: (id >= 0, epoch 0..32767, base sequence 0..2^31-1)");
            return NULL;
        }
    }
    Py_buffer ib;
    int has_index = 0;
    const int64_t *idx = NULL;
    Py_ssize_t count = rows;
    Bin key, value;
    I64 ts;
    Hdr hdr;
    memset(&ts, 0, sizeof(ts));
    memset(&hdr, 0, sizeof(hdr));
    PyObject *result = NULL;
    int64_t *sizes = NULL;
    if (bin_parse(key_t, &key, "key") < 0)
        return NULL;
    if (bin_parse(value_t, &value, "value") < 0) {
        bin_release(&key);
        return NULL;
    }
    if (ts_t != Py_None) {
        PyObject *v, *d;
        if (!PyArg_ParseTuple(ts_t, "OOn", &v, &d, &ts.offset))
            goto done;
        if (v != Py_None) {
            if (get_buf(v, &ts.valid) < 0)
                goto done;
            ts.has_valid = 1;
        }
        if (get_buf(d, &ts.data) < 0) {
            if (ts.has_valid)
                PyBuffer_Release(&ts.valid);
            ts.has_valid = 0;
            goto done;
        }
        ts.present = 1;
        if ((ts.offset + rows) * 8 > ts.data.len) {
            corrupt();
            goto done;
        }
    }
    if (hdr_t != Py_None) {
        PyObject *v, *o, *k, *vv;
        if (!PyArg_ParseTuple(hdr_t, "OOnOO", &v, &o, &hdr.offset, &k, &vv))
            goto done;
        if (v != Py_None) {
            if (get_buf(v, &hdr.valid) < 0)
                goto done;
            hdr.has_valid = 1;
        }
        if (get_buf(o, &hdr.offs) < 0) {
            if (hdr.has_valid)
                PyBuffer_Release(&hdr.valid);
            hdr.has_valid = 0;
            goto done;
        }
        hdr.present = 1;
        if (bin_parse(k, &hdr.key, "header key") < 0 || bin_parse(vv, &hdr.value, "header value") < 0)
            goto done;
    }
    if (index_t != Py_None) {
        PyObject *ibo;
        Py_ssize_t ioff;
        if (!PyArg_ParseTuple(index_t, "Onn", &ibo, &ioff, &count))
            goto done;
        if (get_buf(ibo, &ib) < 0)
            goto done;
        has_index = 1;
        if (ioff < 0 || count < 0 || (ioff + count) > ib.len / 8) {
            PyErr_SetString(PyExc_ValueError, "index: offset and count outside its buffer");
            goto done;
        }
        idx = (const int64_t *)ib.buf + ioff;
        for (Py_ssize_t r = 0; r < count; r++) {
            if (idx[r] < 0 || idx[r] >= rows) {
                PyErr_Format(PyExc_IndexError, "index: row %lld of %zd rows", (long long)idx[r], rows);
                goto done;
            }
        }
    }
#define ROW(x) (idx != NULL ? (Py_ssize_t)idx[(x)] : (x))

    result = PyList_New(0);
    if (!result || count <= 0)
        goto done;
    sizes = PyMem_Malloc(sizeof(int64_t) * (size_t)count);
    if (!sizes) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_ssize_t start = 0;
    while (start < count) {
        /* pass 1: how many records fit, and each one's body size (the bytes after its length varint) */
        int64_t base_ts = ts_get(&ts, ROW(start), now_ms), max_ts = base_ts, total = HEADER_SIZE;
        Py_ssize_t end;
        for (end = start; end < count; end++) {
            Py_ssize_t row = ROW(end);
            int64_t t = ts_get(&ts, row, now_ms);
            Py_ssize_t delta = end - start;
            const uint8_t *p;
            int32_t n;
            int64_t b = 1 + varint_len(t - base_ts) + varint_len(delta);
            if (bin_get(&key, row, &p, &n) < 0) {
                corrupt();
                goto fail;
            }
            b += varint_len(n) + (n > 0 ? n : 0);
            if (bin_get(&value, row, &p, &n) < 0) {
                corrupt();
                goto fail;
            }
            b += varint_len(n) + (n > 0 ? n : 0);
            int32_t first, last;
            if (hdr_range(&hdr, row, &first, &last) < 0) {
                corrupt();
                goto fail;
            }
            b += varint_len(last - first);
            for (int32_t e = first; e < last; e++) {
                if (bin_get(&hdr.key, e, &p, &n) < 0) {
                    corrupt();
                    goto fail;
                }
                b += varint_len(n < 0 ? 0 : n) + (n > 0 ? n : 0);
                if (bin_get(&hdr.value, e, &p, &n) < 0) {
                    corrupt();
                    goto fail;
                }
                b += varint_len(n) + (n > 0 ? n : 0);
            }
            int64_t whole = varint_len(b) + b;
            if (end > start && total + whole > max_bytes)
                break;
            sizes[end] = b;
            total += whole;
            if (t > max_ts)
                max_ts = t;
        }
        if (total > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a record batch over 2 GiB");
            goto fail;
        }
        /* pass 2: write */
        PyObject *batch = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
        if (!batch)
            goto fail;
        uint8_t *buf = (uint8_t *)PyBytes_AS_STRING(batch), *out = buf + HEADER_SIZE;
        for (Py_ssize_t r = start; r < end; r++) {
            Py_ssize_t row = ROW(r);
            out = put_varint(out, sizes[r]);
            *out++ = 0;  /* attributes */
            out = put_varint(out, ts_get(&ts, row, now_ms) - base_ts);
            out = put_varint(out, r - start);
            out = put_bytes(out, &key, row, 0);
            out = put_bytes(out, &value, row, 0);
            int32_t first, last;
            hdr_range(&hdr, row, &first, &last);
            out = put_varint(out, last - first);
            for (int32_t e = first; e < last; e++) {
                out = put_bytes(out, &hdr.key, e, 1);
                out = put_bytes(out, &hdr.value, e, 0);
            }
        }
        int32_t count = (int32_t)(end - start);
        put_be64(buf, 0);                             /* base offset */
        put_be32(buf + 8, (uint32_t)(total - 12));    /* batch length */
        put_be32(buf + 12, (uint32_t)-1);             /* partition leader epoch */
        buf[16] = 2;                                  /* magic */
        put_be16(buf + 21, 0);                        /* attributes: none, CreateTime */
        put_be32(buf + 23, (uint32_t)(count - 1));    /* last offset delta */
        put_be64(buf + 27, (uint64_t)base_ts);
        put_be64(buf + 35, (uint64_t)max_ts);
        put_be64(buf + 43, (uint64_t)producer_id);    /* producer id */
        put_be16(buf + 51, (uint16_t)producer_epoch); /* producer epoch */
        put_be32(buf + 53, (uint32_t)sequence);       /* base sequence */
        if (sequence >= 0)
            sequence = (sequence + count) % ((long long)INT32_MAX + 1);
        put_be32(buf + 57, (uint32_t)count);
        put_be32(buf + 17, crc32c(buf + 21, (size_t)(total - 21)));
        int rc = PyList_Append(result, batch);
        Py_DECREF(batch);
        if (rc < 0)
            goto fail;
        start = end;
    }
    goto done;
fail:
    Py_CLEAR(result);
done:
#undef ROW
    if (has_index)
        PyBuffer_Release(&ib);
    PyMem_Free(sizes);
    bin_release(&key);
    bin_release(&value);
    if (ts.present) {
        if (ts.has_valid)
            PyBuffer_Release(&ts.valid);
        PyBuffer_Release(&ts.data);
    }
    if (hdr.present) {
        if (hdr.has_valid)
            PyBuffer_Release(&hdr.valid);
        PyBuffer_Release(&hdr.offs);
        bin_release(&hdr.key);
        bin_release(&hdr.value);
    }
    return result;
}

/* librdkafka's default partitioner, consistent_random (rd_kafka_msg_partitioner_consistent_random):
 * CRC-32 (zlib's) of the key modulo the partition count; -1 for a null or empty key (random there). */
static uint32_t crc32_table[256];

static PyObject *key_partitions(PyObject *self, PyObject *args)
{
    Py_ssize_t rows;
    PyObject *key_t;
    int count;
    if (!PyArg_ParseTuple(args, "nOi", &rows, &key_t, &count))
        return NULL;
    if (count <= 0) {
        PyErr_SetString(PyExc_ValueError, "partition count must be positive");
        return NULL;
    }
    Bin key;
    if (bin_parse(key_t, &key, "key") < 0)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, rows * 4);
    if (!out)
        goto done;
    int32_t *parts = (int32_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < rows; i++) {
        const uint8_t *p;
        int32_t n;
        if (bin_get(&key, i, &p, &n) < 0) {
            Py_CLEAR(out);
            corrupt();
            goto done;
        }
        if (n <= 0) {
            parts[i] = -1;
            continue;
        }
        uint32_t c = 0xFFFFFFFFu;
        for (int32_t k = 0; k < n; k++)
            c = crc32_table[(c ^ p[k]) & 0xFF] ^ (c >> 8);
        parts[i] = (int32_t)((c ^ 0xFFFFFFFFu) % (uint32_t)count);
    }
done:
    bin_release(&key);
    return out;
}

static PyMethodDef methods[] = {
    {"encode_batches", encode_batches, METH_VARARGS,
     "encode_batches(rows, key, value, timestamps, headers, now_ms, max_bytes[, index[, producer]]) -> list of v2 "
     "batches"},
    {"key_partitions", key_partitions, METH_VARARGS,
     "key_partitions(rows, key, count) -> int32 partitions (-1: null or empty key)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_encode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__encode(void)
{
    crc_table_init();
#ifdef HAVE_SSE42_CRC
    __builtin_cpu_init();
    use_sse42 = __builtin_cpu_supports("sse4.2");
#endif
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        crc32_table[i] = c;
    }
    return PyModule_Create(&module);
}
