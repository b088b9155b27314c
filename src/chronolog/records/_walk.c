/* The append path's per-record walk (RecordBatch.scan_timestamps) in C.
 *
 * Kafka's LogValidator reads every record of a batch on append: each record's length, attributes,
 * timestamp delta, offset delta, key, value and headers must be consistent, and the timestamps are checked
 * against message.timestamp.before/after.max.ms. In pure Python this walk is ~90% of an append of 1 MB
 * batches of small records. This module does the same walk over the same bytes (the buffer protocol, no
 * copy) and answers only the success case: (min timestamp delta, max timestamp delta). For anything the
 * Python walk would reject, and for the few inputs it accepts that do not fit 64-bit arithmetic, it returns
 * None and the caller runs the Python walk, which raises the precise error. So the two can never disagree
 * on what is accepted (tests/records/test_native_walk.py checks this on random and corrupted batches).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* An unsigned varint of at most 10 bytes whose value fits 64 bits; 0 when it does not, runs past `n`,
 * or is longer (the caller then falls back to Python). */
static int read_varint(const uint8_t *buf, Py_ssize_t n, Py_ssize_t *pos, uint64_t *out)
{
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= n)
            return 0;
        uint8_t b = buf[p++];
        if (shift == 63 && (b & 0x7E))
            return 0; /* bits beyond 64: Python accepts them, we leave it to Python */
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *pos = p;
            *out = raw;
            return 1;
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
 * raw/2 bytes. 0 when the length itself cannot be read or is absurd. */
static int skip_field(const uint8_t *buf, Py_ssize_t n, Py_ssize_t *pos, int negative_is_error)
{
    uint64_t raw;
    if (!read_varint(buf, n, pos, &raw))
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
    Py_ssize_t pos = 0;
    if (count <= 0 || count > n)
        goto done;
    for (long long i = 0; i < count; i++) {
        uint64_t raw;
        if (!read_varint(buf, n, &pos, &raw))
            goto done;
        int64_t length = zigzag(raw);
        if (length < 3 || length > n)
            goto done; /* Python: end < pos + 3 or end > n */
        Py_ssize_t end = pos + (Py_ssize_t)length;
        if (end > n)
            goto done;
        Py_ssize_t p = pos + 1; /* after the attributes byte */
        uint64_t ts_raw, off_raw;
        if (!read_varint(buf, n, &p, &ts_raw) || !read_varint(buf, n, &p, &off_raw))
            goto done;
        if (off_raw != (uint64_t)(2 * i))
            goto done;
        /* key and value (a negative length is null), then the headers. */
        if (!skip_field(buf, n, &p, 0) || !skip_field(buf, n, &p, 0))
            goto done;
        uint64_t hraw;
        if (!read_varint(buf, n, &p, &hraw))
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
        int64_t t = zigzag(ts_raw);
        if (i == 0) {
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
    result = Py_BuildValue("(LL)", (long long)lo, (long long)hi);
    PyBuffer_Release(&view);
    return result;
done:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"scan_timestamps", scan_timestamps, METH_VARARGS,
     "scan_timestamps(body, count) -> (min delta, max delta) for a batch body the Python walk accepts, "
     "else None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__walk(void)
{
    return PyModule_Create(&module);
}
