/*
 * test_suffix.c — standalone tests of the retrieval C library (suffix.h):
 * the suffix index and the static n-gram cache against naive counting, file
 * round trips, and the loaders on truncated, edited and randomly mutated
 * files. No framework: CHECK records a failure and the test goes on; the
 * last line printed is "N passed, M failed" (tests), and the exit status is
 * nonzero if anything failed.
 *
 *   cc -std=c11 -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all \
 *      csrc/suffix.c csrc/test_suffix.c -o test_suffix
 *   ./test_suffix [scratch-dir [test-name]]
 *
 * Data are small and pseudo-random (xorshift64, fixed seeds): deterministic,
 * a few seconds under sanitizers. Tests that edit files re-seal the
 * checksums with a copy of the library's checksum at the header offsets
 * below, which test_file_layout first checks against a freshly saved file.
 */
#define _POSIX_C_SOURCE 200809L
#include "suffix.h"
#include "olif_checksum.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- harness --------------------------------------------------------------- */

typedef struct {
    const char *test;
    unsigned long checks;
    unsigned long failures;
    const char *dir;
} T;

static void check_failed(T *t, const char *file, int line, const char *expr, const char *fmt,
                         ...) {
    t->failures++;
    if (t->failures > 20) {
        if (t->failures == 21) fprintf(stderr, "  ... further failures of %s not shown\n", t->test);
        return;
    }
    fprintf(stderr, "FAIL %s (%s:%d): %s -- ", t->test, file, line, expr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

#define CHECK(t, cond, ...)                                                    \
    do {                                                                       \
        (t)->checks++;                                                         \
        if (!(cond)) check_failed((t), __FILE__, __LINE__, #cond, __VA_ARGS__); \
    } while (0)

#define CHECK_STATUS(t, got, want, err, what)                                           \
    do {                                                                                \
        sfx_status g_ = (got);                                                          \
        (t)->checks++;                                                                  \
        if (g_ != (want))                                                               \
            check_failed((t), __FILE__, __LINE__, "status", "%s: got %d (%s), want %d; %s", \
                         (what), (int)g_, olif_status_string((int)g_), (int)(want),       \
                         (err)->message);                                               \
        else if (g_ != OLIF_OK && ((err)->code != (int)g_ || (err)->message[0] == '\0')) \
            check_failed((t), __FILE__, __LINE__, "error record", "%s: code %d msg '%s'", \
                         (what), (err)->code, (err)->message);                          \
    } while (0)

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static uint32_t rnd_below(uint32_t n) { return n ? (uint32_t)(rnd() % n) : 0; }

/* ---- corpora ------------------------------------------------------------------ */

typedef struct {
    uint32_t *tokens;
    uint64_t *starts;
    size_t n, docs;
    uint32_t vocab;
} docs_t;

/* Random documents over a small alphabet, with repeated phrases so that
 * long matches exist, and some empty documents. */
static docs_t make_docs(uint32_t vocab, size_t docs, size_t max_len, uint32_t alphabet) {
    docs_t d = {0};
    d.vocab = vocab;
    d.docs = docs;
    d.starts = calloc(docs ? docs : 1, sizeof *d.starts);
    d.tokens = calloc(docs * max_len + 1, sizeof *d.tokens);
    uint32_t phrase[6] = {1 % vocab, 2 % vocab, 3 % vocab, 1 % vocab, 4 % vocab, 5 % vocab};
    for (size_t i = 0; i < docs; i++) {
        d.starts[i] = d.n;
        size_t len = rnd_below((uint32_t)max_len + 1);
        for (size_t j = 0; j < len; j++) {
            if (rnd_below(4) == 0 && j + 6 <= len) {
                for (int q = 0; q < 6; q++) d.tokens[d.n++] = phrase[q];
                j += 5;
            } else {
                d.tokens[d.n++] = rnd_below(alphabet < vocab ? alphabet : vocab);
            }
        }
    }
    return d;
}

static void free_docs(docs_t *d) {
    free(d->tokens);
    free(d->starts);
}

static size_t doc_end(const docs_t *d, size_t i) { return i + 1 < d->docs ? d->starts[i + 1] : d->n; }

static uint64_t naive_count(const docs_t *d, const uint32_t *p, size_t m) {
    uint64_t c = 0;
    for (size_t i = 0; i < d->docs; i++)
        for (size_t s = d->starts[i]; s + m <= doc_end(d, i); s++)
            if (memcmp(d->tokens + s, p, m * sizeof *p) == 0) c++;
    return c;
}

static sfx_corpus *make_corpus(T *t, const docs_t *d) {
    sfx_config cfg;
    sfx_config_init(&cfg, d->vocab);
    strcpy(cfg.tokenizer_name, "test-tok");
    for (int i = 0; i < SFX_TOKENIZER_DIGEST_SIZE; i++) cfg.tokenizer_digest[i] = (uint8_t)i;
    sfx_corpus *c = NULL;
    sfx_error err;
    CHECK_STATUS(t, sfx_corpus_new(&cfg, &c, &err), OLIF_OK, &err, "corpus_new");
    CHECK_STATUS(t, sfx_corpus_add_documents(c, d->tokens, d->n, d->starts, d->docs, &err), OLIF_OK,
                 &err, "add_documents");
    return c;
}

/* The corpus of d (in *c) and its index (NULL, with a failed check, if the build fails). */
static sfx_index *index_of_docs(T *t, const docs_t *d, sfx_corpus **c) {
    *c = make_corpus(t, d);
    sfx_index *x = NULL;
    sfx_error err;
    CHECK_STATUS(t, sfx_index_build(*c, &x, NULL, NULL, &err), OLIF_OK, &err, "build");
    return x;
}

/* ---- file helpers --------------------------------------------------------------- */

#define HEADER_SIZE 512
#define OFF_VERSION 8
#define OFF_PARAM 28
#define OFF_NSEC 32
#define OFF_COUNT 40
#define OFF_FILE_SIZE 64
#define OFF_SEC_OFFSET 72
#define OFF_SEC_SIZE 104
#define OFF_PAYLOAD_SUM 136
#define OFF_HEADER_SUM 144
#define OFF_RESERVED 248


static void reseal(uint8_t *img, size_t size) {
    if (size < HEADER_SIZE) return;
    uint64_t s = olif_checksum64(img + HEADER_SIZE, size - HEADER_SIZE), zero = 0;
    memcpy(img + OFF_PAYLOAD_SUM, &s, 8);
    memcpy(img + OFF_HEADER_SUM, &zero, 8);
    s = olif_checksum64(img, HEADER_SIZE);
    memcpy(img + OFF_HEADER_SUM, &s, 8);
}

static uint64_t get64(const uint8_t *p, size_t off) {
    uint64_t v;
    memcpy(&v, p + off, 8);
    return v;
}
static void put32(uint8_t *p, size_t off, uint32_t v) { memcpy(p + off, &v, 4); }

static uint8_t *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static void path_in(const T *t, char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", t->dir, name);
}

/* The saved images of a small index and n-gram cache. */
static uint8_t *saved_image(T *t, int ngram, size_t *size) {
    rng_state = 4242;
    docs_t d = make_docs(19, 9, 40, 12);
    sfx_corpus *c = make_corpus(t, &d);
    sfx_error err;
    char path[512];
    path_in(t, path, sizeof path, ngram ? "img.ngc" : "img.sfx");
    if (ngram) {
        sfx_ngram *g = NULL;
        CHECK_STATUS(t, sfx_ngram_build(c, 2, &g, NULL, NULL, &err), OLIF_OK, &err, "ngram_build");
        CHECK_STATUS(t, sfx_ngram_save(g, path, &err), OLIF_OK, &err, "ngram_save");
        sfx_ngram_free(g);
    } else {
        sfx_index *x = NULL;
        CHECK_STATUS(t, sfx_index_build(c, &x, NULL, NULL, &err), OLIF_OK, &err, "index_build");
        CHECK_STATUS(t, sfx_index_save(x, path, &err), OLIF_OK, &err, "index_save");
        sfx_index_free(x);
    }
    sfx_corpus_free(c);
    free_docs(&d);
    uint8_t *img = read_all(path, size);
    remove(path);
    return img;
}

/* ---- what every loaded structure guarantees ---------------------------------------- */

/* What matching statistics guarantee on any index that loads: lengths within bounds, places
 * inside the text. On one whose suffixes are in order (sfx_index_verify; a mutant loaded
 * without checksums need not be) also: each length occurs (its count is the interval's
 * width), one more id does not, and ms[i+1] >= ms[i] - 1. */
static void check_stats(T *t, const sfx_index *x, const uint32_t *out, size_t n,
                        uint32_t max_length) {
    sfx_index_info info;
    sfx_index_get_info(x, &info);
    sfx_stat st[64];
    sfx_error err;
    if (n > 64) n = 64;
    int ordered = sfx_index_verify(x, &err) == OLIF_OK;
    CHECK_STATUS(t, sfx_index_matching_stats(x, out, n, max_length, st, &err), OLIF_OK, &err,
                 "matching_stats");
    for (size_t i = 0; i < n; i++) {
        uint32_t L = st[i].length;
        CHECK(t, i + L <= n && (max_length == 0 || L <= max_length), "length %u at %zu", L, i);
        CHECK(t, st[i].lo <= st[i].hi && st[i].hi <= info.n_tokens, "interval");
        if (i + L > n) continue;
        if (ordered) {
            CHECK(t, i == 0 || L + 1 >= st[i - 1].length, "ms[%zu] = %u after %u", i, L,
                  st[i - 1].length);
            CHECK(t, sfx_index_count(x, out + i, L) == (L ? st[i].hi - st[i].lo : info.n_tokens),
                  "interval of %u ids at %zu", L, i);
            int longer = i + L < n && (max_length == 0 || L < max_length);
            CHECK(t, !longer || sfx_index_count(x, out + i, L + 1) == 0, "%u ids at %zu extend",
                  L, i);
        }
        if (L == 0) {
            CHECK(t, st[i].lo == 0 && st[i].hi == 0, "empty interval");
            continue;
        }
        sfx_place pl[3];
        size_t got = 0;
        CHECK_STATUS(t, sfx_index_places(x, st[i].lo, st[i].hi, 3, pl, &got, &err), OLIF_OK, &err,
                     "places");
        CHECK(t, got >= 1 && got <= 3 && pl[0].position == st[i].position, "places %zu", got);
        CHECK(t, got < 1 || pl[0].document < info.n_documents, "document %llu",
              (unsigned long long)pl[0].document);
        sfx_place one;
        sfx_status located = sfx_index_locate(x, st[i].position, &one, &err);
        if (!ordered) continue;     /* a mutant's suffix may start at a separator: refused */
        CHECK_STATUS(t, located, OLIF_OK, &err, "locate");
        CHECK(t, one.document == pl[0].document && one.offset == pl[0].offset, "locate agrees");
    }
}

static void query_index(T *t, const sfx_index *x) {
    sfx_index_info info;
    sfx_index_get_info(x, &info);
    CHECK(t, info.vocab_size >= 1 && info.separator == info.vocab_size, "vocab %u", info.vocab_size);
    CHECK(t, info.n_tokens + info.n_documents == info.n_text, "counts");
    uint32_t ctx[40], toks[16];
    sfx_answer ans[16];
    for (int q = 0; q < 30; q++) {
        size_t n = rnd_below(40);
        for (size_t i = 0; i < n; i++)
            ctx[i] = rnd_below(8) == 0 ? info.vocab_size + rnd_below(3) : rnd_below(info.vocab_size);
        uint32_t max_match = rnd_below(3) ? 0 : rnd_below(10);
        uint64_t count = 0;
        uint32_t m = sfx_index_match(x, ctx, n, max_match, &count);
        CHECK(t, m <= n && (max_match == 0 || m <= max_match), "match %u of %zu", m, n);
        CHECK(t, count <= info.n_tokens, "count %llu", (unsigned long long)count);
        size_t k = 1 + rnd_below(16);
        size_t got = sfx_index_draft(x, ctx, n, k, max_match, 1, 1, 0.0, toks, ans);
        CHECK(t, got <= k, "drafted %zu of %zu", got, k);
        for (size_t i = 0; i < got; i++) {
            CHECK(t, toks[i] < info.vocab_size && toks[i] == ans[i].token, "token %u", toks[i]);
            CHECK(t, ans[i].count >= 1 && ans[i].count <= ans[i].total, "counts %u/%u",
                  ans[i].count, ans[i].total);
            CHECK(t, ans[i].total <= info.n_tokens && ans[i].match >= 1, "total/match");
        }
        CHECK(t, sfx_index_count(x, ctx, n) <= info.n_tokens, "count");
        check_stats(t, x, ctx, n, max_match);
    }
}

static void query_ngram(T *t, const sfx_ngram *g) {
    sfx_ngram_info info;
    sfx_ngram_get_info(g, &info);
    CHECK(t, info.order >= 1 && info.order <= SFX_MAX_ORDER, "order %u", info.order);
    uint32_t ctx[12], toks[16], nt[64], nc[64];
    sfx_ngram_answer ans[16], a;
    for (int q = 0; q < 30; q++) {
        size_t n = rnd_below(12);
        for (size_t i = 0; i < n; i++)
            ctx[i] = rnd_below(8) == 0 ? info.vocab_size + rnd_below(3) : rnd_below(info.vocab_size);
        if (sfx_ngram_lookup(g, ctx, n, &a)) {
            CHECK(t, a.token < info.vocab_size && a.count >= 1 && a.count <= a.total && a.n_next >= 1,
                  "answer %u %u/%u", a.token, a.count, a.total);
            size_t nn = sfx_ngram_next(g, ctx, n, nt, nc, 64);
            CHECK(t, nn == a.n_next, "next %zu vs %u", nn, a.n_next);
            for (size_t i = 1; i < nn && i < 64; i++) CHECK(t, nt[i - 1] < nt[i], "order");
        } else {
            CHECK(t, a.total == 0 && sfx_ngram_next(g, ctx, n, nt, nc, 64) == 0, "unseen");
        }
        size_t k = 1 + rnd_below(16);
        size_t got = sfx_ngram_draft(g, ctx, n, k, rnd_below(4), rnd_below(101), toks, ans);
        CHECK(t, got <= k, "drafted %zu", got);
        for (size_t i = 0; i < got; i++)
            CHECK(t, toks[i] < info.vocab_size && ans[i].count <= ans[i].total, "draft answer");
    }
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_status_strings(T *t) {
    for (int c = 0; c <= 12; c++) CHECK(t, olif_status_string(c) != NULL, "code %d", c);
    CHECK(t, strcmp(olif_status_string(OLIF_ERR_CHECKSUM), "file checksum mismatch") == 0,
          "checksum string");
}

static void test_argument_errors(T *t) {
    sfx_config cfg;
    sfx_error err;
    sfx_corpus *c = NULL;
    sfx_config_init(&cfg, 0);
    CHECK_STATUS(t, sfx_corpus_new(&cfg, &c, &err), OLIF_ERR_ARG, &err, "vocab 0");
    sfx_config_init(&cfg, SFX_MAX_VOCAB);
    CHECK_STATUS(t, sfx_corpus_new(&cfg, &c, &err), OLIF_ERR_ARG, &err, "vocab too big");
    sfx_config_init(&cfg, 10);
    memset(cfg.tokenizer_name, 'x', sizeof cfg.tokenizer_name);
    CHECK_STATUS(t, sfx_corpus_new(&cfg, &c, &err), OLIF_ERR_ARG, &err, "name unterminated");
    CHECK_STATUS(t, sfx_corpus_new(NULL, &c, &err), OLIF_ERR_ARG, &err, "NULL config");
    sfx_config_init(&cfg, 10);
    CHECK_STATUS(t, sfx_corpus_new(&cfg, NULL, &err), OLIF_ERR_ARG, &err, "NULL out");
    CHECK_STATUS(t, sfx_corpus_new(&cfg, &c, &err), OLIF_OK, &err, "new");
    uint32_t toks[4] = {1, 2, 10, 3};
    uint64_t starts[2] = {0, 2}, bad_starts[2] = {1, 2}, backwards[3] = {0, 3, 2};
    CHECK_STATUS(t, sfx_corpus_add_documents(c, toks, 4, starts, 2, &err), OLIF_ERR_ARG, &err,
                 "id beyond vocab");
    CHECK(t, strstr(err.message, "10") != NULL, "message names the id: %s", err.message);
    toks[2] = 9;
    CHECK_STATUS(t, sfx_corpus_add_documents(c, toks, 4, bad_starts, 2, &err), OLIF_ERR_ARG, &err,
                 "starts[0] != 0");
    CHECK_STATUS(t, sfx_corpus_add_documents(c, toks, 4, backwards, 3, &err), OLIF_ERR_ARG, &err,
                 "starts out of order");
    CHECK_STATUS(t, sfx_corpus_add_documents(c, toks, 4, NULL, 0, &err), OLIF_ERR_ARG, &err,
                 "tokens without documents");
    CHECK_STATUS(t, sfx_corpus_add_documents(NULL, toks, 4, starts, 2, &err), OLIF_ERR_ARG, &err,
                 "NULL corpus");
    sfx_index *x = NULL;
    sfx_ngram *g = NULL;
    CHECK_STATUS(t, sfx_index_build(c, &x, NULL, NULL, &err), OLIF_ERR_EMPTY, &err, "empty index");
    CHECK_STATUS(t, sfx_ngram_build(c, 2, &g, NULL, NULL, &err), OLIF_ERR_EMPTY, &err, "empty ngram");
    CHECK_STATUS(t, sfx_corpus_add_documents(c, toks, 4, starts, 2, &err), OLIF_OK, &err, "add");
    CHECK(t, sfx_corpus_tokens(c) == 4 && sfx_corpus_documents(c) == 2, "counts");
    CHECK_STATUS(t, sfx_ngram_build(c, 0, &g, NULL, NULL, &err), OLIF_ERR_ARG, &err, "order 0");
    CHECK_STATUS(t, sfx_ngram_build(c, SFX_MAX_ORDER + 1, &g, NULL, NULL, &err), OLIF_ERR_ARG, &err,
                 "order 5");
    CHECK_STATUS(t, sfx_ngram_build(c, 2, &g, NULL, NULL, &err), OLIF_ERR_EMPTY, &err,
                 "documents no longer than the order");
    CHECK_STATUS(t, sfx_index_build(NULL, &x, NULL, NULL, &err), OLIF_ERR_ARG, &err, "NULL corpus");
    CHECK_STATUS(t, sfx_index_load_buffer(NULL, 5, 0, &x, &err), OLIF_ERR_ARG, &err, "NULL data");
    CHECK_STATUS(t, sfx_index_load(NULL, 0, &x, &err), OLIF_ERR_ARG, &err, "NULL path");
    CHECK_STATUS(t, sfx_index_save(NULL, "x", &err), OLIF_ERR_ARG, &err, "NULL index");
    /* queries on NULL handles answer nothing */
    sfx_answer a;
    uint32_t tk;
    CHECK(t, sfx_index_draft(NULL, toks, 2, 3, 0, 1, 1, 0.0, &tk, &a) == 0, "NULL draft");
    CHECK(t, sfx_index_count(NULL, toks, 1) == 0 && sfx_index_match(NULL, toks, 2, 0, NULL) == 0,
          "NULL count/match");
    CHECK(t, sfx_ngram_draft(NULL, toks, 2, 3, 2, 50, &tk, NULL) == 0, "NULL ngram draft");
    CHECK(t, sfx_ngram_lookup(NULL, toks, 2, NULL) == 0, "NULL lookup");
    sfx_index_free(NULL);
    sfx_ngram_free(NULL);
    sfx_corpus_free(c);
}

static int cancel_at_counting(void *user, const char *phase, uint64_t done, uint64_t total) {
    (void)done;
    (void)total;
    int *calls = user;
    (*calls)++;
    return strcmp(phase, "counting") == 0;
}

static int cancel_now(void *user, const char *phase, uint64_t done, uint64_t total) {
    (void)phase;
    (void)done;
    (void)total;
    (*(int *)user)++;
    return 1;
}

static void test_cancel(T *t) {
    rng_state = 5;
    docs_t d = make_docs(30, 5, 50, 30);
    sfx_corpus *c = make_corpus(t, &d);
    sfx_error err;
    sfx_index *x = NULL;
    sfx_ngram *g = NULL;
    int calls = 0;
    CHECK_STATUS(t, sfx_index_build(c, &x, cancel_now, &calls, &err), OLIF_ERR_CANCELLED, &err,
                 "index cancelled");
    CHECK(t, x == NULL && calls == 1, "calls %d", calls);
    calls = 0;
    CHECK_STATUS(t, sfx_ngram_build(c, 2, &g, cancel_at_counting, &calls, &err), OLIF_ERR_CANCELLED,
                 &err, "ngram cancelled");
    CHECK(t, g == NULL && calls >= 2, "calls %d", calls);
    /* the corpus survives and builds afterwards */
    CHECK_STATUS(t, sfx_index_build(c, &x, NULL, NULL, &err), OLIF_OK, &err, "index after cancel");
    sfx_index_free(x);
    sfx_corpus_free(c);
    free_docs(&d);
}

static void test_index_against_naive(T *t) {
    for (int trial = 0; trial < 40; trial++) {
        rng_state = 1000 + (uint64_t)trial;
        uint32_t vocab = 2 + rnd_below(40);
        docs_t d = make_docs(vocab, 1 + rnd_below(10), 60, 2 + rnd_below(vocab));
        if (d.n == 0) {
            free_docs(&d);
            continue;
        }
        sfx_corpus *c = NULL;
        sfx_index *x = index_of_docs(t, &d, &c);
        sfx_error err;
        if (!x) {
            sfx_corpus_free(c);
            free_docs(&d);
            continue;
        }
        CHECK_STATUS(t, sfx_index_verify(x, &err), OLIF_OK, &err, "verify");
        sfx_index_info info;
        sfx_index_get_info(x, &info);
        CHECK(t, info.n_tokens == d.n && info.token_bytes == 2 && info.memory_mapped == 0,
              "info %llu", (unsigned long long)info.n_tokens);
        for (int q = 0; q < 60; q++) {
            uint32_t p[12];
            size_t m = 1 + rnd_below(5);
            size_t at = rnd_below((uint32_t)d.n);
            for (size_t j = 0; j < m; j++) p[j] = at + j < d.n ? d.tokens[at + j] : rnd_below(vocab);
            if (rnd_below(3) == 0) p[m - 1] = rnd_below(vocab);
            CHECK(t, sfx_index_count(x, p, m) == naive_count(&d, p, m), "count trial %d", trial);
            /* longest suffix match */
            uint64_t cnt;
            uint32_t got = sfx_index_match(x, p, m, 0, &cnt);
            uint32_t want = 0;
            for (size_t l = 1; l <= m; l++)
                if (naive_count(&d, p + m - l, l)) want = (uint32_t)l;
            CHECK(t, got == want, "match %u, want %u", got, want);
            CHECK(t, cnt == (want ? naive_count(&d, p + m - want, want) : d.n), "match count");
            if (m >= 2) CHECK(t, sfx_index_match(x, p, m, 1, NULL) <= 1, "max_match caps");
        }
        sfx_index_free(x);
        sfx_corpus_free(c);
        free_docs(&d);
    }
}

/* The greedy most-frequent continuation, counted naively. */
static size_t naive_draft(const docs_t *d, const uint32_t *ctx, size_t n, size_t k,
                          uint32_t *out, sfx_answer *ans) {
    uint32_t cur[128];
    size_t m = 0;
    for (size_t l = 1; l <= n; l++)
        if (naive_count(d, ctx + n - l, l)) m = l;
    if (m == 0) return 0;
    memcpy(cur, ctx + n - m, m * sizeof *cur);
    size_t got = 0;
    uint64_t *cnt = calloc(d->vocab, sizeof *cnt);
    while (got < k && m < 120) {
        memset(cnt, 0, d->vocab * sizeof *cnt);
        uint64_t total = 0;
        for (size_t i = 0; i < d->docs; i++)
            for (size_t s = d->starts[i]; s + m <= doc_end(d, i); s++)
                if (memcmp(d->tokens + s, cur, m * sizeof *cur) == 0) {
                    total++;
                    if (s + m < doc_end(d, i)) cnt[d->tokens[s + m]]++;
                }
        uint32_t best = 0;
        for (uint32_t v = 1; v < d->vocab; v++)
            if (cnt[v] > cnt[best]) best = v;
        if (cnt[best] == 0) break;
        out[got] = best;
        ans[got].token = best;
        ans[got].match = (uint32_t)m;
        ans[got].count = (uint32_t)cnt[best];
        ans[got].total = (uint32_t)total;
        got++;
        cur[m++] = best;
    }
    free(cnt);
    return got;
}

static void test_draft_against_naive(T *t) {
    for (int trial = 0; trial < 30; trial++) {
        rng_state = 7000 + (uint64_t)trial;
        uint32_t vocab = 3 + rnd_below(20);
        docs_t d = make_docs(vocab, 2 + rnd_below(8), 50, 2 + rnd_below(vocab));
        if (d.n == 0) {
            free_docs(&d);
            continue;
        }
        sfx_corpus *c = make_corpus(t, &d);
        sfx_index *x = NULL;
        sfx_error err;
        CHECK_STATUS(t, sfx_index_build(c, &x, NULL, NULL, &err), OLIF_OK, &err, "build");
        for (int q = 0; q < 40 && x; q++) {
            uint32_t ctx[10];
            size_t n = 1 + rnd_below(8);
            size_t at = rnd_below((uint32_t)d.n);
            for (size_t j = 0; j < n; j++) ctx[j] = at + j < d.n ? d.tokens[at + j] : rnd_below(vocab);
            uint32_t a[12], b[12];
            sfx_answer aa[12], bb[12];
            size_t k = 1 + rnd_below(10);
            size_t got = sfx_index_draft(x, ctx, n, k, 0, 1, 1, 0.0, a, aa);
            size_t want = naive_draft(&d, ctx, n, k, b, bb);
            CHECK(t, got == want, "trial %d: drafted %zu, naive %zu", trial, got, want);
            for (size_t i = 0; i < got && i < want; i++)
                CHECK(t, a[i] == b[i] && aa[i].match == bb[i].match && aa[i].count == bb[i].count &&
                      aa[i].total == bb[i].total, "trial %d step %zu: %u (%u %u/%u) vs %u (%u %u/%u)",
                      trial, i, a[i], aa[i].match, aa[i].count, aa[i].total, b[i], bb[i].match,
                      bb[i].count, bb[i].total);
            /* thresholds only shorten, at the first token that fails them */
            size_t cut = sfx_index_draft(x, ctx, n, k, 0, 1, 2, 0.5, a, NULL);
            size_t expect = 0;
            while (expect < got && aa[expect].count >= 2 && 2 * aa[expect].count >= aa[expect].total)
                expect++;
            CHECK(t, cut == expect, "thresholds: %zu vs %zu", cut, expect);
            /* min_match above the match drafts nothing */
            uint32_t m = sfx_index_match(x, ctx, n, 0, NULL);
            CHECK(t, sfx_index_draft(x, ctx, n, k, 0, m + 1, 1, 0.0, a, NULL) == 0, "min_match");
        }
        sfx_index_free(x);
        sfx_corpus_free(c);
        free_docs(&d);
    }
}

/* Over more than SFX_EXACT_SCAN occurrences the winner is sampled: exact when
 * its share is at least 1/SFX_SAMPLES, always a real continuation. */
static void test_sampled_continuations(T *t) {
    const uint32_t V = 400;
    const size_t N = 60000;
    docs_t d = {0};
    d.vocab = V;
    d.docs = 1;
    d.n = N;
    d.tokens = malloc(N * sizeof *d.tokens);
    d.starts = calloc(1, sizeof *d.starts);
    rng_state = 99;
    for (size_t i = 0; i < N; i++) {
        /* a skewed next-token law: the id after x is often x+1, else zipf-ish */
        uint32_t prev = i ? d.tokens[i - 1] : 0;
        uint64_t r = rnd() % 100;
        d.tokens[i] = r < 30 ? (prev + 1) % 50 : (uint32_t)((rnd() % V) * (rnd() % V) / V);
    }
    sfx_corpus *c = make_corpus(t, &d);
    sfx_index *x = NULL;
    sfx_error err;
    CHECK_STATUS(t, sfx_index_build(c, &x, NULL, NULL, &err), OLIF_OK, &err, "build");
    CHECK_STATUS(t, sfx_index_verify(x, &err), OLIF_OK, &err, "verify");
    uint64_t *cnt = calloc(V, sizeof *cnt);
    int exact = 0;
    for (uint32_t v = 0; v < 60 && x; v++) {
        memset(cnt, 0, V * sizeof *cnt);
        uint64_t total = 0;
        for (size_t i = 0; i < N; i++)
            if (d.tokens[i] == v) {
                total++;
                if (i + 1 < N) cnt[d.tokens[i + 1]]++;
            }
        if (total <= SFX_EXACT_SCAN) continue;
        uint32_t best = 0;
        for (uint32_t w = 1; w < V; w++)
            if (cnt[w] > cnt[best]) best = w;
        uint32_t tok;
        sfx_answer a;
        size_t got = sfx_index_draft(x, &v, 1, 1, 0, 1, 1, 0.0, &tok, &a);
        CHECK(t, got == 1, "drafted after %u", v);
        if (!got) continue;
        CHECK(t, a.total == total && a.count == cnt[tok], "id %u: count %u of %u, true %llu of %llu",
              v, a.count, a.total, (unsigned long long)cnt[tok], (unsigned long long)total);
        if (cnt[best] * SFX_SAMPLES >= total) {
            CHECK(t, tok == best, "id %u: winner %u, true %u", v, tok, best);
            exact++;
        }
    }
    CHECK(t, exact >= 20, "only %d sampled winners checked", exact);
    free(cnt);
    sfx_index_free(x);
    sfx_corpus_free(c);
    free_docs(&d);
}

/* Matching statistics and places against brute force: lengths, counts and every place. */
static void test_matching_stats_against_naive(T *t) {
    for (int trial = 0; trial < 20; trial++) {
        rng_state = 5000 + (uint64_t)trial;
        docs_t d = make_docs(12, 1 + rnd_below(12), 60, 1 + rnd_below(12));
        sfx_corpus *c = NULL;
        sfx_index *x = d.n ? index_of_docs(t, &d, &c) : NULL;    /* no index of nothing */
        sfx_error err;
        /* the document start of each non-empty document, in order */
        uint64_t text_start[64], doc_of[64], nd = 0, pos = 0;
        for (size_t i = 0; i < d.docs; i++) {
            size_t len = doc_end(&d, i) - d.starts[i];
            if (!len) continue;
            text_start[nd] = pos;
            doc_of[nd++] = i;
            pos += len + 1;
        }
        for (int q = 0; q < 30 && x; q++) {
            uint32_t out[80];
            size_t n = 0;
            while (n < 70) {        /* corpus passages, fresh ids, unseen ids */
                if (rnd_below(3) == 0) {
                    size_t s = rnd_below((uint32_t)d.n), len = 1 + rnd_below(20);
                    for (size_t j = 0; j < len && s + j < d.n && n < 70; j++) out[n++] = d.tokens[s + j];
                } else {
                    out[n++] = rnd_below(10) == 0 ? 12 + rnd_below(3) : rnd_below(12);
                }
            }
            uint32_t max_length = rnd_below(4) ? 0 : 1 + rnd_below(8);
            sfx_stat st[80];
            CHECK_STATUS(t, sfx_index_matching_stats(x, out, n, max_length, st, &err), OLIF_OK,
                         &err, "stats");
            for (size_t i = 0; i < n; i++) {
                uint32_t L = 0;
                while (i + L < n && (max_length == 0 || L < max_length) &&
                       naive_count(&d, out + i, L + 1) > 0)
                    L++;
                CHECK(t, st[i].length == L, "ms[%zu] = %u, naive %u", i, st[i].length, L);
                if (st[i].length != L || L == 0) continue;
                uint64_t want = naive_count(&d, out + i, L);
                CHECK(t, st[i].hi - st[i].lo == want, "count %llu, naive %llu",
                      (unsigned long long)(st[i].hi - st[i].lo), (unsigned long long)want);
                sfx_place pl[64];
                size_t got = 0;
                CHECK_STATUS(t, sfx_index_places(x, st[i].lo, st[i].hi, 64, pl, &got, &err),
                             OLIF_OK, &err, "places");
                CHECK(t, got == (want < 64 ? want : 64), "%zu places of %llu", got,
                      (unsigned long long)want);
                for (size_t j = 0; j < got; j++) {
                    uint64_t k = pl[j].document;
                    CHECK(t, k < nd && pl[j].position == text_start[k] + pl[j].offset,
                          "place %zu: document %llu", j, (unsigned long long)k);
                    if (k >= nd) continue;
                    uint64_t s = d.starts[doc_of[k]] + pl[j].offset;
                    CHECK(t, s + L <= doc_end(&d, doc_of[k]) &&
                                 memcmp(d.tokens + s, out + i, L * sizeof *out) == 0,
                          "place %zu does not hold the match", j);
                }
            }
        }
        sfx_index_free(x);
        sfx_corpus_free(c);
        free_docs(&d);
    }
}

static void test_matching_stats_errors(T *t) {
    uint32_t toks[] = {1, 2, 3, 4, 1, 2};     /* the corpus of test_documents_never_cross */
    uint64_t starts[] = {0, 2, 4};
    docs_t d = {toks, starts, 6, 3, 8};
    sfx_corpus *c = NULL;
    sfx_index *x = index_of_docs(t, &d, &c);
    sfx_error err;
    sfx_stat st[4];
    sfx_place pl[4];
    size_t got = 99;
    uint32_t out[] = {1, 2, 3, 4};
    CHECK_STATUS(t, sfx_index_matching_stats(NULL, out, 4, 0, st, &err), OLIF_ERR_ARG, &err,
                 "NULL index");
    CHECK_STATUS(t, sfx_index_matching_stats(x, NULL, 4, 0, st, &err), OLIF_ERR_ARG, &err,
                 "NULL out");
    CHECK_STATUS(t, sfx_index_matching_stats(x, out, 4, 0, NULL, &err), OLIF_ERR_ARG, &err,
                 "NULL stats");
    CHECK_STATUS(t, sfx_index_matching_stats(x, NULL, 0, 0, NULL, &err), OLIF_OK, &err, "n = 0");
    /* 1 2 | 3 4 | 1 2: "2 3" crosses a document boundary */
    CHECK_STATUS(t, sfx_index_matching_stats(x, out, 4, 0, st, &err), OLIF_OK, &err, "stats");
    CHECK(t, st[0].length == 2 && st[1].length == 1 && st[2].length == 2 && st[3].length == 1,
          "lengths %u %u %u %u", st[0].length, st[1].length, st[2].length, st[3].length);
    CHECK(t, st[0].hi - st[0].lo == 2, "1 2 twice");
    CHECK_STATUS(t, sfx_index_places(x, st[2].lo, st[2].hi, 4, pl, &got, &err), OLIF_OK, &err, "p");
    CHECK(t, got == 1 && pl[0].document == 1 && pl[0].offset == 0 && pl[0].position == 3,
          "3 4 is document 1 at 0");
    CHECK_STATUS(t, sfx_index_places(x, 0, 0, 4, NULL, &got, &err), OLIF_OK, &err, "empty");
    CHECK(t, got == 0, "no places");
    CHECK_STATUS(t, sfx_index_places(x, 2, 1, 4, pl, &got, &err), OLIF_ERR_ARG, &err, "lo > hi");
    CHECK_STATUS(t, sfx_index_places(x, 0, 7, 4, pl, &got, &err), OLIF_ERR_ARG, &err, "hi > n");
    CHECK_STATUS(t, sfx_index_places(x, 0, 2, 4, NULL, &got, &err), OLIF_ERR_ARG, &err, "NULL");
    CHECK_STATUS(t, sfx_index_places(x, 0, 2, 4, pl, NULL, &err), OLIF_ERR_ARG, &err, "NULL n");
    CHECK_STATUS(t, sfx_index_places(x, 0, 6, 2, pl, &got, &err), OLIF_OK, &err, "bounded");
    CHECK(t, got == 2, "at most max");
    sfx_place one;
    CHECK_STATUS(t, sfx_index_locate(x, 2, &one, &err), OLIF_ERR_ARG, &err, "a separator");
    CHECK_STATUS(t, sfx_index_locate(x, 9, &one, &err), OLIF_ERR_ARG, &err, "beyond the text");
    CHECK_STATUS(t, sfx_index_locate(x, 7, &one, &err), OLIF_OK, &err, "last document");
    CHECK(t, one.document == 2 && one.offset == 1, "position 7 is document 2 at 1");
    sfx_index_free(x);
    sfx_corpus_free(c);
}

static void test_documents_never_cross(T *t) {
    /* "1 2" ends document 0 and "3" starts document 1: nothing continues 1 2 */
    uint32_t toks[] = {1, 2, 3, 4, 1, 2};
    uint64_t starts[] = {0, 2, 4};
    docs_t d = {toks, starts, 6, 3, 8};
    sfx_corpus *c = make_corpus(t, &d);
    sfx_index *x = NULL;
    sfx_ngram *g = NULL;
    sfx_error err;
    CHECK_STATUS(t, sfx_index_build(c, &x, NULL, NULL, &err), OLIF_OK, &err, "build");
    CHECK_STATUS(t, sfx_ngram_build(c, 2, &g, NULL, NULL, &err), OLIF_ERR_EMPTY, &err,
                 "no 3-gram inside a document");
    CHECK_STATUS(t, sfx_ngram_build(c, 1, &g, NULL, NULL, &err), OLIF_OK, &err, "ngram");
    uint32_t ctx[] = {1, 2}, cross[] = {2, 3}, tok[4];
    CHECK(t, sfx_index_count(x, cross, 2) == 0, "a match across documents");
    CHECK(t, sfx_index_draft(x, ctx, 2, 4, 0, 1, 1, 0.0, tok, NULL) == 0, "a draft across documents");
    CHECK(t, sfx_ngram_lookup(g, ctx, 2, NULL) == 0, "an n-gram across documents");
    sfx_ngram_info info;
    sfx_ngram_get_info(g, &info);
    CHECK(t, info.n_instances == 3 && info.n_contexts == 2, "1 -> 2 twice, 3 -> 4 once");
    sfx_index_free(x);
    sfx_ngram_free(g);
    sfx_corpus_free(c);
}

static void test_ngram_against_naive(T *t) {
    for (int trial = 0; trial < 30; trial++) {
        rng_state = 3000 + (uint64_t)trial;
        uint32_t vocab = 2 + rnd_below(25);
        docs_t d = make_docs(vocab, 1 + rnd_below(8), 60, 2 + rnd_below(vocab));
        uint32_t order = 1 + rnd_below(SFX_MAX_ORDER);
        sfx_corpus *c = make_corpus(t, &d);
        sfx_ngram *g = NULL;
        sfx_error err;
        sfx_status st = sfx_ngram_build(c, order, &g, NULL, NULL, &err);
        int any = 0;
        for (size_t i = 0; i < d.docs; i++) any |= doc_end(&d, i) - d.starts[i] > order;
        if (!any) {
            CHECK(t, st == OLIF_ERR_EMPTY, "no n-gram: status %d", st);
            sfx_corpus_free(c);
            free_docs(&d);
            continue;
        }
        CHECK_STATUS(t, st, OLIF_OK, &err, "build");
        uint64_t *cnt = calloc(vocab, sizeof *cnt);
        uint64_t instances = 0;
        for (size_t i = 0; i < d.docs; i++)
            if (doc_end(&d, i) - d.starts[i] > order) instances += doc_end(&d, i) - d.starts[i] - order;
        sfx_ngram_info info;
        sfx_ngram_get_info(g, &info);
        CHECK(t, info.n_instances == instances && info.order == order, "instances %llu vs %llu",
              (unsigned long long)info.n_instances, (unsigned long long)instances);
        for (int q = 0; q < 40 && g; q++) {
            uint32_t key[SFX_MAX_ORDER + 2];
            size_t at = rnd_below((uint32_t)d.n);
            for (uint32_t j = 0; j < order; j++)
                key[j] = at + j < d.n && rnd_below(5) ? d.tokens[at + j] : rnd_below(vocab);
            memset(cnt, 0, vocab * sizeof *cnt);
            uint64_t total = 0;
            for (size_t i = 0; i < d.docs; i++)
                for (size_t s = d.starts[i]; s + order < doc_end(&d, i); s++)
                    if (memcmp(d.tokens + s, key, order * 4) == 0) {
                        cnt[d.tokens[s + order]]++;
                        total++;
                    }
            uint32_t best = 0, distinct = 0;
            for (uint32_t v = 0; v < vocab; v++) {
                if (cnt[v] > cnt[best]) best = v;
                distinct += cnt[v] > 0;
            }
            sfx_ngram_answer a;
            int found = sfx_ngram_lookup(g, key, order, &a);
            CHECK(t, found == (total > 0), "found %d total %llu", found, (unsigned long long)total);
            if (found) {
                CHECK(t, a.token == best && a.count == cnt[best] && a.total == total &&
                      a.n_next == distinct, "trial %d: %u %u/%u vs %u %llu/%llu", trial, a.token,
                      a.count, a.total, best, (unsigned long long)cnt[best],
                      (unsigned long long)total);
                uint32_t nt[64], nc[64];
                size_t nn = sfx_ngram_next(g, key, order, nt, nc, 64);
                CHECK(t, nn == distinct, "next");
                for (size_t i = 0; i < nn && i < 64; i++)
                    CHECK(t, nc[i] == cnt[nt[i]] && (i == 0 || nt[i - 1] < nt[i]), "next counts");
            }
            /* llama.cpp's stop rule, one token at a time */
            uint32_t toks[8];
            sfx_ngram_answer aa[8];
            size_t got = sfx_ngram_draft(g, key, order, 8, 2, 50, toks, aa);
            uint32_t win[SFX_MAX_ORDER + 8];
            memcpy(win, key, order * 4);
            size_t expect = 0;
            while (expect < 8) {
                sfx_ngram_answer b;
                if (!sfx_ngram_lookup(g, win + expect, order, &b) || b.total < 2 ||
                    100 * b.count < 50 * b.total)
                    break;
                win[expect + order] = b.token;
                expect++;
            }
            CHECK(t, got == expect, "draft %zu vs %zu", got, expect);
            for (size_t i = 0; i < got; i++) CHECK(t, toks[i] == win[order + i], "draft token");
        }
        free(cnt);
        sfx_ngram_free(g);
        sfx_corpus_free(c);
        free_docs(&d);
    }
}

static void test_ngram_thresholds(T *t) {
    /* after (1 2): 3 three times, 4 once (75 %); after (2 3): 5 once, 6 once (50 %, tie -> 5);
       after (3 5): 7 once (one sample) */
    uint32_t toks[] = {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 4, 2, 3, 5, 7, 2, 3, 6};
    uint64_t starts[] = {0, 3, 6, 9, 12, 16};
    docs_t d = {toks, starts, 19, 6, 9};
    sfx_corpus *c = make_corpus(t, &d);
    sfx_ngram *g = NULL;
    sfx_error err;
    CHECK_STATUS(t, sfx_ngram_build(c, 2, &g, NULL, NULL, &err), OLIF_OK, &err, "build");
    uint32_t k12[] = {1, 2}, k23[] = {2, 3}, out[4];
    sfx_ngram_answer a;
    CHECK(t, sfx_ngram_lookup(g, k12, 2, &a) && a.token == 3 && a.count == 3 && a.total == 4, "1 2");
    CHECK(t, sfx_ngram_lookup(g, k23, 2, &a) && a.token == 5 && a.count == 1 && a.total == 2 &&
          a.n_next == 2, "2 3 ties to the lower id");
    /* llama.cpp static: 2 samples, 50 %: 1 2 -> 3, then 2 3 -> 5 (2 samples, 50 %), 3 5 -> 7
       has one sample: stop */
    size_t n = sfx_ngram_draft(g, k12, 2, 4, 2, 50, out, NULL);
    CHECK(t, n == 2 && out[0] == 3 && out[1] == 5, "llama static: %zu", n);
    CHECK(t, sfx_ngram_draft(g, k12, 2, 4, 2, 66, out, NULL) == 1, "66 %% stops at a 50/50 split");
    CHECK(t, sfx_ngram_draft(g, k12, 2, 4, 2, 76, out, NULL) == 0, "76 %% stops at 75 %%");
    CHECK(t, sfx_ngram_draft(g, k12, 2, 4, 1, 0, out, NULL) == 3, "no thresholds: 3 5 7 then unseen");
    CHECK(t, sfx_ngram_draft(g, k12, 1, 4, 0, 0, out, NULL) == 0, "context shorter than the order");
    sfx_ngram_free(g);
    sfx_corpus_free(c);
}

static void test_wide_vocabulary(T *t) {
    /* ids beyond 65535 store the text in 4 bytes */
    rng_state = 31;
    docs_t d = make_docs(70000, 4, 50, 70000);
    for (size_t i = 0; i < d.n; i += 3) d.tokens[i] = 69999 - (uint32_t)(i % 7);
    sfx_corpus *c = make_corpus(t, &d);
    sfx_index *x = NULL;
    sfx_error err;
    CHECK_STATUS(t, sfx_index_build(c, &x, NULL, NULL, &err), OLIF_OK, &err, "build");
    sfx_index_info info;
    sfx_index_get_info(x, &info);
    CHECK(t, info.token_bytes == 4, "token bytes %u", info.token_bytes);
    CHECK_STATUS(t, sfx_index_verify(x, &err), OLIF_OK, &err, "verify");
    for (int q = 0; q < 20; q++) {
        size_t at = rnd_below((uint32_t)d.n - 3);
        CHECK(t, sfx_index_count(x, d.tokens + at, 3) == naive_count(&d, d.tokens + at, 3), "count");
    }
    sfx_index_free(x);
    sfx_corpus_free(c);
    free_docs(&d);
}

static void test_file_layout(T *t) {
    for (int ngram = 0; ngram < 2; ngram++) {
        size_t size;
        uint8_t *img = saved_image(t, ngram, &size);
        CHECK(t, img && size > HEADER_SIZE, "saved image");
        if (!img) continue;
        CHECK(t, memcmp(img, ngram ? "OLIFNGC\0" : "OLIFSFX\0", 8) == 0, "magic");
        uint32_t v, hs;
        memcpy(&v, img + OFF_VERSION, 4);
        memcpy(&hs, img + 12, 4);
        CHECK(t, v == SFX_FORMAT_VERSION && hs == HEADER_SIZE, "version %u header %u", v, hs);
        CHECK(t, get64(img, OFF_FILE_SIZE) == size, "file size field");
        CHECK(t, get64(img, OFF_PAYLOAD_SUM) == olif_checksum64(img + HEADER_SIZE, size - HEADER_SIZE),
              "payload checksum mirrored");
        uint8_t copy[HEADER_SIZE];
        memcpy(copy, img, HEADER_SIZE);
        memset(copy + OFF_HEADER_SUM, 0, 8);
        CHECK(t, get64(img, OFF_HEADER_SUM) == olif_checksum64(copy, HEADER_SIZE), "header checksum mirrored");
        uint32_t nsec;
        memcpy(&nsec, img + OFF_NSEC, 4);
        CHECK(t, nsec == (ngram ? 4u : 3u), "sections %u", nsec);
        for (uint32_t k = 0; k < nsec; k++)
            CHECK(t, get64(img, OFF_SEC_OFFSET + 8 * k) % 64 == 0, "section %u aligned", k);
        free(img);
    }
}

static void test_save_load_roundtrip(T *t) {
    rng_state = 77;
    docs_t d = make_docs(23, 7, 60, 14);
    sfx_corpus *c = make_corpus(t, &d);
    sfx_error err;
    sfx_index *x = NULL, *mx = NULL, *bx = NULL;
    sfx_ngram *g = NULL, *mg = NULL, *bg = NULL;
    char ip[512], gp[512];
    path_in(t, ip, sizeof ip, "rt.sfx");
    path_in(t, gp, sizeof gp, "rt.ngc");
    CHECK_STATUS(t, sfx_index_build(c, &x, NULL, NULL, &err), OLIF_OK, &err, "build");
    CHECK_STATUS(t, sfx_ngram_build(c, 2, &g, NULL, NULL, &err), OLIF_OK, &err, "ngram");
    CHECK_STATUS(t, sfx_index_save(x, ip, &err), OLIF_OK, &err, "save");
    CHECK_STATUS(t, sfx_ngram_save(g, gp, &err), OLIF_OK, &err, "save ngram");
    CHECK_STATUS(t, sfx_index_load(ip, 0, &mx, &err), OLIF_OK, &err, "load");
    CHECK_STATUS(t, sfx_ngram_load(gp, 0, &mg, &err), OLIF_OK, &err, "load ngram");
    size_t isz, gsz;
    uint8_t *ib = read_all(ip, &isz), *gb = read_all(gp, &gsz);
    CHECK_STATUS(t, sfx_index_load_buffer(ib, isz, 0, &bx, &err), OLIF_OK, &err, "buffer");
    CHECK_STATUS(t, sfx_ngram_load_buffer(gb, gsz, 0, &bg, &err), OLIF_OK, &err, "buffer ngram");
    /* the wrong loader for each file says so */
    sfx_index *wx = NULL;
    sfx_ngram *wg = NULL;
    CHECK_STATUS(t, sfx_index_load(gp, 0, &wx, &err), OLIF_ERR_FOREIGN, &err, "ngram as index");
    CHECK(t, strstr(err.message, "bad magic: it is an n-gram cache") != NULL, "%s", err.message);
    CHECK_STATUS(t, sfx_ngram_load_buffer(ib, isz, 0, &wg, &err), OLIF_ERR_FOREIGN, &err, "index as ngram");
    CHECK(t, strstr(err.message, "bad magic: it is a suffix index") != NULL, "%s", err.message);
    if (mx && bx && mg && bg) {
        sfx_index_info a, b;
        sfx_index_get_info(mx, &a);
        sfx_index_get_info(bx, &b);
        CHECK(t, a.memory_mapped == 0 && b.memory_mapped == 0 && a.file_size == isz, "private copies");
        CHECK(t, strcmp(a.tokenizer_name, "test-tok") == 0 && a.tokenizer_digest[5] == 5, "identity");
        for (int q = 0; q < 50; q++) {
            uint32_t ctx[6], t1[8], t2[8], t3[8];
            size_t at = rnd_below((uint32_t)d.n);
            for (int j = 0; j < 6; j++) ctx[j] = at + j < d.n ? d.tokens[at + j] : rnd_below(23);
            size_t n1 = sfx_index_draft(x, ctx, 6, 8, 0, 1, 1, 0.0, t1, NULL);
            size_t n2 = sfx_index_draft(mx, ctx, 6, 8, 0, 1, 1, 0.0, t2, NULL);
            size_t n3 = sfx_index_draft(bx, ctx, 6, 8, 0, 1, 1, 0.0, t3, NULL);
            CHECK(t, n1 == n2 && n1 == n3 && !memcmp(t1, t2, n1 * 4) && !memcmp(t1, t3, n1 * 4),
                  "same drafts");
            n1 = sfx_ngram_draft(g, ctx, 6, 8, 1, 0, t1, NULL);
            n2 = sfx_ngram_draft(mg, ctx, 6, 8, 1, 0, t2, NULL);
            n3 = sfx_ngram_draft(bg, ctx, 6, 8, 1, 0, t3, NULL);
            CHECK(t, n1 == n2 && n1 == n3 && !memcmp(t1, t2, n1 * 4) && !memcmp(t1, t3, n1 * 4),
                  "same n-gram drafts");
        }
    }
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no-such.sfx", t->dir);
    CHECK_STATUS(t, sfx_index_load(missing, 0, &wx, &err), OLIF_ERR_IO, &err, "missing file");
    CHECK(t, strstr(err.message, "no-such.sfx") != NULL, "names the file: %s", err.message);
    CHECK_STATUS(t, sfx_index_load(t->dir, 0, &wx, &err), OLIF_ERR_IO, &err, "a directory");
    char empty[600];
    snprintf(empty, sizeof empty, "%s/empty.sfx", t->dir);
    FILE *f = fopen(empty, "wb");
    if (f) fclose(f);
    CHECK_STATUS(t, sfx_index_load(empty, 0, &wx, &err), OLIF_ERR_TRUNCATED, &err, "empty file");
    char badpath[600];
    snprintf(badpath, sizeof badpath, "%s/no-dir/x.sfx", t->dir);
    CHECK_STATUS(t, sfx_index_save(x, badpath, &err), OLIF_ERR_IO, &err, "unwritable path");
    remove(empty);
    remove(ip);
    remove(gp);
    free(ib);
    free(gb);
    sfx_index_free(x);
    sfx_index_free(mx);
    sfx_index_free(bx);
    sfx_ngram_free(g);
    sfx_ngram_free(mg);
    sfx_ngram_free(bg);
    sfx_corpus_free(c);
    free_docs(&d);
}

static sfx_status load_any(int ngram, const uint8_t *img, size_t size, uint32_t flags,
                           sfx_error *err, T *t, int query) {
    if (ngram) {
        sfx_ngram *g = NULL;
        sfx_status st = sfx_ngram_load_buffer(img, size, flags, &g, err);
        CHECK(t, (st == OLIF_OK) == (g != NULL), "handle iff ok");
        if (g && query) query_ngram(t, g);
        sfx_ngram_free(g);
        return st;
    }
    sfx_index *x = NULL;
    sfx_status st = sfx_index_load_buffer(img, size, flags, &x, err);
    CHECK(t, (st == OLIF_OK) == (x != NULL), "handle iff ok");
    if (x && query) query_index(t, x);
    sfx_index_free(x);
    return st;
}

static void test_truncation(T *t) {
    for (int ngram = 0; ngram < 2; ngram++) {
        size_t size;
        uint8_t *img = saved_image(t, ngram, &size);
        if (!img) continue;
        sfx_error err;
        for (size_t n = 0; n < size; n++) {
            for (uint32_t flags = 0; flags < 2; flags++) {
                sfx_status st = load_any(ngram, img, n, flags, &err, t, 0);
                sfx_status want = n < 8 ? OLIF_ERR_FOREIGN : OLIF_ERR_TRUNCATED;
                CHECK(t, st == want, "%s cut at %zu of %zu: %d (%s)", ngram ? "ngram" : "index", n,
                      size, st, err.message);
            }
        }
        /* one byte too many */
        uint8_t *longer = malloc(size + 1);
        memcpy(longer, img, size);
        longer[size] = 0;
        CHECK(t, load_any(ngram, longer, size + 1, 0, &err, t, 0) == OLIF_ERR_CORRUPT, "longer file");
        CHECK(t, strstr(err.message, "header says") != NULL, "%s", err.message);
        free(longer);
        free(img);
    }
}

static void test_version_and_magic(T *t) {
    for (int ngram = 0; ngram < 2; ngram++) {
        size_t size;
        uint8_t *img = saved_image(t, ngram, &size);
        if (!img) continue;
        sfx_error err;
        uint32_t versions[] = {0, 2, 0xFFFFFFFFu};
        for (int i = 0; i < 3; i++) {
            put32(img, OFF_VERSION, versions[i]);
            CHECK(t, load_any(ngram, img, size, 0, &err, t, 0) == OLIF_ERR_VERSION, "version %u",
                  versions[i]);
            CHECK(t, strstr(err.message, "version") != NULL, "%s", err.message);
        }
        put32(img, OFF_VERSION, SFX_FORMAT_VERSION);
        img[0] = 'X';
        CHECK(t, load_any(ngram, img, size, 0, &err, t, 0) == OLIF_ERR_FOREIGN, "magic");
        img[0] = 'O';
        put32(img, 16, 0x04030201u);
        reseal(img, size);
        CHECK(t, load_any(ngram, img, size, 0, &err, t, 0) == OLIF_ERR_CORRUPT, "byte order");
        free(img);
    }
}

/* Edit the image, re-seal it, expect `want` with checksums on. */
static void expect_edit(T *t, int ngram, const uint8_t *orig, size_t size, size_t off,
                        const void *bytes, size_t n, sfx_status want, const char *what) {
    uint8_t *img = malloc(size);
    memcpy(img, orig, size);
    memcpy(img + off, bytes, n);
    reseal(img, size);
    sfx_error err;
    sfx_status st = load_any(ngram, img, size, 0, &err, t, 1);
    CHECK(t, st == want, "%s: got %d (%s), want %d", what, st, err.message, want);
    free(img);
}

static void test_structure_edits(T *t) {
    size_t size;
    uint8_t *img = saved_image(t, 0, &size);
    if (img) {
        uint64_t text = get64(img, OFF_SEC_OFFSET), sa = get64(img, OFF_SEC_OFFSET + 8),
                 bucket = get64(img, OFF_SEC_OFFSET + 16);
        uint32_t big = 0xFFFFFFFFu, three = 3, zero = 0, one = 1;
        uint16_t beyond = 20, sep = 19, tok = 1;
        expect_edit(t, 0, img, size, sa + 4 * 3, &big, 4, OLIF_ERR_CORRUPT, "suffix beyond the text");
        expect_edit(t, 0, img, size, text + 2 * 5, &beyond, 2, OLIF_ERR_CORRUPT, "text id beyond");
        expect_edit(t, 0, img, size, text + 2 * 5, &sep, 2, OLIF_ERR_CORRUPT, "extra separator");
        uint64_t n_text = get64(img, OFF_COUNT);
        expect_edit(t, 0, img, size, text + 2 * (n_text - 1), &tok, 2, OLIF_ERR_CORRUPT,
                    "last id not a separator");
        expect_edit(t, 0, img, size, bucket + 4 * 2, &big, 4, OLIF_ERR_CORRUPT, "bucket out of order");
        expect_edit(t, 0, img, size, bucket, &one, 4, OLIF_ERR_CORRUPT, "first bucket");
        expect_edit(t, 0, img, size, OFF_PARAM, &three, 4, OLIF_ERR_CORRUPT, "token bytes 3");
        expect_edit(t, 0, img, size, OFF_NSEC, &three + 0, 4, OLIF_OK, "sections (same)");
        uint32_t four = 4;
        expect_edit(t, 0, img, size, OFF_NSEC, &four, 4, OLIF_ERR_CORRUPT, "sections 4");
        uint64_t fewer = get64(img, OFF_COUNT + 8) - 1;
        expect_edit(t, 0, img, size, OFF_COUNT + 8, &fewer, 8, OLIF_ERR_CORRUPT, "suffix count");
        uint64_t misaligned = sa + 4;
        expect_edit(t, 0, img, size, OFF_SEC_OFFSET + 8, &misaligned, 8, OLIF_ERR_CORRUPT,
                    "misaligned section");
        uint64_t past = size + 64;
        expect_edit(t, 0, img, size, OFF_SEC_OFFSET + 16, &past, 8, OLIF_ERR_CORRUPT,
                    "section past the end");
        expect_edit(t, 0, img, size, OFF_RESERVED + 17, &one, 1, OLIF_ERR_CORRUPT, "reserved");
        expect_edit(t, 0, img, size, 36, &one, 4, OLIF_ERR_CORRUPT, "reserved0");
        uint32_t vocab = 0;
        expect_edit(t, 0, img, size, 20, &vocab, 4, OLIF_ERR_CORRUPT, "vocab 0");
        char name[64];
        memset(name, 'a', sizeof name);
        expect_edit(t, 0, img, size, 152, name, 64, OLIF_ERR_CORRUPT, "tokenizer name unterminated");
        /* an unsorted suffix array still loads (the checksum vouches for the order) and
           answers safely; verify finds it */
        uint8_t *swapped = malloc(size);
        memcpy(swapped, img, size);
        uint32_t s0, s1;
        memcpy(&s0, swapped + sa, 4);
        memcpy(&s1, swapped + sa + 4 * 7, 4);
        memcpy(swapped + sa, &s1, 4);
        memcpy(swapped + sa + 4 * 7, &s0, 4);
        reseal(swapped, size);
        sfx_index *x = NULL;
        sfx_error err;
        CHECK_STATUS(t, sfx_index_load_buffer(swapped, size, 0, &x, &err), OLIF_OK, &err, "swapped");
        if (x) {
            query_index(t, x);
            CHECK_STATUS(t, sfx_index_verify(x, &err), OLIF_ERR_CORRUPT, &err, "verify finds it");
        }
        sfx_index_free(x);
        free(swapped);
        (void)zero;
        free(img);
    }
    img = saved_image(t, 1, &size);
    if (img) {
        uint64_t keys = get64(img, OFF_SEC_OFFSET), offs = get64(img, OFF_SEC_OFFSET + 8),
                 summ = get64(img, OFF_SEC_OFFSET + 16), pairs = get64(img, OFF_SEC_OFFSET + 24);
        uint32_t big = 0xFFFFFFFFu, zero = 0, five = 5, one = 1;
        expect_edit(t, 1, img, size, keys, &big, 4, OLIF_ERR_CORRUPT, "key id beyond");
        uint32_t k0[2];
        memcpy(k0, img + keys + 8, 8);
        expect_edit(t, 1, img, size, keys, k0, 8, OLIF_ERR_CORRUPT, "keys not ascending");
        expect_edit(t, 1, img, size, offs + 4, &zero, 4, OLIF_ERR_CORRUPT, "empty context");
        expect_edit(t, 1, img, size, offs, &one, 4, OLIF_ERR_CORRUPT, "first offset");
        expect_edit(t, 1, img, size, offs + 8, &big, 4, OLIF_ERR_CORRUPT, "offset beyond");
        uint32_t other;
        memcpy(&other, img + summ, 4);
        other = (other + 1) % 19;
        expect_edit(t, 1, img, size, summ, &other, 4, OLIF_ERR_CORRUPT, "summary winner");
        expect_edit(t, 1, img, size, summ + 8, &five, 4, OLIF_ERR_CORRUPT, "summary total");
        expect_edit(t, 1, img, size, pairs + 4, &zero, 4, OLIF_ERR_CORRUPT, "zero count");
        expect_edit(t, 1, img, size, pairs, &big, 4, OLIF_ERR_CORRUPT, "pair id beyond");
        expect_edit(t, 1, img, size, OFF_PARAM, &five, 4, OLIF_ERR_CORRUPT, "order 5");
        uint64_t more = get64(img, OFF_COUNT + 16) + 1;
        expect_edit(t, 1, img, size, OFF_COUNT + 16, &more, 8, OLIF_ERR_CORRUPT, "instances");
        free(img);
    }
}

static void test_checksums(T *t) {
    for (int ngram = 0; ngram < 2; ngram++) {
        size_t size;
        uint8_t *img = saved_image(t, ngram, &size);
        if (!img) continue;
        sfx_error err;
        int loaded = 0, refused = 0;
        for (size_t pos = 0; pos < size; pos += 3) {
            uint8_t old = img[pos];
            img[pos] ^= (uint8_t)(1 + rnd_below(255));
            sfx_status st = load_any(ngram, img, size, 0, &err, t, 0);
            CHECK(t, st != OLIF_OK, "%s: flip at %zu loads with checksums", ngram ? "ngram" : "index",
                  pos);
            st = load_any(ngram, img, size, SFX_LOAD_SKIP_CHECKSUM, &err, t, 1);
            if (st == OLIF_OK) loaded++;
            else refused++;
            img[pos] = old;
        }
        CHECK(t, loaded > 0 && refused > 0, "loaded %d refused %d", loaded, refused);
        free(img);
    }
}

/* At least 1,000 random mutants of each file: 1-8 edits (flip, random byte,
 * 0x00, 0xFF, a 32-bit extreme), half of them re-sealed so the structural
 * checks run with checksums on. Every outcome is an error code or a handle
 * that answers within its guarantees. */
static void test_random_mutants(T *t) {
    for (int ngram = 0; ngram < 2; ngram++) {
        size_t size;
        uint8_t *img = saved_image(t, ngram, &size);
        if (!img) continue;
        uint8_t *m = malloc(size + 64);
        int ok = 0, bad = 0;
        rng_state = 123456789u + (uint64_t)ngram;
        for (int i = 0; i < 1200; i++) {
            size_t n = size;
            memcpy(m, img, size);
            int edits = 1 + (int)rnd_below(8);
            for (int e = 0; e < edits; e++) {
                size_t pos = rnd_below(4) == 0 ? rnd_below(HEADER_SIZE) : rnd_below((uint32_t)size);
                switch (rnd_below(5)) {
                case 0: m[pos] ^= (uint8_t)(1u << rnd_below(8)); break;
                case 1: m[pos] = (uint8_t)rnd(); break;
                case 2: m[pos] = 0; break;
                case 3: m[pos] = 0xFF; break;
                default:
                    if (pos + 4 <= size) put32(m, pos & ~(size_t)3, rnd_below(2) ? 0xFFFFFFFFu : 0);
                }
            }
            if (rnd_below(10) == 0) n = rnd_below((uint32_t)size);
            if (rnd_below(2)) reseal(m, n);
            sfx_error err;
            for (uint32_t flags = 0; flags < 2; flags++) {
                sfx_status st = load_any(ngram, m, n, flags, &err, t, 1);
                if (st == OLIF_OK) ok++;
                else {
                    bad++;
                    CHECK(t, st <= OLIF_ERR_CANCELLED && err.code == (int)st && err.message[0],
                          "mutant %d: status %d", i, st);
                }
            }
        }
        CHECK(t, ok > 0 && bad > 0, "%s mutants: %d loaded, %d refused", ngram ? "ngram" : "index",
              ok, bad);
        printf("  %s: 1200 mutants, %d loads succeeded, %d refused\n", ngram ? "ngram" : "index", ok,
               bad);
        free(m);
        free(img);
    }
}

typedef struct {
    const char *name;
    void (*fn)(T *);
} test_case;

int main(int argc, char **argv) {
    const test_case tests[] = {
        {"status_strings", test_status_strings},
        {"argument_errors", test_argument_errors},
        {"cancel", test_cancel},
        {"index_against_naive", test_index_against_naive},
        {"draft_against_naive", test_draft_against_naive},
        {"sampled_continuations", test_sampled_continuations},
        {"documents_never_cross", test_documents_never_cross},
        {"matching_stats_against_naive", test_matching_stats_against_naive},
        {"matching_stats_errors", test_matching_stats_errors},
        {"ngram_against_naive", test_ngram_against_naive},
        {"ngram_thresholds", test_ngram_thresholds},
        {"wide_vocabulary", test_wide_vocabulary},
        {"file_layout", test_file_layout},
        {"save_load_roundtrip", test_save_load_roundtrip},
        {"truncation", test_truncation},
        {"version_and_magic", test_version_and_magic},
        {"structure_edits", test_structure_edits},
        {"checksums", test_checksums},
        {"random_mutants", test_random_mutants},
    };
    char made[] = "/tmp/suffix-test-XXXXXX";
    T t = {NULL, 0, 0, NULL};
    int own_dir = argc < 2;
    if (own_dir) {
        if (!mkdtemp(made)) {
            perror("mkdtemp");
            return 2;
        }
        t.dir = made;
    } else {
        t.dir = argv[1];
    }
    const char *only = argc > 2 ? argv[2] : NULL;
    int passed = 0, failed = 0;
    for (size_t i = 0; i < sizeof tests / sizeof *tests; i++) {
        if (only && strcmp(only, tests[i].name) != 0) continue;
        t.test = tests[i].name;
        t.failures = 0;
        unsigned long before = t.checks;
        tests[i].fn(&t);
        if (t.failures) {
            failed++;
            printf("FAIL %-28s %lu of %lu checks failed\n", tests[i].name, t.failures,
                   t.checks - before);
        } else {
            passed++;
            printf("ok   %-28s %lu checks\n", tests[i].name, t.checks - before);
        }
    }
    if (own_dir) rmdir(made);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
