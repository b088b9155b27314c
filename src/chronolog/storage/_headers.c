/* The end of a fetch's byte range, found from v2 batch headers read straight from the segment file.
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
        ssize_t got;
        do {
            got = pread(fd, head, HEADER_SIZE, (off_t)pos);
        } while (got < 0 && errno == EINTR);
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

static PyMethodDef methods[] = {
    {"batch_end", batch_end, METH_VARARGS,
     "batch_end(fd, pos, file_end, budget_end, limit, is_last) -> the end of the whole v2 batches from pos "
     "that fit before budget_end and are based below limit (limit < 0: no limit), or -1 where the Python "
     "header walk would send the caller to the batch-parsing path."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_headers", NULL, -1, methods};

PyMODINIT_FUNC PyInit__headers(void)
{
    return PyModule_Create(&module);
}
