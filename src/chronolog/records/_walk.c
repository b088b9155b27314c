/* The append path's per-record walk (RecordBatch.scan_timestamps) in C.
 *
 * Kafka's LogValidator reads every record of a batch on append: each record's length, attributes,
 * timestamp delta, offset delta, key, value and headers must be consistent, and the timestamps are checked
 * against message.timestamp.before/after.max.ms. In pure Python this walk is ~90% of an append of 1 MB
 * batches of small records. This module does the same walk over the same bytes (the buffer protocol, no
 * copy) and answers (min timestamp delta, max timestamp delta) when the Python walk accepts the body and
 * its deltas fit 64 bits; None (chronolog.native's "fall back") otherwise: the caller then runs the Python
 * walk, which raises the precise error, or answers for the one valid input C cannot represent (a timestamp
 * delta written as a 10-byte varint with bits beyond 64, a big integer in Python).
 * tests/records/test_native_walk.py checks these answers against the Python walk on random valid and
 * corrupted batches.
 */
#include "_recordwalk.h"

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
        RecordHead r;
        if (!record_head(buf, n, pos, &r))
            goto done;
        if (r.offset_raw != (uint64_t)(2 * i))
            goto done;
        Py_ssize_t end = r.end;
        Py_ssize_t p = r.value_start; /* the value, then the headers */
        if (r.value_len > 0)
            p += (Py_ssize_t)r.value_len;
        int ts_got = r.ts_status;
        uint64_t ts_raw = r.ts_raw;
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
    if (wide_timestamp) /* a delta beyond 64 bits: the Python walk answers (chronolog.native's "fall back") */
        goto done;
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
        RecordHead r;
        if (!record_head(buf, n, pos, &r) || r.ts_status != 1)
            goto fail;
        PyObject *item = Py_BuildValue("(LLnnnLL)", (long long)r.offset_delta, (long long)r.ts_delta, r.start, r.end,
                                       r.key_start, (long long)r.key_len, (long long)r.value_len);
        if (item == NULL)
            goto error;
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
        pos = r.end;
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
