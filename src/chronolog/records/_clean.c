/* The log cleaner's per-record work in C (storage.cleaner; Kafka's `Cleaner.buildOffsetMap` and
 * `cleanInto` over `SkimpyOffsetMap`). Its pure-Python twin is storage.cleaner.offset_map and the copy
 * loop of storage.cleaner.cleaning: both give the same records, offsets and indexes.
 *
 * OffsetMap is Kafka's SkimpyOffsetMap: 24 bytes a slot (a 128-bit hash of the key and the key's last
 * offset), at most `log.cleaner.dedupe.buffer.size` / 24 slots, filled to the load factor. The hash is
 * MurmurHash3's x64 128-bit construction seeded at random per map instead of Kafka's MD5: as many bits
 * (two keys collide with about the probability MD5 gives, ~n^2 / 2^129) at a fraction of MD5's cost on
 * short keys. The table is open addressing with linear probing; it starts small and doubles while it is
 * half full, up to the bound, so a small log does not touch 128 MiB.
 *
 * map_chunk and filter_chunk walk a buffer of a segment's batches and do, batch after batch, what the
 * Python cleaner does for the common batch: v2, neither transactional nor control, compressed or not
 * (compressed bodies go through the records layer's codecs that `set_codecs` hands over, so the codecs,
 * their limits and their errors stay in one place). They stop at any other batch, and at one the Python
 * code must decide (a tombstone that needs its delete horizon, a batch that must stay as an empty batch,
 * anything malformed), and return its position: the Python code handles it and calls again after it.
 */
#include "_recordwalk.h"
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <structmember.h>

#include "_bigendian.h"
#include "_crc32c.h"

#define LOG_OVERHEAD 12
#define HEADER_SIZE 61
#define V0_MIN 14 /* the smallest legal size of any message set entry (records.legacy.V0_MIN) */
#define ATTR_CODEC 0x07
#define ATTR_LOG_APPEND_TIME 0x08
#define ATTR_TRANSACTIONAL 0x10
#define ATTR_CONTROL 0x20
#define ATTR_DELETE_HORIZON 0x40
#define INITIAL_SLOTS 4096

enum { ST_MORE = 0, ST_PYTHON = 1, ST_BUDGET = 2, ST_END = 3, ST_FULL = 4 };

/* -- the hash: MurmurHash3 x64 128 --------------------------------------------------------------------- */
static inline uint64_t rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

static inline uint64_t le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static void hash128(const uint8_t *data, size_t len, uint64_t seed, uint64_t *o1, uint64_t *o2)
{
    const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
    uint64_t h1 = seed, h2 = seed, k1, k2;
    size_t nblocks = len / 16;
    for (size_t i = 0; i < nblocks; i++) {
        k1 = le64(data + 16 * i);
        k2 = le64(data + 16 * i + 8);
        k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
        h1 = rotl64(h1, 27); h1 += h2; h1 = h1 * 5 + 0x52dce729;
        k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2;
        h2 = rotl64(h2, 31); h2 += h1; h2 = h2 * 5 + 0x38495ab5;
    }
    const uint8_t *tail = data + 16 * nblocks;
    k1 = k2 = 0;
    switch (len & 15) {
    case 15: k2 ^= (uint64_t)tail[14] << 48; /* fall through */
    case 14: k2 ^= (uint64_t)tail[13] << 40; /* fall through */
    case 13: k2 ^= (uint64_t)tail[12] << 32; /* fall through */
    case 12: k2 ^= (uint64_t)tail[11] << 24; /* fall through */
    case 11: k2 ^= (uint64_t)tail[10] << 16; /* fall through */
    case 10: k2 ^= (uint64_t)tail[9] << 8; /* fall through */
    case 9:
        k2 ^= (uint64_t)tail[8];
        k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2;
        /* fall through */
    case 8: k1 ^= (uint64_t)tail[7] << 56; /* fall through */
    case 7: k1 ^= (uint64_t)tail[6] << 48; /* fall through */
    case 6: k1 ^= (uint64_t)tail[5] << 40; /* fall through */
    case 5: k1 ^= (uint64_t)tail[4] << 32; /* fall through */
    case 4: k1 ^= (uint64_t)tail[3] << 24; /* fall through */
    case 3: k1 ^= (uint64_t)tail[2] << 16; /* fall through */
    case 2: k1 ^= (uint64_t)tail[1] << 8; /* fall through */
    case 1:
        k1 ^= (uint64_t)tail[0];
        k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
    }
    h1 ^= (uint64_t)len;
    h2 ^= (uint64_t)len;
    h1 += h2;
    h2 += h1;
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 += h2;
    h2 += h1;
    *o1 = h1;
    *o2 = h2;
}

/* -- the map -------------------------------------------------------------------------------------------- */
typedef struct {
    uint64_t h1, h2;
    int64_t offset_plus_one; /* 0: an empty slot */
} Slot;

typedef struct {
    PyObject_HEAD
    Slot *table;
    Py_ssize_t cap, slots, max_entries, count;
    long long latest_offset, peak_bytes;
    uint64_t seed;
    PyObject *decompress, *compress; /* records.compression's, or NULL: compressed batches are Python's */
    Py_ssize_t *spans;               /* filter_chunk's kept records of one batch: (start, end) pairs */
    Py_ssize_t spans_cap;
} OffsetMapObject;

static inline Py_ssize_t slot_of(const OffsetMapObject *m, uint64_t h1)
{
    return (Py_ssize_t)(((unsigned __int128)h1 * (uint64_t)m->cap) >> 64);
}

/* The table at `cap` slots, the entries it held moved in: 0, or -1 without the memory. */
static int map_alloc(OffsetMapObject *m, Py_ssize_t cap)
{
    Slot *t = (Slot *)calloc((size_t)cap, sizeof(Slot));
    if (t == NULL)
        return -1;
    Slot *old = m->table;
    Py_ssize_t old_cap = m->cap;
    m->table = t;
    m->cap = cap;
    for (Py_ssize_t i = 0; old != NULL && i < old_cap; i++) {
        if (!old[i].offset_plus_one)
            continue;
        Py_ssize_t j = slot_of(m, old[i].h1);
        while (t[j].offset_plus_one)
            j = j + 1 == cap ? 0 : j + 1;
        t[j] = old[i];
    }
    free(old);
    if ((long long)cap * (long long)sizeof(Slot) > m->peak_bytes)
        m->peak_bytes = (long long)cap * (long long)sizeof(Slot);
    return 0;
}

/* 0, or -1 when memory ran out (a Python error is set). The caller checked the map is not full. */
static int map_put(OffsetMapObject *m, uint64_t h1, uint64_t h2, long long offset)
{
    if (m->count * 2 >= m->cap && m->cap < m->slots) {
        Py_ssize_t cap = m->cap * 2 < m->slots ? m->cap * 2 : m->slots;
        if (map_alloc(m, cap) < 0) {
            PyErr_NoMemory();
            return -1;
        }
    }
    Py_ssize_t j = slot_of(m, h1);
    for (;;) {
        Slot *s = &m->table[j];
        if (!s->offset_plus_one) {
            s->h1 = h1;
            s->h2 = h2;
            s->offset_plus_one = offset + 1;
            m->count++;
            break;
        }
        if (s->h1 == h1 && s->h2 == h2) {
            s->offset_plus_one = offset + 1;
            break;
        }
        j = j + 1 == m->cap ? 0 : j + 1;
    }
    m->latest_offset = offset;
    return 0;
}

static inline long long map_get(const OffsetMapObject *m, uint64_t h1, uint64_t h2)
{
    Py_ssize_t j = slot_of(m, h1);
    for (Py_ssize_t probes = 0; probes < m->cap; probes++) { /* a load factor of 1 fills every slot */
        const Slot *s = &m->table[j];
        if (!s->offset_plus_one)
            return -1;
        if (s->h1 == h1 && s->h2 == h2)
            return s->offset_plus_one - 1;
        j = j + 1 == m->cap ? 0 : j + 1;
    }
    return -1;
}

static int map_reset(OffsetMapObject *m)
{
    free(m->table);
    m->table = NULL;
    m->cap = 0;
    m->count = 0;
    m->latest_offset = -1;
    return map_alloc(m, m->slots < INITIAL_SLOTS ? m->slots : INITIAL_SLOTS);
}

/* Whether the record whose key hashes to (h1, h2) is the last of its key: the copy keeps it. */
static inline int keeps(const OffsetMapObject *m, const uint8_t *body, const RecordHead *r, long long offset,
                        int retain_deletes)
{
    if (offset > m->latest_offset)
        return 1; /* past the map: a later pass decides */
    if (r->key_len < 0)
        return 0;
    uint64_t h1, h2;
    hash128(body + r->key_start, (size_t)r->key_len, m->seed, &h1, &h2);
    return offset >= map_get(m, h1, h2) && (r->value_len >= 0 || retain_deletes);
}

static int OffsetMap_init(OffsetMapObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"memory", "load_factor", "seed", NULL};
    long long memory;
    double load_factor = 0.9;
    unsigned long long seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "L|dK", kwlist, &memory, &load_factor, &seed))
        return -1;
    self->slots = (Py_ssize_t)(memory / (long long)sizeof(Slot));
    self->max_entries = (Py_ssize_t)((double)self->slots * load_factor);
    if (self->max_entries > self->slots)
        self->max_entries = self->slots; /* map_put needs a free slot for every new key */
    if (self->max_entries < 1) {
        PyErr_SetString(PyExc_ValueError, "offset map is too small to fit in even a single message: increase "
                                          "log.cleaner.dedupe.buffer.size");
        return -1;
    }
    self->seed = seed;
    self->peak_bytes = 0;
    if (map_reset(self) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void OffsetMap_dealloc(OffsetMapObject *self)
{
    Py_CLEAR(self->decompress);
    Py_CLEAR(self->compress);
    free(self->table);
    free(self->spans);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *OffsetMap_set_codecs(OffsetMapObject *self, PyObject *args)
{
    PyObject *decompress, *compress;
    if (!PyArg_ParseTuple(args, "OO", &decompress, &compress))
        return NULL;
    if (decompress != Py_None && (!PyCallable_Check(decompress) || !PyCallable_Check(compress))) {
        PyErr_SetString(PyExc_TypeError, "set_codecs(decompress, compress) takes two callables or None, None");
        return NULL;
    }
    Py_CLEAR(self->decompress);
    Py_CLEAR(self->compress);
    if (decompress != Py_None) {
        Py_INCREF(decompress);
        Py_INCREF(compress);
        self->decompress = decompress;
        self->compress = compress;
    }
    Py_RETURN_NONE;
}

/* codec(codec id, data bytes) through `fn` -> a new bytes reference. NULL with no error set when the call
 * raised an Exception: the batch is then the Python code's, whose same call raises it again (a corrupt or
 * oversized frame, an unknown codec). NULL with an error set for anything else (KeyboardInterrupt). */
static PyObject *call_codec(PyObject *fn, int codec, const uint8_t *data, Py_ssize_t len)
{
    PyObject *arg = PyBytes_FromStringAndSize((const char *)data, len);
    if (arg == NULL)
        return NULL;
    PyObject *res = PyObject_CallFunction(fn, "iO", codec, arg);
    Py_DECREF(arg);
    if (res == NULL) {
        if (PyErr_ExceptionMatches(PyExc_Exception))
            PyErr_Clear();
        return NULL;
    }
    if (!PyBytes_Check(res)) {
        Py_DECREF(res);
        PyErr_SetString(PyExc_TypeError, "a codec returned something other than bytes");
        return NULL;
    }
    return res;
}

static PyObject *OffsetMap_clear(OffsetMapObject *self, PyObject *unused)
{
    if (map_reset(self) < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *OffsetMap_put(OffsetMapObject *self, PyObject *args)
{
    Py_buffer key;
    long long offset;
    if (!PyArg_ParseTuple(args, "y*L", &key, &offset))
        return NULL;
    uint64_t h1, h2;
    hash128((const uint8_t *)key.buf, (size_t)key.len, self->seed, &h1, &h2);
    PyBuffer_Release(&key);
    if (map_put(self, h1, h2, offset) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *OffsetMap_get(OffsetMapObject *self, PyObject *args)
{
    Py_buffer key;
    if (!PyArg_ParseTuple(args, "y*", &key))
        return NULL;
    uint64_t h1, h2;
    hash128((const uint8_t *)key.buf, (size_t)key.len, self->seed, &h1, &h2);
    PyBuffer_Release(&key);
    return PyLong_FromLongLong(map_get(self, h1, h2));
}

/* -- the map pass --------------------------------------------------------------------------------------- */
/* Puts the keyed records at or after `start` of a records section; stops at the first one that finds the
 * map full. 1 done, 0 full, -1 a body the Python walk rejects, -2 a Python error. */
static int map_records(OffsetMapObject *m, const uint8_t *body, Py_ssize_t n, long long count, long long base,
                       long long start, long long *records)
{
    Py_ssize_t pos = 0;
    if (count < 0 || count > n)
        return -1;
    for (long long i = 0; i < count; i++) {
        RecordHead r;
        if (!record_head(body, n, pos, &r) || r.ts_status != 1)
            return -1;
        pos = r.end;
        long long offset = base + r.offset_delta;
        if (r.key_len >= 0 && offset >= start) {
            if (m->count >= m->max_entries) {
                /* full: the rest of the body must still be one the Python walk accepts */
                for (i++; i < count; i++) {
                    if (!record_head(body, n, pos, &r) || r.ts_status != 1)
                        return -1;
                    pos = r.end;
                }
                return pos == n ? 0 : -1;
            }
            uint64_t h1, h2;
            hash128(body + r.key_start, (size_t)r.key_len, m->seed, &h1, &h2);
            if (map_put(m, h1, h2, offset) < 0)
                return -2;
        }
        (*records)++;
    }
    return pos == n ? 1 : -1;
}

/* map_body(body, count, base, start) -> (full, records mapped) for one decompressed records section, None
 * for a body the Python walk rejects. */
static PyObject *OffsetMap_map_body(OffsetMapObject *self, PyObject *args)
{
    Py_buffer view;
    long long count, base, start, records = 0;
    if (!PyArg_ParseTuple(args, "y*LLL", &view, &count, &base, &start))
        return NULL;
    int got = map_records(self, (const uint8_t *)view.buf, view.len, count, base, start, &records);
    PyBuffer_Release(&view);
    if (got == -2)
        return NULL;
    if (got == -1)
        Py_RETURN_NONE;
    return Py_BuildValue("(OL)", got == 0 ? Py_True : Py_False, records);
}

/* The frame of the batch at `off`: 1 a whole v2 batch (its size in *size), 0 not whole in the buffer,
 * -1 one the Python code must see (a legacy batch, a size or magic iter_batches refuses). */
static inline int frame(const uint8_t *buf, Py_ssize_t n, Py_ssize_t off, Py_ssize_t *size)
{
    if (n - off < LOG_OVERHEAD)
        return 0;
    int32_t len = be32(buf + off + 8);
    if (len < V0_MIN)
        return -1;
    if (n - off < LOG_OVERHEAD + (Py_ssize_t)len || n - off < 17)
        return 0;
    if (buf[off + 16] != 2 || len < HEADER_SIZE - LOG_OVERHEAD)
        return -1;
    *size = LOG_OVERHEAD + (Py_ssize_t)len;
    return 1;
}

/* Whether the batch's records are the Python code's: transactional or control ones (the transaction
 * rules), compressed ones without the codecs. */
static inline int python_batch(const OffsetMapObject *m, int attrs)
{
    return (attrs & (ATTR_TRANSACTIONAL | ATTR_CONTROL)) || ((attrs & ATTR_CODEC) && m->decompress == NULL);
}

/* The records section of the batch at `h` (`size` bytes): 1 with it in *body / *blen (in *owner, a new
 * reference, when it was decompressed), 0 with no error set when the Python code must decide, -1 with an
 * error set. */
static int records_of(OffsetMapObject *m, const uint8_t *h, Py_ssize_t size, const uint8_t **body, Py_ssize_t *blen,
                      PyObject **owner)
{
    int codec = ((h[21] << 8) | h[22]) & ATTR_CODEC;
    *owner = NULL;
    *body = h + HEADER_SIZE;
    *blen = size - HEADER_SIZE;
    if (!codec)
        return 1;
    PyObject *res = call_codec(m->decompress, codec, h + HEADER_SIZE, size - HEADER_SIZE);
    if (res == NULL)
        return PyErr_Occurred() ? -1 : 0;
    *owner = res;
    *body = (const uint8_t *)PyBytes_AS_STRING(res);
    *blen = PyBytes_GET_SIZE(res);
    return 1;
}

/* map_chunk(chunk, off, start, end, budget) -> (off, status, bytes, records, last offset): `Cleaner.
 * _build_offset_map`'s loop over the batches of `chunk` from `off` (bytes and records counted as it counts
 * them; `last offset` is that of the last batch processed, -1 for none). Status: MORE (the rest of the
 * chunk holds no whole batch), PYTHON (the batch at `off` is the Python code's), BUDGET (`budget` bytes
 * were read: throttle, then call again), END (the batch at `off` starts at or after `end`), FULL (the map
 * filled in the batch at `off`: the map ends at latest_offset). */
static PyObject *OffsetMap_map_chunk(OffsetMapObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t off;
    long long start, end, budget, bytes = 0, records = 0, last_done = -1;
    if (!PyArg_ParseTuple(args, "y*nLLL", &view, &off, &start, &end, &budget))
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    const Py_ssize_t n = view.len;
    int status = ST_MORE;
    while (off < n) {
        Py_ssize_t size;
        int f = frame(buf, n, off, &size);
        if (f <= 0) {
            status = f < 0 ? ST_PYTHON : ST_MORE;
            break;
        }
        const uint8_t *h = buf + off;
        long long base = be64(h), last = base + be32(h + 23);
        if (last < start) {
            off += size;
            continue;
        }
        if (base >= end || bytes >= budget || python_batch(self, (h[21] << 8) | h[22])) {
            status = base >= end ? ST_END : bytes >= budget ? ST_BUDGET : ST_PYTHON;
            break;
        }
        const uint8_t *body;
        Py_ssize_t blen;
        PyObject *owner;
        int got = records_of(self, h, size, &body, &blen, &owner);
        if (got == 1) {
            long long mapped = 0;
            got = map_records(self, body, blen, be32(h + 57), base, start, &mapped);
            Py_XDECREF(owner);
            if (got >= 0) {
                bytes += size;
                records += mapped;
            }
            got = got == 1 ? 1 : got == 0 ? ST_FULL : got == -1 ? 0 : -1;
        }
        if (got < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
        if (got != 1) {
            status = got == 0 ? ST_PYTHON : ST_FULL;
            break;
        }
        if (last > self->latest_offset)
            self->latest_offset = last;
        last_done = last;
        off += size;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(niLLL)", off, status, bytes, records, last_done);
}

/* -- the copy pass -------------------------------------------------------------------------------------- */
/* The cleaned segment as filter_chunk writes it: the output bytes, and `_CleanedSegment.append`'s state
 * and index entries (last offset, position, max timestamp, its offset) for the batches written. */
typedef struct {
    uint8_t *buf;
    Py_ssize_t len, cap;
    PyObject *points;
    long long base, size, since_entry, max_ts, max_ts_off, interval;
} Dest;

/* A batch of the chunk: its header's fields by name. */
typedef struct {
    const uint8_t *h;
    Py_ssize_t size;
    int attrs;
    long long base, last, count, base_ts, max_ts, producer_id;
} Batch;

/* What filter_chunk's caller said of the round: the chunk ends the group (`tail`), the round's upper
 * bound, the time, the producers' last offsets. */
typedef struct {
    int tail;
    long long upper_bound, now;
    PyObject *producers;
} Round;

static Batch batch_at(const uint8_t *h, Py_ssize_t size)
{
    Batch b = {.h = h, .size = size, .attrs = (h[21] << 8) | h[22], .base = be64(h), .base_ts = be64(h + 27),
               .max_ts = be64(h + 35), .producer_id = be64(h + 43), .count = be32(h + 57)};
    b.last = b.base + be32(h + 23);
    return b;
}

static int dest_room(Dest *d, Py_ssize_t more)
{
    if (d->len + more <= d->cap)
        return 0;
    Py_ssize_t cap = 2 * d->cap > d->len + more ? 2 * d->cap : d->len + more;
    uint8_t *grown = (uint8_t *)realloc(d->buf, (size_t)cap);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    d->buf = grown;
    d->cap = cap;
    return 0;
}

/* `_CleanedSegment.append`'s index rule for a batch of `written` bytes just put at the end of the output:
 * 0, or -1 with an error set. */
static int dest_appended(Dest *d, long long last, long long batch_max_ts, Py_ssize_t written)
{
    if (batch_max_ts > d->max_ts) {
        d->max_ts = batch_max_ts;
        d->max_ts_off = last; /* KAFKA-16310: the batch's last offset */
    }
    if (d->since_entry > d->interval) {
        PyObject *pt = Py_BuildValue("(LLLL)", last, d->size, d->max_ts, d->max_ts_off);
        if (pt == NULL || PyList_Append(d->points, pt) < 0) {
            Py_XDECREF(pt);
            return -1;
        }
        Py_DECREF(pt);
        d->since_entry = 0;
    }
    d->size += written;
    d->since_entry += written;
    return 0;
}

/* Whether an emptied batch must stay as an empty batch (`_filter_batch`'s retention): the round's last
 * batch, the group's last batch, or a producer's last batch. 1 or 0; -1 when the Python code must decide
 * (what follows in the chunk is malformed); -2 with an error set. */
static int retains_empty(const Batch *b, const Round *r, const uint8_t *buf, Py_ssize_t n, Py_ssize_t next)
{
    if (b->last + 1 == r->upper_bound)
        return 1;
    if (r->tail) { /* the group's last batch when no whole batch follows (iter_batches would yield none) */
        if (n - next < LOG_OVERHEAD)
            return 1;
        int32_t len = be32(buf + next + 8);
        if (len < V0_MIN)
            return -1;
        if (n - next < LOG_OVERHEAD + (Py_ssize_t)len || n - next < 17)
            return 1;
        uint8_t magic = buf[next + 16];
        if (magic > 2 || (magic == 2 && len < HEADER_SIZE - LOG_OVERHEAD))
            return -1;
    }
    if (b->producer_id < 0)
        return 0;
    PyObject *key = PyLong_FromLongLong(b->producer_id);
    if (key == NULL)
        return -2;
    PyObject *v = PyDict_GetItemWithError(r->producers, key);
    Py_DECREF(key);
    if (v == NULL)
        return PyErr_Occurred() ? -2 : 0;
    if (v == Py_None)
        return 0;
    long long plast = PyLong_AsLongLong(v);
    if (plast == -1 && PyErr_Occurred())
        return -2;
    return plast == b->last;
}

/* The judgement of each record of a batch's records section (`_filter_by_spans`): the kept ones' spans in
 * m->spans, their number, whether a tombstone stays, the largest timestamp delta kept. 1, 0 for a body the
 * Python walk rejects, -1 with an error set. */
typedef struct {
    long long nkept;
    int tombstones;
    int64_t max_delta;
} Kept;

static int judge_records(OffsetMapObject *m, const uint8_t *body, Py_ssize_t blen, const Batch *b,
                         int retain_deletes, Kept *k)
{
    if (b->count < 0 || b->count > blen)
        return 0;
    if (b->count > m->spans_cap) {
        Py_ssize_t *grown = (Py_ssize_t *)realloc(m->spans, sizeof(Py_ssize_t) * 2 * (size_t)b->count);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        m->spans = grown;
        m->spans_cap = b->count;
    }
    *k = (Kept){0};
    Py_ssize_t pos = 0;
    for (long long i = 0; i < b->count; i++) {
        RecordHead r;
        if (!record_head(body, blen, pos, &r) || r.ts_status != 1)
            return 0;
        pos = r.end;
        if (!keeps(m, body, &r, b->base + r.offset_delta, retain_deletes))
            continue;
        m->spans[2 * k->nkept] = r.start;
        m->spans[2 * k->nkept + 1] = r.end;
        if (k->nkept == 0 || r.ts_delta > k->max_delta)
            k->max_delta = r.ts_delta;
        k->nkept++;
        k->tombstones |= r.value_len < 0;
    }
    return pos == blen;
}

/* `splice_batch`: the batch's header with the new length, max timestamp and count, then the kept records
 * (recompressed with the batch's codec through the records layer's compress), at the end of the output.
 * 1, 0 when the Python code must decide (the codec raised), -1 with an error set. */
static int write_splice(OffsetMapObject *m, Dest *d, const Batch *b, const uint8_t *body, const Kept *k)
{
    Py_ssize_t kept_len = 0;
    for (long long i = 0; i < k->nkept; i++)
        kept_len += m->spans[2 * i + 1] - m->spans[2 * i];
    PyObject *records = PyBytes_FromStringAndSize(NULL, kept_len);
    if (records == NULL)
        return -1;
    char *p = PyBytes_AS_STRING(records);
    for (long long i = 0; i < k->nkept; i++) {
        Py_ssize_t s = m->spans[2 * i], e = m->spans[2 * i + 1];
        memcpy(p, body + s, (size_t)(e - s));
        p += e - s;
    }
    int codec = b->attrs & ATTR_CODEC;
    if (codec) {
        PyObject *packed = call_codec(m->compress, codec, (const uint8_t *)PyBytes_AS_STRING(records), kept_len);
        Py_DECREF(records);
        if (packed == NULL)
            return PyErr_Occurred() ? -1 : 0;
        records = packed;
    }
    Py_ssize_t len = HEADER_SIZE + PyBytes_GET_SIZE(records);
    if (dest_room(d, len) < 0) {
        Py_DECREF(records);
        return -1;
    }
    uint8_t *o = d->buf + d->len;
    memcpy(o, b->h, HEADER_SIZE);
    memcpy(o + HEADER_SIZE, PyBytes_AS_STRING(records), (size_t)(len - HEADER_SIZE));
    Py_DECREF(records);
    long long max_ts = (b->attrs & ATTR_LOG_APPEND_TIME) ? b->max_ts : b->base_ts + k->max_delta;
    put_be32(o + 8, (uint32_t)(len - LOG_OVERHEAD));
    put_be64(o + 35, (uint64_t)max_ts);
    put_be32(o + 57, (uint32_t)k->nkept);
    put_be32(o + 17, crc32c(o + 21, (size_t)(len - 21)));
    d->len += len;
    return dest_appended(d, b->last, max_ts, len) < 0 ? -1 : 1;
}

/* The batch as it was, at the end of the output: 1, or -1 with an error set. */
static int write_whole(Dest *d, const Batch *b)
{
    if (dest_room(d, b->size) < 0)
        return -1;
    memcpy(d->buf + d->len, b->h, (size_t)b->size);
    d->len += b->size;
    return dest_appended(d, b->last, b->max_ts, b->size) < 0 ? -1 : 1;
}

/* One batch through `_filter_batch` (the common case): 1 done (written or dropped; the records it kept
 * added to *kept), 0 the Python code's, -1 with an error set. */
static int filter_batch(OffsetMapObject *m, Dest *d, const Batch *b, const Round *r, const uint8_t *buf,
                        Py_ssize_t n, Py_ssize_t off, long long *kept)
{
    if (python_batch(m, b->attrs) || b->last - d->base < 0 || b->last - d->base > 0x7FFFFFFF)
        return 0; /* the transaction rules, or an offset the Python append refuses */
    int retain_empty = retains_empty(b, r, buf, n, off + b->size);
    if (retain_empty < 0)
        return retain_empty == -1 ? 0 : -1;
    const uint8_t *body;
    Py_ssize_t blen;
    PyObject *owner;
    int got = records_of(m, b->h, b->size, &body, &blen, &owner);
    if (got != 1)
        return got;
    int horizon = (b->attrs & ATTR_DELETE_HORIZON) != 0; /* then the base timestamp is the horizon */
    Kept k;
    got = judge_records(m, body, blen, b, !horizon || r->now < b->base_ts, &k);
    if (got == 1 && ((k.tombstones && !horizon) || (k.nkept == 0 && retain_empty)))
        got = 0; /* a delete horizon to set, an empty batch to keep: the Python code builds those */
    if (got == 1 && k.nkept > 0) /* none kept: the batch goes (an empty one too: it is no longer the last) */
        got = k.nkept == b->count ? write_whole(d, b) : write_splice(m, d, b, body, &k);
    Py_XDECREF(owner);
    if (got == 1)
        *kept += k.nkept;
    return got;
}

/* filter_chunk(chunk, off, tail, upper_bound, now, producers, dest_base, dest_size, since_entry, max_ts,
 * max_ts_offset, interval, budget) -> (off, status, bytes read, output, records read, records kept, last
 * offset, index points, dest size, since_entry, max_ts, max_ts_offset): `Cleaner._clean_group`'s loop with
 * `_filter_batch` and `_CleanedSegment.append` over the batches of `chunk` from `off`. `tail`: the chunk
 * ends where the group's last segment ends. `producers`: producer id -> the last offset of its last batch
 * (None for none). Status MORE, PYTHON or BUDGET as map_chunk. */
static PyObject *OffsetMap_filter_chunk(OffsetMapObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t off;
    Round round;
    Dest d = {0};
    long long budget, bytes = 0, rec_read = 0, rec_kept = 0, last_done = -1;
    if (!PyArg_ParseTuple(args, "y*npLLO!LLLLLLL", &view, &off, &round.tail, &round.upper_bound, &round.now,
                          &PyDict_Type, &round.producers, &d.base, &d.size, &d.since_entry, &d.max_ts,
                          &d.max_ts_off, &d.interval, &budget))
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    const Py_ssize_t n = view.len;
    int status = ST_MORE;
    d.points = PyList_New(0);
    if (d.points == NULL || dest_room(&d, n - off > 0 ? n - off : 1) < 0)
        goto error;
    while (off < n) {
        Py_ssize_t size;
        int f = frame(buf, n, off, &size);
        if (f <= 0 || bytes >= budget) {
            status = f < 0 ? ST_PYTHON : f == 0 ? ST_MORE : ST_BUDGET;
            break;
        }
        Batch b = batch_at(buf + off, size);
        int got = filter_batch(self, &d, &b, &round, buf, n, off, &rec_kept);
        if (got < 0)
            goto error;
        if (got == 0) {
            status = ST_PYTHON;
            break;
        }
        rec_read += b.count;
        bytes += size;
        last_done = b.last;
        off += size;
    }
    PyObject *out = PyBytes_FromStringAndSize((const char *)d.buf, d.len);
    if (out == NULL)
        goto error;
    free(d.buf);
    PyBuffer_Release(&view);
    return Py_BuildValue("(niLNLLLNLLLL)", off, status, bytes, out, rec_read, rec_kept, last_done, d.points, d.size,
                         d.since_entry, d.max_ts, d.max_ts_off);
error:
    free(d.buf);
    Py_XDECREF(d.points);
    PyBuffer_Release(&view);
    return NULL;
}

/* kept_spans(body, count, base, retain_deletes) -> (records, kept spans, a tombstone kept) for one
 * decompressed records section (`_filter_by_spans` for a batch the Python code handles); the spans are
 * record_spans' tuples. None for a body the Python walk rejects. */
static PyObject *OffsetMap_kept_spans(OffsetMapObject *self, PyObject *args)
{
    Py_buffer view;
    long long count, base;
    int retain_deletes;
    if (!PyArg_ParseTuple(args, "y*LLp", &view, &count, &base, &retain_deletes))
        return NULL;
    const uint8_t *body = (const uint8_t *)view.buf;
    const Py_ssize_t n = view.len;
    PyObject *kept = NULL;
    int tombstones = 0;
    Py_ssize_t pos = 0;
    if (count < 0 || count > n)
        goto reject;
    if ((kept = PyList_New(0)) == NULL)
        goto error;
    for (long long i = 0; i < count; i++) {
        RecordHead r;
        if (!record_head(body, n, pos, &r) || r.ts_status != 1)
            goto reject;
        pos = r.end;
        if (!keeps(self, body, &r, base + r.offset_delta, retain_deletes))
            continue;
        PyObject *span = Py_BuildValue("(LLnnnLL)", (long long)r.offset_delta, (long long)r.ts_delta, r.start, r.end,
                                       r.key_start, (long long)r.key_len, (long long)r.value_len);
        if (span == NULL || PyList_Append(kept, span) < 0) {
            Py_XDECREF(span);
            goto error;
        }
        Py_DECREF(span);
        tombstones |= r.value_len < 0;
    }
    if (pos != n)
        goto reject;
    PyBuffer_Release(&view);
    return Py_BuildValue("(LNO)", count, kept, tombstones ? Py_True : Py_False);
reject:
    Py_XDECREF(kept);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    Py_XDECREF(kept);
    PyBuffer_Release(&view);
    return NULL;
}

/* -- the type ------------------------------------------------------------------------------------------- */
static Py_ssize_t OffsetMap_len(OffsetMapObject *self)
{
    return self->count;
}

static PyObject *get_latest(OffsetMapObject *self, void *c)
{
    return PyLong_FromLongLong(self->latest_offset);
}

static int set_latest(OffsetMapObject *self, PyObject *v, void *c)
{
    long long x = v == NULL ? -1 : PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    self->latest_offset = x;
    return 0;
}

static PyObject *get_full(OffsetMapObject *self, void *c)
{
    return PyBool_FromLong(self->count >= self->max_entries);
}

static PyObject *get_utilization(OffsetMapObject *self, void *c)
{
    return PyFloat_FromDouble(self->slots ? (double)self->count / (double)self->slots : 0.0);
}

static PyMemberDef members[] = {
    {"peak_bytes", T_LONGLONG, offsetof(OffsetMapObject, peak_bytes), READONLY, "the most memory the table has held"},
    {"slots", T_PYSSIZET, offsetof(OffsetMapObject, slots), READONLY, "slots the memory bound allows"},
    {"max_entries", T_PYSSIZET, offsetof(OffsetMapObject, max_entries), READONLY, "entries before the map is full"},
    {NULL},
};

static PyGetSetDef getset[] = {
    {"latest_offset", (getter)get_latest, (setter)set_latest, "the last offset put, or advanced past", NULL},
    {"full", (getter)get_full, NULL, "whether the map holds its maximum of entries", NULL},
    {"utilization", (getter)get_utilization, NULL, "entries per slot of the bound", NULL},
    {NULL},
};

static PyMethodDef map_methods[] = {
    {"put", (PyCFunction)OffsetMap_put, METH_VARARGS, "put(key, offset)"},
    {"get", (PyCFunction)OffsetMap_get, METH_VARARGS, "get(key) -> the key's offset, -1 for none"},
    {"clear", (PyCFunction)OffsetMap_clear, METH_NOARGS, "empty the map (its peak is kept)"},
    {"set_codecs", (PyCFunction)OffsetMap_set_codecs, METH_VARARGS,
     "set_codecs(decompress, compress): map_chunk and filter_chunk take compressed batches too (None, None: not)"},
    {"map_body", (PyCFunction)OffsetMap_map_body, METH_VARARGS, NULL},
    {"map_chunk", (PyCFunction)OffsetMap_map_chunk, METH_VARARGS, NULL},
    {"filter_chunk", (PyCFunction)OffsetMap_filter_chunk, METH_VARARGS, NULL},
    {"kept_spans", (PyCFunction)OffsetMap_kept_spans, METH_VARARGS, NULL},
    {NULL},
};

static PySequenceMethods map_sequence = {.sq_length = (lenfunc)OffsetMap_len};

static PyTypeObject OffsetMapType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chronolog.records._clean.OffsetMap",
    .tp_basicsize = sizeof(OffsetMapObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Kafka's SkimpyOffsetMap: 128-bit key hash -> last offset, bounded by memory / 24 slots.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)OffsetMap_init,
    .tp_dealloc = (destructor)OffsetMap_dealloc,
    .tp_methods = map_methods,
    .tp_members = members,
    .tp_getset = getset,
    .tp_as_sequence = &map_sequence,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_clean", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__clean(void)
{
    crc_table_init();
#ifdef HAVE_SSE42_CRC
    __builtin_cpu_init();
    use_sse42 = __builtin_cpu_supports("sse4.2");
#endif
    if (PyType_Ready(&OffsetMapType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&OffsetMapType);
    if (PyModule_AddObject(m, "OffsetMap", (PyObject *)&OffsetMapType) < 0) {
        Py_DECREF(&OffsetMapType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "MORE", ST_MORE);
    PyModule_AddIntConstant(m, "PYTHON", ST_PYTHON);
    PyModule_AddIntConstant(m, "BUDGET", ST_BUDGET);
    PyModule_AddIntConstant(m, "END", ST_END);
    PyModule_AddIntConstant(m, "FULL", ST_FULL);
    return m;
}
