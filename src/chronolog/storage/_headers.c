/* Two walks over v2 batches read straight from a segment file: the end of a fetch's byte range (batch_end),
 * and recovery's walk over the valid batches (clean_run, below).
 *
 * A Fetch is answered with whole batches sent from the file by sendfile (LogSegment.fetch_range). To know
 * where the range ends, every batch header in it is checked (bytes no reader has looked at are never
 * served; see chronolog.storage.corruption). In Python that walk read the whole range in 64 KiB chunks and
 * cost about 0.3 ms per MiB of 16 KiB batches, more than sending the bytes. Here each header costs one
 * pread of its 61 bytes, with the GIL released, and the checks are exactly those of
 * segment._HeaderReader.header followed by fetch_range's stop conditions, in the same order:
 *
 *   - at or past `file_end`: the range ends here;
 *   - fewer than 61 bytes left, or a batch running past `file_end`: the range ends here in the last
 *     segment (a torn tail), anywhere else the caller must look closer;
 *   - magic not 2, a batch length below 49, a negative last offset delta: the caller must look closer;
 *   - a base offset at or past `limit` (when limit >= 0), or a batch that would pass `budget_end`: the
 *     range ends before it.
 *
 * batch_end returns the end position, or -1 where the Python walk answers False (the caller then takes
 * the batch-parsing path, which steps over corrupt ranges). tests/storage/test_native_headers.py compares
 * it with the Python walk on clean and damaged segments.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HEADER_SIZE 61
#define MIN_BATCH_LENGTH (HEADER_SIZE - 12)

static inline int64_t be64(const uint8_t *p)
{
    return (int64_t)(((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40) |
                     ((uint64_t)p[3] << 32) | ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16) |
                     ((uint64_t)p[6] << 8) | (uint64_t)p[7]);
}

static inline int32_t be32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

/* pread, retried when a signal interrupts it. */
static ssize_t pread_retry(int fd, void *buf, size_t n, long long pos)
{
    ssize_t got;
    do {
        got = pread(fd, buf, n, (off_t)pos);
    } while (got < 0 && errno == EINTR);
    return got;
}

static PyObject *batch_end(PyObject *self, PyObject *args)
{
    int fd, is_last;
    long long pos, file_end, budget_end, limit;
    if (!PyArg_ParseTuple(args, "iLLLLp", &fd, &pos, &file_end, &budget_end, &limit, &is_last))
        return NULL;
    uint8_t head[HEADER_SIZE];
    int error = 0;
    long long result = -1;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        if (pos >= file_end) {
            result = pos;
            break;
        }
        ssize_t got = pread_retry(fd, head, HEADER_SIZE, pos);
        if (got < 0) {
            error = errno;
            break;
        }
        if (got < HEADER_SIZE || file_end - pos < HEADER_SIZE) {
            result = is_last ? pos : -1;
            break;
        }
        int64_t base = be64(head);
        int32_t length = be32(head + 8);
        int8_t magic = (int8_t)head[16];
        int32_t last_delta = be32(head + 23);
        if (magic != 2 || length < MIN_BATCH_LENGTH || last_delta < 0) {
            result = -1;
            break;
        }
        long long size = 12 + (long long)length;
        if (pos + size > file_end) {
            result = is_last ? pos : -1;
            break;
        }
        if ((limit >= 0 && base >= limit) || pos + size > budget_end) {
            result = pos;
            break;
        }
        pos += size;
    }
    Py_END_ALLOW_THREADS
    if (error) {
        errno = error;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLongLong(result);
}

/* ---- recovery: the clean run of v2 batches ------------------------------------------------------------
 *
 * LogSegment.recover validates every batch (size, CRC-32C, counts, offsets within the segment) and
 * rebuilds both indexes. In Python that costs about 4 us per batch whatever its size, so a segment of tiny
 * batches recovered at about 25 MB/s. clean_run walks the same checks over the file, read in chunks with
 * the GIL released, as far as the batches are v2 and valid, and returns what the Python loop would have
 * computed up to there: the position where it stopped, the running max timestamp and its offset, the next
 * expected offset, and the index entries to append. Anything else (a legacy batch, a bad size, magic or
 * CRC, a torn tail, the end) is left to the Python loop, which carries on from that position exactly as
 * before; tests/storage/test_native_recovery.py compares the two on clean and damaged segments. */

#include "../records/_crc32c.h"

typedef struct {
    long long last_offset, position, max_ts, max_offset;
} IndexPoint;

#define CHUNK (1 << 20)

/* Fill buf (cap bytes) with the file from pos, up to end: 0 or an errno. */
static int refill(int fd, uint8_t *buf, size_t cap, long long pos, long long end, long long *buf_pos,
                  long long *buf_len)
{
    size_t want = (size_t)((end - pos) < (long long)cap ? (end - pos) : (long long)cap);
    ssize_t got = pread_retry(fd, buf, want, pos);
    if (got < 0)
        return errno;
    *buf_pos = pos;
    *buf_len = got;
    return 0;
}

static PyObject *clean_run(PyObject *self, PyObject *args)
{
    int fd;
    long long pos, end, base_offset, interval, last_entry, max_ts, max_offset, expected, idx_room, ti_room;
    if (!PyArg_ParseTuple(args, "iLLLLLLLLLL", &fd, &pos, &end, &base_offset, &interval, &last_entry, &max_ts,
                          &max_offset, &expected, &idx_room, &ti_room))
        return NULL;
    size_t cap = CHUNK, points_cap = 256, n_points = 0;
    uint8_t *buf = malloc(cap);
    IndexPoint *points = malloc(points_cap * sizeof(IndexPoint));
    if (buf == NULL || points == NULL) {
        free(buf);
        free(points);
        return PyErr_NoMemory();
    }
    int error = 0, nomem = 0;
    Py_BEGIN_ALLOW_THREADS
    long long buf_pos = pos, buf_len = 0; /* buf holds the file's bytes [buf_pos, buf_pos + buf_len) */
    for (;;) {
        if (end - pos < HEADER_SIZE)
            break;
        if (pos + HEADER_SIZE > buf_pos + buf_len) {
            if ((error = refill(fd, buf, cap, pos, end, &buf_pos, &buf_len)) != 0 || buf_len < HEADER_SIZE)
                break;
        }
        const uint8_t *h = buf + (pos - buf_pos);
        int32_t length = be32(h + 8);
        if ((int8_t)h[16] != 2 || length < MIN_BATCH_LENGTH)
            break;
        long long size = 12 + (long long)length;
        if (pos + size > end)
            break;
        if (pos + size > buf_pos + buf_len) { /* the whole batch is needed for its CRC */
            if ((size_t)size > cap) {
                uint8_t *bigger = realloc(buf, (size_t)size);
                if (bigger == NULL) {
                    nomem = 1;
                    break;
                }
                buf = bigger;
                cap = (size_t)size;
            }
            if ((error = refill(fd, buf, cap, pos, end, &buf_pos, &buf_len)) != 0 || buf_len < size)
                break;
            h = buf;
        }
        uint32_t stored = (uint32_t)be32(h + 17);
        if (crc32c(h + 21, (size_t)(size - 21)) != stored)
            break;
        int32_t last_delta = be32(h + 23), count = be32(h + 57);
        if (count < 0 || last_delta < 0)
            break;
        long long last = be64(h) + last_delta;
        if (last - base_offset < 0 || last - base_offset > 0x7FFFFFFFLL || be64(h) < expected)
            break; /* (offsets going back: the Python loop counts that batch as invalid) */
        long long batch_max = be64(h + 35), new_max_ts = max_ts, new_max_offset = max_offset;
        if (batch_max > max_ts) {
            new_max_ts = batch_max;
            new_max_offset = last;
        }
        if (pos - last_entry > interval) {
            /* A full index refuses the Python loop's append, which then counts the batch as invalid: such a
             * batch is left to it. (Offsets cannot go back here: a batch below `expected` stopped the walk.) */
            if (idx_room <= 0 || ti_room <= 0)
                break;
            if (n_points == points_cap) {
                IndexPoint *more = realloc(points, 2 * points_cap * sizeof(IndexPoint));
                if (more == NULL) {
                    nomem = 1;
                    break;
                }
                points = more;
                points_cap *= 2;
            }
            points[n_points++] = (IndexPoint){last, pos, new_max_ts, new_max_offset};
            last_entry = pos;
            idx_room--;
            ti_room--; /* (at most one time entry a point: counting one each time only stops early) */
        }
        max_ts = new_max_ts;
        max_offset = new_max_offset;
        if (last + 1 > expected)
            expected = last + 1;
        pos += size;
    }
    Py_END_ALLOW_THREADS
    free(buf);
    PyObject *result = NULL;
    if (nomem) {
        PyErr_NoMemory();
    } else if (error) {
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
    } else {
        PyObject *list = PyList_New((Py_ssize_t)n_points);
        if (list != NULL) {
            for (size_t i = 0; i < n_points; i++) {
                PyObject *t = Py_BuildValue("(LLLL)", points[i].last_offset, points[i].position, points[i].max_ts,
                                            points[i].max_offset);
                if (t == NULL) {
                    Py_CLEAR(list);
                    break;
                }
                PyList_SET_ITEM(list, (Py_ssize_t)i, t);
            }
        }
        if (list != NULL)
            result = Py_BuildValue("(LLLLLN)", pos, last_entry, max_ts, max_offset, expected, list);
    }
    free(points);
    return result;
}

/* The header of the whole v2 batch at `pos`, for the two walks below, which hold the GIL (it is let go for
 * the reads): its size, with *header pointing into buf (refilled from pos when the header is not there); 0
 * when there is none (the end, a header that is not a v2 batch's, a batch running past `end`), -1 after a
 * read error (its errno in *error). */
static long long v2_header_at(int fd, uint8_t *buf, size_t cap, long long pos, long long end, long long *buf_pos,
                              long long *buf_len, const uint8_t **header, int *error)
{
    if (end - pos < HEADER_SIZE)
        return 0;
    if (pos + HEADER_SIZE > *buf_pos + *buf_len) {
        int e;
        Py_BEGIN_ALLOW_THREADS
        e = refill(fd, buf, cap, pos, end, buf_pos, buf_len);
        Py_END_ALLOW_THREADS
        if (e != 0) {
            *error = e;
            return -1;
        }
        if (*buf_len < HEADER_SIZE)
            return 0;
    }
    const uint8_t *h = buf + (pos - *buf_pos);
    int32_t length = be32(h + 8);
    if ((int8_t)h[16] != 2 || length < MIN_BATCH_LENGTH)
        return 0;
    long long size = 12 + (long long)length;
    if (pos + size > end)
        return 0;
    *header = h;
    return size;
}

/* A walk's read buffer of CHUNK bytes and its empty result list; NULL (MemoryError set) when either fails. */
static uint8_t *walk_start(PyObject **list)
{
    uint8_t *buf = malloc(CHUNK);
    *list = PyList_New(0);
    if (buf == NULL || *list == NULL) {
        free(buf);
        Py_CLEAR(*list);
        PyErr_NoMemory();
        return NULL;
    }
    return buf;
}

/* The end of a walk: the buffer freed; after a failure (exception already set) or a read error (its errno
 * value in `error`), the list dropped and 0 returned with the exception set; else 1. */
static int walk_end(uint8_t *buf, int error, int failed, PyObject **list)
{
    free(buf);
    if (!failed && error) {
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
        failed = 1;
    }
    if (failed) {
        Py_CLEAR(*list);
        return 0;
    }
    return 1;
}

/* ---- the minima rebuild: smallest record timestamps per chunk of batches --------------------------------
 *
 * After recovery, LogSegment._extend_by_scan computes each batch's smallest record timestamp and folds it
 * into chunks of about CHUNK_BYTES (storage.minima). In Python, building each batch and its minimum cost
 * about 5 us a batch: most of opening a partition of small batches after a crash. minima_run does the same
 * walk over the file: for each whole v2 batch, no records gives NO_RECORDS, LogAppendTime gives the max
 * timestamp, uncompressed records are read by `scan` (records._walk.scan_timestamps, the C walk that
 * RecordBatch.scan_timestamps itself uses) and give the base timestamp plus the smallest delta. Anything
 * else (a compressed batch, a batch `scan` declines, a sum beyond 64 bits, a header that is not a whole v2
 * batch's, the end) stops it there; the Python loop takes that batch and calls again. Chunks follow
 * SegmentMinima.extend: a batch starting CHUNK_BYTES or more after the tail chunk's start opens a new chunk.
 * tests/storage/test_native_minima.py compares the sidecar both ways. */
#define NO_RECORDS INT64_MAX

static PyObject *minima_run(PyObject *self, PyObject *args)
{
    int fd;
    long long pos, end, chunk_bytes, tail_pos, tail_min;
    PyObject *scan;
    if (!PyArg_ParseTuple(args, "iLLLOLL", &fd, &pos, &end, &chunk_bytes, &scan, &tail_pos, &tail_min))
        return NULL;
    size_t cap = CHUNK;
    PyObject *chunks;
    uint8_t *buf = walk_start(&chunks);
    if (buf == NULL)
        return NULL;
    long long buf_pos = pos, buf_len = 0, last_pos = -1, last_base = 0, last_size = 0, last_crc = 0;
    long long new_pos = -1, new_base = 0, new_crc = 0, new_min = 0; /* the newest chunk opened here */
    int error = 0, failed = 0;
    for (;;) {
        const uint8_t *h = NULL;
        long long size = v2_header_at(fd, buf, cap, pos, end, &buf_pos, &buf_len, &h, &error);
        if (size <= 0)
            break;
        int16_t attributes = (int16_t)(((uint16_t)h[21] << 8) | h[22]);
        int32_t count = be32(h + 57);
        long long low;
        if (count <= 0) {
            low = NO_RECORDS;
        } else if (attributes & 0x08) { /* LogAppendTime */
            low = be64(h + 35);
        } else {
            if (attributes & 0x07) /* compressed: the Python loop decompresses it */
                break;
            if (pos + size > buf_pos + buf_len) { /* the records are needed */
                if ((size_t)size > cap) {
                    uint8_t *bigger = realloc(buf, (size_t)size);
                    if (bigger == NULL) {
                        failed = 1;
                        PyErr_NoMemory();
                        break;
                    }
                    buf = bigger;
                    cap = (size_t)size;
                }
                Py_BEGIN_ALLOW_THREADS
                error = refill(fd, buf, cap, pos, end, &buf_pos, &buf_len);
                Py_END_ALLOW_THREADS
                if (error != 0 || buf_len < size)
                    break;
                h = buf;
            }
            PyObject *body = PyMemoryView_FromMemory((char *)(h + HEADER_SIZE), (Py_ssize_t)(size - HEADER_SIZE),
                                                     PyBUF_READ);
            if (body == NULL) {
                failed = 1;
                break;
            }
            PyObject *found = PyObject_CallFunction(scan, "Oi", body, (int)count);
            PyObject *released = PyObject_CallMethod(body, "release", NULL);
            Py_DECREF(body);
            Py_XDECREF(released);
            if (found == NULL || released == NULL) {
                Py_XDECREF(found);
                failed = 1;
                break;
            }
            long long delta = 0;
            int usable = PyTuple_Check(found) && PyTuple_GET_SIZE(found) >= 1;
            if (usable) {
                int overflow = 0;
                delta = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(found, 0), &overflow);
                if (overflow || (delta == -1 && PyErr_Occurred())) {
                    PyErr_Clear();
                    usable = 0;
                }
            }
            Py_DECREF(found);
            if (!usable || __builtin_add_overflow(be64(h + 27), delta, &low))
                break; /* declined (the Python walk gives the verdict), or beyond 64 bits */
        }
        long long base = be64(h);
        long long crc = (long long)(uint32_t)be32(h + 17);
        long long open_at = new_pos >= 0 ? new_pos : tail_pos;
        if (open_at < 0 || pos - open_at >= chunk_bytes) {
            if (new_pos >= 0) {
                PyObject *t = Py_BuildValue("(LLLL)", new_pos, new_base, new_crc, new_min);
                if (t == NULL || PyList_Append(chunks, t) < 0) {
                    Py_XDECREF(t);
                    failed = 1;
                    break;
                }
                Py_DECREF(t);
            }
            new_pos = pos;
            new_base = base;
            new_crc = crc;
            new_min = low;
        } else if (new_pos >= 0) {
            if (low < new_min)
                new_min = low;
        } else if (low < tail_min) {
            tail_min = low;
        }
        last_pos = pos;
        last_base = base;
        last_size = size;
        last_crc = crc;
        pos += size;
    }
    if (!failed && !error && new_pos >= 0) {
        PyObject *t = Py_BuildValue("(LLLL)", new_pos, new_base, new_crc, new_min);
        if (t == NULL || PyList_Append(chunks, t) < 0)
            failed = 1;
        Py_XDECREF(t);
    }
    if (!walk_end(buf, error, failed, &chunks))
        return NULL;
    if (last_pos < 0)
        return Py_BuildValue("(LLNO)", pos, tail_min, chunks, Py_None);
    return Py_BuildValue("(LLN(LLLL))", pos, tail_min, chunks, last_pos, last_base, last_size, last_crc);
}

/* ---- the producers' replay: what idempotent producers wrote -----------------------------------------------
 *
 * PartitionLog._replay_producers updates the producers' state from every batch after the newest snapshot,
 * which after a crash is the whole active segment; it needs only header fields. producer_run walks whole v2
 * batches from `pos` (one large read at a time, headers only) and returns (producer id, epoch, base
 * sequence, base offset, last offset, max timestamp, attributes, position) of those carrying a producer id
 * (>= 0), data or control (transaction markers), ending at or after offset `start`, in log order. It
 * stops at anything that is not a whole v2 batch (the Python loop goes on from there as before), or after
 * `most` of them (the caller applies those and calls again, so memory stays bounded). */
static PyObject *producer_run(PyObject *self, PyObject *args)
{
    int fd;
    long long pos, end, start, most;
    if (!PyArg_ParseTuple(args, "iLLLL", &fd, &pos, &end, &start, &most))
        return NULL;
    size_t cap = CHUNK;
    PyObject *found;
    uint8_t *buf = walk_start(&found);
    if (buf == NULL)
        return NULL;
    long long buf_pos = pos, buf_len = 0;
    int error = 0, failed = 0;
    while (PyList_GET_SIZE(found) < most) {
        const uint8_t *h = NULL;
        long long size = v2_header_at(fd, buf, cap, pos, end, &buf_pos, &buf_len, &h, &error);
        if (size <= 0)
            break;
        long long base = be64(h), last;
        if (__builtin_add_overflow(base, (long long)be32(h + 23), &last))
            break;
        long long producer_id = be64(h + 43);
        int16_t attributes = (int16_t)(((uint16_t)h[21] << 8) | h[22]);
        if (producer_id >= 0 && last >= start) {
            int16_t epoch = (int16_t)(((uint16_t)h[51] << 8) | h[52]);
            PyObject *t = Py_BuildValue("(LiiLLLiL)", producer_id, (int)epoch, (int)be32(h + 53), base, last,
                                        be64(h + 35), (int)attributes, pos);
            if (t == NULL || PyList_Append(found, t) < 0) {
                Py_XDECREF(t);
                failed = 1;
                break;
            }
            Py_DECREF(t);
        }
        pos += size;
    }
    if (!walk_end(buf, error, failed, &found))
        return NULL;
    return Py_BuildValue("(LN)", pos, found);
}

static PyMethodDef methods[] = {
    {"batch_end", batch_end, METH_VARARGS,
     "batch_end(fd, pos, file_end, budget_end, limit, is_last) -> the end of the whole v2 batches from pos "
     "that fit before budget_end and are based below limit (limit < 0: no limit), or -1 where the Python "
     "header walk would send the caller to the batch-parsing path."},
    {"clean_run", clean_run, METH_VARARGS,
     "clean_run(fd, pos, end, base_offset, index_interval, last_entry, max_ts, max_offset, expected, "
     "offset index room, time index room) -> "
     "(stop position, last_entry, max_ts, max_offset, expected, [(last_offset, position, max_ts, max_offset) "
     "index points]) for the valid v2 batches from pos: recovery's loop up to the first batch it must look "
     "at itself."},
    {"minima_run", minima_run, METH_VARARGS,
     "minima_run(fd, pos, end, chunk_bytes, scan, tail_pos, tail_min) -> (stop position, the tail chunk's "
     "minimum, [(position, base offset, crc, minimum) new chunks], (position, base offset, size, crc) of the "
     "last batch or None): the minima rebuild's walk up to the first batch the Python loop must take."},
    {"producer_run", producer_run, METH_VARARGS,
     "producer_run(fd, pos, end, start, most) -> (stop position, [(producer id, epoch, base sequence, base "
     "offset, last offset, max timestamp, attributes, position)]) of producers' batches ending at or after start: the replay's walk "
     "up to the first batch the Python loop must take, or after `most` of them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_headers", NULL, -1, methods};

PyMODINIT_FUNC PyInit__headers(void)
{
    crc_table_init();
#ifdef HAVE_SSE42_CRC
    __builtin_cpu_init();
    use_sse42 = __builtin_cpu_supports("sse4.2");
#endif
    return PyModule_Create(&module);
}
