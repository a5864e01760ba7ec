/*
 * igtree.c — IGTree (TiMBL 6.5 -a1) over token windows: errors, version,
 * model facts and queries. API in igtree.h; semantics in
 * shared/reference/igtree-spec.md; the other source files are listed in
 * igt_internal.h.
 *
 * A model is a validated version-2 image (igt_file.c) held in private
 * memory, plus a rank directory over its "has children" bits. Nothing in it
 * changes after loading, so queries need no locks.
 */
#include "igt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- version, errors --------------------------------------------------------- */

const char *igt_version(void) { return IGT_VERSION_STRING; }

uint32_t igt_version_number(void) { return IGT_VERSION_NUMBER; }

void igt__prefix_error(igt_error *err, const char *prefix) {
    if (!err) return;
    const size_t cap = sizeof err->message;
    size_t p = strlen(prefix), m = strlen(err->message);
    if (p > cap - 1) p = cap - 1;
    if (m > cap - 1 - p) m = cap - 1 - p;
    memmove(err->message + p, err->message, m);
    memcpy(err->message, prefix, p);
    err->message[p + m] = '\0';
}

void *igt__malloc(size_t count, size_t elem) {
    if (elem && count > SIZE_MAX / elem) return NULL;
    size_t bytes = count * elem;
    return malloc(bytes ? bytes : 1);
}

void *igt__calloc(size_t count, size_t elem) {
    return calloc(count ? count : 1, elem ? elem : 1);
}

int igt__grow(void **v, size_t *cap, size_t need, size_t elem, size_t first) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : first;
    while (c < need) c = c > SIZE_MAX / 2 ? need : 2 * c;
    if (elem && c > SIZE_MAX / elem) return 0;
    void *nv = realloc(*v, c * elem);
    if (!nv) return 0;
    *v = nv;
    *cap = c;
    return 1;
}

/* ---- facts ---------------------------------------------------------------------- */

void igt_get_info(const igt_model *m, igt_info *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    if (!m) return;
    IGT_COPY_META(o, &m->meta);
    o->format_version = IGT_FORMAT_VERSION;     /* of the image held (and saved) */
    o->padding_id = m->meta.vocab_size;
    o->n_nodes = m->n_nodes - 1;
    o->n_dist_entries = m->n_pairs;
    o->file_size = m->size;
    o->memory_mapped = 0;                       /* always a private copy */
}

/* ---- queries -------------------------------------------------------------------- */

/* Lower bound of v among the keys lo..hi-1 (ascending); hi if none. Most
 * nodes have few children: a scan; else a branch-free binary search. */
static inline uint32_t find_key(const igt_model *m, uint32_t lo, uint32_t hi, uint32_t v) {
    if (m->id_width == 2) {     /* the common case (vocabularies below 65,536) */
        const uint16_t *key = (const uint16_t *)(const void *)m->key;
        if (hi - lo <= 8) {
            while (lo < hi && key[lo] < v) lo++;
            return lo;
        }
        uint32_t n = hi - lo;
        const uint16_t *base = key + lo;
        while (n > 1) {
            uint32_t half = n / 2;
            base = base[half - 1] < v ? base + half : base;
            n -= half;
        }
        return (uint32_t)(base - key) + (*base < v);
    }
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (igt__read_id(m->key, mid, m->id_width) < v) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* Walk one window given in window order (oldest first). */
static inline void walk(const igt_model *m, const uint32_t *win, igt_answer *out) {
    const uint32_t F = m->meta.window, V = m->meta.vocab_size;
    uint32_t node = 0, depth = 0;
    for (uint32_t d = 0; d < F; d++) {
        if (!igt__has_kids(m, node)) break;
        uint32_t v = win[m->meta.permutation[d]];
        if (v > V) break;                   /* stored keys never exceed the padding id */
        uint32_t r = igt__kid_rank(m, node), end = m->child[r + 1];
        uint32_t at = find_key(m, m->child[r], end, v);
        if (at == end || igt__read_id(m->key, at, m->id_width) != v) break;
        node = at;
        depth = d + 1;
    }
    out->token = igt__read_id(m->cls, node, m->id_width);
    out->depth = depth;
    out->leaf = depth > 0 && !igt__has_kids(m, node);
    out->node = node;
    out->winner_count = igt__winner(m, node);
    out->total = igt__total(m, node);
    out->distance = m->unmatched[depth];
}

static void no_answer(igt_answer *out) {
    memset(out, 0, sizeof *out);
    out->token = IGT_NO_TOKEN;
}

/* The last `window` ids of context, left-padded. */
static void make_window(const igt_model *m, const uint32_t *context, size_t n, uint32_t *win) {
    const uint32_t F = m->meta.window;
    for (uint32_t j = 0; j < F; j++) {
        size_t back = F - j;
        win[j] = n >= back ? context[n - back] : m->meta.vocab_size;
    }
}

void igt_predict(const igt_model *m, const uint32_t *context, size_t n, igt_answer *out) {
    if (!out) return;
    if (!m || (!context && n)) {
        no_answer(out);
        return;
    }
    uint32_t win[IGT_MAX_WINDOW];
    make_window(m, context, n, win);
    walk(m, win, out);
}

void igt_predict_batch(const igt_model *m, const uint32_t *rows, size_t n, igt_answer *out) {
    if (!out || n == 0) return;
    if (!m || !rows) {
        for (size_t i = 0; i < n; i++) no_answer(out + i);
        return;
    }
    const uint32_t F = m->meta.window;
    for (size_t i = 0; i < n; i++) walk(m, rows + i * F, out + i);
}

size_t igt_draft(const igt_model *m, const uint32_t *context, size_t n, size_t k,
                 uint32_t min_depth, double min_share, uint32_t *tokens,
                 igt_answer *answers) {
    if (!m || !tokens || (!context && n)) return 0;
    const uint32_t F = m->meta.window;
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
        if (classes) classes[i - a] = igt__read_id(m->pair_cls, i, m->id_width);
        if (counts) counts[i - a] = m->pair_count[i];
    }
    return z - a;
}
