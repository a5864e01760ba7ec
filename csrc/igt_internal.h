/*
 * igt_internal.h — what the library's source files share; not part of the
 * API (igtree.h is). Plain C99 plus POSIX where a file says so.
 *
 *   igtree.c      errors, version, model facts, queries
 *   igt_file.c    file formats 1 and 2: validation, encoding, load, save
 *   igt_build.c   the builder: instance store, statistics, sort, tree scan
 *   igt_spill.c   bounded-memory builds: temporary files, runs, k-way merge
 */
#ifndef OLIFANT_IGT_INTERNAL_H
#define OLIFANT_IGT_INTERNAL_H

#include "igtree.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---- errors (igtree.c) ------------------------------------------------------ */

/* the file layer's formatter (olif_file.h): one for both libraries */
#define igt__fail olif_fail
#define igt__clear_error olif_clear_error
void igt__prefix_error(igt_error *err, const char *prefix);   /* prefix err's message */

/* ---- small utilities ------------------------------------------------------- */

/* count * elem bytes, or NULL (never a short allocation) on overflow. */
void *igt__malloc(size_t count, size_t elem);
void *igt__calloc(size_t count, size_t elem);
/* Room for `need` elements in *v (capacity *cap, doubling from `first`):
 * 1, or 0 if memory ran out (*v is then unchanged). */
int igt__grow(void **v, size_t *cap, size_t need, size_t elem, size_t first);

static inline uint32_t igt__popcount64(uint64_t x) {
#if defined(__GNUC__) && defined(__POPCNT__)
    return (uint32_t)__builtin_popcountll(x);
#else   /* SWAR: without -mpopcnt the builtin is a library call */
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (uint32_t)((x * 0x0101010101010101ull) >> 56);
#endif
}

/* FNV-style 64-bit checksum over bytes (8 at a time; olif_checksum.h): the one function both
 * file formats and the temporary files use. */
uint64_t igt__checksum64(const uint8_t *p, size_t n);

/* ---- model facts independent of the file layout ---------------------------- */

typedef struct {
    uint32_t window, vocab_size, order, top_k, default_class;
    uint32_t permutation[IGT_MAX_WINDOW];   /* root level first */
    double gain_ratio[IGT_MAX_WINDOW];
    double info_gain[IGT_MAX_WINDOW];
    uint64_t n_instances, n_classes;
    char tokenizer_name[IGT_TOKENIZER_NAME_MAX];
    uint8_t tokenizer_digest[IGT_TOKENIZER_DIGEST_SIZE];
} igt_meta;

/* The model facts shared by igt_meta, both file headers and igt_info
 * (fields of the same names), copied from src to dst. */
#define IGT_COPY_META(dst, src)                                                          \
    do {                                                                                 \
        (dst)->window = (src)->window;                                                   \
        (dst)->vocab_size = (src)->vocab_size;                                           \
        (dst)->order = (src)->order;                                                     \
        (dst)->top_k = (src)->top_k;                                                     \
        (dst)->default_class = (src)->default_class;                                     \
        memcpy((dst)->permutation, (src)->permutation, sizeof (dst)->permutation);       \
        memcpy((dst)->gain_ratio, (src)->gain_ratio, sizeof (dst)->gain_ratio);          \
        memcpy((dst)->info_gain, (src)->info_gain, sizeof (dst)->info_gain);             \
        (dst)->n_instances = (src)->n_instances;                                         \
        (dst)->n_classes = (src)->n_classes;                                             \
        memcpy((dst)->tokenizer_name, (src)->tokenizer_name, sizeof (dst)->tokenizer_name); \
        memcpy((dst)->tokenizer_digest, (src)->tokenizer_digest,                         \
               sizeof (dst)->tokenizer_digest);                                          \
    } while (0)

/* One tree node as the encoders see it. Nodes are numbered breadth-first
 * (root 0), siblings by ascending key, so a node's children are the next
 * n_children nodes after those of the nodes before it. */
typedef struct {
    uint32_t key, cls, winner, total, n_children, n_pairs;
    const uint32_t *pairs;      /* n_pairs (class, count) pairs, best first */
} igt_node;

/* Nodes in breadth-first order, from wherever they live. get() may use
 * `scratch` (room for scratch_pairs pairs; 0 if it never does) to hold node
 * i's pairs. */
typedef struct {
    uint64_t n_nodes, n_pairs, scratch_pairs;
    void (*get)(void *ctx, uint32_t i, igt_node *out, uint32_t *scratch);
    void *ctx;
} igt_node_source;

/* ---- the model: a validated version-2 image plus a rank directory ----------- */

struct igt_model {
    uint8_t *image;             /* owned version-2 image (malloc) */
    size_t size;
    uint32_t source_version;    /* format of the bytes it was loaded from */
    igt_meta meta;
    uint32_t n_nodes;           /* including the root */
    uint32_t id_width;          /* bytes per key and class id: 2, 3 or 4 */
    uint64_t n_internal, n_pairs;
    const uint8_t *key, *cls, *pair_cls;
    const uint64_t *kids;       /* bit i set: node i has children */
    uint32_t *rank;             /* set kids bits before each 64-bit word */
    const uint32_t *child;      /* first child of the r-th internal node; n_internal+1 */
    const uint8_t *total8, *winner8;       /* 255: see the escape tables */
    const uint32_t *total_esc, *winner_esc; /* (node, value) pairs, by node */
    uint64_t n_total_esc, n_winner_esc;
    uint32_t *total_dir, *winner_dir;       /* first escape of each 64 nodes (made on load) */
    const uint32_t *dist;       /* first pair of each node, n_nodes+1; NULL: top_k 0 */
    const uint32_t *pair_count;
    double unmatched[IGT_MAX_WINDOW + 1]; /* distance for each match depth */
};

static inline uint32_t igt__read_id(const uint8_t *base, size_t i, uint32_t width) {
    if (width == 2) {
        uint16_t v;
        memcpy(&v, base + 2 * i, 2);
        return v;
    }
    if (width == 4) {
        uint32_t v;
        memcpy(&v, base + 4 * i, 4);
        return v;
    }
    const uint8_t *p = base + 3 * i;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
}

static inline int igt__has_kids(const igt_model *m, uint32_t i) {
    return (int)((m->kids[i >> 6] >> (i & 63)) & 1u);
}

/* Index among the internal nodes of internal node i. */
static inline uint32_t igt__kid_rank(const igt_model *m, uint32_t i) {
    uint64_t below = m->kids[i >> 6] & ((1ull << (i & 63)) - 1);
    return m->rank[i >> 6] + igt__popcount64(below);
}

/* The escaped count of node i: its entry lies between the first escapes of
 * its 64-node block and of the next (validated on load to be there). */
static inline uint32_t igt__count_lookup(const uint32_t *esc, const uint32_t *dir, uint32_t i) {
    uint32_t lo = dir[i >> 6], hi = dir[(i >> 6) + 1];
    while (lo < hi && esc[2 * (size_t)lo] < i) lo++;
    return lo < hi && esc[2 * (size_t)lo] == i ? esc[2 * (size_t)lo + 1] : 0;
}

static inline uint32_t igt__total(const igt_model *m, uint32_t i) {
    return m->total8[i] < 255 ? m->total8[i] : igt__count_lookup(m->total_esc, m->total_dir, i);
}

static inline uint32_t igt__winner(const igt_model *m, uint32_t i) {
    return m->winner8[i] < 255 ? m->winner8[i] : igt__count_lookup(m->winner_esc, m->winner_dir, i);
}

/* ---- formats (igt_file.c) ------------------------------------------------------ */

/* Encode a version-2 image from the nodes and validate it into a model. */
igt_status igt__model_from_nodes(const igt_meta *meta, const igt_node_source *src,
                                 igt_model **out, igt_error *err);

/* The model's nodes as a source (for re-encoding, e.g. as version 1). */
void igt__model_source(const igt_model *m, igt_node_source *src);

#endif /* OLIFANT_IGT_INTERNAL_H */
