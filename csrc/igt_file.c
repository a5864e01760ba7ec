/*
 * igt_file.c — model files: format version 2 (written), version 1 (read,
 * converted on load; written on request for older readers). API in igtree.h.
 *
 * Version 2: a 640-byte header, then sections at 64-byte aligned offsets,
 * every byte between them zero (so every byte of a file is checked):
 *
 *   KEY        n x w    arc id of each node (root: 0), breadth-first order,
 *                       siblings by ascending id
 *   CLASS      n x w    default class of each node
 *   KIDS       n/64 x 8 bit i set: node i has children
 *   CHILD      (r+1)x4  first child of each of the r nodes with children,
 *                       then n: children of one node are one block
 *   TOTAL      n x 1    instances under the node; 255 = look in TOTAL_ESC
 *   WINNER     n x 1    count of the default class; 255 = look in WINNER_ESC
 *   TOTAL_ESC  e x 8    (node, value), ascending node, for bytes of 255
 *   WINNER_ESC e x 8
 *   DIST       (n+1)x4  first stored (class, count) pair of each node
 *                       (top_k > 0 only)
 *   PAIR_CLASS p x w    stored classes, best first per node
 *   PAIR_COUNT p x 4
 *
 * w ("id width") is 2, 3 or 4 bytes: the least that holds vocab_size. Why
 * this shape: a pruned IGTree is mostly leaves with small counts (10M legal
 * Mistral tokens: 22% of the 1.3M nodes have children, 99.4% of totals are
 * below 255), so a node costs about 7 bytes instead of version 1's 20, and
 * every array is still fixed-width and queried in place. Node numbers are
 * those of version 1, so answers (node included) do not depend on the
 * version a model was loaded from.
 *
 * Loading reads the file into private memory and validates that copy; a
 * model is never backed by the file itself (igtree.h, igt_load).
 */
#include "igt_internal.h"
#include "olif_checksum.h"
#include "olif_frame.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IGT_MAGIC "OLIFIGT"     /* 8 bytes with the NUL */

/* ---- checksum ------------------------------------------------------------------ */

uint64_t igt__checksum64(const uint8_t *p, size_t n) { return olif_checksum64(p, n); }

static uint32_t id_width_for(uint32_t vocab_size) {
    /* keys go up to the padding id, vocab_size itself */
    return vocab_size <= 0xFFFFu ? 2u : vocab_size <= 0xFFFFFFu ? 3u : 4u;
}

static void put_id(uint8_t *base, size_t i, uint32_t width, uint32_t v) {
    uint8_t *p = base + (size_t)width * i;
    for (uint32_t b = 0; b < width; b++) p[b] = (uint8_t)(v >> (8 * b));
}

/* Checks shared by both versions' headers: the model facts. */
static igt_status check_meta(const igt_meta *mt, uint32_t padding_id, igt_error *err) {
    if (mt->window < 1 || mt->window > IGT_MAX_WINDOW)
        return igt__fail(err, OLIF_ERR_CORRUPT, "window %u out of range 1..%u", mt->window,
                         IGT_MAX_WINDOW);
    if (mt->vocab_size < 1 || mt->vocab_size >= IGT_MAX_VOCAB || padding_id != mt->vocab_size)
        return igt__fail(err, OLIF_ERR_CORRUPT, "vocab_size %u / padding id %u invalid",
                         mt->vocab_size, padding_id);
    if (mt->order > IGT_ORDER_EXPLICIT)
        return igt__fail(err, OLIF_ERR_CORRUPT, "unknown level order %u", mt->order);
    uint32_t seen = 0;
    for (uint32_t d = 0; d < mt->window; d++) {
        uint32_t q = mt->permutation[d];
        if (q >= mt->window || (seen & (1u << q)))
            return igt__fail(err, OLIF_ERR_CORRUPT,
                             "level order is not a permutation (level %u = %u)", d, q);
        seen |= 1u << q;
    }
    for (uint32_t d = 0; d < IGT_MAX_WINDOW; d++)
        if (!isfinite(mt->gain_ratio[d]) || !isfinite(mt->info_gain[d]))
            return igt__fail(err, OLIF_ERR_CORRUPT, "feature weights of position %u are not finite", d);
    if (mt->default_class >= mt->vocab_size)
        return igt__fail(err, OLIF_ERR_CORRUPT, "default class %u out of range", mt->default_class);
    if (memchr(mt->tokenizer_name, 0, IGT_TOKENIZER_NAME_MAX) == NULL)
        return igt__fail(err, OLIF_ERR_CORRUPT, "tokenizer name not terminated");
    return OLIF_OK;
}

static void set_unmatched(igt_model *m) {
    const igt_meta *mt = &m->meta;
    const double *w = mt->order == IGT_ORDER_INFO_GAIN ? mt->info_gain : mt->gain_ratio;
    for (uint32_t d = 0; d <= mt->window; d++) {
        double s = 0.0;     /* summed from level d down, as TiMBL prints it */
        for (uint32_t e = d; e < mt->window; e++) s += w[mt->permutation[e]];
        m->unmatched[d] = s;
    }
}

/* ---- version 1 ------------------------------------------------------------------ */

enum { V1_KEY, V1_CLASS, V1_WINNER, V1_TOTAL, V1_CHILD, V1_DIST, V1_PAIRS, V1_COUNT };

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
    uint64_t sec_offset[V1_COUNT];
    uint64_t payload_checksum;
    uint64_t header_checksum;   /* computed with this field zero */
    char tokenizer_name[IGT_TOKENIZER_NAME_MAX];
    uint8_t tokenizer_digest[IGT_TOKENIZER_DIGEST_SIZE];
    uint8_t reserved[64];
} header_v1;

OLIF_STATIC_ASSERT(sizeof(header_v1) == 640, header_v1_layout);
OLIF_STATIC_ASSERT(sizeof(double) == 8, ieee_doubles);

static const olif_frame V1_FRAME = {sizeof(header_v1), offsetof(header_v1, file_size),
                                    offsetof(header_v1, payload_checksum),
                                    offsetof(header_v1, header_checksum)};

static void v1_section_sizes(const header_v1 *h, uint64_t size[V1_COUNT]) {
    uint64_t n = h->n_nodes;
    size[V1_KEY] = size[V1_CLASS] = size[V1_WINNER] = size[V1_TOTAL] = n * 4;
    size[V1_CHILD] = (n + 1) * 4;
    size[V1_DIST] = h->top_k ? (n + 1) * 4 : 0;
    size[V1_PAIRS] = h->n_pairs * 8;
}

/* A validated version-1 image, read in place. */
typedef struct {
    header_v1 h;
    const uint32_t *key, *cls, *winner, *total, *child, *dist, *pairs;
} v1_view;

static void meta_from_v1(const header_v1 *h, igt_meta *mt) {
    memset(mt, 0, sizeof *mt);
    IGT_COPY_META(mt, h);
}

/* Version 1's checks, as that version has always made them, plus keys within
 * the padding id (version 2 stores keys in fewer bytes). */
static igt_status parse_v1(const uint8_t *p, size_t size, uint32_t flags, v1_view *v,
                           igt_error *err) {
    igt_status st = olif_check_frame(&V1_FRAME, p, size, flags, err);
    if (st) return st;
    header_v1 *h = &v->h;
    memcpy(h, p, sizeof *h);
    igt_meta mt;
    meta_from_v1(h, &mt);
    st = check_meta(&mt, h->padding_id, err);
    if (st) return st;
    if (h->n_nodes < 1 || h->n_nodes >= UINT32_MAX || h->n_pairs >= UINT32_MAX)
        return igt__fail(err, OLIF_ERR_CORRUPT, "node count %llu or class count %llu out of range",
                         (unsigned long long)h->n_nodes, (unsigned long long)h->n_pairs);
    if (!h->top_k && h->n_pairs)
        return igt__fail(err, OLIF_ERR_CORRUPT, "stored classes without top_k");
    if (h->n_classes < 1 || h->n_classes > h->vocab_size)
        return igt__fail(err, OLIF_ERR_CORRUPT, "%llu classes for vocab_size %u",
                         (unsigned long long)h->n_classes, h->vocab_size);
    uint64_t sz[V1_COUNT], end = 0;
    v1_section_sizes(h, sz);
    st = olif_check_sections(h->sec_offset, sz, V1_COUNT, sizeof(header_v1), h->file_size, &end,
                             err);
    if (!st) st = olif_check_payload(&V1_FRAME, p, size, flags, err);
    if (st) return st;

    const uint32_t n = (uint32_t)h->n_nodes;
#define V1_SECTION(k) ((const uint32_t *)(const void *)(p + h->sec_offset[k]))
    v->key = V1_SECTION(V1_KEY);
    v->cls = V1_SECTION(V1_CLASS);
    v->winner = V1_SECTION(V1_WINNER);
    v->total = V1_SECTION(V1_TOTAL);
    v->child = V1_SECTION(V1_CHILD);
    v->dist = h->top_k ? V1_SECTION(V1_DIST) : NULL;
    v->pairs = V1_SECTION(V1_PAIRS);
#undef V1_SECTION
    if (v->child[0] != 1 || v->child[n] != n)
        return igt__fail(err, OLIF_ERR_CORRUPT, "child index of root or end is wrong");
    for (uint32_t i = 0; i < n; i++) {
        if (v->child[i + 1] < v->child[i] || v->child[i] <= i)
            return igt__fail(err, OLIF_ERR_CORRUPT, "child index of node %u is out of order", i);
        if (v->cls[i] >= h->vocab_size || v->winner[i] > v->total[i])
            return igt__fail(err, OLIF_ERR_CORRUPT, "node %u has an invalid class or counts", i);
        if (i > 0 && v->key[i] > h->vocab_size)
            return igt__fail(err, OLIF_ERR_CORRUPT, "node %u: key %u exceeds the padding id %u", i,
                             v->key[i], h->vocab_size);
        for (uint32_t c = v->child[i] + 1; c < v->child[i + 1]; c++)
            if (v->key[c] <= v->key[c - 1])
                return igt__fail(err, OLIF_ERR_CORRUPT, "children of node %u are not sorted", i);
    }
    if (v->dist) {
        if (v->dist[0] != 0 || v->dist[n] != h->n_pairs)
            return igt__fail(err, OLIF_ERR_CORRUPT, "class index of root or end is wrong");
        for (uint32_t i = 0; i < n; i++)
            if (v->dist[i + 1] < v->dist[i] ||
                (h->top_k != IGT_TOPK_ALL && v->dist[i + 1] - v->dist[i] > h->top_k))
                return igt__fail(err, OLIF_ERR_CORRUPT, "class index of node %u is out of order", i);
        for (uint64_t i = 0; i < h->n_pairs; i++)
            if (v->pairs[2 * i] >= h->vocab_size)
                return igt__fail(err, OLIF_ERR_CORRUPT, "stored class %u out of range",
                                 v->pairs[2 * i]);
    }
    return OLIF_OK;
}

static void v1_get(void *ctx, uint32_t i, igt_node *o, uint32_t *scratch) {
    const v1_view *v = ctx;
    (void)scratch;
    o->key = i ? v->key[i] : 0;
    o->cls = v->cls[i];
    o->winner = v->winner[i];
    o->total = v->total[i];
    o->n_children = v->child[i + 1] - v->child[i];
    if (v->dist) {
        o->n_pairs = v->dist[i + 1] - v->dist[i];
        o->pairs = v->pairs + 2 * (size_t)v->dist[i];
    } else {
        o->n_pairs = 0;
        o->pairs = NULL;
    }
}

/* Version-1 image of any node source (for readers older than version 2). */
static igt_status encode_v1(const igt_meta *mt, const igt_node_source *src, uint8_t **image,
                            size_t *image_size, igt_error *err) {
    header_v1 h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, IGT_MAGIC, sizeof h.magic);
    h.version = 1;
    h.header_size = sizeof h;
    h.endian_tag = OLIF_ENDIAN_TAG;
    IGT_COPY_META(&h, mt);
    h.padding_id = mt->vocab_size;
    h.n_nodes = src->n_nodes;
    h.n_pairs = mt->top_k ? src->n_pairs : 0;
    uint64_t size[V1_COUNT];
    v1_section_sizes(&h, size);
    const uint64_t off = olif_align(olif_lay_out(sizeof h, size, V1_COUNT, h.sec_offset));
    h.file_size = off;
    uint8_t *img = calloc(1, (size_t)off);
    uint32_t *scratch = igt__malloc(2 * (size_t)src->scratch_pairs + 2, sizeof *scratch);
    if (!img || !scratch) {
        free(img);
        free(scratch);
        return igt__fail(err, OLIF_ERR_NOMEM, "cannot allocate a %llu-byte version-1 image",
                         (unsigned long long)off);
    }
#define V1_OUT(k) ((uint32_t *)(void *)(img + h.sec_offset[k]))
    uint32_t *key = V1_OUT(V1_KEY), *cls = V1_OUT(V1_CLASS), *win = V1_OUT(V1_WINNER),
             *tot = V1_OUT(V1_TOTAL), *child = V1_OUT(V1_CHILD), *dist = V1_OUT(V1_DIST),
             *pairs = V1_OUT(V1_PAIRS);
#undef V1_OUT
    uint64_t next = 1, pi = 0;
    for (uint64_t i = 0; i < src->n_nodes; i++) {
        igt_node nd;
        src->get(src->ctx, (uint32_t)i, &nd, scratch);
        key[i] = nd.key;
        cls[i] = nd.cls;
        win[i] = nd.winner;
        tot[i] = nd.total;
        child[i] = (uint32_t)next;
        next += nd.n_children;
        if (h.top_k) {
            dist[i] = (uint32_t)pi;
            if (nd.n_pairs) memcpy(pairs + 2 * pi, nd.pairs, 2 * (size_t)nd.n_pairs * sizeof *pairs);
            pi += nd.n_pairs;
        }
    }
    child[src->n_nodes] = (uint32_t)next;
    if (h.top_k) dist[src->n_nodes] = (uint32_t)pi;
    free(scratch);
    memcpy(img, &h, sizeof h);
    olif_seal(&V1_FRAME, img, (size_t)off);
    *image = img;
    *image_size = (size_t)off;
    return OLIF_OK;
}

/* ---- version 2 ------------------------------------------------------------------ */

enum {
    V2_KEY, V2_CLASS, V2_KIDS, V2_CHILD, V2_TOTAL, V2_WINNER, V2_TOTAL_ESC, V2_WINNER_ESC,
    V2_DIST, V2_PAIR_CLASS, V2_PAIR_COUNT, V2_COUNT
};

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
    uint32_t id_width;          /* bytes per key and class id: 2, 3 or 4 */
    uint32_t flags;             /* none defined: must be 0 */
    uint32_t reserved0;         /* must be 0 (keeps the doubles 8-aligned) */
    uint32_t permutation[IGT_MAX_WINDOW];
    double gain_ratio[IGT_MAX_WINDOW];
    double info_gain[IGT_MAX_WINDOW];
    uint64_t n_instances;
    uint64_t n_nodes;           /* including the root */
    uint64_t n_internal;        /* nodes with children */
    uint64_t n_pairs;
    uint64_t n_classes;
    uint64_t n_total_esc;
    uint64_t n_winner_esc;
    uint64_t file_size;
    uint64_t sec_offset[V2_COUNT];
    uint64_t payload_checksum;
    uint64_t header_checksum;   /* computed with this field zero */
    char tokenizer_name[IGT_TOKENIZER_NAME_MAX];
    uint8_t tokenizer_digest[IGT_TOKENIZER_DIGEST_SIZE];
} header_v2;

OLIF_STATIC_ASSERT(sizeof(header_v2) == 640, header_v2_layout);
OLIF_STATIC_ASSERT(offsetof(header_v2, gain_ratio) == 120, header_v2_no_padding);

static const olif_frame V2_FRAME = {sizeof(header_v2), offsetof(header_v2, file_size),
                                    offsetof(header_v2, payload_checksum),
                                    offsetof(header_v2, header_checksum)};

/* Section sizes from counts already checked to be below 2^32. */
static void v2_section_sizes(const header_v2 *h, uint64_t size[V2_COUNT]) {
    uint64_t n = h->n_nodes, w = h->id_width;
    size[V2_KEY] = size[V2_CLASS] = n * w;
    size[V2_KIDS] = (n + 63) / 64 * 8;
    size[V2_CHILD] = (h->n_internal + 1) * 4;
    size[V2_TOTAL] = size[V2_WINNER] = n;
    size[V2_TOTAL_ESC] = h->n_total_esc * 8;
    size[V2_WINNER_ESC] = h->n_winner_esc * 8;
    size[V2_DIST] = h->top_k ? (n + 1) * 4 : 0;
    size[V2_PAIR_CLASS] = h->n_pairs * w;
    size[V2_PAIR_COUNT] = h->n_pairs * 4;
}

static void meta_from_v2(const header_v2 *h, igt_meta *mt) {
    memset(mt, 0, sizeof *mt);
    IGT_COPY_META(mt, h);
}

/* Rank over the KIDS bits, also at index n (= n_internal). */
static uint32_t rank_at(const igt_model *m, uint64_t i) {
    if (i >= m->n_nodes) return (uint32_t)m->n_internal;
    return igt__kid_rank(m, (uint32_t)i);
}

/* An escape table: nodes strictly ascending, each with a 255 byte and a value
 * of at least 255, and no 255 byte left without an entry. Fills dir[b] with
 * the index of the first entry for node 64b or later (words + 1 of them). */
static igt_status check_escapes(const igt_model *m, const uint8_t *small, const uint32_t *esc,
                                uint64_t n_esc, uint32_t *dir, const char *what, igt_error *err) {
    const uint32_t n = m->n_nodes, blocks = (n + 63) / 64;
    uint64_t e = 0;
    uint32_t next_block = 0;
    for (const uint8_t *p = small;; p++) {     /* memchr: the 255s are rare */
        p = memchr(p, 255, (size_t)(small + n - p));
        uint32_t i = p ? (uint32_t)(p - small) : n;
        for (; next_block < blocks && (uint64_t)next_block * 64 <= i; next_block++)
            dir[next_block] = (uint32_t)e;
        if (!p) break;
        if (e >= n_esc || esc[2 * e] != i)
            return igt__fail(err, OLIF_ERR_CORRUPT, "%s of node %u is escaped but not in its table",
                             what, i);
        if (esc[2 * e + 1] < 255)
            return igt__fail(err, OLIF_ERR_CORRUPT, "%s escape of node %u holds %u, below 255",
                             what, i, esc[2 * e + 1]);
        e++;
    }
    if (e != n_esc)
        return igt__fail(err, OLIF_ERR_CORRUPT, "%s table has %llu entries for %llu escaped nodes",
                         what, (unsigned long long)n_esc, (unsigned long long)e);
    dir[blocks] = (uint32_t)e;
    return OLIF_OK;
}

/* A version-2 header's counts: in range and consistent with each other. */
static igt_status v2_check_counts(const header_v2 *h, igt_error *err) {
    if (h->flags != 0 || h->reserved0 != 0)
        return igt__fail(err, OLIF_ERR_CORRUPT, "unknown flags 0x%x (reserved 0x%x)", h->flags,
                         h->reserved0);
    if (h->id_width != id_width_for(h->vocab_size))
        return igt__fail(err, OLIF_ERR_CORRUPT, "id width %u for vocab_size %u, expected %u",
                         h->id_width, h->vocab_size, id_width_for(h->vocab_size));
    if (h->n_nodes < 1 || h->n_nodes >= UINT32_MAX || h->n_internal >= h->n_nodes ||
        h->n_pairs >= UINT32_MAX || h->n_total_esc > h->n_nodes || h->n_winner_esc > h->n_nodes)
        return igt__fail(err, OLIF_ERR_CORRUPT,
                         "node count %llu, internal %llu, class pairs %llu or escapes %llu/%llu "
                         "out of range",
                         (unsigned long long)h->n_nodes, (unsigned long long)h->n_internal,
                         (unsigned long long)h->n_pairs, (unsigned long long)h->n_total_esc,
                         (unsigned long long)h->n_winner_esc);
    if (h->n_instances < 1 || h->n_instances > UINT32_MAX || h->n_classes < 1 ||
        h->n_classes > h->vocab_size)
        return igt__fail(err, OLIF_ERR_CORRUPT, "%llu instances or %llu classes out of range",
                         (unsigned long long)h->n_instances, (unsigned long long)h->n_classes);
    if (!h->top_k && h->n_pairs)
        return igt__fail(err, OLIF_ERR_CORRUPT, "stored classes without top_k");
    if (h->top_k && h->n_pairs < h->n_nodes)
        return igt__fail(err, OLIF_ERR_CORRUPT, "%llu stored classes for %llu nodes",
                         (unsigned long long)h->n_pairs, (unsigned long long)h->n_nodes);
    return OLIF_OK;
}

/* A version-2 image's frame: header, counts, section bounds, checksums, zero
 * gaps between the sections. Fills the header, its meta and the section sizes. */
static igt_status v2_check_frame(const uint8_t *p, size_t size, uint32_t flags, header_v2 *h,
                                 igt_meta *mt, uint64_t sz[V2_COUNT], igt_error *err) {
    igt_status st = olif_check_frame(&V2_FRAME, p, size, flags, err);
    if (st) return st;
    memcpy(h, p, sizeof *h);
    meta_from_v2(h, mt);
    st = check_meta(mt, h->padding_id, err);
    if (st) return st;
    st = v2_check_counts(h, err);
    if (st) return st;
    uint64_t prev_end = 0;
    v2_section_sizes(h, sz);
    st = olif_check_sections(h->sec_offset, sz, V2_COUNT, sizeof(header_v2), h->file_size,
                             &prev_end, err);
    if (st) return st;
    if (olif_align(prev_end) != h->file_size)
        return igt__fail(err, OLIF_ERR_CORRUPT, "file size %llu, sections end at %llu",
                         (unsigned long long)h->file_size, (unsigned long long)prev_end);
    st = olif_check_payload(&V2_FRAME, p, size, flags, err);
    if (st) return st;
    /* the gaps between sections are zero */
    prev_end = sizeof *h;
    for (int k = 0; k <= V2_COUNT; k++) {
        uint64_t o = k < V2_COUNT ? h->sec_offset[k] : h->file_size;
        for (uint64_t b = prev_end; b < o; b++)
            if (p[b])
                return igt__fail(err, OLIF_ERR_CORRUPT, "nonzero padding byte at offset %llu",
                                 (unsigned long long)b);
        if (k < V2_COUNT) prev_end = o + sz[k];
    }
    return OLIF_OK;
}

/* A model not yet validated, whose sections point into the image p, and its
 * empty directories (freed by v2_discard). */
static igt_status v2_model_new(const uint8_t *p, const header_v2 *h, const igt_meta *mt,
                               igt_model **out, igt_error *err) {
    igt_model *m = calloc(1, sizeof *m);
    if (!m) return igt__fail(err, OLIF_ERR_NOMEM, "cannot allocate a model");
    m->meta = *mt;
    m->n_nodes = (uint32_t)h->n_nodes;
    m->id_width = h->id_width;
    m->n_internal = h->n_internal;
    m->n_pairs = h->n_pairs;
    m->n_total_esc = h->n_total_esc;
    m->n_winner_esc = h->n_winner_esc;
#define SEC(k) (p + h->sec_offset[k])
    m->key = SEC(V2_KEY);
    m->cls = SEC(V2_CLASS);
    m->kids = (const uint64_t *)(const void *)SEC(V2_KIDS);
    m->child = (const uint32_t *)(const void *)SEC(V2_CHILD);
    m->total8 = SEC(V2_TOTAL);
    m->winner8 = SEC(V2_WINNER);
    m->total_esc = (const uint32_t *)(const void *)SEC(V2_TOTAL_ESC);
    m->winner_esc = (const uint32_t *)(const void *)SEC(V2_WINNER_ESC);
    m->dist = h->top_k ? (const uint32_t *)(const void *)SEC(V2_DIST) : NULL;
    m->pair_cls = SEC(V2_PAIR_CLASS);
    m->pair_count = (const uint32_t *)(const void *)SEC(V2_PAIR_COUNT);
#undef SEC
    const uint64_t words = (m->n_nodes + 63) / 64;
    m->rank = igt__malloc((size_t)words + 1, sizeof *m->rank);
    m->total_dir = igt__malloc((size_t)words + 1, sizeof *m->total_dir);
    m->winner_dir = igt__malloc((size_t)words + 1, sizeof *m->winner_dir);
    if (!m->rank || !m->total_dir || !m->winner_dir) {
        free(m->rank);
        free(m->total_dir);
        free(m->winner_dir);
        free(m);
        return igt__fail(err, OLIF_ERR_NOMEM, "cannot allocate the model's directories");
    }
    *out = m;
    return OLIF_OK;
}

/* A model of v2_model_new's that failed validation. */
static void v2_discard(igt_model *m) {
    free(m->rank);
    free(m->total_dir);
    free(m->winner_dir);
    free(m);
}

#define BAD(...) return igt__fail(err, OLIF_ERR_CORRUPT, __VA_ARGS__)

/* KIDS: the rank directory, no bits past the last node, the root's children
 * nodes 1.., and the levels breadth-first, each the children of the one before,
 * no deeper than the window. */
static igt_status v2_check_shape(igt_model *m, igt_error *err) {
    const uint32_t n = m->n_nodes;
    const uint64_t words = (n + 63) / 64, internal = m->n_internal;
    uint64_t ones = 0;
    for (uint64_t k = 0; k < words; k++) {
        m->rank[k] = (uint32_t)ones;
        ones += igt__popcount64(m->kids[k]);
    }
    m->rank[words] = (uint32_t)ones;
    if (n % 64 && (m->kids[words - 1] >> (n % 64)))
        BAD("child flags set past the last node");
    if (ones != internal)
        BAD("%llu nodes flagged with children, header says %llu", (unsigned long long)ones,
            (unsigned long long)internal);
    if (internal ? !(igt__has_kids(m, 0) && m->child[0] == 1) : n != 1)
        BAD("the root's children are not nodes 1..");
    if (m->child[internal] != n) BAD("child index ends at %u, not at %u", m->child[internal], n);
    uint64_t lo = 0, hi = 1;
    for (uint32_t depth = 0;; depth++) {
        uint32_t r0 = rank_at(m, lo), r1 = rank_at(m, hi);
        if (r0 == r1) {
            if (hi != n) BAD("nodes %llu.. hang under no node", (unsigned long long)hi);
            break;
        }
        if (m->child[r0] != hi) BAD("level %u does not follow level %u", depth + 1, depth);
        if (depth >= m->meta.window) BAD("tree deeper than the window %u", m->meta.window);
        lo = hi;
        hi = m->child[r1];
    }
    return OLIF_OK;
}

/* Every node in one pass: class, key, counts; for a node with children its
 * block (in order, after it), their keys ascending and their totals within its
 * own. Counts are read through cursors into the escape tables, which advance
 * with the node (children come in node order too). */
static igt_status v2_check_nodes(const igt_model *m, igt_error *err) {
    const uint32_t n = m->n_nodes, V = m->meta.vocab_size, w = m->id_width;
    if (igt__read_id(m->key, 0, w) != 0) BAD("root key is not 0");
    const uint16_t *k16 = (const uint16_t *)(const void *)m->key;
    const uint16_t *c16 = (const uint16_t *)(const void *)m->cls;
#define ID_AT(base16, base, i) (w == 2 ? (uint32_t)(base16)[i] : igt__read_id((base), (i), w))
    /* escape cursors: node totals, winners, and child totals (children are
     * nodes 1.. in order, so that cursor starts past the root's entry) */
    uint64_t te = 0, we = 0, ce = m->total8[0] == 255;
    for (uint32_t i = 0, r = 0; i < n; i++) {
        uint32_t c = ID_AT(c16, m->cls, i), k = ID_AT(k16, m->key, i);
        if (c >= V) BAD("node %u: class %u is not below vocab_size %u", i, c, V);
        if (k > V) BAD("node %u: key %u exceeds the padding id %u", i, k, V);
        uint32_t tot = m->total8[i] < 255 ? m->total8[i] : m->total_esc[2 * te++ + 1];
        uint32_t win = m->winner8[i] < 255 ? m->winner8[i] : m->winner_esc[2 * we++ + 1];
        if (win < 1 || win > tot) BAD("node %u: winner count %u of total %u", i, win, tot);
        if (!igt__has_kids(m, i)) continue;
        const uint32_t a = m->child[r], z = m->child[r + 1];
        if (a <= i || z <= a) BAD("child index of node %u is out of order", i);
        uint64_t below = 0;
        for (uint32_t j = a; j < z; j++) {
            if (j > a && ID_AT(k16, m->key, j) <= ID_AT(k16, m->key, j - 1))
                BAD("children of node %u are not sorted", i);
            below += m->total8[j] < 255 ? m->total8[j] : m->total_esc[2 * ce++ + 1];
        }
        if (below > tot)
            BAD("children of node %u hold %llu instances, it holds %u", i,
                (unsigned long long)below, tot);
        r++;
    }
#undef ID_AT
    return OLIF_OK;
}

/* DIST, PAIR_CLASS, PAIR_COUNT: each node's winner first, counts
 * non-increasing, never more than the node holds. */
static igt_status v2_check_classes(const igt_model *m, const header_v2 *h, igt_error *err) {
    const uint32_t n = m->n_nodes, V = h->vocab_size, w = m->id_width;
    if (!m->dist) return OLIF_OK;
    if (m->dist[0] != 0 || m->dist[n] != h->n_pairs)
        BAD("class index of root or end is wrong");
    for (uint32_t i = 0; i < n; i++) {
        uint32_t a = m->dist[i], z = m->dist[i + 1];
        if (z <= a || z > h->n_pairs || z - a > h->n_classes ||
            (h->top_k != IGT_TOPK_ALL && z - a > h->top_k))
            BAD("class index of node %u is out of order", i);
        if (igt__read_id(m->pair_cls, a, w) != igt__read_id(m->cls, i, w) ||
            m->pair_count[a] != igt__winner(m, i))
            BAD("node %u: first stored class is not its default", i);
        uint64_t sum = 0;
        for (uint32_t j = a; j < z; j++) {
            if (igt__read_id(m->pair_cls, j, w) >= V)
                BAD("stored class %u out of range", igt__read_id(m->pair_cls, j, w));
            if (m->pair_count[j] < 1 || (j > a && m->pair_count[j] > m->pair_count[j - 1]))
                BAD("node %u: stored counts are not best first", i);
            sum += m->pair_count[j];
        }
        if (sum > igt__total(m, i))
            BAD("node %u: stored counts sum to %llu, above its total %u", i,
                (unsigned long long)sum, igt__total(m, i));
    }
    return OLIF_OK;
}

#undef BAD

/* Validate a version-2 image in place and make it a model. The image stays
 * the caller's on failure and becomes the model's on success. Check order:
 * header, bounds, checksums, then structure, so that a damaged file reports
 * damage before whatever structural symptom the damage has. */
static igt_status open_v2(uint8_t *p, size_t size, uint32_t flags, igt_model **out,
                          igt_error *err) {
    header_v2 h;
    igt_meta mt;
    uint64_t sz[V2_COUNT];
    igt_status st = v2_check_frame(p, size, flags, &h, &mt, sz, err);
    if (st) return st;
    igt_model *m = NULL;
    st = v2_model_new(p, &h, &mt, &m, err);
    if (st) return st;
    st = v2_check_shape(m, err);
    /* TOTAL_ESC, WINNER_ESC: one entry per 255 byte, in node order */
    if (!st)
        st = check_escapes(m, m->total8, m->total_esc, m->n_total_esc, m->total_dir, "total", err);
    if (!st)
        st = check_escapes(m, m->winner8, m->winner_esc, m->n_winner_esc, m->winner_dir,
                           "winner count", err);
    if (!st && igt__total(m, 0) != h.n_instances)
        st = igt__fail(err, OLIF_ERR_CORRUPT, "root total %u, header says %llu instances",
                       igt__total(m, 0), (unsigned long long)h.n_instances);
    if (!st) st = v2_check_nodes(m, err);
    if (!st) st = v2_check_classes(m, &h, err);
    if (st) {
        v2_discard(m);
        return st;
    }
    m->image = p;
    m->size = size;
    m->source_version = 2;
    set_unmatched(m);
    *out = m;
    return OLIF_OK;
}

/* Version-2 image of a node source (not yet validated). */
static igt_status encode_v2(const igt_meta *mt, const igt_node_source *src, uint8_t **image,
                            size_t *image_size, igt_error *err) {
    const uint64_t n = src->n_nodes;
    if (n < 1 || n >= UINT32_MAX || src->n_pairs >= UINT32_MAX)
        return igt__fail(err, OLIF_ERR_LIMIT, "tree too large: %llu nodes, %llu stored classes",
                         (unsigned long long)n, (unsigned long long)src->n_pairs);
    header_v2 h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, IGT_MAGIC, sizeof h.magic);
    h.version = 2;
    h.header_size = sizeof h;
    h.endian_tag = OLIF_ENDIAN_TAG;
    IGT_COPY_META(&h, mt);
    h.padding_id = mt->vocab_size;
    h.id_width = id_width_for(mt->vocab_size);
    h.n_nodes = n;
    /* sized by the source, never by a header field */
    uint32_t *scratch = igt__malloc(2 * (size_t)src->scratch_pairs + 2, sizeof *scratch);
    if (!scratch) return igt__fail(err, OLIF_ERR_NOMEM, "cannot allocate encoder scratch");
    /* pass 1: how big each section is */
    uint64_t n_pairs = 0;
    for (uint64_t i = 0; i < n; i++) {
        igt_node nd;
        src->get(src->ctx, (uint32_t)i, &nd, scratch);
        h.n_internal += nd.n_children > 0;
        h.n_total_esc += nd.total >= 255;
        h.n_winner_esc += nd.winner >= 255;
        n_pairs += mt->top_k ? nd.n_pairs : 0;
    }
    h.n_pairs = n_pairs;
    if (n_pairs >= UINT32_MAX) {
        free(scratch);
        return igt__fail(err, OLIF_ERR_LIMIT, "tree too large: %llu stored classes",
                         (unsigned long long)n_pairs);
    }
    uint64_t size[V2_COUNT];
    v2_section_sizes(&h, size);
    const uint64_t off = olif_align(olif_lay_out(sizeof h, size, V2_COUNT, h.sec_offset));
    h.file_size = off;
    uint8_t *img = calloc(1, (size_t)off);
    if (!img) {
        free(scratch);
        return igt__fail(err, OLIF_ERR_NOMEM, "cannot allocate a %llu-byte model image",
                         (unsigned long long)off);
    }
    /* pass 2: write them */
#define OUT(k) (img + h.sec_offset[k])
    uint64_t *kids = (uint64_t *)(void *)OUT(V2_KIDS);
    uint32_t *child = (uint32_t *)(void *)OUT(V2_CHILD);
    uint32_t *tesc = (uint32_t *)(void *)OUT(V2_TOTAL_ESC);
    uint32_t *wesc = (uint32_t *)(void *)OUT(V2_WINNER_ESC);
    uint32_t *dist = (uint32_t *)(void *)OUT(V2_DIST);
    uint32_t *pcount = (uint32_t *)(void *)OUT(V2_PAIR_COUNT);
    uint64_t next = 1, r = 0, te = 0, we = 0, pi = 0;
    for (uint64_t i = 0; i < n; i++) {
        igt_node nd;
        src->get(src->ctx, (uint32_t)i, &nd, scratch);
        put_id(OUT(V2_KEY), i, h.id_width, i ? nd.key : 0);
        put_id(OUT(V2_CLASS), i, h.id_width, nd.cls);
        if (nd.n_children && r < h.n_internal) {
            kids[i / 64] |= 1ull << (i % 64);
            child[r++] = (uint32_t)next;
            next += nd.n_children;
        }
        OUT(V2_TOTAL)[i] = (uint8_t)(nd.total < 255 ? nd.total : 255);
        OUT(V2_WINNER)[i] = (uint8_t)(nd.winner < 255 ? nd.winner : 255);
        if (nd.total >= 255 && te < h.n_total_esc) {
            tesc[2 * te] = (uint32_t)i;
            tesc[2 * te + 1] = nd.total;
            te++;
        }
        if (nd.winner >= 255 && we < h.n_winner_esc) {
            wesc[2 * we] = (uint32_t)i;
            wesc[2 * we + 1] = nd.winner;
            we++;
        }
        if (h.top_k) {
            dist[i] = (uint32_t)pi;
            for (uint32_t j = 0; j < nd.n_pairs && pi < n_pairs; j++, pi++) {
                put_id(OUT(V2_PAIR_CLASS), pi, h.id_width, nd.pairs[2 * j]);
                pcount[pi] = nd.pairs[2 * j + 1];
            }
        }
    }
    child[r] = (uint32_t)(next < UINT32_MAX ? next : UINT32_MAX);
    if (h.top_k) dist[n] = (uint32_t)pi;
#undef OUT
    free(scratch);
    memcpy(img, &h, sizeof h);
    olif_seal(&V2_FRAME, img, (size_t)off);
    *image = img;
    *image_size = (size_t)off;
    return OLIF_OK;
}

/* Encode, then the same validation a file gets: one set of checks for every
 * model, built or loaded. */
igt_status igt__model_from_nodes(const igt_meta *mt, const igt_node_source *src,
                                 igt_model **out, igt_error *err) {
    *out = NULL;
    uint8_t *img = NULL;
    size_t size = 0;
    igt_status st = encode_v2(mt, src, &img, &size, err);
    if (st) return st;
    st = open_v2(img, size, 0, out, err);
    if (st) {
        free(img);
        if (st != OLIF_ERR_NOMEM)   /* the builder made an inconsistent tree */
            igt__prefix_error(err, "internal error: built tree fails validation: ");
    }
    return st;
}

static void model_get(void *ctx, uint32_t i, igt_node *o, uint32_t *scratch) {
    const igt_model *m = ctx;
    const uint32_t w = m->id_width;
    o->key = igt__read_id(m->key, i, w);
    o->cls = igt__read_id(m->cls, i, w);
    o->winner = igt__winner(m, i);
    o->total = igt__total(m, i);
    if (igt__has_kids(m, i)) {
        uint32_t r = igt__kid_rank(m, i);
        o->n_children = m->child[r + 1] - m->child[r];
    } else {
        o->n_children = 0;
    }
    o->n_pairs = 0;
    o->pairs = scratch;
    if (m->dist)
        for (uint32_t j = m->dist[i]; j < m->dist[i + 1]; j++, o->n_pairs++) {
            scratch[2 * o->n_pairs] = igt__read_id(m->pair_cls, j, w);
            scratch[2 * o->n_pairs + 1] = m->pair_count[j];
        }
}

void igt__model_source(const igt_model *m, igt_node_source *src) {
    src->n_nodes = m->n_nodes;
    src->n_pairs = m->n_pairs;
    src->scratch_pairs = 0;
    if (m->dist)
        for (uint32_t i = 0; i < m->n_nodes; i++)
            if (m->dist[i + 1] - m->dist[i] > src->scratch_pairs)
                src->scratch_pairs = m->dist[i + 1] - m->dist[i];
    src->get = model_get;
    src->ctx = (void *)(uintptr_t)m;    /* model_get only reads */
}

/* ---- images to models ---------------------------------------------------------- */

/* A model of a supported version (the file layer checked the magic and the version; olif_frame.h).
 * Takes ownership of image (freed unless it becomes the model's). */
static igt_status model_parse(uint8_t *image, size_t size, uint32_t version, uint32_t flags,
                              void *out, igt_error *err) {
    igt_model **model = out;
    igt_status st;
    if (version == 2) {
        st = open_v2(image, size, flags, model, err);
        if (st)
            free(image);
        else if (flags & IGT_LOAD_SKIP_CHECKSUM)
            olif_seal(&V2_FRAME, image, size);  /* the structure is valid whatever the checksums
                                                   said: igt_save writes a file that loads */
        return st;
    }
    /* version 1: validate, then convert to version 2 (one query layout); a
     * file that version 1's checks accept may still fail version 2's
     * stricter ones, and then the message says which version failed */
    v1_view v;
    st = parse_v1(image, size, flags, &v, err);
    if (st == OLIF_OK) {
        igt_meta mt;
        meta_from_v1(&v.h, &mt);
        igt_node_source src = {v.h.n_nodes, v.h.n_pairs, 0, v1_get, &v};
        uint8_t *img2 = NULL;
        size_t size2 = 0;
        st = encode_v2(&mt, &src, &img2, &size2, err);
        if (st == OLIF_OK) {
            st = open_v2(img2, size2, 0, model, err);
            if (st == OLIF_OK) {
                (*model)->source_version = 1;
            } else {
                free(img2);
                if (st != OLIF_ERR_NOMEM) igt__prefix_error(err, "version-1 file: ");
            }
        }
    }
    free(image);
    return st;
}

OLIF_STATIC_ASSERT(IGT_LOAD_SKIP_CHECKSUM == OLIF_SKIP_CHECKSUM, skip_checksum_flag);

static const olif_kind MODEL = {IGT_MAGIC, "model", "a model file", 1, IGT_FORMAT_VERSION,
                                model_parse};

igt_status igt_load_buffer(const void *data, size_t size, uint32_t flags, igt_model **out,
                           igt_error *err) {
    if (out) *out = NULL;
    return olif_load_buffer(&MODEL, data, size, flags, out, err);
}

/* The file layer reads the whole file into private memory (olif_read_file): a model does not
 * change, and cannot SIGBUS, when its file is rewritten or truncated. */
igt_status igt_load(const char *path, uint32_t flags, igt_model **out, igt_error *err) {
    if (out) *out = NULL;
    return olif_load(&MODEL, path, flags, out, err);
}

void igt_free(igt_model *m) {
    if (!m) return;
    free(m->image);
    free(m->rank);
    free(m->total_dir);
    free(m->winner_dir);
    free(m);
}

/* ---- saving ------------------------------------------------------------------------ */

igt_status igt_save_version(const igt_model *m, const char *path, uint32_t version,
                            igt_error *err) {
    igt__clear_error(err);
    if (!m || !path) return igt__fail(err, OLIF_ERR_ARG, "NULL model or path");
    if (version == 2) return olif_write_file(path, m->image, m->size, err);
    if (version != 1)
        return igt__fail(err, OLIF_ERR_ARG, "cannot write format version %u (this library writes 1 and 2)",
                         version);
    igt_node_source src;
    igt__model_source(m, &src);
    uint8_t *img = NULL;
    size_t size = 0;
    igt_status st = encode_v1(&m->meta, &src, &img, &size, err);
    if (st) return st;
    st = olif_write_file(path, img, size, err);
    free(img);
    return st;
}

igt_status igt_save(const igt_model *m, const char *path, igt_error *err) {
    return igt_save_version(m, path, IGT_FORMAT_VERSION, err);
}
