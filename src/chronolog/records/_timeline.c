/* The console's exact timeline in C (records/columns.py `place_late`, timetravel/timeline.py): records
 * whose CreateTime lies below the edge of the bucket their offset puts them in are moved to the bucket of
 * their own time. Reads record bytes with the columnar decoder's varint walk (_varint.h); the Python twin
 * is `late_moves_py` in records/columns.py, and tests/records compares the two. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_recordwalk.h"
#include "_varint.h"

/* place_late(body, count, base_offset, base_ts, offsets, edges, first, log_end, counts, late) -> int | None
 *
 * For one uncompressed (or decompressed) CreateTime records section: every record at an offset in
 * [first, log_end) whose timestamp lies below the edge of the bucket its offset gives it (bucket k holds
 * offsets [offsets[k], offsets[k+1]), offsets[n] on being the tail) is moved to the bucket of its own
 * timestamp: counts[k] -= 1 (k < n), counts[own] += 1 and late[own] += 1, or counted in the returned
 * number when it is older than edges[0]. `offsets` and `edges` are int64 arrays of n + 1 items, `counts`
 * and `late` writable int64 arrays of n. None (nothing changed) when the body does not walk cleanly: the
 * caller's Python walk then answers, raising as it does. timetravel/timeline.py `_place_late_records` is
 * the caller and `late_moves_py` in records/columns.py the twin. */
typedef struct {
    const int64_t *offsets, *edges;
    int64_t *counts, *late;
    Py_ssize_t nb; /* buckets */
    int64_t first, log_end;
} Buckets;

/* One records section's moves (see place_late): 0 with `*before` increased, 1 when the bytes do not walk
 * cleanly (nothing changed), -1 with a Python error. */
static int place_body(Buckets *b, const uint8_t *buf, Py_ssize_t n, int64_t count, int64_t base_offset,
                      int64_t base_ts, long long *before)
{
    if (count < 0 || count > n)
        return 1;
    int32_t *moves = PyMem_Malloc(sizeof(int32_t) * 2 * (size_t)(count ? count : 1));
    if (!moves) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t nmoves = 0;
    /* k = bisect_right(offsets, max(base_offset, first)) - 1 */
    int64_t at = base_offset > b->first ? base_offset : b->first;
    Py_ssize_t lo = 0, hi = b->nb + 1;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (at < b->offsets[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    Py_ssize_t k = lo > 0 ? lo - 1 : 0;
    Fail f;
    Py_ssize_t pos = 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t length, ts_delta, off_delta;
        if (varint(buf, &pos, n, 1, &length, &f) < 0 || length < 3 || length > n - pos)
            goto refused;
        Py_ssize_t rend = pos + (Py_ssize_t)length;
        Py_ssize_t p = pos + 1;
        if (varint(buf, &p, rend, 0, &ts_delta, &f) < 0 || varint(buf, &p, rend, 1, &off_delta, &f) < 0)
            goto refused;
        pos = rend;
        int64_t off, ts;
        if (__builtin_add_overflow(base_offset, off_delta, &off) || __builtin_add_overflow(base_ts, ts_delta, &ts))
            goto refused;
        if (off < b->first || off >= b->log_end)
            continue;
        while (k < b->nb && b->offsets[k + 1] <= off)
            k++;
        if (ts >= b->edges[k])
            continue;
        /* own = bisect_right(edges, ts) - 1, below k since ts < edges[k] */
        Py_ssize_t a = 0, c = k;
        while (a < c) {
            Py_ssize_t mid = (a + c) / 2;
            if (ts < b->edges[mid])
                c = mid;
            else
                a = mid + 1;
        }
        moves[2 * nmoves] = (int32_t)k;
        moves[2 * nmoves + 1] = (int32_t)(a - 1);
        nmoves++;
    }
    for (Py_ssize_t m = 0; m < nmoves; m++) {
        int32_t from = moves[2 * m], own = moves[2 * m + 1];
        if (from < b->nb)
            b->counts[from] -= 1;
        if (own < 0) {
            (*before)++;
        } else {
            b->counts[own] += 1;
            b->late[own] += 1;
        }
    }
    PyMem_Free(moves);
    return 0;
refused:
    PyMem_Free(moves);
    if (PyErr_Occurred())
        return -1;
    return 1;
}

static int buckets_from(Buckets *b, Py_buffer *offs, Py_buffer *edg, Py_buffer *cnt, Py_buffer *lat, long long first,
                        long long log_end)
{
    b->nb = edg->len / 8 - 1;
    if (b->nb < 1 || offs->len != edg->len || cnt->len / 8 != b->nb || lat->len / 8 != b->nb) {
        PyErr_SetString(PyExc_ValueError, "offsets and edges need n + 1 items, counts and late n");
        return -1;
    }
    b->offsets = (const int64_t *)offs->buf;
    b->edges = (const int64_t *)edg->buf;
    b->counts = (int64_t *)cnt->buf;
    b->late = (int64_t *)lat->buf;
    b->first = first;
    b->log_end = log_end;
    return 0;
}

static PyObject *place_late(PyObject *self, PyObject *args)
{
    Py_buffer body, offs, edg, cnt, lat;
    long long count, base_offset, base_ts, first, log_end;
    if (!PyArg_ParseTuple(args, "y*LLLy*y*LLw*w*", &body, &count, &base_offset, &base_ts, &offs, &edg, &first,
                          &log_end, &cnt, &lat))
        return NULL;
    PyObject *result = NULL;
    Buckets b;
    long long before = 0;
    if (buckets_from(&b, &offs, &edg, &cnt, &lat, first, log_end) == 0) {
        int r = place_body(&b, (const uint8_t *)body.buf, body.len, count, base_offset, base_ts, &before);
        if (r == 0)
            result = PyLong_FromLongLong(before);
        else if (r == 1)
            result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&body);
    PyBuffer_Release(&offs);
    PyBuffer_Release(&edg);
    PyBuffer_Release(&cnt);
    PyBuffer_Release(&lat);
    return result;
}

/* place_late_batches(buf, pos, offsets, edges, first, log_end, counts, late) -> (pos, before, stopped)
 *
 * `place_late` over the whole batches of a buffer from `pos` (a run of a segment whose CRCs the caller
 * checked): uncompressed CreateTime v2 batches are placed here, control batches stepped over (they hold no
 * records a reader sees); at any other batch (compressed, LogAppendTime, legacy, or one whose records do
 * not walk cleanly) it stops with `stopped` true and `pos` at that batch, for the caller's batch-by-batch
 * path. `stopped` false: no whole batch is left at `pos`. */
static PyObject *place_late_batches(PyObject *self, PyObject *args)
{
    Py_buffer data, offs, edg, cnt, lat;
    Py_ssize_t pos;
    long long first, log_end;
    if (!PyArg_ParseTuple(args, "y*ny*y*LLw*w*", &data, &pos, &offs, &edg, &first, &log_end, &cnt, &lat))
        return NULL;
    PyObject *result = NULL;
    Buckets b;
    long long before = 0;
    int stopped = 0;
    const uint8_t *buf = (const uint8_t *)data.buf;
    const Py_ssize_t n = data.len;
    if (buckets_from(&b, &offs, &edg, &cnt, &lat, first, log_end) < 0)
        goto done;
    while (pos >= 0 && n - pos >= 61) {
        int64_t base_offset = be64(buf + pos);
        int32_t length = be32(buf + pos + 8);
        if (length < 49 || (int64_t)length > (int64_t)(n - pos - 12) || buf[pos + 16] != 2) {
            stopped = length >= 0 && (int64_t)length <= (int64_t)(n - pos - 12); /* a whole non-v2 batch */
            break;
        }
        int16_t attributes = be16(buf + pos + 21);
        Py_ssize_t size = 12 + (Py_ssize_t)length;
        if (attributes & 0x20) { /* a control batch */
            pos += size;
            continue;
        }
        if (attributes & 0x0F) { /* compressed or LogAppendTime */
            stopped = 1;
            break;
        }
        int r = place_body(&b, buf + pos + 61, size - 61, be32(buf + pos + 57), base_offset, be64(buf + pos + 27),
                           &before);
        if (r < 0)
            goto done;
        if (r == 1) {
            stopped = 1;
            break;
        }
        pos += size;
    }
    result = Py_BuildValue("(nLO)", pos, before, stopped ? Py_True : Py_False);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&offs);
    PyBuffer_Release(&edg);
    PyBuffer_Release(&cnt);
    PyBuffer_Release(&lat);
    return result;
}

static PyMethodDef module_methods[] = {
    {"place_late_batches", place_late_batches, METH_VARARGS,
     "place_late_batches(buf, pos, offsets, edges, first, log_end, counts, late) -> (pos, before, stopped)"},
    {"place_late", place_late, METH_VARARGS,
     "place_late(body, count, base_offset, base_ts, offsets, edges, first, log_end, counts, late) -> int | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_timeline", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__timeline(void)
{
    return PyModule_Create(&module);
}
