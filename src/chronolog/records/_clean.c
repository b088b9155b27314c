/* The log cleaner's per-record work in C (storage.cleaner; Kafka's `Cleaner.buildOffsetMap` and
 * `cleanInto` over `SkimpyOffsetMap`).
 *
 * OffsetMap is Kafka's SkimpyOffsetMap: 24 bytes a slot (a 128-bit hash of the key and the key's last
 * offset), at most `log.cleaner.dedupe.buffer.size` / 24 slots, filled to the load factor. The hash is
 * MurmurHash3's x64 128-bit construction seeded at random per map instead of Kafka's MD5: as many bits
 * (two keys collide with about the probability MD5 gives, ~n^2 / 2^129; neither resists a producer crafting
 * collisions, MD5 no more than this) at a fraction of MD5's cost on short keys. The table is open
 * addressing with linear probing; it starts small and doubles while it is half full, up to the bound, so
 * a small log does not touch 128 MiB. The pure-Python map (storage.cleaner.OffsetMap) keys a dict by MD5:
 * without a collision both hold the same offsets, so both cleanings write the same bytes
 * (tests/storage/test_cleaner_native.py).
 *
 * map_chunk and filter_chunk walk a buffer of a segment's batches and do, batch after batch, what the
 * Python cleaner does for the common batch: v2, not transactional, not control; a compressed one too once
 * `set_codecs` gave the map the records layer's decompress and compress (called per batch: the codecs stay
 * in one place, with their limits and errors, and the per-batch Python work around them goes). They stop
 * at any other batch (and at one the Python code must decide: a tombstone that needs its delete horizon, a
 * batch that must stay as an empty batch, anything malformed) and return its position: the Python code
 * handles it and calls again after it. What they return is exactly what the Python loop would have
 * computed up to there.
 *
 * map_chunk keeps, for each compressed batch it maps whole, what filter_chunk needs to judge its records
 * (the record cache, bounded with the table by `log.cleaner.dedupe.buffer.size`), so that only a batch that
 * keeps some of its records but not all is decompressed twice; zstd frames go to contexts of the map's own
 * (set_codecs' last arguments) rather than through the records layer's Python functions.
 */
#include "_recordwalk.h"
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <structmember.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "_crc32c.h"

/* -- zstd decompression through the system's libzstd ------------------------------------------------------
 * The frames of the map pass (and the copy's partly kept batches) are decompressed here without a Python
 * call per frame, and without the GIL (the map pass spreads them over two threads). No zstd headers are
 * needed to build: the runtime library is opened at module init (`libzstd.so.1`, present wherever apt is)
 * and the five functions used are declared here as zstd's stable API declares them. A decompressed frame
 * does not depend on the library's version (RFC 8878), so the records are those python-zstandard gives.
 * The copy's partly kept batches are recompressed here too (`run_jobs`, on two threads without the GIL),
 * at level 3 with the frame parameters python-zstandard's ZstdCompressor(level=3).compress uses (content
 * size written, no checksum, no dictionary). Another zstd version may write other bytes for the same
 * records (libzstd 1.5.4 and python-zstandard's bundled 1.5.7 differ on about half of 4 KB bodies, on
 * few below 1 KB): equally valid frames, but the Python path must write the same ones, so it recompresses
 * through this library too (`zstd_compress`, storage.cleaner.recompress), and the map compresses here
 * only while its own zstd compressor gives this library's bytes (`probe_compress`). Without the library
 * (or with CHRONOLOG_CLEANER_NO_LIBZSTD set at import) every frame goes through the Python contexts. */
typedef struct ZSTD_DCtx_s ZSTD_DCtx;
typedef struct ZSTD_CCtx_s ZSTD_CCtx;
static struct {
    ZSTD_DCtx *(*createDCtx)(void);
    size_t (*freeDCtx)(ZSTD_DCtx *);
    size_t (*decompressDCtx)(ZSTD_DCtx *, void *, size_t, const void *, size_t);
    unsigned (*isError)(size_t);
    unsigned (*versionNumber)(void);
    ZSTD_CCtx *(*createCCtx)(void);
    size_t (*freeCCtx)(ZSTD_CCtx *);
    size_t (*compressCCtx)(ZSTD_CCtx *, void *, size_t, const void *, size_t, int);
    size_t (*compressBound)(size_t);
} zstd;
static int zstd_loaded;
static int zstd_compress_loaded; /* the four compression functions too (confirmed by set_codecs' probe) */
#define ZSTD_LEVEL 3             /* records.compression's level, python-zstandard's and Kafka's default */

static void load_libzstd(void)
{
    const char *off = getenv("CHRONOLOG_CLEANER_NO_LIBZSTD");
    if (off != NULL && off[0] != '\0')
        return;
    void *h = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        return;
    *(void **)&zstd.createDCtx = dlsym(h, "ZSTD_createDCtx");
    *(void **)&zstd.freeDCtx = dlsym(h, "ZSTD_freeDCtx");
    *(void **)&zstd.decompressDCtx = dlsym(h, "ZSTD_decompressDCtx");
    *(void **)&zstd.isError = dlsym(h, "ZSTD_isError");
    *(void **)&zstd.versionNumber = dlsym(h, "ZSTD_versionNumber");
    if (!zstd.createDCtx || !zstd.freeDCtx || !zstd.decompressDCtx || !zstd.isError || !zstd.versionNumber ||
        zstd.versionNumber() < 10400) {
        dlclose(h); /* an unknown library: the Python path */
        return;
    }
    zstd_loaded = 1; /* the handle stays open for the process's life */
    *(void **)&zstd.createCCtx = dlsym(h, "ZSTD_createCCtx");
    *(void **)&zstd.freeCCtx = dlsym(h, "ZSTD_freeCCtx");
    *(void **)&zstd.compressCCtx = dlsym(h, "ZSTD_compressCCtx");
    *(void **)&zstd.compressBound = dlsym(h, "ZSTD_compressBound");
    zstd_compress_loaded = zstd.createCCtx && zstd.freeCCtx && zstd.compressCCtx && zstd.compressBound;
}

/* One thread's decompression context and output buffer. */
typedef struct {
    ZSTD_DCtx *dctx;
    uint8_t *buf;
    size_t cap;
} Dec;

static void dec_free(Dec *d)
{
    if (d->dctx != NULL)
        zstd.freeDCtx(d->dctx);
    free(d->buf);
    d->dctx = NULL;
    d->buf = NULL;
    d->cap = 0;
}

/* Decompresses `src`, one zstd frame stating its content size `size`, into d->buf: 1 when it gave exactly
 * `size` bytes, 0 otherwise (no context or memory, or the library refused it: the caller then asks the
 * Python path, which decides as before). No Python API: called without the GIL. */
static int dec_frame(Dec *d, const uint8_t *src, size_t len, size_t size)
{
    if (d->dctx == NULL && (d->dctx = zstd.createDCtx()) == NULL)
        return 0;
    if (size > d->cap || d->buf == NULL) {
        size_t cap = size > 4096 ? size : 4096;
        uint8_t *grown = (uint8_t *)realloc(d->buf, cap);
        if (grown == NULL)
            return 0;
        d->buf = grown;
        d->cap = cap;
    }
    size_t got = zstd.decompressDCtx(d->dctx, d->buf, size, src, len);
    return !zstd.isError(got) && got == size;
}

/* One thread's compression context and buffer of kept records. */
typedef struct {
    ZSTD_CCtx *cctx;
    uint8_t *plain;
    size_t cap;
} Enc;

static void enc_free(Enc *e)
{
    if (e->cctx != NULL)
        zstd.freeCCtx(e->cctx);
    free(e->plain);
    e->cctx = NULL;
    e->plain = NULL;
    e->cap = 0;
}

/* `len` bytes of `src` compressed at ZSTD_LEVEL into a new malloc'd buffer: its size, or 0 (no context
 * or memory, or the library refused: the caller then takes the Python path). No Python API. */
static size_t enc_compress(Enc *e, const uint8_t *src, size_t len, uint8_t **out)
{
    *out = NULL;
    if (e->cctx == NULL && (e->cctx = zstd.createCCtx()) == NULL)
        return 0;
    size_t bound = zstd.compressBound(len);
    uint8_t *dst = (uint8_t *)malloc(bound > 0 ? bound : 1);
    if (dst == NULL)
        return 0;
    size_t got = zstd.compressCCtx(e->cctx, dst, bound, src, len, ZSTD_LEVEL);
    if (zstd.isError(got) || got == 0) {
        free(dst);
        return 0;
    }
    *out = dst;
    return got;
}

/* -- big-endian fields of a batch header ---------------------------------------------------------------- */

static inline void put_be64(uint8_t *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)u;
        u >>= 8;
    }
}

static inline void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

#define LOG_OVERHEAD 12
#define HEADER_SIZE 61
#define V0_MIN 14 /* the smallest legal size of any message set entry (records.legacy.V0_MIN) */
#define ATTR_CODEC 0x07
#define ATTR_LOG_APPEND_TIME 0x08
#define ATTR_TRANSACTIONAL 0x10
#define ATTR_CONTROL 0x20
#define ATTR_DELETE_HORIZON 0x40

/* -- the hash ------------------------------------------------------------------------------------------- */
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

#define INITIAL_SLOTS 4096

typedef struct {
    PyObject_HEAD
    Slot *table;
    Py_ssize_t cap, slots, max_entries, count;
    long long latest_offset, peak_bytes;
    uint64_t seed;
    PyObject *decompress, *compress; /* records.compression's, or NULL: compressed batches are Python's */
    PyObject *zstd_decompress;        /* a ZstdDecompressor's bound `decompress` of this map's own, or NULL */
    PyObject *zstd_compress;          /* a ZstdCompressor's bound `compress` of this map's own, or NULL */
    long long max_size;               /* decompress's limit (records.compression.DEFAULT_MAX_DECOMPRESSED) */
    long long memory;                 /* log.cleaner.dedupe.buffer.size: the table and the cache together */
    /* The record cache: for each compressed batch map_chunk decompressed and mapped whole, in offset order,
     * its records' key slots in the table, offset deltas and null key / null value flags (CachedRec, 8 bytes a record),
     * so that filter_chunk judges its records without decompressing it again and decompresses only a batch
     * that keeps some of its records but not all; within what the table leaves of `memory` (its arrays
     * counted as allocated: cache_bytes). */
    struct SumEntry *sums;
    Py_ssize_t nsums, sums_cap, sums_first; /* entries before sums_first were passed by the copy */
    struct CachedRec *recs;                 /* the entries' records, one after the other */
    struct RecSum *scratch;                 /* one batch's records, hashed (map_records) */
    Py_ssize_t nrecs, recs_cap, scratch_cap;
    size_t recs_reserved, sums_reserved;    /* the address space reserved for each array (region_size) */
    long long cache_bytes, cache_peak, total_peak, cache_hits, cache_decided;
    /* zstd through libzstd (`dec_frame`): this map's switch (on where the library loaded), a context per
     * thread (the caller's, the helper's), and the frames it decompressed */
    int direct_zstd;
    Dec dec[2];
    long long direct_frames, helper_batches, helper_posts, carried;
    /* filter_chunk's recompressions through libzstd (`run_jobs`): on where set_codecs' probe found the
     * library's bytes python-zstandard's; a context and buffer per thread; the chunk's partly kept zstd
     * batches (jobs, their records' keep flags), and the pieces of its output in order */
    int direct_compress;
    Enc enc[2];
    struct Job *jobs;
    uint8_t *keepv;
    struct Piece *pieces;
    Py_ssize_t jobs_cap, keepv_cap, pieces_cap;
    long long direct_compressed;
    /* filter_chunk's jobs as a queue the helper takes from while the loop still adds to it: the next job
     * to claim, the jobs ready, no more coming, stop claiming, the helper asleep for more */
    Py_ssize_t jq_next, jq_ready;
    int jq_closed, jq_abort, jq_waiting;
    /* map_chunk's window: the next batches of the chunk, summarized (decompressed, walked, keys hashed)
     * by the caller's thread and the helper at once, without the GIL, before they are put in order */
    struct Window *win[2]; /* the one being put, and the next one (summarized meanwhile by the helper) */
    /* a window of the next chunk (map_chunk's `next`), posted to the helper when the chunk's loop ended: it
     * is summarized while the caller reads the chunk after that, and the next map_chunk call on that chunk
     * starts with it; the chunk held (carry_obj, carry_view) until then */
    struct Window *carry;
    PyObject *carry_obj;
    Py_buffer carry_view;
    /* each slot's offset alone (-1: empty), for filter_chunk's judgements: a third of the table's bytes, so
     * more of it stays in the cache than of the table; made again once the table changed (version) */
    int64_t *latest_by_slot;
    Py_ssize_t latest_cap;
    long long version, latest_version;
    struct Helper *helper;
} OffsetMapObject;

typedef struct RecSum {
    uint64_t h1, h2; /* the key's hash (0, 0 for a record without a key) */
    uint64_t meta;   /* the offset delta (32 bits), then REC_NULL_KEY and REC_NULL_VALUE */
} RecSum;

#define REC_NULL_KEY (1ULL << 32)
#define REC_NULL_VALUE (1ULL << 33)

/* A record of the record cache: its key's slot in the table instead of the key's hash (the slot holds that
 * key's entry for the rest of the map: entries are never removed, and `map_alloc` renumbers the cache's
 * slots when the table grows), so that the copy reads the key's offset without probing, in 8 bytes a
 * record instead of 24 (fewer fresh pages for the map pass to fault in). */
typedef struct CachedRec {
    uint32_t slot; /* 0 for a record without a key */
    uint32_t meta; /* the offset delta (30 bits), then CR_NULL_VALUE and CR_NULL_KEY */
} CachedRec;

#define CR_DELTA 0x3FFFFFFFu
#define CR_NULL_VALUE (1u << 30)
#define CR_NULL_KEY (1u << 31)

typedef struct SumEntry {
    long long base;  /* the batch's base offset */
    Py_ssize_t size; /* its size in the log */
    uint32_t crc;    /* its CRC-32C field: with the two above, the batch the records were read from */
    Py_ssize_t first, count; /* its records in `recs` */
} SumEntry;

static inline long long table_bytes(const OffsetMapObject *m)
{
    return (long long)m->cap * (long long)sizeof(Slot);
}

static void note_total(OffsetMapObject *m)
{
    if (m->cache_bytes > m->cache_peak)
        m->cache_peak = m->cache_bytes;
    if (table_bytes(m) + m->cache_bytes > m->total_peak)
        m->total_peak = table_bytes(m) + m->cache_bytes;
}

/* The cache's memory: what its two arrays hold allocated (their unused tails too). */
static inline long long cache_alloc(const OffsetMapObject *m)
{
    return (long long)m->recs_cap * (long long)sizeof(CachedRec) + (long long)m->sums_cap * (long long)sizeof(SumEntry);
}

/* The cache's two arrays live each in an address range reserved once per map for the most the cache can
 * hold (`memory`, rounded up to a page) and touched as they grow: growing one moves nothing (a realloc of a
 * few MB copied the array and faulted its new pages in twice, most of the map pass's time on the calling
 * thread in the bench's zstd log), and what an array gives back (a shrink, a clear) is returned to the
 * system at once (MADV_DONTNEED), so the memory it holds stays its capacity, as before. */
static size_t page_round(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) / page * page;
}

static size_t region_size(const OffsetMapObject *m)
{
    return page_round(m->memory > 0 ? (size_t)m->memory : 1);
}

/* Ranges a cleared map gave up, kept for the next map of the same size (the next cleaning's, in a broker
 * that cleans again and again): their pages are given to the kernel to take back when it needs memory
 * (MADV_FREE), and until it does the next cleaning writes into them without faulting and zeroing them
 * again (about 0.9 ms of the calling thread's time for the bench's small zstd log). At most STASH_RANGES,
 * each with at most STASH_HELD bytes in use when given up (a larger one is unmapped, as before); used with
 * the GIL held. */
#define STASH_RANGES 2
#define STASH_HELD (16u << 20)
static struct {
    void *base;
    size_t reserved;
} stash[STASH_RANGES];

/* Sets the array at `*base` (reserved on first use) to `bytes` of capacity from `old` bytes: 0, or -1 (no
 * address space, or more than was reserved). */
static int region_resize(void **base, size_t *reserved, size_t size, size_t old, size_t bytes)
{
    if (*base == NULL) {
        if (bytes == 0)
            return 0;
        for (int i = 0; i < STASH_RANGES; i++) {
            if (stash[i].base != NULL && stash[i].reserved == size) {
                *base = stash[i].base;
                *reserved = size;
                stash[i].base = NULL;
                break;
            }
        }
    }
    if (*base == NULL) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            return -1;
#ifdef MADV_HUGEPAGE
        madvise(p, size, MADV_HUGEPAGE);
#endif
        *base = p;
        *reserved = size;
    }
    if (bytes > *reserved)
        return -1;
    size_t keep = page_round(bytes), held = page_round(old);
    if (held > keep)
        madvise((uint8_t *)*base + keep, held - keep, MADV_DONTNEED);
    return 0;
}

/* Gives up the array at `*base`, `held` bytes of it in use: to the stash, or unmapped. */
static void region_free(void **base, size_t *reserved, size_t held)
{
    if (*base != NULL) {
        int kept = 0;
#ifdef MADV_FREE
        for (int i = 0; i < STASH_RANGES && !kept && held <= STASH_HELD; i++) {
            if (stash[i].base == NULL && madvise(*base, page_round(held > 0 ? held : 1), MADV_FREE) == 0) {
                stash[i].base = *base;
                stash[i].reserved = *reserved;
                kept = 1;
            }
        }
#endif
        if (!kept)
            munmap(*base, *reserved);
    }
    *base = NULL;
    *reserved = 0;
}

/* Both arrays resized to `recs_cap` and `sums_cap` (at least what they hold): 0, or -1 (no memory). */
static int sums_resize(OffsetMapObject *m, Py_ssize_t recs_cap, Py_ssize_t sums_cap)
{
    if (recs_cap != m->recs_cap) {
        if (region_resize((void **)&m->recs, &m->recs_reserved, region_size(m),
                          sizeof(CachedRec) * (size_t)m->recs_cap, sizeof(CachedRec) * (size_t)recs_cap) < 0)
            goto failed;
        m->recs_cap = recs_cap;
    }
    if (sums_cap != m->sums_cap) {
        if (region_resize((void **)&m->sums, &m->sums_reserved, region_size(m),
                          sizeof(SumEntry) * (size_t)m->sums_cap, sizeof(SumEntry) * (size_t)sums_cap) < 0)
            goto failed;
        m->sums_cap = sums_cap;
    }
    m->cache_bytes = cache_alloc(m);
    return 0;
failed:
    m->cache_bytes = cache_alloc(m);
    return -1;
}

/* Drops the cache's last entries until the table and the cache fit in `memory` (the table grew), and gives
 * back the arrays' unused tails. */
static void sums_fit(OffsetMapObject *m)
{
    if (table_bytes(m) + m->cache_bytes <= m->memory)
        return;
    while (m->nsums > m->sums_first &&
           table_bytes(m) + (long long)m->nrecs * (long long)sizeof(CachedRec) +
                   (long long)m->nsums * (long long)sizeof(SumEntry) > m->memory) {
        m->nrecs = m->sums[--m->nsums].first;
    }
    if (sums_resize(m, m->nrecs, m->nsums) < 0 || table_bytes(m) + m->cache_bytes > m->memory) {
        /* the allocator refused to shrink: drop the whole cache */
        m->nsums = m->sums_first = m->nrecs = 0;
        sums_resize(m, 0, 0);
    }
}

static void sums_clear(OffsetMapObject *m)
{
    region_free((void **)&m->sums, &m->sums_reserved, sizeof(SumEntry) * (size_t)m->sums_cap);
    region_free((void **)&m->recs, &m->recs_reserved, sizeof(CachedRec) * (size_t)m->recs_cap);
    free(m->scratch);
    m->scratch = NULL;
    m->nsums = m->sums_cap = m->sums_first = m->nrecs = m->recs_cap = m->scratch_cap = 0;
    m->cache_bytes = 0;
}

/* Room for `count` records in the scratch buffer: 0, or -1 (no memory: the batch goes uncached). */
static int scratch_room(OffsetMapObject *m, long long count)
{
    if (count <= m->scratch_cap)
        return 0;
    RecSum *grown = (RecSum *)realloc(m->scratch, sizeof(RecSum) * (size_t)count);
    if (grown == NULL)
        return -1;
    m->scratch = grown;
    m->scratch_cap = (Py_ssize_t)count;
    return 0;
}

static inline Py_ssize_t find_slot(const OffsetMapObject *m, uint64_t h1, uint64_t h2);

#define NO_SLOT UINT32_MAX

/* Keeps the `count` records at `from` (the scratch buffer, or the window's) as those of the batch at `h`, when they fit beside the
 * table (the arrays counted as allocated) and each keyed record's key is in the map (one before `start`
 * whose key is not would be judged by a later put of it: not kept); map_chunk's batches come in offset order. */
static void sums_keep(OffsetMapObject *m, const uint8_t *h, Py_ssize_t size, const RecSum *from, Py_ssize_t count,
                      const uint32_t *slots)
{
    long long base = be64(h);
    if (m->nsums > 0 && m->sums[m->nsums - 1].base >= base)
        return;
    if (m->cap > (Py_ssize_t)UINT32_MAX)
        return;
    long long room = m->memory - table_bytes(m);
    Py_ssize_t recs_need = m->nrecs + count, sums_need = m->nsums + 1;
    Py_ssize_t recs_cap = m->recs_cap, sums_cap = m->sums_cap;
    if (recs_need > recs_cap) /* doubling, or as much as is needed where doubling does not fit */
        recs_cap = recs_cap * 2 > recs_need ? recs_cap * 2 : recs_need < 16384 ? 16384 : recs_need;
    if (sums_need > sums_cap)
        sums_cap = sums_cap * 2 > sums_need ? sums_cap * 2 : sums_need < 1024 ? 1024 : sums_need;
    if ((long long)recs_cap * (long long)sizeof(CachedRec) + (long long)sums_cap * (long long)sizeof(SumEntry) > room) {
        recs_cap = recs_need > m->recs_cap ? recs_need : m->recs_cap;
        sums_cap = sums_need > m->sums_cap ? sums_need : m->sums_cap;
        if ((long long)recs_cap * (long long)sizeof(CachedRec) + (long long)sums_cap * (long long)sizeof(SumEntry) > room)
            return; /* no room: the copy decompresses it again */
    }
    if ((recs_cap != m->recs_cap || sums_cap != m->sums_cap) && sums_resize(m, recs_cap, sums_cap) < 0)
        return;
    CachedRec *to = m->recs + m->nrecs;
    for (Py_ssize_t i = 0; i < count; i++) {
        uint64_t delta = from[i].meta & 0xFFFFFFFFULL;
        if (delta > CR_DELTA)
            return;
        to[i].meta = (uint32_t)delta | (from[i].meta & REC_NULL_KEY ? CR_NULL_KEY : 0) |
                     (from[i].meta & REC_NULL_VALUE ? CR_NULL_VALUE : 0);
        to[i].slot = 0;
        if (slots != NULL && slots[i] != NO_SLOT) {
            to[i].slot = slots[i];
        } else if (!(from[i].meta & REC_NULL_KEY)) {
            Py_ssize_t j = find_slot(m, from[i].h1, from[i].h2);
            if (j < 0)
                return;
            to[i].slot = (uint32_t)j;
        }
    }
    SumEntry *e = &m->sums[m->nsums++];
    e->base = base;
    e->size = size;
    e->crc = (uint32_t)be32(h + 17);
    e->first = m->nrecs;
    e->count = count;
    m->nrecs += count;
    note_total(m);
}

/* The cached records of the batch at `h`, or NULL. The copy goes in offset order: what lies before this
 * batch is passed (its memory stays until the cache is cleared). */
static const SumEntry *sums_find(OffsetMapObject *m, const uint8_t *h, Py_ssize_t size)
{
    long long base = be64(h);
    Py_ssize_t lo = m->sums_first, hi = m->nsums;
    if (lo < hi && m->sums[lo].base >= base)
        hi = lo; /* the copy's next batch is the cache's next entry: no search over the whole cache */
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (m->sums[mid].base < base)
            lo = mid + 1;
        else
            hi = mid;
    }
    m->sums_first = lo;
    if (lo == m->nsums)
        return NULL;
    const SumEntry *e = &m->sums[lo];
    if (e->base != base || e->size != size || e->crc != (uint32_t)be32(h + 17))
        return NULL;
    m->sums_first = lo + 1;
    m->cache_hits++;
    return e;
}

static inline Py_ssize_t slot_of(const OffsetMapObject *m, uint64_t h1)
{
    return (Py_ssize_t)(((unsigned __int128)h1 * (uint64_t)m->cap) >> 64);
}

static int map_alloc(OffsetMapObject *m, Py_ssize_t cap)
{
    Slot *t = (Slot *)calloc((size_t)cap, sizeof(Slot));
    if (t == NULL)
        return -1;
    Slot *old = m->table;
    Py_ssize_t old_cap = m->cap;
    /* the cache's slots renumbered (or, without the memory for it, the cache dropped) */
    uint32_t *moved = old != NULL && m->nrecs > 0 ? (uint32_t *)malloc(sizeof(uint32_t) * (size_t)old_cap) : NULL;
    if (old != NULL && m->nrecs > 0 && (moved == NULL || cap > (Py_ssize_t)UINT32_MAX)) {
        m->nsums = m->sums_first = m->nrecs = 0;
        sums_resize(m, 0, 0);
    }
    m->table = t;
    m->cap = cap;
    m->version++;
    if (old != NULL) {
        for (Py_ssize_t i = 0; i < old_cap; i++) {
            if (!old[i].offset_plus_one)
                continue;
            Py_ssize_t j = slot_of(m, old[i].h1);
            while (t[j].offset_plus_one)
                j = j + 1 == cap ? 0 : j + 1;
            t[j] = old[i];
            if (moved != NULL)
                moved[i] = (uint32_t)j;
        }
        free(old);
    }
    if (moved != NULL) {
        for (Py_ssize_t i = 0; i < m->nrecs; i++)
            if (!(m->recs[i].meta & CR_NULL_KEY))
                m->recs[i].slot = moved[m->recs[i].slot];
        free(moved);
    }
    if ((long long)cap * (long long)sizeof(Slot) > m->peak_bytes)
        m->peak_bytes = (long long)cap * (long long)sizeof(Slot);
    sums_fit(m);
    note_total(m);
    return 0;
}

/* The key's slot, or -1 when memory ran out (a Python error is set). The caller checked the map is not
 * full. */
static Py_ssize_t map_put(OffsetMapObject *m, uint64_t h1, uint64_t h2, long long offset)
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
    m->version++;
    return j;
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

/* The slot holding the key of hash (h1, h2), or -1. */
static inline Py_ssize_t find_slot(const OffsetMapObject *m, uint64_t h1, uint64_t h2)
{
    Py_ssize_t j = slot_of(m, h1);
    for (Py_ssize_t probes = 0; probes < m->cap; probes++) {
        const Slot *s = &m->table[j];
        if (!s->offset_plus_one)
            return -1;
        if (s->h1 == h1 && s->h2 == h2)
            return j;
        j = j + 1 == m->cap ? 0 : j + 1;
    }
    return -1;
}

static int map_reset(OffsetMapObject *m)
{
    free(m->latest_by_slot);
    m->latest_by_slot = NULL;
    m->latest_cap = 0;
    m->version++;
    free(m->table);
    m->table = NULL;
    m->cap = 0;
    m->count = 0;
    m->latest_offset = -1;
    return map_alloc(m, m->slots < INITIAL_SLOTS ? m->slots : INITIAL_SLOTS);
}

static void helper_stop(OffsetMapObject *m);
static void window_free(OffsetMapObject *m);
static void carry_drop(OffsetMapObject *m);

static int OffsetMap_init(OffsetMapObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"memory", "load_factor", "seed", NULL};
    long long memory;
    double load_factor = 0.9;
    unsigned long long seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "L|dK", kwlist, &memory, &load_factor, &seed))
        return -1;
    self->memory = memory;
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
    self->direct_zstd = zstd_loaded;
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
    Py_CLEAR(self->zstd_decompress);
    Py_CLEAR(self->zstd_compress);
    carry_drop(self);
    sums_clear(self);
    helper_stop(self);
    window_free(self);
    dec_free(&self->dec[0]);
    dec_free(&self->dec[1]);
    enc_free(&self->enc[0]);
    enc_free(&self->enc[1]);
    free(self->jobs);
    free(self->keepv);
    free(self->pieces);
    free(self->table);
    free(self->latest_by_slot);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *call_own_zstd(PyObject *fn, const uint8_t *data, Py_ssize_t len, long long expect);

/* Whether libzstd's compression gives the bytes of this map's own python-zstandard context (the Python
 * path's) on a sample of records: 1 yes, 0 no (or no library: the copy compresses through Python), -1 with
 * an error set. The sample: 100 records of the kind a changelog producer writes (a varint head, a short
 * key, a value of repeated random bytes), in batches of 10 and 100. */
static int probe_compress(OffsetMapObject *m)
{
    if (!zstd_loaded || !zstd_compress_loaded)
        return 0;
    enum { REC = 100, N = 100 };
    uint8_t sample[REC * N];
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    for (int i = 0; i < N; i++) {
        uint8_t *r = sample + i * REC;
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        memcpy(r, "\xc4\x01\x00\x00\x00\x14key-", 10);
        for (int j = 10; j < 16; j++)
            r[j] = (uint8_t)('0' + (x >> (8 * j - 70)) % 10);
        for (int j = 16; j < REC; j++)
            r[j] = (uint8_t)(x >> (8 * ((j - 16) % 8)));
    }
    Enc e = {0};
    int same = 1;
    for (int k = 0; k < 2 && same == 1; k++) {
        size_t len = k == 0 ? 10 * REC : sizeof(sample);
        uint8_t *mine = NULL;
        size_t got = enc_compress(&e, sample, len, &mine);
        PyObject *theirs = call_own_zstd(m->zstd_compress, sample, (Py_ssize_t)len, -1);
        if (theirs == NULL) {
            same = PyErr_Occurred() ? -1 : 0;
        } else {
            same = got > 0 && (size_t)PyBytes_GET_SIZE(theirs) == got &&
                   memcmp(PyBytes_AS_STRING(theirs), mine, got) == 0;
            Py_DECREF(theirs);
        }
        free(mine);
    }
    enc_free(&e);
    return same;
}

static PyObject *OffsetMap_set_codecs(OffsetMapObject *self, PyObject *args)
{
    PyObject *decompress, *compress, *zstd_decompress = Py_None, *zstd_compress = Py_None;
    long long max_size = 256LL << 20;
    if (!PyArg_ParseTuple(args, "OO|OOL", &decompress, &compress, &zstd_decompress, &zstd_compress, &max_size))
        return NULL;
    if (decompress != Py_None && (!PyCallable_Check(decompress) || !PyCallable_Check(compress))) {
        PyErr_SetString(PyExc_TypeError, "set_codecs(decompress, compress) takes two callables or None, None");
        return NULL;
    }
    if ((zstd_decompress != Py_None || zstd_compress != Py_None) &&
        (decompress == Py_None || !PyCallable_Check(zstd_decompress) || !PyCallable_Check(zstd_compress))) {
        PyErr_SetString(PyExc_TypeError, "set_codecs: zstd_decompress and zstd_compress are two callables beside "
                                         "the two codecs, or None, None");
        return NULL;
    }
    Py_CLEAR(self->decompress);
    Py_CLEAR(self->compress);
    Py_CLEAR(self->zstd_decompress);
    Py_CLEAR(self->zstd_compress);
    if (decompress != Py_None) {
        Py_INCREF(decompress);
        Py_INCREF(compress);
        self->decompress = decompress;
        self->compress = compress;
    }
    if (zstd_decompress != Py_None) {
        Py_INCREF(zstd_decompress);
        Py_INCREF(zstd_compress);
        self->zstd_decompress = zstd_decompress;
        self->zstd_compress = zstd_compress;
    }
    self->max_size = max_size;
    self->direct_compress = 0;
    if (self->zstd_compress != NULL) {
        int same = probe_compress(self);
        if (same < 0)
            return NULL;
        self->direct_compress = same;
    }
    Py_RETURN_NONE;
}

/* codec(codec id, data bytes) through `fn` -> a new bytes reference. NULL with no error set when the call
 * raised an Exception: the batch is then the Python code's, whose same call raises it again (a corrupt or
 * oversized frame, an unknown codec). NULL with an error set for anything else (MemoryError is an
 * Exception too, and goes the same way; KeyboardInterrupt does not). */
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

/* The content size a zstd frame states, when `p` holds exactly one frame that states it; -1 otherwise
 * (RFC 8878 3.1.1: magic, frame header descriptor, window descriptor, dictionary id, content size, then
 * the blocks' 3-byte headers up to the last block, and the checksum when the descriptor says so). */
static long long zstd_single_frame_size(const uint8_t *p, Py_ssize_t n)
{
    if (n < 6 || p[0] != 0x28 || p[1] != 0xB5 || p[2] != 0x2F || p[3] != 0xFD)
        return -1;
    int fhd = p[4], fcs_flag = fhd >> 6, single = (fhd >> 5) & 1;
    if (fhd & 0x08)
        return -1; /* the reserved bit */
    static const int did_sizes[4] = {0, 1, 2, 4};
    Py_ssize_t pos = 5 + (single ? 0 : 1) + did_sizes[fhd & 3];
    int fcs = fcs_flag == 0 ? (single ? 1 : 0) : fcs_flag == 1 ? 2 : fcs_flag == 2 ? 4 : 8;
    if (fcs == 0 || n < pos + fcs)
        return -1;
    unsigned long long v = 0;
    for (int i = fcs - 1; i >= 0; i--)
        v = (v << 8) | p[pos + i];
    if (fcs == 2)
        v += 256;
    pos += fcs;
    for (;;) {
        if (n - pos < 3)
            return -1;
        uint32_t bh = (uint32_t)p[pos] | (uint32_t)p[pos + 1] << 8 | (uint32_t)p[pos + 2] << 16;
        int type = (bh >> 1) & 3;
        if (type == 3)
            return -1;
        pos += 3 + (type == 1 ? 1 : (Py_ssize_t)(bh >> 3));
        if (pos > n)
            return -1;
        if (bh & 1)
            break;
    }
    if (fhd & 0x04)
        pos += 4;
    if (pos != n || v > (unsigned long long)LLONG_MAX)
        return -1;
    return (long long)v;
}

/* The content size of `p` when it goes to libzstd (`dec_frame`): exactly one frame stating its size within
 * `max_size`, whose window python-zstandard's decompressor accepts too (at most 2^27 bytes, zstd's default
 * limit: a frame above it is refused there, so it is left to the Python path to refuse); -1 otherwise. */
static long long zstd_direct_size(const uint8_t *p, Py_ssize_t n, long long max_size)
{
    long long size = zstd_single_frame_size(p, n);
    if (size < 0 || size > max_size)
        return -1;
    unsigned long long window;
    if ((p[4] >> 5) & 1) {
        window = (unsigned long long)size; /* a single-segment frame: its window is its content */
    } else {
        int exponent = p[5] >> 3, mantissa = p[5] & 7;
        unsigned long long base = 1ULL << (10 + exponent);
        window = base + (base / 8) * (unsigned long long)mantissa;
    }
    return window > (1ULL << 27) ? -1 : size;
}

/* One of this map's own zstd contexts' calls on `data` (lent as a read-only memoryview: no copy), giving
 * bytes (of `expect` bytes when expect >= 0). NULL with no error set when it failed with an ordinary
 * exception or answered otherwise: the caller then goes through the records layer, which decides as the
 * Python path does; NULL with the error set for anything else (KeyboardInterrupt, ...). */
static PyObject *call_own_zstd(PyObject *fn, const uint8_t *data, Py_ssize_t len, long long expect)
{
    PyObject *arg = PyMemoryView_FromMemory((char *)data, len, PyBUF_READ);
    if (arg == NULL)
        return NULL;
    PyObject *res = PyObject_CallOneArg(fn, arg);
    Py_DECREF(arg);
    if (res != NULL && PyBytes_Check(res) && (expect < 0 || PyBytes_GET_SIZE(res) == expect))
        return res;
    if (res == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return NULL;
        PyErr_Clear();
    }
    Py_XDECREF(res);
    return NULL;
}

/* The decompressed records section of a compressed batch's `data`, as call_codec(self->decompress, ...)
 * returns it. One zstd frame that states its size within the limit goes straight to this map's own
 * decompression context (what `records.compression.decompress` does for it, without the Python calls
 * around it); anything else, or anything that fails there, goes to the records layer's decompress,
 * which decides as the Python path does. */
static PyObject *decompress_body(OffsetMapObject *m, int codec, const uint8_t *data, Py_ssize_t len)
{
    if (codec == 4 && m->zstd_decompress != NULL) {
        long long size = zstd_single_frame_size(data, len);
        if (size >= 0 && size <= m->max_size) {
            PyObject *res = call_own_zstd(m->zstd_decompress, data, len, size);
            if (res != NULL || PyErr_Occurred())
                return res;
        }
    }
    return call_codec(m->decompress, codec, data, len);
}

/* A compressed batch's kept records `data` recompressed with its codec, as call_codec(self->compress, ...)
 * returns it: zstd through this map's own compression context, made as the records layer makes its own
 * (the same parameters: the same bytes), the others through the records layer's compress. */
static PyObject *compress_body(OffsetMapObject *m, int codec, const uint8_t *data, Py_ssize_t len)
{
    if (codec == 4 && m->zstd_compress != NULL) {
        PyObject *res = call_own_zstd(m->zstd_compress, data, len, -1);
        if (res != NULL || PyErr_Occurred())
            return res;
    }
    return call_codec(m->compress, codec, data, len);
}

/* The records section of a compressed batch's `data`: 1 with it in *body / *blen (in this thread's libzstd
 * buffer, valid until the next call, or in *owner, a new reference); 0 with no error set when the Python
 * code must decide (decompress_body's NULL); -1 with an error set. zstd frames go to libzstd first when
 * this map uses it, then to decompress_body, which decides as before. */
static int decompress_into(OffsetMapObject *m, int codec, const uint8_t *data, Py_ssize_t len, const uint8_t **body,
                           Py_ssize_t *blen, PyObject **owner)
{
    *owner = NULL;
    if (codec == 4 && m->direct_zstd) {
        long long size = zstd_direct_size(data, len, m->max_size);
        if (size >= 0 && dec_frame(&m->dec[0], data, (size_t)len, (size_t)size)) {
            m->direct_frames++;
            *body = m->dec[0].buf;
            *blen = (Py_ssize_t)size;
            return 1;
        }
    }
    PyObject *res = decompress_body(m, codec, data, len);
    if (res == NULL)
        return PyErr_Occurred() ? -1 : 0;
    *owner = res;
    *body = (const uint8_t *)PyBytes_AS_STRING(res);
    *blen = PyBytes_GET_SIZE(res);
    return 1;
}

static PyObject *OffsetMap_clear(OffsetMapObject *self, PyObject *unused)
{
    carry_drop(self);
    sums_clear(self);
    window_free(self);
    for (int i = 0; i < 2; i++) { /* the buffers may have grown for a large frame; the contexts stay */
        free(self->dec[i].buf);
        self->dec[i].buf = NULL;
        self->dec[i].cap = 0;
        free(self->enc[i].plain);
        self->enc[i].plain = NULL;
        self->enc[i].cap = 0;
    }
    free(self->jobs);
    free(self->keepv);
    free(self->pieces);
    self->jobs = NULL;
    self->keepv = NULL;
    self->pieces = NULL;
    self->jobs_cap = self->keepv_cap = self->pieces_cap = 0;
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

/* Puts the keyed records at or after `start` of an uncompressed records section; stops at the first one
 * that finds the map full. 1 done, 0 full, -1 a body the Python walk rejects, -2 a Python error. */
static int map_records(OffsetMapObject *m, const uint8_t *body, Py_ssize_t n, long long count, long long base,
                       long long start, long long *records, RecSum *sums, int *sums_ok)
{
    Py_ssize_t pos = 0;
    if (count < 0 || count > n)
        return -1;
    for (long long i = 0; i < count; i++) {
        RecordHead r;
        if (!record_head(body, n, pos, &r) || r.ts_status != 1)
            return -1;
        long long offset = base + r.offset_delta;
        if (sums != NULL) { /* what filter_chunk needs of the record to judge it (`sums_keep`) */
            RecSum *rs = &sums[i];
            if (r.offset_delta < 0 || r.offset_delta > 0xFFFFFFFFLL)
                *sums_ok = 0;
            rs->meta = (uint64_t)(r.offset_delta & 0xFFFFFFFFLL) | (r.key_len < 0 ? REC_NULL_KEY : 0) |
                       (r.value_len < 0 ? REC_NULL_VALUE : 0);
            rs->h1 = rs->h2 = 0;
            if (r.key_len >= 0)
                hash128(body + r.key_start, (size_t)r.key_len, m->seed, &rs->h1, &rs->h2);
        }
        if (r.key_len >= 0 && offset >= start) {
            if (m->count >= m->max_entries) {
                /* full: the rest of the body must still be one the Python walk accepts */
                for (pos = r.end, i++; i < count; i++) {
                    if (!record_head(body, n, pos, &r) || r.ts_status != 1)
                        return -1;
                    pos = r.end;
                }
                return pos == n ? 0 : -1;
            }
            uint64_t h1, h2;
            if (sums != NULL) {
                h1 = sums[i].h1;
                h2 = sums[i].h2;
            } else {
                hash128(body + r.key_start, (size_t)r.key_len, m->seed, &h1, &h2);
            }
            if (map_put(m, h1, h2, offset) < 0)
                return -2;
        }
        (*records)++;
        pos = r.end;
    }
    return pos == n ? 1 : -1;
}

/* -- the map pass's windows: the next batches summarized on two threads ---------------------------------
 * Decompressing a batch, walking its records and hashing its keys depend on nothing but the batch, and are
 * most of the map pass's time for a compressed log: map_chunk does them for a window of the chunk's next
 * zstd batches ahead of its loop, in the caller's thread and in a helper thread of the map's own, both
 * without the GIL (pure C: libzstd, the record walk, the hash). The loop then puts each summarized batch's
 * keys in offset order, as before; a batch not summarized (not a zstd frame libzstd takes, a body the walk
 * rejects, an offset delta outside 32 bits) takes the loop's usual path, which decides as before.
 *
 * The puts are a pipeline's second stage: while the loop puts one window's keys, the helper already
 * summarizes the next window (laid out from where this one ends), and the caller, once its puts are done,
 * takes the batches of that window the helper has not claimed yet (both claim CLAIM_BATCHES at a time), so
 * neither thread waits for the other but at a chunk's end. A window holds at most WINDOW_BATCHES batches
 * and WINDOW_RECORDS records (their summaries, 24 bytes a record, are a window's memory besides a
 * decompression buffer per thread), stops before a batch the loop hands to Python (a transactional or
 * control one) and within the throttle's budget, so that little summarized work is thrown away when the
 * loop stops early; a next window the loop does not reach is given up (the helper stops claiming) before
 * map_chunk returns, so that no thread reads the chunk after it. */
static inline int frame(const uint8_t *buf, Py_ssize_t n, Py_ssize_t off, Py_ssize_t *size);

#define WINDOW_BATCHES 2048
#define WINDOW_RECORDS 32768
#define HELPER_MIN_BATCHES 32 /* a smaller window is summarized by the caller alone */
#define CLAIM_BATCHES 16      /* the batches a thread claims at a time */

typedef struct Pre {
    Py_ssize_t off, size; /* the batch in the chunk */
    long long content;    /* its frame's stated content size */
    Py_ssize_t first;     /* its records' summaries in `wsums` */
    long long count;
    int state; /* 1: summarized (the body decompressed and walked whole); 0: the loop's usual path */
} Pre;

typedef struct Window {
    Pre *pre;          /* WINDOW_BATCHES */
    RecSum *wsums;     /* WINDOW_RECORDS */
    uint32_t *slots;   /* a batch's keys' slots as map_summed put them (WINDOW_RECORDS) */
    const uint8_t *buf;
    Py_ssize_t n;      /* its batches: pre[0, n) */
    Py_ssize_t from;   /* where it was laid out from (its first batch looked at) */
    Py_ssize_t end;    /* where the batches it looked at end: it covers [from, end) */
    long long bytes;   /* the bytes of the batches it covers the loop counts (the throttle's budget) */
    Py_ssize_t next;   /* the next batch to claim (atomic) */
    int posted;        /* handed to the helper, not yet taken back */
} Window;

typedef struct Helper {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pid_t pid; /* of the process that started it: a forked child has no such thread */
    int job, stop;
    int running; /* it took the job (a job not yet taken can be withdrawn) */
    int kind;    /* the job: 0 claim and summarize batches of `win`, 1 run filter_chunk's recompressions */
    Window *win;
    long long claimed; /* batches it summarized (kind 0) */
    OffsetMapObject *m;
    const uint8_t *buf; /* the chunk of the jobs (kind 1) */
} Helper;

/* A partly kept zstd batch of filter_chunk's chunk, judged from the record cache, whose kept records are
 * spliced and recompressed by `run_jobs` after the chunk's loop (two threads, without the GIL). */
typedef struct Job {
    Py_ssize_t off, size;  /* the batch in the chunk */
    long long content;     /* its frame's stated content size */
    long long count, nkept;
    const uint8_t *keepp;  /* its records' keep flags (in m->keepv, or its own block: own_keep) */
    int own_keep;
    Py_ssize_t piece;      /* its piece of the output */
    long long bytes, rec_read, rec_kept, last_done; /* the loop's counters before it */
    uint8_t *out;          /* the kept records recompressed (malloc'd), out_len bytes; NULL: not done */
    size_t out_len;
    int64_t max_delta;     /* the largest timestamp delta of its kept records */
    int decoded;           /* its frame went through libzstd (counted in direct_frames) */
} Job;

/* A batch filter_chunk writes: `len` bytes at `pos` of its buffer, or job `job`'s batch (job >= 0). */
typedef struct Piece {
    Py_ssize_t pos, len;
    Py_ssize_t job;
    long long last, max_ts;
} Piece;

/* The jobs [from, to) with the context pair `d`, `e`: each batch decompressed, its kept records put back to
 * back and compressed. A job that fails keeps out NULL (the batch then goes to the Python code). No
 * Python API: runs without the GIL. */
static void run_jobs(OffsetMapObject *m, Dec *d, Enc *e, const uint8_t *buf, Py_ssize_t from, Py_ssize_t to)
{
    for (Py_ssize_t k = from; k < to; k++) {
        Job *j = &m->jobs[k];
        j->out = NULL;
        j->decoded = 0;
        const uint8_t *h = buf + j->off;
        if (!dec_frame(d, h + HEADER_SIZE, (size_t)(j->size - HEADER_SIZE), (size_t)j->content))
            continue;
        j->decoded = 1;
        if (e->cap < (size_t)j->content || e->plain == NULL) {
            size_t cap = j->content > 4096 ? (size_t)j->content : 4096;
            uint8_t *grown = (uint8_t *)realloc(e->plain, cap);
            if (grown == NULL)
                continue;
            e->plain = grown;
            e->cap = cap;
        }
        const uint8_t *body = d->buf, *keep = j->keepp;
        Py_ssize_t blen = (Py_ssize_t)j->content, pos = 0;
        size_t plen = 0;
        long long nk = 0;
        int64_t max_delta = 0;
        int ok = 1;
        for (long long i = 0; i < j->count; i++) {
            RecordHead r;
            if (!record_head(body, blen, pos, &r) || r.ts_status != 1) {
                ok = 0;
                break;
            }
            if (keep[i]) {
                memcpy(e->plain + plen, body + r.start, (size_t)(r.end - r.start));
                plen += (size_t)(r.end - r.start);
                if (nk == 0 || r.ts_delta > max_delta)
                    max_delta = r.ts_delta;
                nk++;
            }
            pos = r.end;
        }
        if (!ok || pos != blen || nk != j->nkept)
            continue;
        uint8_t *out;
        size_t got = enc_compress(e, e->plain, plen, &out);
        if (got == 0)
            continue;
        j->out = out;
        j->out_len = got;
        j->max_delta = max_delta;
    }
}

/* Summarizes the window's batches [from, to) with the context `d`. No Python API: runs without the GIL. */
static void summarize(OffsetMapObject *m, Window *w, Dec *d, Py_ssize_t from, Py_ssize_t to)
{
    const uint8_t *buf = w->buf;
    for (Py_ssize_t k = from; k < to; k++) {
        Pre *p = &w->pre[k];
        p->state = 0;
        const uint8_t *h = buf + p->off;
        if (!dec_frame(d, h + HEADER_SIZE, (size_t)(p->size - HEADER_SIZE), (size_t)p->content))
            continue;
        const uint8_t *body = d->buf;
        Py_ssize_t blen = (Py_ssize_t)p->content, pos = 0;
        RecSum *rs = w->wsums + p->first;
        int ok = 1;
        for (long long i = 0; i < p->count; i++) {
            RecordHead r;
            if (!record_head(body, blen, pos, &r) || r.ts_status != 1 || r.offset_delta < 0) {
                ok = 0;
                break;
            }
            rs[i].meta = (uint64_t)r.offset_delta | (r.key_len < 0 ? REC_NULL_KEY : 0) |
                         (r.value_len < 0 ? REC_NULL_VALUE : 0);
            rs[i].h1 = rs[i].h2 = 0;
            if (r.key_len >= 0)
                hash128(body + r.key_start, (size_t)r.key_len, m->seed, &rs[i].h1, &rs[i].h2);
            pos = r.end;
        }
        if (ok && pos == blen)
            p->state = 1;
    }
}

/* Claims the window's batches CLAIM_BATCHES at a time and summarizes them with `d` until none is left: the
 * number it summarized. No Python API. */
static long long window_claim(OffsetMapObject *m, Window *w, Dec *d)
{
    long long done = 0;
    for (;;) {
        Py_ssize_t k = __atomic_fetch_add(&w->next, CLAIM_BATCHES, __ATOMIC_RELAXED);
        if (k >= w->n)
            return done;
        Py_ssize_t to = k + CLAIM_BATCHES < w->n ? k + CLAIM_BATCHES : w->n;
        summarize(m, w, d, k, to);
        done += to - k;
    }
}

/* Claims filter_chunk's jobs one at a time and runs them with `d`, `e` until the queue is closed and
 * empty (or aborted). The helper (`hp`) sleeps while the loop has none ready; the caller claims only once
 * the queue is closed. No Python API. */
static void jobs_claim(OffsetMapObject *m, Helper *hp, Dec *d, Enc *e, const uint8_t *buf)
{
    for (;;) {
        Py_ssize_t k = __atomic_fetch_add(&m->jq_next, 1, __ATOMIC_SEQ_CST);
        while (k >= __atomic_load_n(&m->jq_ready, __ATOMIC_SEQ_CST)) {
            if (__atomic_load_n(&m->jq_closed, __ATOMIC_SEQ_CST) || hp == NULL) {
                if (k >= __atomic_load_n(&m->jq_ready, __ATOMIC_SEQ_CST))
                    return;
                break;
            }
            pthread_mutex_lock(&hp->mu);
            __atomic_store_n(&m->jq_waiting, 1, __ATOMIC_SEQ_CST);
            while (k >= __atomic_load_n(&m->jq_ready, __ATOMIC_SEQ_CST) &&
                   !__atomic_load_n(&m->jq_closed, __ATOMIC_SEQ_CST))
                pthread_cond_wait(&hp->cv, &hp->mu);
            __atomic_store_n(&m->jq_waiting, 0, __ATOMIC_SEQ_CST);
            pthread_mutex_unlock(&hp->mu);
        }
        if (__atomic_load_n(&m->jq_abort, __ATOMIC_SEQ_CST))
            return;
        run_jobs(m, d, e, buf, k, k + 1);
    }
}

static void *helper_main(void *arg)
{
    Helper *hp = (Helper *)arg;
    pthread_mutex_lock(&hp->mu);
    for (;;) {
        while (!hp->job && !hp->stop)
            pthread_cond_wait(&hp->cv, &hp->mu);
        if (hp->stop)
            break;
        hp->running = 1;
        pthread_mutex_unlock(&hp->mu);
        if (hp->kind == 1)
            jobs_claim(hp->m, hp, &hp->m->dec[1], &hp->m->enc[1], hp->buf);
        else
            hp->claimed += window_claim(hp->m, hp->win, &hp->m->dec[1]);
        pthread_mutex_lock(&hp->mu);
        hp->job = 0;
        hp->running = 0;
        pthread_cond_broadcast(&hp->cv);
    }
    pthread_mutex_unlock(&hp->mu);
    return NULL;
}

/* The map's helper thread, started on first use (NULL when it cannot be: the caller summarizes alone). Its
 * signals are blocked: Python's handlers run in the main thread. */
static Helper *helper_get(OffsetMapObject *m)
{
    if (m->helper != NULL && m->helper->pid == getpid())
        return m->helper;
    m->helper = NULL; /* one started before a fork is not in this process: left as it is */
    Helper *hp = (Helper *)calloc(1, sizeof(Helper));
    if (hp == NULL)
        return NULL;
    if (pthread_mutex_init(&hp->mu, NULL) != 0) {
        free(hp);
        return NULL;
    }
    if (pthread_cond_init(&hp->cv, NULL) != 0) {
        pthread_mutex_destroy(&hp->mu);
        free(hp);
        return NULL;
    }
    hp->m = m;
    hp->pid = getpid();
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&hp->thread, NULL, helper_main, hp);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&hp->cv);
        pthread_mutex_destroy(&hp->mu);
        free(hp);
        return NULL;
    }
    m->helper = hp;
    return hp;
}

static void helper_stop(OffsetMapObject *m)
{
    Helper *hp = m->helper;
    m->helper = NULL;
    if (hp == NULL || hp->pid != getpid())
        return;
    pthread_mutex_lock(&hp->mu);
    hp->stop = 1;
    pthread_cond_broadcast(&hp->cv);
    pthread_mutex_unlock(&hp->mu);
    pthread_join(hp->thread, NULL);
    pthread_cond_destroy(&hp->cv);
    pthread_mutex_destroy(&hp->mu);
    free(hp);
}

static void window_free(OffsetMapObject *m)
{
    for (int i = 0; i < 2; i++) {
        if (m->win[i] != NULL) {
            free(m->win[i]->pre);
            free(m->win[i]->wsums);
            free(m->win[i]->slots);
            free(m->win[i]);
        }
        m->win[i] = NULL;
    }
}

/* Both windows' memory, allocated on first use: 0, or -1 (no memory: no window, the loop's usual path). */
static int window_alloc(OffsetMapObject *m)
{
    if (m->win[0] != NULL && m->win[1] != NULL)
        return 0;
    window_free(m);
    for (int i = 0; i < 2; i++) {
        Window *w = (Window *)calloc(1, sizeof(Window));
        if (w == NULL)
            break;
        m->win[i] = w;
        w->pre = (Pre *)malloc(sizeof(Pre) * WINDOW_BATCHES);
        w->wsums = (RecSum *)malloc(sizeof(RecSum) * WINDOW_RECORDS);
        w->slots = (uint32_t *)malloc(sizeof(uint32_t) * WINDOW_RECORDS);
        if (w->pre == NULL || w->wsums == NULL || w->slots == NULL)
            break;
    }
    int whole = m->win[1] != NULL;
    for (int i = 0; i < 2 && whole; i++)
        whole = m->win[i]->pre != NULL && m->win[i]->wsums != NULL && m->win[i]->slots != NULL;
    if (!whole) {
        window_free(m);
        return -1;
    }
    return 0;
}

/* Lays out in `w` the window of the batches of `buf` from `off` (see above), none summarized yet: its
 * number of batches. */
static Py_ssize_t window_layout(OffsetMapObject *m, Window *w, const uint8_t *buf, Py_ssize_t n, Py_ssize_t off,
                                long long start, long long end, long long budget_left)
{
    Py_ssize_t wn = 0, pos = off;
    long long recs = 0, bytes = 0;
    while (pos < n && wn < WINDOW_BATCHES) {
        Py_ssize_t size;
        if (frame(buf, n, pos, &size) != 1)
            break;
        const uint8_t *h = buf + pos;
        long long base = be64(h), last = base + be32(h + 23);
        int attrs = (h[21] << 8) | h[22];
        if (base >= end || bytes >= budget_left || (attrs & (ATTR_TRANSACTIONAL | ATTR_CONTROL)))
            break;
        if (last >= start) {
            long long count = be32(h + 57);
            long long content = (attrs & ATTR_CODEC) == 4 ? zstd_direct_size(h + HEADER_SIZE, size - HEADER_SIZE,
                                                                              m->max_size) : -1;
            if (content >= 0 && count >= 0 && count <= content && count <= WINDOW_RECORDS) {
                if (recs + count > WINDOW_RECORDS)
                    break;
                Pre *p = &w->pre[wn++];
                p->off = pos;
                p->size = size;
                p->content = content;
                p->first = (Py_ssize_t)recs;
                p->count = count;
                p->state = 0;
                recs += count;
            }
            bytes += size;
        }
        pos += size;
    }
    w->buf = buf;
    w->n = wn;
    w->from = off;
    w->end = pos;
    w->bytes = bytes;
    w->next = 0;
    w->posted = 0;
    return wn;
}

/* Wakes the helper to a job of `kind` (0: claim batches of `w`; 1: filter_chunk's jobs over `buf`). */
static void helper_post(OffsetMapObject *m, Helper *hp, int kind, Window *w, const uint8_t *buf)
{
    pthread_mutex_lock(&hp->mu);
    hp->kind = kind;
    hp->win = w;
    hp->buf = buf;
    hp->job = 1;
    pthread_cond_broadcast(&hp->cv);
    pthread_mutex_unlock(&hp->mu);
    m->helper_posts++;
}

/* Hands `w` to the helper (when it has enough batches for one and the helper runs): it claims batches from
 * now on. */
static void window_post(OffsetMapObject *m, Window *w)
{
    Helper *hp = w->n >= HELPER_MIN_BATCHES ? helper_get(m) : NULL;
    if (hp == NULL)
        return;
    helper_post(m, hp, 0, w, NULL);
    w->posted = 1;
}

/* Takes `w` back from the helper: withdrawn if it has not started on it, else waited for (it stops at its
 * last claim). No Python API. */
static void window_unpost(OffsetMapObject *m, Window *w)
{
    if (!w->posted)
        return;
    Helper *hp = m->helper;
    pthread_mutex_lock(&hp->mu);
    if (hp->job && !hp->running)
        hp->job = 0;
    while (hp->job)
        pthread_cond_wait(&hp->cv, &hp->mu);
    m->helper_batches += hp->claimed;
    hp->claimed = 0;
    pthread_mutex_unlock(&hp->mu);
    w->posted = 0;
}

/* `w` summarized whole: the caller claims what is left of it, then takes it back from the helper. */
static void window_finish(OffsetMapObject *m, Window *w)
{
    Py_BEGIN_ALLOW_THREADS
    window_claim(m, w, &m->dec[0]);
    window_unpost(m, w);
    Py_END_ALLOW_THREADS
}

/* A window the loop will not use: the helper stops claiming, and is waited for. */
static void window_drop(OffsetMapObject *m, Window *w)
{
    if (w == NULL || !w->posted)
        return;
    __atomic_store_n(&w->next, w->n, __ATOMIC_RELAXED);
    Py_BEGIN_ALLOW_THREADS
    window_unpost(m, w);
    Py_END_ALLOW_THREADS
    w->n = 0;
}

/* The carried window given up (the helper stops claiming and is waited for) and its chunk released. */
static void carry_drop(OffsetMapObject *m)
{
    if (m->carry != NULL) {
        window_drop(m, m->carry);
        m->carry = NULL;
    }
    if (m->carry_obj != NULL) {
        PyBuffer_Release(&m->carry_view);
        Py_CLEAR(m->carry_obj);
    }
}

/* map_records for a summarized batch: its keys put from their summaries (the body was walked whole). 1 done,
 * 0 full, -2 a Python error. The slots of the batch's keys are fetched ahead of the puts. */
static int map_summed(OffsetMapObject *m, const RecSum *rs, long long count, long long base, long long start,
                      long long *records, uint32_t *slots)
{
    Py_ssize_t cap = m->cap;
    for (long long i = 0; i < count; i++)
        __builtin_prefetch(&m->table[slot_of(m, rs[i].h1)]);
    for (long long i = 0; i < count; i++) {
        long long offset = base + (long long)(rs[i].meta & 0xFFFFFFFFULL);
        if (!(rs[i].meta & REC_NULL_KEY) && offset >= start) {
            if (m->count >= m->max_entries)
                return 0;
            Py_ssize_t j = map_put(m, rs[i].h1, rs[i].h2, offset);
            if (j < 0)
                return -2;
            slots[i] = (uint32_t)j;
        } else {
            slots[i] = NO_SLOT;
        }
        (*records)++;
    }
    if (m->cap != cap) /* the table grew meanwhile: its slots moved */
        for (long long i = 0; i < count; i++)
            slots[i] = NO_SLOT;
    return 1;
}

/* map_body(body, count, base, start) -> (full, records mapped) for one decompressed records section, None
 * for a body the Python walk rejects. */
static PyObject *OffsetMap_map_body(OffsetMapObject *self, PyObject *args)
{
    Py_buffer view;
    long long count, base, start, records = 0;
    if (!PyArg_ParseTuple(args, "y*LLL", &view, &count, &base, &start))
        return NULL;
    int got = map_records(self, (const uint8_t *)view.buf, view.len, count, base, start, &records, NULL, NULL);
    PyBuffer_Release(&view);
    if (got == -2)
        return NULL;
    if (got == -1)
        Py_RETURN_NONE;
    return Py_BuildValue("(OL)", got == 0 ? Py_True : Py_False, records);
}

enum { ST_MORE = 0, ST_PYTHON = 1, ST_BUDGET = 2, ST_END = 3, ST_FULL = 4 };

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
    PyObject *chunk, *next = Py_None;
    if (!PyArg_ParseTuple(args, "OnLLL|O", &chunk, &off, &start, &end, &budget, &next))
        return NULL;
    if (PyObject_GetBuffer(chunk, &view, PyBUF_SIMPLE) < 0) {
        carry_drop(self);
        return NULL;
    }
    const uint8_t *buf = (const uint8_t *)view.buf;
    const Py_ssize_t n = view.len;
    int status = ST_MORE;
    /* cur: the window being put (it covers the batches before wend); ahead: the next one, or NULL */
    Window *cur = NULL, *ahead = NULL;
    Py_ssize_t widx = 0, wend = off;
    int windows = self->direct_zstd && self->decompress != NULL && window_alloc(self) == 0;
    /* the window carried from the call before, if it was laid out on this chunk from here */
    PyObject *held = NULL;
    Py_buffer held_view;
    if (self->carry != NULL && self->carry_obj == chunk && off == 0 && self->carry->from == 0 && windows &&
        self->carry_view.buf == view.buf) {
        ahead = self->carry;
        self->carried++;
        held = self->carry_obj; /* released once the call is done with its window */
        held_view = self->carry_view;
        self->carry = NULL;
        self->carry_obj = NULL;
    } else {
        carry_drop(self);
    }
    while (off < n) {
        Py_ssize_t size;
        int f = frame(buf, n, off, &size);
        if (f == 0)
            break;
        if (f < 0) {
            status = ST_PYTHON;
            break;
        }
        if (off >= wend && windows) {
            if (ahead != NULL && ahead->from == off) { /* summarized meanwhile, in part or whole */
                cur = ahead;
            } else {
                window_drop(self, ahead);
                cur = self->win[cur == self->win[0] ? 1 : 0];
                window_layout(self, cur, buf, n, off, start, end, budget - bytes);
                window_post(self, cur);
            }
            ahead = NULL;
            if (cur->n > 0)
                window_finish(self, cur);
            wend = cur->end;
            widx = 0;
            if (cur->end < n) { /* the next window, for the helper while this one is put */
                ahead = self->win[cur == self->win[0] ? 1 : 0];
                if (window_layout(self, ahead, buf, n, cur->end, start, end, budget - bytes - cur->bytes) > 0)
                    window_post(self, ahead);
                if (!ahead->posted)
                    ahead = NULL; /* laid out again when the loop gets there */
            }
        }
        Py_ssize_t wn = cur != NULL && off < wend ? cur->n : 0;
        const uint8_t *h = buf + off;
        long long base = be64(h), last = base + be32(h + 23);
        if (last < start) {
            off += size;
            continue;
        }
        if (base >= end) {
            status = ST_END;
            break;
        }
        if (bytes >= budget) {
            status = ST_BUDGET;
            break;
        }
        int attrs = (h[21] << 8) | h[22];
        if ((attrs & (ATTR_TRANSACTIONAL | ATTR_CONTROL)) || ((attrs & ATTR_CODEC) && self->decompress == NULL)) {
            status = ST_PYTHON;
            break;
        }
        while (widx < wn && cur->pre[widx].off < off)
            widx++;
        const Pre *pre = widx < wn && cur->pre[widx].off == off && cur->pre[widx].state == 1 ? &cur->pre[widx] : NULL;
        long long mapped = 0, count = be32(h + 57);
        int got;
        if (pre != NULL) { /* summarized in the window: its keys put in order */
            self->direct_frames++;
            got = map_summed(self, cur->wsums + pre->first, count, base, start, &mapped, cur->slots);
            if (got == 1) /* for filter_chunk */
                sums_keep(self, h, size, cur->wsums + pre->first, (Py_ssize_t)count, cur->slots);
        } else {
            const uint8_t *body = h + HEADER_SIZE;
            Py_ssize_t blen = size - HEADER_SIZE;
            PyObject *owner = NULL; /* holds a decompressed records section from Python */
            int compressed = (attrs & ATTR_CODEC) != 0;
            if (compressed) {
                int dec = decompress_into(self, attrs & ATTR_CODEC, h + HEADER_SIZE, size - HEADER_SIZE, &body, &blen,
                                          &owner);
                if (dec < 0) {
                    window_drop(self, ahead);
                    PyBuffer_Release(&view);
                    if (held != NULL) {
                        PyBuffer_Release(&held_view);
                        Py_DECREF(held);
                    }
                    return NULL;
                }
                if (dec == 0) {
                    status = ST_PYTHON;
                    break;
                }
            }
            int sums_ok = compressed && count >= 0 && count <= blen && scratch_room(self, count) == 0;
            got = map_records(self, body, blen, count, base, start, &mapped, sums_ok ? self->scratch : NULL,
                              &sums_ok);
            Py_XDECREF(owner);
            if (got == 1 && sums_ok)
                sums_keep(self, h, size, self->scratch, (Py_ssize_t)count, NULL); /* for filter_chunk, if it fits */
        }
        if (got == -2) {
            window_drop(self, ahead);
            PyBuffer_Release(&view);
            if (held != NULL) {
                PyBuffer_Release(&held_view);
                Py_DECREF(held);
            }
            return NULL;
        }
        if (got == -1) {
            status = ST_PYTHON;
            break;
        }
        bytes += size;
        records += mapped;
        if (got == 0) {
            status = ST_FULL;
            break;
        }
        if (last > self->latest_offset)
            self->latest_offset = last;
        last_done = last;
        off += size;
    }
    window_drop(self, ahead);
    if (held != NULL) {
        PyBuffer_Release(&held_view);
        Py_DECREF(held);
    }
    /* every whole batch of the chunk mapped: the next chunk's first window, for the helper while the caller
     * reads the one after it (`next` starts where this chunk's whole batches end: the caller's walk reads it
     * from there) */
    if (status == ST_MORE && windows && next != Py_None &&
        PyObject_GetBuffer(next, &self->carry_view, PyBUF_SIMPLE) == 0) {
        Py_INCREF(next);
        self->carry_obj = next;
        Window *w = self->win[cur == self->win[0] ? 1 : 0];
        const Py_ssize_t nn = self->carry_view.len;
        if (window_layout(self, w, (const uint8_t *)self->carry_view.buf, nn, 0, start, end, budget - bytes) > 0)
            window_post(self, w);
        if (w->posted)
            self->carry = w;
        else
            carry_drop(self);
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(niLLL)", off, status, bytes, records, last_done);
}

/* Whether a whole batch follows at `off` (iter_batches would yield one); -1 when iter_batches would raise. */
static inline int whole_batch_at(const uint8_t *buf, Py_ssize_t n, Py_ssize_t off)
{
    if (n - off < LOG_OVERHEAD)
        return 0;
    int32_t len = be32(buf + off + 8);
    if (len < V0_MIN)
        return -1;
    if (n - off < LOG_OVERHEAD + (Py_ssize_t)len || n - off < 17)
        return 0;
    uint8_t magic = buf[off + 16];
    if (magic > 2 || (magic == 2 && len < HEADER_SIZE - LOG_OVERHEAD))
        return -1;
    return 1;
}

#define MAX_KEPT_STACK 64

/* Each slot's offset alone (see latest_by_slot), made from the table when it changed since; NULL when it
 * would not fit in `memory` beside the table and the cache (the judgements then read the table). */
static const int64_t *latest_view(OffsetMapObject *m)
{
    if (m->latest_by_slot != NULL && m->latest_cap == m->cap && m->latest_version == m->version)
        return m->latest_by_slot;
    free(m->latest_by_slot);
    m->latest_by_slot = NULL;
    m->latest_cap = 0;
    if (table_bytes(m) + m->cache_bytes + (long long)m->cap * (long long)sizeof(int64_t) > m->memory)
        return NULL;
    int64_t *l = (int64_t *)malloc(sizeof(int64_t) * (size_t)(m->cap > 0 ? m->cap : 1));
    if (l == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < m->cap; i++)
        l[i] = m->table[i].offset_plus_one - 1;
    m->latest_by_slot = l;
    m->latest_cap = m->cap;
    m->latest_version = m->version;
    return l;
}

#define JOBS_HELPER_MIN 8 /* the helper joins filter_chunk's recompressions from this many jobs on */

/* The jobs' outputs and own keep-flag blocks freed; keepv grown for the next call to what these needed. */
static void jobs_free(OffsetMapObject *m, Py_ssize_t njobs, long long keep_need)
{
    for (Py_ssize_t k = 0; k < njobs; k++) {
        free(m->jobs[k].out);
        if (m->jobs[k].own_keep)
            free((void *)m->jobs[k].keepp);
    }
    if (keep_need > m->keepv_cap) {
        uint8_t *grown = (uint8_t *)realloc(m->keepv, (size_t)keep_need);
        if (grown != NULL) {
            m->keepv = grown;
            m->keepv_cap = (Py_ssize_t)keep_need;
        }
    }
}

/* Hands the job queue to the helper (its jobs so far and those the loop adds): the helper, or NULL. */
static Helper *jobs_post(OffsetMapObject *m, const uint8_t *buf)
{
    Helper *hp = helper_get(m);
    if (hp != NULL)
        helper_post(m, hp, 1, NULL, buf);
    return hp;
}

/* One more job ready in the queue (the helper woken if it sleeps for one). */
static void jobs_publish(OffsetMapObject *m, Helper *hp, Py_ssize_t ready)
{
    __atomic_store_n(&m->jq_ready, ready, __ATOMIC_SEQ_CST);
    if (hp != NULL && __atomic_load_n(&m->jq_waiting, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&hp->mu);
        pthread_cond_broadcast(&hp->cv);
        pthread_mutex_unlock(&hp->mu);
    }
}

/* No more jobs: the caller runs what no thread claimed yet (none when `abort`), then waits for the
 * helper's last one. Called without the GIL. */
static void jobs_close(OffsetMapObject *m, Helper *hp, const uint8_t *buf, int abort)
{
    if (abort)
        __atomic_store_n(&m->jq_abort, 1, __ATOMIC_SEQ_CST);
    if (hp != NULL) {
        pthread_mutex_lock(&hp->mu);
        __atomic_store_n(&m->jq_closed, 1, __ATOMIC_SEQ_CST);
        pthread_cond_broadcast(&hp->cv);
        pthread_mutex_unlock(&hp->mu);
    } else {
        __atomic_store_n(&m->jq_closed, 1, __ATOMIC_SEQ_CST);
    }
    if (!abort)
        jobs_claim(m, NULL, &m->dec[0], &m->enc[0], buf);
    if (hp != NULL) {
        pthread_mutex_lock(&hp->mu);
        if (hp->job && !hp->running)
            hp->job = 0;
        while (hp->job)
            pthread_cond_wait(&hp->cv, &hp->mu);
        pthread_mutex_unlock(&hp->mu);
    }
}

/* filter_chunk(chunk, off, tail, upper_bound, now, producers, dest_base, size, since_entry, max_ts,
 *              max_ts_offset, index_interval, budget)
 *   -> (off, status, bytes read, output, records read, records retained, last offset, index points,
 *       size, since_entry, max_ts, max_ts_offset)
 * `Cleaner._clean_group`'s loop with `_filter_batch` and `_CleanedSegment.append` over the batches of
 * `chunk` from `off`: the bytes to write, and the index entries (last offset, position, max timestamp,
 * its offset) the append rule adds, with the cleaned segment's state after them. `tail`: the chunk ends
 * where the group's last segment ends (its last batch keeps an empty batch). `producers`: producer id ->
 * the last offset of its last batch (None for none). Status MORE, PYTHON or BUDGET as map_chunk. */
static PyObject *OffsetMap_filter_chunk(OffsetMapObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t off;
    int tail;
    long long upper_bound, now, dest_base, size_out, since_entry, max_ts, max_ts_off, interval, budget;
    PyObject *producers;
    if (!PyArg_ParseTuple(args, "y*npLLO!LLLLLLL", &view, &off, &tail, &upper_bound, &now, &PyDict_Type,
                          &producers, &dest_base, &size_out, &since_entry, &max_ts, &max_ts_off, &interval,
                          &budget))
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    const Py_ssize_t n = view.len;
    long long bytes = 0, rec_read = 0, rec_kept = 0, last_done = -1;
    int status = ST_MORE;
    PyObject *points = PyList_New(0);
    PyObject *plain = NULL; /* the decompressed records section of the compressed batch at hand */
    Py_ssize_t out_cap = n - off > 0 ? n - off : 1; /* grown when a recompressed splice outgrows its input */
    uint8_t *out = (uint8_t *)malloc((size_t)out_cap);
    Py_ssize_t out_len = 0;
    Py_ssize_t kept_stack[2 * MAX_KEPT_STACK];
    Py_ssize_t *kept = kept_stack;
    long long kept_cap = MAX_KEPT_STACK;
    Py_ssize_t njobs = 0, nkeepv = 0, npieces = 0;
    long long keep_need = 0; /* the keep flags the jobs needed (keepv grows to it for the next call) */
    Helper *jhp = NULL;      /* the helper, once it takes jobs from the queue */
    PyObject *data = NULL;
    if (points == NULL || out == NULL)
        goto error;
    carry_drop(self); /* the helper is this call's */
    const int64_t *lat = latest_view(self);
    self->jq_next = self->jq_ready = 0;
    self->jq_closed = self->jq_abort = self->jq_waiting = 0;
    /* the jobs' array never moves while the helper reads it: room for a job per batch the chunk can hold */
    int can_defer = self->direct_zstd && self->direct_compress;
    if (can_defer) {
        Py_ssize_t need = (n - off) / HEADER_SIZE + 1;
        if (need > self->jobs_cap) {
            Job *grown = (Job *)realloc(self->jobs, sizeof(Job) * (size_t)need);
            if (grown != NULL) {
                self->jobs = grown;
                self->jobs_cap = need;
            }
        }
        if (self->keepv == NULL && (self->keepv = (uint8_t *)malloc(65536)) != NULL)
            self->keepv_cap = 65536;
        can_defer = need <= self->jobs_cap && self->keepv != NULL;
    }
    while (off < n) {
        Py_ssize_t size;
        int f = frame(buf, n, off, &size);
        if (f == 0)
            break;
        if (f < 0) {
            status = ST_PYTHON;
            break;
        }
        if (bytes >= budget) {
            status = ST_BUDGET;
            break;
        }
        const uint8_t *h = buf + off;
        int attrs = (h[21] << 8) | h[22];
        if ((attrs & (ATTR_TRANSACTIONAL | ATTR_CONTROL)) || ((attrs & ATTR_CODEC) && self->decompress == NULL)) {
            status = ST_PYTHON;
            break;
        }
        long long base = be64(h), last = base + be32(h + 23);
        long long base_ts = be64(h + 27), header_max_ts = be64(h + 35), pid = be64(h + 43);
        long long count = be32(h + 57);
        if (last - dest_base < 0 || last - dest_base > 0x7FFFFFFF) {
            status = ST_PYTHON; /* the Python append raises */
            break;
        }
        /* the retention of an emptied batch (`_filter_batch`) */
        int retain_empty = last + 1 == upper_bound;
        if (!retain_empty && tail) {
            int next = whole_batch_at(buf, n, off + size);
            if (next < 0) {
                status = ST_PYTHON;
                break;
            }
            retain_empty = !next;
        }
        if (!retain_empty && pid >= 0) {
            PyObject *key = PyLong_FromLongLong(pid);
            if (key == NULL)
                goto error;
            PyObject *v = PyDict_GetItemWithError(producers, key);
            Py_DECREF(key);
            if (v == NULL && PyErr_Occurred())
                goto error;
            if (v != NULL && v != Py_None) {
                long long plast = PyLong_AsLongLong(v);
                if (plast == -1 && PyErr_Occurred())
                    goto error;
                retain_empty = plast == last;
            }
        }
        /* the records (`_filter_by_spans`) */
        const uint8_t *body = h + HEADER_SIZE;
        Py_ssize_t blen = size - HEADER_SIZE, pos = 0;
        int codec = attrs & ATTR_CODEC;
        int horizon = (attrs & ATTR_DELETE_HORIZON) != 0;
        int retain_deletes = !horizon || now < base_ts;
        long long nkept = 0, batch_max_ts = -1;
        Py_ssize_t written = 0;
        Py_ssize_t job = -1; /* this batch's job, when its recompression is left to run_jobs */
        const SumEntry *cached = codec ? sums_find(self, h, size) : NULL;
        if (cached != NULL && cached->count == count) {
            /* the records the map pass read of this batch: the same judgement as below, without the body;
             * a batch that keeps all of its records or none is decided here, any other is decompressed
             * (a zstd one by run_jobs after the loop, when libzstd compresses for this map) */
            const CachedRec *rs = self->recs + cached->first;
            long long latest = self->latest_offset;
            int tombstones = 0;
            int defer = codec == 4 && can_defer;
            /* its keep flags: in keepv, or (keepv full: it never moves while the helper reads it) a block
             * of their own */
            uint8_t *kp = NULL;
            int own_keep = 0;
            if (defer) {
                if (nkeepv + count <= self->keepv_cap) {
                    kp = self->keepv + nkeepv;
                } else if ((kp = (uint8_t *)malloc(count > 0 ? (size_t)count : 1)) != NULL) {
                    own_keep = 1;
                } else {
                    defer = 0;
                }
            }
            if (lat != NULL) { /* the slots fetched at once, not one miss after another */
                for (long long i = 0; i < count; i++)
                    __builtin_prefetch(&lat[rs[i].slot]);
            } else {
                for (long long i = 0; i < count; i++)
                    __builtin_prefetch(&self->table[rs[i].slot]);
            }
            for (long long i = 0; i < count; i++) {
                long long offset = base + (long long)(rs[i].meta & CR_DELTA);
                int keep;
                if (offset > latest)
                    keep = 1;
                else if (rs[i].meta & CR_NULL_KEY)
                    keep = 0;
                else
                    keep = offset >= (lat != NULL ? lat[rs[i].slot] : self->table[rs[i].slot].offset_plus_one - 1) &&
                           (!(rs[i].meta & CR_NULL_VALUE) || retain_deletes);
                if (keep) {
                    nkept++;
                    tombstones |= (rs[i].meta & CR_NULL_VALUE) != 0;
                }
                if (defer)
                    kp[i] = (uint8_t)keep;
            }
            if (own_keep && (!(tombstones && !horizon) && (nkept == 0 ? !retain_empty : nkept == count))) {
                free(kp);
                own_keep = 0;
            }
            if (!(tombstones && !horizon) && (nkept == 0 ? !retain_empty : nkept == count)) {
                self->cache_decided++;
                if (nkept == count) {
                    memcpy(out + out_len, h, (size_t)size);
                    written = size;
                    batch_max_ts = header_max_ts;
                }
                goto judged;
            }
            long long content = defer && nkept > 0 && !(tombstones && !horizon)
                                    ? zstd_direct_size(h + HEADER_SIZE, size - HEADER_SIZE, self->max_size)
                                    : -1;
            if (content >= 0) {
                self->jobs[njobs] = (Job){.off = off, .size = size, .content = content, .count = count,
                                          .nkept = nkept, .keepp = kp, .own_keep = own_keep, .piece = npieces,
                                          .bytes = bytes, .rec_read = rec_read, .rec_kept = rec_kept,
                                          .last_done = last_done}; /* out NULL: not done yet */
                job = njobs++;
                if (!own_keep)
                    nkeepv += count;
                keep_need += count;
                if (jhp != NULL)
                    jobs_publish(self, jhp, njobs);
                else if (njobs >= JOBS_HELPER_MIN) { /* enough to share: the helper starts on them */
                    self->jq_ready = njobs;
                    jhp = jobs_post(self, buf);
                }
                goto judged;
            }
            if (own_keep)
                free(kp);
            nkept = 0;
        }
        if (codec) {
            int dec = decompress_into(self, codec, h + HEADER_SIZE, size - HEADER_SIZE, &body, &blen, &plain);
            if (dec < 0)
                goto error;
            if (dec == 0) {
                status = ST_PYTHON;
                break;
            }
        }
        if (count < 0 || count > blen) {
            status = ST_PYTHON;
            break;
        }
        if (count > kept_cap) {
            Py_ssize_t *grown = (Py_ssize_t *)malloc(sizeof(Py_ssize_t) * 2 * (size_t)count);
            if (grown == NULL)
                goto error;
            if (kept != kept_stack)
                free(kept);
            kept = grown;
            kept_cap = count;
        }
        long long latest = self->latest_offset;
        int64_t kept_max_delta = 0;
        int tombstones = 0, bad = 0;
        for (long long i = 0; i < count; i++) {
            RecordHead r;
            if (!record_head(body, blen, pos, &r) || r.ts_status != 1) {
                bad = 1;
                break;
            }
            long long offset = base + r.offset_delta;
            int keep;
            if (offset > latest) {
                keep = 1;
            } else if (r.key_len < 0) {
                keep = 0;
            } else {
                uint64_t h1, h2;
                hash128(body + r.key_start, (size_t)r.key_len, self->seed, &h1, &h2);
                keep = offset >= map_get(self, h1, h2) && (r.value_len >= 0 || retain_deletes);
            }
            if (keep) {
                kept[2 * nkept] = r.start;
                kept[2 * nkept + 1] = r.end;
                if (nkept == 0 || r.ts_delta > kept_max_delta)
                    kept_max_delta = r.ts_delta;
                nkept++;
                tombstones |= r.value_len < 0;
            }
            pos = r.end;
        }
        if (bad || pos != blen || (tombstones && !horizon) || (nkept == 0 && retain_empty)) {
            status = ST_PYTHON; /* a malformed body, a delete horizon to set, an empty batch to keep */
            break;
        }
        if (nkept == 0) {
            /* dropped: an empty batch goes too (a cleaned one's last batch, kept empty, that is no longer) */
        } else if (nkept == count) {
            memcpy(out + out_len, h, (size_t)size);
            written = size;
            batch_max_ts = header_max_ts;
        } else {
            /* `splice_batch`: the header with the new length, max timestamp and count, the kept records
             * (recompressed with the batch's codec) */
            Py_ssize_t kept_len = 0;
            for (long long k = 0; k < nkept; k++)
                kept_len += kept[2 * k + 1] - kept[2 * k];
            PyObject *packed = NULL;
            if (codec) {
                PyObject *records = PyBytes_FromStringAndSize(NULL, kept_len);
                if (records == NULL)
                    goto error;
                char *r = PyBytes_AS_STRING(records);
                for (long long k = 0; k < nkept; k++) {
                    Py_ssize_t s = kept[2 * k], e = kept[2 * k + 1];
                    memcpy(r, body + s, (size_t)(e - s));
                    r += e - s;
                }
                packed = compress_body(self, codec, (const uint8_t *)PyBytes_AS_STRING(records), kept_len);
                Py_DECREF(records);
                if (packed == NULL) {
                    if (PyErr_Occurred())
                        goto error;
                    status = ST_PYTHON;
                    break;
                }
                kept_len = PyBytes_GET_SIZE(packed);
            }
            if (out_len + HEADER_SIZE + kept_len > out_cap) {
                Py_ssize_t cap = 2 * out_cap > out_len + HEADER_SIZE + kept_len ? 2 * out_cap
                                                                                : out_len + HEADER_SIZE + kept_len;
                uint8_t *grown = (uint8_t *)realloc(out, (size_t)cap);
                if (grown == NULL) {
                    Py_XDECREF(packed);
                    PyErr_NoMemory();
                    goto error;
                }
                out = grown;
                out_cap = cap;
            }
            uint8_t *o = out + out_len;
            memcpy(o, h, HEADER_SIZE);
            Py_ssize_t p = HEADER_SIZE;
            if (packed != NULL) {
                memcpy(o + p, PyBytes_AS_STRING(packed), (size_t)kept_len);
                p += kept_len;
                Py_DECREF(packed);
            } else {
                for (long long k = 0; k < nkept; k++) {
                    Py_ssize_t s = kept[2 * k], e = kept[2 * k + 1];
                    memcpy(o + p, body + s, (size_t)(e - s));
                    p += e - s;
                }
            }
            batch_max_ts = (attrs & ATTR_LOG_APPEND_TIME) ? header_max_ts : base_ts + kept_max_delta;
            put_be32(o + 8, (uint32_t)(p - LOG_OVERHEAD));
            o[16] = 2;
            put_be64(o + 35, batch_max_ts);
            put_be32(o + 57, (uint32_t)nkept);
            put_be32(o + 17, crc32c(o + 21, (size_t)(p - 21)));
            written = p;
        }
    judged:
        rec_read += count;
        rec_kept += nkept;
        if (written || job >= 0) { /* indexed below, once the jobs' sizes are known */
            if (npieces == self->pieces_cap) {
                Py_ssize_t cap = self->pieces_cap ? 2 * self->pieces_cap : 1024;
                Piece *grown = (Piece *)realloc(self->pieces, sizeof(Piece) * (size_t)cap);
                if (grown == NULL) {
                    PyErr_NoMemory();
                    goto error;
                }
                self->pieces = grown;
                self->pieces_cap = cap;
            }
            Piece *pc = &self->pieces[npieces++];
            pc->pos = out_len;
            pc->len = written;
            pc->job = job;
            pc->last = last;
            pc->max_ts = batch_max_ts;
            out_len += written;
        }
        Py_CLEAR(plain);
        bytes += size;
        last_done = last;
        off += size;
    }
    Py_CLEAR(plain);
    if (njobs > 0) {
        /* the recompressions not run yet: the caller joins the helper on them (or runs them all) */
        self->jq_ready = njobs;
        Py_BEGIN_ALLOW_THREADS
        jobs_close(self, jhp, buf, 0);
        Py_END_ALLOW_THREADS
        jhp = NULL;
        for (Py_ssize_t k = 0; k < njobs; k++)
            self->direct_frames += self->jobs[k].decoded;
    }
    /* a job that failed ends the output before its batch, which goes to the Python code (whose splice gives
     * the same bytes, or raises the same error) */
    Py_ssize_t npieces_out = npieces;
    for (Py_ssize_t k = 0; k < njobs; k++) {
        const Job *j = &self->jobs[k];
        if (j->out == NULL) {
            off = j->off;
            status = ST_PYTHON;
            bytes = j->bytes;
            rec_read = j->rec_read;
            rec_kept = j->rec_kept;
            last_done = j->last_done;
            npieces_out = j->piece;
            break;
        }
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t k = 0; k < npieces_out; k++) {
        const Piece *pc = &self->pieces[k];
        total += pc->job < 0 ? pc->len : HEADER_SIZE + (Py_ssize_t)self->jobs[pc->job].out_len;
    }
    data = PyBytes_FromStringAndSize(NULL, total);
    if (data == NULL)
        goto error;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(data);
    for (Py_ssize_t k = 0; k < npieces_out; k++) {
        const Piece *pc = &self->pieces[k];
        long long batch_max_ts = pc->max_ts;
        Py_ssize_t written = pc->len;
        if (pc->job < 0) {
            memcpy(o, out + pc->pos, (size_t)written);
        } else {
            /* `splice_batch`: the header with the new length, max timestamp and count, the kept records
             * recompressed */
            const Job *j = &self->jobs[pc->job];
            const uint8_t *h = buf + j->off;
            int attrs = (h[21] << 8) | h[22];
            memcpy(o, h, HEADER_SIZE);
            memcpy(o + HEADER_SIZE, j->out, j->out_len);
            written = HEADER_SIZE + (Py_ssize_t)j->out_len;
            batch_max_ts = (attrs & ATTR_LOG_APPEND_TIME) ? be64(h + 35) : be64(h + 27) + j->max_delta;
            put_be32(o + 8, (uint32_t)(written - LOG_OVERHEAD));
            o[16] = 2;
            put_be64(o + 35, batch_max_ts);
            put_be32(o + 57, (uint32_t)j->nkept);
            put_be32(o + 17, crc32c(o + 21, (size_t)(written - 21)));
            self->direct_compressed++;
        }
        /* `_CleanedSegment.append`'s index rule */
        if (batch_max_ts > max_ts) {
            max_ts = batch_max_ts;
            max_ts_off = pc->last;
        }
        if (since_entry > interval) {
            PyObject *pt = Py_BuildValue("(LLLL)", pc->last, size_out, max_ts, max_ts_off);
            if (pt == NULL || PyList_Append(points, pt) < 0) {
                Py_XDECREF(pt);
                goto error;
            }
            Py_DECREF(pt);
            since_entry = 0;
        }
        o += written;
        size_out += written;
        since_entry += written;
    }
    jobs_free(self, njobs, keep_need);
    PyBuffer_Release(&view);
    if (kept != kept_stack)
        free(kept);
    free(out);
    return Py_BuildValue("(niLNLLLNLLLL)", off, status, bytes, data, rec_read, rec_kept, last_done, points,
                         size_out, since_entry, max_ts, max_ts_off);
error:
    if (jhp != NULL) { /* the helper stops at its job at hand */
        Py_BEGIN_ALLOW_THREADS
        jobs_close(self, jhp, buf, 1);
        Py_END_ALLOW_THREADS
    }
    jobs_free(self, njobs, keep_need);
    Py_XDECREF(data);
    Py_XDECREF(plain);
    PyBuffer_Release(&view);
    if (kept != kept_stack)
        free(kept);
    free(out);
    Py_XDECREF(points);
    return NULL;
}

/* kept_spans(body, count, base, retain_deletes) -> (records, kept spans, a tombstone kept) for one
 * decompressed records section (`_filter_by_spans` for a compressed batch); the spans are record_spans'
 * tuples. None for a body the Python walk rejects. */
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
    long long latest = self->latest_offset;
    if (count < 0 || count > n)
        goto reject;
    kept = PyList_New(0);
    if (kept == NULL)
        goto error;
    for (long long i = 0; i < count; i++) {
        RecordHead r;
        if (!record_head(body, n, pos, &r) || r.ts_status != 1)
            goto reject;
        long long offset = base + r.offset_delta;
        int keep;
        if (offset > latest) {
            keep = 1;
        } else if (r.key_len < 0) {
            keep = 0;
        } else {
            uint64_t h1, h2;
            hash128(body + r.key_start, (size_t)r.key_len, self->seed, &h1, &h2);
            keep = offset >= map_get(self, h1, h2) && (r.value_len >= 0 || retain_deletes);
        }
        if (keep) {
            PyObject *span = Py_BuildValue("(LLnnnLL)", (long long)r.offset_delta, (long long)r.ts_delta, r.start,
                                           r.end, r.key_start, (long long)r.key_len, (long long)r.value_len);
            if (span == NULL || PyList_Append(kept, span) < 0) {
                Py_XDECREF(span);
                goto error;
            }
            Py_DECREF(span);
            tombstones |= r.value_len < 0;
        }
        pos = r.end;
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

static PyObject *get_direct_zstd(OffsetMapObject *self, void *c)
{
    return PyBool_FromLong(self->direct_zstd);
}

static int set_direct_zstd(OffsetMapObject *self, PyObject *v, void *c)
{
    int on = v == NULL ? 0 : PyObject_IsTrue(v);
    if (on < 0)
        return -1;
    if (on && !zstd_loaded) {
        PyErr_SetString(PyExc_ValueError, "libzstd is not loaded");
        return -1;
    }
    self->direct_zstd = on;
    return 0;
}

static PyObject *get_full(OffsetMapObject *self, void *c)
{
    return PyBool_FromLong(self->count >= self->max_entries);
}

static PyObject *get_slots(OffsetMapObject *self, void *c)
{
    return PyLong_FromSsize_t(self->slots);
}

static PyObject *get_max_entries(OffsetMapObject *self, void *c)
{
    return PyLong_FromSsize_t(self->max_entries);
}

static PyObject *get_utilization(OffsetMapObject *self, void *c)
{
    return PyFloat_FromDouble(self->slots ? (double)self->count / (double)self->slots : 0.0);
}

/* Counters read from Python (the cleaner's stats, the bench, the tests). */
static PyMemberDef members[] = {
    {"cache_peak_bytes", T_LONGLONG, offsetof(OffsetMapObject, cache_peak), READONLY,
     "the most memory the record cache has held"},
    {"cache_bytes", T_LONGLONG, offsetof(OffsetMapObject, cache_bytes), READONLY, "the memory the record cache holds"},
    {"total_peak_bytes", T_LONGLONG, offsetof(OffsetMapObject, total_peak), READONLY,
     "the most the table and the record cache held together"},
    {"cache_hits", T_LONGLONG, offsetof(OffsetMapObject, cache_hits), READONLY,
     "compressed batches filter_chunk found in the record cache"},
    {"cache_decided", T_LONGLONG, offsetof(OffsetMapObject, cache_decided), READONLY,
     "of those, the batches it judged from the cache alone (all records kept, or none)"},
    {"direct_frames", T_LONGLONG, offsetof(OffsetMapObject, direct_frames), READONLY,
     "zstd frames decompressed through libzstd (map pass and copy)"},
    {"direct_compress", T_INT, offsetof(OffsetMapObject, direct_compress), READONLY,
     "whether the copy recompresses zstd through libzstd (set_codecs found its bytes python-zstandard's)"},
    {"direct_compressed", T_LONGLONG, offsetof(OffsetMapObject, direct_compressed), READONLY,
     "batches the copy recompressed through libzstd (run_jobs)"},
    {"carried", T_LONGLONG, offsetof(OffsetMapObject, carried), READONLY,
     "windows of a chunk laid out by the map_chunk call before it (`next`) and taken up by the call on it"},
    {"helper_posts", T_LONGLONG, offsetof(OffsetMapObject, helper_posts), READONLY,
     "windows and job queues handed to the helper thread (how much of them it takes depends on timing)"},
    {"helper_batches", T_LONGLONG, offsetof(OffsetMapObject, helper_batches), READONLY,
     "batches the map pass's helper thread summarized"},
    {"peak_bytes", T_LONGLONG, offsetof(OffsetMapObject, peak_bytes), READONLY, "the most memory the table has held"},
    {NULL},
};

static PyGetSetDef getset[] = {

    {"latest_offset", (getter)get_latest, (setter)set_latest, "the last offset put, or advanced past", NULL},
    {"direct_zstd", (getter)get_direct_zstd, (setter)set_direct_zstd,
     "whether zstd frames are decompressed through libzstd (on where it loaded; off: the Python contexts)", NULL},
    {"full", (getter)get_full, NULL, "whether the map holds its maximum of entries", NULL},
    {"slots", (getter)get_slots, NULL, "slots the memory bound allows", NULL},
    {"max_entries", (getter)get_max_entries, NULL, "entries before the map is full", NULL},
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

/* zstd_compress(data) -> bytes: `data` compressed through libzstd as run_jobs compresses a partly kept
 * batch's records (level 3, content size written, no checksum): the Python path's recompressor where the
 * library compresses, so that both paths write the same bytes (another zstd's, python-zstandard's bundled
 * one included, may write other bytes for the same input: equally valid frames). */
static Enc module_enc; /* used under the GIL only */

static PyObject *module_zstd_compress(PyObject *unused, PyObject *arg)
{
    if (!zstd_loaded || !zstd_compress_loaded) {
        PyErr_SetString(PyExc_RuntimeError, "libzstd's compression is not loaded");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint8_t *out;
    size_t got = enc_compress(&module_enc, (const uint8_t *)view.buf, (size_t)view.len, &out);
    PyBuffer_Release(&view);
    if (got == 0)
        return PyErr_NoMemory();
    PyObject *res = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)got);
    free(out);
    return res;
}

/* chunk_end(buf) -> where the batches `buf` holds whole end (each batch's size from its length field,
 * whatever its magic; a length below the smallest batch's ends the walk): where map_chunk's loop stops
 * when it mapped every whole batch, so that the cleaner's walk can read the next chunk from there before
 * the loop runs and hand it to map_chunk as `next`. */
static PyObject *module_chunk_end(PyObject *unused, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t n = view.len, off = 0;
    while (n - off >= LOG_OVERHEAD) {
        int32_t len = be32(buf + off + 8);
        if (len < V0_MIN || n - off - LOG_OVERHEAD < (Py_ssize_t)len)
            break;
        off += LOG_OVERHEAD + (Py_ssize_t)len;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(off);
}

static PyMethodDef module_methods[] = {
    {"chunk_end", (PyCFunction)module_chunk_end, METH_O, "chunk_end(buf) -> the end of its whole batches"},
    {"zstd_compress", (PyCFunction)module_zstd_compress, METH_O, "zstd_compress(data) -> bytes, through libzstd"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_clean", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__clean(void)
{
    crc_table_init();
    load_libzstd();
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
    PyModule_AddIntConstant(m, "LIBZSTD", zstd_loaded ? (long)zstd.versionNumber() : 0);
    PyModule_AddIntConstant(m, "LIBZSTD_COMPRESS", zstd_loaded && zstd_compress_loaded);
    return m;
}
