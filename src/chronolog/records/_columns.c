/* The columnar record decoder's per-record work (records/columns.py) in C.
 *
 * A Builder appends the records of v2 batches to column buffers laid out as Arrow lays them out: int64
 * offsets and timestamps, int32 timestamp types, binary columns as a validity bitmap, int32 offsets and
 * one data buffer, headers as list offsets over (string key, binary value) pairs. It reads its input
 * through the buffer protocol and makes no Python object per record. `batches` walks uncompressed v2
 * batches itself and hands compressed and legacy ones back to Python (columns.ColumnDecoder), which
 * decompresses them and calls `body` (or `row` for legacy records).
 *
 * Every rule, message and answer is the Python twin's (columns.PyBuilder): tests/records/test_columns.py
 * compares the two on random, mutated and truncated input.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_recordwalk.h"
#include "_varint.h"


typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra)
{
    if (b->len + extra <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra)
        cap *= 2;
    char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n)
{
    if (buf_reserve(b, n) < 0)
        return -1;
    if (n)
        memcpy(b->p + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static inline int put_i64(Buf *b, int64_t v) { return buf_put(b, &v, 8); }
static inline int put_i32(Buf *b, int32_t v) { return buf_put(b, &v, 4); }

/* A binary column: validity bitmap, int32 offsets (starting with 0), data, null count. */
typedef struct {
    Buf valid, offs, data;
    Py_ssize_t nulls;
} Col;

static int col_init(Col *c)
{
    memset(c, 0, sizeof(*c));
    return put_i32(&c->offs, 0);
}

static void col_free(Col *c)
{
    PyMem_Free(c->valid.p);
    PyMem_Free(c->offs.p);
    PyMem_Free(c->data.p);
    memset(c, 0, sizeof(*c));
}

/* Appends entry `index`: `src` NULL is a null. */
static int col_add(Col *c, Py_ssize_t index, const uint8_t *src, Py_ssize_t n)
{
    if ((index & 7) == 0) {
        char zero = 0;
        if (buf_put(&c->valid, &zero, 1) < 0)
            return -1;
    }
    if (!src) {
        c->nulls++;
    } else {
        c->valid.p[index >> 3] |= (char)(1 << (index & 7));
        if (buf_put(&c->data, src, n) < 0)
            return -1;
    }
    if (c->data.len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a column's data passed 2 GiB");
        return -1;
    }
    return put_i32(&c->offs, (int32_t)c->data.len);
}

typedef struct {
    PyObject_HEAD
    int want_keys, want_values, want_headers;
    Py_ssize_t rows, hcount;
    long long data_bytes;
    Buf offsets, stamps, kinds;
    Col keys, values;
    Buf hlist, hkoffs, hkdata;
    Col hvalues;
} Builder;

static void builder_free_buffers(Builder *self)
{
    PyMem_Free(self->offsets.p);
    PyMem_Free(self->stamps.p);
    PyMem_Free(self->kinds.p);
    PyMem_Free(self->hlist.p);
    PyMem_Free(self->hkoffs.p);
    PyMem_Free(self->hkdata.p);
    memset(&self->offsets, 0, sizeof(Buf));
    memset(&self->stamps, 0, sizeof(Buf));
    memset(&self->kinds, 0, sizeof(Buf));
    memset(&self->hlist, 0, sizeof(Buf));
    memset(&self->hkoffs, 0, sizeof(Buf));
    memset(&self->hkdata, 0, sizeof(Buf));
    col_free(&self->keys);
    col_free(&self->values);
    col_free(&self->hvalues);
}

static int builder_reset(Builder *self)
{
    builder_free_buffers(self);
    self->rows = self->hcount = 0;
    self->data_bytes = 0;
    if (col_init(&self->keys) < 0 || col_init(&self->values) < 0 || col_init(&self->hvalues) < 0)
        return -1;
    if (put_i32(&self->hlist, 0) < 0 || put_i32(&self->hkoffs, 0) < 0)
        return -1;
    return 0;
}

static int builder_init(Builder *self, PyObject *args, PyObject *kwds)
{
    int k = 1, v = 1, h = 0;
    if (!PyArg_ParseTuple(args, "|ppp", &k, &v, &h))
        return -1;
    self->want_keys = k;
    self->want_values = v;
    self->want_headers = h;
    return builder_reset(self);
}

static void builder_dealloc(Builder *self)
{
    builder_free_buffers(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ---- the record walk ---------------------------------------------------------------------------- */

static int add_row(Builder *self, int64_t offset, int64_t ts, int32_t kind, const uint8_t *key, Py_ssize_t klen,
                   const uint8_t *value, Py_ssize_t vlen)
{
    if (put_i64(&self->offsets, offset) < 0 || put_i64(&self->stamps, ts) < 0 || put_i32(&self->kinds, kind) < 0)
        return -1;
    if (self->want_keys) {
        if (col_add(&self->keys, self->rows, key, klen) < 0)
            return -1;
        if (key)
            self->data_bytes += klen;
    }
    if (self->want_values) {
        if (col_add(&self->values, self->rows, value, vlen) < 0)
            return -1;
        if (value)
            self->data_bytes += vlen;
    }
    return 0;
}

/* The `count` records of one (decompressed) records section. -1 with `f` filled (status 0: a Python error). */
static int walk_body(Builder *self, const uint8_t *body, Py_ssize_t n, int64_t base_offset, int64_t base_ts,
                     int64_t max_ts, int attributes, int64_t count, int64_t start, int64_t end, int64_t lo,
                     int64_t hi, Fail *f)
{
    if (count < 0 || count > n) {
        f->status = INVALID;
        f->message = NULL;
        snprintf(f->text, sizeof f->text, "batch claims %lld records in %lld bytes", (long long)count, (long long)n);
        return -1;
    }
    int log_append = (attributes & 0x08) != 0;
    int32_t kind = log_append ? 1 : 0;
    Py_ssize_t pos = 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t length, ts_delta, off_delta, size;
        if (varint(body, &pos, n, 1, &length, f) < 0)
            return -1;
        if (length < 0 || length > n - pos)
            return fail(f, INVALID, "record length runs past the batch");
        Py_ssize_t rend = pos + (Py_ssize_t)length;
        Py_ssize_t p = pos + 1; /* the attributes byte (unused) */
        if (p > rend)
            return fail(f, INVALID, "varint runs past the record");
        if (varint(body, &p, rend, 0, &ts_delta, f) < 0 || varint(body, &p, rend, 1, &off_delta, f) < 0)
            return -1;
        const uint8_t *field[2];
        Py_ssize_t flen[2];
        for (int j = 0; j < 2; j++) {
            if (varint(body, &p, rend, 1, &size, f) < 0)
                return -1;
            if (size < 0) {
                field[j] = NULL;
                flen[j] = 0;
            } else {
                if (size > rend - p)
                    return fail(f, INVALID, "key or value runs past the record");
                field[j] = body + p;
                flen[j] = (Py_ssize_t)size;
                p += (Py_ssize_t)size;
            }
        }
        int64_t hcount;
        if (varint(body, &p, rend, 1, &hcount, f) < 0)
            return -1;
        if (hcount < 0 || hcount > rend - p) {
            f->status = INVALID;
            f->message = NULL;
            snprintf(f->text, sizeof f->text, "invalid header count %lld", (long long)hcount);
            return -1;
        }
        Py_ssize_t headers_at = p;
        for (int64_t h = 0; h < hcount; h++) {
            int64_t hklen, hvlen;
            if (varint(body, &p, rend, 1, &hklen, f) < 0)
                return -1;
            if (hklen < 0 || hklen > rend - p)
                return fail(f, INVALID, "invalid header key length");
            p += (Py_ssize_t)hklen;
            if (varint(body, &p, rend, 1, &hvlen, f) < 0)
                return -1;
            if (hvlen >= 0) {
                if (hvlen > rend - p)
                    return fail(f, INVALID, "header value runs past the record");
                p += (Py_ssize_t)hvlen;
            }
        }
        if (p != rend)
            return fail(f, INVALID, "record length does not match its fields");
        int64_t ts, offset;
        if (__builtin_add_overflow(base_ts, ts_delta, &ts) || __builtin_add_overflow(base_offset, off_delta, &offset))
            return fail(f, INVALID, "timestamp or offset beyond 64 bits");
        if (log_append)
            ts = max_ts;
        pos = rend;
        if (offset < start || offset >= end || ts < lo || ts > hi)
            continue;
        if (add_row(self, offset, ts, kind, field[0], flen[0], field[1], flen[1]) < 0) {
            f->status = 0;
            return -1;
        }
        if (self->want_headers) {
            /* second pass over the headers this record was checked to hold */
            Py_ssize_t q = headers_at;
            for (int64_t h = 0; h < hcount; h++) {
                int64_t hklen = 0, hvlen = -1;
                varint(body, &q, rend, 1, &hklen, f);
                if (buf_put(&self->hkdata, body + q, (Py_ssize_t)hklen) < 0 ||
                    put_i32(&self->hkoffs, (int32_t)self->hkdata.len) < 0) {
                    f->status = 0;
                    return -1;
                }
                q += (Py_ssize_t)hklen;
                varint(body, &q, rend, 1, &hvlen, f);
                if (col_add(&self->hvalues, self->hcount, hvlen >= 0 ? body + q : NULL,
                            hvlen >= 0 ? (Py_ssize_t)hvlen : 0) < 0) {
                    f->status = 0;
                    return -1;
                }
                self->hcount++;
                self->data_bytes += hklen + (hvlen >= 0 ? hvlen : 0);
                if (hvlen >= 0)
                    q += (Py_ssize_t)hvlen;
            }
            if (self->hkdata.len > INT32_MAX) {
                PyErr_SetString(PyExc_OverflowError, "a column's data passed 2 GiB");
                f->status = 0;
                return -1;
            }
            if (put_i32(&self->hlist, (int32_t)self->hcount) < 0) {
                f->status = 0;
                return -1;
            }
        }
        self->rows++;
    }
    if (pos != n)
        return fail(f, INVALID, "bytes left after the last record of the batch");
    return 0;
}

static const char *fail_text(Fail *f)
{
    return f->message ? f->message : f->text;
}

static PyObject *Builder_body(Builder *self, PyObject *args)
{
    Py_buffer view;
    long long base_offset, base_ts, max_ts, count, start, end, lo, hi;
    int attributes;
    if (!PyArg_ParseTuple(args, "y*LLLiLLLLL", &view, &base_offset, &base_ts, &max_ts, &attributes, &count,
                          &start, &end, &lo, &hi))
        return NULL;
    Fail f;
    int rc = walk_body(self, (const uint8_t *)view.buf, view.len, base_offset, base_ts, max_ts, attributes, count,
                       start, end, lo, hi, &f);
    PyBuffer_Release(&view);
    if (rc < 0) {
        if (f.status == 0)
            return NULL;
        PyObject *errors = PyImport_ImportModule("chronolog.errors");
        if (!errors)
            return NULL;
        PyObject *cls = PyObject_GetAttrString(errors, "InvalidRecordError");
        Py_DECREF(errors);
        if (!cls)
            return NULL;
        PyErr_SetString(cls, fail_text(&f));
        Py_DECREF(cls);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Builder_row(Builder *self, PyObject *args)
{
    long long offset, ts;
    int kind;
    PyObject *key, *value;
    if (!PyArg_ParseTuple(args, "LLiOO", &offset, &ts, &kind, &key, &value))
        return NULL;
    Py_buffer kv, vv;
    int hk = key != Py_None, hv = value != Py_None;
    if (hk && PyObject_GetBuffer(key, &kv, PyBUF_SIMPLE) < 0)
        return NULL;
    if (hv && PyObject_GetBuffer(value, &vv, PyBUF_SIMPLE) < 0) {
        if (hk)
            PyBuffer_Release(&kv);
        return NULL;
    }
    int rc = add_row(self, offset, ts, kind, hk ? (const uint8_t *)kv.buf : NULL, hk ? kv.len : 0,
                     hv ? (const uint8_t *)vv.buf : NULL, hv ? vv.len : 0);
    if (hk)
        PyBuffer_Release(&kv);
    if (hv)
        PyBuffer_Release(&vv);
    if (rc < 0)
        return NULL;
    if (self->want_headers && put_i32(&self->hlist, (int32_t)self->hcount) < 0)
        return NULL;
    self->rows++;
    Py_RETURN_NONE;
}



/* batches(buf, pos, start, end, lo, hi, aborted, max_rows, max_bytes) -> (pos, status, next offset or message) */
static PyObject *Builder_batches(Builder *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos;
    long long start, end, lo, hi, max_rows, max_bytes;
    PyObject *aborted;
    if (!PyArg_ParseTuple(args, "y*nLLLLOLL", &view, &pos, &start, &end, &lo, &hi, &aborted, &max_rows, &max_bytes))
        return NULL;
    int64_t *ab = NULL;
    Py_ssize_t nab = 0;
    PyObject *result = NULL;
    if (!PyTuple_Check(aborted)) {
        PyErr_SetString(PyExc_TypeError, "aborted must be a tuple of (producer id, first offset, last offset)");
        goto out;
    }
    nab = PyTuple_GET_SIZE(aborted);
    if (nab) {
        ab = PyMem_Malloc(sizeof(int64_t) * 3 * (size_t)nab);
        if (!ab) {
            PyErr_NoMemory();
            goto out;
        }
        for (Py_ssize_t i = 0; i < nab; i++) {
            if (!PyArg_ParseTuple(PyTuple_GET_ITEM(aborted, i), "LLL", (long long *)&ab[3 * i],
                                  (long long *)&ab[3 * i + 1], (long long *)&ab[3 * i + 2]))
                goto out;
        }
    }
    const uint8_t *buf = (const uint8_t *)view.buf;
    const Py_ssize_t limit = view.len;
    long long next_offset = -1;
    int status;
    char message[96];
    message[0] = 0;
    if (pos < 0 || pos > limit) {
        PyErr_SetString(PyExc_ValueError, "position outside the buffer");
        goto out;
    }
    for (;;) {
        if (limit - pos < 12) {
            status = DONE;
            break;
        }
        int32_t size = be32(buf + pos + 8);
        if (size < 14) {
            status = CORRUPT;
            snprintf(message, sizeof message, "batch size %d is below the minimum", size);
            break;
        }
        if (limit - pos < 12 + (Py_ssize_t)size || limit - pos < 17) {
            status = DONE;
            break;
        }
        int magic = (int8_t)buf[pos + 16];
        if (magic == 0 || magic == 1) {
            status = PYTHON;
            break;
        }
        if (magic != 2) {
            status = CORRUPT;
            snprintf(message, sizeof message, "unknown magic %d", buf[pos + 16]);
            break;
        }
        if (size < 49) {
            status = CORRUPT;
            snprintf(message, sizeof message, "v2 batch size %d is below the header size", size);
            break;
        }
        const uint8_t *h = buf + pos;
        int attributes = be16(h + 21);
        if (attributes & 0x07) {
            status = PYTHON;
            break;
        }
        int64_t base = be64(h), last;
        if (__builtin_add_overflow(base, (int64_t)be32(h + 23), &last) || last == INT64_MAX) {
            status = CORRUPT;
            snprintf(message, sizeof message, "last offset beyond 64 bits");
            break;
        }
        int64_t producer_id = be64(h + 43);
        int skip = (attributes & 0x20) != 0;
        if (!skip && (attributes & 0x10)) {
            for (Py_ssize_t i = 0; i < nab; i++)
                if (ab[3 * i] == producer_id && ab[3 * i + 1] <= base && base <= ab[3 * i + 2]) {
                    skip = 1;
                    break;
                }
        }
        if (!skip && last >= start && base < end) {
            Fail f;
            if (walk_body(self, h + 61, 12 + (Py_ssize_t)size - 61, base, be64(h + 27), be64(h + 35), attributes,
                          be32(h + 57), start, end, lo, hi, &f) < 0) {
                if (f.status == 0)
                    goto out;
                status = f.status;
                snprintf(message, sizeof message, "%s", fail_text(&f));
                break;
            }
        }
        pos += 12 + (Py_ssize_t)size;
        next_offset = last + 1;
        if (self->rows >= max_rows || self->data_bytes >= max_bytes) {
            status = FULL;
            break;
        }
    }
    if (status == CORRUPT || status == INVALID)
        result = Py_BuildValue("(nis)", pos, status, message);
    else
        result = Py_BuildValue("(niL)", pos, status, next_offset);
out:
    PyMem_Free(ab);
    PyBuffer_Release(&view);
    return result;
}

/* A buffer handed over by `take` without a copy: it owns memory the builder allocated and frees it when
 * the last user (a pyarrow buffer, a memoryview) lets go. */
typedef struct {
    PyObject_HEAD
    char *p;
    Py_ssize_t len;
} Chunk;

static void chunk_dealloc(Chunk *self)
{
    PyMem_Free(self->p);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int chunk_getbuffer(Chunk *self, Py_buffer *view, int flags)
{
    static char empty[1];
    return PyBuffer_FillInfo(view, (PyObject *)self, self->p ? self->p : empty, self->len, 1, flags);
}

static Py_ssize_t chunk_len(Chunk *self)
{
    return self->len;
}

static PyBufferProcs chunk_as_buffer = {.bf_getbuffer = (getbufferproc)chunk_getbuffer};
static PySequenceMethods chunk_as_sequence = {.sq_length = (lenfunc)chunk_len};

static PyTypeObject ChunkType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chronolog.records._columns.Chunk",
    .tp_basicsize = sizeof(Chunk),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)chunk_dealloc,
    .tp_as_buffer = &chunk_as_buffer,
    .tp_as_sequence = &chunk_as_sequence,
    .tp_doc = "Read-only bytes of one column buffer, handed over by Builder.take without a copy",
};

/* A new Chunk owning `b`'s memory; `b` is left empty. */
static PyObject *chunk_from(Buf *b)
{
    Chunk *c = PyObject_New(Chunk, &ChunkType);
    if (!c)
        return NULL;
    c->p = b->p;
    c->len = b->len;
    b->p = NULL;
    b->len = b->cap = 0;
    return (PyObject *)c;
}

static PyObject *col_take(Col *c)
{
    PyObject *valid = chunk_from(&c->valid), *offs = chunk_from(&c->offs), *data = chunk_from(&c->data);
    PyObject *out = NULL;
    if (valid && offs && data)
        out = Py_BuildValue("(OOOn)", valid, offs, data, c->nulls);
    Py_XDECREF(valid);
    Py_XDECREF(offs);
    Py_XDECREF(data);
    return out;
}

static PyObject *Builder_take(Builder *self, PyObject *unused)
{
    PyObject *keys = NULL, *values = NULL, *headers = NULL, *out = NULL;
    PyObject *offsets = NULL, *stamps = NULL, *kinds = NULL;
    if (self->want_keys) {
        if (!(keys = col_take(&self->keys)))
            goto done;
    } else {
        keys = Py_NewRef(Py_None);
    }
    if (self->want_values) {
        if (!(values = col_take(&self->values)))
            goto done;
    } else {
        values = Py_NewRef(Py_None);
    }
    if (self->want_headers) {
        PyObject *hv = col_take(&self->hvalues);
        if (!hv)
            goto done;
        PyObject *hl = chunk_from(&self->hlist), *hk = chunk_from(&self->hkoffs), *hd = chunk_from(&self->hkdata);
        if (hl && hk && hd)
            headers = Py_BuildValue("(OOOO)", hl, hk, hd, hv);
        Py_XDECREF(hl);
        Py_XDECREF(hk);
        Py_XDECREF(hd);
        Py_DECREF(hv);
        if (!headers)
            goto done;
    } else {
        headers = Py_NewRef(Py_None);
    }
    offsets = chunk_from(&self->offsets);
    stamps = chunk_from(&self->stamps);
    kinds = chunk_from(&self->kinds);
    if (!offsets || !stamps || !kinds)
        goto done;
    out = Py_BuildValue("(nOOOOOO)", self->rows, offsets, stamps, kinds, keys, values, headers);
    if (out && builder_reset(self) < 0)
        Py_CLEAR(out);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(stamps);
    Py_XDECREF(kinds);
    Py_XDECREF(keys);
    Py_XDECREF(values);
    Py_XDECREF(headers);
    return out;
}

static Py_ssize_t Builder_len(Builder *self)
{
    return self->rows;
}

static PyObject *Builder_get_data_bytes(Builder *self, void *closure)
{
    return PyLong_FromLongLong(self->data_bytes);
}

static PyObject *Builder_get_rows(Builder *self, void *closure)
{
    return PyLong_FromSsize_t(self->rows);
}

static PyMethodDef builder_methods[] = {
    {"batches", (PyCFunction)Builder_batches, METH_VARARGS,
     "batches(buf, pos, start, end, lo, hi, aborted, max_rows, max_bytes) -> (pos, status, next offset | message)"},
    {"body", (PyCFunction)Builder_body, METH_VARARGS,
     "body(records, base_offset, base_ts, max_ts, attributes, count, start, end, lo, hi): one batch's records"},
    {"row", (PyCFunction)Builder_row, METH_VARARGS, "row(offset, ts, kind, key, value): one legacy record"},
    {"take", (PyCFunction)Builder_take, METH_NOARGS, "take() -> the column buffers; the builder starts afresh"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef builder_getset[] = {
    {"data_bytes", (getter)Builder_get_data_bytes, NULL, "key, value and header bytes so far", NULL},
    {"rows", (getter)Builder_get_rows, NULL, "rows so far", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods builder_as_sequence = {.sq_length = (lenfunc)Builder_len};

static PyTypeObject BuilderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chronolog.records._columns.Builder",
    .tp_basicsize = sizeof(Builder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)builder_init,
    .tp_dealloc = (destructor)builder_dealloc,
    .tp_methods = builder_methods,
    .tp_getset = builder_getset,
    .tp_as_sequence = &builder_as_sequence,
    .tp_doc = "Builder(keys=True, values=True, headers=False): column buffers of decoded records",
};

/* first_at_or_after(body, count, base_offset, base_ts, target, min_offset) -> (offset, ts) | () | None
 *
 * `RecordBatch.first_at_or_after` over one CreateTime records section (the lookup by time's inner loop,
 * run for each bucket edge of a timeline): the first record with timestamp >= target and offset >=
 * min_offset, () when there is none. Like the Python walk it reads only lengths, timestamp deltas and
 * offset deltas and stops at the first record that qualifies; None (chronolog.native's "fall back") when
 * the bytes do not walk cleanly (or a value leaves 64 bits) before that record: the Python walk then
 * answers, raising as it does.
 * tests/records/test_columns.py checks it against the Python walk. */
static PyObject *first_at_or_after(PyObject *self, PyObject *args)
{
    Py_buffer body;
    long long count, base_offset, base_ts, target, min_offset;
    if (!PyArg_ParseTuple(args, "y*LLLLL", &body, &count, &base_offset, &base_ts, &target, &min_offset))
        return NULL;
    const uint8_t *buf = (const uint8_t *)body.buf;
    const Py_ssize_t n = body.len;
    PyObject *result = NULL;
    Fail f;
    Py_ssize_t pos = 0;
    for (long long i = 0; i < count; i++) {
        int64_t length, ts_delta, off_delta, ts, off;
        if (varint(buf, &pos, n, 1, &length, &f) < 0)
            goto python;
        Py_ssize_t rend = pos + (Py_ssize_t)length;
        Py_ssize_t p = pos + 1;
        if (varint(buf, &p, n, 0, &ts_delta, &f) < 0 || __builtin_add_overflow((int64_t)base_ts, ts_delta, &ts))
            goto python;
        if (ts >= target) {
            if (varint(buf, &p, n, 1, &off_delta, &f) < 0 ||
                __builtin_add_overflow((int64_t)base_offset, off_delta, &off))
                goto python;
            if (off >= min_offset) {
                result = Py_BuildValue("(LL)", (long long)off, (long long)ts);
                goto done;
            }
        }
        if (length > n - pos || length < 3)
            goto python; /* Python: end > n or end < pos + 3 */
        pos = rend;
    }
    result = PyTuple_New(0);
    goto done;
python:
    if (!PyErr_Occurred())
        result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&body);
    return result;
}

/* join_values(offsets, data, n, delimiter) -> bytes: the first n values of a decoded binary column (int32
 * offsets, n + 1 of them, into data), each followed by delimiter: what `chronolog consume --format raw`
 * writes (cli/fastconsume.py's value_lines is the Python twin). None for offsets that do not fit the data. */
static PyObject *join_values(PyObject *self, PyObject *args)
{
    Py_buffer offs, data, delim;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*y*ny*", &offs, &data, &n, &delim))
        return NULL;
    PyObject *result = NULL;
    const int32_t *ends = (const int32_t *)offs.buf;
    if (n < 0 || offs.len < (n + 1) * 4 || (n && (ends[0] < 0 || ends[n] > data.len || ends[n] < ends[0])))
        goto python;
    for (Py_ssize_t i = 0; i < n; i++)
        if (ends[i + 1] < ends[i])
            goto python;
    Py_ssize_t size = (n ? (Py_ssize_t)(ends[n] - ends[0]) : 0) + n * delim.len;
    result = PyBytes_FromStringAndSize(NULL, size);
    if (!result)
        goto done;
    char *out = PyBytes_AS_STRING(result);
    const char *src = (const char *)data.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = ends[i + 1] - ends[i];
        memcpy(out, src + ends[i], (size_t)len);
        out += len;
        memcpy(out, delim.buf, (size_t)delim.len);
        out += delim.len;
    }
    goto done;
python:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&offs);
    PyBuffer_Release(&data);
    PyBuffer_Release(&delim);
    return result;
}

static PyMethodDef module_methods[] = {
    {"first_at_or_after", first_at_or_after, METH_VARARGS,
     "first_at_or_after(body, count, base_offset, base_ts, target, min_offset) -> (offset, ts) | () | None"},
    {"join_values", join_values, METH_VARARGS, "join_values(offsets, data, n, delimiter) -> bytes | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_columns", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__columns(void)
{
    if (PyType_Ready(&BuilderType) < 0 || PyType_Ready(&ChunkType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "Builder", (PyObject *)&BuilderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
