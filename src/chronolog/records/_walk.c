/* The append path's per-record walk (RecordBatch.scan_timestamps) in C.
 *
 * Kafka's LogValidator reads every record of a batch on append: each record's length, attributes,
 * timestamp delta, offset delta, key, value and headers must be consistent, and the timestamps are checked
 * against message.timestamp.before/after.max.ms. In pure Python this walk is ~90% of an append of 1 MB
 * batches of small records. This module does the same walk over the same bytes (the buffer protocol, no
 * copy) and answers (min timestamp delta, max timestamp delta) exactly when the Python walk accepts the
 * body, None exactly when it rejects it (the caller then runs the Python walk, which raises the precise
 * error), and False for the one valid input C cannot represent: a timestamp delta written as a 10-byte
 * varint with bits beyond 64, which Python accepts as a big integer (the caller runs the Python walk too).
 * tests/records/test_native_walk.py checks these three answers against the Python walk on random valid
 * and corrupted batches.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* An int varint as Kafka reads it (`ByteUtils.readVarint`, Python's `read_raw_varint(..., int32=True)`):
 * at most 5 bytes, bits beyond 32 dropped; 0 when it runs past `n` or goes on after 5 bytes. Record lengths, offset deltas,
 * key, value and header sizes and header counts. */
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

/* Skips a length-prefixed field: odd raw values are negative lengths (null), even ones are followed by
 * raw/2 bytes. 0 when the length itself cannot be read or runs past the body. */
static inline int skip_field(const uint8_t *buf, Py_ssize_t n, Py_ssize_t *pos, int negative_is_error)
{
    uint64_t raw;
    if (!read_varint32(buf, n, pos, &raw))
        return 0;
    if (raw & 1)
        return negative_is_error ? 0 : 1;
    if ((raw >> 1) > (uint64_t)n)
        return 0;
    *pos += (Py_ssize_t)(raw >> 1);
    return 1;
}

static PyObject *scan_timestamps(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long count;
    if (!PyArg_ParseTuple(args, "y*L", &view, &count))
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    const Py_ssize_t n = view.len;
    PyObject *result = Py_None;
    int64_t lo = 0, hi = 0;
    int wide_timestamp = 0, have = 0;
    Py_ssize_t pos = 0;
    if (count <= 0 || count > n)
        goto done;
    for (long long i = 0; i < count; i++) {
        uint64_t raw;
        if (!read_varint32(buf, n, &pos, &raw))
            goto done;
        int64_t length = zigzag(raw);
        if (length < 3 || length > n)
            goto done; /* Python: end < pos + 3 or end > n */
        Py_ssize_t end = pos + (Py_ssize_t)length;
        if (end > n)
            goto done;
        Py_ssize_t p = pos + 1; /* after the attributes byte */
        uint64_t ts_raw, off_raw;
        int ts_got = read_varint(buf, n, &p, &ts_raw);
        if (!ts_got || !read_varint32(buf, n, &p, &off_raw))
            goto done;
        if (off_raw != (uint64_t)(2 * i))
            goto done;
        /* key and value (a negative length is null), then the headers. */
        if (!skip_field(buf, n, &p, 0) || !skip_field(buf, n, &p, 0))
            goto done;
        uint64_t hraw;
        if (!read_varint32(buf, n, &p, &hraw))
            goto done;
        int64_t headers = zigzag(hraw);
        if (headers < 0 || headers > (int64_t)(end - p))
            goto done;
        for (int64_t h = 0; h < headers; h++) {
            if (!skip_field(buf, n, &p, 1) || !skip_field(buf, n, &p, 0))
                goto done;
            if (p > end)
                goto done;
        }
        if (p != end)
            goto done;
        if (ts_got == WIDE) {
            wide_timestamp = 1; /* valid to Python, beyond int64: the batch's answer is Python's */
            pos = end;
            continue;
        }
        int64_t t = zigzag(ts_raw);
        if (!have) {
            have = 1;
            lo = hi = t;
        } else if (t < lo) {
            lo = t;
        } else if (t > hi) {
            hi = t;
        }
        pos = end;
    }
    if (pos != n)
        goto done;
    if (wide_timestamp) {
        PyBuffer_Release(&view);
        Py_RETURN_FALSE;
    }
    result = Py_BuildValue("(LL)", (long long)lo, (long long)hi);
    PyBuffer_Release(&view);
    return result;
done:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* The cleaner's walk (storage.cleaner): for each record of an uncompressed records section, a tuple
 * (offset delta, timestamp delta, start (of its length varint), end, key start, key length, value length),
 * -1 lengths for null,
 * exactly as batch._record_spans_py gives them; None for a body that walk rejects (the caller runs it for
 * the error). Offsets need not be 0..n-1 here: a cleaned batch has gaps. */
static PyObject *record_spans(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long count;
    if (!PyArg_ParseTuple(args, "y*L", &view, &count))
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    const Py_ssize_t n = view.len;
    PyObject *list = NULL;
    Py_ssize_t pos = 0;
    if (count < 0 || count > n)
        goto fail;
    list = PyList_New((Py_ssize_t)count);
    if (list == NULL)
        goto error;
    for (long long i = 0; i < count; i++) {
        uint64_t raw, ts_raw, off_raw, klen_raw, vlen_raw;
        Py_ssize_t start = pos; /* the record's own length varint included: spans are copied whole */
        if (!read_varint32(buf, n, &pos, &raw))
            goto fail;
        int64_t length = zigzag(raw);
        if (length < 3 || length > n - pos)
            goto fail;
        Py_ssize_t end = pos + (Py_ssize_t)length;
        Py_ssize_t p = pos + 1;
        if (read_varint(buf, end, &p, &ts_raw) != 1 || !read_varint32(buf, end, &p, &off_raw))
            goto fail;
        if (!read_varint32(buf, end, &p, &klen_raw))
            goto fail;
        int64_t klen = (int32_t)zigzag(klen_raw);
        Py_ssize_t kstart = p;
        if (klen >= 0) {
            if (klen > end - p)
                goto fail;
            p += (Py_ssize_t)klen;
        } else {
            klen = -1;
        }
        if (!read_varint32(buf, end, &p, &vlen_raw))
            goto fail;
        int64_t vlen = (int32_t)zigzag(vlen_raw);
        if (vlen >= 0) {
            if (vlen > end - p)
                goto fail;
        } else {
            vlen = -1;
        }
        PyObject *item = Py_BuildValue("(LLnnnLL)", (long long)(int32_t)zigzag(off_raw), (long long)zigzag(ts_raw),
                                       start, end, kstart, (long long)klen, (long long)vlen);
        if (item == NULL)
            goto error;
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
        pos = end;
    }
    if (pos != n)
        goto fail;
    PyBuffer_Release(&view);
    return list;
fail:
    Py_XDECREF(list);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    Py_XDECREF(list);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"record_spans", record_spans, METH_VARARGS,
     "record_spans(body, count) -> [(offset delta, timestamp delta, start, end, key start, key length, "
     "value length)] of an uncompressed records section, None for one the Python walk rejects."},
    {"scan_timestamps", scan_timestamps, METH_VARARGS,
     "scan_timestamps(body, count) -> (min delta, max delta) for a batch body the Python walk accepts, "
     "None for one it rejects, False for a valid one with a timestamp delta beyond 64 bits."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__walk(void)
{
    return PyModule_Create(&module);
}
