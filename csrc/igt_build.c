/*
 * igt_build.c — the IGTree builder (igtree.h, "Building"). Semantics:
 * shared/reference/igtree-spec.md §2-4.
 *
 * Instances are stored as a token stream, not as rows: each document (or
 * each run of added rows that continue one another) is one segment of
 * `window` context ids followed by its tokens, and the instance at stream
 * position p is (stream[p-window .. p-1], stream[p]). A token costs 2 bytes
 * (4 if the vocabulary needs them) instead of the (window+1) x 4 of a row.
 *
 * Build, per chunk of the stream (the whole stream unless a memory limit
 * made several):
 *   1. class statistics and, per window position, each value's
 *      first-appearance rank, in instance order (TiMBL's summation order);
 *   2. per position, the (value, class) counts in (value rank, class rank)
 *      order by a counting sort on the value rank, for the gain ratios;
 *   3. a counting sort of instance offsets on the root level's id, then per
 *      root id a sort of small (packed deeper ids, offset, class) entries;
 *   4. one scan over the sorted instances closes tree nodes in post-order,
 *      each with its default class, pruning children that agree with it.
 * Root ids are independent subtrees, so threads take contiguous ranges of
 * them in steps 3-4 (and positions in step 2), and their partial trees are
 * joined level by level. With a memory limit, each full chunk is spilled:
 * step 2's counts as sorted runs, the chunk itself raw; at build time the
 * counts are merged into the weights, each chunk is read back, sorted and
 * written as a run of instance records, and the runs are k-way merged
 * straight into step 4 (igt_spill.c). Both paths feed the same scan, so
 * their models are byte-identical.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* MADV_HUGEPAGE */
#endif
#define _POSIX_C_SOURCE 200809L
#include "igt_spill.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define IGT_HAVE_THREADS 1
#else
#define IGT_HAVE_THREADS 0
#endif

#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#define IGT_PREFETCH(p) __builtin_prefetch(p)
#else
#define ALWAYS_INLINE inline
#define IGT_PREFETCH(p) ((void)0)
#endif

#define UNSEEN UINT32_MAX
#define NOMEM(what) do { st = igt__fail(err, OLIF_ERR_NOMEM, "out of memory (%s)", what); goto done; } while (0)

static double log2z(double x) { return fabs(x) < DBL_EPSILON ? 0.0 : log2(x); }

/* ---- threads ------------------------------------------------------------------------ */

/* Cancellation seen by every worker: only the calling thread talks to the
 * progress callback (it may be Python); workers poll this flag. */
typedef struct {
    igt_progress_fn fn;
    void *user;
#if IGT_HAVE_THREADS
    pthread_mutex_t mu;
#endif
    int cancelled;
} control_t;

static int is_cancelled(control_t *c) {
#if IGT_HAVE_THREADS
    pthread_mutex_lock(&c->mu);
    int v = c->cancelled;
    pthread_mutex_unlock(&c->mu);
    return v;
#else
    return c->cancelled;
#endif
}

/* On the calling thread only. Returns nonzero if the build should stop. */
static int report(control_t *c, const char *phase, uint64_t done, uint64_t total) {
    if (c->fn && !is_cancelled(c) && c->fn(c->user, phase, done, total)) {
#if IGT_HAVE_THREADS
        pthread_mutex_lock(&c->mu);
        c->cancelled = 1;
        pthread_mutex_unlock(&c->mu);
#else
        c->cancelled = 1;
#endif
    }
    return is_cancelled(c);
}

typedef void (*task_fn)(void *arg);

#if IGT_HAVE_THREADS
typedef struct { task_fn fn; void *arg; } task_t;
static void *task_main(void *p) {
    task_t *t = p;
    t->fn(t->arg);
    return NULL;
}
#endif

/* fn(args[t]) for t = 0..n-1, task 0 on the calling thread; waits for all.
 * A thread that cannot be started runs its task here instead. */
static void run_tasks(uint32_t n, task_fn fn, void *args, size_t arg_size) {
#if IGT_HAVE_THREADS
    pthread_t tid[IGT_MAX_THREADS];
    task_t tasks[IGT_MAX_THREADS];
    int started[IGT_MAX_THREADS] = {0};
    for (uint32_t t = 1; t < n; t++) {
        tasks[t].fn = fn;
        tasks[t].arg = (char *)args + t * arg_size;
        started[t] = pthread_create(&tid[t], NULL, task_main, &tasks[t]) == 0;
    }
    fn(args);
    for (uint32_t t = 1; t < n; t++) {
        if (started[t]) pthread_join(tid[t], NULL);
        else fn((char *)args + t * arg_size);
    }
#else
    for (uint32_t t = 0; t < n; t++) fn((char *)args + t * arg_size);
#endif
}

/* ---- large buffers ---------------------------------------------------------------------- */

/* Tens of megabytes read and written at random (the token stream, sort
 * offsets, grouped classes): on Linux ask for transparent huge pages, or
 * TLB misses and 4 KB page faults take a good part of the build. Only for
 * whole mappings of our own: advising part of one splits it, and mremap
 * then fails on the split. */
static void hint_huge(void *map, size_t bytes) {
#if defined(MADV_HUGEPAGE)
    if (map && bytes >= ((size_t)4 << 20)) (void)madvise(map, bytes, MADV_HUGEPAGE);
#else
    (void)map;
    (void)bytes;
#endif
}

/* Large scratch gets its own anonymous mapping: freed, it goes back to the
 * system at once instead of leaving a hole in the heap (glibc keeps blocks
 * below a threshold that moves up as big blocks are freed, so a growing
 * buffer's old copies stay resident). A 64-byte header holds the size. */
#define BIG_HEADER ((size_t)64)
#define BIG_MAPPED ((size_t)1 << 20)
#if IGT_HAVE_THREADS && defined(MAP_ANONYMOUS)
#define IGT_BIG_MAP 1
#else
#define IGT_BIG_MAP 0
#endif

static void *big_malloc(size_t count, size_t elem) {
    if (elem && count > (SIZE_MAX - BIG_HEADER) / elem) return NULL;
    size_t bytes = count * elem + BIG_HEADER;
    uint8_t *p;
#if IGT_BIG_MAP
    if (bytes >= BIG_MAPPED) {
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        p = m;
        hint_huge(p, bytes);
    } else
#endif
    {
        p = malloc(bytes);
        if (!p) return NULL;
    }
    memcpy(p, &bytes, sizeof bytes);
    return p + BIG_HEADER;
}

static size_t big_size(const void *q) {
    size_t bytes;
    memcpy(&bytes, (const uint8_t *)q - BIG_HEADER, sizeof bytes);
    return bytes;
}

static void big_free(void *q) {
    if (!q) return;
    uint8_t *p = (uint8_t *)q - BIG_HEADER;
#if IGT_BIG_MAP
    if (big_size(q) >= BIG_MAPPED) {
        munmap(p, big_size(q));
        return;
    }
#endif
    free(p);
}

/* Grow a big buffer, keeping its first `keep` bytes (mremap on Linux: no copy). */
static void *big_realloc(void *q, size_t keep, size_t count, size_t elem) {
    if (!q) return big_malloc(count, elem);
    if (elem && count > (SIZE_MAX - BIG_HEADER) / elem) return NULL;
#if IGT_BIG_MAP && defined(MREMAP_MAYMOVE)
    size_t bytes = count * elem + BIG_HEADER, old = big_size(q);
    if (old >= BIG_MAPPED && bytes >= BIG_MAPPED) {
        void *m = mremap((uint8_t *)q - BIG_HEADER, old, bytes, MREMAP_MAYMOVE);
        if (m == MAP_FAILED) return NULL;
        memcpy(m, &bytes, sizeof bytes);
        hint_huge(m, bytes);
        return (uint8_t *)m + BIG_HEADER;
    }
#endif
    void *n = big_malloc(count, elem);
    if (!n) return NULL;
    memcpy(n, q, keep);
    big_free(q);
    return n;
}

/* ---- growable arrays ------------------------------------------------------------------ */

typedef struct {
    uint32_t *v;
    size_t n, cap;
} vec32;

static int vec_reserve(vec32 *a, size_t extra) {
    return igt__grow((void **)&a->v, &a->cap, a->n + extra, sizeof *a->v, 1024);
}

/* ---- the token stream ----------------------------------------------------------------- */

/* A chunk of the stream: segments of `window` context ids and their tokens.
 * Tokens are uint16 (vocab_size <= 65535: ids and padding fit) or uint32. */
typedef struct {
    void *tok;
    uint64_t n_tok, cap_tok;
    uint64_t *seg;              /* start of each segment, ascending */
    uint64_t n_seg, cap_seg;
    uint64_t n;                 /* instances: n_tok - window * n_seg */
} chunk_t;

static ALWAYS_INLINE uint32_t tok_at(const void *tok, int wide, uint64_t p) {
    return wide ? ((const uint32_t *)tok)[p] : ((const uint16_t *)tok)[p];
}

static ALWAYS_INLINE void tok_put(void *tok, int wide, uint64_t p, uint32_t v) {
    if (wide) ((uint32_t *)tok)[p] = v;
    else ((uint16_t *)tok)[p] = (uint16_t)v;
}

static void chunk_free(chunk_t *c) {
    big_free(c->tok);
    free(c->seg);
    memset(c, 0, sizeof *c);
}

/* Each instance p of a chunk, in order. */
#define FOR_EACH_INSTANCE(c, F, p)                                                      \
    for (uint64_t s_ = 0; s_ < (c)->n_seg; s_++)                                        \
        for (uint64_t p = (c)->seg[s_] + (F),                                           \
                      e_ = s_ + 1 < (c)->n_seg ? (c)->seg[s_ + 1] : (c)->n_tok;         \
             p < e_; p++)

/* ---- the builder ------------------------------------------------------------------------ */

typedef struct {
    uint64_t offset, n_tok, n_seg, n;
    uint64_t checksum;
} raw_chunk;                    /* a chunk spilled to the raw store */

typedef struct {
    igt__run *v;
    size_t n, cap;
} run_vec;

static igt_status push_run(run_vec *rv, const igt__run *run, igt_error *err) {
    if (!igt__grow((void **)&rv->v, &rv->cap, rv->n + 1, sizeof *rv->v, 16))
        return igt__fail(err, OLIF_ERR_NOMEM, "out of memory (runs)");
    rv->v[rv->n++] = *run;
    return OLIF_OK;
}

struct igt_builder {
    igt_config cfg;
    uint32_t F, V;
    int wide;                   /* tokens stored as uint32 */
    chunk_t cur;                /* the chunk being filled */
    uint64_t n;                 /* instances added */
    /* statistics of the chunks closed so far (close_chunk) */
    uint64_t *gcount;           /* per class id */
    uint32_t *crank;            /* first-seen rank per class id, UNSEEN */
    uint32_t *rank_to_class;
    uint32_t n_classes;
    uint32_t *vrank[IGT_MAX_WINDOW];  /* first-appearance rank per value, per position */
    uint32_t nvals[IGT_MAX_WINDOW];
    /* options */
    uint64_t mem_limit;
    char *tmpdir;
    uint32_t threads;
    /* spilling (memory limit) */
    uint64_t chunk_cap;         /* tokens a chunk may hold; 0: unbounded */
    igt__store **stores;        /* every temporary file, closed with the builder */
    size_t n_stores, cap_stores;
    igt__store *raw;            /* spilled chunks */
    raw_chunk *raws;
    size_t n_raws, cap_raws;
    igt__store *pair_store[IGT_MAX_THREADS];
    run_vec pair_runs[IGT_MAX_WINDOW];
    int consumed, broken;
    igt_error broken_err;       /* why a failed spill left the builder unusable */
};

void igt_config_init(igt_config *cfg, uint32_t vocab_size) {
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    cfg->window = 4;
    cfg->vocab_size = vocab_size;
    cfg->order = IGT_ORDER_GAIN_RATIO;
    for (uint32_t i = 0; i < IGT_MAX_WINDOW; i++) cfg->permutation[i] = i;
    cfg->top_k = 0;
}

static igt_status check_config(const igt_config *cfg, igt_error *err) {
    if (!cfg) return igt__fail(err, OLIF_ERR_ARG, "config is NULL");
    if (cfg->window < 1 || cfg->window > IGT_MAX_WINDOW)
        return igt__fail(err, OLIF_ERR_ARG, "window %u out of range 1..%u", cfg->window,
                         IGT_MAX_WINDOW);
    if (cfg->vocab_size < 1 || cfg->vocab_size >= IGT_MAX_VOCAB)
        return igt__fail(err, OLIF_ERR_ARG, "vocab_size %u out of range 1..%u", cfg->vocab_size,
                         IGT_MAX_VOCAB - 1);
    if (cfg->order > IGT_ORDER_EXPLICIT)
        return igt__fail(err, OLIF_ERR_ARG, "unknown level order %u", cfg->order);
    if (cfg->order == IGT_ORDER_EXPLICIT) {
        uint32_t seen = 0;
        for (uint32_t i = 0; i < cfg->window; i++) {
            uint32_t p = cfg->permutation[i];
            if (p >= cfg->window || (seen & (1u << p)))
                return igt__fail(err, OLIF_ERR_ARG,
                                 "permutation is not a permutation of 0..%u (entry %u = %u)",
                                 cfg->window - 1, i, p);
            seen |= 1u << p;
        }
    }
    if (memchr(cfg->tokenizer_name, 0, IGT_TOKENIZER_NAME_MAX) == NULL)
        return igt__fail(err, OLIF_ERR_ARG, "tokenizer_name is not NUL-terminated");
    return OLIF_OK;
}

igt_status igt_builder_new(const igt_config *cfg, igt_builder **out, igt_error *err) {
    igt__clear_error(err);
    if (!out) return igt__fail(err, OLIF_ERR_ARG, "out is NULL");
    *out = NULL;
    igt_status st = check_config(cfg, err);
    if (st) return st;
    igt_builder *b = calloc(1, sizeof *b);
    if (!b) return igt__fail(err, OLIF_ERR_NOMEM, "cannot allocate builder");
    b->cfg = *cfg;
    b->F = cfg->window;
    b->V = cfg->vocab_size;
    b->wide = cfg->vocab_size > 0xFFFFu;
    b->threads = 1;
    *out = b;
    return OLIF_OK;
}

static void close_stores(igt_builder *b) {
    for (size_t i = 0; i < b->n_stores; i++) igt__store_close(b->stores[i]);
    free(b->stores);
    b->stores = NULL;
    b->n_stores = b->cap_stores = 0;
    b->raw = NULL;
    memset(b->pair_store, 0, sizeof b->pair_store);
}

static void free_stats(igt_builder *b) {
    free(b->gcount);
    free(b->crank);
    free(b->rank_to_class);
    b->gcount = NULL;
    b->crank = b->rank_to_class = NULL;
    for (uint32_t j = 0; j < IGT_MAX_WINDOW; j++) {
        free(b->vrank[j]);
        b->vrank[j] = NULL;
    }
}

void igt_builder_free(igt_builder *b) {
    if (!b) return;
    chunk_free(&b->cur);
    free_stats(b);
    close_stores(b);
    free(b->raws);
    for (uint32_t j = 0; j < IGT_MAX_WINDOW; j++) free(b->pair_runs[j].v);
    free(b->tmpdir);
    free(b);
}

uint64_t igt_builder_count(const igt_builder *b) { return b ? b->n : 0; }

igt_status igt_builder_set_threads(igt_builder *b, uint32_t threads, igt_error *err) {
    igt__clear_error(err);
    if (!b) return igt__fail(err, OLIF_ERR_ARG, "NULL builder");
    if (threads > IGT_MAX_THREADS)
        return igt__fail(err, OLIF_ERR_ARG, "%u threads, at most %u", threads, IGT_MAX_THREADS);
    if (threads == 0) {
#if IGT_HAVE_THREADS && defined(_SC_NPROCESSORS_ONLN)
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cpus < 1 ? 1 : cpus > (long)IGT_MAX_THREADS ? IGT_MAX_THREADS : (uint32_t)cpus;
#else
        threads = 1;
#endif
    }
#if !IGT_HAVE_THREADS
    threads = 1;
#endif
    b->threads = threads;
    return OLIF_OK;
}

igt_status igt_builder_set_memory_limit(igt_builder *b, uint64_t bytes, const char *tmpdir,
                                        igt_error *err) {
    igt__clear_error(err);
    if (!b) return igt__fail(err, OLIF_ERR_ARG, "NULL builder");
    if (b->consumed) return igt__fail(err, OLIF_ERR_ARG, "builder was already built");
    if (b->n) return igt__fail(err, OLIF_ERR_ARG,
                               "set the memory limit before adding instances (%llu added)",
                               (unsigned long long)b->n);
    if (bytes && bytes < IGT_MIN_MEMORY_LIMIT)
        return igt__fail(err, OLIF_ERR_ARG, "memory limit %llu bytes is below the minimum %u",
                         (unsigned long long)bytes, IGT_MIN_MEMORY_LIMIT);
    const char *dir = tmpdir;
    if (!dir || !*dir) dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    char *copy = NULL;
    if (bytes) {
#if IGT_HAVE_THREADS
        struct stat stt;
        if (stat(dir, &stt) != 0)
            return igt__fail(err, OLIF_ERR_IO, "temporary directory %s: %s", dir, strerror(errno));
        if (!S_ISDIR(stt.st_mode))
            return igt__fail(err, OLIF_ERR_ARG, "temporary directory %s is not a directory", dir);
#endif
        copy = malloc(strlen(dir) + 1);
        if (!copy) return igt__fail(err, OLIF_ERR_NOMEM, "tmpdir");
        strcpy(copy, dir);
    }
    free(b->tmpdir);
    b->tmpdir = copy;
    b->mem_limit = bytes;
    /* per stored token at build time: the token, a sort offset (4) and, in
     * the worst case of one root id, a sort entry (16) */
    b->chunk_cap = bytes ? bytes / ((b->wide ? 4u : 2u) + 20u) : 0;
    if (b->chunk_cap && b->chunk_cap < 4 * (uint64_t)(b->F + 1))
        b->chunk_cap = 4 * (uint64_t)(b->F + 1);
    return OLIF_OK;
}

/* ---- statistics of a chunk -------------------------------------------------------------- */

static igt_status ensure_stats(igt_builder *b, igt_error *err) {
    if (b->gcount) return OLIF_OK;
    const size_t V = b->V;
    b->gcount = igt__calloc(V, sizeof *b->gcount);
    b->crank = igt__malloc(V, sizeof *b->crank);
    b->rank_to_class = igt__malloc(V, sizeof *b->rank_to_class);
    int ok = b->gcount && b->crank && b->rank_to_class;
    for (uint32_t j = 0; ok && j < b->F; j++) {
        b->vrank[j] = igt__malloc(V + 1, sizeof *b->vrank[j]);
        ok = b->vrank[j] != NULL;
        if (ok) memset(b->vrank[j], 0xff, (V + 1) * sizeof *b->vrank[j]);
    }
    if (!ok) {
        free_stats(b);
        return igt__fail(err, OLIF_ERR_NOMEM, "cannot allocate class statistics for %zu ids", V);
    }
    memset(b->crank, 0xff, V * sizeof *b->crank);
    return OLIF_OK;
}

/* Global class counts and first-seen ranks, in instance order. */
static void class_pass(igt_builder *b, const chunk_t *c) {
    const uint32_t F = b->F;
    const int wide = b->wide;
    FOR_EACH_INSTANCE(c, F, p) {
        uint32_t cl = tok_at(c->tok, wide, p);
        b->gcount[cl]++;
        if (b->crank[cl] == UNSEEN) {
            b->crank[cl] = b->n_classes;
            b->rank_to_class[b->n_classes++] = cl;
        }
    }
}

/* Where a position's (value rank, class rank, count) triples go, in
 * ascending (value rank, class rank) order. */
typedef igt_status (*pair_sink)(void *ctx, uint32_t vr, uint32_t cr, uint32_t count,
                                igt_error *err);

/* In-place MSD radix sort of uint32 values below 2^(8*bytes), byte digits
 * from the top; insertion sort for short ranges. */
static void sort_u32(uint32_t *a, size_t n, int shift) {
    while (n >= 32 && shift >= 0) {
        size_t count[256] = {0}, next[256], end[256];
        for (size_t i = 0; i < n; i++) count[(a[i] >> shift) & 0xff]++;
        size_t sum = 0;
        for (int v = 0; v < 256; v++) {
            next[v] = sum;
            sum += count[v];
            end[v] = sum;
        }
        for (int v = 0; v < 256; v++)
            while (next[v] < end[v]) {
                uint32_t x = a[next[v]], d = (x >> shift) & 0xff;
                if (d == (uint32_t)v) {
                    next[v]++;
                } else {
                    a[next[v]] = a[next[d]];
                    a[next[d]++] = x;
                }
            }
        if (shift == 0) return;
        size_t start = 0, big = 0, big_n = 0;
        for (int v = 0; v < 256; v++) {     /* recurse on all but the largest bucket */
            if (count[v] > big_n) {
                big_n = count[v];
                big = start;
            }
            start += count[v];
        }
        start = 0;
        for (int v = 0; v < 256; v++) {
            if (count[v] > 1 && start != big) sort_u32(a + start, count[v], shift - 8);
            start += count[v];
        }
        a += big;
        n = big_n;
        shift -= 8;
    }
    for (size_t i = 1; i < n; i++) {
        uint32_t x = a[i];
        size_t j = i;
        while (j > 0 && a[j - 1] > x) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

static int top_shift(uint32_t max_value) {
    int shift = 0;
    while (shift < 24 && (max_value >> (shift + 8))) shift += 8;
    return shift;
}

/* Scratch of one position's pass; sized for a chunk. */
typedef struct {
    uint32_t *hist;             /* per value rank (V+1) */
    uint32_t *grouped;          /* class ranks grouped by value rank, chunk->n */
    uint32_t *dense;            /* per class rank, zero between uses */
} column_scratch;

/* Position j of a chunk: value ranks (new values get the next rank, in
 * instance order), then the class-rank counts of every value, by a counting
 * sort on the value rank. Emits triples to sink in ascending order. */
static igt_status column_pairs(igt_builder *b, const chunk_t *c, uint32_t j, column_scratch *cs,
                               pair_sink sink, void *ctx, igt_error *err) {
    const uint32_t F = b->F, off = F - j;   /* the value is `off` tokens back */
    const int wide = b->wide;
    uint32_t *vr = b->vrank[j];
    uint32_t nv = b->nvals[j];
    FOR_EACH_INSTANCE(c, F, p) {
        uint32_t v = tok_at(c->tok, wide, p - off);
        if (vr[v] == UNSEEN) vr[v] = nv++;
        cs->hist[vr[v]]++;     /* zero between chunks (reset below) */
    }
    b->nvals[j] = nv;
    uint64_t sum = 0;
    for (uint32_t r = 0; r < nv; r++) {
        uint32_t h = cs->hist[r];
        cs->hist[r] = (uint32_t)sum;
        sum += h;
    }
    FOR_EACH_INSTANCE(c, F, p) {
        uint32_t v = tok_at(c->tok, wide, p - off);
        cs->grouped[cs->hist[vr[v]]++] = b->crank[tok_at(c->tok, wide, p)];
    }
    /* hist[r] is now the end of group r. Per group: count class ranks
     * densely, then put only the distinct ones in order */
    const uint32_t nc = b->n_classes;
    const int shift = top_shift(nc ? nc - 1 : 0);
    uint64_t start = 0;
    igt_status st = OLIF_OK;
    for (uint32_t r = 0; r < nv && !st; r++) {
        uint64_t end = cs->hist[r];
        cs->hist[r] = 0;        /* ready for the next chunk */
        size_t g = (size_t)(end - start);
        uint32_t *a = cs->grouped + start;
        start = end;
        if (g == 0) continue;
        if (g <= 8) {       /* few: sort them (insertion) and count runs */
            sort_u32(a, g, shift);
            for (size_t i = 0; i < g && !st;) {
                size_t e = i + 1;
                while (e < g && a[e] == a[i]) e++;
                st = sink(ctx, r, a[i], (uint32_t)(e - i), err);
                i = e;
            }
            continue;
        }
        size_t d = 0;           /* distinct classes, gathered at the front of a */
        for (size_t i = 0; i < g; i++)
            if (cs->dense[a[i]]++ == 0) a[d++] = a[i];
        if (d > nc / 4 && d > 64) {    /* many: scan the ranks in order */
            for (uint32_t k = 0; k < nc && !st; k++)
                if (cs->dense[k]) {
                    st = sink(ctx, r, k, cs->dense[k], err);
                    cs->dense[k] = 0;
                }
            continue;
        }
        sort_u32(a, d, shift);
        for (size_t i = 0; i < d; i++) {
            if (!st) st = sink(ctx, r, a[i], cs->dense[a[i]], err);
            cs->dense[a[i]] = 0;
        }
    }
    return st;
}

/* Entropy sums of one position from its ascending triples, exactly as TiMBL
 * adds them: per value (first-appearance order) the class terms in
 * first-seen order, p = count / n_v. */
typedef struct {
    uint64_t N;
    double Hj, SI;
    uint32_t cur;               /* value rank of the open group, UNSEEN: none */
    uint32_t *counts;           /* class counts of the open group */
    size_t n_counts, cap;
} entropy_t;

static void entropy_close_group(entropy_t *e) {
    if (e->cur == UNSEEN) return;
    uint64_t nv = 0;
    for (size_t i = 0; i < e->n_counts; i++) nv += e->counts[i];
    double nv_d = (double)nv, inner = 0.0;
    for (size_t i = 0; i < e->n_counts; i++) {
        double p = (double)e->counts[i] / nv_d;
        inner -= p * log2z(p);
    }
    double pv = nv_d / (double)e->N;
    e->Hj += pv * inner;
    e->SI -= pv * log2z(pv);
    e->n_counts = 0;
    e->cur = UNSEEN;
}

static igt_status entropy_sink(void *ctx, uint32_t vr, uint32_t cr, uint32_t count,
                               igt_error *err) {
    entropy_t *e = ctx;
    (void)cr;
    if (vr != e->cur) {
        entropy_close_group(e);
        e->cur = vr;
    }
    if (!igt__grow((void **)&e->counts, &e->cap, e->n_counts + 1, sizeof *e->counts, 256))
        return igt__fail(err, OLIF_ERR_NOMEM, "out of memory (feature statistics)");
    e->counts[e->n_counts++] = count;
    return OLIF_OK;
}

/* ---- pair runs (memory limit): triples as sorted records --------------------------------- */

enum { PAIR_REC = 12, PAIR_KEY = 8 };

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get_be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

typedef struct {
    igt__run_writer w;
    uint8_t buf[PAIR_REC * 256];
    size_t fill;
} pair_writer;

static igt_status pair_writer_sink(void *ctx, uint32_t vr, uint32_t cr, uint32_t count,
                                   igt_error *err) {
    pair_writer *pw = ctx;
    uint8_t *rec = pw->buf + pw->fill * PAIR_REC;
    put_be32(rec, vr);
    put_be32(rec + 4, cr);
    memcpy(rec + 8, &count, 4);
    if (++pw->fill == 256) {
        pw->fill = 0;
        return igt__run_put(&pw->w, pw->buf, 256, err);
    }
    return OLIF_OK;
}

/* ---- appending instances ------------------------------------------------------------------ */

static igt_status spill_chunk(igt_builder *b, igt_error *err);

static igt_status builder_usable(igt_builder *b, igt_error *err) {
    if (b->consumed) return igt__fail(err, OLIF_ERR_ARG, "builder was already built");
    if (b->broken)
        return igt__fail(err, (igt_status)b->broken_err.code, "builder failed earlier: %s",
                         b->broken_err.message);
    return OLIF_OK;
}

static igt_status grow_chunk(igt_builder *b, uint64_t tokens, uint64_t segs, igt_error *err) {
    chunk_t *c = &b->cur;
    const size_t tw = b->wide ? 4 : 2;
    if (c->n_tok + tokens > c->cap_tok) {
        uint64_t cap = c->cap_tok ? c->cap_tok + c->cap_tok / 2 : 1 << 16;
        if (cap < c->n_tok + tokens) cap = c->n_tok + tokens;
        if (b->chunk_cap && cap > b->chunk_cap) cap = b->chunk_cap;
        if (cap < c->n_tok + tokens) cap = c->n_tok + tokens;
        if (cap > SIZE_MAX / tw) return igt__fail(err, OLIF_ERR_NOMEM, "instance buffer too large");
        void *t = big_realloc(c->tok, (size_t)c->n_tok * tw, (size_t)cap, tw);
        if (!t)
            return igt__fail(err, OLIF_ERR_NOMEM, "cannot grow the token buffer to %llu tokens",
                             (unsigned long long)cap);
        c->tok = t;
        c->cap_tok = cap;
    }
    if (c->n_seg + segs > c->cap_seg) {
        uint64_t cap = c->cap_seg ? c->cap_seg + c->cap_seg / 2 : 256;
        if (cap < c->n_seg + segs) cap = c->n_seg + segs;
        uint64_t *s = cap <= SIZE_MAX / 8 ? realloc(c->seg, (size_t)cap * 8) : NULL;
        if (!s) return igt__fail(err, OLIF_ERR_NOMEM, "cannot grow the document index");
        c->seg = s;
        c->cap_seg = cap;
    }
    return OLIF_OK;
}

/* Tokens a chunk may hold: the memory limit's share, and never more than
 * 32-bit offsets address. */
static uint64_t chunk_limit(const igt_builder *b) {
    return b->chunk_cap ? b->chunk_cap : (uint64_t)UINT32_MAX - 1;
}

/* The chunk is full: spill it (memory limit) or refuse. */
static igt_status chunk_full(igt_builder *b, igt_error *err) {
    if (!b->chunk_cap)
        return igt__fail(err, OLIF_ERR_LIMIT,
                         "more than %u tokens in memory; set a memory limit "
                         "(igt_builder_set_memory_limit) to build from disk", UINT32_MAX - 1);
    igt_status st = spill_chunk(b, err);
    if (st) {   /* part of the call's instances are on disk: no way back */
        b->broken = 1;
        b->broken_err.code = (int)st;
        snprintf(b->broken_err.message, sizeof b->broken_err.message, "%s",
                 err ? err->message : "spilling instances failed");
    }
    return st;
}

igt_status igt_builder_add_instances(igt_builder *b, const uint32_t *rows, size_t n,
                                     igt_error *err) {
    igt__clear_error(err);
    if (!b || (!rows && n)) return igt__fail(err, OLIF_ERR_ARG, "NULL builder or rows");
    igt_status st = builder_usable(b, err);
    if (st) return st;
    const uint32_t F = b->F, V = b->V, W = F + 1;
    for (size_t i = 0; i < n; i++) {
        const uint32_t *r = rows + i * (size_t)W;
        for (uint32_t j = 0; j < F; j++)
            if (r[j] > V)
                return igt__fail(err, OLIF_ERR_ARG,
                                 "instance %zu: feature id %u at position %u exceeds vocab_size %u",
                                 i, r[j], j, V);
        if (r[F] >= V)
            return igt__fail(err, OLIF_ERR_ARG,
                             "instance %zu: class id %u is not below vocab_size %u", i, r[F], V);
    }
    if (n > (uint64_t)UINT32_MAX - b->n)
        return igt__fail(err, OLIF_ERR_LIMIT, "more than %u instances", UINT32_MAX);
    const int wide = b->wide;
    const uint64_t limit = chunk_limit(b);
    chunk_t *c = &b->cur;
    for (size_t i = 0; i < n; i++) {
        const uint32_t *r = rows + i * (size_t)W;
        /* continues the stream: the last F tokens are this row's context */
        int cont = c->n_seg > 0;
        for (uint32_t j = 0; cont && j < F; j++)
            cont = tok_at(c->tok, wide, c->n_tok - F + j) == r[j];
        uint64_t need = cont ? 1 : W;
        if (c->n_tok + need > limit) {
            if ((st = chunk_full(b, err)) != OLIF_OK) return st;
            cont = 0;
            need = W;
        }
        if (c->n_tok + need > c->cap_tok || (!cont && c->n_seg == c->cap_seg))
            if ((st = grow_chunk(b, need, 1, err)) != OLIF_OK) return st;
        if (!cont) {
            c->seg[c->n_seg++] = c->n_tok;
            for (uint32_t j = 0; j < F; j++) tok_put(c->tok, wide, c->n_tok++, r[j]);
        }
        tok_put(c->tok, wide, c->n_tok++, r[F]);
        c->n++;
        b->n++;
    }
    return OLIF_OK;
}

igt_status igt_builder_add_document(igt_builder *b, const uint32_t *tokens, size_t n,
                                    igt_error *err) {
    uint64_t start = 0;
    if (n == 0) {
        igt__clear_error(err);
        if (!b) return igt__fail(err, OLIF_ERR_ARG, "NULL builder");
        return builder_usable(b, err);
    }
    return igt_builder_add_documents(b, tokens, n, &start, 1, err);
}

igt_status igt_builder_add_documents(igt_builder *b, const uint32_t *tokens, size_t n_tokens,
                                     const uint64_t *doc_starts, size_t n_docs, igt_error *err) {
    igt__clear_error(err);
    if (!b || (!tokens && n_tokens) || (!doc_starts && n_docs))
        return igt__fail(err, OLIF_ERR_ARG, "NULL builder, tokens or doc_starts");
    igt_status st = builder_usable(b, err);
    if (st) return st;
    const uint32_t F = b->F, V = b->V;
    if (n_docs && doc_starts[0] != 0)
        return igt__fail(err, OLIF_ERR_ARG, "doc_starts[0] must be 0, got %llu",
                         (unsigned long long)doc_starts[0]);
    for (size_t d = 1; d < n_docs; d++)
        if (doc_starts[d] < doc_starts[d - 1] || doc_starts[d] > n_tokens)
            return igt__fail(err, OLIF_ERR_ARG, "doc_starts[%zu] = %llu is out of order or range",
                             d, (unsigned long long)doc_starts[d]);
    if (!n_docs && n_tokens)
        return igt__fail(err, OLIF_ERR_ARG, "tokens given without any document start");
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i] >= V)
            return igt__fail(err, OLIF_ERR_ARG, "token %zu: id %u is not below vocab_size %u", i,
                             tokens[i], V);
    if (n_tokens > (uint64_t)UINT32_MAX - b->n)
        return igt__fail(err, OLIF_ERR_LIMIT, "more than %u instances", UINT32_MAX);
    const int wide = b->wide;
    const uint64_t limit = chunk_limit(b);
    chunk_t *c = &b->cur;
    for (size_t d = 0; d < n_docs; d++) {
        const size_t s0 = (size_t)doc_starts[d];
        size_t s = s0, e = d + 1 < n_docs ? (size_t)doc_starts[d + 1] : n_tokens;
        while (s < e) {     /* a document longer than a chunk goes on in the next */
            if (c->n_tok + F + 1 > limit) {
                if ((st = chunk_full(b, err)) != OLIF_OK) return st;
                continue;
            }
            size_t m = e - s;
            if (c->n_tok + F + m > limit) m = (size_t)(limit - c->n_tok - F);
            if (c->n_tok + F + m > c->cap_tok || c->n_seg == c->cap_seg)
                if ((st = grow_chunk(b, F + m, 1, err)) != OLIF_OK) return st;
            c->seg[c->n_seg++] = c->n_tok;
            for (uint32_t j = 0; j < F; j++) {  /* context: padding, or the tokens before */
                size_t back = F - j;
                tok_put(c->tok, wide, c->n_tok++, s - s0 >= back ? tokens[s - back] : V);
            }
            for (size_t i = s; i < s + m; i++) tok_put(c->tok, wide, c->n_tok++, tokens[i]);
            c->n += m;
            b->n += m;
            s += m;
        }
    }
    return OLIF_OK;
}

/* ---- class ranking (TiMBL's BestTarget) -------------------------------------------------- */

typedef struct {
    const uint64_t *gcount;     /* global count per class id */
    const uint32_t *rank;       /* first-seen rank per class id */
} class_order;

/* 1 if class a (count na) beats class b (count nb). */
static inline int beats(const class_order *o, uint32_t a, uint64_t na, uint32_t b, uint64_t nb) {
    if (na != nb) return na > nb;
    if (o->gcount[a] != o->gcount[b]) return o->gcount[a] > o->gcount[b];
    return o->rank[a] < o->rank[b];
}

typedef struct { uint32_t cls, count; } pair_t;

/* Best first: insertion sort for short lists, merge sort otherwise. */
static void sort_pairs(const class_order *o, pair_t *p, pair_t *tmp, size_t n) {
    if (n < 24) {
        for (size_t i = 1; i < n; i++) {
            pair_t x = p[i];
            size_t j = i;
            while (j > 0 && beats(o, x.cls, x.count, p[j - 1].cls, p[j - 1].count)) {
                p[j] = p[j - 1];
                j--;
            }
            p[j] = x;
        }
        return;
    }
    size_t mid = n / 2;
    sort_pairs(o, p, tmp, mid);
    sort_pairs(o, p + mid, tmp, n - mid);
    size_t i = 0, j = mid, k = 0;
    while (i < mid && j < n)
        tmp[k++] = beats(o, p[j].cls, p[j].count, p[i].cls, p[i].count) ? p[j++] : p[i++];
    while (i < mid) tmp[k++] = p[i++];
    while (j < n) tmp[k++] = p[j++];
    memcpy(p, tmp, n * sizeof *p);
}

typedef struct {
    const class_order *order;
    uint32_t top_k;
    pair_t *scratch2;           /* vocab-sized */
} summarise_ctx;

/* Winner of a distribution given as (class, count) entries, and its top-k
 * pairs (best first) appended to out when top_k > 0. */
static int summarise(const summarise_ctx *s, pair_t *entries, size_t n, uint32_t *win_cls,
                     uint32_t *win_count, uint32_t *n_stored, vec32 *out) {
    const class_order *o = s->order;
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (beats(o, entries[i].cls, entries[i].count, entries[best].cls, entries[best].count))
            best = i;
    *win_cls = entries[best].cls;
    *win_count = entries[best].count;
    *n_stored = 0;
    if (!s->top_k) return 1;
    size_t keep = n < s->top_k ? n : s->top_k;
    pair_t top[8], *src = top;
    if (keep <= 8 && n > keep) {
        /* partial selection: insertion into a keep-sized sorted prefix */
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            pair_t x = entries[i];
            if (m == keep && !beats(o, x.cls, x.count, top[m - 1].cls, top[m - 1].count))
                continue;
            size_t j = m < keep ? m++ : m - 1;
            while (j > 0 && beats(o, x.cls, x.count, top[j - 1].cls, top[j - 1].count)) {
                top[j] = top[j - 1];
                j--;
            }
            top[j] = x;
        }
    } else {
        sort_pairs(o, entries, s->scratch2, n);
        src = entries;
    }
    if (!vec_reserve(out, 2 * keep)) return 0;
    for (size_t i = 0; i < keep; i++) {
        out->v[out->n++] = src[i].cls;
        out->v[out->n++] = src[i].count;
    }
    *n_stored = (uint32_t)keep;
    return 1;
}

/* ---- the tree scan ---------------------------------------------------------------------- */

/* Tree nodes in fixed-size blocks: appending never moves a node, so the
 * arrays never reallocate (a growing array in the heap leaves holes the size
 * of its old copies: 100 MB of heap for 54 MB of nodes at 10M tokens). A
 * node's children are the `nchild` nodes from `cstart` (in the same scan's
 * kept nodes). With top_k, each node's stored classes follow in `pairs`, in
 * node order, as a count and then that many (class, count) pairs. */
typedef struct {
    uint32_t key, cls, win, tot, cstart, nchild;
} node_rec;

#define NODE_BLOCK_BITS 12u
#define NODE_BLOCK ((size_t)1 << NODE_BLOCK_BITS)

typedef struct {
    node_rec **blocks;
    size_t n_blocks, cap_blocks;
    size_t n;                   /* nodes */
    vec32 pairs;                /* per node: n, then n (class, count) pairs */
} nodes_t;

static inline node_rec *node_at(const nodes_t *t, size_t i) {
    return &t->blocks[i >> NODE_BLOCK_BITS][i & (NODE_BLOCK - 1)];
}

static int nodes_push(nodes_t *t, const node_rec *r) {
    if (t->n == t->n_blocks * NODE_BLOCK) {
        if (!igt__grow((void **)&t->blocks, &t->cap_blocks, t->n_blocks + 1, sizeof *t->blocks, 16))
            return 0;
        t->blocks[t->n_blocks] = malloc(NODE_BLOCK * sizeof(node_rec));
        if (!t->blocks[t->n_blocks]) return 0;
        t->n_blocks++;
    }
    *node_at(t, t->n++) = *r;
    return 1;
}

static void nodes_free(nodes_t *t) {
    for (size_t i = 0; i < t->n_blocks; i++) free(t->blocks[i]);
    free(t->blocks);
    free(t->pairs.v);
    memset(t, 0, sizeof *t);
}

/* Empty, keeping the blocks for reuse. */
static void nodes_clear(nodes_t *t) {
    t->n = 0;
    t->pairs.n = 0;
}

/* Class-count accumulator for the open node of one level. */
typedef struct {
    uint32_t *count;            /* per class id, zero outside touched */
    uint32_t *touched;
    size_t n_touched;
    uint32_t total;
    uint32_t key;               /* the open node's id at this level */
} accum_t;

/* The scan visits the trie in sorted order, so nodes close in post-order.
 * A closing node knows its default; its children (closed before it, waiting
 * in pending[level + 1]) are then pruned against it and the survivors are
 * appended to `kept` as one contiguous block. Only kept nodes are stored,
 * plus the pending children of the one open node per level. */
typedef struct {
    uint32_t F, top_k;
    accum_t acc[IGT_MAX_WINDOW];
    nodes_t pending[IGT_MAX_WINDOW];
    nodes_t kept;
    pair_t *scratch, *scratch2;
    summarise_ctx sc;
    uint32_t prev[IGT_MAX_WINDOW];
    uint64_t seen;              /* instances scanned */
    uint32_t root_start, root_n; /* this scan's level-1 block in kept */
} scan_t;

static void scan_free(scan_t *s) {
    for (uint32_t d = 0; d < IGT_MAX_WINDOW; d++) {
        free(s->acc[d].count);
        free(s->acc[d].touched);
        nodes_free(&s->pending[d]);
    }
    nodes_free(&s->kept);
    free(s->scratch);
    free(s->scratch2);
    memset(s, 0, sizeof *s);
}

static int scan_init(scan_t *s, uint32_t F, uint32_t V, uint32_t top_k, const class_order *o) {
    memset(s, 0, sizeof *s);
    s->F = F;
    s->top_k = top_k;
    s->scratch = igt__malloc(V, sizeof *s->scratch);
    s->scratch2 = igt__malloc(V, sizeof *s->scratch2);
    int ok = s->scratch && s->scratch2;
    for (uint32_t d = 0; ok && d < F; d++) {
        s->acc[d].count = igt__calloc(V, sizeof *s->acc[d].count);
        s->acc[d].touched = igt__malloc(V, sizeof *s->acc[d].touched);
        ok = s->acc[d].count && s->acc[d].touched;
    }
    s->sc = (summarise_ctx){o, top_k, s->scratch2};
    return ok;
}

/* Words of a node's stored classes at `at` in a pairs stream. */
static size_t pair_words(const vec32 *pairs, size_t at) { return 1 + 2 * (size_t)pairs->v[at]; }

/* Append node i of src (with its stored classes, at *pair_at) to dst. */
static int nodes_copy(nodes_t *dst, const nodes_t *src, size_t i, size_t *pair_at, int top_k) {
    if (!nodes_push(dst, node_at(src, i))) return 0;
    if (!top_k) return 1;
    size_t words = pair_words(&src->pairs, *pair_at);
    if (!vec_reserve(&dst->pairs, words)) return 0;
    memcpy(dst->pairs.v + dst->pairs.n, src->pairs.v + *pair_at, words * sizeof(uint32_t));
    dst->pairs.n += words;
    *pair_at += words;
    return 1;
}

/* Prune the children waiting in `children` against parent default `pdef`:
 * a child stays if its default differs or it kept children of its own.
 * Survivors go to s->kept as one block; returns its start, count in *n. */
static int flush_children(scan_t *s, nodes_t *children, uint32_t pdef, uint32_t *start,
                          uint32_t *n) {
    *start = (uint32_t)s->kept.n;
    *n = 0;
    size_t pair_at = 0;
    for (size_t i = 0; i < children->n; i++) {
        const node_rec *r = node_at(children, i);
        if (r->cls == pdef && r->nchild == 0) {
            if (s->top_k) pair_at += pair_words(&children->pairs, pair_at);
            continue;
        }
        if (!nodes_copy(&s->kept, children, i, &pair_at, s->top_k != 0)) return 0;
        (*n)++;
    }
    nodes_clear(children);
    return s->kept.n < UINT32_MAX;
}

/* Close the open node of level d: summarise it, prune its children, and
 * append it to the pending children of its parent. */
static int close_node(scan_t *s, uint32_t d) {
    accum_t *a = &s->acc[d];
    nodes_t *p = &s->pending[d];
    size_t n = a->n_touched;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = a->touched[i];
        s->scratch[i].cls = c;
        s->scratch[i].count = a->count[c];
        a->count[c] = 0;
    }
    uint32_t wc, wn, np, cstart = 0, nchild = 0;
    size_t count_at = p->pairs.n;       /* the count goes before the pairs */
    if (s->top_k) {
        if (!vec_reserve(&p->pairs, 1)) return 0;
        p->pairs.n++;
    }
    if (!summarise(&s->sc, s->scratch, n, &wc, &wn, &np, &p->pairs)) return 0;
    if (s->top_k) p->pairs.v[count_at] = np;
    if (d + 1 < s->F && !flush_children(s, &s->pending[d + 1], wc, &cstart, &nchild)) return 0;
    const node_rec rec = {a->key, wc, wn, a->total, cstart, nchild};
    if (!nodes_push(p, &rec)) return 0;
    a->n_touched = 0;
    a->total = 0;
    return 1;
}

/* n instances, rows of F ids in tree order then the class, in sorted order. */
static int scan_rows(scan_t *s, const uint32_t *rows, size_t n) {
    const uint32_t F = s->F, W = F + 1;
    for (size_t i = 0; i < n; i++) {
        const uint32_t *r = rows + i * W;
        uint32_t lcp = 0;
        if (s->seen) {
            while (lcp < F && r[lcp] == s->prev[lcp]) lcp++;
            for (uint32_t d = F; d-- > lcp;)
                if (!close_node(s, d)) return 0;
        }
        for (uint32_t d = lcp; d < F; d++) s->acc[d].key = s->prev[d] = r[d];
        const uint32_t c = r[F];
        for (uint32_t d = 0; d < F; d++) {
            accum_t *a = &s->acc[d];
            if (a->count[c]++ == 0) a->touched[a->n_touched++] = c;
            a->total++;
        }
        s->seen++;
    }
    return 1;
}

/* Close every open node; the level-1 nodes are then pruned against the
 * root's default. */
static int scan_finish(scan_t *s, uint32_t root_cls) {
    if (s->seen)
        for (uint32_t d = s->F; d-- > 0;)
            if (!close_node(s, d)) return 0;
    return flush_children(s, &s->pending[0], root_cls, &s->root_start, &s->root_n);
}

/* ---- sorting a chunk ------------------------------------------------------------------------ */

/* An instance while its root id's instances are sorted: up to `per_key`
 * deeper levels packed into key, most significant first. */
typedef struct {
    uint64_t key;
    uint32_t off, cls;
} entry_t;

typedef struct {
    const void *tok;
    int wide;
    uint32_t F, bits, per_key;  /* bits per id; levels per 64-bit key */
    uint32_t back[IGT_MAX_WINDOW]; /* level d's id is back[d] tokens before the class */
} sort_ctx;

static inline uint64_t pack_levels(const sort_ctx *c, uint32_t off, uint32_t from) {
    uint64_t key = 0;
    uint32_t to = from + c->per_key < c->F ? from + c->per_key : c->F;
    for (uint32_t d = from; d < to; d++)
        key |= (uint64_t)tok_at(c->tok, c->wide, off - c->back[d]) << (64 - c->bits * (d - from + 1));
    return key;
}

/* Entries by key, out of place (tmp holds n): radix passes scatter to
 * independent places, where an in-place sort's swaps would wait on each
 * other. Keys use only their top `bytes` bytes. Large arrays: LSD with
 * 16-bit digits; middling ones: MSD with 8-bit digits; short: insertion. */
static void insertion_entries(entry_t *e, size_t n) {
    for (size_t i = 1; i < n; i++) {
        entry_t x = e[i];
        size_t j = i;
        while (j > 0 && e[j - 1].key > x.key) {
            e[j] = e[j - 1];
            j--;
        }
        e[j] = x;
    }
}

/* MSD on byte `shift`; the result ends up in e. */
static void msd_entries(entry_t *e, entry_t *tmp, size_t n, int shift, int last_shift) {
    while (n >= 48 && shift >= last_shift) {
        size_t count[256] = {0}, next[256];
        for (size_t i = 0; i < n; i++) count[(e[i].key >> shift) & 0xff]++;
        int trivial = 0;
        for (int v = 0; v < 256; v++) trivial |= count[v] == n;
        if (trivial) {
            shift -= 8;
            continue;
        }
        size_t sum = 0;
        for (int v = 0; v < 256; v++) {
            next[v] = sum;
            sum += count[v];
        }
        for (size_t i = 0; i < n; i++) tmp[next[(e[i].key >> shift) & 0xff]++] = e[i];
        memcpy(e, tmp, n * sizeof *e);
        size_t start = 0;
        for (int v = 0; v < 256; v++) {
            if (count[v] > 1) msd_entries(e + start, tmp + start, count[v], shift - 8, last_shift);
            start += count[v];
        }
        return;
    }
    insertion_entries(e, n);
}

static void sort_entries(entry_t *e, entry_t *tmp, size_t n, uint32_t bytes, uint32_t *hist16) {
    if (n < 48) {
        insertion_entries(e, n);
        return;
    }
    if (n < 8192 || bytes < 2) {
        msd_entries(e, tmp, n, 56, 64 - 8 * (int)bytes);
        return;
    }
    /* LSD over 16-bit digits from the lowest used; all histograms in one pass */
    const uint32_t digits = (bytes + 1) / 2;
    const int low = 64 - 16 * (int)digits;
    memset(hist16, 0, (size_t)digits * 65536 * sizeof *hist16);
    for (size_t i = 0; i < n; i++)
        for (uint32_t d = 0; d < digits; d++) hist16[d * 65536 + ((e[i].key >> (low + 16 * d)) & 0xffff)]++;
    entry_t *src = e, *dst = tmp;
    for (uint32_t d = 0; d < digits; d++) {
        uint32_t *h = hist16 + (size_t)d * 65536;
        const int sh = low + 16 * (int)d;
        if (h[(src[0].key >> sh) & 0xffff] == n) continue;  /* one value: nothing to do */
        uint32_t sum = 0;
        for (uint32_t v = 0; v < 65536; v++) {
            uint32_t c = h[v];
            h[v] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) dst[h[(src[i].key >> sh) & 0xffff]++] = src[i];
        entry_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != e) memcpy(e, src, n * sizeof *e);
}

static void sort_by_levels(const sort_ctx *c, entry_t *e, entry_t *tmp, size_t n, uint32_t from,
                           uint32_t *hist16) {
    const uint32_t used = c->bits * (c->F - from < c->per_key ? c->F - from : c->per_key);
    sort_entries(e, tmp, n, (used + 7) / 8, hist16);
    uint32_t next = from + c->per_key;
    if (next >= c->F) return;
    /* entries equal on these levels: sort them by the next ones */
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && e[j].key == e[i].key) j++;
        if (j - i > 1) {
            for (size_t k = i; k < j; k++) e[k].key = pack_levels(c, e[k].off, next);
            sort_by_levels(c, e + i, tmp, j - i, next, hist16);
        }
        i = j;
    }
}

/* What sorted instances are handed to: the scan, or a run of records. */
typedef struct {
    scan_t *scan;               /* in memory */
    igt__run_writer *run;       /* memory limit */
    uint32_t rec_width;         /* bytes per id in a record */
} sink_t;

enum { BATCH = 512 };

static igt_status sink_rows(sink_t *k, uint32_t F, const uint32_t *rows, size_t n,
                            uint8_t *recbuf, igt_error *err) {
    if (k->scan) {
        return scan_rows(k->scan, rows, n) ? OLIF_OK
                                           : igt__fail(err, OLIF_ERR_NOMEM, "out of memory (nodes)");
    }
    const uint32_t W = F + 1, w = k->rec_width;
    for (size_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < W; j++) {
            uint8_t *p = recbuf + (i * W + j) * w;
            uint32_t v = rows[i * W + j];
            if (w == 2) {
                p[0] = (uint8_t)(v >> 8);
                p[1] = (uint8_t)v;
            } else {
                put_be32(p, v);
            }
        }
    return igt__run_put(k->run, recbuf, n, err);
}

/* One task's share of a chunk sort: root ids [lo, hi) */
typedef struct {
    const sort_ctx *sc;
    const uint32_t *order;      /* offsets grouped by root id */
    const uint64_t *start;      /* first offset of each root id in order, V+2 */
    uint32_t lo, hi;
    sink_t sink;
    control_t *ctl;
    int is_main;
    uint64_t progress_base, progress_total;
    const char *phase;
    igt_status st;
    igt_error err;
} sort_task;

/* Buckets above this many instances are first split by their second-level
 * id, so that sort entries (16 bytes) are only ever needed for one
 * (root, second) group at a time instead of a whole frequent root id. */
#define SPLIT_BUCKET ((size_t)1 << 16)

typedef struct {
    entry_t *e, *tmp;
    size_t cap;
    uint32_t *hist16, *rows;
    uint8_t *recbuf;
} sort_scratch;

/* Sort the instances at offs (equal on levels 0..from-1, whose ids are
 * prefix[]) by the remaining levels and hand them to the task's sink. */
static igt_status sort_group(sort_task *t, sort_scratch *ss, const uint32_t *offs, size_t n,
                             uint32_t from, const uint32_t *prefix) {
    const sort_ctx *sc = t->sc;
    const uint32_t F = sc->F, W = F + 1;
    const size_t tw = sc->wide ? 4 : 2;
    if (n > ss->cap) {    /* rare: a (root, second) group above the first size */
        big_free(ss->e);
        big_free(ss->tmp);
        ss->cap = n + n / 2;
        ss->e = big_malloc(ss->cap, sizeof *ss->e);
        ss->tmp = big_malloc(ss->cap, sizeof *ss->tmp);
        if (!ss->e || !ss->tmp) {
            ss->cap = 0;
            return igt__fail(&t->err, OLIF_ERR_NOMEM, "out of memory (sort entries)");
        }
    }
    entry_t *e = ss->e;
    for (size_t i = 0; i < n; i++) {
        if (i + 16 < n)   /* the instances are scattered over the stream */
            IGT_PREFETCH((const char *)sc->tok + (size_t)(offs[i + 16] - F) * tw);
        e[i].off = offs[i];
        e[i].cls = tok_at(sc->tok, sc->wide, offs[i]);
        e[i].key = from < F ? pack_levels(sc, offs[i], from) : 0;
    }
    if (from < F) sort_by_levels(sc, e, ss->tmp, n, from, ss->hist16);
    const int fast = F - from <= sc->per_key;   /* the rest in one key */
    size_t fill = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t *r = ss->rows + fill * W;
        for (uint32_t d = 0; d < from; d++) r[d] = prefix[d];
        if (fast) {
            for (uint32_t d = from; d < F; d++)
                r[d] = (uint32_t)(e[i].key >> (64 - sc->bits * (d - from + 1))) & ((1u << sc->bits) - 1);
        } else {
            for (uint32_t d = from; d < F; d++) r[d] = tok_at(sc->tok, sc->wide, e[i].off - sc->back[d]);
        }
        r[F] = e[i].cls;
        if (++fill == BATCH || i + 1 == n) {
            igt_status st = sink_rows(&t->sink, F, ss->rows, fill, ss->recbuf, &t->err);
            if (st) return st;
            fill = 0;
        }
    }
    return OLIF_OK;
}

static void sort_task_run(void *arg) {
    sort_task *t = arg;
    const sort_ctx *sc = t->sc;
    const uint32_t F = sc->F, W = F + 1, V1 = (uint32_t)(1u << sc->bits);
    size_t biggest = 0;
    for (uint32_t v = t->lo; v < t->hi; v++)
        if (t->start[v + 1] - t->start[v] > biggest) biggest = (size_t)(t->start[v + 1] - t->start[v]);
    sort_scratch ss = {NULL, NULL, 0, igt__malloc(4 * 65536, sizeof(uint32_t)),
                       igt__malloc(BATCH, W * sizeof(uint32_t)), igt__malloc(BATCH, W * 4)};
    const int split = F > 1 && biggest > SPLIT_BUCKET;
    ss.cap = biggest < SPLIT_BUCKET ? biggest : SPLIT_BUCKET;   /* sized once, mostly */
    ss.e = big_malloc(ss.cap ? ss.cap : 1, sizeof *ss.e);
    ss.tmp = big_malloc(ss.cap ? ss.cap : 1, sizeof *ss.tmp);
    uint32_t *split_offs = split ? big_malloc(biggest, sizeof *split_offs) : NULL;
    uint32_t *hist2 = split ? igt__malloc((size_t)V1 + 1, sizeof *hist2) : NULL;
    uint64_t done = 0, next_report = 0, next_poll = 0;
    t->st = OLIF_OK;
    if (!ss.e || !ss.tmp || !ss.hist16 || !ss.rows || !ss.recbuf || (split && (!split_offs || !hist2))) {
        t->st = igt__fail(&t->err, OLIF_ERR_NOMEM, "out of memory (sort)");
        goto out;
    }
    for (uint32_t v = t->lo; v < t->hi && !t->st; v++) {
        size_t n = (size_t)(t->start[v + 1] - t->start[v]);
        if (!n) continue;
        const uint32_t *offs = t->order + t->start[v];
        uint32_t prefix[2] = {v, 0};
        if (n <= SPLIT_BUCKET || F == 1) {
            t->st = sort_group(t, &ss, offs, n, 1, prefix);
        } else {
            /* counting sort by the second level's id, then each group */
            memset(hist2, 0, ((size_t)V1 + 1) * sizeof *hist2);
            for (size_t i = 0; i < n; i++) hist2[tok_at(sc->tok, sc->wide, offs[i] - sc->back[1]) + 1]++;
            for (uint32_t k = 1; k <= V1; k++) hist2[k] += hist2[k - 1];
            for (size_t i = 0; i < n; i++)
                split_offs[hist2[tok_at(sc->tok, sc->wide, offs[i] - sc->back[1])]++] = offs[i];
            /* hist2[k] is now the end of group k */
            size_t a = 0;
            for (uint32_t k = 0; k < V1 && a < n && !t->st; k++) {
                size_t z = hist2[k];
                if (z > a) {
                    prefix[1] = k;
                    t->st = sort_group(t, &ss, split_offs + a, z - a, 2, prefix);
                }
                a = z;
            }
        }
        done += n;
        if (done >= next_poll) {
            next_poll = done + (1u << 16);
            if (t->is_main && done >= next_report) {
                next_report = done + (1u << 20);
                report(t->ctl, t->phase, t->progress_base + done, t->progress_total);
            }
            if (!t->st && is_cancelled(t->ctl)) t->st = igt__fail(&t->err, OLIF_ERR_CANCELLED, "build cancelled");
        }
    }
out:
    big_free(ss.e);
    big_free(ss.tmp);
    free(ss.hist16);
    free(ss.rows);
    free(ss.recbuf);
    big_free(split_offs);
    free(hist2);
}

/* Split root ids 0..V into n ranges of about equal instance counts. */
static void split_roots(const uint64_t *start, uint32_t V, uint32_t n, uint32_t *bounds) {
    const uint64_t total = start[V + 1];
    bounds[0] = 0;
    uint32_t v = 0;
    for (uint32_t t = 1; t < n; t++) {
        uint64_t want = total * t / n;
        while (v <= V && start[v] < want) v++;
        bounds[t] = v;
    }
    bounds[n] = V + 1;
}

/* Sort a chunk in tree order and hand its instances, per task range of
 * root ids, to sinks[t]. */
static igt_status sort_chunk(igt_builder *b, const chunk_t *c, const uint32_t *perm,
                             uint32_t n_tasks, sink_t *sinks, control_t *ctl,
                             const char *phase, uint64_t progress_base, uint64_t progress_total,
                             uint32_t *scratch, igt_error *err) {
    const uint32_t F = b->F, V = b->V;
    sort_ctx sc;
    memset(&sc, 0, sizeof sc);
    sc.tok = c->tok;
    sc.wide = b->wide;
    sc.F = F;
    sc.bits = 1;
    while (sc.bits < 32 && (V >> sc.bits)) sc.bits++;   /* bits to hold 0..V */
    sc.per_key = 64 / sc.bits;
    for (uint32_t d = 0; d < F; d++) sc.back[d] = F - perm[d];
    igt_status st = OLIF_OK;
    uint64_t *start = igt__calloc((size_t)V + 2, sizeof *start);
    uint32_t *order = scratch ? scratch : big_malloc((size_t)c->n, sizeof *order);
    sort_task *tasks = calloc(n_tasks, sizeof *tasks);
    if (!start || !order || !tasks) NOMEM("sort offsets");
    FOR_EACH_INSTANCE(c, F, p) start[tok_at(c->tok, b->wide, p - sc.back[0]) + 1]++;
    for (uint32_t v = 1; v <= V + 1; v++) start[v] += start[v - 1];
    {
        uint64_t *fill = igt__malloc((size_t)V + 1, sizeof *fill);
        if (!fill) NOMEM("sort offsets");
        memcpy(fill, start, ((size_t)V + 1) * sizeof *fill);
        FOR_EACH_INSTANCE(c, F, p) order[fill[tok_at(c->tok, b->wide, p - sc.back[0])]++] = (uint32_t)p;
        free(fill);
    }
    uint32_t bounds[IGT_MAX_THREADS + 1];
    split_roots(start, V, n_tasks, bounds);
    for (uint32_t t = 0; t < n_tasks; t++) {
        tasks[t] = (sort_task){&sc, order, start, bounds[t], bounds[t + 1], sinks[t], ctl, t == 0,
                               progress_base, progress_total, phase, OLIF_OK, {0, ""}};
    }
    run_tasks(n_tasks, sort_task_run, tasks, sizeof *tasks);
    for (uint32_t t = 0; t < n_tasks && !st; t++)
        if (tasks[t].st) {
            st = tasks[t].st;
            if (err) *err = tasks[t].err;
        }
done:
    free(start);
    if (order != scratch) big_free(order);
    free(tasks);
    return st;
}

/* ---- feature weights ------------------------------------------------------------------------- */

typedef struct {
    igt_builder *b;
    const chunk_t *c;
    uint32_t first, step;       /* positions first, first+step, ... */
    column_scratch cs;
    entropy_t *ent;             /* in memory: one per position */
    pair_writer *pw;            /* memory limit: this task's run writer */
    igt__store *store;
    igt_status st;
    igt_error err;
} column_task;

static void column_task_run(void *arg) {
    column_task *t = arg;
    igt_builder *b = t->b;
    t->st = OLIF_OK;
    for (uint32_t j = t->first; j < b->F && !t->st; j += t->step) {
        if (t->ent) {
            t->st = column_pairs(b, t->c, j, &t->cs, entropy_sink, &t->ent[j], &t->err);
            continue;
        }
        igt__run run;
        t->pw->fill = 0;
        t->st = igt__run_begin(&t->pw->w, t->store, PAIR_REC, PAIR_KEY, &t->err);
        if (!t->st) t->st = column_pairs(b, t->c, j, &t->cs, pair_writer_sink, t->pw, &t->err);
        if (!t->st && t->pw->fill) t->st = igt__run_put(&t->pw->w, t->pw->buf, t->pw->fill, &t->err);
        if (!t->st) t->st = igt__run_end(&t->pw->w, &run, &t->err);
        else igt__run_abandon(&t->pw->w);
        run_vec *rv = &b->pair_runs[j];     /* each position belongs to one task */
        if (!t->st) t->st = push_run(rv, &run, &t->err);
    }
}

static igt_status add_store(igt_builder *b, igt__store **out, igt_error *err);

/* Statistics of a chunk: classes, then every position's counts, to the
 * entropy sums (ent, in memory) or to one sorted run per position. */
static igt_status close_chunk_stats(igt_builder *b, const chunk_t *c, entropy_t *ent,
                                    uint32_t *scratch, igt_error *err) {
    igt_status st = ensure_stats(b, err);
    if (st) return st;
    class_pass(b, c);
    uint32_t T = b->threads < b->F ? b->threads : b->F;
    column_task tasks[IGT_MAX_THREADS];
    pair_writer *pws = NULL;
    memset(tasks, 0, sizeof tasks);
    if (!ent) {
        pws = calloc(T, sizeof *pws);
        if (!pws) return igt__fail(err, OLIF_ERR_NOMEM, "out of memory (runs)");
    }
    for (uint32_t t = 0; t < T && !st; t++) {
        column_task *k = &tasks[t];
        k->b = b;
        k->c = c;
        k->first = t;
        k->step = T;
        k->ent = ent;
        k->pw = pws ? &pws[t] : NULL;
        k->cs.hist = igt__calloc((size_t)b->V + 1, sizeof *k->cs.hist);
        /* task 0 may borrow the caller's chunk-sized buffer */
        k->cs.grouped = t == 0 && scratch ? scratch : big_malloc((size_t)c->n, sizeof *k->cs.grouped);
        k->cs.dense = igt__calloc(b->V, sizeof *k->cs.dense);
        if (!k->cs.hist || !k->cs.grouped || !k->cs.dense) st = igt__fail(err, OLIF_ERR_NOMEM, "out of memory (feature statistics)");
        if (!st && !ent) {
            if (!b->pair_store[t]) st = add_store(b, &b->pair_store[t], err);
            k->store = b->pair_store[t];
        }
    }
    if (!st) {
        run_tasks(T, column_task_run, tasks, sizeof tasks[0]);
        for (uint32_t t = 0; t < T && !st; t++)
            if (tasks[t].st) {
                st = tasks[t].st;
                if (err) *err = tasks[t].err;
            }
    }
    for (uint32_t t = 0; t < T; t++) {
        free(tasks[t].cs.hist);
        if (!(t == 0 && scratch)) big_free(tasks[t].cs.grouped);
        free(tasks[t].cs.dense);
    }
    free(pws);
    return st;
}

/* Gain ratio and information gain of every position from its entropy sums. */
static void finish_weights(const igt_builder *b, entropy_t *ent, double *gr, double *ig) {
    const uint64_t N = b->n;
    double H = 0.0;
    for (uint32_t r = 0; r < b->n_classes; r++) {
        double p = (double)b->gcount[b->rank_to_class[r]] / (double)N;
        H -= p * log2z(p);
    }
    for (uint32_t j = 0; j < b->F; j++) {
        entropy_close_group(&ent[j]);
        double gain = H - ent[j].Hj;
        if (gain < 0.0) gain = 0.0;
        ig[j] = gain;
        gr[j] = ent[j].SI < DBL_EPSILON ? 0.0 : gain / ent[j].SI;
    }
}

/* ---- spilling --------------------------------------------------------------------------------- */

static igt_status add_store(igt_builder *b, igt__store **out, igt_error *err) {
    if (!igt__grow((void **)&b->stores, &b->cap_stores, b->n_stores + 1, sizeof *b->stores, 8))
        return igt__fail(err, OLIF_ERR_NOMEM, "out of memory (stores)");
    igt_status st = igt__store_open(b->tmpdir, out, err);
    if (!st) b->stores[b->n_stores++] = *out;
    return st;
}

static void drop_store(igt_builder *b, igt__store *s) {
    for (size_t i = 0; i < b->n_stores; i++)
        if (b->stores[i] == s) {
            igt__store_close(s);
            b->stores[i] = b->stores[--b->n_stores];
            return;
        }
}

/* The current chunk to disk: its statistics as pair runs, its tokens raw. */
static igt_status spill_chunk(igt_builder *b, igt_error *err) {
    chunk_t *c = &b->cur;
    if (c->n == 0) return OLIF_OK;
    igt_status st = close_chunk_stats(b, c, NULL, NULL, err);
    if (st) return st;
    if (!b->raw && (st = add_store(b, &b->raw, err)) != OLIF_OK) return st;
    if (!igt__grow((void **)&b->raws, &b->cap_raws, b->n_raws + 1, sizeof *b->raws, 16))
        return igt__fail(err, OLIF_ERR_NOMEM, "out of memory (chunks)");
    const size_t tw = b->wide ? 4 : 2;
    raw_chunk rc = {igt__store_size(b->raw), c->n_tok, c->n_seg, c->n, 0};
    igt__hasher h;
    igt__hash_init(&h);
    igt__hash_update(&h, c->tok, (size_t)c->n_tok * tw);
    igt__hash_update(&h, (const uint8_t *)c->seg, (size_t)c->n_seg * 8);
    rc.checksum = igt__hash_final(&h);
    st = igt__store_append(b->raw, c->tok, (size_t)c->n_tok * tw, err);
    if (!st) st = igt__store_append(b->raw, c->seg, (size_t)c->n_seg * 8, err);
    if (st) return st;
    b->raws[b->n_raws++] = rc;
    c->n_tok = c->n_seg = c->n = 0;
    return OLIF_OK;
}

/* A spilled chunk back in memory, checked: checksum, segments, ids. */
static igt_status read_chunk(igt_builder *b, const raw_chunk *rc, chunk_t *c, igt_error *err) {
    const size_t tw = b->wide ? 4 : 2;
    const uint32_t F = b->F, V = b->V;
    memset(c, 0, sizeof *c);
    c->tok = big_malloc((size_t)rc->n_tok, tw);
    c->seg = igt__malloc((size_t)rc->n_seg, 8);
    if (!c->tok || !c->seg) {
        chunk_free(c);
        return igt__fail(err, OLIF_ERR_NOMEM, "cannot read back a chunk of %llu tokens",
                         (unsigned long long)rc->n_tok);
    }
    igt_status st = igt__store_sync(b->raw, err);
    if (!st) st = igt__store_read(b->raw, rc->offset, c->tok, (size_t)rc->n_tok * tw, err);
    if (!st) st = igt__store_read(b->raw, rc->offset + rc->n_tok * tw, c->seg, (size_t)rc->n_seg * 8, err);
    if (st) {
        chunk_free(c);
        return st;
    }
    c->n_tok = c->cap_tok = rc->n_tok;
    c->n_seg = c->cap_seg = rc->n_seg;
    igt__hasher h;
    igt__hash_init(&h);
    igt__hash_update(&h, c->tok, (size_t)c->n_tok * tw);
    igt__hash_update(&h, (const uint8_t *)c->seg, (size_t)c->n_seg * 8);
    uint64_t n = 0;
    int ok = igt__hash_final(&h) == rc->checksum && c->n_seg > 0 && c->seg[0] == 0;
    for (uint64_t s = 0; ok && s < c->n_seg; s++) {
        uint64_t a = c->seg[s], z = s + 1 < c->n_seg ? c->seg[s + 1] : c->n_tok;
        ok = z > a + F && z <= c->n_tok;
        for (uint64_t p = a; ok && p < z; p++)
            ok = tok_at(c->tok, b->wide, p) < (p < a + F ? V + 1 : V);
        n += z - a - F;
    }
    if (!ok || n != rc->n) {
        chunk_free(c);
        return igt__fail(err, OLIF_ERR_IO, "temporary file damaged: a spilled chunk fails its checks");
    }
    c->n = n;
    return OLIF_OK;
}

/* Merge groups of runs into single runs until at most fan_in remain. */
static igt_status reduce_runs(igt_builder *b, run_vec *rv, uint32_t fan_in, control_t *ctl,
                              igt_error *err);

static igt_status run_sink(void *ctx, const uint8_t *recs, size_t n, igt_error *err) {
    return igt__run_put((igt__run_writer *)ctx, recs, n, err);
}

static igt_status reduce_runs(igt_builder *b, run_vec *rv, uint32_t fan_in, control_t *ctl,
                              igt_error *err) {
    while (rv->n > fan_in) {
        if (report(ctl, "merging", 0, rv->n)) return igt__fail(err, OLIF_ERR_CANCELLED, "build cancelled");
        igt__store *out = NULL;
        igt_status st = add_store(b, &out, err);
        if (st) return st;
        run_vec next = {NULL, 0, 0};
        next.cap = (rv->n + fan_in - 1) / fan_in;
        next.v = igt__malloc(next.cap, sizeof *next.v);
        if (!next.v) return igt__fail(err, OLIF_ERR_NOMEM, "out of memory (runs)");
        for (size_t i = 0; i < rv->n && !st; i += fan_in) {
            uint32_t k = (uint32_t)(rv->n - i < fan_in ? rv->n - i : fan_in);
            igt__run_writer w;
            st = igt__run_begin(&w, out, rv->v[i].rec_size, rv->v[i].key_size, err);
            for (uint32_t r = 0; r < k && !st; r++) st = igt__store_sync(rv->v[i + r].store, err);
            if (!st) st = igt__merge(rv->v + i, NULL, NULL, k, run_sink, &w, err);
            if (!st) st = igt__run_end(&w, &next.v[next.n++], err);
            else igt__run_abandon(&w);
        }
        if (!st) st = igt__store_sync(out, err);   /* readable for the next pass */
        if (st) {
            free(next.v);
            return st;
        }
        /* the merged-from stores hold nothing still needed, unless they are
         * shared with runs of another kind (pair stores are per thread) */
        igt__store *old[IGT_MAX_THREADS * 2 + 64];
        size_t n_old = 0;
        for (size_t i = 0; i < rv->n; i++) {
            int known = 0;
            for (size_t o = 0; o < n_old; o++) known |= old[o] == rv->v[i].store;
            if (!known && n_old < sizeof old / sizeof *old) old[n_old++] = rv->v[i].store;
        }
        free(rv->v);
        *rv = next;
        for (size_t o = 0; o < n_old; o++) {
            int pair_store = 0;
            for (uint32_t t = 0; t < IGT_MAX_THREADS; t++) pair_store |= b->pair_store[t] == old[o];
            if (!pair_store && old[o] != out) drop_store(b, old[o]);
        }
    }
    return OLIF_OK;
}

/* Pair records of one position merged into the entropy sums (equal keys
 * from different chunks add up). */
typedef struct {
    entropy_t *e;
    uint32_t nvals, n_classes;
    uint32_t vr, cr;
    uint64_t count;
    int open;
} pair_merge;

static igt_status pair_flush(pair_merge *m, igt_error *err) {
    if (!m->open) return OLIF_OK;
    m->open = 0;
    return entropy_sink(m->e, m->vr, m->cr, (uint32_t)m->count, err);
}

static igt_status pair_merge_sink(void *ctx, const uint8_t *recs, size_t n, igt_error *err) {
    pair_merge *m = ctx;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *r = recs + i * PAIR_REC;
        uint32_t vr = get_be32(r), cr = get_be32(r + 4), count;
        memcpy(&count, r + 8, 4);
        if (vr >= m->nvals || cr >= m->n_classes || count == 0)
            return igt__fail(err, OLIF_ERR_IO, "temporary file damaged: feature count out of range");
        if (m->open && vr == m->vr && cr == m->cr) {
            m->count += count;
            continue;
        }
        igt_status st = pair_flush(m, err);
        if (st) return st;
        m->vr = vr;
        m->cr = cr;
        m->count = count;
        m->open = 1;
    }
    return OLIF_OK;
}

/* Instance records merged into a scan. */
typedef struct {
    scan_t *scan;
    uint32_t F, V, w;
    uint32_t *rows;
    control_t *ctl;
    int is_main;
    uint64_t done, total;
} rec_merge;

static igt_status rec_merge_sink(void *ctx, const uint8_t *recs, size_t n, igt_error *err) {
    rec_merge *m = ctx;
    const uint32_t W = m->F + 1, w = m->w;
    for (size_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < W; j++) {
            const uint8_t *p = recs + (i * W + j) * w;
            uint32_t v = w == 2 ? (uint32_t)p[0] << 8 | p[1] : get_be32(p);
            if (v > m->V || (j == m->F && v == m->V))
                return igt__fail(err, OLIF_ERR_IO, "temporary file damaged: id %u out of range", v);
            m->rows[i * W + j] = v;
        }
    if (!scan_rows(m->scan, m->rows, n)) return igt__fail(err, OLIF_ERR_NOMEM, "out of memory (nodes)");
    uint64_t before = m->done;
    m->done += n;
    if ((before >> 20) != (m->done >> 20)) {
        if (m->is_main) report(m->ctl, "building", m->done, m->total);
        if (is_cancelled(m->ctl)) return igt__fail(err, OLIF_ERR_CANCELLED, "build cancelled");
    }
    return OLIF_OK;
}

typedef struct {
    igt_builder *b;
    const run_vec *runs;
    uint32_t lo, hi;            /* root ids */
    rec_merge rm;
    igt_status st;
    igt_error err;
} merge_task;

static void merge_task_run(void *arg) {
    merge_task *t = arg;
    const run_vec *rv = t->runs;
    const uint32_t w = t->rm.w;
    uint64_t *begin = igt__malloc(rv->n, sizeof *begin), *end = igt__malloc(rv->n, sizeof *end);
    t->rm.rows = igt__malloc(IGT__MERGE_BATCH, (t->rm.F + 1) * sizeof *t->rm.rows);
    t->st = OLIF_OK;
    if (!begin || !end || !t->rm.rows) {
        t->st = igt__fail(&t->err, OLIF_ERR_NOMEM, "out of memory (merge)");
        goto out;
    }
    uint8_t lo[4], hi[4];
    for (uint32_t i = 0; i < w; i++) {
        lo[i] = (uint8_t)(t->lo >> (8 * (w - 1 - i)));
        hi[i] = (uint8_t)(t->hi >> (8 * (w - 1 - i)));
    }
    for (size_t r = 0; r < rv->n && !t->st; r++) {
        t->st = igt__run_lower_bound(&rv->v[r], lo, w, &begin[r], &t->err);
        if (!t->st) {
            if (t->hi > t->b->V) end[r] = rv->v[r].count;
            else t->st = igt__run_lower_bound(&rv->v[r], hi, w, &end[r], &t->err);
        }
    }
    if (!t->st) t->st = igt__merge(rv->v, begin, end, (uint32_t)rv->n, rec_merge_sink, &t->rm, &t->err);
out:
    free(begin);
    free(end);
    free(t->rm.rows);
}

/* ---- build ------------------------------------------------------------------------------------ */

typedef struct {
    const scan_t *scans;
    uint32_t n_scans;
    const uint64_t *base;       /* first global kept index of each scan */
    const uint32_t *src;        /* breadth-first position -> global kept index */
    uint32_t root_cls, root_win, root_tot, root_children, root_np;
    const uint32_t *root_pairs;
    const uint32_t *pair_start; /* per global kept index, when top_k */
} layout_ctx;

static uint32_t scan_of(const layout_ctx *c, uint64_t g) {
    uint32_t t = 0;
    while (t + 1 < c->n_scans && c->base[t + 1] <= g) t++;
    return t;
}

static void layout_get(void *ctx, uint32_t i, igt_node *o, uint32_t *scratch) {
    const layout_ctx *c = ctx;
    (void)scratch;
    if (i == 0) {
        o->key = 0;
        o->cls = c->root_cls;
        o->winner = c->root_win;
        o->total = c->root_tot;
        o->n_children = c->root_children;
        o->n_pairs = c->root_np;
        o->pairs = c->root_pairs;
        return;
    }
    uint64_t g = c->src[i];
    uint32_t t = scan_of(c, g);
    const nodes_t *k = &c->scans[t].kept;
    const node_rec *r = node_at(k, (size_t)(g - c->base[t]));
    o->key = r->key;
    o->cls = r->cls;
    o->winner = r->win;
    o->total = r->tot;
    o->n_children = r->nchild;
    if (c->pair_start) {
        o->n_pairs = k->pairs.v[c->pair_start[g]];
        o->pairs = k->pairs.v + c->pair_start[g] + 1;
    } else {
        o->n_pairs = 0;
        o->pairs = NULL;
    }
}

/* Join the scans' partial trees breadth-first (root ids ascending across
 * scans) and encode the model. */
static igt_status layout_model(igt_builder *b, scan_t *scans, uint32_t n_scans,
                               const uint32_t *perm, const double *gr, const double *ig,
                               uint32_t root_cls, uint32_t root_win, const vec32 *root_pairs,
                               uint32_t root_np, igt_model **out, igt_error *err) {
    igt_status st = OLIF_OK;
    uint64_t base[IGT_MAX_THREADS + 1];
    base[0] = 0;
    for (uint32_t t = 0; t < n_scans; t++) base[t + 1] = base[t] + scans[t].kept.n;
    const uint64_t n_nodes = base[n_scans] + 1;
    uint32_t *src = NULL, *pair_start = NULL;
    if (n_nodes >= UINT32_MAX)
        return igt__fail(err, OLIF_ERR_LIMIT, "tree too large: %llu nodes",
                         (unsigned long long)n_nodes);
    src = igt__malloc((size_t)n_nodes, sizeof *src);
    if (!src) NOMEM("layout");
    uint64_t n_pairs = root_np;
    if (b->cfg.top_k) {
        pair_start = igt__malloc((size_t)n_nodes, sizeof *pair_start);
        if (!pair_start) NOMEM("layout");
        for (uint32_t t = 0; t < n_scans; t++) {
            uint64_t at = 0;
            for (size_t j = 0; j < scans[t].kept.n; j++) {   /* pairs are in node order */
                if (at >= UINT32_MAX) {
                    st = igt__fail(err, OLIF_ERR_LIMIT, "tree too large: over 2^32 stored-class words");
                    goto done;
                }
                pair_start[base[t] + j] = (uint32_t)at;
                n_pairs += scans[t].kept.pairs.v[at];
                at += pair_words(&scans[t].kept.pairs, (size_t)at);
            }
        }
    }
    uint64_t next = 1, root_children = 0;
    for (uint32_t t = 0; t < n_scans; t++) {
        for (uint32_t c = 0; c < scans[t].root_n; c++) src[next++] = (uint32_t)(base[t] + scans[t].root_start + c);
        root_children += scans[t].root_n;
    }
    for (uint64_t i = 1; i < n_nodes; i++) {
        if (i >= next) {    /* every kept node hangs under the root: cannot happen */
            st = igt__fail(err, OLIF_ERR_CORRUPT, "internal error: unreachable node %llu",
                           (unsigned long long)i);
            goto done;
        }
        uint64_t g = src[i];
        uint32_t t = 0;
        while (t + 1 < n_scans && base[t + 1] <= g) t++;
        const node_rec *r = node_at(&scans[t].kept, (size_t)(g - base[t]));
        for (uint32_t c = 0; c < r->nchild; c++) src[next++] = (uint32_t)(base[t] + r->cstart + c);
    }
    {
        igt_meta mt;
        memset(&mt, 0, sizeof mt);
        mt.window = b->F;
        mt.vocab_size = b->V;
        mt.order = b->cfg.order;
        mt.top_k = b->cfg.top_k;
        mt.default_class = root_cls;
        memcpy(mt.permutation, perm, sizeof mt.permutation);
        memcpy(mt.gain_ratio, gr, sizeof mt.gain_ratio);
        memcpy(mt.info_gain, ig, sizeof mt.info_gain);
        mt.n_instances = b->n;
        mt.n_classes = b->n_classes;
        memcpy(mt.tokenizer_name, b->cfg.tokenizer_name, IGT_TOKENIZER_NAME_MAX);
        memcpy(mt.tokenizer_digest, b->cfg.tokenizer_digest, IGT_TOKENIZER_DIGEST_SIZE);
        layout_ctx lc = {scans, n_scans, base, src, root_cls, root_win, (uint32_t)b->n,
                         (uint32_t)root_children, root_np, root_pairs->v, pair_start};
        igt_node_source ns = {n_nodes, b->cfg.top_k ? n_pairs : 0, 0, layout_get, &lc};
        st = igt__model_from_nodes(&mt, &ns, out, err);
    }
done:
    free(src);
    free(pair_start);
    return st;
}

/* Level order from the weights: descending, leftmost first on ties. */
static void level_order(const igt_builder *b, const double *gr, const double *ig, uint32_t *perm) {
    const uint32_t F = b->F;
    if (b->cfg.order == IGT_ORDER_EXPLICIT) {
        memcpy(perm, b->cfg.permutation, IGT_MAX_WINDOW * sizeof *perm);
    } else {
        const double *w = b->cfg.order == IGT_ORDER_INFO_GAIN ? ig : gr;
        uint32_t used = 0;
        for (uint32_t d = 0; d < F; d++) {
            int best = -1;
            for (uint32_t j = 0; j < F; j++)    /* strict >: leftmost wins ties */
                if (!(used & (1u << j)) && (best < 0 || w[j] > w[best])) best = (int)j;
            perm[d] = (uint32_t)best;
            used |= 1u << best;
        }
    }
    for (uint32_t d = F; d < IGT_MAX_WINDOW; d++) perm[d] = d;
}

/* Runs merged at once: a block buffer (64 KB) per run, within the limit. */
static uint32_t merge_fan_in(const igt_builder *b) {
    uint64_t k = b->mem_limit / ((uint64_t)4 << 16);
    return k < 2 ? 2 : k > 256 ? 256 : (uint32_t)k;
}

#define CANCEL_IF(cond)                                                           \
    do {                                                                          \
        if (cond) {                                                               \
            st = igt__fail(err, OLIF_ERR_CANCELLED, "build cancelled");            \
            goto done;                                                            \
        }                                                                         \
    } while (0)

/* Memory limit, steps 1-2: every chunk is on disk with its pair runs; merge
 * each position's runs into its entropy sums. */
static igt_status weights_from_runs(igt_builder *b, entropy_t *ent, control_t *ctl,
                                    igt_error *err) {
    igt_status st = spill_chunk(b, err);    /* the tail, so that every chunk is on disk */
    if (st) return st;
    chunk_free(&b->cur);
    for (uint32_t j = 0; j < b->F; j++) {
        CANCEL_IF(report(ctl, "statistics", j, b->F));
        for (uint32_t t = 0; t < IGT_MAX_THREADS && !st; t++)
            if (b->pair_store[t]) st = igt__store_sync(b->pair_store[t], err);
        if (!st) st = reduce_runs(b, &b->pair_runs[j], merge_fan_in(b), ctl, err);
        pair_merge pm = {&ent[j], b->nvals[j], b->n_classes, 0, 0, 0, 0};
        if (!st)
            st = igt__merge(b->pair_runs[j].v, NULL, NULL, (uint32_t)b->pair_runs[j].n,
                            pair_merge_sink, &pm, err);
        if (!st) st = pair_flush(&pm, err);
        if (st) return st;
    }
done:
    return st;
}

/* The root: the global distribution, classes in first-seen order. */
static igt_status root_summary(const igt_builder *b, const class_order *order, uint32_t *cls,
                               uint32_t *win, uint32_t *np, vec32 *pairs, igt_error *err) {
    pair_t *dist = igt__malloc(b->n_classes, sizeof *dist), *tmp = igt__malloc(b->n_classes, sizeof *tmp);
    int ok = dist && tmp;
    for (uint32_t r = 0; ok && r < b->n_classes; r++) {
        dist[r].cls = b->rank_to_class[r];
        dist[r].count = (uint32_t)b->gcount[b->rank_to_class[r]];
    }
    summarise_ctx sc = {order, b->cfg.top_k, tmp};
    ok = ok && summarise(&sc, dist, b->n_classes, cls, win, np, pairs);
    free(dist);
    free(tmp);
    return ok ? OLIF_OK : igt__fail(err, OLIF_ERR_NOMEM, "out of memory (root)");
}

/* Threads' root-id ranges for the final merge, balanced on root ids sampled
 * from the runs (64 per run): they only set how evenly the threads share
 * the work, never the tree. */
static igt_status merge_bounds(const igt_builder *b, const run_vec *runs, uint32_t T,
                               uint32_t *bounds, igt_error *err) {
    const uint32_t V = b->V, w = b->wide ? 4 : 2;
    bounds[0] = 0;
    bounds[T] = V + 1;
    if (T == 1) return OLIF_OK;
    uint64_t *start = igt__calloc((size_t)V + 2, sizeof *start);
    if (!start) return igt__fail(err, OLIF_ERR_NOMEM, "out of memory (merge split)");
    igt_status st = OLIF_OK;
    for (size_t r = 0; r < runs->n && !st; r++) {
        const igt__run *run = &runs->v[r];
        uint64_t step = run->count / 64 + 1;
        for (uint64_t i = 0; i < run->count && !st; i += step) {
            uint8_t rec[IGT__MAX_RECORD];
            st = igt__run_record(run, i, rec, err);
            uint32_t v = w == 2 ? (uint32_t)rec[0] << 8 | rec[1] : get_be32(rec);
            if (!st && v <= V) start[v + 1] += step < run->count - i ? step : run->count - i;
        }
    }
    if (!st) {
        for (uint32_t v = 1; v <= V + 1; v++) start[v] += start[v - 1];
        split_roots(start, V, T, bounds);
    }
    free(start);
    return st;
}

/* Memory limit, steps 3-4: read each chunk back, sort it into runs of
 * instance records (one per thread), merge runs down to the fan-in, then
 * merge them straight into the threads' scans, one root-id range each. */
static igt_status scan_from_runs(igt_builder *b, const uint32_t *perm, scan_t *scans,
                                 control_t *ctl, igt_error *err) {
    const uint32_t F = b->F, V = b->V, T = b->threads, w = b->wide ? 4 : 2, R = (F + 1) * w;
    igt__run_writer *writers = calloc(T, sizeof *writers);
    merge_task *mt = calloc(T, sizeof *mt);
    igt__store *stores[IGT_MAX_THREADS];
    sink_t sinks[IGT_MAX_THREADS];
    run_vec runs = {NULL, 0, 0};
    igt_status st = OLIF_OK;
    uint64_t done_n = 0;
    if (!writers || !mt) NOMEM("runs");
    for (uint32_t t = 0; t < T; t++)
        if ((st = add_store(b, &stores[t], err)) != OLIF_OK) goto done;
    for (size_t k = 0; k < b->n_raws; k++) {
        chunk_t c;
        st = read_chunk(b, &b->raws[k], &c, err);
        if (st) goto done;
        uint32_t begun = 0;
        for (; begun < T && !st; begun++) {
            st = igt__run_begin(&writers[begun], stores[begun], R, F * w, err);
            sinks[begun] = (sink_t){NULL, &writers[begun], w};
        }
        if (!st) st = sort_chunk(b, &c, perm, T, sinks, ctl, "sorting", done_n, b->n, NULL, err);
        done_n += c.n;
        chunk_free(&c);
        for (uint32_t t = 0; t < begun; t++) {
            igt__run run;
            if (st) {
                igt__run_abandon(&writers[t]);
            } else if ((st = igt__run_end(&writers[t], &run, err)) == OLIF_OK && run.count) {
                st = push_run(&runs, &run, err);
            }
        }
        if (st) goto done;
    }
    drop_store(b, b->raw);      /* every chunk is in runs now */
    b->raw = NULL;
    for (uint32_t t = 0; t < T && !st; t++) st = igt__store_sync(stores[t], err);
    if (!st) st = reduce_runs(b, &runs, merge_fan_in(b), ctl, err);
    for (size_t r = 0; r < runs.n && !st; r++) st = igt__store_sync(runs.v[r].store, err);
    uint32_t bounds[IGT_MAX_THREADS + 1];
    if (!st) st = merge_bounds(b, &runs, T, bounds, err);
    if (st) goto done;
    CANCEL_IF(report(ctl, "building", 0, b->n));
    for (uint32_t t = 0; t < T; t++) {
        mt[t].b = b;
        mt[t].runs = &runs;
        mt[t].lo = bounds[t];
        mt[t].hi = bounds[t + 1];
        mt[t].rm = (rec_merge){&scans[t], F, V, w, NULL, ctl, t == 0, 0, b->n};
    }
    run_tasks(T, merge_task_run, mt, sizeof *mt);
    for (uint32_t t = 0; t < T && !st; t++)
        if (mt[t].st) {
            st = mt[t].st;
            if (err) *err = mt[t].err;
        }
done:
    free(writers);
    free(mt);
    free(runs.v);
    return st;
}

igt_status igt_builder_build(igt_builder *b, igt_model **out, igt_progress_fn progress,
                             void *user, igt_error *err) {
    igt__clear_error(err);
    if (!b || !out) return igt__fail(err, OLIF_ERR_ARG, "NULL builder or out");
    *out = NULL;
    igt_status st = builder_usable(b, err);
    if (st) return st;
    if (b->n == 0) return igt__fail(err, OLIF_ERR_EMPTY, "no training instances were added");
    b->consumed = 1;

    const uint32_t F = b->F, V = b->V, T = b->threads;
    const int spilled = b->n_raws > 0;
    control_t ctl;
    memset(&ctl, 0, sizeof ctl);
    ctl.fn = progress;
    ctl.user = user;
#if IGT_HAVE_THREADS
    pthread_mutex_init(&ctl.mu, NULL);
#endif
    entropy_t ent[IGT_MAX_WINDOW];
    memset(ent, 0, sizeof ent);
    for (uint32_t j = 0; j < F; j++) {
        ent[j].N = b->n;
        ent[j].cur = UNSEEN;
    }
    scan_t *scans = calloc(T, sizeof *scans);
    uint32_t *chunk_scratch = NULL;     /* grouped classes, then sort offsets */
    vec32 root_pairs = {NULL, 0, 0};
    double gr[IGT_MAX_WINDOW] = {0}, ig[IGT_MAX_WINDOW] = {0};
    uint32_t perm[IGT_MAX_WINDOW], root_cls = 0, root_win = 0, root_np = 0;
    if (!scans) NOMEM("scans");

    /* 1-2: statistics and weights */
    CANCEL_IF(report(&ctl, "statistics", 0, F));
    if (!spilled) {
        chunk_scratch = big_malloc((size_t)b->cur.n, sizeof *chunk_scratch);
        if (!chunk_scratch) NOMEM("statistics");
        st = close_chunk_stats(b, &b->cur, ent, chunk_scratch, err);
    } else {
        st = weights_from_runs(b, ent, &ctl, err);
    }
    if (st) goto done;
    finish_weights(b, ent, gr, ig);
    level_order(b, gr, ig, perm);
    class_order order = {b->gcount, b->crank};
    st = root_summary(b, &order, &root_cls, &root_win, &root_np, &root_pairs, err);
    if (st) goto done;

    /* 3-4: sort and scan */
    for (uint32_t t = 0; t < T; t++)
        if (!scan_init(&scans[t], F, V, b->cfg.top_k, &order)) NOMEM("accumulators");
    CANCEL_IF(report(&ctl, "sorting", 0, 1));
    if (!spilled) {
        sink_t sinks[IGT_MAX_THREADS];
        for (uint32_t t = 0; t < T; t++) sinks[t] = (sink_t){&scans[t], NULL, 0};
        st = sort_chunk(b, &b->cur, perm, T, sinks, &ctl, "building", 0, b->n, chunk_scratch, err);
        chunk_free(&b->cur);
    } else {
        st = scan_from_runs(b, perm, scans, &ctl, err);
    }
    if (st) goto done;
    CANCEL_IF(is_cancelled(&ctl));
    for (uint32_t t = 0; t < T; t++)
        if (!scan_finish(&scans[t], root_cls)) NOMEM("nodes");
    close_stores(b);
    CANCEL_IF(report(&ctl, "writing", 0, 1));
    st = layout_model(b, scans, T, perm, gr, ig, root_cls, root_win, &root_pairs, root_np, out,
                      err);
done:
    if (st && st != OLIF_ERR_CANCELLED && is_cancelled(&ctl))
        st = igt__fail(err, OLIF_ERR_CANCELLED, "build cancelled");
    for (uint32_t j = 0; j < F; j++) free(ent[j].counts);
    if (scans)
        for (uint32_t t = 0; t < T; t++) scan_free(&scans[t]);
    free(scans);
    big_free(chunk_scratch);
    free(root_pairs.v);
    chunk_free(&b->cur);
    free_stats(b);
    close_stores(b);
#if IGT_HAVE_THREADS
    pthread_mutex_destroy(&ctl.mu);
#endif
    if (st) *out = NULL;
    return st;
}
