/*
 * suffix.c — a suffix array (REST-style drafting) and llama.cpp's static
 * n-gram cache over a corpus of token ids. API in suffix.h; file formats in
 * docs/retrieval.md.
 *
 * Build: the corpus is kept as one text, every document followed by the
 * separator id (vocab_size). Its suffix array comes from SA-IS (Nong, Zhang
 * & Chan 2009: induced sorting, linear time) on the text shifted up by one
 * with a unique 0 sentinel appended; suffixes that start at a separator are
 * dropped. The n-gram cache is one scan of that suffix array: suffixes that
 * share their first `order` ids are adjacent and sorted by the id after, so
 * contexts and their next-id counts come out sorted and already grouped.
 *
 * File: a fixed 512-byte header followed by 64-byte aligned sections. A
 * built structure is serialised to this image in memory and then parsed by
 * the same validating loader used for files.
 */
#define _POSIX_C_SOURCE 200809L
#include "suffix.h"
#include "olif_frame.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- version, errors (the file layer's: olif_file.h) -------------------------- */

const char *sfx_version(void) { return olif_version(); }

uint32_t sfx_version_number(void) { return olif_version_number(); }

/* the file layer's formatter (olif_file.h): one for both libraries */
#define fail olif_fail
#define clear_error olif_clear_error

void sfx_config_init(sfx_config *cfg, uint32_t vocab_size) {
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    cfg->vocab_size = vocab_size;
}

static sfx_status check_config(const sfx_config *cfg, sfx_error *err) {
    if (!cfg) return fail(err, OLIF_ERR_ARG, "config is NULL");
    if (cfg->vocab_size < 1 || cfg->vocab_size >= SFX_MAX_VOCAB)
        return fail(err, OLIF_ERR_ARG, "vocab_size %u out of range 1..%u", cfg->vocab_size,
                    SFX_MAX_VOCAB - 1);
    if (memchr(cfg->tokenizer_name, 0, SFX_TOKENIZER_NAME_MAX) == NULL)
        return fail(err, OLIF_ERR_ARG, "tokenizer name is not NUL-terminated");
    return OLIF_OK;
}

static int cancelled(sfx_progress_fn progress, void *user, const char *phase, uint64_t done,
                     uint64_t total) {
    return progress && progress(user, phase, done, total) != 0;
}

/* ---- file header ----------------------------------------------------------- */

#define MAX_SECTIONS 4

typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t header_size;
    uint32_t endian_tag;
    uint32_t vocab_size;
    uint32_t separator;         /* = vocab_size */
    uint32_t param;             /* index: bytes per text token; n-gram cache: order */
    uint32_t n_sections;
    uint32_t reserved0;
    uint64_t count[3];          /* index: text, suffixes, documents;
                                   n-gram cache: contexts, pairs, instances */
    uint64_t file_size;
    uint64_t sec_offset[MAX_SECTIONS];
    uint64_t sec_size[MAX_SECTIONS];
    uint64_t payload_checksum;
    uint64_t header_checksum;   /* computed with this field zero */
    char tokenizer_name[SFX_TOKENIZER_NAME_MAX];
    uint8_t tokenizer_digest[SFX_TOKENIZER_DIGEST_SIZE];
    uint8_t reserved[264];
} file_header;

OLIF_STATIC_ASSERT(sizeof(file_header) == 512, file_header_layout);
OLIF_STATIC_ASSERT(SFX_LOAD_SKIP_CHECKSUM == OLIF_SKIP_CHECKSUM, skip_checksum_flag);

static const olif_frame FRAME = {sizeof(file_header), offsetof(file_header, file_size),
                                 offsetof(file_header, payload_checksum),
                                 offsetof(file_header, header_checksum)};

static void header_init(file_header *h, const char *magic, const sfx_config *cfg, uint32_t param) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, magic, 8);
    h->version = SFX_FORMAT_VERSION;
    h->header_size = sizeof(file_header);
    h->endian_tag = OLIF_ENDIAN_TAG;
    h->vocab_size = cfg->vocab_size;
    h->separator = cfg->vocab_size;
    h->param = param;
    memcpy(h->tokenizer_name, cfg->tokenizer_name, SFX_TOKENIZER_NAME_MAX);
    memcpy(h->tokenizer_digest, cfg->tokenizer_digest, SFX_TOKENIZER_DIGEST_SIZE);
}

/* Sections of the given sizes after the header; returns the file size. */
static uint64_t lay_out(file_header *h, const uint64_t *sizes, uint32_t n) {
    h->n_sections = n;
    memcpy(h->sec_size, sizes, n * sizeof *sizes);
    h->file_size = olif_lay_out(sizeof *h, sizes, n, h->sec_offset);
    return h->file_size;
}

/* The header into its image, then both checksums. */
static void seal(uint8_t *image, const file_header *h) {
    memcpy(image, h, sizeof *h);
    olif_seal(&FRAME, image, (size_t)h->file_size);
}

/* Parsed file image shared by both structures. */
typedef struct {
    const uint8_t *data;
    size_t size;
    file_header h;
} image;

static void image_release(image *im) {
    free((void *)im->data);
    im->data = NULL;
}

/* The header's checks after the magic and the version (the file layer's, olif_frame.h): frame,
 * fields, sizes, sections, checksums. `expected` holds the section sizes the counts imply,
 * computed by the caller's check_counts once the header is known. */
typedef sfx_status (*counts_fn)(const file_header *h, uint64_t *expected, uint32_t *n_sections,
                                sfx_error *err);

static sfx_status parse_header(image *im, counts_fn counts, uint32_t flags, sfx_error *err) {
    const uint8_t *p = im->data;
    sfx_status st = olif_check_frame(&FRAME, p, im->size, flags, err);
    if (st) return st;
    file_header *h = &im->h;
    memcpy(h, p, sizeof *h);
    if (h->vocab_size < 1 || h->vocab_size >= SFX_MAX_VOCAB || h->separator != h->vocab_size)
        return fail(err, OLIF_ERR_CORRUPT, "vocab_size %u / separator %u invalid", h->vocab_size,
                    h->separator);
    if (memchr(h->tokenizer_name, 0, SFX_TOKENIZER_NAME_MAX) == NULL)
        return fail(err, OLIF_ERR_CORRUPT, "tokenizer name not terminated");
    if (h->reserved0)
        return fail(err, OLIF_ERR_CORRUPT, "reserved header field is not zero");
    for (size_t i = 0; i < sizeof h->reserved; i++)
        if (h->reserved[i])
            return fail(err, OLIF_ERR_CORRUPT, "reserved header bytes are not zero");
    uint64_t expected[MAX_SECTIONS] = {0}, end = 0;
    uint32_t n_sec = 0;
    st = counts(h, expected, &n_sec, err);
    if (st) return st;
    if (h->n_sections != n_sec)
        return fail(err, OLIF_ERR_CORRUPT, "%u sections, expected %u", h->n_sections, n_sec);
    for (uint32_t k = 0; k < MAX_SECTIONS; k++) {
        if (k >= n_sec && (h->sec_offset[k] || h->sec_size[k]))
            return fail(err, OLIF_ERR_CORRUPT, "unused section %u is not empty", k);
        if (k < n_sec && h->sec_size[k] != expected[k])
            return fail(err, OLIF_ERR_CORRUPT, "section %u holds %llu bytes, its counts say %llu",
                        k, (unsigned long long)h->sec_size[k], (unsigned long long)expected[k]);
    }
    st = olif_check_sections(h->sec_offset, h->sec_size, n_sec, sizeof *h, h->file_size, &end, err);
    if (st) return st;
    if (end != h->file_size)
        return fail(err, OLIF_ERR_CORRUPT, "%llu bytes after the last section",
                    (unsigned long long)(h->file_size - end));
    return olif_check_payload(&FRAME, p, im->size, flags, err);
}

/* An object whose first member is its image, made of image (owned: freed on failure) and
 * checked by parse. */
typedef sfx_status (*parse_fn)(void *obj, uint32_t flags, sfx_error *err);

static sfx_status open_object(size_t size, parse_fn parse, uint8_t *data, size_t n,
                              uint32_t flags, void **out, sfx_error *err) {
    *out = NULL;
    image *im = calloc(1, size);
    if (!im) {
        free(data);
        return fail(err, OLIF_ERR_NOMEM, "cannot allocate %zu bytes", size);
    }
    im->data = data;
    im->size = n;
    sfx_status st = parse(im, flags, err);
    if (st) {
        image_release(im);
        free(im);
        return st;
    }
    *out = im;
    return OLIF_OK;
}

/* ---- the corpus -------------------------------------------------------------- */

struct sfx_corpus {
    sfx_config cfg;
    uint32_t *text;             /* documents, each followed by the separator */
    uint64_t n, cap;
    uint64_t n_tokens, n_docs;
};

sfx_status sfx_corpus_new(const sfx_config *cfg, sfx_corpus **out, sfx_error *err) {
    clear_error(err);
    if (!out) return fail(err, OLIF_ERR_ARG, "out is NULL");
    *out = NULL;
    sfx_status st = check_config(cfg, err);
    if (st) return st;
    sfx_corpus *c = calloc(1, sizeof *c);
    if (!c) return fail(err, OLIF_ERR_NOMEM, "cannot allocate corpus");
    c->cfg = *cfg;
    *out = c;
    return OLIF_OK;
}

sfx_status sfx_corpus_add_documents(sfx_corpus *c, const uint32_t *tokens, size_t n_tokens,
                                    const uint64_t *doc_starts, size_t n_docs, sfx_error *err) {
    clear_error(err);
    if (!c) return fail(err, OLIF_ERR_ARG, "corpus is NULL");
    if ((n_tokens && !tokens) || (n_docs && !doc_starts))
        return fail(err, OLIF_ERR_ARG, "NULL tokens or doc_starts");
    if (n_tokens && !n_docs) return fail(err, OLIF_ERR_ARG, "tokens without documents");
    if (n_docs && doc_starts[0] != 0)
        return fail(err, OLIF_ERR_ARG, "doc_starts[0] is %llu, must be 0",
                    (unsigned long long)doc_starts[0]);
    for (size_t i = 0; i < n_docs; i++) {
        uint64_t end = i + 1 < n_docs ? doc_starts[i + 1] : n_tokens;
        if (doc_starts[i] > end || end > n_tokens)
            return fail(err, OLIF_ERR_ARG, "doc_starts[%zu] = %llu out of order or beyond %zu tokens",
                        i, (unsigned long long)doc_starts[i], n_tokens);
    }
    const uint32_t V = c->cfg.vocab_size;
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i] >= V)
            return fail(err, OLIF_ERR_ARG, "token %u at %zu is not below vocab_size %u", tokens[i],
                        i, V);
    uint64_t need = c->n + n_tokens + n_docs;
    if (need > SFX_MAX_TEXT || need < c->n)
        return fail(err, OLIF_ERR_LIMIT, "corpus of more than %u tokens and documents",
                    SFX_MAX_TEXT);
    if (need > c->cap) {
        uint64_t cap = c->cap ? c->cap : 1 << 16;
        while (cap < need) cap *= 2;
        if (cap > SFX_MAX_TEXT) cap = SFX_MAX_TEXT;
        uint32_t *t = realloc(c->text, (size_t)cap * sizeof *t);
        if (!t) return fail(err, OLIF_ERR_NOMEM, "cannot grow corpus to %llu tokens",
                            (unsigned long long)cap);
        c->text = t;
        c->cap = cap;
    }
    for (size_t i = 0; i < n_docs; i++) {
        uint64_t s = doc_starts[i], e = i + 1 < n_docs ? doc_starts[i + 1] : n_tokens;
        if (e == s) continue;
        memcpy(c->text + c->n, tokens + s, (size_t)(e - s) * sizeof *tokens);
        c->n += e - s;
        c->text[c->n++] = V;
        c->n_tokens += e - s;
        c->n_docs++;
    }
    return OLIF_OK;
}

uint64_t sfx_corpus_tokens(const sfx_corpus *c) { return c ? c->n_tokens : 0; }
uint64_t sfx_corpus_documents(const sfx_corpus *c) { return c ? c->n_docs : 0; }

void sfx_corpus_free(sfx_corpus *c) {
    if (!c) return;
    free(c->text);
    free(c);
}

/* ---- SA-IS ------------------------------------------------------------------- */
/* s[0..n) over 0..K with s[n-1] == 0 the unique smallest symbol; n >= 2.
 * Types: bit set = S-type. Returns 0, or -1 when an allocation fails. */

#define TGET(t, i) (((t)[(i) >> 3] >> ((i) & 7)) & 1)
#define TSET(t, i, b) ((b) ? ((t)[(i) >> 3] |= (uint8_t)(1u << ((i) & 7))) \
                           : ((t)[(i) >> 3] &= (uint8_t)~(1u << ((i) & 7))))
#define IS_LMS(t, i) ((i) > 0 && TGET(t, i) && !TGET(t, (i) - 1))

static void get_buckets(const int32_t *s, int32_t n, int32_t K, int32_t *bkt, int end) {
    memset(bkt, 0, ((size_t)K + 1) * sizeof *bkt);
    for (int32_t i = 0; i < n; i++) bkt[s[i]]++;
    int32_t sum = 0;
    for (int32_t i = 0; i <= K; i++) {
        sum += bkt[i];
        bkt[i] = end ? sum : sum - bkt[i];
    }
}

static void induce(const uint8_t *t, int32_t *SA, const int32_t *s, int32_t *bkt, int32_t n,
                   int32_t K) {
    get_buckets(s, n, K, bkt, 0);               /* L-type, left to right */
    for (int32_t i = 0; i < n; i++) {
        int32_t j = SA[i] - 1;
        if (SA[i] > 0 && !TGET(t, j)) SA[bkt[s[j]]++] = j;
    }
    get_buckets(s, n, K, bkt, 1);               /* S-type, right to left */
    for (int32_t i = n - 1; i >= 0; i--) {
        int32_t j = SA[i] - 1;
        if (SA[i] > 0 && TGET(t, j)) SA[--bkt[s[j]]] = j;
    }
}

static int sais(const int32_t *s, int32_t *SA, int32_t n, int32_t K) {
    uint8_t *t = calloc((size_t)n / 8 + 1, 1);
    int32_t *bkt = malloc(((size_t)K + 1) * sizeof *bkt);
    if (!t || !bkt) {
        free(t);
        free(bkt);
        return -1;
    }
    TSET(t, n - 1, 1);
    TSET(t, n - 2, 0);
    for (int32_t i = n - 3; i >= 0; i--)
        TSET(t, i, s[i] < s[i + 1] || (s[i] == s[i + 1] && TGET(t, i + 1)));

    /* stage 1: sort the LMS substrings */
    get_buckets(s, n, K, bkt, 1);
    for (int32_t i = 0; i < n; i++) SA[i] = -1;
    for (int32_t i = 1; i < n; i++)
        if (IS_LMS(t, i)) SA[--bkt[s[i]]] = i;
    induce(t, SA, s, bkt, n, K);
    free(bkt);
    bkt = NULL;

    int32_t n1 = 0;                             /* sorted LMS positions to the front */
    for (int32_t i = 0; i < n; i++)
        if (IS_LMS(t, SA[i])) SA[n1++] = SA[i];
    for (int32_t i = n1; i < n; i++) SA[i] = -1;
    int32_t name = 0, prev = -1;                /* name the LMS substrings */
    for (int32_t i = 0; i < n1; i++) {
        int32_t pos = SA[i];
        int diff = 0;
        for (int32_t d = 0; d < n; d++) {
            if (prev == -1 || s[pos + d] != s[prev + d] || TGET(t, pos + d) != TGET(t, prev + d)) {
                diff = 1;
                break;
            }
            if (d > 0 && (IS_LMS(t, pos + d) || IS_LMS(t, prev + d))) break;
        }
        if (diff) {
            name++;
            prev = pos;
        }
        SA[n1 + pos / 2] = name - 1;
    }
    for (int32_t i = n - 1, j = n - 1; i >= n1; i--)
        if (SA[i] >= 0) SA[j--] = SA[i];

    /* stage 2: the reduced problem, recursively if names repeat */
    int32_t *SA1 = SA, *s1 = SA + n - n1;
    if (name < n1) {
        if (sais(s1, SA1, n1, name - 1) != 0) {
            free(t);
            return -1;
        }
    } else {
        for (int32_t i = 0; i < n1; i++) SA1[s1[i]] = i;
    }

    /* stage 3: induce the full order from the sorted LMS suffixes */
    bkt = malloc(((size_t)K + 1) * sizeof *bkt);
    if (!bkt) {
        free(t);
        return -1;
    }
    get_buckets(s, n, K, bkt, 1);
    for (int32_t i = 1, j = 0; i < n; i++)
        if (IS_LMS(t, i)) s1[j++] = i;
    for (int32_t i = 0; i < n1; i++) SA1[i] = s1[SA1[i]];
    for (int32_t i = n1; i < n; i++) SA[i] = -1;
    for (int32_t i = n1 - 1; i >= 0; i--) {
        int32_t j = SA[i];
        SA[i] = -1;
        SA[--bkt[s[j]]] = j;
    }
    induce(t, SA, s, bkt, n, K);
    free(bkt);
    free(t);
    return 0;
}

/* The suffix array of the corpus text, separator suffixes dropped: n_tokens
 * entries in *out (malloc'ed). */
static sfx_status corpus_suffix_array(const sfx_corpus *c, uint32_t **out, sfx_error *err) {
    *out = NULL;
    const int32_t N = (int32_t)(c->n + 1);
    int32_t *s = malloc((size_t)N * sizeof *s);
    int32_t *SA = malloc((size_t)N * sizeof *SA);
    if (!s || !SA) {
        free(s);
        free(SA);
        return fail(err, OLIF_ERR_NOMEM, "cannot allocate %d-entry suffix array", N);
    }
    for (uint64_t i = 0; i < c->n; i++) s[i] = (int32_t)c->text[i] + 1;
    s[N - 1] = 0;
    int r = sais(s, SA, N, (int32_t)c->cfg.vocab_size + 1);
    free(s);
    if (r != 0) {
        free(SA);
        return fail(err, OLIF_ERR_NOMEM, "out of memory while sorting suffixes");
    }
    /* SA[0] is the sentinel; keep suffixes that start at a corpus token */
    uint32_t *sa = (uint32_t *)SA;
    uint64_t k = 0;
    const uint32_t V = c->cfg.vocab_size;
    for (int32_t i = 1; i < N; i++)
        if (c->text[SA[i]] != V) sa[k++] = (uint32_t)SA[i];
    if (k != c->n_tokens) {
        free(SA);
        return fail(err, OLIF_ERR_CORRUPT, "internal error: %llu suffixes for %llu tokens",
                    (unsigned long long)k, (unsigned long long)c->n_tokens);
    }
    *out = sa;
    return OLIF_OK;
}

/* ---- the suffix index ----------------------------------------------------------- */

enum { SEC_TEXT, SEC_SA, SEC_BUCKET, INDEX_SECTIONS };

struct sfx_index {
    image im;
    uint32_t V;
    uint64_t n_text, n_sa;
    const uint16_t *t16;        /* the text, one of these */
    const uint32_t *t32;
    const uint32_t *sa;
    const uint32_t *bucket;     /* V + 1 entries: suffixes starting with id v are
                                   sa[bucket[v] .. bucket[v+1]) (bucket[V] = n_sa) */
    uint32_t *doc_start;        /* n_docs text positions, ascending: where each document
                                   starts (derived from the text at load; not in the file) */
    uint64_t n_docs;
};

static sfx_status index_counts(const file_header *h, uint64_t *expected, uint32_t *n_sec,
                               sfx_error *err) {
    const uint64_t n_text = h->count[0], n_sa = h->count[1], n_docs = h->count[2];
    if (h->param != 2 && h->param != 4)
        return fail(err, OLIF_ERR_CORRUPT, "%u bytes per text token, expected 2 or 4", h->param);
    if (h->param == 2 && h->vocab_size > 0xFFFFu)
        return fail(err, OLIF_ERR_CORRUPT, "vocab_size %u does not fit 2-byte tokens",
                    h->vocab_size);
    if (n_sa < 1 || n_docs < 1 || n_text > SFX_MAX_TEXT || n_docs > n_text ||
        n_text - n_docs != n_sa)
        return fail(err, OLIF_ERR_CORRUPT, "text %llu, suffixes %llu and documents %llu disagree",
                    (unsigned long long)n_text, (unsigned long long)n_sa,
                    (unsigned long long)n_docs);
    expected[SEC_TEXT] = n_text * h->param;
    expected[SEC_SA] = n_sa * 4;
    expected[SEC_BUCKET] = ((uint64_t)h->vocab_size + 1) * 4;
    *n_sec = INDEX_SECTIONS;
    return OLIF_OK;
}

static inline uint32_t text_at(const sfx_index *x, uint64_t i) {
    return x->t16 ? x->t16[i] : x->t32[i];
}

static sfx_status index_check(sfx_index *x, uint32_t flags, sfx_error *err) {
    sfx_status st = parse_header(&x->im, index_counts, flags, err);
    if (st) return st;
    const file_header *h = &x->im.h;
    const uint8_t *p = x->im.data;
    x->V = h->vocab_size;
    x->n_text = h->count[0];
    x->n_sa = h->count[1];
    x->t16 = h->param == 2 ? (const uint16_t *)(p + h->sec_offset[SEC_TEXT]) : NULL;
    x->t32 = h->param == 4 ? (const uint32_t *)(p + h->sec_offset[SEC_TEXT]) : NULL;
    x->sa = (const uint32_t *)(p + h->sec_offset[SEC_SA]);
    x->bucket = (const uint32_t *)(p + h->sec_offset[SEC_BUCKET]);
    /* text: ids <= V, one separator per document, the last id a separator */
    uint64_t seps = 0;
    for (uint64_t i = 0; i < x->n_text; i++) {
        uint32_t t = text_at(x, i);
        if (t > x->V)
            return fail(err, OLIF_ERR_CORRUPT, "text id %u at %llu is beyond the separator %u", t,
                        (unsigned long long)i, x->V);
        seps += t == x->V;
    }
    if (seps != h->count[2] || text_at(x, x->n_text - 1) != x->V)
        return fail(err, OLIF_ERR_CORRUPT, "text has %llu separators for %llu documents",
                    (unsigned long long)seps, (unsigned long long)h->count[2]);
    for (uint64_t i = 0; i < x->n_sa; i++)
        if (x->sa[i] >= x->n_text)
            return fail(err, OLIF_ERR_CORRUPT, "suffix %llu starts at %u, beyond the text",
                        (unsigned long long)i, x->sa[i]);
    if (x->bucket[0] != 0 || x->bucket[x->V] != x->n_sa)
        return fail(err, OLIF_ERR_CORRUPT, "bucket index of first or last id is wrong");
    for (uint32_t v = 0; v < x->V; v++)
        if (x->bucket[v + 1] < x->bucket[v])
            return fail(err, OLIF_ERR_CORRUPT, "bucket index of id %u is out of order", v);
    return OLIF_OK;
}

/* The checks, then the document start table (allocated last: a failed check leaves nothing
 * for open_object to free but the image). */
static sfx_status index_parse(void *obj, uint32_t flags, sfx_error *err) {
    sfx_index *x = obj;
    sfx_status st = index_check(x, flags, err);
    if (st) return st;
    x->n_docs = x->im.h.count[2];
    x->doc_start = malloc((size_t)x->n_docs * sizeof *x->doc_start);
    if (!x->doc_start)
        return fail(err, OLIF_ERR_NOMEM, "cannot allocate %llu document starts",
                    (unsigned long long)x->n_docs);
    uint64_t d = 0, start = 0;
    for (uint64_t i = 0; i < x->n_text; i++)
        if (text_at(x, i) == x->V) {        /* counted and bounded by index_check */
            x->doc_start[d++] = (uint32_t)start;
            start = i + 1;
        }
    return OLIF_OK;
}

/* The file layer's parser of an index (olif_frame.h). */
static sfx_status index_load(uint8_t *data, size_t size, uint32_t version, uint32_t flags,
                             void *out, sfx_error *err) {
    (void)version;
    void *obj = NULL;
    sfx_status st = open_object(sizeof(sfx_index), index_parse, data, size, flags, &obj, err);
    *(sfx_index **)out = obj;
    return st;
}

static const olif_kind INDEX_FILE = {"OLIFSFX", "suffix index", "a retrieval file (.sfx, .ngc)",
                                     SFX_FORMAT_VERSION, SFX_FORMAT_VERSION, index_load};

sfx_status sfx_index_build(const sfx_corpus *c, sfx_index **out, sfx_progress_fn progress,
                           void *user, sfx_error *err) {
    clear_error(err);
    if (!c || !out) return fail(err, OLIF_ERR_ARG, "NULL corpus or out");
    *out = NULL;
    if (c->n_tokens == 0) return fail(err, OLIF_ERR_EMPTY, "the corpus holds no tokens");
    if (cancelled(progress, user, "suffix array", 0, c->n))
        return fail(err, OLIF_ERR_CANCELLED, "build cancelled");
    uint32_t *sa = NULL;
    sfx_status st = corpus_suffix_array(c, &sa, err);
    if (st) return st;
    if (cancelled(progress, user, "suffix array", c->n, c->n)) {
        free(sa);
        return fail(err, OLIF_ERR_CANCELLED, "build cancelled");
    }
    const uint32_t V = c->cfg.vocab_size;
    const uint32_t tb = V <= 0xFFFFu ? 2 : 4;
    file_header h;
    header_init(&h, INDEX_FILE.magic, &c->cfg, tb);
    h.count[0] = c->n;
    h.count[1] = c->n_tokens;
    h.count[2] = c->n_docs;
    uint64_t sizes[INDEX_SECTIONS] = {c->n * tb, c->n_tokens * 4, ((uint64_t)V + 1) * 4};
    uint64_t total = lay_out(&h, sizes, INDEX_SECTIONS);
    uint8_t *img = calloc((size_t)total, 1);
    if (!img) {
        free(sa);
        return fail(err, OLIF_ERR_NOMEM, "cannot allocate a %llu-byte index",
                    (unsigned long long)total);
    }
    uint8_t *text = img + h.sec_offset[SEC_TEXT];
    if (tb == 2) {
        uint16_t *t16 = (uint16_t *)text;
        for (uint64_t i = 0; i < c->n; i++) t16[i] = (uint16_t)c->text[i];
    } else {
        memcpy(text, c->text, (size_t)c->n * 4);
    }
    memcpy(img + h.sec_offset[SEC_SA], sa, (size_t)c->n_tokens * 4);
    uint32_t *bucket = (uint32_t *)(img + h.sec_offset[SEC_BUCKET]);
    /* bucket[v] = first suffix whose id is >= v */
    uint64_t i = 0;
    for (uint32_t v = 0; v <= V; v++) {
        while (i < c->n_tokens && c->text[sa[i]] < v) i++;
        bucket[v] = (uint32_t)i;
    }
    free(sa);
    seal(img, &h);
    if (cancelled(progress, user, "writing", 1, 1)) {
        free(img);
        return fail(err, OLIF_ERR_CANCELLED, "build cancelled");
    }
    return olif_load_image(&INDEX_FILE, img, (size_t)total, out, err);
}

sfx_status sfx_index_save(const sfx_index *x, const char *path, sfx_error *err) {
    if (!x) return fail(err, OLIF_ERR_ARG, "NULL index");
    return olif_write_file(path, x->im.data, x->im.size, err);
}

sfx_status sfx_index_load_buffer(const void *data, size_t size, uint32_t flags, sfx_index **out,
                                 sfx_error *err) {
    if (out) *out = NULL;
    return olif_load_buffer(&INDEX_FILE, data, size, flags, out, err);
}

sfx_status sfx_index_load(const char *path, uint32_t flags, sfx_index **out, sfx_error *err) {
    if (out) *out = NULL;
    return olif_load(&INDEX_FILE, path, flags, out, err);
}

void sfx_index_free(sfx_index *x) {
    if (!x) return;
    free(x->doc_start);
    image_release(&x->im);
    free(x);
}

void sfx_index_get_info(const sfx_index *x, sfx_index_info *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    if (!x) return;
    const file_header *h = &x->im.h;
    o->format_version = h->version;
    o->vocab_size = h->vocab_size;
    o->separator = h->separator;
    o->token_bytes = h->param;
    o->n_text = h->count[0];
    o->n_tokens = h->count[1];
    o->n_documents = h->count[2];
    o->file_size = h->file_size;
    o->memory_mapped = 0;   /* loads are private copies */
    memcpy(o->tokenizer_name, h->tokenizer_name, sizeof o->tokenizer_name);
    memcpy(o->tokenizer_digest, h->tokenizer_digest, sizeof o->tokenizer_digest);
}

/* Order of the suffix at text position a against the one at b (full compare). */
static int suffix_order(const sfx_index *x, uint64_t a, uint64_t b) {
    while (a < x->n_text && b < x->n_text) {
        uint32_t p = text_at(x, a), q = text_at(x, b);
        if (p != q) return p < q ? -1 : 1;
        a++;
        b++;
    }
    return a >= x->n_text ? (b >= x->n_text ? 0 : -1) : 1;
}

sfx_status sfx_index_verify(const sfx_index *x, sfx_error *err) {
    clear_error(err);
    if (!x) return fail(err, OLIF_ERR_ARG, "NULL index");
    uint8_t *seen = calloc((size_t)(x->n_text / 8 + 1), 1);
    if (!seen) return fail(err, OLIF_ERR_NOMEM, "cannot allocate %llu bits",
                           (unsigned long long)x->n_text);
    sfx_status st = OLIF_OK;
    for (uint64_t i = 0; i < x->n_sa && !st; i++) {
        uint32_t p = x->sa[i];
        uint32_t t = text_at(x, p);
        if (t == x->V)
            st = fail(err, OLIF_ERR_CORRUPT, "suffix %llu starts at a separator",
                      (unsigned long long)i);
        else if (TGET(seen, p))
            st = fail(err, OLIF_ERR_CORRUPT, "position %u is indexed twice", p);
        else if (i < x->bucket[t] || i >= x->bucket[t + 1])
            st = fail(err, OLIF_ERR_CORRUPT, "suffix %llu is outside the bucket of id %u",
                      (unsigned long long)i, t);
        else if (i > 0 && suffix_order(x, x->sa[i - 1], p) >= 0)
            st = fail(err, OLIF_ERR_CORRUPT, "suffixes %llu and %llu are out of order",
                      (unsigned long long)(i - 1), (unsigned long long)i);
        else
            TSET(seen, p, 1);
    }
    free(seen);
    return st;
}

/* Compare the suffix at text position pos, from offset d on, with p[d..m):
 * < 0, 0 (p is a prefix of it), > 0. A suffix that ends sorts first. */
static inline int cmp_from(const sfx_index *x, uint64_t pos, const uint32_t *p, size_t d,
                           size_t m) {
    for (size_t j = d; j < m; j++) {
        uint64_t q = pos + j;
        if (q >= x->n_text) return -1;
        uint32_t t = text_at(x, q);
        if (t != p[j]) return t < p[j] ? -1 : 1;
    }
    return 0;
}

/* Narrow [*lo, *hi), whose suffixes all begin with p[0..d), to those that
 * begin with p[0..m). */
static void narrow(const sfx_index *x, const uint32_t *p, size_t d, size_t m, uint64_t *lo,
                   uint64_t *hi) {
    uint64_t a = *lo, b = *hi;
    while (a < b) {
        uint64_t mid = a + (b - a) / 2;
        if (cmp_from(x, x->sa[mid], p, d, m) < 0) a = mid + 1;
        else b = mid;
    }
    uint64_t first = a;
    b = *hi;
    while (a < b) {
        uint64_t mid = a + (b - a) / 2;
        if (cmp_from(x, x->sa[mid], p, d, m) <= 0) a = mid + 1;
        else b = mid;
    }
    *lo = first;
    *hi = a;
}

/* The suffix-array range of the pattern p[0..m), ids < V (m >= 1). */
static void range_of(const sfx_index *x, const uint32_t *p, size_t m, uint64_t *lo, uint64_t *hi) {
    if (p[0] >= x->V) {
        *lo = *hi = 0;
        return;
    }
    *lo = x->bucket[p[0]];
    *hi = x->bucket[p[0] + 1];
    if (m > 1 && *lo < *hi) narrow(x, p, 1, m, lo, hi);
}

uint64_t sfx_index_count(const sfx_index *x, const uint32_t *pattern, size_t m) {
    if (!x) return 0;
    if (m == 0) return x->n_sa;
    if (!pattern) return 0;
    for (size_t j = 0; j < m; j++)
        if (pattern[j] >= x->V) return 0;
    uint64_t lo, hi;
    range_of(x, pattern, m, &lo, &hi);
    return hi - lo;
}

/* Longest matching suffix of ctx[0..n): length, and its range. */
static uint32_t longest_match(const sfx_index *x, const uint32_t *ctx, size_t n, uint32_t max_match,
                              uint64_t *lo, uint64_t *hi) {
    *lo = 0;
    *hi = x->n_sa;
    if (!ctx) return 0;
    size_t L = 0;                   /* ids < V at the end of the context, capped */
    while (L < n && (max_match == 0 || L < max_match) && ctx[n - 1 - L] < x->V) L++;
    uint32_t best = 0;
    size_t a = 1, b = L;            /* the largest m in [a, b] that occurs */
    while (a <= b) {
        size_t m = a + (b - a) / 2;
        uint64_t l, h;
        range_of(x, ctx + n - m, m, &l, &h);
        if (l < h) {
            best = (uint32_t)m;
            *lo = l;
            *hi = h;
            a = m + 1;
        } else {
            b = m - 1;
        }
    }
    return best;
}

uint32_t sfx_index_match(const sfx_index *x, const uint32_t *context, size_t n, uint32_t max_match,
                         uint64_t *count) {
    if (count) *count = 0;
    if (!x) return 0;
    uint64_t lo, hi;
    uint32_t m = longest_match(x, context, n, max_match, &lo, &hi);
    if (count) *count = hi - lo;
    return m;
}

/* The id at offset m of the suffix at sa[i], or UINT32_MAX past the text. */
static inline uint32_t next_at(const sfx_index *x, uint64_t i, uint64_t m) {
    uint64_t q = (uint64_t)x->sa[i] + m;
    return q < x->n_text ? text_at(x, q) : UINT32_MAX;
}

/* First i in [a, b) with next_at(i) >= t (lower) or > t (upper). */
static uint64_t bound(const sfx_index *x, uint64_t a, uint64_t b, uint64_t m, uint32_t t,
                      int upper) {
    while (a < b) {
        uint64_t mid = a + (b - a) / 2;
        uint32_t v = next_at(x, mid, m);
        if (v < t || (upper && v == t)) a = mid + 1;
        else b = mid;
    }
    return a;
}

/* The most frequent id < V at offset m over sa[lo..hi) and its sub-range;
 * returns 0 when every continuation is a document end. */
static int best_next(const sfx_index *x, uint64_t lo, uint64_t hi, uint64_t m, uint32_t *tok,
                     uint64_t *glo, uint64_t *ghi) {
    uint64_t best = 0;
    const uint64_t R = hi - lo;
    if (R <= SFX_EXACT_SCAN) {
        uint64_t i = lo;
        while (i < hi) {
            uint32_t t = next_at(x, i, m);
            uint64_t j = i + 1;
            while (j < hi && next_at(x, j, m) == t) j++;
            if (t < x->V && j - i > best) {
                best = j - i;
                *tok = t;
                *glo = i;
                *ghi = j;
            }
            i = j;
        }
        return best > 0;
    }
    uint64_t pos[SFX_SAMPLES];
    uint32_t val[SFX_SAMPLES];
    for (uint32_t s = 0; s < SFX_SAMPLES; s++) {
        pos[s] = lo + R * s / SFX_SAMPLES;
        val[s] = next_at(x, pos[s], m);
    }
    for (uint32_t s = 0; s < SFX_SAMPLES; s++) {
        uint32_t t = val[s];
        if (t >= x->V || (s > 0 && val[s - 1] == t)) continue;
        uint32_t e = s;                 /* the last sample of this run */
        while (e + 1 < SFX_SAMPLES && val[e + 1] == t) e++;
        uint64_t from = s > 0 ? pos[s - 1] + 1 : lo;
        uint64_t to = e + 1 < SFX_SAMPLES ? pos[e + 1] : hi;
        uint64_t a = bound(x, from, pos[s] + 1, m, t, 0);
        uint64_t b = bound(x, pos[e], to, m, t, 1);
        if (b > a && b - a > best) {
            best = b - a;
            *tok = t;
            *glo = a;
            *ghi = b;
        }
    }
    return best > 0;
}

size_t sfx_index_draft(const sfx_index *x, const uint32_t *context, size_t n, size_t k,
                       uint32_t max_match, uint32_t min_match, uint32_t min_count,
                       double min_share, uint32_t *tokens, sfx_answer *answers) {
    if (!x || !tokens || k == 0) return 0;
    uint64_t lo, hi;
    uint64_t m = longest_match(x, context, n, max_match, &lo, &hi);
    if (m == 0 || m < min_match) return 0;
    size_t got = 0;
    while (got < k && lo < hi) {
        uint32_t t = 0;
        uint64_t glo = 0, ghi = 0;
        if (!best_next(x, lo, hi, m, &t, &glo, &ghi)) break;
        uint64_t count = ghi - glo, total = hi - lo;
        if (count < min_count || (double)count < min_share * (double)total) break;
        tokens[got] = t;
        if (answers) {
            answers[got].token = t;
            answers[got].match = m > UINT32_MAX ? UINT32_MAX : (uint32_t)m;
            answers[got].count = (uint32_t)count;
            answers[got].total = (uint32_t)total;
        }
        got++;
        lo = glo;
        hi = ghi;
        m++;
    }
    return got;
}

/* ---- matching statistics ------------------------------------------------------------ */

/* How many of p[d..m) the suffix at text position pos matches from offset d on: returns
 * d + that many, and in *c the order of the suffix against p (< 0, 0: p[0..m) is a prefix of
 * it, > 0). A suffix that ends sorts first. */
static inline size_t lcp_from(const sfx_index *x, uint64_t pos, const uint32_t *p, size_t d,
                              size_t m, int *c) {
    size_t j = d;
    for (; j < m; j++) {
        uint64_t q = pos + j;
        if (q >= x->n_text) {
            *c = -1;
            return j;
        }
        uint32_t t = text_at(x, q);
        if (t != p[j]) {
            *c = t < p[j] ? -1 : 1;
            return j;
        }
    }
    *c = 0;
    return j;
}

/* First i in [a, b) whose suffix is >= p[0..m) (upper: > p, as a prefix), all of [a, b)
 * sharing p[0..d). Manber & Myers' accelerant: the suffixes between two that share l and r
 * ids with p share min(l, r), so each comparison starts there. */
static uint64_t search(const sfx_index *x, const uint32_t *p, size_t d, size_t m, uint64_t a,
                       uint64_t b, int upper) {
    size_t l = d, r = d;
    while (a < b) {
        uint64_t mid = a + (b - a) / 2;
        int c;
        size_t k = lcp_from(x, x->sa[mid], p, l < r ? l : r, m, &c);
        if (c < 0 || (upper && c == 0)) {
            a = mid + 1;
            l = k;
        } else {
            b = mid;
            r = k;
        }
    }
    return a;
}

sfx_status sfx_index_matching_stats(const sfx_index *x, const uint32_t *out, size_t n,
                                    uint32_t max_length, sfx_stat *stats, sfx_error *err) {
    clear_error(err);
    if (!x) return fail(err, OLIF_ERR_ARG, "NULL index");
    if (n && (!out || !stats)) return fail(err, OLIF_ERR_ARG, "NULL out or stats for %zu ids", n);
    uint64_t lo = 0, hi = 0;
    size_t L = 0;                   /* out[i..i+L) occurs, in suffixes [lo, hi) */
    for (size_t i = 0; i < n; i++) {
        /* ms[i] >= ms[i-1] - 1: out[i..i+L-1) occurs; find its interval afresh */
        if (L > 1) {
            L--;
            uint32_t t = out[i];
            uint64_t a = x->bucket[t], b = x->bucket[t + 1];
            lo = search(x, out + i, 1, L, a, b, 0);
            hi = search(x, out + i, 1, L, lo, b, 1);
            if (lo >= hi) L = 0;    /* only in an index whose suffixes are out of order (a
                                       file loaded without checksums): start afresh */
        } else {
            L = 0;
        }
        while (i + L < n && (max_length == 0 || L < max_length) && out[i + L] < x->V) {
            uint32_t t = out[i + L];
            uint64_t a, b;
            if (L == 0) {
                a = x->bucket[t];
                b = x->bucket[t + 1];
            } else {                /* [lo, hi) share out[i..i+L): sorted by the id at L */
                a = bound(x, lo, hi, L, t, 0);
                b = bound(x, a, hi, L, t, 1);
            }
            if (a >= b) break;
            lo = a;
            hi = b;
            L++;
        }
        if (L == 0) lo = hi = 0;
        stats[i].length = (uint32_t)L;
        stats[i].reserved = 0;
        stats[i].lo = lo;
        stats[i].hi = hi;
        stats[i].position = L ? x->sa[lo] : 0;
    }
    return OLIF_OK;
}

static void place_of(const sfx_index *x, uint64_t pos, sfx_place *out) {
    uint64_t a = 0, b = x->n_docs;  /* the last document starting at or before pos */
    while (b - a > 1) {
        uint64_t mid = a + (b - a) / 2;
        if (x->doc_start[mid] <= pos) a = mid;
        else b = mid;
    }
    out->position = pos;
    out->document = a;
    out->offset = pos - x->doc_start[a];
}

sfx_status sfx_index_places(const sfx_index *x, uint64_t lo, uint64_t hi, size_t max,
                            sfx_place *places, size_t *n_places, sfx_error *err) {
    clear_error(err);
    if (n_places) *n_places = 0;
    if (!x || !n_places) return fail(err, OLIF_ERR_ARG, "NULL index or n_places");
    if (lo > hi || hi > x->n_sa)
        return fail(err, OLIF_ERR_ARG, "interval [%llu, %llu) is not within the %llu suffixes",
                    (unsigned long long)lo, (unsigned long long)hi, (unsigned long long)x->n_sa);
    size_t k = hi - lo < max ? (size_t)(hi - lo) : max;
    if (k && !places) return fail(err, OLIF_ERR_ARG, "NULL places for %zu entries", k);
    for (size_t j = 0; j < k; j++) place_of(x, x->sa[lo + j], &places[j]);
    *n_places = k;
    return OLIF_OK;
}

sfx_status sfx_index_locate(const sfx_index *x, uint64_t position, sfx_place *place,
                            sfx_error *err) {
    clear_error(err);
    if (!x || !place) return fail(err, OLIF_ERR_ARG, "NULL index or place");
    if (position >= x->n_text || text_at(x, position) == x->V)
        return fail(err, OLIF_ERR_ARG, "text position %llu is %s", (unsigned long long)position,
                    position >= x->n_text ? "beyond the text" : "a separator");
    place_of(x, position, place);
    return OLIF_OK;
}

/* ---- the static n-gram cache --------------------------------------------------------- */

enum { SEC_KEYS, SEC_OFFSETS, SEC_SUMMARY, SEC_PAIRS, NGRAM_SECTIONS };

struct sfx_ngram {
    image im;
    uint32_t V, order;
    uint64_t n_ctx, n_pairs;
    const uint32_t *keys;       /* n_ctx x order ids, strictly ascending rows */
    const uint32_t *offsets;    /* n_ctx + 1: context i's pairs are offsets[i] .. [i+1] */
    const uint32_t *summary;    /* n_ctx x (winner, winner count, total) */
    const uint32_t *pairs;      /* n_pairs x (id, count), ascending ids per context */
};

static sfx_status ngram_counts(const file_header *h, uint64_t *expected, uint32_t *n_sec,
                               sfx_error *err) {
    const uint64_t n_ctx = h->count[0], n_pairs = h->count[1], n_inst = h->count[2];
    if (h->param < 1 || h->param > SFX_MAX_ORDER)
        return fail(err, OLIF_ERR_CORRUPT, "n-gram order %u out of range 1..%u", h->param,
                    SFX_MAX_ORDER);
    if (n_ctx < 1 || n_pairs < n_ctx || n_pairs >= UINT32_MAX || n_inst < n_pairs ||
        n_inst > SFX_MAX_TEXT)
        return fail(err, OLIF_ERR_CORRUPT, "contexts %llu, pairs %llu and instances %llu disagree",
                    (unsigned long long)n_ctx, (unsigned long long)n_pairs,
                    (unsigned long long)n_inst);
    expected[SEC_KEYS] = n_ctx * h->param * 4;
    expected[SEC_OFFSETS] = (n_ctx + 1) * 4;
    expected[SEC_SUMMARY] = n_ctx * 12;
    expected[SEC_PAIRS] = n_pairs * 8;
    *n_sec = NGRAM_SECTIONS;
    return OLIF_OK;
}

static int key_cmp(const uint32_t *a, const uint32_t *b, uint32_t order) {
    for (uint32_t j = 0; j < order; j++)
        if (a[j] != b[j]) return a[j] < b[j] ? -1 : 1;
    return 0;
}

static sfx_status ngram_parse(void *obj, uint32_t flags, sfx_error *err) {
    sfx_ngram *g = obj;
    sfx_status st = parse_header(&g->im, ngram_counts, flags, err);
    if (st) return st;
    const file_header *h = &g->im.h;
    const uint8_t *p = g->im.data;
    g->V = h->vocab_size;
    g->order = h->param;
    g->n_ctx = h->count[0];
    g->n_pairs = h->count[1];
    g->keys = (const uint32_t *)(p + h->sec_offset[SEC_KEYS]);
    g->offsets = (const uint32_t *)(p + h->sec_offset[SEC_OFFSETS]);
    g->summary = (const uint32_t *)(p + h->sec_offset[SEC_SUMMARY]);
    g->pairs = (const uint32_t *)(p + h->sec_offset[SEC_PAIRS]);
    const uint32_t O = g->order;
    if (g->offsets[0] != 0 || g->offsets[g->n_ctx] != g->n_pairs)
        return fail(err, OLIF_ERR_CORRUPT, "pair index of first or last context is wrong");
    uint64_t instances = 0;
    for (uint64_t i = 0; i < g->n_ctx; i++) {
        const uint32_t *key = g->keys + i * O;
        for (uint32_t j = 0; j < O; j++)
            if (key[j] >= g->V)
                return fail(err, OLIF_ERR_CORRUPT, "context %llu holds id %u, beyond the vocabulary",
                            (unsigned long long)i, key[j]);
        if (i > 0 && key_cmp(key - O, key, O) >= 0)
            return fail(err, OLIF_ERR_CORRUPT, "contexts %llu and %llu are not in ascending order",
                        (unsigned long long)(i - 1), (unsigned long long)i);
        uint32_t a = g->offsets[i], b = g->offsets[i + 1];
        if (b <= a || b > g->n_pairs)
            return fail(err, OLIF_ERR_CORRUPT, "pair index of context %llu is out of order",
                        (unsigned long long)i);
        uint64_t total = 0, best = 0;
        uint32_t winner = 0;
        for (uint32_t q = a; q < b; q++) {
            uint32_t t = g->pairs[2 * (uint64_t)q], c = g->pairs[2 * (uint64_t)q + 1];
            if (t >= g->V || c == 0 || (q > a && t <= g->pairs[2 * (uint64_t)q - 2]))
                return fail(err, OLIF_ERR_CORRUPT, "pair %u of context %llu is invalid or unsorted",
                            q, (unsigned long long)i);
            total += c;
            if (c > best) {
                best = c;
                winner = t;
            }
        }
        const uint32_t *s = g->summary + 3 * i;
        if (s[0] != winner || s[1] != best || s[2] != total)
            return fail(err, OLIF_ERR_CORRUPT, "summary of context %llu disagrees with its counts",
                        (unsigned long long)i);
        instances += total;
    }
    if (instances != h->count[2])
        return fail(err, OLIF_ERR_CORRUPT, "counts sum to %llu, header says %llu instances",
                    (unsigned long long)instances, (unsigned long long)h->count[2]);
    return OLIF_OK;
}

/* The file layer's parser of an n-gram cache (olif_frame.h). */
static sfx_status ngram_load(uint8_t *data, size_t size, uint32_t version, uint32_t flags,
                             void *out, sfx_error *err) {
    (void)version;
    void *obj = NULL;
    sfx_status st = open_object(sizeof(sfx_ngram), ngram_parse, data, size, flags, &obj, err);
    *(sfx_ngram **)out = obj;
    return st;
}

static const olif_kind NGRAM_FILE = {"OLIFNGC", "n-gram cache", "a retrieval file (.sfx, .ngc)",
                                     SFX_FORMAT_VERSION, SFX_FORMAT_VERSION, ngram_load};

/* growable u32 vector */
typedef struct {
    uint32_t *v;
    size_t n, cap;
} vec32;

static int vec_push(vec32 *a, uint32_t x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 1024;
        uint32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

sfx_status sfx_ngram_build(const sfx_corpus *c, uint32_t order, sfx_ngram **out,
                           sfx_progress_fn progress, void *user, sfx_error *err) {
    clear_error(err);
    if (!c || !out) return fail(err, OLIF_ERR_ARG, "NULL corpus or out");
    *out = NULL;
    if (order < 1 || order > SFX_MAX_ORDER)
        return fail(err, OLIF_ERR_ARG, "n-gram order %u out of range 1..%u", order, SFX_MAX_ORDER);
    if (c->n_tokens == 0) return fail(err, OLIF_ERR_EMPTY, "the corpus holds no tokens");
    if (cancelled(progress, user, "suffix array", 0, c->n))
        return fail(err, OLIF_ERR_CANCELLED, "build cancelled");
    uint32_t *sa = NULL;
    sfx_status st = corpus_suffix_array(c, &sa, err);
    if (st) return st;
    const uint32_t V = c->cfg.vocab_size;
    vec32 keys = {0}, offsets = {0}, summary = {0}, pairs = {0};
    uint32_t prev[SFX_MAX_ORDER + 1];
    int open = 0;                                   /* a context is being counted */
    uint64_t instances = 0, best = 0, total = 0;
    uint32_t winner = 0;
    int nomem = 0;
#define PUSH(vec, x) do { if (vec_push(&(vec), (x))) nomem = 1; } while (0)
#define CLOSE() do { PUSH(summary, winner); PUSH(summary, (uint32_t)best); \
                     PUSH(summary, (uint32_t)total); } while (0)
    for (uint64_t i = 0; i < c->n_tokens && !nomem; i++) {
        if ((i & 0xFFFFF) == 0 && cancelled(progress, user, "counting", i, c->n_tokens)) {
            free(sa);
            free(keys.v);
            free(offsets.v);
            free(summary.v);
            free(pairs.v);
            return fail(err, OLIF_ERR_CANCELLED, "build cancelled");
        }
        /* suffixes that share their first `order` ids are adjacent, sorted by the next id;
           those with a document end among the first order + 1 ids count for nothing */
        uint32_t cur[SFX_MAX_ORDER + 1] = {0};
        uint64_t p = sa[i];
        int valid = p + order < c->n;
        for (uint32_t j = 0; valid && j <= order; j++) {
            cur[j] = c->text[p + j];
            if (cur[j] == V) valid = 0;
        }
        if (!valid) continue;
        int same_ctx = open && key_cmp(prev, cur, order) == 0;
        if (open && !same_ctx) CLOSE();
        if (!same_ctx) {
            for (uint32_t j = 0; j < order; j++) PUSH(keys, cur[j]);
            PUSH(offsets, (uint32_t)(pairs.n / 2));
            best = total = 0;
            open = 1;
        }
        if (same_ctx && prev[order] == cur[order]) {
            pairs.v[pairs.n - 1]++;
        } else {
            PUSH(pairs, cur[order]);
            PUSH(pairs, 1);
        }
        if (nomem) break;
        uint32_t cnt = pairs.v[pairs.n - 1];
        if (cnt > best) {                           /* ascending ids: ties keep the lower */
            best = cnt;
            winner = cur[order];
        }
        total++;
        instances++;
        memcpy(prev, cur, sizeof cur);
    }
    if (open && !nomem) CLOSE();
#undef CLOSE
#undef PUSH
    free(sa);
    uint64_t n_ctx = offsets.n, n_pairs = pairs.n / 2;
    if (!nomem && n_ctx == 0) {
        free(keys.v);
        free(offsets.v);
        free(summary.v);
        free(pairs.v);
        return fail(err, OLIF_ERR_EMPTY, "no document is longer than the order %u", order);
    }
    uint8_t *img = NULL;
    uint64_t size = 0;
    file_header h;
    if (!nomem) {
        header_init(&h, NGRAM_FILE.magic, &c->cfg, order);
        h.count[0] = n_ctx;
        h.count[1] = n_pairs;
        h.count[2] = instances;
        uint64_t sizes[NGRAM_SECTIONS] = {n_ctx * order * 4, (n_ctx + 1) * 4, n_ctx * 12,
                                          n_pairs * 8};
        size = lay_out(&h, sizes, NGRAM_SECTIONS);
        img = calloc((size_t)size, 1);
        nomem = img == NULL;
    }
    if (!nomem) {
        memcpy(img + h.sec_offset[SEC_KEYS], keys.v, keys.n * 4);
        uint32_t *off = (uint32_t *)(img + h.sec_offset[SEC_OFFSETS]);
        memcpy(off, offsets.v, offsets.n * 4);
        off[n_ctx] = (uint32_t)n_pairs;
        memcpy(img + h.sec_offset[SEC_SUMMARY], summary.v, summary.n * 4);
        memcpy(img + h.sec_offset[SEC_PAIRS], pairs.v, pairs.n * 4);
        seal(img, &h);
    }
    free(keys.v);
    free(offsets.v);
    free(summary.v);
    free(pairs.v);
    if (nomem) {
        free(img);
        return fail(err, OLIF_ERR_NOMEM, "out of memory while counting n-grams");
    }
    return olif_load_image(&NGRAM_FILE, img, (size_t)size, out, err);
}

sfx_status sfx_ngram_save(const sfx_ngram *g, const char *path, sfx_error *err) {
    if (!g) return fail(err, OLIF_ERR_ARG, "NULL n-gram cache");
    return olif_write_file(path, g->im.data, g->im.size, err);
}

sfx_status sfx_ngram_load_buffer(const void *data, size_t size, uint32_t flags, sfx_ngram **out,
                                 sfx_error *err) {
    if (out) *out = NULL;
    return olif_load_buffer(&NGRAM_FILE, data, size, flags, out, err);
}

sfx_status sfx_ngram_load(const char *path, uint32_t flags, sfx_ngram **out, sfx_error *err) {
    if (out) *out = NULL;
    return olif_load(&NGRAM_FILE, path, flags, out, err);
}

void sfx_ngram_free(sfx_ngram *g) {
    if (!g) return;
    image_release(&g->im);
    free(g);
}

void sfx_ngram_get_info(const sfx_ngram *g, sfx_ngram_info *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    if (!g) return;
    const file_header *h = &g->im.h;
    o->format_version = h->version;
    o->vocab_size = h->vocab_size;
    o->order = h->param;
    o->n_contexts = h->count[0];
    o->n_pairs = h->count[1];
    o->n_instances = h->count[2];
    o->file_size = h->file_size;
    o->memory_mapped = 0;   /* loads are private copies */
    memcpy(o->tokenizer_name, h->tokenizer_name, sizeof o->tokenizer_name);
    memcpy(o->tokenizer_digest, h->tokenizer_digest, sizeof o->tokenizer_digest);
}

/* Index of the context equal to key[0..order), or -1. */
static int64_t find_context(const sfx_ngram *g, const uint32_t *key) {
    uint64_t a = 0, b = g->n_ctx;
    while (a < b) {
        uint64_t mid = a + (b - a) / 2;
        int c = key_cmp(g->keys + mid * g->order, key, g->order);
        if (c == 0) return (int64_t)mid;
        if (c < 0) a = mid + 1;
        else b = mid;
    }
    return -1;
}

static int64_t context_of(const sfx_ngram *g, const uint32_t *ctx, size_t n) {
    if (!g || !ctx || n < g->order) return -1;
    return find_context(g, ctx + n - g->order);
}

static void answer_of(const sfx_ngram *g, int64_t i, sfx_ngram_answer *out) {
    const uint32_t *s = g->summary + 3 * (uint64_t)i;
    out->token = s[0];
    out->count = s[1];
    out->total = s[2];
    out->n_next = g->offsets[i + 1] - g->offsets[i];
}

int sfx_ngram_lookup(const sfx_ngram *g, const uint32_t *context, size_t n,
                     sfx_ngram_answer *out) {
    sfx_ngram_answer none = {0, 0, 0, 0};
    int64_t i = context_of(g, context, n);
    if (i < 0) {
        if (out) *out = none;
        return 0;
    }
    if (out) answer_of(g, i, out);
    return 1;
}

size_t sfx_ngram_next(const sfx_ngram *g, const uint32_t *context, size_t n, uint32_t *tokens,
                      uint32_t *counts, size_t max) {
    int64_t i = context_of(g, context, n);
    if (i < 0) return 0;
    uint32_t a = g->offsets[i], b = g->offsets[i + 1];
    for (uint32_t q = a; q < b && q - a < max; q++) {
        if (tokens) tokens[q - a] = g->pairs[2 * (uint64_t)q];
        if (counts) counts[q - a] = g->pairs[2 * (uint64_t)q + 1];
    }
    return b - a;
}

size_t sfx_ngram_draft(const sfx_ngram *g, const uint32_t *context, size_t n, size_t k,
                       uint32_t min_samples, uint32_t min_percent, uint32_t *tokens,
                       sfx_ngram_answer *answers) {
    if (!g || !context || !tokens || n < g->order) return 0;
    uint32_t key[SFX_MAX_ORDER];
    const uint32_t O = g->order;
    memcpy(key, context + n - O, O * sizeof *key);
    size_t got = 0;
    while (got < k) {
        int64_t i = find_context(g, key);
        if (i < 0) break;
        sfx_ngram_answer a;
        answer_of(g, i, &a);
        if (a.total < min_samples || 100ull * a.count < (uint64_t)min_percent * a.total) break;
        tokens[got] = a.token;
        if (answers) answers[got] = a;
        got++;
        memmove(key, key + 1, (O - 1) * sizeof *key);
        key[O - 1] = a.token;
    }
    return got;
}
