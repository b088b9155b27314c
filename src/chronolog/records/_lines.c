/* A block of text lines as the columns `_encode.encode_batches` reads, for `chronolog produce`
 * (timetravel/lineload.py): the line boundaries and each line's BSD syslog time, with no Python object
 * per line.
 *
 * scan(block, eof, year, carry, skip_blank) -> (count, consumed, offsets, times, blank, unreadable,
 *                                               named, lead, least, last, last_read, kept)
 *   Lines end at `\n` (removed; a `\r` before it stays). Without `eof` the block ends at its last `\n`
 *   (`consumed` bytes; the rest is the next block's start); with it, bytes after the last `\n` are a last
 *   line. `offsets` is int32 offsets[count + 1] in native order, line i being block[offsets[i] :
 *   offsets[i + 1] - 1]: the binary column layout of `_encode` with a gap of one byte (the `\n`).
 *   `blank` counts empty lines; with `skip_blank`, where there are any, `kept` is the int64 row numbers of
 *   the others (the encoder's index), else None. With `year` 0 there are no times (`times` None, the rest 0, () or -1).
 *   Otherwise `times` is int64 ms[count]: each line's syslog time read as UTC in that year; a line
 *   without one takes the time of the line before (`carry` for the first: the previous block's last,
 *   -1 for none), as lineload.Loader does. `unreadable` counts the lines without a time that are not
 *   blank, `named` holds the indexes of the first NAMED of them, `lead` the lines before the first time
 *   while there is none to carry (the caller holds them back: they are -1), `least` the smallest time
 *   (-1: none), `last` the last line's, `last_read` the index of the last line that has its own (-1).
 *   A block of 2 GiB or more without a `\n` is refused (ValueError): int32 offsets cannot hold it.
 *
 * A line's time is what timetravel.linetime reads with SYSLOG_REGEX
 * (`^[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}\s`, `\s` being ASCII whitespace) and the `syslog`
 * TimeFormat: a month name as written (Jan..Dec), a day that exists in that year, hours 00-23, minutes and
 * seconds 00-59. tests/timetravel/test_linescan.py compares the two on tricky lines.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static inline int is_space(uint8_t c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

static inline int is_digit(uint8_t c)
{
    return c >= '0' && c <= '9';
}

/* Days from 1970-01-01 to y-m-d of the proleptic Gregorian calendar (H. Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int month_of(const uint8_t *p)
{
    static const char names[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    for (int m = 0; m < 12; m++)
        if (p[0] == names[3 * m] && p[1] == names[3 * m + 1] && p[2] == names[3 * m + 2])
            return m + 1;
    return 0;
}

/* The syslog time at the start of p[0..n) in epoch ms, or -1 for none; *used is how many bytes decided
 * it: the match with the whitespace after it, or n + 1 where there is none (a longer line may match). */
static int64_t syslog_ms(const uint8_t *p, Py_ssize_t n, int year, int leap, Py_ssize_t *used)
{
    *used = n + 1;
    static const int days_in[13] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (n < 15 || !(p[0] >= 'A' && p[0] <= 'Z') || !(p[1] >= 'a' && p[1] <= 'z') || !(p[2] >= 'a' && p[2] <= 'z'))
        return -1;
    Py_ssize_t i = 3;
    if (!is_space(p[i]))
        return -1;
    while (i < n && is_space(p[i]))
        i++;
    if (i >= n || !is_digit(p[i]))
        return -1;
    int day = p[i++] - '0';
    if (i < n && is_digit(p[i]))
        day = day * 10 + (p[i++] - '0');
    if (i >= n || !is_space(p[i]))
        return -1;
    while (i < n && is_space(p[i]))
        i++;
    /* HH:MM:SS and one whitespace after it */
    if (n - i < 9 || !is_digit(p[i]) || !is_digit(p[i + 1]) || p[i + 2] != ':' || !is_digit(p[i + 3]) ||
        !is_digit(p[i + 4]) || p[i + 5] != ':' || !is_digit(p[i + 6]) || !is_digit(p[i + 7]) || !is_space(p[i + 8]))
        return -1;
    int hh = (p[i] - '0') * 10 + (p[i + 1] - '0'), mm = (p[i + 3] - '0') * 10 + (p[i + 4] - '0'),
        ss = (p[i + 6] - '0') * 10 + (p[i + 7] - '0');
    *used = i + 9;
    int month = month_of(p);
    if (!month || day < 1 || day > days_in[month] + (month == 2 && leap) || hh > 23 || mm > 59 || ss > 59)
        return -1;
    return ((days_from_civil(year, month, day) * 24 + hh) * 60 + mm) * 60000 + ss * 1000;
}

#define NAMED 5    /* lineload.NAMED: the unreadable lines the summary names */
#define PREFIX 16  /* a line with the same first bytes as one whose time they decided has that time */

static PyObject *scan(PyObject *self, PyObject *args)
{
    Py_buffer b;
    int eof, year;
    long long carry = -1;
    int skip_blank = 0;
    if (!PyArg_ParseTuple(args, "y*pi|Lp", &b, &eof, &year, &carry, &skip_blank))
        return NULL;
    PyObject *offsets = NULL, *times = NULL, *kept = NULL, *result = NULL;
    if (year != 0 && (year < 1970 || year > 9999)) {
        PyErr_SetString(PyExc_ValueError, "year: 1970..9999, or 0 for no times");
        goto done;
    }
    const uint8_t *data = b.buf;
    Py_ssize_t consumed = b.len;  /* to the last `\n` (memrchr is not everywhere) */
    if (!eof)
        while (consumed > 0 && data[consumed - 1] != '\n')
            consumed--;
    if (consumed >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a line of 2 GiB or more");
        goto done;
    }
    Py_ssize_t count = 0;
    for (const uint8_t *p = data; p < data + consumed; count++) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(data + consumed - p));
        p = nl ? nl + 1 : data + consumed;
    }
    offsets = PyBytes_FromStringAndSize(NULL, (count + 1) * 4);
    if (!offsets)
        goto done;
    if (year) {
        times = PyBytes_FromStringAndSize(NULL, count * 8);
        if (!times)
            goto done;
    } else {
        times = Py_None;
        Py_INCREF(times);
    }
    int32_t *off = (int32_t *)PyBytes_AS_STRING(offsets);
    int64_t *ts = year ? (int64_t *)PyBytes_AS_STRING(times) : NULL;
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    Py_ssize_t blank = 0, unreadable = 0, lead = 0, last_read = -1, named[NAMED], n_named = 0;
    int64_t prev = carry < 0 ? -1 : carry, least = -1, same_t = -1;
    const uint8_t *p = data, *same = NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(data + consumed - p));
        const uint8_t *line_end = nl ? nl : data + consumed;
        Py_ssize_t n = line_end - p;
        off[i] = (int32_t)(p - data);
        blank += n == 0;
        if (ts) {
            int64_t t;
            Py_ssize_t used;
            if (same != NULL && n >= PREFIX && memcmp(p, same, PREFIX) == 0)
                t = same_t;  /* the same second as a line before: not read again */
            else {
                t = syslog_ms(p, n, year, leap, &used);
                same = used <= PREFIX && n >= PREFIX ? p : NULL;
                same_t = t;
            }
            if (t >= 0) {
                prev = t;
                last_read = i;
            } else {
                if (n > 0) {
                    unreadable++;
                    if (n_named < NAMED)
                        named[n_named++] = i;
                }
                lead += prev < 0;
            }
            ts[i] = prev;
            if (prev >= 0 && (least < 0 || prev < least))
                least = prev;
        }
        p = line_end + 1;
    }
    off[count] = (int32_t)(p - data);  /* one past the end for a last line without `\n` (the gap) */
    if (skip_blank && blank) {
        kept = PyBytes_FromStringAndSize(NULL, (count - blank) * 8);
        if (!kept)
            goto done;
        int64_t *k = (int64_t *)PyBytes_AS_STRING(kept);
        for (Py_ssize_t i = 0; i < count; i++)
            if (off[i + 1] - off[i] > 1)
                *k++ = i;
    } else {
        kept = Py_None;
        Py_INCREF(kept);
    }
    PyObject *names = PyTuple_New(n_named);
    if (!names)
        goto done;
    for (Py_ssize_t k = 0; k < n_named; k++) {
        PyObject *v = PyLong_FromSsize_t(named[k]);
        if (!v) {
            Py_DECREF(names);
            goto done;
        }
        PyTuple_SET_ITEM(names, k, v);
    }
    result = Py_BuildValue("nnOOnnNnLLnO", count, consumed, offsets, times, blank, unreadable, names, lead,
                           (long long)least, (long long)(ts && count ? ts[count - 1] : -1), last_read, kept);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(times);
    Py_XDECREF(kept);
    PyBuffer_Release(&b);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(block, eof, year[, carry[, skip_blank]]) -> (count, consumed, offsets, times, blank, unreadable, named, "
     "lead, least, last, last_read, kept)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lines", NULL, -1, methods};

PyMODINIT_FUNC PyInit__lines(void)
{
    return PyModule_Create(&module);
}
