/*
 * igt_spill.c — temporary files for bounded-memory builds (igt_build.c).
 *
 * A store is one temporary file, written append-only by one thread and read
 * with pread by any. It is created exclusively (O_TMPFILE where the system
 * has it; else a fresh name with O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600) and
 * unlinked at once, so no name outlives the call that made it and nothing
 * remains after success, failure, cancel or a crash.
 *
 * A run is a sorted sequence of fixed-size records in a store, followed by
 * one checksum per block of records and a trailer:
 *
 *   records   count x rec_size     sorted by their first key_size bytes
 *   sums      blocks x 8           checksum of each block of block_recs records
 *   trailer   40 bytes             magic, sizes, count, checksum of the sums
 *
 * Readers check the trailer against what the writer reported, each block's
 * checksum as the block is read, and the order of the records, so a damaged
 * or altered temporary file is an error (OLIF_ERR_IO), never a wrong tree.
 * Per-block sums let a reader start anywhere (threads merge key ranges).
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* O_TMPFILE */
#endif
#define _POSIX_C_SOURCE 200809L
#include "igt_spill.h"
#include "olif_frame.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#define IGT_HAVE_SPILL 1
#else
#define IGT_HAVE_SPILL 0
#endif

#define RUN_MAGIC "OLIFRUN"
#define STORE_BUFFER ((size_t)1 << 20)

/* ---- streaming checksum ------------------------------------------------------------ */

/* 64-bit words little-endian, however the bytes arrive in pieces. */
static inline uint64_t le64(const uint8_t *p) {
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 |
           (uint64_t)p[7] << 56;
}

static inline uint64_t mix(uint64_t h, uint64_t w) {
    h = (h ^ w) * 0x100000001b3ull;
    return h ^ (h >> 32);
}

void igt__hash_init(igt__hasher *s) {
    s->h = 0xcbf29ce484222325ull;
    s->word = 0;
    s->fill = 0;
    s->n = 0;
}

void igt__hash_update(igt__hasher *s, const uint8_t *p, size_t n) {
    s->n += n;
    while (n && s->fill) {
        s->word |= (uint64_t)*p++ << (8 * s->fill);
        n--;
        if (++s->fill == 8) {
            s->h = mix(s->h, s->word);
            s->word = 0;
            s->fill = 0;
        }
    }
    for (; n >= 8; p += 8, n -= 8) s->h = mix(s->h, le64(p));
    for (; n; n--) s->word |= (uint64_t)*p++ << (8 * s->fill++);
}

uint64_t igt__hash_final(const igt__hasher *s) {
    uint64_t h = mix(s->h, s->word ^ (uint64_t)s->fill << 61);
    h = mix(h, s->n);
    return h ^ (h >> 29);
}

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    igt__hasher h;
    igt__hash_init(&h);
    igt__hash_update(&h, p, n);
    return igt__hash_final(&h);
}

/* ---- stores --------------------------------------------------------------------------- */

struct igt__store {
    int fd;
    uint64_t size;              /* bytes written, buffered ones included */
    uint8_t *buf;
    size_t fill;
};

#if IGT_HAVE_SPILL
static int open_temp(const char *dir, int *err_no) {
    int fd = -1;
#ifdef O_TMPFILE
    fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) return fd;
#endif
    size_t len = strlen(dir);
    char *name = malloc(len + 48);
    if (!name) {
        *err_no = ENOMEM;
        return -1;
    }
    for (unsigned attempt = 0; attempt < 64; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_nsec ^
                     (uint64_t)(uintptr_t)name ^ (uint64_t)attempt << 52;
        x ^= x >> 31;
        x *= 0xBF58476D1CE4E5B9ull;
        x ^= x >> 29;
        snprintf(name, len + 48, "%s/.olifant-igt-%016llx.tmp", dir, (unsigned long long)x);
        fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW
#ifdef O_CLOEXEC
                            | O_CLOEXEC
#endif
                  , 0600);
        if (fd >= 0) {
            unlink(name);       /* the name lives only as long as this line */
            break;
        }
        if (errno != EEXIST) break;
    }
    *err_no = errno;
    free(name);
    return fd;
}
#endif

igt_status igt__store_open(const char *dir, igt__store **out, igt_error *err) {
    *out = NULL;
#if IGT_HAVE_SPILL
    igt__store *s = calloc(1, sizeof *s);
    uint8_t *buf = malloc(STORE_BUFFER);
    if (!s || !buf) {
        free(s);
        free(buf);
        return igt__fail(err, OLIF_ERR_NOMEM, "cannot allocate a temporary file buffer");
    }
    int e = 0;
    s->fd = open_temp(dir, &e);
    if (s->fd < 0) {
        free(s);
        free(buf);
        return igt__fail(err, OLIF_ERR_IO, "cannot create a temporary file in %s: %s", dir,
                         strerror(e));
    }
    s->buf = buf;
    *out = s;
    return OLIF_OK;
#else
    (void)dir;
    return igt__fail(err, OLIF_ERR_IO, "temporary files need a POSIX system");
#endif
}

void igt__store_close(igt__store *s) {
    if (!s) return;
#if IGT_HAVE_SPILL
    close(s->fd);
#endif
    free(s->buf);
    free(s);
}

uint64_t igt__store_size(const igt__store *s) { return s->size; }

#if IGT_HAVE_SPILL
/* All n bytes at offset `at`, written (from p) or read (into p). */
static igt_status full_io(int fd, uint8_t *p, size_t n, uint64_t at, int writing, igt_error *err) {
    while (n) {
        ssize_t k = writing ? pwrite(fd, p, n, (off_t)at) : pread(fd, p, n, (off_t)at);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return igt__fail(err, OLIF_ERR_IO, "cannot %s a temporary file: %s",
                             writing ? "write" : "read",
                             k < 0 ? strerror(errno) : writing ? "no progress" : "it is shorter than written");
        p += k;
        n -= (size_t)k;
        at += (uint64_t)k;
    }
    return OLIF_OK;
}
#endif

static igt_status store_flush(igt__store *s, igt_error *err) {
#if IGT_HAVE_SPILL
    igt_status st = full_io(s->fd, s->buf, s->fill, s->size - s->fill, 1, err);
    if (st) return st;
#endif
    s->fill = 0;
    return OLIF_OK;
}

igt_status igt__store_append(igt__store *s, const void *data, size_t n, igt_error *err) {
    const uint8_t *p = data;
    while (n) {
        size_t room = STORE_BUFFER - s->fill, take = n < room ? n : room;
        memcpy(s->buf + s->fill, p, take);
        s->fill += take;
        s->size += take;
        p += take;
        n -= take;
        if (s->fill == STORE_BUFFER) {
            igt_status st = store_flush(s, err);
            if (st) return st;
        }
    }
    return OLIF_OK;
}

igt_status igt__store_sync(igt__store *s, igt_error *err) {
    return s->fill ? store_flush(s, err) : OLIF_OK;
}

igt_status igt__store_read(const igt__store *s, uint64_t at, void *data, size_t n,
                           igt_error *err) {
    if (s->fill)
        return igt__fail(err, OLIF_ERR_ARG, "internal error: temporary file read before sync");
    if (at > s->size || n > s->size - at)
        return igt__fail(err, OLIF_ERR_IO, "temporary file read of %zu bytes at %llu is out of range",
                         n, (unsigned long long)at);
#if IGT_HAVE_SPILL
    return full_io(s->fd, data, n, at, 0, err);
#else
    (void)data;
    return igt__fail(err, OLIF_ERR_IO, "temporary files need a POSIX system");
#endif
}

/* ---- runs ------------------------------------------------------------------------------ */

typedef struct {
    char magic[8];
    uint32_t rec_size, key_size;
    uint64_t count;
    uint32_t block_recs, reserved;
    uint64_t sums_checksum;
} run_trailer;

OLIF_STATIC_ASSERT(sizeof(run_trailer) == 40, run_trailer_layout);

static uint32_t block_records(uint32_t rec_size) {
    uint32_t r = (uint32_t)(((size_t)64 << 10) / rec_size);
    return r ? r : 1;
}

igt_status igt__run_begin(igt__run_writer *w, igt__store *s, uint32_t rec_size, uint32_t key_size,
                          igt_error *err) {
    memset(w, 0, sizeof *w);
    if (rec_size < 1 || rec_size > IGT__MAX_RECORD || key_size > rec_size)
        return igt__fail(err, OLIF_ERR_ARG, "internal error: record of %u bytes, key %u", rec_size,
                         key_size);
    w->store = s;
    w->run.store = s;
    w->run.offset = igt__store_size(s);
    w->run.rec_size = rec_size;
    w->run.key_size = key_size;
    w->run.block_recs = block_records(rec_size);
    igt__hash_init(&w->block);
    return OLIF_OK;
}

static igt_status close_block(igt__run_writer *w, igt_error *err) {
    if (!igt__grow((void **)&w->sums, &w->cap_sums, w->n_sums + 1, sizeof *w->sums, 64))
        return igt__fail(err, OLIF_ERR_NOMEM, "cannot grow a run's block checksums");
    w->sums[w->n_sums++] = igt__hash_final(&w->block);
    igt__hash_init(&w->block);
    w->in_block = 0;
    return OLIF_OK;
}

igt_status igt__run_put(igt__run_writer *w, const uint8_t *recs, size_t n, igt_error *err) {
    const uint32_t R = w->run.rec_size, K = w->run.key_size;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = recs + i * R;
        if (w->run.count && memcmp(rec, w->prev, K) < 0)
            return igt__fail(err, OLIF_ERR_ARG, "internal error: run records out of order");
        memcpy(w->prev, rec, R);
        igt__hash_update(&w->block, rec, R);
        w->run.count++;
        if (++w->in_block == w->run.block_recs) {
            igt_status st = close_block(w, err);
            if (st) return st;
        }
    }
    return igt__store_append(w->store, recs, n * R, err);
}

igt_status igt__run_end(igt__run_writer *w, igt__run *out, igt_error *err) {
    igt_status st = OLIF_OK;
    if (w->in_block) st = close_block(w, err);
    run_trailer t;
    memset(&t, 0, sizeof t);
    memcpy(t.magic, RUN_MAGIC, 8);
    t.rec_size = w->run.rec_size;
    t.key_size = w->run.key_size;
    t.count = w->run.count;
    t.block_recs = w->run.block_recs;
    t.sums_checksum = hash_bytes((const uint8_t *)w->sums, w->n_sums * sizeof *w->sums);
    w->run.sums_checksum = t.sums_checksum;
    if (!st && w->n_sums) st = igt__store_append(w->store, w->sums, w->n_sums * sizeof *w->sums, err);
    if (!st) st = igt__store_append(w->store, &t, sizeof t, err);
    free(w->sums);
    w->sums = NULL;
    if (!st) *out = w->run;
    return st;
}

void igt__run_abandon(igt__run_writer *w) {
    free(w->sums);
    w->sums = NULL;
}

/* ---- reading runs ---------------------------------------------------------------------- */

static uint64_t run_blocks(const igt__run *r) {
    return (r->count + r->block_recs - 1) / r->block_recs;
}

igt_status igt__run_record(const igt__run *r, uint64_t i, uint8_t *rec, igt_error *err) {
    if (i >= r->count)
        return igt__fail(err, OLIF_ERR_IO, "temporary run: record %llu of %llu",
                         (unsigned long long)i, (unsigned long long)r->count);
    return igt__store_read(r->store, r->offset + i * r->rec_size, rec, r->rec_size, err);
}

static igt_status load_block(igt__cursor *c, uint64_t block, igt_error *err) {
    const igt__run *r = &c->run;
    uint64_t first = block * r->block_recs;
    uint64_t n = r->count - first < r->block_recs ? r->count - first : r->block_recs;
    igt_status st = igt__store_read(r->store, r->offset + first * r->rec_size, c->buf,
                                    (size_t)n * r->rec_size, err);
    if (st) return st;
    if (hash_bytes(c->buf, (size_t)n * r->rec_size) != c->sums[block])
        return igt__fail(err, OLIF_ERR_IO,
                         "temporary file damaged: block %llu of a run fails its checksum",
                         (unsigned long long)block);
    c->buf_first = first;
    c->buf_n = (uint32_t)n;
    return OLIF_OK;
}

igt_status igt__cursor_open(igt__cursor *c, const igt__run *run, uint64_t begin, uint64_t end,
                            igt_error *err) {
    memset(c, 0, sizeof *c);
    c->run = *run;
    if (end > run->count || begin > end)
        return igt__fail(err, OLIF_ERR_ARG, "internal error: run range %llu..%llu of %llu",
                         (unsigned long long)begin, (unsigned long long)end,
                         (unsigned long long)run->count);
    uint64_t blocks = run_blocks(run);
    uint64_t tail = run->offset + run->count * run->rec_size;
    run_trailer t;
    igt_status st = igt__store_read(run->store, tail + blocks * 8, &t, sizeof t, err);
    if (st) return st;
    if (memcmp(t.magic, RUN_MAGIC, 8) != 0 || t.rec_size != run->rec_size ||
        t.key_size != run->key_size || t.count != run->count || t.block_recs != run->block_recs ||
        t.sums_checksum != run->sums_checksum)
        return igt__fail(err, OLIF_ERR_IO, "temporary file damaged: a run's trailer does not match");
    c->sums = igt__malloc((size_t)blocks + 1, sizeof *c->sums);
    c->buf = igt__malloc(run->block_recs, run->rec_size);
    if (!c->sums || !c->buf) {
        igt__cursor_close(c);
        return igt__fail(err, OLIF_ERR_NOMEM, "cannot allocate a run reader");
    }
    st = igt__store_read(run->store, tail, c->sums, (size_t)blocks * 8, err);
    if (st == OLIF_OK && hash_bytes((const uint8_t *)c->sums, (size_t)blocks * 8) != t.sums_checksum)
        st = igt__fail(err, OLIF_ERR_IO, "temporary file damaged: block checksums do not match");
    if (st) {
        igt__cursor_close(c);
        return st;
    }
    c->pos = begin;
    c->end = end;
    c->cur = NULL;
    if (begin < end) {
        st = load_block(c, begin / run->block_recs, err);
        if (st) {
            igt__cursor_close(c);
            return st;
        }
        c->cur = c->buf + (begin - c->buf_first) * run->rec_size;
    }
    return OLIF_OK;
}

igt_status igt__cursor_next(igt__cursor *c, igt_error *err) {
    const igt__run *r = &c->run;
    memcpy(c->prev, c->cur, r->rec_size);
    c->pos++;
    if (c->pos >= c->end) {
        c->cur = NULL;
        return OLIF_OK;
    }
    if (c->pos - c->buf_first >= c->buf_n) {
        igt_status st = load_block(c, c->pos / r->block_recs, err);
        if (st) return st;
    }
    c->cur = c->buf + (c->pos - c->buf_first) * r->rec_size;
    if (memcmp(c->cur, c->prev, r->key_size) < 0)
        return igt__fail(err, OLIF_ERR_IO, "temporary file damaged: run records out of order");
    return OLIF_OK;
}

void igt__cursor_close(igt__cursor *c) {
    free(c->sums);
    free(c->buf);
    c->sums = NULL;
    c->buf = NULL;
    c->cur = NULL;
}

/* First record index in [0, count) whose key does not sort before `key`
 * (key_size bytes); count if none. Reads single records; the blocks read
 * later are checked as usual. */
igt_status igt__run_lower_bound(const igt__run *r, const uint8_t *key, uint32_t key_len,
                                uint64_t *out, igt_error *err) {
    uint64_t lo = 0, hi = r->count;
    uint8_t rec[IGT__MAX_RECORD];
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        igt_status st = igt__run_record(r, mid, rec, err);
        if (st) return st;
        if (memcmp(rec, key, key_len) < 0) lo = mid + 1; else hi = mid;
    }
    *out = lo;
    return OLIF_OK;
}

/* ---- k-way merge -------------------------------------------------------------------------- */

/* Binary min-heap of cursor indices by record key; ties by index, so the
 * merge is deterministic. */
static int before(igt__cursor *cs, uint32_t a, uint32_t b, uint32_t key) {
    int c = memcmp(cs[a].cur, cs[b].cur, key);
    return c < 0 || (c == 0 && a < b);
}

static void sift_down(igt__cursor *cs, uint32_t *heap, uint32_t n, uint32_t i, uint32_t key) {
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && before(cs, heap[l], heap[m], key)) m = l;
        if (r < n && before(cs, heap[r], heap[m], key)) m = r;
        if (m == i) return;
        uint32_t t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
}

igt_status igt__merge(const igt__run *runs, const uint64_t *begin, const uint64_t *end,
                      uint32_t n_runs, igt__merge_sink sink, void *ctx, igt_error *err) {
    if (n_runs == 0) return OLIF_OK;
    const uint32_t key = runs[0].key_size, R = runs[0].rec_size;
    for (uint32_t i = 1; i < n_runs; i++)
        if (runs[i].key_size != key || runs[i].rec_size != R)
            return igt__fail(err, OLIF_ERR_ARG, "internal error: merging runs of different records");
    igt__cursor *cs = calloc(n_runs, sizeof *cs);
    uint32_t *heap = igt__malloc(n_runs, sizeof *heap);
    enum { BATCH = IGT__MERGE_BATCH };
    uint8_t *batch = igt__malloc(BATCH, R);
    igt_status st = OLIF_OK;
    uint32_t open = 0, n = 0, fill = 0;
    if (!cs || !heap || !batch) {
        st = igt__fail(err, OLIF_ERR_NOMEM, "cannot allocate a %u-way merge", n_runs);
        goto out;
    }
    for (; open < n_runs; open++) {
        st = igt__cursor_open(&cs[open], &runs[open], begin ? begin[open] : 0,
                              end ? end[open] : runs[open].count, err);
        if (st) goto out;
        if (cs[open].cur) heap[n++] = open;
    }
    for (uint32_t i = n / 2; i-- > 0;) sift_down(cs, heap, n, i, key);
    while (n) {
        igt__cursor *c = &cs[heap[0]];
        memcpy(batch + (size_t)fill * R, c->cur, R);
        if (++fill == BATCH) {
            st = sink(ctx, batch, fill, err);
            if (st) goto out;
            fill = 0;
        }
        st = igt__cursor_next(c, err);
        if (st) goto out;
        if (!c->cur) heap[0] = heap[--n];
        sift_down(cs, heap, n, 0, key);
    }
    if (fill) st = sink(ctx, batch, fill, err);
out:
    for (uint32_t i = 0; i < open; i++) igt__cursor_close(&cs[i]);
    free(cs);
    free(heap);
    free(batch);
    return st;
}
