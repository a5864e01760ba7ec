/*
 * igtree.c — IGTree (TiMBL 6.5 -a1) over token windows. API in igtree.h;
 * semantics in shared/reference/igtree-spec.md.
 *
 * Build: instances are permuted into tree order and radix-sorted, so every
 * tree node is a run of consecutive rows. One scan with one class-count
 * accumulator per level yields the full (unpruned) trie level by level with
 * each node's default class; bottom-up pruning then keeps a node when its
 * default differs from its parent's or it still has children. The kept
 * nodes are laid out breadth-first, siblings sorted by id, so each node's
 * children are one contiguous, binary-searchable range.
 *
 * File: a fixed header followed by 64-byte aligned sections (struct of
 * arrays). A built model is serialised to this image in memory and then
 * parsed by the same validating loader used for files, so there is one
 * representation and one set of checks.
 */
#define _POSIX_C_SOURCE 200809L
#include "igtree.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define IGT_HAVE_MMAP 1
#else
#define IGT_HAVE_MMAP 0
#endif

/* ---- errors ---------------------------------------------------------------- */

const char *igt_status_string(int code) {
    switch (code) {
    case IGT_OK: return "ok";
    case IGT_ERR_ARG: return "invalid argument";
    case IGT_ERR_NOMEM: return "out of memory";
    case IGT_ERR_IO: return "i/o error";
    case IGT_ERR_FOREIGN: return "not an olifant model file";
    case IGT_ERR_VERSION: return "unsupported model format version";
    case IGT_ERR_TRUNCATED: return "model file is truncated";
    case IGT_ERR_CORRUPT: return "model file is corrupt";
    case IGT_ERR_CHECKSUM: return "model file checksum mismatch";
    case IGT_ERR_EMPTY: return "no training instances";
    case IGT_ERR_LIMIT: return "size limit exceeded";
    case IGT_ERR_CANCELLED: return "cancelled";
    default: return "unknown error";
    }
}

static igt_status fail(igt_error *err, igt_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        err->code = (int)code;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

static void clear_error(igt_error *err) {
    if (err) {
        err->code = IGT_OK;
        err->message[0] = '\0';
    }
}

/* ---- file header ----------------------------------------------------------- */

#define IGT_MAGIC "OLIFIGT"     /* 8 bytes with the NUL */
#define IGT_ENDIAN_TAG 0x01020304u
#define IGT_ALIGN 64u

enum { SEC_KEY, SEC_CLASS, SEC_WINNER, SEC_TOTAL, SEC_CHILD, SEC_DIST, SEC_PAIRS,
       SEC_COUNT };

typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t header_size;
    uint32_t endian_tag;
    uint32_t window;
    uint32_t vocab_size;
    uint32_t padding_id;
    uint32_t order;
    uint32_t top_k;
    uint32_t default_class;
    uint32_t reserved0;
    uint32_t permutation[IGT_MAX_WINDOW];
    double gain_ratio[IGT_MAX_WINDOW];
    double info_gain[IGT_MAX_WINDOW];
    uint64_t n_instances;
    uint64_t n_nodes;           /* including the root */
    uint64_t n_pairs;
    uint64_t n_classes;
    uint64_t file_size;
    uint64_t sec_offset[SEC_COUNT];
    uint64_t payload_checksum;
    uint64_t header_checksum;   /* computed with this field zero */
    char tokenizer_name[IGT_TOKENIZER_NAME_MAX];
    uint8_t tokenizer_digest[IGT_TOKENIZER_DIGEST_SIZE];
    uint8_t reserved[64];
} file_header;

_Static_assert(sizeof(file_header) == 640, "file header layout changed");
_Static_assert(sizeof(double) == 8, "need IEEE doubles");

static uint64_t checksum64(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 32;
    }
    for (; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static uint64_t header_checksum(const file_header *h) {
    file_header tmp = *h;
    tmp.header_checksum = 0;
    return checksum64((const uint8_t *)&tmp, sizeof tmp);
}

/* ---- model ----------------------------------------------------------------- */

struct igt_model {
    const uint8_t *data;        /* the serialised image */
    size_t size;
    int mapped;                 /* data is an mmap of size bytes */
    file_header h;              /* copy of the header */
    uint32_t n_nodes;           /* including root */
    const uint32_t *key, *cls, *winner, *total, *child, *dist, *pairs;
    double unmatched[IGT_MAX_WINDOW + 1]; /* distance for each match depth */
};

/* ---- small utilities -------------------------------------------------------- */

static int mul_overflows(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 1;
    *out = a * b;
    return 0;
}

static void *xmalloc(size_t count, size_t elem) {
    size_t bytes;
    if (mul_overflows(count, elem, &bytes)) return NULL;
    return malloc(bytes ? bytes : 1);
}

static void *xcalloc(size_t count, size_t elem) {
    return calloc(count ? count : 1, elem ? elem : 1);
}

static double log2z(double x) { return fabs(x) < DBL_EPSILON ? 0.0 : log2(x); }

/* ---- builder --------------------------------------------------------------- */

struct igt_builder {
    igt_config cfg;
    uint32_t width;             /* window + 1 */
    uint32_t *rows;
    uint64_t n, cap;
    int consumed;
};

void igt_config_init(igt_config *cfg, uint32_t vocab_size) {
    memset(cfg, 0, sizeof *cfg);
    cfg->window = 4;
    cfg->vocab_size = vocab_size;
    cfg->order = IGT_ORDER_GAIN_RATIO;
    for (uint32_t i = 0; i < IGT_MAX_WINDOW; i++) cfg->permutation[i] = i;
    cfg->top_k = 0;
}

static igt_status check_config(const igt_config *cfg, igt_error *err) {
    if (!cfg) return fail(err, IGT_ERR_ARG, "config is NULL");
    if (cfg->window < 1 || cfg->window > IGT_MAX_WINDOW)
        return fail(err, IGT_ERR_ARG, "window %u out of range 1..%u", cfg->window,
                    IGT_MAX_WINDOW);
    if (cfg->vocab_size < 1 || cfg->vocab_size >= IGT_MAX_VOCAB)
        return fail(err, IGT_ERR_ARG, "vocab_size %u out of range 1..%u",
                    cfg->vocab_size, IGT_MAX_VOCAB - 1);
    if (cfg->order > IGT_ORDER_EXPLICIT)
        return fail(err, IGT_ERR_ARG, "unknown level order %u", cfg->order);
    if (cfg->order == IGT_ORDER_EXPLICIT) {
        uint32_t seen = 0;
        for (uint32_t i = 0; i < cfg->window; i++) {
            uint32_t p = cfg->permutation[i];
            if (p >= cfg->window || (seen & (1u << p)))
                return fail(err, IGT_ERR_ARG,
                            "permutation is not a permutation of 0..%u (entry %u = %u)",
                            cfg->window - 1, i, p);
            seen |= 1u << p;
        }
    }
    if (memchr(cfg->tokenizer_name, 0, IGT_TOKENIZER_NAME_MAX) == NULL)
        return fail(err, IGT_ERR_ARG, "tokenizer_name is not NUL-terminated");
    return IGT_OK;
}

igt_status igt_builder_new(const igt_config *cfg, igt_builder **out, igt_error *err) {
    clear_error(err);
    if (!out) return fail(err, IGT_ERR_ARG, "out is NULL");
    *out = NULL;
    igt_status st = check_config(cfg, err);
    if (st) return st;
    igt_builder *b = calloc(1, sizeof *b);
    if (!b) return fail(err, IGT_ERR_NOMEM, "cannot allocate builder");
    b->cfg = *cfg;
    b->width = cfg->window + 1;
    *out = b;
    return IGT_OK;
}

void igt_builder_free(igt_builder *b) {
    if (!b) return;
    free(b->rows);
    free(b);
}

uint64_t igt_builder_count(const igt_builder *b) { return b ? b->n : 0; }

static igt_status reserve_rows(igt_builder *b, uint64_t extra, igt_error *err) {
    if (b->consumed) return fail(err, IGT_ERR_ARG, "builder was already built");
    if (extra > (uint64_t)UINT32_MAX - b->n)
        return fail(err, IGT_ERR_LIMIT, "more than %u instances", UINT32_MAX);
    uint64_t need = b->n + extra;
    if (need <= b->cap) return IGT_OK;
    uint64_t cap = b->cap ? b->cap + b->cap / 2 : 4096;
    if (cap < need) cap = need;
    if (cap > UINT32_MAX) cap = UINT32_MAX;
    size_t bytes;
    if (cap > SIZE_MAX / 4 || mul_overflows((size_t)cap, (size_t)b->width * 4, &bytes))
        return fail(err, IGT_ERR_NOMEM, "instance buffer too large");
    uint32_t *rows = realloc(b->rows, bytes);
    if (!rows)
        return fail(err, IGT_ERR_NOMEM, "cannot grow instance buffer to %llu instances",
                    (unsigned long long)cap);
    b->rows = rows;
    b->cap = cap;
    return IGT_OK;
}

igt_status igt_builder_add_instances(igt_builder *b, const uint32_t *rows, size_t n,
                                     igt_error *err) {
    clear_error(err);
    if (!b || (!rows && n)) return fail(err, IGT_ERR_ARG, "NULL builder or rows");
    const uint32_t F = b->cfg.window, V = b->cfg.vocab_size;
    for (size_t i = 0; i < n; i++) {
        const uint32_t *r = rows + i * (size_t)b->width;
        for (uint32_t j = 0; j < F; j++)
            if (r[j] > V)
                return fail(err, IGT_ERR_ARG,
                            "instance %zu: feature id %u at position %u exceeds vocab_size %u",
                            i, r[j], j, V);
        if (r[F] >= V)
            return fail(err, IGT_ERR_ARG,
                        "instance %zu: class id %u is not below vocab_size %u", i, r[F], V);
    }
    igt_status st = reserve_rows(b, n, err);
    if (st) return st;
    if (n == 0) return IGT_OK;  /* rows and b->rows may be NULL: no memcpy(NULL) */
    memcpy(b->rows + b->n * b->width, rows, n * (size_t)b->width * sizeof *rows);
    b->n += n;
    return IGT_OK;
}

igt_status igt_builder_add_document(igt_builder *b, const uint32_t *tokens, size_t n,
                                    igt_error *err) {
    uint64_t start = 0;
    if (n == 0) {
        clear_error(err);
        return b ? IGT_OK : fail(err, IGT_ERR_ARG, "NULL builder");
    }
    return igt_builder_add_documents(b, tokens, n, &start, 1, err);
}

igt_status igt_builder_add_documents(igt_builder *b, const uint32_t *tokens,
                                     size_t n_tokens, const uint64_t *doc_starts,
                                     size_t n_docs, igt_error *err) {
    clear_error(err);
    if (!b || (!tokens && n_tokens) || (!doc_starts && n_docs))
        return fail(err, IGT_ERR_ARG, "NULL builder, tokens or doc_starts");
    const uint32_t F = b->cfg.window, V = b->cfg.vocab_size, W = b->width;
    if (n_docs && doc_starts[0] != 0)
        return fail(err, IGT_ERR_ARG, "doc_starts[0] must be 0, got %llu",
                    (unsigned long long)doc_starts[0]);
    for (size_t d = 1; d < n_docs; d++)
        if (doc_starts[d] < doc_starts[d - 1] || doc_starts[d] > n_tokens)
            return fail(err, IGT_ERR_ARG, "doc_starts[%zu] = %llu is out of order or range",
                        d, (unsigned long long)doc_starts[d]);
    if (!n_docs && n_tokens)
        return fail(err, IGT_ERR_ARG, "tokens given without any document start");
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i] >= V)
            return fail(err, IGT_ERR_ARG, "token %zu: id %u is not below vocab_size %u", i,
                        tokens[i], V);
    igt_status st = reserve_rows(b, n_tokens, err);
    if (st) return st;
    if (n_tokens == 0) return IGT_OK;   /* only empty documents; b->rows may be NULL */
    uint32_t *out = b->rows + b->n * W;
    for (size_t d = 0; d < n_docs; d++) {
        size_t s = (size_t)doc_starts[d];
        size_t e = d + 1 < n_docs ? (size_t)doc_starts[d + 1] : n_tokens;
        for (size_t i = s; i < e; i++, out += W) {
            for (uint32_t j = 0; j < F; j++) {
                size_t back = F - j;                  /* token i-back */
                out[j] = (i - s >= back) ? tokens[i - back] : V;
            }
            out[F] = tokens[i];
        }
    }
    b->n += n_tokens;
    return IGT_OK;
}

/* ---- in-place radix sort ------------------------------------------------------ */

/* Rows of `width` ids, compared lexicographically on their first `nkeys`. */
static int row_less(const uint32_t *a, const uint32_t *b, uint32_t nkeys) {
    for (uint32_t f = 0; f < nkeys; f++)
        if (a[f] != b[f]) return a[f] < b[f];
    return 0;
}

static void swap_rows(uint32_t *a, uint32_t *b, uint32_t width) {
    for (uint32_t i = 0; i < width; i++) {
        uint32_t t = a[i];
        a[i] = b[i];
        b[i] = t;
    }
}

typedef struct {
    uint32_t width, nkeys;
    size_t *scratch;            /* 3 x 256 counters per digit position */
} rowsort;

/* MSD radix sort in place (American flag sort), byte digits from the most
 * significant byte of the first key; digits shared by every row are
 * skipped without moving anything. No buffer the size of the data. */
static void afsort(const rowsort *s, uint32_t *rows, size_t n, uint32_t digit) {
    const uint32_t W = s->width, ndigits = 4 * s->nkeys;
    while (digit < ndigits) {
        if (n < 32) {
            for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0 && row_less(rows + j * W, rows + (j - 1) * W, s->nkeys); j--)
                    swap_rows(rows + j * W, rows + (j - 1) * W, W);
            return;
        }
        const uint32_t f = digit / 4, shift = 24 - 8 * (digit % 4);
        size_t *count = s->scratch + (size_t)digit * 768, *next = count + 256, *end = count + 512;
        memset(count, 0, 256 * sizeof *count);
        for (size_t i = 0; i < n; i++) count[(rows[i * W + f] >> shift) & 0xff]++;
        int trivial = 0;
        for (int v = 0; v < 256; v++)
            if (count[v] == n) trivial = 1;
        if (trivial) {
            digit++;
            continue;
        }
        size_t sum = 0;
        for (int v = 0; v < 256; v++) {
            next[v] = sum;
            sum += count[v];
            end[v] = sum;
        }
        for (int v = 0; v < 256; v++) {
            while (next[v] < end[v]) {
                uint32_t *r = rows + next[v] * W;
                uint32_t d = (r[f] >> shift) & 0xff;
                if (d == (uint32_t)v) {
                    next[v]++;
                } else {
                    swap_rows(r, rows + next[d] * W, W);
                    next[d]++;
                }
            }
        }
        size_t start = 0;
        for (int v = 0; v < 256; v++) {
            size_t c = count[v];
            if (c > 1) afsort(s, rows + start * W, c, digit + 1);
            start += c;
        }
        return;
    }
}

static int sort_rows(uint32_t *rows, size_t n, uint32_t width, uint32_t nkeys) {
    rowsort s = {width, nkeys, xmalloc((size_t)nkeys * 4 * 768, sizeof(size_t))};
    if (!s.scratch) return 0;
    afsort(&s, rows, n, 0);
    free(s.scratch);
    return 1;
}

/* ---- class ranking (TiMBL's BestTarget) ---------------------------------- */

typedef struct {
    const uint64_t *gcount;     /* global count per class id */
    const uint32_t *rank;       /* first-seen rank per class id */
} class_order;

/* 1 if class a (count na) beats class b (count nb). */
static int beats(const class_order *o, uint32_t a, uint64_t na, uint32_t b, uint64_t nb) {
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

/* ---- growable arrays ------------------------------------------------------- */

typedef struct {
    uint32_t *v;
    size_t n, cap;
} vec32;

static int vec_reserve(vec32 *a, size_t extra) {
    if (a->n + extra <= a->cap) return 1;
    size_t cap = a->cap ? a->cap + a->cap / 2 : 1024;
    if (cap < a->n + extra) cap = a->n + extra;
    uint32_t *v = realloc(a->v, cap * sizeof *v);
    if (!v) return 0;
    a->v = v;
    a->cap = cap;
    return 1;
}

static int vec_push(vec32 *a, uint32_t x) {
    if (a->n == a->cap && !vec_reserve(a, 1)) return 0;
    a->v[a->n++] = x;
    return 1;
}

/* Tree nodes as parallel arrays. A node's children are the `nchild` nodes
 * from `cstart`; its stored classes are pairs[pstart .. pstart + npairs). */
typedef struct {
    vec32 key, cls, win, tot, cstart, nchild, pstart, npairs;
    vec32 pairs;                /* (class, count) interleaved */
} nodes_t;

static void nodes_free(nodes_t *t) {
    free(t->key.v); free(t->cls.v); free(t->win.v); free(t->tot.v);
    free(t->cstart.v); free(t->nchild.v); free(t->pstart.v); free(t->npairs.v);
    free(t->pairs.v);
    memset(t, 0, sizeof *t);
}

static void nodes_clear(nodes_t *t) {
    t->key.n = t->cls.n = t->win.n = t->tot.n = t->cstart.n = t->nchild.n = 0;
    t->pstart.n = t->npairs.n = t->pairs.n = 0;
}

/* Append node i of src (with its stored pairs) to dst. */
static int nodes_copy(nodes_t *dst, const nodes_t *src, size_t i) {
    uint32_t np = src->npairs.v[i];
    if (!vec_push(&dst->key, src->key.v[i]) || !vec_push(&dst->cls, src->cls.v[i]) ||
        !vec_push(&dst->win, src->win.v[i]) || !vec_push(&dst->tot, src->tot.v[i]) ||
        !vec_push(&dst->cstart, src->cstart.v[i]) || !vec_push(&dst->nchild, src->nchild.v[i]) ||
        !vec_push(&dst->pstart, (uint32_t)(dst->pairs.n / 2)) || !vec_push(&dst->npairs, np) ||
        !vec_reserve(&dst->pairs, 2 * (size_t)np))
        return 0;
    if (np)     /* top_k 0: both pair arrays are NULL, and memcpy(NULL, ..., 0) is UB */
        memcpy(dst->pairs.v + dst->pairs.n, src->pairs.v + 2 * (size_t)src->pstart.v[i],
               2 * (size_t)np * sizeof(uint32_t));
    dst->pairs.n += 2 * (size_t)np;
    return 1;
}

/* Class-count accumulator for the open node of one level. */
typedef struct {
    uint32_t *count;            /* per class id, zero outside touched */
    uint32_t *touched;
    size_t n_touched;
    uint32_t total;
    uint32_t key;               /* the open node's id at this level */
} accum_t;

typedef struct {
    const class_order *order;
    uint32_t top_k;
    pair_t *scratch, *scratch2; /* vocab-sized */
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

/* ---- feature weights ------------------------------------------------------ */

/* Gain ratio and information gain of every column, summed in TiMBL's order:
 * values in first-appearance order within the column, classes in first-seen
 * order (only matters for exact ties). */
static igt_status column_weights(const igt_builder *b, const class_order *o,
                                 const uint32_t *rank_to_class, uint64_t n_classes,
                                 double *gr, double *ig, igt_progress_fn progress,
                                 void *user, igt_error *err) {
    const size_t N = (size_t)b->n, W = b->width;
    const uint32_t F = b->cfg.window, V = b->cfg.vocab_size;
    double H = 0.0;
    for (uint64_t r = 0; r < n_classes; r++) {
        double p = (double)o->gcount[rank_to_class[r]] / (double)N;
        H -= p * log2z(p);
    }
    /* (value rank, class rank) per instance; packed into one id when both
     * fit in 16 bits (vocabularies up to 65,536), halving this buffer */
    const int packed = (size_t)V + 1 <= 65536 && n_classes <= 65536;
    const uint32_t kw = packed ? 1 : 2;
    uint32_t *keys = xmalloc(N, kw * sizeof *keys);
    uint32_t *first = xmalloc((size_t)V + 1, sizeof *first);
    if (!keys || !first) {
        free(keys);
        free(first);
        return fail(err, IGT_ERR_NOMEM, "cannot allocate feature statistics for %zu instances", N);
    }
    igt_status st = IGT_OK;
    for (uint32_t j = 0; j < F; j++) {
        if (progress && progress(user, "statistics", j, F)) {
            st = fail(err, IGT_ERR_CANCELLED, "build cancelled");
            break;
        }
        memset(first, 0xff, ((size_t)V + 1) * sizeof *first);
        uint32_t nv = 0;
        for (size_t i = 0; i < N; i++) {
            const uint32_t *r = b->rows + i * W;
            uint32_t v = r[j];
            if (first[v] == UINT32_MAX) first[v] = nv++;
            if (packed) {
                keys[i] = first[v] << 16 | o->rank[r[F]];
            } else {
                keys[2 * i] = first[v];
                keys[2 * i + 1] = o->rank[r[F]];
            }
        }
        if (!sort_rows(keys, N, kw, kw)) {
            st = fail(err, IGT_ERR_NOMEM, "cannot allocate sort scratch");
            break;
        }
#define VALUE_AT(i) (packed ? keys[i] >> 16 : keys[2 * (i)])
#define CLASS_AT(i) (packed ? keys[i] & 0xffff : keys[2 * (i) + 1])
        double Hj = 0.0, SI = 0.0;
        size_t i = 0;
        while (i < N) {
            uint32_t v = VALUE_AT(i);
            size_t e = i;
            while (e < N && VALUE_AT(e) == v) e++;
            double nv_d = (double)(e - i), inner = 0.0;
            for (size_t k = i; k < e;) {
                size_t m = k;
                while (m < e && CLASS_AT(m) == CLASS_AT(k)) m++;
                double p = (double)(m - k) / nv_d;
                inner -= p * log2z(p);
                k = m;
            }
            double pv = nv_d / (double)N;
            Hj += pv * inner;
            SI -= pv * log2z(pv);
            i = e;
        }
#undef VALUE_AT
#undef CLASS_AT
        double gain = H - Hj;
        if (gain < 0.0) gain = 0.0;
        ig[j] = gain;
        gr[j] = SI < DBL_EPSILON ? 0.0 : gain / SI;
    }
    free(keys);
    free(first);
    return st;
}

/* ---- serialisation --------------------------------------------------------- */

static size_t align_up(size_t x) { return (x + IGT_ALIGN - 1) & ~(size_t)(IGT_ALIGN - 1); }

static void section_sizes(const file_header *h, uint64_t size[SEC_COUNT]) {
    uint64_t n = h->n_nodes;
    size[SEC_KEY] = size[SEC_CLASS] = size[SEC_WINNER] = size[SEC_TOTAL] = n * 4;
    size[SEC_CHILD] = (n + 1) * 4;
    size[SEC_DIST] = h->top_k ? (n + 1) * 4 : 0;
    size[SEC_PAIRS] = h->n_pairs * 8;
}

static igt_status parse_image(igt_model *m, uint32_t flags, igt_error *err);

/* ---- build ------------------------------------------------------------------ */

/* The scan visits the trie in sorted order, so nodes close in post-order.
 * A closing node knows its default; its children (closed before it, waiting
 * in pending[level + 1]) are then pruned against it and the survivors are
 * written to `kept` as one contiguous block. Only kept nodes are ever stored,
 * plus the pending children of the one open node per level. */
typedef struct {
    accum_t acc[IGT_MAX_WINDOW];
    nodes_t pending[IGT_MAX_WINDOW + 1];
    nodes_t kept;
    uint64_t *gcount;
    uint32_t *rank, *rank_to_class;
    pair_t *scratch, *scratch2;
    summarise_ctx sc;
} build_state;

static void build_state_free(build_state *s) {
    for (uint32_t d = 0; d < IGT_MAX_WINDOW; d++) {
        free(s->acc[d].count);
        free(s->acc[d].touched);
    }
    for (uint32_t d = 0; d <= IGT_MAX_WINDOW; d++) nodes_free(&s->pending[d]);
    nodes_free(&s->kept);
    free(s->gcount); free(s->rank); free(s->rank_to_class);
    free(s->scratch); free(s->scratch2);
}

/* Prune the children waiting in `children` against parent default `pdef`:
 * a child stays if its default differs or it kept children of its own.
 * Survivors go to s->kept as one block; returns its start, count in *n. */
static int flush_children(build_state *s, nodes_t *children, uint32_t pdef, uint32_t *start,
                          uint32_t *n) {
    *start = (uint32_t)s->kept.key.n;
    *n = 0;
    for (size_t i = 0; i < children->key.n; i++) {
        if (children->cls.v[i] == pdef && children->nchild.v[i] == 0) continue;
        if (!nodes_copy(&s->kept, children, i)) return 0;
        (*n)++;
    }
    nodes_clear(children);
    return s->kept.key.n < UINT32_MAX;
}

/* Close the open node of level d: summarise it, prune its children, and
 * append it to the pending children of its parent. */
static int close_node(build_state *s, uint32_t d, uint32_t F) {
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
    uint32_t pstart = (uint32_t)(p->pairs.n / 2);
    if (!summarise(&s->sc, s->scratch, n, &wc, &wn, &np, &p->pairs)) return 0;
    if (d + 1 < F && !flush_children(s, &s->pending[d + 1], wc, &cstart, &nchild)) return 0;
    if (!vec_push(&p->key, a->key) || !vec_push(&p->cls, wc) || !vec_push(&p->win, wn) ||
        !vec_push(&p->tot, a->total) || !vec_push(&p->cstart, cstart) ||
        !vec_push(&p->nchild, nchild) || !vec_push(&p->pstart, pstart) || !vec_push(&p->npairs, np))
        return 0;
    a->n_touched = 0;
    a->total = 0;
    return 1;
}

#define NOMEM(what) do { st = fail(err, IGT_ERR_NOMEM, "out of memory (%s)", what); goto done; } while (0)
#define CANCEL_IF(cond) do { if (cond) { st = fail(err, IGT_ERR_CANCELLED, "build cancelled"); goto done; } } while (0)

igt_status igt_builder_build(igt_builder *b, igt_model **out, igt_progress_fn progress,
                             void *user, igt_error *err) {
    clear_error(err);
    if (!b || !out) return fail(err, IGT_ERR_ARG, "NULL builder or out");
    *out = NULL;
    if (b->consumed) return fail(err, IGT_ERR_ARG, "builder was already built");
    if (b->n == 0) return fail(err, IGT_ERR_EMPTY, "no training instances were added");
    b->consumed = 1;

    const uint32_t F = b->cfg.window, V = b->cfg.vocab_size, W = b->width;
    const size_t N = (size_t)b->n;
    igt_status st = IGT_OK;
    build_state s;
    memset(&s, 0, sizeof s);
    uint8_t *image = NULL;
    igt_model *m = NULL;

    /* class statistics: global counts and first-seen ranks */
    s.gcount = xcalloc(V, sizeof *s.gcount);
    s.rank = xmalloc(V, sizeof *s.rank);
    s.rank_to_class = xmalloc(V, sizeof *s.rank_to_class);
    if (!s.gcount || !s.rank || !s.rank_to_class) NOMEM("class statistics");
    memset(s.rank, 0xff, (size_t)V * sizeof *s.rank);
    uint64_t n_classes = 0;
    for (size_t i = 0; i < N; i++) {
        uint32_t c = b->rows[i * W + F];
        s.gcount[c]++;
        if (s.rank[c] == UINT32_MAX) {
            s.rank[c] = (uint32_t)n_classes;
            s.rank_to_class[n_classes++] = c;
        }
    }
    class_order order = {s.gcount, s.rank};

    /* level order */
    double gr[IGT_MAX_WINDOW] = {0}, ig[IGT_MAX_WINDOW] = {0};
    st = column_weights(b, &order, s.rank_to_class, n_classes, gr, ig, progress, user, err);
    if (st) goto done;
    uint32_t perm[IGT_MAX_WINDOW];
    if (b->cfg.order == IGT_ORDER_EXPLICIT) {
        memcpy(perm, b->cfg.permutation, sizeof perm);
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

    /* rows into tree order, sorted in place by the permuted features */
    for (size_t i = 0; i < N; i++) {
        uint32_t *r = b->rows + i * W, t[IGT_MAX_WINDOW];
        for (uint32_t d = 0; d < F; d++) t[d] = r[perm[d]];
        memcpy(r, t, F * sizeof *r);
    }
    CANCEL_IF(progress && progress(user, "sorting", 0, 1));
    if (!sort_rows(b->rows, N, W, F)) NOMEM("sort scratch");

    /* one scan: close nodes in post-order, pruning as they close */
    s.scratch = xmalloc(V, sizeof *s.scratch);
    s.scratch2 = xmalloc(V, sizeof *s.scratch2);
    if (!s.scratch || !s.scratch2) NOMEM("scratch");
    s.sc = (summarise_ctx){&order, b->cfg.top_k, s.scratch, s.scratch2};
    for (uint32_t d = 0; d < F; d++) {
        s.acc[d].count = xcalloc(V, sizeof *s.acc[d].count);
        s.acc[d].touched = xmalloc(V, sizeof *s.acc[d].touched);
        if (!s.acc[d].count || !s.acc[d].touched) NOMEM("accumulators");
    }
    const size_t report_every = (size_t)1 << 20;
    for (size_t i = 0; i < N; i++) {
        const uint32_t *r = b->rows + i * W, *prev = i ? r - W : NULL;
        uint32_t lcp = 0;
        if (prev) {
            while (lcp < F && r[lcp] == prev[lcp]) lcp++;
            for (uint32_t d = F; d-- > lcp;)
                if (!close_node(&s, d, F)) NOMEM("nodes");
        }
        for (uint32_t d = lcp; d < F; d++) s.acc[d].key = r[d];
        uint32_t c = r[F];
        for (uint32_t d = 0; d < F; d++) {
            accum_t *a = &s.acc[d];
            if (a->count[c]++ == 0) a->touched[a->n_touched++] = c;
            a->total++;
        }
        CANCEL_IF(progress && i % report_every == 0 && progress(user, "building", i, N));
    }
    for (uint32_t d = F; d-- > 0;)
        if (!close_node(&s, d, F)) NOMEM("nodes");
    free(b->rows);
    b->rows = NULL;
    b->cap = 0;

    /* root: the global distribution; its children are the level-1 nodes */
    uint32_t root_cls, root_win, root_np, root_start, root_n;
    nodes_t *root_pairs = &s.pending[F];  /* spare: holds the root's pairs */
    for (uint64_t r = 0; r < n_classes; r++) {
        s.scratch[r].cls = s.rank_to_class[r];
        s.scratch[r].count = (uint32_t)s.gcount[s.rank_to_class[r]];
    }
    if (!summarise(&s.sc, s.scratch, (size_t)n_classes, &root_cls, &root_win, &root_np,
                   &root_pairs->pairs))
        NOMEM("root");
    if (!flush_children(&s, &s.pending[0], root_cls, &root_start, &root_n)) NOMEM("nodes");
    CANCEL_IF(progress && progress(user, "writing", 0, 1));

    /* breadth-first layout: node i's children follow as one sorted block */
    const uint64_t n_nodes = (uint64_t)s.kept.key.n + 1;
    uint64_t n_pairs = root_np;
    for (size_t i = 0; i < s.kept.key.n; i++) n_pairs += s.kept.npairs.v[i];
    if (n_nodes >= UINT32_MAX || n_pairs >= UINT32_MAX) {
        st = fail(err, IGT_ERR_LIMIT, "tree too large: %llu nodes, %llu stored classes",
                  (unsigned long long)n_nodes, (unsigned long long)n_pairs);
        goto done;
    }
    file_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, IGT_MAGIC, sizeof h.magic);
    h.version = IGT_FORMAT_VERSION;
    h.header_size = sizeof h;
    h.endian_tag = IGT_ENDIAN_TAG;
    h.window = F;
    h.vocab_size = V;
    h.padding_id = V;
    h.order = b->cfg.order;
    h.top_k = b->cfg.top_k;
    h.default_class = root_cls;
    memcpy(h.permutation, perm, sizeof perm);
    memcpy(h.gain_ratio, gr, sizeof gr);
    memcpy(h.info_gain, ig, sizeof ig);
    h.n_instances = N;
    h.n_nodes = n_nodes;
    h.n_pairs = b->cfg.top_k ? n_pairs : 0;
    h.n_classes = n_classes;
    memcpy(h.tokenizer_name, b->cfg.tokenizer_name, IGT_TOKENIZER_NAME_MAX);
    memcpy(h.tokenizer_digest, b->cfg.tokenizer_digest, IGT_TOKENIZER_DIGEST_SIZE);
    uint64_t size[SEC_COUNT], off = align_up(sizeof h);
    section_sizes(&h, size);
    for (int k = 0; k < SEC_COUNT; k++) {
        h.sec_offset[k] = off;
        off = align_up((size_t)(off + size[k]));
    }
    h.file_size = off;
    image = calloc(1, (size_t)off);
    if (!image) NOMEM("model image");
    uint32_t *key = (uint32_t *)(image + h.sec_offset[SEC_KEY]);
    uint32_t *cls = (uint32_t *)(image + h.sec_offset[SEC_CLASS]);
    uint32_t *win = (uint32_t *)(image + h.sec_offset[SEC_WINNER]);
    uint32_t *tot = (uint32_t *)(image + h.sec_offset[SEC_TOTAL]);
    uint32_t *child = (uint32_t *)(image + h.sec_offset[SEC_CHILD]);
    uint32_t *dist = (uint32_t *)(image + h.sec_offset[SEC_DIST]);
    uint32_t *pairs = (uint32_t *)(image + h.sec_offset[SEC_PAIRS]);
    /* src[i]: index in s.kept of the node placed at i (root: none) */
    uint32_t *src = xmalloc((size_t)n_nodes, sizeof *src);
    if (!src) NOMEM("layout");
    key[0] = 0;
    cls[0] = root_cls;
    win[0] = root_win;
    tot[0] = (uint32_t)N;
    uint64_t next = 1, pi = 0;
    if (h.top_k) {
        dist[0] = 0;
        memcpy(pairs, root_pairs->pairs.v, 2 * (size_t)root_np * sizeof *pairs);
        pi = root_np;
    }
    for (uint64_t i = 0; i < n_nodes; i++) {
        uint32_t cs = root_start, cn = root_n;
        if (i >= next) { /* every kept node hangs under the root; cannot happen */
            free(src);
            st = fail(err, IGT_ERR_CORRUPT, "internal error: unreachable node %llu",
                      (unsigned long long)i);
            goto done;
        }
        if (i > 0) {
            uint32_t k = src[i];
            key[i] = s.kept.key.v[k];
            cls[i] = s.kept.cls.v[k];
            win[i] = s.kept.win.v[k];
            tot[i] = s.kept.tot.v[k];
            cs = s.kept.cstart.v[k];
            cn = s.kept.nchild.v[k];
            if (h.top_k) {
                dist[i] = (uint32_t)pi;
                uint32_t np = s.kept.npairs.v[k];
                memcpy(pairs + 2 * pi, s.kept.pairs.v + 2 * (size_t)s.kept.pstart.v[k],
                       2 * (size_t)np * sizeof *pairs);
                pi += np;
            }
        }
        child[i] = (uint32_t)next;
        for (uint32_t c = 0; c < cn; c++) src[next++] = cs + c;
    }
    free(src);
    child[n_nodes] = (uint32_t)n_nodes;
    if (h.top_k) dist[n_nodes] = (uint32_t)pi;
    h.payload_checksum = checksum64(image + sizeof h, (size_t)(off - sizeof h));
    h.header_checksum = header_checksum(&h);
    memcpy(image, &h, sizeof h);
    build_state_free(&s);
    memset(&s, 0, sizeof s);

    m = calloc(1, sizeof *m);
    if (!m) NOMEM("model");
    m->data = image;
    m->size = (size_t)off;
    image = NULL;
    st = parse_image(m, 0, err);
    if (st) {
        free((void *)m->data);
        free(m);
        m = NULL;
        goto done;
    }
    *out = m;
done:
    build_state_free(&s);
    free(image);
    free(b->rows);
    b->rows = NULL;
    b->cap = 0;
    b->n = 0;
    return st;
}

/* ---- loading ----------------------------------------------------------------- */

static igt_status parse_image(igt_model *m, uint32_t flags, igt_error *err) {
    const uint8_t *p = m->data;
    size_t size = m->size;
    if (size < 8 || memcmp(p, IGT_MAGIC, 8) != 0)
        return fail(err, IGT_ERR_FOREIGN, "not an olifant model file (bad magic)");
    if (size < 16)
        return fail(err, IGT_ERR_TRUNCATED, "file of %zu bytes ends inside the header", size);
    uint32_t version, hsize;
    memcpy(&version, p + 8, 4);
    memcpy(&hsize, p + 12, 4);
    if (version != IGT_FORMAT_VERSION)
        return fail(err, IGT_ERR_VERSION,
                    "model format version %u, this library reads version %u", version,
                    IGT_FORMAT_VERSION);
    if (hsize != sizeof(file_header))
        return fail(err, IGT_ERR_CORRUPT, "header size %u, expected %zu", hsize,
                    sizeof(file_header));
    if (size < sizeof(file_header))
        return fail(err, IGT_ERR_TRUNCATED, "file of %zu bytes ends inside the %zu-byte header",
                    size, sizeof(file_header));
    file_header *h = &m->h;
    memcpy(h, p, sizeof *h);
    if (h->endian_tag != IGT_ENDIAN_TAG)
        return fail(err, IGT_ERR_CORRUPT, "byte order tag 0x%08x: file from another byte order",
                    h->endian_tag);
    if (!(flags & IGT_LOAD_SKIP_CHECKSUM) && header_checksum(h) != h->header_checksum)
        return fail(err, IGT_ERR_CHECKSUM, "header checksum mismatch");
    if (h->file_size > size)
        return fail(err, IGT_ERR_TRUNCATED, "file has %zu bytes, header says %llu", size,
                    (unsigned long long)h->file_size);
    if (h->file_size < size)
        return fail(err, IGT_ERR_CORRUPT, "file has %zu bytes, header says %llu", size,
                    (unsigned long long)h->file_size);
    if (h->window < 1 || h->window > IGT_MAX_WINDOW)
        return fail(err, IGT_ERR_CORRUPT, "window %u out of range", h->window);
    if (h->vocab_size < 1 || h->vocab_size >= IGT_MAX_VOCAB || h->padding_id != h->vocab_size)
        return fail(err, IGT_ERR_CORRUPT, "vocab_size %u / padding id %u invalid",
                    h->vocab_size, h->padding_id);
    if (h->order > IGT_ORDER_EXPLICIT)
        return fail(err, IGT_ERR_CORRUPT, "unknown level order %u", h->order);
    uint32_t seen = 0;
    for (uint32_t d = 0; d < h->window; d++) {
        uint32_t q = h->permutation[d];
        if (q >= h->window || (seen & (1u << q)))
            return fail(err, IGT_ERR_CORRUPT, "level order is not a permutation");
        seen |= 1u << q;
    }
    for (uint32_t d = 0; d < IGT_MAX_WINDOW; d++)
        if (!isfinite(h->gain_ratio[d]) || !isfinite(h->info_gain[d]))
            return fail(err, IGT_ERR_CORRUPT, "feature weights are not finite");
    if (h->n_nodes < 1 || h->n_nodes >= UINT32_MAX || h->n_pairs >= UINT32_MAX)
        return fail(err, IGT_ERR_CORRUPT, "node count %llu or class count %llu out of range",
                    (unsigned long long)h->n_nodes, (unsigned long long)h->n_pairs);
    if (!h->top_k && h->n_pairs)
        return fail(err, IGT_ERR_CORRUPT, "stored classes without top_k");
    if (h->default_class >= h->vocab_size)
        return fail(err, IGT_ERR_CORRUPT, "default class %u out of range", h->default_class);
    if (memchr(h->tokenizer_name, 0, IGT_TOKENIZER_NAME_MAX) == NULL)
        return fail(err, IGT_ERR_CORRUPT, "tokenizer name not terminated");
    uint64_t sz[SEC_COUNT], prev_end = sizeof(file_header);
    section_sizes(h, sz);
    for (int k = 0; k < SEC_COUNT; k++) {
        uint64_t o = h->sec_offset[k];
        if (o % IGT_ALIGN || o < prev_end || o > h->file_size || sz[k] > h->file_size - o)
            return fail(err, IGT_ERR_CORRUPT, "section %d at offset %llu (%llu bytes) out of bounds",
                        k, (unsigned long long)o, (unsigned long long)sz[k]);
        prev_end = o + sz[k];
    }
    if (!(flags & IGT_LOAD_SKIP_CHECKSUM) &&
        checksum64(p + sizeof(file_header), size - sizeof(file_header)) != h->payload_checksum)
        return fail(err, IGT_ERR_CHECKSUM, "payload checksum mismatch: the file is damaged");

    const uint32_t n = (uint32_t)h->n_nodes;
    m->n_nodes = n;
    m->key = (const uint32_t *)(p + h->sec_offset[SEC_KEY]);
    m->cls = (const uint32_t *)(p + h->sec_offset[SEC_CLASS]);
    m->winner = (const uint32_t *)(p + h->sec_offset[SEC_WINNER]);
    m->total = (const uint32_t *)(p + h->sec_offset[SEC_TOTAL]);
    m->child = (const uint32_t *)(p + h->sec_offset[SEC_CHILD]);
    m->dist = h->top_k ? (const uint32_t *)(p + h->sec_offset[SEC_DIST]) : NULL;
    m->pairs = (const uint32_t *)(p + h->sec_offset[SEC_PAIRS]);

    /* structure: children come after their parent, ranges are in bounds */
    if (m->child[0] != 1 || m->child[n] != n)
        return fail(err, IGT_ERR_CORRUPT, "child index of root or end is wrong");
    for (uint32_t i = 0; i < n; i++) {
        if (m->child[i + 1] < m->child[i] || m->child[i] <= i)
            return fail(err, IGT_ERR_CORRUPT, "child index of node %u is out of order", i);
        if (m->cls[i] >= h->vocab_size || m->winner[i] > m->total[i])
            return fail(err, IGT_ERR_CORRUPT, "node %u has an invalid class or counts", i);
        for (uint32_t c = m->child[i] + 1; c < m->child[i + 1]; c++)
            if (m->key[c] <= m->key[c - 1])
                return fail(err, IGT_ERR_CORRUPT, "children of node %u are not sorted", i);
    }
    if (m->dist) {
        if (m->dist[0] != 0 || m->dist[n] != h->n_pairs)
            return fail(err, IGT_ERR_CORRUPT, "class index of root or end is wrong");
        for (uint32_t i = 0; i < n; i++)
            if (m->dist[i + 1] < m->dist[i] ||
                (h->top_k != IGT_TOPK_ALL && m->dist[i + 1] - m->dist[i] > h->top_k))
                return fail(err, IGT_ERR_CORRUPT, "class index of node %u is out of order", i);
        for (uint64_t i = 0; i < h->n_pairs; i++)
            if (m->pairs[2 * i] >= h->vocab_size)
                return fail(err, IGT_ERR_CORRUPT, "stored class %u out of range", m->pairs[2 * i]);
    }
    for (uint32_t d = 0; d <= h->window; d++) {
        double s = 0.0;
        const double *w = h->order == IGT_ORDER_INFO_GAIN ? h->info_gain : h->gain_ratio;
        for (uint32_t e = d; e < h->window; e++) s += w[h->permutation[e]];
        m->unmatched[d] = s;
    }
    return IGT_OK;
}

igt_status igt_load_buffer(const void *data, size_t size, uint32_t flags, igt_model **out,
                           igt_error *err) {
    clear_error(err);
    if (!out || (!data && size)) return fail(err, IGT_ERR_ARG, "NULL data or out");
    *out = NULL;
    igt_model *m = calloc(1, sizeof *m);
    uint8_t *copy = malloc(size ? size : 1);
    if (!m || !copy) {
        free(m);
        free(copy);
        return fail(err, IGT_ERR_NOMEM, "cannot allocate %zu bytes for the model", size);
    }
    if (size) memcpy(copy, data, size);
    m->data = copy;
    m->size = size;
    igt_status st = parse_image(m, flags, err);
    if (st) {
        free(copy);
        free(m);
        return st;
    }
    *out = m;
    return IGT_OK;
}

igt_status igt_load(const char *path, uint32_t flags, igt_model **out, igt_error *err) {
    clear_error(err);
    if (!path || !out) return fail(err, IGT_ERR_ARG, "NULL path or out");
    *out = NULL;
#if IGT_HAVE_MMAP
    int fd = open(path, O_RDONLY);
    if (fd < 0) return fail(err, IGT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat stt;
    if (fstat(fd, &stt) != 0) {
        int e = errno;
        close(fd);
        return fail(err, IGT_ERR_IO, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(stt.st_mode)) {
        close(fd);
        return fail(err, IGT_ERR_IO, "%s is not a regular file", path);
    }
    size_t size = (size_t)stt.st_size;
    if (size == 0) {
        close(fd);
        return fail(err, IGT_ERR_TRUNCATED, "%s is empty", path);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return fail(err, IGT_ERR_IO, "cannot map %s: %s", path, strerror(errno));
    igt_model *m = calloc(1, sizeof *m);
    if (!m) {
        munmap(map, size);
        return fail(err, IGT_ERR_NOMEM, "cannot allocate model");
    }
    m->data = map;
    m->size = size;
    m->mapped = 1;
    igt_status st = parse_image(m, flags, err);
    if (st) {
        munmap(map, size);
        free(m);
        return st;
    }
    *out = m;
    return IGT_OK;
#else
    FILE *f = fopen(path, "rb");
    if (!f) return fail(err, IGT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1 << 20;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); return fail(err, IGT_ERR_NOMEM, "reading %s", path); }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    fclose(f);
    igt_status st = igt_load_buffer(buf, n, flags, out, err);
    free(buf);
    return st;
#endif
}

void igt_free(igt_model *m) {
    if (!m) return;
#if IGT_HAVE_MMAP
    if (m->mapped)
        munmap((void *)m->data, m->size);
    else
#endif
        free((void *)m->data);
    free(m);
}

igt_status igt_save(const igt_model *m, const char *path, igt_error *err) {
    clear_error(err);
    if (!m || !path) return fail(err, IGT_ERR_ARG, "NULL model or path");
    size_t len = strlen(path);
    char *tmp = malloc(len + 5);
    if (!tmp) return fail(err, IGT_ERR_NOMEM, "path");
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        int e = errno;
        free(tmp);
        return fail(err, IGT_ERR_IO, "cannot create %s.tmp: %s", path, strerror(e));
    }
    size_t w = fwrite(m->data, 1, m->size, f);
    int bad = w != m->size || fflush(f) != 0;
    int e = errno;
    if (fclose(f) != 0) bad = 1;
    if (bad || rename(tmp, path) != 0) {
        if (!bad) e = errno;
        remove(tmp);
        free(tmp);
        return fail(err, IGT_ERR_IO, "cannot write %s: %s", path, strerror(e));
    }
    free(tmp);
    return IGT_OK;
}

void igt_get_info(const igt_model *m, igt_info *o) {
    memset(o, 0, sizeof *o);
    if (!m) return;
    const file_header *h = &m->h;
    o->format_version = h->version;
    o->window = h->window;
    o->vocab_size = h->vocab_size;
    o->padding_id = h->padding_id;
    o->order = h->order;
    o->top_k = h->top_k;
    memcpy(o->permutation, h->permutation, sizeof o->permutation);
    memcpy(o->gain_ratio, h->gain_ratio, sizeof o->gain_ratio);
    memcpy(o->info_gain, h->info_gain, sizeof o->info_gain);
    o->n_instances = h->n_instances;
    o->n_nodes = h->n_nodes - 1;
    o->n_dist_entries = h->n_pairs;
    o->n_classes = h->n_classes;
    o->file_size = h->file_size;
    o->default_class = h->default_class;
    o->memory_mapped = m->mapped;
    memcpy(o->tokenizer_name, h->tokenizer_name, sizeof o->tokenizer_name);
    memcpy(o->tokenizer_digest, h->tokenizer_digest, sizeof o->tokenizer_digest);
}

/* ---- queries ------------------------------------------------------------------ */

/* Walk one window given in window order (oldest first). */
static inline void walk(const igt_model *m, const uint32_t *win, igt_answer *out) {
    const uint32_t F = m->h.window;
    const uint32_t *key = m->key, *child = m->child;
    uint32_t node = 0, depth = 0;
    for (uint32_t d = 0; d < F; d++) {
        uint32_t lo = child[node], hi = child[node + 1];
        if (lo == hi) break;
        uint32_t v = win[m->h.permutation[d]];
        while (lo < hi) {               /* lower bound */
            uint32_t mid = lo + (hi - lo) / 2;
            if (key[mid] < v) lo = mid + 1; else hi = mid;
        }
        if (lo == child[node + 1] || key[lo] != v) break;
        node = lo;
        depth = d + 1;
    }
    out->token = m->cls[node];
    out->depth = depth;
    out->leaf = depth > 0 && child[node] == child[node + 1];
    out->node = node;
    out->winner_count = m->winner[node];
    out->total = m->total[node];
    out->distance = m->unmatched[depth];
}

/* The last `window` ids of context, left-padded. */
static void make_window(const igt_model *m, const uint32_t *context, size_t n, uint32_t *win) {
    const uint32_t F = m->h.window;
    for (uint32_t j = 0; j < F; j++) {
        size_t back = F - j;
        win[j] = n >= back ? context[n - back] : m->h.padding_id;
    }
}

void igt_predict(const igt_model *m, const uint32_t *context, size_t n, igt_answer *out) {
    uint32_t win[IGT_MAX_WINDOW];
    make_window(m, context, n, win);
    walk(m, win, out);
}

void igt_predict_batch(const igt_model *m, const uint32_t *rows, size_t n, igt_answer *out) {
    const uint32_t F = m->h.window;
    for (size_t i = 0; i < n; i++) walk(m, rows + i * F, out + i);
}

size_t igt_draft(const igt_model *m, const uint32_t *context, size_t n, size_t k,
                 uint32_t min_depth, double min_share, uint32_t *tokens,
                 igt_answer *answers) {
    const uint32_t F = m->h.window;
    uint32_t win[IGT_MAX_WINDOW];
    make_window(m, context, n, win);
    size_t made = 0;
    while (made < k) {
        igt_answer a;
        walk(m, win, &a);
        if (a.depth < min_depth) break;
        if (min_share > 0.0 && (double)a.winner_count < min_share * (double)a.total) break;
        tokens[made] = a.token;
        if (answers) answers[made] = a;
        made++;
        memmove(win, win + 1, (F - 1) * sizeof *win);
        win[F - 1] = a.token;
    }
    return made;
}

size_t igt_node_classes(const igt_model *m, uint32_t node, uint32_t *classes,
                        uint32_t *counts, size_t max) {
    if (!m || !m->dist || node >= m->n_nodes) return 0;
    uint32_t a = m->dist[node], z = m->dist[node + 1];
    for (uint32_t i = a; i < z && i - a < max; i++) {
        if (classes) classes[i - a] = m->pairs[2 * (size_t)i];
        if (counts) counts[i - a] = m->pairs[2 * (size_t)i + 1];
    }
    return z - a;
}
