/*
 * test_igtree.c — standalone robustness tests of the IGTree C library
 * (igtree.h). No framework: CHECK records a failure with a message and the
 * test goes on; the last line printed is "N passed, M failed" (tests), and
 * the exit status is nonzero if anything failed.
 *
 *   cc -std=c99 -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -pthread \
 *      csrc/igt*.c csrc/test_igtree.c -lm -o test_igtree
 *   ./test_igtree [scratch-dir]      (default: a fresh directory under /tmp)
 *
 * The data are small and pseudo-random (xorshift64, fixed seeds), so a run
 * is deterministic and takes a few seconds even under sanitizers. Some tests
 * edit model files at known header offsets and re-seal their checksums; the
 * offsets and the checksum are mirrored from igt_file.c and verified against
 * freshly saved models first (test_file_layout, test_file_layout_v2), so a
 * format change shows up there with a clear message rather than as
 * mysterious failures elsewhere. Format 1 is still read (and written on
 * request), so its tests run on igt_save_version(..., 1) images.
 *
 * Needs POSIX (fork, pthreads, FIFOs, rlimits): build with -pthread.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* O_TMPFILE, to probe what igt_save can use */
#endif
#define _POSIX_C_SOURCE 200809L
#include "igtree.h"
#include "olif_checksum.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- harness --------------------------------------------------------------- */

typedef struct {
    const char *test;           /* name of the running test */
    unsigned long checks;       /* checks evaluated, all tests */
    unsigned long failures;     /* failed checks of the running test */
    const char *dir;            /* scratch directory for model files */
} T;

static void check_failed(T *t, const char *file, int line, const char *expr,
                         const char *fmt, ...) {
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

/* got == want; for an error also that err says so with a message. */
static void check_status(T *t, int line, igt_status got, igt_status want,
                         const igt_error *err, const char *what) {
    t->checks++;
    if (got != want) {
        check_failed(t, __FILE__, line, "status", "%s: got %d (%s), want %d (%s); message: %s",
                     what, (int)got, olif_status_string((int)got), (int)want,
                     olif_status_string((int)want), err ? err->message : "-");
        return;
    }
    if (err && got != OLIF_OK && (err->code != (int)got || err->message[0] == '\0'))
        check_failed(t, __FILE__, line, "error record",
                     "%s: err.code %d, message '%s' (returned %d)", what, err->code,
                     err->message, (int)got);
}

/* got is an error (any), reported in err with a message. */
static void check_error(T *t, int line, igt_status got, const igt_error *err,
                        const char *what) {
    t->checks++;
    if (got == OLIF_OK) {
        check_failed(t, __FILE__, line, "status", "%s: succeeded, want an error", what);
        return;
    }
    if (got > OLIF_ERR_CANCELLED || err->code != (int)got || err->message[0] == '\0')
        check_failed(t, __FILE__, line, "error record",
                     "%s: status %d, err.code %d, message '%s'", what, (int)got, err->code,
                     err->message);
}

#define CHECK_STATUS(t, got, want, err, what) check_status((t), __LINE__, (got), (want), (err), (what))
#define CHECK_ERROR(t, got, err, what) check_error((t), __LINE__, (got), (err), (what))

/* ---- deterministic pseudo-random data -------------------------------------- */

typedef struct { uint64_t s; } rng_t;

static rng_t rng_seed(uint64_t seed) {
    rng_t r = {seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull};
    if (!r.s) r.s = 1;
    return r;
}

static uint64_t rng_next(rng_t *r) {        /* xorshift64* */
    uint64_t x = r->s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static uint32_t rng_below(rng_t *r, uint32_t n) {
    return n ? (uint32_t)((rng_next(r) >> 16) % n) : 0;
}

/* A query id: usually a vocabulary id, sometimes padding, unseen or huge. */
static uint32_t query_id(rng_t *r, uint32_t V) {
    uint32_t k = rng_below(r, 32);
    if (k == 0) return V;
    if (k == 1) return V + 1 + rng_below(r, 5);
    if (k == 2) return UINT32_MAX - rng_below(r, 2);
    return rng_below(r, V < 12 ? V : 12);  /* small ids: the ones training uses most */
}

/* n training instances (rows of window+1 ids). Features are drawn from
 * small, position-dependent ranges (with some padding) so that contexts share
 * prefixes, repeat, and are sometimes unique; the class is mostly a function
 * of the two newest ids, sometimes noise. */
static uint32_t *random_instances(rng_t *r, uint32_t F, uint32_t V, size_t n) {
    uint32_t *rows = malloc(n * (F + 1) * sizeof *rows);
    if (!rows) { fprintf(stderr, "out of memory\n"); exit(2); }
    for (size_t i = 0; i < n; i++) {
        uint32_t *row = rows + i * (F + 1);
        for (uint32_t j = 0; j < F; j++) {
            uint32_t range = 3 + 3 * (j < 6 ? j : 6);
            if (range > V) range = V;
            row[j] = rng_below(r, 24) == 0 ? V : rng_below(r, range);
        }
        uint32_t a = row[F - 1] % V, b = F > 1 ? row[F - 2] % V : 0;
        row[F] = rng_below(r, 10) < 8 ? (a * 7 + b * 3) % V : rng_below(r, V);
    }
    return rows;
}

/* ---- helpers ------------------------------------------------------------------ */

static igt_model *build_from_rows(T *t, uint32_t F, uint32_t V, uint32_t top_k, uint32_t order,
                                  const uint32_t *perm, const uint32_t *rows, size_t n) {
    igt_config cfg;
    igt_config_init(&cfg, V);
    cfg.window = F;
    cfg.top_k = top_k;
    cfg.order = order;
    if (perm) memcpy(cfg.permutation, perm, F * sizeof *perm);
    strcpy(cfg.tokenizer_name, "test-tokenizer");
    for (int i = 0; i < IGT_TOKENIZER_DIGEST_SIZE; i++) cfg.tokenizer_digest[i] = (uint8_t)(i * 7);
    igt_builder *b = NULL;
    igt_model *m = NULL;
    igt_error err;
    igt_status st = igt_builder_new(&cfg, &b, &err);
    CHECK_STATUS(t, st, OLIF_OK, &err, "builder_new");
    if (st) return NULL;
    st = igt_builder_add_instances(b, rows, n, &err);
    CHECK_STATUS(t, st, OLIF_OK, &err, "add_instances");
    CHECK(t, igt_builder_count(b) == n, "count %llu, want %zu",
          (unsigned long long)igt_builder_count(b), n);
    st = igt_builder_build(b, &m, NULL, NULL, &err);
    CHECK_STATUS(t, st, OLIF_OK, &err, "build");
    igt_builder_free(b);
    return m;
}

static igt_model *random_model(T *t, uint64_t seed, uint32_t F, uint32_t V, size_t n,
                               uint32_t top_k, uint32_t **rows_out) {
    rng_t r = rng_seed(seed);
    uint32_t *rows = random_instances(&r, F, V, n);
    igt_model *m = build_from_rows(t, F, V, top_k, IGT_ORDER_GAIN_RATIO, NULL, rows, n);
    if (rows_out) *rows_out = rows; else free(rows);
    return m;
}

static void path_in(const T *t, char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", t->dir, name);
}

static uint8_t *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    *size = n;
    return buf;
}

static int write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(data, 1, size, f) == size;
    if (fclose(f) != 0) ok = 0;
    return ok;
}

/* Serialised bytes of a model in a format version (via igt_save_version
 * into the scratch directory). */
static uint8_t *model_bytes_v(T *t, const igt_model *m, uint32_t version, size_t *size) {
    char path[1024];
    path_in(t, path, sizeof path, "image.olif");
    igt_error err;
    igt_status st = igt_save_version(m, path, version, &err);
    CHECK_STATUS(t, st, OLIF_OK, &err, "save");
    uint8_t *data = read_file(path, size);
    CHECK(t, data != NULL, "cannot read back %s", path);
    remove(path);
    return data;
}

static int same_file_bytes(const char *path, const uint8_t *want, size_t size);

static uint8_t *model_bytes(T *t, const igt_model *m, size_t *size) {
    return model_bytes_v(t, m, IGT_FORMAT_VERSION, size);
}

static uint8_t *dup_bytes(const uint8_t *p, size_t n) {
    uint8_t *q = malloc(n ? n : 1);
    if (!q) { fprintf(stderr, "out of memory\n"); exit(2); }
    memcpy(q, p, n);
    return q;
}

static int same_answer(const igt_answer *a, const igt_answer *b) {
    return a->token == b->token && a->depth == b->depth && a->leaf == b->leaf &&
           a->node == b->node && a->winner_count == b->winner_count && a->total == b->total &&
           a->distance == b->distance;
}

static int same_info(const igt_info *a, const igt_info *b) {
    igt_info x = *a, y = *b;
    x.memory_mapped = y.memory_mapped = 0;
    return memcmp(&x, &y, sizeof x) == 0;
}

/* ---- file layouts mirrored from igt_file.c (checked in test_file_layout*) -- */

/* version 1 */
enum {
    OFF_VERSION = 8, OFF_HSIZE = 12, OFF_ENDIAN = 16, OFF_WINDOW = 20, OFF_VOCAB = 24,
    OFF_PADDING = 28, OFF_ORDER = 32, OFF_TOPK = 36, OFF_DEFAULT = 40, OFF_PERM = 48,
    OFF_GAIN_RATIO = 112, OFF_INFO_GAIN = 240, OFF_N_INSTANCES = 368, OFF_N_NODES = 376,
    OFF_N_PAIRS = 384, OFF_N_CLASSES = 392, OFF_FILE_SIZE = 400, OFF_SECTIONS = 408,
    OFF_PAYLOAD_SUM = 464, OFF_HEADER_SUM = 472, OFF_TOKENIZER = 480, HEADER_SIZE = 640
};
enum { SEC_KEY, SEC_CLASS, SEC_WINNER, SEC_TOTAL, SEC_CHILD, SEC_DIST, SEC_PAIRS, SEC_COUNT };

/* version 2 */
enum {
    V2_OFF_IDW = 44, V2_OFF_FLAGS = 48, V2_OFF_RESERVED = 52, V2_OFF_PERM = 56,
    V2_OFF_GAIN_RATIO = 120, V2_OFF_INFO_GAIN = 248, V2_OFF_N_INSTANCES = 376,
    V2_OFF_N_NODES = 384, V2_OFF_N_INTERNAL = 392, V2_OFF_N_PAIRS = 400, V2_OFF_N_CLASSES = 408,
    V2_OFF_N_TOTAL_ESC = 416, V2_OFF_N_WINNER_ESC = 424, V2_OFF_FILE_SIZE = 432,
    V2_OFF_SECTIONS = 440, V2_OFF_PAYLOAD_SUM = 528, V2_OFF_HEADER_SUM = 536,
    V2_OFF_TOKENIZER = 544, V2_OFF_DIGEST = 608
};
enum {
    S2_KEY, S2_CLASS, S2_KIDS, S2_CHILD, S2_TOTAL, S2_WINNER, S2_TOTAL_ESC, S2_WINNER_ESC,
    S2_DIST, S2_PAIR_CLASS, S2_PAIR_COUNT, S2_COUNT
};

static uint32_t get32(const uint8_t *p, size_t off) { uint32_t v; memcpy(&v, p + off, 4); return v; }
static uint64_t get64(const uint8_t *p, size_t off) { uint64_t v; memcpy(&v, p + off, 8); return v; }
static void put32(uint8_t *p, size_t off, uint32_t v) { memcpy(p + off, &v, 4); }
static void put64(uint8_t *p, size_t off, uint64_t v) { memcpy(p + off, &v, 8); }
static size_t section(const uint8_t *img, int k) { return (size_t)get64(img, OFF_SECTIONS + 8 * (size_t)k); }
static size_t section2(const uint8_t *img, int k) { return (size_t)get64(img, V2_OFF_SECTIONS + 8 * (size_t)k); }


/* Recompute both checksums of an edited image (of the version its header
 * says; both headers are 640 bytes), so that only the structural checks
 * stand between the edit and a loaded model. */
static void reseal(uint8_t *img, size_t size) {
    if (size < HEADER_SIZE) return;
    size_t payload = get32(img, OFF_VERSION) == 1 ? OFF_PAYLOAD_SUM : V2_OFF_PAYLOAD_SUM;
    size_t header = get32(img, OFF_VERSION) == 1 ? OFF_HEADER_SUM : V2_OFF_HEADER_SUM;
    put64(img, payload, olif_checksum64(img + HEADER_SIZE, size - HEADER_SIZE));
    put64(img, header, 0);
    put64(img, header, olif_checksum64(img, HEADER_SIZE));
}

static igt_status load_buf(const uint8_t *data, size_t size, uint32_t flags, igt_model **m,
                           igt_error *err) {
    *m = (igt_model *)(uintptr_t)1;     /* must be overwritten */
    igt_status st = igt_load_buffer(data, size, flags, m, err);
    return st;
}

/* ---- query comparisons and damage exercise ---------------------------------- */

/* Many queries on two models that must answer identically. Returns mismatches. */
static unsigned long compare_models(const igt_model *a, const igt_model *b, uint64_t seed,
                                    int nq, const uint32_t *rows, size_t n_rows) {
    igt_info ia, ib;
    igt_get_info(a, &ia);
    igt_get_info(b, &ib);
    if (!same_info(&ia, &ib)) return 1;
    const uint32_t F = ia.window, V = ia.vocab_size;
    rng_t r = rng_seed(seed);
    unsigned long bad = 0;
    uint32_t ctx[IGT_MAX_WINDOW + 4], ta[12], tb[12], ca[64], cb[64], na[64], nb[64];
    igt_answer aa, ab, xa[12], xb[12];
    for (int q = 0; q < nq; q++) {
        size_t n = rng_below(&r, F + 4);
        for (size_t i = 0; i < n; i++) ctx[i] = query_id(&r, V);
        if (rows && n_rows && n >= F && (q & 1)) {   /* a training context */
            memcpy(ctx + n - F, rows + (size_t)rng_below(&r, (uint32_t)n_rows) * (F + 1),
                   F * sizeof *ctx);
            if (q & 2) ctx[n - 1 - rng_below(&r, F)] = query_id(&r, V);
        }
        igt_predict(a, ctx, n, &aa);
        igt_predict(b, ctx, n, &ab);
        bad += !same_answer(&aa, &ab);
        size_t k = rng_below(&r, 13);
        uint32_t min_depth = rng_below(&r, 3);
        double min_share = (q % 3 == 0) ? 0.5 : 0.0;
        size_t ga = igt_draft(a, ctx, n, k, min_depth, min_share, ta, xa);
        size_t gb = igt_draft(b, ctx, n, k, min_depth, min_share, tb, xb);
        bad += ga != gb;
        for (size_t i = 0; i < ga && i < gb; i++)
            bad += ta[i] != tb[i] || !same_answer(&xa[i], &xb[i]);
        size_t sa = igt_node_classes(a, aa.node, ca, na, 64);
        size_t sb = igt_node_classes(b, ab.node, cb, nb, 64);
        bad += sa != sb;
        for (size_t i = 0; i < sa && i < sb && i < 64; i++) bad += ca[i] != cb[i] || na[i] != nb[i];
    }
    /* a batch, against single predictions */
    uint32_t batch[32 * IGT_MAX_WINDOW];
    igt_answer ba[32], bb[32], one;
    for (uint32_t i = 0; i < 32 * F; i++) batch[i] = query_id(&r, V);
    if (rows && n_rows)
        for (uint32_t i = 0; i < 16; i++)
            memcpy(batch + i * F, rows + (size_t)rng_below(&r, (uint32_t)n_rows) * (F + 1),
                   F * sizeof *batch);
    igt_predict_batch(a, batch, 32, ba);
    igt_predict_batch(b, batch, 32, bb);
    for (uint32_t i = 0; i < 32; i++) {
        igt_predict(a, batch + i * F, F, &one);
        bad += !same_answer(&ba[i], &bb[i]) || !same_answer(&ba[i], &one);
    }
    return bad;
}

/* What any loaded model guarantees, however damaged its payload. */
static int answer_ok(const igt_answer *a, const igt_info *info) {
    return a->token < info->vocab_size && a->depth <= info->window &&
           (uint64_t)a->node <= info->n_nodes && a->winner_count <= a->total && a->leaf <= 1 &&
           (a->depth > 0 || a->node == 0);
}

/* Run nq mixed queries on a model that loaded (possibly from a damaged file);
 * under the sanitizers any out-of-bounds read aborts. Returns violations of
 * the guarantees above. */
static unsigned long exercise(const igt_model *m, rng_t *r, int nq) {
    igt_info info;
    igt_get_info(m, &info);
    const uint32_t F = info.window, V = info.vocab_size;
    unsigned long bad = 0;
    uint32_t ctx[IGT_MAX_WINDOW + 4], toks[9], classes[16], counts[16];
    uint32_t rows[4 * IGT_MAX_WINDOW];
    igt_answer a, ans[9], batch[4];
    for (int q = 0; q < nq; q++) {
        size_t n = rng_below(r, F + 4);
        for (size_t i = 0; i < n; i++) ctx[i] = query_id(r, V);
        switch (q % 4) {
        case 0: {
            igt_predict(m, ctx, n, &a);
            bad += !answer_ok(&a, &info);
            size_t c = igt_node_classes(m, a.node, classes, counts, 16);
            if (info.top_k == 0) bad += c != 0;
            else if (info.top_k != IGT_TOPK_ALL) bad += c > info.top_k;
            break;
        }
        case 1: {
            size_t k = rng_below(r, 10);
            size_t got = igt_draft(m, ctx, n, k, rng_below(r, 3), (q & 8) ? 0.3 : 0.0, toks, ans);
            bad += got > k;
            for (size_t i = 0; i < got && i < k; i++)
                bad += !answer_ok(&ans[i], &info) || toks[i] != ans[i].token;
            break;
        }
        case 2: {
            size_t got = igt_draft(m, ctx, n, 9, 0, 0.0, toks, NULL);
            bad += got != 9;    /* nothing stops a draft without thresholds */
            for (size_t i = 0; i < got && i < 9; i++) bad += toks[i] >= V;
            break;
        }
        default: {
            for (uint32_t i = 0; i < 4 * F; i++) rows[i] = query_id(r, V);
            igt_predict_batch(m, rows, 4, batch);
            for (int i = 0; i < 4; i++) bad += !answer_ok(&batch[i], &info);
            uint32_t node = rng_below(r, (uint32_t)info.n_nodes + 4);
            size_t c = igt_node_classes(m, node, classes, counts, 16);
            if (node > info.n_nodes) bad += c != 0;
            break;
        }
        }
    }
    return bad;
}

/* ---- tests: API errors ---------------------------------------------------------- */

static void test_status_strings(T *t) {
    for (int c = OLIF_OK; c <= OLIF_ERR_CANCELLED; c++) {
        const char *s = olif_status_string(c);
        CHECK(t, s && *s && strcmp(s, "unknown error") != 0, "status %d has no description", c);
    }
    CHECK(t, strcmp(olif_status_string(99), "unknown error") == 0, "status 99");
    CHECK(t, strcmp(olif_status_string(-1), "unknown error") == 0, "status -1");
}

static void test_config_errors(T *t) {
    igt_config cfg;
    igt_builder *b = NULL;
    igt_error err;
    igt_config_init(&cfg, 10);
    CHECK(t, cfg.window == 4 && cfg.vocab_size == 10 && cfg.order == IGT_ORDER_GAIN_RATIO &&
             cfg.top_k == 0 && cfg.permutation[3] == 3 && cfg.tokenizer_name[0] == 0,
          "igt_config_init defaults");

    const uint32_t bad_windows[] = {0, IGT_MAX_WINDOW + 1, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad_windows / sizeof *bad_windows; i++) {
        igt_config_init(&cfg, 10);
        cfg.window = bad_windows[i];
        b = (igt_builder *)(uintptr_t)1;
        igt_status st = igt_builder_new(&cfg, &b, &err);
        CHECK_STATUS(t, st, OLIF_ERR_ARG, &err, "window out of range");
        CHECK(t, b == NULL, "out must be NULL after a failure (window %u)", bad_windows[i]);
        CHECK(t, strstr(err.message, "window") != NULL, "message should name the window: %s",
              err.message);
    }
    const uint32_t good_windows[] = {1, 2, IGT_MAX_WINDOW};
    for (size_t i = 0; i < 3; i++) {
        igt_config_init(&cfg, 10);
        cfg.window = good_windows[i];
        igt_status st = igt_builder_new(&cfg, &b, &err);
        CHECK_STATUS(t, st, OLIF_OK, &err, "valid window");
        igt_builder_free(b);
    }
    igt_config_init(&cfg, 0);
    CHECK_STATUS(t, igt_builder_new(&cfg, &b, &err), OLIF_ERR_ARG, &err, "vocab_size 0");
    igt_config_init(&cfg, IGT_MAX_VOCAB);
    CHECK_STATUS(t, igt_builder_new(&cfg, &b, &err), OLIF_ERR_ARG, &err, "vocab_size too big");
    igt_config_init(&cfg, 10);
    cfg.order = 3;
    CHECK_STATUS(t, igt_builder_new(&cfg, &b, &err), OLIF_ERR_ARG, &err, "unknown order");
    igt_config_init(&cfg, 10);
    cfg.order = IGT_ORDER_EXPLICIT;
    cfg.permutation[0] = 1;     /* 1,1,2,3 */
    CHECK_STATUS(t, igt_builder_new(&cfg, &b, &err), OLIF_ERR_ARG, &err, "duplicate in permutation");
    cfg.permutation[0] = 4;     /* 4,1,2,3 with window 4 */
    CHECK_STATUS(t, igt_builder_new(&cfg, &b, &err), OLIF_ERR_ARG, &err, "permutation entry >= window");
    igt_config_init(&cfg, 10);
    memset(cfg.tokenizer_name, 'x', sizeof cfg.tokenizer_name);
    CHECK_STATUS(t, igt_builder_new(&cfg, &b, &err), OLIF_ERR_ARG, &err, "unterminated tokenizer name");
    CHECK_STATUS(t, igt_builder_new(NULL, &b, &err), OLIF_ERR_ARG, &err, "NULL config");
    igt_config_init(&cfg, 10);
    CHECK_STATUS(t, igt_builder_new(&cfg, NULL, &err), OLIF_ERR_ARG, &err, "NULL out");
    cfg.window = 0;
    CHECK_STATUS(t, igt_builder_new(&cfg, &b, NULL), OLIF_ERR_ARG, NULL, "NULL err is allowed");
}

static int cancel_at_sorting(void *user, const char *phase, uint64_t done, uint64_t total) {
    int *calls = user;
    (*calls)++;
    (void)done;
    (void)total;
    return strcmp(phase, "sorting") == 0;
}

static int count_progress(void *user, const char *phase, uint64_t done, uint64_t total) {
    int *calls = user;
    (*calls)++;
    return phase == NULL || done > total;   /* never cancels a sane report */
}

static void test_builder_errors(T *t) {
    const uint32_t V = 10, F = 3, W = F + 1;
    igt_config cfg;
    igt_config_init(&cfg, V);
    cfg.window = F;
    igt_builder *b = NULL;
    igt_model *m = NULL;
    igt_error err;
    CHECK_STATUS(t, igt_builder_new(&cfg, &b, &err), OLIF_OK, &err, "builder_new");

    /* empty */
    m = (igt_model *)(uintptr_t)1;
    CHECK_STATUS(t, igt_builder_build(b, &m, NULL, NULL, &err), OLIF_ERR_EMPTY, &err, "empty builder");
    CHECK(t, m == NULL, "out must be NULL after a failed build");
    CHECK_STATUS(t, igt_builder_add_instances(b, NULL, 0, &err), OLIF_OK, &err, "zero instances, NULL rows");
    CHECK_STATUS(t, igt_builder_add_documents(b, NULL, 0, NULL, 0, &err), OLIF_OK, &err, "zero documents");
    CHECK_STATUS(t, igt_builder_add_document(b, NULL, 0, &err), OLIF_OK, &err, "empty document");
    const uint64_t empty_starts[3] = {0, 0, 0};
    CHECK_STATUS(t, igt_builder_add_documents(b, NULL, 0, empty_starts, 3, &err), OLIF_OK, &err,
                 "three empty documents");
    CHECK(t, igt_builder_count(b) == 0, "nothing added yet");
    CHECK_STATUS(t, igt_builder_build(b, &m, NULL, NULL, &err), OLIF_ERR_EMPTY, &err,
                 "still empty after empty additions");

    /* out-of-range ids are refused and nothing is appended */
    uint32_t row[4] = {1, 2, 3, 4};
    row[1] = V + 1;
    CHECK_STATUS(t, igt_builder_add_instances(b, row, 1, &err), OLIF_ERR_ARG, &err, "feature id > vocab");
    row[1] = UINT32_MAX;
    CHECK_STATUS(t, igt_builder_add_instances(b, row, 1, &err), OLIF_ERR_ARG, &err, "feature id UINT32_MAX");
    row[1] = 2;
    row[F] = V;
    CHECK_STATUS(t, igt_builder_add_instances(b, row, 1, &err), OLIF_ERR_ARG, &err, "class id == padding");
    row[F] = UINT32_MAX;
    CHECK_STATUS(t, igt_builder_add_instances(b, row, 1, &err), OLIF_ERR_ARG, &err, "class id UINT32_MAX");
    CHECK_STATUS(t, igt_builder_add_instances(b, NULL, 1, &err), OLIF_ERR_ARG, &err, "NULL rows");
    CHECK_STATUS(t, igt_builder_add_instances(NULL, row, 1, &err), OLIF_ERR_ARG, &err, "NULL builder");
    uint32_t two[8] = {1, 2, 3, 4, 1, 2, 3, V};  /* second row bad: nothing of the call added */
    CHECK_STATUS(t, igt_builder_add_instances(b, two, 2, &err), OLIF_ERR_ARG, &err, "bad second row");
    CHECK(t, igt_builder_count(b) == 0, "failed additions must not append (count %llu)",
          (unsigned long long)igt_builder_count(b));

    uint32_t toks[6] = {1, 2, 3, 4, 5, 6};
    uint64_t starts[3] = {0, 2, 4};
    toks[3] = V;
    CHECK_STATUS(t, igt_builder_add_documents(b, toks, 6, starts, 3, &err), OLIF_ERR_ARG, &err,
                 "document token == padding");
    toks[3] = 4;
    starts[0] = 1;
    CHECK_STATUS(t, igt_builder_add_documents(b, toks, 6, starts, 3, &err), OLIF_ERR_ARG, &err,
                 "doc_starts[0] != 0");
    starts[0] = 0;
    starts[1] = 5;
    CHECK_STATUS(t, igt_builder_add_documents(b, toks, 6, starts, 3, &err), OLIF_ERR_ARG, &err,
                 "doc_starts out of order");
    starts[1] = 2;
    starts[2] = 7;
    CHECK_STATUS(t, igt_builder_add_documents(b, toks, 6, starts, 3, &err), OLIF_ERR_ARG, &err,
                 "doc_starts beyond the tokens");
    starts[2] = 4;
    CHECK_STATUS(t, igt_builder_add_documents(b, toks, 6, starts, 0, &err), OLIF_ERR_ARG, &err,
                 "tokens without documents");
    CHECK_STATUS(t, igt_builder_add_documents(b, toks, 6, NULL, 3, &err), OLIF_ERR_ARG, &err,
                 "NULL doc_starts");
    CHECK_STATUS(t, igt_builder_add_documents(b, NULL, 6, starts, 3, &err), OLIF_ERR_ARG, &err,
                 "NULL tokens");
    CHECK_STATUS(t, igt_builder_add_document(NULL, toks, 6, &err), OLIF_ERR_ARG, &err,
                 "NULL builder (document)");
    CHECK(t, igt_builder_count(b) == 0, "failed additions must not append");

    /* padding as a feature is fine; then build, then everything else fails */
    uint32_t ok_rows[8] = {V, V, 1, 2, 1, 2, 3, 4};
    CHECK_STATUS(t, igt_builder_add_instances(b, ok_rows, 2, &err), OLIF_OK, &err, "padding feature");
    CHECK_STATUS(t, igt_builder_add_documents(b, toks, 6, starts, 3, &err), OLIF_OK, &err, "documents");
    CHECK(t, igt_builder_count(b) == 8, "count %llu, want 8", (unsigned long long)igt_builder_count(b));
    CHECK_STATUS(t, igt_builder_build(b, NULL, NULL, NULL, &err), OLIF_ERR_ARG, &err, "NULL out");
    int calls = 0;
    CHECK_STATUS(t, igt_builder_build(b, &m, count_progress, &calls, &err), OLIF_OK, &err, "build");
    CHECK(t, calls > 0, "progress was never called");
    CHECK(t, m != NULL, "no model");
    igt_model *again = (igt_model *)(uintptr_t)1;
    CHECK_ERROR(t, igt_builder_build(b, &again, NULL, NULL, &err), &err, "building twice");
    CHECK(t, again == NULL, "out must be NULL after building twice");
    CHECK_ERROR(t, igt_builder_add_instances(b, ok_rows, 1, &err), &err, "add after build");
    CHECK_ERROR(t, igt_builder_add_documents(b, toks, 6, starts, 3, &err), &err,
                "add documents after build");
    igt_info info;
    igt_get_info(m, &info);
    CHECK(t, info.n_instances == 8 && info.window == F && info.vocab_size == V &&
             info.padding_id == V && info.format_version == IGT_FORMAT_VERSION,
          "info of the built model");
    igt_free(m);
    igt_builder_free(b);
    (void)W;

    /* cancellation */
    CHECK_STATUS(t, igt_builder_new(&cfg, &b, &err), OLIF_OK, &err, "builder_new");
    CHECK_STATUS(t, igt_builder_add_instances(b, ok_rows, 2, &err), OLIF_OK, &err, "add");
    calls = 0;
    m = (igt_model *)(uintptr_t)1;
    CHECK_STATUS(t, igt_builder_build(b, &m, cancel_at_sorting, &calls, &err), OLIF_ERR_CANCELLED,
                 &err, "cancelled build");
    CHECK(t, m == NULL && calls > 0, "cancelled build leaves no model");
    CHECK_ERROR(t, igt_builder_build(b, &m, NULL, NULL, &err), &err, "build after a cancelled build");
    igt_builder_free(b);
    igt_builder_free(NULL);
    igt_free(NULL);
}

/* ---- tests: queries ------------------------------------------------------------- */

typedef struct { const uint32_t *row; uint32_t F; } row_ref;

static int cmp_rows(const void *pa, const void *pb) {
    const row_ref *a = pa, *b = pb;
    for (uint32_t j = 0; j <= a->F; j++)
        if (a->row[j] != b->row[j]) return a->row[j] < b->row[j] ? -1 : 1;
    return 0;
}

/* Each group of training rows with one context: its answer is one of the
 * group's classes (the class, for a group of one class); a full match holds
 * exactly the group's counts; the node's stored classes agree with the answer;
 * a longer context answers the same. */
static void check_training_groups(T *t, igt_model *m, const uint32_t *rows, uint32_t F,
                                  uint32_t V, size_t N) {
    row_ref *refs = malloc(N * sizeof *refs);
    for (size_t i = 0; i < N; i++) refs[i] = (row_ref){rows + i * (F + 1), F};
    qsort(refs, N, sizeof *refs, cmp_rows);
    size_t deterministic = 0, full_depth = 0, groups = 0;
    uint32_t seen_class[64];
    for (size_t i = 0; i < N;) {
        size_t e = i + 1;
        while (e < N && memcmp(refs[e].row, refs[i].row, F * sizeof(uint32_t)) == 0) e++;
        groups++;
        memset(seen_class, 0, sizeof seen_class);
        for (size_t k = i; k < e; k++) seen_class[refs[k].row[F]]++;
        int one_class = refs[i].row[F] == refs[e - 1].row[F];
        igt_answer a;
        igt_predict(m, refs[i].row, F, &a);
        CHECK(t, a.token < V && seen_class[a.token] > 0,
              "context %u %u %u %u: predicted %u, not one of its training classes",
              refs[i].row[0], refs[i].row[1], refs[i].row[2], refs[i].row[3], a.token);
        CHECK(t, a.total >= e - i && a.winner_count <= a.total && a.winner_count > 0,
              "counts %u/%u for a context seen %zu times", a.winner_count, a.total, e - i);
        if (one_class) {
            deterministic++;
            CHECK(t, a.token == refs[i].row[F],
                  "deterministic context %u %u %u %u (x%zu): predicted %u, trained %u",
                  refs[i].row[0], refs[i].row[1], refs[i].row[2], refs[i].row[3], e - i,
                  a.token, refs[i].row[F]);
        }
        if (a.depth == F) {
            full_depth++;
            CHECK(t, a.total == e - i && a.distance == 0.0 && a.leaf == 1,
                  "full match: total %u (want %zu), distance %g, leaf %u", a.total, e - i,
                  a.distance, a.leaf);
            uint32_t cls[64], cnt[64];
            size_t nc = igt_node_classes(m, a.node, cls, cnt, 64);
            size_t distinct = 0;
            for (uint32_t c = 0; c < V; c++) distinct += seen_class[c] > 0;
            CHECK(t, nc == distinct, "node stores %zu classes, context has %zu", nc, distinct);
            for (size_t k = 0; k < nc && k < 64; k++)
                CHECK(t, cls[k] < V && cnt[k] == seen_class[cls[k]],
                      "node class %u count %u, trained %u", cls[k], cnt[k],
                      cls[k] < V ? seen_class[cls[k]] : 0);
        }
        /* the stored distribution agrees with the winner summary */
        uint32_t cls[64], cnt[64];
        size_t nc = igt_node_classes(m, a.node, cls, cnt, 64);
        uint64_t sum = 0;
        for (size_t k = 0; k < nc && k < 64; k++) {
            sum += cnt[k];
            if (k) CHECK(t, cnt[k] <= cnt[k - 1], "classes not best first");
        }
        CHECK(t, nc > 0 && nc <= 64 && cls[0] == a.token && cnt[0] == a.winner_count &&
                 sum == a.total,
              "node %u: %zu classes, first %u:%u, sum %llu; answer %u %u/%u", a.node, nc,
              cls[0], cnt[0], (unsigned long long)sum, a.token, a.winner_count, a.total);
        /* only the last window ids count; a longer context changes nothing */
        uint32_t longer[IGT_MAX_WINDOW + 3] = {7, 8, 9};
        memcpy(longer + 3, refs[i].row, F * sizeof *longer);
        igt_answer b;
        igt_predict(m, longer, F + 3, &b);
        CHECK(t, same_answer(&a, &b), "a longer context changed the answer");
        i = e;
    }
    CHECK(t, deterministic > 100 && deterministic < groups && full_depth > 50,
          "test data too easy or too hard: %zu groups, %zu deterministic, %zu full-depth",
          groups, deterministic, full_depth);
    free(refs);
}

/* Group the training rows by context: a context whose instances all have one
 * class must predict it; any context predicts one of its classes; where the
 * full path matched, the node holds exactly the group's class counts. */
static void test_predict_training_contexts(T *t) {
    const uint32_t F = 4, V = 40;
    const size_t N = 1500;
    uint32_t *rows = NULL;
    igt_model *m = random_model(t, 11, F, V, N, IGT_TOPK_ALL, &rows);
    if (!m) { free(rows); return; }
    igt_info info;
    igt_get_info(m, &info);
    CHECK(t, info.n_instances == N && info.window == F && info.top_k == IGT_TOPK_ALL &&
             info.memory_mapped == 0 && strcmp(info.tokenizer_name, "test-tokenizer") == 0 &&
             info.tokenizer_digest[3] == 21,
          "info of a built model");

    check_training_groups(t, m, rows, F, V, N);

    /* a shorter context is left-padded */
    for (size_t i = 0; i < 200; i++) {
        const uint32_t *r = rows + i * (F + 1);
        uint32_t padded[IGT_MAX_WINDOW];
        for (uint32_t cut = 0; cut <= F; cut++) {
            for (uint32_t j = 0; j < F; j++) padded[j] = j < cut ? V : r[j];
            igt_answer a, b;
            igt_predict(m, r + cut, F - cut, &a);
            igt_predict(m, padded, F, &b);
            CHECK(t, same_answer(&a, &b), "context of %u ids vs padded window", F - cut);
        }
    }

    /* nothing matches: the root answers */
    uint32_t unseen[IGT_MAX_WINDOW];
    for (uint32_t j = 0; j < F; j++) unseen[j] = V + 100 + j;
    igt_answer root;
    igt_predict(m, unseen, F, &root);
    double all_weights = 0.0;
    for (uint32_t d = 0; d < F; d++) all_weights += info.gain_ratio[info.permutation[d]];
    CHECK(t, root.depth == 0 && root.node == 0 && root.leaf == 0 &&
             root.token == info.default_class && root.total == N &&
             fabs(root.distance - all_weights) < 1e-12,
          "root answer: depth %u node %u token %u (default %u) total %u distance %g (want %g)",
          root.depth, root.node, root.token, info.default_class, root.total, root.distance,
          all_weights);

    /* distance = weights of the unmatched levels; batch = single queries */
    rng_t r = rng_seed(12);
    uint32_t batch[64 * 4];
    igt_answer out[64];
    for (int i = 0; i < 64 * 4; i++) batch[i] = query_id(&r, V);
    for (int i = 0; i < 32; i++)
        memcpy(batch + i * F, rows + rng_below(&r, (uint32_t)N) * (F + 1), F * sizeof *batch);
    for (uint32_t j = 0; j < F; j++) batch[63 * F + j] = V + 1 + j;    /* matches nothing */
    igt_predict_batch(m, batch, 64, out);
    int depths_seen = 0;
    for (int i = 0; i < 64; i++) {
        igt_answer one;
        igt_predict(m, batch + i * F, F, &one);
        CHECK(t, same_answer(&one, &out[i]), "batch answer %d differs from a single query", i);
        double w = 0.0;
        for (uint32_t d = out[i].depth; d < F; d++) w += info.gain_ratio[info.permutation[d]];
        CHECK(t, fabs(out[i].distance - w) < 1e-12, "distance %g at depth %u, want %g",
              out[i].distance, out[i].depth, w);
        depths_seen |= 1 << out[i].depth;
    }
    CHECK(t, depths_seen & 1 && depths_seen & (1 << F), "queries should hit depth 0 and full depth");
    igt_predict_batch(m, NULL, 0, NULL);

    /* node_classes edge cases */
    uint32_t cls[4] = {77, 77, 77, 77}, cnt[4] = {77, 77, 77, 77};
    size_t total_classes = igt_node_classes(m, 0, NULL, NULL, 0);
    CHECK(t, total_classes == info.n_classes, "root stores %zu classes, model has %llu",
          total_classes, (unsigned long long)info.n_classes);
    size_t got = igt_node_classes(m, 0, cls, cnt, 2);
    CHECK(t, got == total_classes && cls[2] == 77 && cnt[2] == 77 && cls[0] == info.default_class,
          "max is respected");
    CHECK(t, igt_node_classes(m, (uint32_t)info.n_nodes + 1, cls, cnt, 4) == 0, "node out of range");
    CHECK(t, igt_node_classes(m, UINT32_MAX, cls, cnt, 4) == 0, "node UINT32_MAX");
    CHECK(t, igt_node_classes(NULL, 0, cls, cnt, 4) == 0, "NULL model");
    igt_free(m);
    free(rows);
}

static void test_top_k(T *t) {
    const uint32_t F = 4, V = 30;
    const size_t N = 800;
    uint32_t *rows = NULL;
    igt_model *all = random_model(t, 21, F, V, N, IGT_TOPK_ALL, &rows);
    igt_model *none = random_model(t, 21, F, V, N, 0, NULL);
    igt_model *two = random_model(t, 21, F, V, N, 2, NULL);
    if (!all || !none || !two) goto out;
    igt_info ia, in, i2;
    igt_get_info(all, &ia);
    igt_get_info(none, &in);
    igt_get_info(two, &i2);
    CHECK(t, ia.n_nodes == in.n_nodes && ia.n_nodes == i2.n_nodes, "top_k changes the tree");
    CHECK(t, in.n_dist_entries == 0 && i2.n_dist_entries > 0 &&
             i2.n_dist_entries <= 2 * (i2.n_nodes + 1) && ia.n_dist_entries >= i2.n_dist_entries,
          "stored class counts: none %llu, two %llu, all %llu",
          (unsigned long long)in.n_dist_entries, (unsigned long long)i2.n_dist_entries,
          (unsigned long long)ia.n_dist_entries);
    rng_t r = rng_seed(22);
    for (int q = 0; q < 400; q++) {
        uint32_t ctx[IGT_MAX_WINDOW];
        memcpy(ctx, rows + rng_below(&r, (uint32_t)N) * (F + 1), F * sizeof *ctx);
        if (q & 1) ctx[rng_below(&r, F)] = query_id(&r, V);
        igt_answer a, b, c;
        igt_predict(all, ctx, F, &a);
        igt_predict(none, ctx, F, &b);
        igt_predict(two, ctx, F, &c);
        CHECK(t, same_answer(&a, &b) && same_answer(&a, &c), "answers depend on top_k");
        uint32_t ca[64], na[64], c2[4], n2[4];
        size_t ka = igt_node_classes(all, a.node, ca, na, 64);
        size_t k2 = igt_node_classes(two, c.node, c2, n2, 4);
        CHECK(t, igt_node_classes(none, b.node, ca, na, 64) == 0, "top_k 0 stores classes");
        CHECK(t, k2 == (ka < 2 ? ka : 2), "top-2 node stores %zu of %zu", k2, ka);
        for (size_t i = 0; i < k2 && i < ka; i++)
            CHECK(t, c2[i] == ca[i] && n2[i] == na[i], "top-2 is not the prefix of all");
    }
out:
    igt_free(all);
    igt_free(none);
    igt_free(two);
    free(rows);
}

/* Draft = repeated predict on the growing context; thresholds stop early. */
static void test_draft(T *t) {
    const uint32_t F = 4, V = 30;
    const size_t N = 1200;
    uint32_t *rows = NULL;
    igt_model *m = random_model(t, 31, F, V, N, 0, &rows);
    if (!m) { free(rows); return; }
    rng_t r = rng_seed(32);
    int stopped_depth = 0, stopped_share = 0;
    for (int q = 0; q < 300; q++) {
        uint32_t ctx[IGT_MAX_WINDOW + 16];
        size_t n = rng_below(&r, F + 2);
        for (size_t i = 0; i < n; i++) ctx[i] = query_id(&r, V);
        if (n >= F && (q & 1)) memcpy(ctx + n - F, rows + rng_below(&r, (uint32_t)N) * (F + 1), F * 4);
        /* simulate 10 steps */
        uint32_t grow[IGT_MAX_WINDOW + 16];
        memcpy(grow, ctx, n * sizeof *grow);
        igt_answer sim[10];
        for (size_t i = 0; i < 10; i++) {
            igt_predict(m, grow, n + i, &sim[i]);
            grow[n + i] = sim[i].token;
        }
        uint32_t toks[12];
        igt_answer ans[12];
        for (int i = 0; i < 12; i++) toks[i] = 0xdeadbeef;
        size_t got = igt_draft(m, ctx, n, 10, 0, 0.0, toks, ans);
        CHECK(t, got == 10, "unthresholded draft made %zu of 10", got);
        for (size_t i = 0; i < got && i < 10; i++)
            CHECK(t, toks[i] == sim[i].token && same_answer(&ans[i], &sim[i]),
                  "draft step %zu: %u, predict says %u", i, toks[i], sim[i].token);
        CHECK(t, toks[10] == 0xdeadbeef, "draft wrote past k");
        uint32_t toks2[12];
        CHECK(t, igt_draft(m, ctx, n, 10, 0, 0.0, toks2, NULL) == 10 &&
                 memcmp(toks, toks2, 10 * sizeof *toks) == 0,
              "draft without answers differs");
        CHECK(t, igt_draft(m, ctx, n, 0, 0, 0.0, NULL, NULL) == 0, "k = 0");
        for (uint32_t md = 0; md <= F + 1; md++) {
            size_t want = 0;
            while (want < 10 && sim[want].depth >= md) want++;
            got = igt_draft(m, ctx, n, 10, md, 0.0, toks, NULL);
            CHECK(t, got == want, "min_depth %u: drafted %zu, want %zu", md, got, want);
            stopped_depth += want < 10;
        }
        const double shares[] = {0.0, 0.3, 0.6, 1.0, 1.01};
        for (int s = 0; s < 5; s++) {
            size_t want = 0;
            while (want < 10 && !(shares[s] > 0.0 &&
                                  (double)sim[want].winner_count < shares[s] * (double)sim[want].total))
                want++;
            got = igt_draft(m, ctx, n, 10, 0, shares[s], toks, NULL);
            CHECK(t, got == want, "min_share %g: drafted %zu, want %zu", shares[s], got, want);
            stopped_share += want > 0 && want < 10;
        }
        CHECK(t, igt_draft(m, ctx, n, 10, F + 1, 0.0, toks, NULL) == 0, "min_depth > window");
        CHECK(t, igt_draft(m, ctx, n, 10, 0, 1.5, toks, NULL) == 0, "min_share > 1");
    }
    CHECK(t, stopped_depth > 0 && stopped_share > 0, "thresholds never stopped a draft early");
    igt_free(m);
    free(rows);
}

/* Documents: same model as the equivalent padded instances; a repeated cycle
 * is drafted exactly. */
static void test_documents(T *t) {
    const uint32_t F = 4, V = 30, FIRST = 3;
    enum { DOCS = 12 };
    rng_t r = rng_seed(41);
    uint32_t tokens[DOCS * 80];
    uint64_t starts[DOCS];
    size_t n = 0;
    for (size_t d = 0; d < DOCS; d++) {
        starts[d] = n;
        if (d == 0) {                       /* the cycle 0..9, six times */
            tokens[n++] = FIRST;
            for (uint32_t i = 0; i < 60; i++) tokens[n++] = i % 10;
            continue;
        }
        size_t len = (d == 4 || d == 9) ? 0 : 1 + rng_below(&r, 60);  /* two empty documents */
        for (size_t i = 0; i < len; i++) tokens[n++] = i == 0 ? FIRST : 10 + rng_below(&r, V - 10);
    }
    igt_config cfg;
    igt_config_init(&cfg, V);
    cfg.window = F;
    igt_error err;
    igt_builder *b1, *b2, *b3, *b4;
    igt_model *m[4] = {NULL, NULL, NULL, NULL};
    igt_builder_new(&cfg, &b1, &err);
    igt_builder_new(&cfg, &b2, &err);
    igt_builder_new(&cfg, &b3, &err);
    CHECK_STATUS(t, igt_builder_new(&cfg, &b4, &err), OLIF_OK, &err, "builder_new");
    CHECK_STATUS(t, igt_builder_add_documents(b1, tokens, n, starts, DOCS, &err), OLIF_OK, &err,
                 "add_documents");
    CHECK(t, igt_builder_count(b1) == n, "one instance per token: %llu of %zu",
          (unsigned long long)igt_builder_count(b1), n);
    /* the same as padded instances */
    uint32_t *rows = malloc(n * (F + 1) * sizeof *rows);
    for (size_t d = 0, at = 0; d < DOCS; d++) {
        size_t s = starts[d], e = d + 1 < DOCS ? starts[d + 1] : n;
        for (size_t i = s; i < e; i++, at++) {
            for (uint32_t j = 0; j < F; j++)
                rows[at * (F + 1) + j] = i - s >= F - j ? tokens[i - (F - j)] : V;
            rows[at * (F + 1) + F] = tokens[i];
        }
    }
    CHECK_STATUS(t, igt_builder_add_instances(b2, rows, n, &err), OLIF_OK, &err, "add_instances");
    /* one document at a time */
    for (size_t d = 0; d < DOCS; d++) {
        size_t s = starts[d], e = d + 1 < DOCS ? starts[d + 1] : n;
        CHECK_STATUS(t, igt_builder_add_document(b3, tokens + s, e - s, &err), OLIF_OK, &err,
                     "add_document");
    }
    /* two calls split at a document boundary */
    uint64_t rest[DOCS];
    for (size_t d = 5; d < DOCS; d++) rest[d - 5] = starts[d] - starts[5];
    CHECK_STATUS(t, igt_builder_add_documents(b4, tokens, starts[5], starts, 5, &err), OLIF_OK,
                 &err, "add_documents, first part");
    CHECK_STATUS(t, igt_builder_add_documents(b4, tokens + starts[5], n - starts[5], rest,
                                              DOCS - 5, &err),
                 OLIF_OK, &err, "add_documents, second part");
    igt_builder *bs[4] = {b1, b2, b3, b4};
    for (int i = 0; i < 4; i++) {
        CHECK_STATUS(t, igt_builder_build(bs[i], &m[i], NULL, NULL, &err), OLIF_OK, &err, "build");
        igt_builder_free(bs[i]);
    }
    if (!m[0] || !m[1] || !m[2] || !m[3]) goto out;
    size_t s0 = 0;
    uint8_t *img0 = model_bytes(t, m[0], &s0);
    for (int i = 1; i < 4; i++) {
        size_t si = 0;
        uint8_t *img = model_bytes(t, m[i], &si);
        CHECK(t, img && img0 && si == s0 && memcmp(img, img0, s0) == 0,
              "model %d from the same instances differs from the add_documents model", i);
        free(img);
    }
    free(img0);

    /* a document start predicts the first token; context prefixes = rows */
    igt_answer a, b;
    igt_predict(m[0], NULL, 0, &a);
    CHECK(t, a.token == FIRST, "document start predicts %u, want %u", a.token, FIRST);
    for (size_t d = 0, at = 0; d < DOCS; d++) {
        size_t s = starts[d], e = d + 1 < DOCS ? starts[d + 1] : n;
        for (size_t i = s; i < e; i++, at++) {
            igt_predict(m[0], tokens + s, i - s, &a);
            igt_predict_batch(m[0], rows + at * (F + 1), 1, &b);
            CHECK(t, same_answer(&a, &b), "document %zu position %zu: prefix vs padded row", d, i - s);
        }
    }
    /* the cycle: every full window of it is unique and deterministic */
    uint32_t ctx[4] = {0, 1, 2, 3}, toks[12];
    igt_answer ans[12];
    size_t got = igt_draft(m[0], ctx, 4, 12, 1, 0.0, toks, ans);
    CHECK(t, got == 12, "cycle drafted %zu of 12", got);
    for (size_t i = 0; i < got && i < 12; i++)
        CHECK(t, toks[i] == (4 + i) % 10 && ans[i].depth >= 1, "cycle step %zu: %u (depth %u), want %zu",
              i, toks[i], ans[i].depth, (4 + i) % 10);
out:
    for (int i = 0; i < 4; i++) igt_free(m[i]);
    free(rows);
}

static void test_orders_and_windows(T *t) {
    const uint32_t V = 12;
    const uint32_t perm[4] = {2, 0, 3, 1};
    rng_t r = rng_seed(51);
    uint32_t *rows = random_instances(&r, 4, V, 600);
    igt_model *ex = build_from_rows(t, 4, V, 0, IGT_ORDER_EXPLICIT, perm, rows, 600);
    igt_model *gr = build_from_rows(t, 4, V, 0, IGT_ORDER_GAIN_RATIO, NULL, rows, 600);
    igt_model *ig = build_from_rows(t, 4, V, 0, IGT_ORDER_INFO_GAIN, NULL, rows, 600);
    if (ex && gr && ig) {
        igt_info ie, ir, ii;
        igt_get_info(ex, &ie);
        igt_get_info(gr, &ir);
        igt_get_info(ig, &ii);
        CHECK(t, ie.order == IGT_ORDER_EXPLICIT && memcmp(ie.permutation, perm, sizeof perm) == 0,
              "explicit permutation not kept");
        for (uint32_t d = 0; d + 1 < 4; d++) {
            double a = ir.gain_ratio[ir.permutation[d]], b = ir.gain_ratio[ir.permutation[d + 1]];
            CHECK(t, a > b || (a == b && ir.permutation[d] < ir.permutation[d + 1]),
                  "gain-ratio order is not by descending weight, leftmost first");
            a = ii.info_gain[ii.permutation[d]];
            b = ii.info_gain[ii.permutation[d + 1]];
            CHECK(t, a > b || (a == b && ii.permutation[d] < ii.permutation[d + 1]),
                  "info-gain order is not by descending weight, leftmost first");
        }
        for (uint32_t j = 0; j < 4; j++)
            CHECK(t, ir.gain_ratio[j] >= 0.0 && ir.info_gain[j] >= 0.0 &&
                     ir.gain_ratio[j] == ie.gain_ratio[j],
                  "weights of position %u", j);
        /* info-gain distance uses info-gain weights */
        uint32_t unseen[4] = {V + 1, V + 2, V + 3, V + 4};
        igt_answer a;
        igt_predict(ig, unseen, 4, &a);
        double w = ii.info_gain[0] + ii.info_gain[1] + ii.info_gain[2] + ii.info_gain[3];
        CHECK(t, fabs(a.distance - w) < 1e-12, "info-gain root distance %g, want %g", a.distance, w);
    }
    igt_free(ex);
    igt_free(gr);
    igt_free(ig);
    free(rows);

    /* window 1 and the maximum window; vocabulary of one */
    const uint32_t windows[2] = {1, IGT_MAX_WINDOW};
    for (int i = 0; i < 2; i++) {
        uint32_t *wrows = NULL;
        igt_model *m = random_model(t, 52 + (uint64_t)i, windows[i], 8, 700, 3, &wrows);
        if (m) {
            size_t size = 0;
            uint8_t *img = model_bytes(t, m, &size);
            igt_model *back = NULL;
            igt_error err;
            CHECK_STATUS(t, igt_load_buffer(img, size, 0, &back, &err), OLIF_OK, &err, "reload");
            if (back)
                CHECK(t, compare_models(m, back, 53, 300, wrows, 700) == 0,
                      "window %u: reloaded model answers differently", windows[i]);
            igt_free(back);
            free(img);
            /* a deterministic training context */
            igt_answer a;
            igt_predict(m, wrows, windows[i], &a);
            CHECK(t, a.depth <= windows[i] && a.token < 8, "window %u answer", windows[i]);
        }
        igt_free(m);
        free(wrows);
    }
    uint32_t one[6] = {0, 1, 0, 1, 1, 0};   /* window 2, vocab 1: features 0 or padding */
    igt_model *m = build_from_rows(t, 2, 1, IGT_TOPK_ALL, IGT_ORDER_GAIN_RATIO, NULL, one, 2);
    if (m) {
        igt_answer a;
        uint32_t q[2] = {5, 0};
        igt_predict(m, q, 2, &a);
        CHECK(t, a.token == 0, "vocabulary of one predicts %u", a.token);
        igt_info info;
        igt_get_info(m, &info);
        CHECK(t, info.n_classes == 1 && info.n_nodes == 0, "vocab 1: %llu classes, %llu nodes",
              (unsigned long long)info.n_classes, (unsigned long long)info.n_nodes);
        uint32_t toks[5];
        CHECK(t, igt_draft(m, q, 2, 5, 0, 1.0, toks, NULL) == 5, "draft in a one-class model");
    }
    igt_free(m);
}

/* ---- tests: files ----------------------------------------------------------------- */

/* Version 1, as igt_save_version(..., 1) writes it. */
static void test_file_layout(T *t) {
    igt_model *m = random_model(t, 61, 5, 20, 400, 4, NULL);
    if (!m) return;
    size_t size = 0;
    uint8_t *img = model_bytes_v(t, m, 1, &size);
    igt_info info;
    igt_get_info(m, &info);
    if (!img) { igt_free(m); return; }
    CHECK(t, size >= HEADER_SIZE && size % 64 == 0 && size == get64(img, OFF_FILE_SIZE),
          "version-1 file of %zu bytes", size);
    CHECK(t, memcmp(img, "OLIFIGT", 8) == 0, "magic");
    CHECK(t, get32(img, OFF_VERSION) == 1 && get32(img, OFF_HSIZE) == HEADER_SIZE &&
             get32(img, OFF_ENDIAN) == 0x01020304u && get32(img, OFF_WINDOW) == 5 &&
             get32(img, OFF_VOCAB) == 20 && get32(img, OFF_PADDING) == 20 &&
             get32(img, OFF_ORDER) == info.order && get32(img, OFF_TOPK) == 4 &&
             get32(img, OFF_DEFAULT) == info.default_class &&
             get32(img, OFF_PERM) == info.permutation[0] &&
             get64(img, OFF_N_INSTANCES) == 400 && get64(img, OFF_N_NODES) == info.n_nodes + 1 &&
             get64(img, OFF_N_PAIRS) == info.n_dist_entries &&
             get64(img, OFF_N_CLASSES) == info.n_classes && get64(img, OFF_FILE_SIZE) == size &&
             section(img, SEC_KEY) == HEADER_SIZE &&
             strcmp((const char *)img + OFF_TOKENIZER, "test-tokenizer") == 0,
          "header layout differs from the one mirrored here (update the OFF_* constants)");
    double g;
    memcpy(&g, img + OFF_GAIN_RATIO + 8, 8);
    CHECK(t, g == info.gain_ratio[1], "gain ratio offset");
    memcpy(&g, img + OFF_INFO_GAIN + 8, 8);
    CHECK(t, g == info.info_gain[1], "info gain offset");
    uint8_t *copy = dup_bytes(img, size);
    reseal(copy, size);
    CHECK(t, memcmp(copy, img, size) == 0,
          "re-sealing an intact file changed it: the checksum mirrored here is out of date");
    /* child index: root's children start at 1, the end entry is n_nodes */
    uint32_t n = (uint32_t)(info.n_nodes + 1);
    size_t child = section(img, SEC_CHILD);
    CHECK(t, get32(img, child) == 1 && get32(img, child + 4 * (size_t)n) == n, "child section");
    free(copy);
    free(img);
    igt_free(m);
}

static void test_save_load_roundtrip(T *t) {
    const uint32_t F = 4, V = 40;
    const size_t N = 1500;
    uint32_t *rows = NULL;
    igt_model *m = random_model(t, 71, F, V, N, 3, &rows);
    if (!m) { free(rows); return; }
    char path[1024], tmp[1100], again[1024];
    path_in(t, path, sizeof path, "roundtrip.olif");
    path_in(t, again, sizeof again, "roundtrip2.olif");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    igt_error err;
    CHECK_STATUS(t, igt_save(m, path, &err), OLIF_OK, &err, "save");
    struct stat st;
    CHECK(t, stat(tmp, &st) != 0, "%s left behind", tmp);
    CHECK(t, stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "saved with mode %o, want 0600",
          (unsigned)(st.st_mode & 0777));
    size_t size = 0;
    uint8_t *img = read_file(path, &size);
    igt_info info;
    igt_get_info(m, &info);
    CHECK(t, img && size == info.file_size, "saved %zu bytes, info says %llu", size,
          (unsigned long long)info.file_size);

    igt_model *mapped = NULL, *buffered = NULL, *unchecked = NULL;
    CHECK_STATUS(t, igt_load(path, 0, &mapped, &err), OLIF_OK, &err, "igt_load");
    CHECK_STATUS(t, igt_load_buffer(img, size, 0, &buffered, &err), OLIF_OK, &err, "igt_load_buffer");
    CHECK_STATUS(t, igt_load(path, IGT_LOAD_SKIP_CHECKSUM, &unchecked, &err), OLIF_OK, &err,
                 "igt_load without checksums");
    if (mapped && buffered && unchecked) {
        igt_info im, ib;
        igt_get_info(mapped, &im);
        igt_get_info(buffered, &ib);
        CHECK(t, im.memory_mapped == 0 && ib.memory_mapped == 0, "memory_mapped flags %d %d",
              im.memory_mapped, ib.memory_mapped);
        CHECK(t, same_info(&info, &im) && same_info(&info, &ib), "info differs after loading");
        CHECK(t, compare_models(m, mapped, 72, 3000, rows, N) == 0, "mapped model answers differently");
        CHECK(t, compare_models(m, buffered, 73, 3000, rows, N) == 0, "buffered model answers differently");
        CHECK(t, compare_models(m, unchecked, 74, 500, rows, N) == 0, "unchecked model answers differently");
        for (uint32_t node = 0; node <= info.n_nodes + 1; node++) {
            uint32_t c1[4], n1[4], c2[4], n2[4];
            size_t k1 = igt_node_classes(m, node, c1, n1, 4);
            size_t k2 = igt_node_classes(mapped, node, c2, n2, 4);
            CHECK(t, k1 == k2 && k1 <= 3 && memcmp(c1, c2, k1 * 4) == 0 && memcmp(n1, n2, k1 * 4) == 0,
                  "node %u classes differ", node);
        }
        /* saving a loaded model writes the same bytes */
        CHECK_STATUS(t, igt_save(mapped, again, &err), OLIF_OK, &err, "save a mapped model");
        size_t size2 = 0;
        uint8_t *img2 = read_file(again, &size2);
        CHECK(t, img2 && size2 == size && memcmp(img, img2, size) == 0, "re-saved file differs");
        free(img2);
        remove(again);
    }
    igt_free(mapped);
    igt_free(buffered);
    igt_free(unchecked);

    /* a model outlives its file's name; saving over a mapped file is safe */
    igt_model *live = NULL;
    CHECK_STATUS(t, igt_load(path, 0, &live, &err), OLIF_OK, &err, "load");
    CHECK_STATUS(t, igt_save(m, path, &err), OLIF_OK, &err, "save over a mapped file");
    remove(path);
    if (live) CHECK(t, compare_models(m, live, 75, 200, rows, N) == 0, "mapped model changed");
    igt_free(live);

    char bad[1200];
    snprintf(bad, sizeof bad, "%s/no/such/dir/model.olif", t->dir);
    CHECK_STATUS(t, igt_save(m, bad, &err), OLIF_ERR_IO, &err, "save into a missing directory");
    CHECK_STATUS(t, igt_save(NULL, path, &err), OLIF_ERR_ARG, &err, "save NULL model");
    CHECK_STATUS(t, igt_save(m, NULL, &err), OLIF_ERR_ARG, &err, "save to NULL path");
    CHECK_STATUS(t, igt_save_version(m, path, 3, &err), OLIF_ERR_ARG, &err, "save as version 3");
    CHECK_STATUS(t, igt_save_version(m, path, 0, &err), OLIF_ERR_ARG, &err, "save as version 0");
    char dirpath[1100];
    snprintf(dirpath, sizeof dirpath, "%s/", t->dir);
    CHECK_STATUS(t, igt_save(m, dirpath, &err), OLIF_ERR_ARG, &err, "save to a directory path");
    free(img);
    free(rows);
    igt_free(m);
}

static void test_load_errors(T *t) {
    char path[1024];
    igt_model *m = NULL;
    igt_error err;
    path_in(t, path, sizeof path, "does-not-exist.olif");
    m = (igt_model *)(uintptr_t)1;
    CHECK_STATUS(t, igt_load(path, 0, &m, &err), OLIF_ERR_IO, &err, "nonexistent path");
    CHECK(t, m == NULL, "out must be NULL after a failed load");
    CHECK(t, strstr(err.message, "does-not-exist.olif") != NULL, "message should name the path: %s",
          err.message);
    CHECK_STATUS(t, igt_load(t->dir, 0, &m, &err), OLIF_ERR_IO, &err, "a directory");
    CHECK_STATUS(t, igt_load(NULL, 0, &m, &err), OLIF_ERR_ARG, &err, "NULL path");
    CHECK_STATUS(t, igt_load(path, 0, NULL, &err), OLIF_ERR_ARG, &err, "NULL out");
    CHECK_STATUS(t, igt_load_buffer(NULL, 10, 0, &m, &err), OLIF_ERR_ARG, &err, "NULL data");
    CHECK_STATUS(t, igt_load_buffer("x", 1, 0, NULL, &err), OLIF_ERR_ARG, &err, "NULL out (buffer)");
    CHECK(t, igt_load(path, 0, &m, NULL) == OLIF_ERR_IO, "NULL err is allowed");

    path_in(t, path, sizeof path, "empty.olif");
    CHECK(t, write_file(path, "", 0), "cannot write %s", path);
    CHECK_ERROR(t, igt_load(path, 0, &m, &err), &err, "empty file");
    CHECK_ERROR(t, igt_load(path, IGT_LOAD_SKIP_CHECKSUM, &m, &err), &err, "empty file, no checksum");
    CHECK_ERROR(t, igt_load_buffer(NULL, 0, 0, &m, &err), &err, "empty buffer");
    CHECK_ERROR(t, igt_load_buffer("", 0, IGT_LOAD_SKIP_CHECKSUM, &m, &err), &err, "empty buffer");

    /* random bytes are foreign */
    rng_t r = rng_seed(81);
    uint8_t buf[4096];
    for (int s = 0; s < 300; s++) {
        size_t len = rng_below(&r, sizeof buf + 1);
        for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)rng_next(&r);
        for (uint32_t flags = 0; flags <= IGT_LOAD_SKIP_CHECKSUM; flags++) {
            m = (igt_model *)(uintptr_t)1;
            CHECK_STATUS(t, igt_load_buffer(buf, len, flags, &m, &err), OLIF_ERR_FOREIGN, &err,
                         "random bytes");
            CHECK(t, m == NULL, "out must be NULL after a failed load");
        }
        if (s % 30 == 0) {
            path_in(t, path, sizeof path, "random.bin");
            CHECK(t, write_file(path, buf, len), "cannot write %s", path);
            CHECK_STATUS(t, igt_load(path, 0, &m, &err), len ? OLIF_ERR_FOREIGN : OLIF_ERR_TRUNCATED,
                         &err, "random file");
        }
    }
    CHECK(t, strstr(err.message, "magic") != NULL, "message should mention the magic: %s", err.message);
    /* another olifant file says what it is */
    memcpy(buf, "OLIFSFX", 8);
    CHECK_STATUS(t, igt_load_buffer(buf, 64, 0, &m, &err), OLIF_ERR_FOREIGN, &err, "a suffix index");
    CHECK(t, strstr(err.message, "not an olifant model file (bad magic: it is a suffix index") != NULL,
          "message: %s", err.message);
    /* random bytes behind the magic (and behind magic + version) */
    for (int s = 0; s < 300; s++) {
        size_t len = 8 + rng_below(&r, sizeof buf - 8);
        for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)rng_next(&r);
        memcpy(buf, "OLIFIGT", 8);
        if (s & 1 && len >= 16) { put32(buf, OFF_VERSION, IGT_FORMAT_VERSION); put32(buf, OFF_HSIZE, HEADER_SIZE); }
        if (s & 2 && len >= 20) put32(buf, OFF_ENDIAN, 0x01020304u);
        for (uint32_t flags = 0; flags <= IGT_LOAD_SKIP_CHECKSUM; flags++) {
            m = NULL;
            igt_status st = igt_load_buffer(buf, len, flags, &m, &err);
            CHECK_ERROR(t, st, &err, "random bytes behind a valid magic");
            if (st == OLIF_OK) igt_free(m);
        }
    }
    remove(path);
    path_in(t, path, sizeof path, "empty.olif");
    remove(path);
}

/* Every truncation of a valid file is an error: "bad magic" below 8 bytes,
 * "truncated" from there on; never a crash. */
static void truncation_of(T *t, uint32_t version) {
    igt_model *m = random_model(t, 91, 4, 24, 300, 3, NULL);
    if (!m) return;
    size_t size = 0;
    uint8_t *img = model_bytes_v(t, m, version, &size);
    igt_free(m);
    if (!img) return;
    igt_error err;
    for (size_t len = 0; len < size; len++) {
        uint8_t *cut = dup_bytes(img, len);       /* exact-size copy: ASan sees overreads */
        igt_status want = len < 8 ? OLIF_ERR_FOREIGN : OLIF_ERR_TRUNCATED;
        for (uint32_t flags = 0; flags <= IGT_LOAD_SKIP_CHECKSUM; flags++) {
            igt_model *x = NULL;
            igt_status st = load_buf(cut, len, flags, &x, &err);
            CHECK_STATUS(t, st, want, &err, "truncated image");
            if (st == OLIF_OK) igt_free(x);
            else CHECK(t, x == NULL, "out must be NULL");
        }
        free(cut);
    }
    CHECK(t, strstr(err.message, "bytes") != NULL, "truncation message: %s", err.message);
    /* through files and mmap, a sample of lengths */
    char path[1024];
    path_in(t, path, sizeof path, "truncated.olif");
    for (size_t len = 0; len < size; len += (len < 700 ? 1 + len / 8 : 97)) {
        CHECK(t, write_file(path, img, len), "cannot write %s", path);
        for (uint32_t flags = 0; flags <= IGT_LOAD_SKIP_CHECKSUM; flags++) {
            igt_model *x = NULL;
            igt_status st = igt_load(path, flags, &x, &err);
            CHECK_STATUS(t, st, len < 8 && len > 0 ? OLIF_ERR_FOREIGN : OLIF_ERR_TRUNCATED, &err,
                         "truncated file");
            if (st == OLIF_OK) igt_free(x);
        }
    }
    /* one byte too many */
    uint8_t *longer = malloc(size + 1);
    memcpy(longer, img, size);
    longer[size] = 0;
    igt_model *x = NULL;
    CHECK_STATUS(t, igt_load_buffer(longer, size + 1, 0, &x, &err), OLIF_ERR_CORRUPT, &err,
                 "trailing byte");
    igt_free(x);
    remove(path);
    free(longer);
    free(img);
}

static void test_truncation(T *t) {
    truncation_of(t, 1);
    truncation_of(t, 2);
}

static void test_version(T *t) {
    igt_model *m = random_model(t, 101, 4, 24, 300, 0, NULL);
    if (!m) return;
    size_t size = 0;
    uint8_t *img = model_bytes(t, m, &size);
    CHECK(t, img && get32(img, OFF_VERSION) == IGT_FORMAT_VERSION && IGT_FORMAT_VERSION == 2,
          "igt_save writes version %u", img ? get32(img, OFF_VERSION) : 0);
    igt_free(m);
    if (!img) return;
    char path[1024];
    path_in(t, path, sizeof path, "version.olif");
    const uint32_t versions[] = {0, IGT_FORMAT_VERSION + 1, 0x01000000u, UINT32_MAX};
    igt_error err;
    for (size_t i = 0; i < sizeof versions / sizeof *versions; i++) {
        uint8_t *copy = dup_bytes(img, size);
        put32(copy, OFF_VERSION, versions[i]);
        for (int sealed = 0; sealed < 2; sealed++) {
            if (sealed) reseal(copy, size);
            for (uint32_t flags = 0; flags <= IGT_LOAD_SKIP_CHECKSUM; flags++) {
                igt_model *x = NULL;
                CHECK_STATUS(t, igt_load_buffer(copy, size, flags, &x, &err), OLIF_ERR_VERSION, &err,
                             "wrong version (buffer)");
                CHECK(t, strstr(err.message, "version") != NULL &&
                         strstr(err.message, "versions 1 and 2") != NULL, "message: %s", err.message);
                igt_free(x);
            }
        }
        CHECK(t, write_file(path, copy, size), "cannot write %s", path);
        igt_model *x = NULL;
        CHECK_STATUS(t, igt_load(path, 0, &x, &err), OLIF_ERR_VERSION, &err, "wrong version (file)");
        igt_free(x);
        free(copy);
    }
    /* bad magic, even a near miss, is foreign */
    uint8_t *copy = dup_bytes(img, size);
    copy[6] = 'X';
    igt_model *x = NULL;
    CHECK_STATUS(t, igt_load_buffer(copy, size, IGT_LOAD_SKIP_CHECKSUM, &x, &err), OLIF_ERR_FOREIGN,
                 &err, "near-miss magic");
    copy[6] = 'T';
    copy[7] = '!';
    CHECK_STATUS(t, igt_load_buffer(copy, size, 0, &x, &err), OLIF_ERR_FOREIGN, &err, "magic without NUL");
    remove(path);
    free(copy);
    free(img);
}

/* Header fields that break the structure: caught as the expected error both
 * with checksums skipped and with forged (re-sealed) checksums. */
/* A header edit and the status it must give, with checksums skipped and with
 * forged (re-sealed) checksums; checksums on, any error. */
typedef struct {
    const char *what;
    size_t off;
    int wide;               /* 0: u32, 1: u64, 2: double, 3: tokenizer name */
    uint64_t value;
    double dvalue;
    igt_status want;
} header_case;

static void run_header_cases(T *t, const uint8_t *img, size_t size, const header_case *cases,
                             size_t n, const char *prefix) {
    igt_error err;
    for (size_t c = 0; c < n; c++) {
        uint8_t *copy = dup_bytes(img, size);
        if (cases[c].wide == 0) put32(copy, cases[c].off, (uint32_t)cases[c].value);
        else if (cases[c].wide == 1) put64(copy, cases[c].off, cases[c].value);
        else if (cases[c].wide == 2) memcpy(copy + cases[c].off, &cases[c].dvalue, 8);
        else memset(copy + cases[c].off, 'n', IGT_TOKENIZER_NAME_MAX);
        char what[160];
        igt_model *x = NULL;
        snprintf(what, sizeof what, "%s%s, checksum skipped", prefix, cases[c].what);
        CHECK_STATUS(t, igt_load_buffer(copy, size, IGT_LOAD_SKIP_CHECKSUM, &x, &err), cases[c].want,
                     &err, what);
        igt_free(x);
        x = NULL;
        snprintf(what, sizeof what, "%s%s, checksum on", prefix, cases[c].what);
        CHECK_ERROR(t, igt_load_buffer(copy, size, 0, &x, &err), &err, what);
        igt_free(x);
        x = NULL;
        reseal(copy, size);
        snprintf(what, sizeof what, "%s%s, forged checksums", prefix, cases[c].what);
        CHECK_STATUS(t, igt_load_buffer(copy, size, 0, &x, &err), cases[c].want, &err, what);
        igt_free(x);
        free(copy);
    }
}

static void test_header_fields(T *t) {
    igt_model *m = random_model(t, 111, 4, 24, 300, 3, NULL);
    if (!m) return;
    size_t size = 0;
    uint8_t *img = model_bytes_v(t, m, 1, &size);
    igt_info info;
    igt_get_info(m, &info);
    igt_free(m);
    if (!img) return;
    const uint64_t n_nodes = info.n_nodes + 1, n_pairs = info.n_dist_entries;
    const double nan = NAN, inf = INFINITY;
    const header_case cases[] = {
        {"header size", OFF_HSIZE, 0, HEADER_SIZE - 8, 0, OLIF_ERR_CORRUPT},
        {"header size 0", OFF_HSIZE, 0, 0, 0, OLIF_ERR_CORRUPT},
        {"byte order tag", OFF_ENDIAN, 0, 0x04030201u, 0, OLIF_ERR_CORRUPT},
        {"window 0", OFF_WINDOW, 0, 0, 0, OLIF_ERR_CORRUPT},
        {"window 17", OFF_WINDOW, 0, IGT_MAX_WINDOW + 1, 0, OLIF_ERR_CORRUPT},
        {"vocab 0", OFF_VOCAB, 0, 0, 0, OLIF_ERR_CORRUPT},
        {"vocab too large", OFF_VOCAB, 0, IGT_MAX_VOCAB, 0, OLIF_ERR_CORRUPT},
        {"padding id", OFF_PADDING, 0, 23, 0, OLIF_ERR_CORRUPT},
        {"order", OFF_ORDER, 0, 3, 0, OLIF_ERR_CORRUPT},
        {"top_k 0 with classes", OFF_TOPK, 0, 0, 0, OLIF_ERR_CORRUPT},
        {"top_k 1 below stored", OFF_TOPK, 0, 1, 0, OLIF_ERR_CORRUPT},
        {"default class", OFF_DEFAULT, 0, 24, 0, OLIF_ERR_CORRUPT},
        {"default class huge", OFF_DEFAULT, 0, UINT32_MAX, 0, OLIF_ERR_CORRUPT},
        {"permutation repeat", OFF_PERM + 4, 0, get32(img, OFF_PERM), 0, OLIF_ERR_CORRUPT},
        {"permutation range", OFF_PERM, 0, 4, 0, OLIF_ERR_CORRUPT},
        {"permutation huge", OFF_PERM + 8, 0, UINT32_MAX, 0, OLIF_ERR_CORRUPT},
        {"gain ratio NaN", OFF_GAIN_RATIO + 16, 2, 0, nan, OLIF_ERR_CORRUPT},
        {"gain ratio inf", OFF_GAIN_RATIO, 2, 0, inf, OLIF_ERR_CORRUPT},
        {"unused gain ratio NaN", OFF_GAIN_RATIO + 8 * 15, 2, 0, nan, OLIF_ERR_CORRUPT},
        {"info gain -inf", OFF_INFO_GAIN + 24, 2, 0, -inf, OLIF_ERR_CORRUPT},
        {"no nodes", OFF_N_NODES, 1, 0, 0, OLIF_ERR_CORRUPT},
        {"one node fewer", OFF_N_NODES, 1, n_nodes - 1, 0, OLIF_ERR_CORRUPT},
        {"one node more", OFF_N_NODES, 1, n_nodes + 1, 0, OLIF_ERR_CORRUPT},
        {"nodes 2^32-1", OFF_N_NODES, 1, UINT32_MAX, 0, OLIF_ERR_CORRUPT},
        {"nodes 2^32", OFF_N_NODES, 1, 1ull << 32, 0, OLIF_ERR_CORRUPT},
        {"nodes 2^64-1", OFF_N_NODES, 1, UINT64_MAX, 0, OLIF_ERR_CORRUPT},
        {"one pair fewer", OFF_N_PAIRS, 1, n_pairs - 1, 0, OLIF_ERR_CORRUPT},
        {"one pair more", OFF_N_PAIRS, 1, n_pairs + 1, 0, OLIF_ERR_CORRUPT},
        {"pairs huge", OFF_N_PAIRS, 1, UINT64_MAX / 4, 0, OLIF_ERR_CORRUPT},
        {"file size +64", OFF_FILE_SIZE, 1, size + 64, 0, OLIF_ERR_TRUNCATED},
        {"file size huge", OFF_FILE_SIZE, 1, UINT64_MAX, 0, OLIF_ERR_TRUNCATED},
        {"file size -64", OFF_FILE_SIZE, 1, size - 64, 0, OLIF_ERR_CORRUPT},
        {"file size 0", OFF_FILE_SIZE, 1, 0, 0, OLIF_ERR_CORRUPT},
        {"key section inside header", OFF_SECTIONS, 1, 0, 0, OLIF_ERR_CORRUPT},
        {"key section misaligned", OFF_SECTIONS, 1, HEADER_SIZE + 4, 0, OLIF_ERR_CORRUPT},
        {"child section past end", OFF_SECTIONS + 8 * SEC_CHILD, 1, size, 0, OLIF_ERR_CORRUPT},
        {"child section huge", OFF_SECTIONS + 8 * SEC_CHILD, 1, UINT64_MAX - 63, 0, OLIF_ERR_CORRUPT},
        {"pairs section past end", OFF_SECTIONS + 8 * SEC_PAIRS, 1, size + 64, 0, OLIF_ERR_CORRUPT},
        {"sections overlap", OFF_SECTIONS + 8 * SEC_CLASS, 1, HEADER_SIZE, 0, OLIF_ERR_CORRUPT},
        {"tokenizer name", OFF_TOKENIZER, 3, 0, 0, OLIF_ERR_CORRUPT},
    };
    igt_error err;
    run_header_cases(t, img, size, cases, sizeof cases / sizeof *cases, "v1 ");
    /* payload checksum: any payload change is caught unless skipped */
    uint8_t *copy = dup_bytes(img, size);
    copy[size - 1] ^= 1;
    igt_model *x = NULL;
    CHECK_STATUS(t, igt_load_buffer(copy, size, 0, &x, &err), OLIF_ERR_CHECKSUM, &err, "payload byte");
    CHECK(t, strstr(err.message, "checksum") != NULL, "message: %s", err.message);
    CHECK_STATUS(t, igt_load_buffer(copy, size, IGT_LOAD_SKIP_CHECKSUM, &x, &err), OLIF_OK, &err,
                 "last payload byte, checksum skipped");
    igt_free(x);
    free(copy);
    free(img);
}

static void try_edit_w(T *t, const uint8_t *img, size_t size, size_t off, int width, uint32_t value,
                       igt_status want, rng_t *r, const char *what);

/* A 32-bit edit (see try_edit_w). */
static void try_edit(T *t, const uint8_t *img, size_t size, size_t off, uint32_t value,
                     igt_status want, rng_t *r, const char *what) {
    try_edit_w(t, img, size, off, 4, value, want, r, what);
}

static void test_structure_edits(T *t) {
    igt_model *m = random_model(t, 121, 4, 24, 300, 3, NULL);
    if (!m) return;
    size_t size = 0;
    uint8_t *img = model_bytes_v(t, m, 1, &size);
    igt_free(m);
    if (!img) return;
    rng_t r = rng_seed(122);
    const uint32_t n = (uint32_t)get64(img, OFF_N_NODES);
    const size_t child = section(img, SEC_CHILD), key = section(img, SEC_KEY),
                 cls = section(img, SEC_CLASS), win = section(img, SEC_WINNER),
                 tot = section(img, SEC_TOTAL), dist = section(img, SEC_DIST);
    const uint32_t n_pairs = (uint32_t)get64(img, OFF_N_PAIRS);
    CHECK(t, n > 20, "model too small for this test (%u nodes)", n);

    /* child index: values that cannot be valid anywhere, then near misses */
    for (uint32_t i = 0; i <= n; i++) {
        size_t off = child + 4 * (size_t)i;
        uint32_t orig = get32(img, off);
        const uint32_t invalid[] = {UINT32_MAX, n + 1, 0x80000000u, i, 0};
        for (size_t v = 0; v < sizeof invalid / sizeof *invalid; v++)
            if (invalid[v] != orig) try_edit(t, img, size, off, invalid[v], OLIF_ERR_CORRUPT, &r, "child index");
        const uint32_t near[] = {orig + 1, orig - 1, orig + 2, orig - 2, rng_below(&r, n + 1)};
        for (size_t v = 0; v < sizeof near / sizeof *near; v++)
            if (near[v] != orig) try_edit(t, img, size, off, near[v], OLIF_OK, &r, "child index near miss");
    }
    /* siblings out of order; keys anywhere */
    int swapped = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t lo = get32(img, child + 4 * (size_t)i), hi = get32(img, child + 4 * (size_t)i + 4);
        if (hi - lo >= 2) {
            uint32_t k0 = get32(img, key + 4 * (size_t)lo);
            try_edit(t, img, size, key + 4 * (size_t)lo + 4, k0, OLIF_ERR_CORRUPT, &r, "equal sibling keys");
            if (k0 > 0) try_edit(t, img, size, key + 4 * (size_t)lo + 4, k0 - 1, OLIF_ERR_CORRUPT, &r,
                                 "descending sibling keys");
            swapped++;
        }
    }
    CHECK(t, swapped > 0, "no node with two children");
    for (uint32_t i = 0; i < n; i++) {
        try_edit(t, img, size, key + 4 * (size_t)i, rng_below(&r, 30), OLIF_OK, &r, "key");
        try_edit(t, img, size, key + 4 * (size_t)i, UINT32_MAX, OLIF_OK, &r, "key UINT32_MAX");
    }
    /* classes and counts */
    for (uint32_t i = 0; i < n; i++) {
        try_edit(t, img, size, cls + 4 * (size_t)i, 24, OLIF_ERR_CORRUPT, &r, "class == vocab");
        try_edit(t, img, size, cls + 4 * (size_t)i, rng_below(&r, 24), OLIF_OK, &r, "class");
        uint32_t total = get32(img, tot + 4 * (size_t)i);
        try_edit(t, img, size, win + 4 * (size_t)i, total + 1, OLIF_ERR_CORRUPT, &r, "winner > total");
        try_edit(t, img, size, tot + 4 * (size_t)i, 0, OLIF_ERR_CORRUPT, &r, "total 0");
        try_edit(t, img, size, win + 4 * (size_t)i, 0, OLIF_OK, &r, "winner 0");
    }
    /* class index */
    for (uint32_t i = 0; i <= n; i++) {
        size_t off = dist + 4 * (size_t)i;
        uint32_t orig = get32(img, off);
        const uint32_t invalid[] = {UINT32_MAX, n_pairs + 1};
        for (size_t v = 0; v < 2; v++) try_edit(t, img, size, off, invalid[v], OLIF_ERR_CORRUPT, &r, "class index");
        try_edit(t, img, size, off, orig + 1, OLIF_OK, &r, "class index +1");
        if (orig) try_edit(t, img, size, off, orig - 1, OLIF_OK, &r, "class index -1");
    }
    free(img);
}

/* Single-byte changes everywhere: caught by the checksums; with checksums
 * skipped the loader either refuses or gives a model that answers safely. */
static void test_byte_flips(T *t) {
    uint32_t *rows = NULL;
    igt_model *m = random_model(t, 131, 4, 24, 300, 3, &rows);
    if (!m) { free(rows); return; }
    size_t size = 0;
    uint8_t *img = model_bytes_v(t, m, 1, &size);
    if (!img) { igt_free(m); free(rows); return; }
    rng_t r = rng_seed(132);
    igt_error err;
    char path[1024];
    path_in(t, path, sizeof path, "flipped.olif");
    size_t loaded = 0, refused = 0;
    for (size_t pos = 0; pos < size; pos++) {
        uint8_t *copy = dup_bytes(img, size);
        copy[pos] ^= (uint8_t)(1 + rng_below(&r, 255));
        igt_model *x = NULL;
        igt_status st = igt_load_buffer(copy, size, 0, &x, &err);
        CHECK_ERROR(t, st, &err, "flipped byte with checksums");
        if (pos >= HEADER_SIZE)
            CHECK_STATUS(t, st, OLIF_ERR_CHECKSUM, &err, "flipped payload byte");
        if (st == OLIF_OK) igt_free(x);
        x = NULL;
        st = igt_load_buffer(copy, size, IGT_LOAD_SKIP_CHECKSUM, &x, &err);
        if (pos >= OFF_PAYLOAD_SUM && pos < OFF_PAYLOAD_SUM + 16)
            CHECK_STATUS(t, st, OLIF_OK, &err, "flipped checksum byte, checksums skipped");
        if (st == OLIF_OK) {
            loaded++;
            CHECK(t, exercise(x, &r, 300) == 0, "byte %zu: a loaded model broke its guarantees", pos);
            if (pos >= OFF_PAYLOAD_SUM && pos < OFF_PAYLOAD_SUM + 16)
                CHECK(t, compare_models(m, x, pos, 50, rows, 300) == 0,
                      "byte %zu only touches a checksum, yet answers changed", pos);
            igt_free(x);
        } else {
            refused++;
            CHECK(t, x == NULL && st <= OLIF_ERR_CANCELLED && err.code == (int)st && err.message[0],
                  "byte %zu: bad error record", pos);
        }
        if (pos % 61 == 0) {     /* the mmap path agrees */
            CHECK(t, write_file(path, copy, size), "cannot write %s", path);
            for (uint32_t flags = 0; flags <= IGT_LOAD_SKIP_CHECKSUM; flags++) {
                igt_status sb = igt_load_buffer(copy, size, flags, &x, &err);
                igt_free(x);
                x = NULL;
                igt_status sf = igt_load(path, flags, &x, &err);
                CHECK(t, sb == sf, "byte %zu: buffer %d, file %d", pos, (int)sb, (int)sf);
                if (x) CHECK(t, exercise(x, &r, 50) == 0, "byte %zu: mapped model", pos);
                igt_free(x);
                x = NULL;
            }
        }
        free(copy);
    }
    CHECK(t, loaded > 0 && refused > 0, "skip-checksum: %zu loaded, %zu refused", loaded, refused);

    /* bit flips through the whole header, and random multi-byte damage */
    for (size_t bit = 0; bit < 8 * HEADER_SIZE; bit++) {
        uint8_t *copy = dup_bytes(img, size);
        copy[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        igt_model *x = NULL;
        CHECK_ERROR(t, igt_load_buffer(copy, size, 0, &x, &err), &err, "header bit flip");
        igt_free(x);
        x = NULL;
        if (igt_load_buffer(copy, size, IGT_LOAD_SKIP_CHECKSUM, &x, &err) == OLIF_OK)
            CHECK(t, exercise(x, &r, 40) == 0, "header bit %zu: model broke its guarantees", bit);
        igt_free(x);
        free(copy);
    }
    for (int it = 0; it < 3000; it++) {
        uint8_t *copy = dup_bytes(img, size);
        int edits = 1 + (int)rng_below(&r, 8);
        for (int e = 0; e < edits; e++) {
            size_t pos = HEADER_SIZE + rng_below(&r, (uint32_t)(size - HEADER_SIZE));
            copy[pos] = (uint8_t)rng_next(&r);
        }
        igt_model *x = NULL;
        if (igt_load_buffer(copy, size, IGT_LOAD_SKIP_CHECKSUM, &x, &err) == OLIF_OK)
            CHECK(t, exercise(x, &r, 40) == 0, "multi-byte damage: model broke its guarantees");
        igt_free(x);
        free(copy);
    }
    remove(path);
    free(img);
    free(rows);
    igt_free(m);
}

/* ---- tests: format version 2 ------------------------------------------------------------ */

static void test_file_layout_v2(T *t) {
    igt_model *m = random_model(t, 62, 5, 20, 900, 4, NULL);
    if (!m) return;
    size_t size = 0, size1 = 0;
    uint8_t *img = model_bytes(t, m, &size), *img1 = model_bytes_v(t, m, 1, &size1);
    igt_info info;
    igt_get_info(m, &info);
    if (!img || !img1) goto out;
    const uint32_t n = (uint32_t)(info.n_nodes + 1);
    CHECK(t, size == info.file_size && size >= HEADER_SIZE && size % 64 == 0 && size < size1,
          "file of %zu bytes (version 1: %zu), info says %llu", size, size1,
          (unsigned long long)info.file_size);
    CHECK(t, memcmp(img, "OLIFIGT", 8) == 0, "magic");
    CHECK(t, get32(img, OFF_VERSION) == 2 && get32(img, OFF_HSIZE) == HEADER_SIZE &&
             get32(img, OFF_ENDIAN) == 0x01020304u && get32(img, OFF_WINDOW) == 5 &&
             get32(img, OFF_VOCAB) == 20 && get32(img, OFF_PADDING) == 20 &&
             get32(img, OFF_ORDER) == info.order && get32(img, OFF_TOPK) == 4 &&
             get32(img, OFF_DEFAULT) == info.default_class && get32(img, V2_OFF_IDW) == 2 &&
             get32(img, V2_OFF_FLAGS) == 0 && get32(img, V2_OFF_RESERVED) == 0 &&
             get32(img, V2_OFF_PERM) == info.permutation[0] &&
             get64(img, V2_OFF_N_INSTANCES) == 900 && get64(img, V2_OFF_N_NODES) == n &&
             get64(img, V2_OFF_N_PAIRS) == info.n_dist_entries &&
             get64(img, V2_OFF_N_CLASSES) == info.n_classes &&
             get64(img, V2_OFF_FILE_SIZE) == size && section2(img, S2_KEY) == HEADER_SIZE &&
             strcmp((const char *)img + V2_OFF_TOKENIZER, "test-tokenizer") == 0 &&
             img[V2_OFF_DIGEST + 3] == 21,
          "version-2 header differs from the one mirrored here (update the V2_OFF_* constants)");
    double g;
    memcpy(&g, img + V2_OFF_GAIN_RATIO + 8, 8);
    CHECK(t, g == info.gain_ratio[1], "gain ratio offset");
    memcpy(&g, img + V2_OFF_INFO_GAIN + 8, 8);
    CHECK(t, g == info.info_gain[1], "info gain offset");
    uint8_t *copy = dup_bytes(img, size);
    reseal(copy, size);
    CHECK(t, memcmp(copy, img, size) == 0, "re-sealing an intact version-2 file changed it");
    free(copy);
    /* sections: root has children (node 0's bit), the child index ends at n,
     * the root's total (900) is escaped, keys and classes are 2 bytes */
    const uint64_t internal = get64(img, V2_OFF_N_INTERNAL);
    CHECK(t, (img[section2(img, S2_KIDS)] & 1) && get32(img, section2(img, S2_CHILD)) == 1 &&
             get32(img, section2(img, S2_CHILD) + 4 * (size_t)internal) == n,
          "child sections");
    CHECK(t, img[section2(img, S2_TOTAL)] == 255 && get64(img, V2_OFF_N_TOTAL_ESC) >= 1 &&
             get32(img, section2(img, S2_TOTAL_ESC)) == 0 &&
             get32(img, section2(img, S2_TOTAL_ESC) + 4) == 900,
          "the root's total is not in the escape table");
    CHECK(t, section2(img, S2_CLASS) - section2(img, S2_KEY) >= 2 * (size_t)n &&
             section2(img, S2_CLASS) - section2(img, S2_KEY) < 2 * (size_t)n + 64,
          "keys are not 2 bytes each");
out:
    free(img);
    free(img1);
    igt_free(m);
}

/* The id width follows the vocabulary; answers do not. */
static void test_id_widths(T *t) {
    const uint32_t vocabs[] = {65535, 65536, 70001};
    const uint32_t widths[] = {2, 3, 3};
    for (int v = 0; v < 3; v++) {
        rng_t r = rng_seed(63 + (uint64_t)v);
        const uint32_t F = 3, V = vocabs[v];
        size_t n = 500;
        uint32_t *rows = random_instances(&r, F, 50, n);
        for (size_t i = 0; i < n; i++)      /* spread ids over the whole range */
            for (uint32_t j = 0; j <= F; j++) {
                uint32_t *x = &rows[i * (F + 1) + j];
                if (*x == 50) *x = V;        /* padding */
                else *x = (*x * 1311u + (j == F ? 7u : 0u)) % V;
            }
        igt_model *m = build_from_rows(t, F, V, 2, IGT_ORDER_GAIN_RATIO, NULL, rows, n);
        if (m) {
            size_t size = 0;
            uint8_t *img = model_bytes(t, m, &size);
            CHECK(t, img && get32(img, V2_OFF_IDW) == widths[v], "vocab %u: id width %u, want %u",
                  V, img ? get32(img, V2_OFF_IDW) : 0, widths[v]);
            igt_model *back = NULL, *v1 = NULL;
            igt_error err;
            CHECK_STATUS(t, igt_load_buffer(img, size, 0, &back, &err), OLIF_OK, &err, "reload");
            size_t s1 = 0;
            uint8_t *img1 = model_bytes_v(t, m, 1, &s1);
            CHECK_STATUS(t, igt_load_buffer(img1, s1, 0, &v1, &err), OLIF_OK, &err, "reload v1");
            if (back) CHECK(t, compare_models(m, back, 64, 400, rows, n) == 0, "vocab %u: reloaded model differs", V);
            if (v1) CHECK(t, compare_models(m, v1, 65, 400, rows, n) == 0, "vocab %u: version-1 reload differs", V);
            igt_free(back);
            igt_free(v1);
            free(img);
            free(img1);
        }
        igt_free(m);
        free(rows);
    }
}

/* 4-byte ids (vocabularies from 2^24): building one needs vocab-sized
 * arrays, so take a small model's version-1 image and give it a huge
 * vocabulary; converting it yields a version-2 image with 4-byte ids. */
static void test_id_width_4(T *t) {
    uint32_t *rows = NULL;
    igt_model *m = random_model(t, 69, 4, 24, 800, 3, &rows);
    if (!m) { free(rows); return; }
    size_t s1 = 0;
    uint8_t *v1 = model_bytes_v(t, m, 1, &s1);
    const uint32_t BIG = (1u << 24) + 3;
    put32(v1, OFF_VOCAB, BIG);
    put32(v1, OFF_PADDING, BIG);
    reseal(v1, s1);
    igt_model *x = NULL, *y = NULL;
    igt_error err;
    CHECK_STATUS(t, igt_load_buffer(v1, s1, 0, &x, &err), OLIF_OK, &err, "version 1 with a huge vocabulary");
    if (x) {
        size_t s2 = 0;
        uint8_t *v2 = model_bytes(t, x, &s2);
        CHECK(t, v2 && get32(v2, V2_OFF_IDW) == 4 && get32(v2, OFF_VOCAB) == BIG, "id width %u",
              v2 ? get32(v2, V2_OFF_IDW) : 0);
        CHECK_STATUS(t, igt_load_buffer(v2, s2, 0, &y, &err), OLIF_OK, &err, "reload with 4-byte ids");
        rng_t r = rng_seed(70);
        unsigned long bad = 0;
        for (int q = 0; q < 2000 && y; q++) {   /* full windows: padding is not involved */
            uint32_t ctx[4];
            if (q & 1) memcpy(ctx, rows + rng_below(&r, 800) * 5, sizeof ctx);
            else for (int i = 0; i < 4; i++) ctx[i] = rng_below(&r, 26);
            igt_answer a, b, c;
            igt_predict(m, ctx, 4, &a);
            igt_predict(x, ctx, 4, &b);
            igt_predict(y, ctx, 4, &c);
            bad += !same_answer(&a, &b) || !same_answer(&a, &c);
            uint32_t ca[4], cb[4], na[4], nb[4];
            size_t ka = igt_node_classes(m, a.node, ca, na, 4), kb = igt_node_classes(y, c.node, cb, nb, 4);
            bad += ka != kb || memcmp(ca, cb, 4 * (ka < 4 ? ka : 4)) || memcmp(na, nb, 4 * (ka < 4 ? ka : 4));
        }
        CHECK(t, bad == 0, "%lu answers differ with 4-byte ids", bad);
        if (y) CHECK(t, exercise(y, &r, 500) == 0, "4-byte ids: guarantees broken");
        uint8_t *copy = v2 ? dup_bytes(v2, s2) : NULL;
        if (copy) {             /* an id beyond the vocabulary in a 4-byte key is refused */
            put32(copy, section2(copy, S2_KEY) + 4, BIG + 1);
            reseal(copy, s2);
            igt_model *z = NULL;
            CHECK_STATUS(t, igt_load_buffer(copy, s2, 0, &z, &err), OLIF_ERR_CORRUPT, &err, "4-byte key too big");
            igt_free(z);
            free(copy);
        }
        free(v2);
    }
    igt_free(x);
    igt_free(y);
    free(v1);
    free(rows);
    igt_free(m);
}

/* A version-1 file loads into the same model, answers and all. */
static void test_v1_compat(T *t) {
    const struct { uint32_t F, V, top_k; size_t n; } cfgs[] = {
        {4, 40, 3, 1500}, {4, 300, 0, 3000}, {3, 20, IGT_TOPK_ALL, 600}, {1, 12, 2, 200}, {16, 8, 1, 300}};
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
        uint32_t *rows = NULL;
        igt_model *m = random_model(t, 66 + c, cfgs[c].F, cfgs[c].V, cfgs[c].n, cfgs[c].top_k, &rows);
        if (!m) { free(rows); continue; }
        size_t s1 = 0, s2 = 0, s3 = 0, s4 = 0;
        uint8_t *v1 = model_bytes_v(t, m, 1, &s1), *v2 = model_bytes(t, m, &s2);
        igt_model *x = NULL;
        igt_error err;
        CHECK_STATUS(t, igt_load_buffer(v1, s1, 0, &x, &err), OLIF_OK, &err, "load version 1");
        if (x) {
            igt_info a, b;
            igt_get_info(m, &a);
            igt_get_info(x, &b);
            CHECK(t, same_info(&a, &b) && b.format_version == 2, "config %zu: info differs", c);
            CHECK(t, compare_models(m, x, 67, 1500, rows, cfgs[c].n) == 0,
                  "config %zu: version-1 model answers differently", c);
            uint8_t *again2 = model_bytes(t, x, &s3), *again1 = model_bytes_v(t, x, 1, &s4);
            CHECK(t, again2 && s3 == s2 && memcmp(again2, v2, s2) == 0,
                  "config %zu: a converted model saves other bytes", c);
            CHECK(t, again1 && s4 == s1 && memcmp(again1, v1, s1) == 0,
                  "config %zu: version 1 -> 2 -> 1 is not the identity", c);
            free(again1);
            free(again2);
        }
        igt_free(x);
        free(v1);
        free(v2);
        free(rows);
        igt_free(m);
    }
}

/* Header fields, with checksums skipped and with forged checksums. */
static void test_header_fields_v2(T *t) {
    igt_model *m = random_model(t, 112, 4, 24, 1200, 3, NULL);
    if (!m) return;
    size_t size = 0;
    uint8_t *img = model_bytes(t, m, &size);
    igt_info info;
    igt_get_info(m, &info);
    igt_free(m);
    if (!img) return;
    const uint64_t n_nodes = info.n_nodes + 1, n_pairs = info.n_dist_entries,
                   internal = get64(img, V2_OFF_N_INTERNAL), tesc = get64(img, V2_OFF_N_TOTAL_ESC),
                   wesc = get64(img, V2_OFF_N_WINNER_ESC);
    const double nan = NAN;
    const header_case cases[] = {
        {"header size", OFF_HSIZE, 0, HEADER_SIZE + 64, 0, OLIF_ERR_CORRUPT},
        {"byte order tag", OFF_ENDIAN, 0, 0x04030201u, 0, OLIF_ERR_CORRUPT},
        {"window 0", OFF_WINDOW, 0, 0, 0, OLIF_ERR_CORRUPT},
        {"window 3 (tree is deeper)", OFF_WINDOW, 0, 3, 0, OLIF_ERR_CORRUPT},
        {"vocab 0", OFF_VOCAB, 0, 0, 0, OLIF_ERR_CORRUPT},
        {"vocab 65536 (other id width)", OFF_VOCAB, 0, 65536, 0, OLIF_ERR_CORRUPT},
        {"padding id", OFF_PADDING, 0, 23, 0, OLIF_ERR_CORRUPT},
        {"order", OFF_ORDER, 0, 3, 0, OLIF_ERR_CORRUPT},
        {"top_k 0 with classes", OFF_TOPK, 0, 0, 0, OLIF_ERR_CORRUPT},
        {"top_k 1 below stored", OFF_TOPK, 0, 1, 0, OLIF_ERR_CORRUPT},
        {"default class", OFF_DEFAULT, 0, 24, 0, OLIF_ERR_CORRUPT},
        {"id width 4", V2_OFF_IDW, 0, 4, 0, OLIF_ERR_CORRUPT},
        {"id width 0", V2_OFF_IDW, 0, 0, 0, OLIF_ERR_CORRUPT},
        {"flags", V2_OFF_FLAGS, 0, 1, 0, OLIF_ERR_CORRUPT},
        {"reserved", V2_OFF_RESERVED, 0, 1, 0, OLIF_ERR_CORRUPT},
        {"permutation repeat", V2_OFF_PERM + 4, 0, get32(img, V2_OFF_PERM), 0, OLIF_ERR_CORRUPT},
        {"permutation huge", V2_OFF_PERM + 8, 0, UINT32_MAX, 0, OLIF_ERR_CORRUPT},
        {"gain ratio NaN", V2_OFF_GAIN_RATIO + 16, 2, 0, nan, OLIF_ERR_CORRUPT},
        {"unused info gain NaN", V2_OFF_INFO_GAIN + 8 * 15, 2, 0, nan, OLIF_ERR_CORRUPT},
        {"no instances", V2_OFF_N_INSTANCES, 1, 0, 0, OLIF_ERR_CORRUPT},
        {"one instance more", V2_OFF_N_INSTANCES, 1, 1201, 0, OLIF_ERR_CORRUPT},
        {"instances 2^32", V2_OFF_N_INSTANCES, 1, 1ull << 32, 0, OLIF_ERR_CORRUPT},
        {"no nodes", V2_OFF_N_NODES, 1, 0, 0, OLIF_ERR_CORRUPT},
        {"one node fewer", V2_OFF_N_NODES, 1, n_nodes - 1, 0, OLIF_ERR_CORRUPT},
        {"one node more", V2_OFF_N_NODES, 1, n_nodes + 1, 0, OLIF_ERR_CORRUPT},
        {"nodes 2^64-1", V2_OFF_N_NODES, 1, UINT64_MAX, 0, OLIF_ERR_CORRUPT},
        {"one internal node fewer", V2_OFF_N_INTERNAL, 1, internal - 1, 0, OLIF_ERR_CORRUPT},
        {"one internal node more", V2_OFF_N_INTERNAL, 1, internal + 1, 0, OLIF_ERR_CORRUPT},
        {"internal = nodes", V2_OFF_N_INTERNAL, 1, n_nodes, 0, OLIF_ERR_CORRUPT},
        {"one pair fewer", V2_OFF_N_PAIRS, 1, n_pairs - 1, 0, OLIF_ERR_CORRUPT},
        {"pairs huge", V2_OFF_N_PAIRS, 1, UINT64_MAX / 4, 0, OLIF_ERR_CORRUPT},
        {"no classes", V2_OFF_N_CLASSES, 1, 0, 0, OLIF_ERR_CORRUPT},
        {"classes above vocab", V2_OFF_N_CLASSES, 1, 25, 0, OLIF_ERR_CORRUPT},
        {"one total escape fewer", V2_OFF_N_TOTAL_ESC, 1, tesc - 1, 0, OLIF_ERR_CORRUPT},
        {"one total escape more", V2_OFF_N_TOTAL_ESC, 1, tesc + 1, 0, OLIF_ERR_CORRUPT},
        {"winner escapes huge", V2_OFF_N_WINNER_ESC, 1, UINT64_MAX, 0, OLIF_ERR_CORRUPT},
        {"one winner escape more", V2_OFF_N_WINNER_ESC, 1, wesc + 1, 0, OLIF_ERR_CORRUPT},
        {"file size +64", V2_OFF_FILE_SIZE, 1, size + 64, 0, OLIF_ERR_TRUNCATED},
        {"file size -64", V2_OFF_FILE_SIZE, 1, size - 64, 0, OLIF_ERR_CORRUPT},
        {"key section inside header", V2_OFF_SECTIONS, 1, 0, 0, OLIF_ERR_CORRUPT},
        {"key section misaligned", V2_OFF_SECTIONS, 1, HEADER_SIZE + 8, 0, OLIF_ERR_CORRUPT},
        {"kids section past end", V2_OFF_SECTIONS + 8 * S2_KIDS, 1, size, 0, OLIF_ERR_CORRUPT},
        {"child section huge", V2_OFF_SECTIONS + 8 * S2_CHILD, 1, UINT64_MAX - 63, 0, OLIF_ERR_CORRUPT},
        {"sections overlap", V2_OFF_SECTIONS + 8 * S2_CLASS, 1, HEADER_SIZE, 0, OLIF_ERR_CORRUPT},
        {"last section moved", V2_OFF_SECTIONS + 8 * S2_PAIR_COUNT, 1,
         section2(img, S2_PAIR_COUNT) - 64, 0, OLIF_ERR_CORRUPT},
        {"tokenizer name", V2_OFF_TOKENIZER, 3, 0, 0, OLIF_ERR_CORRUPT},
    };
    igt_error err;
    run_header_cases(t, img, size, cases, sizeof cases / sizeof *cases, "v2 ");
    /* a model loaded without checking checksums (here: wrong ones) saves a
     * file that loads with them */
    uint8_t *copy = dup_bytes(img, size);
    put64(copy, V2_OFF_PAYLOAD_SUM, get64(copy, V2_OFF_PAYLOAD_SUM) ^ 1);
    put64(copy, V2_OFF_HEADER_SUM, get64(copy, V2_OFF_HEADER_SUM) ^ 1);
    igt_model *x = NULL, *y = NULL;
    char path[1024];
    path_in(t, path, sizeof path, "resealed.olif");
    CHECK_STATUS(t, igt_load_buffer(copy, size, IGT_LOAD_SKIP_CHECKSUM, &x, &err), OLIF_OK, &err,
                 "wrong checksums, skipped");
    if (x) {
        CHECK_STATUS(t, igt_save(x, path, &err), OLIF_OK, &err, "save");
        CHECK_STATUS(t, igt_load(path, 0, &y, &err), OLIF_OK, &err, "reload with checksums");
        CHECK(t, same_file_bytes(path, img, size), "the saved file is not the intact original");
        remove(path);
    }
    igt_free(x);
    igt_free(y);
    free(copy);
    free(img);
}

/* One edit of `width` bytes (1, 2 or 4) at off: loaded with checksums
 * skipped and with forged checksums, both give the same status, `want` if
 * it is an error (else OK or CORRUPT), and a loaded model answers safely. */
static void try_edit_w(T *t, const uint8_t *img, size_t size, size_t off, int width, uint32_t value,
                       igt_status want, rng_t *r, const char *what) {
    uint8_t *copy = dup_bytes(img, size);
    for (int b = 0; b < width; b++) copy[off + (size_t)b] = (uint8_t)(value >> (8 * b));
    igt_error err;
    igt_model *a = NULL, *b = NULL;
    igt_status sa = igt_load_buffer(copy, size, IGT_LOAD_SKIP_CHECKSUM, &a, &err);
    if (want != OLIF_OK) CHECK_STATUS(t, sa, want, &err, what);
    else CHECK(t, sa == OLIF_OK || sa == OLIF_ERR_CORRUPT, "%s: status %d (%s)", what, (int)sa, err.message);
    reseal(copy, size);
    igt_status sb = igt_load_buffer(copy, size, 0, &b, &err);
    CHECK(t, sa == sb, "%s: checksums skipped gives %d, forged checksums %d", what, (int)sa, (int)sb);
    if (a) CHECK(t, exercise(a, r, 40) == 0, "%s: a loaded model broke its guarantees", what);
    igt_free(a);
    igt_free(b);
    free(copy);
}

static void test_structure_edits_v2(T *t) {
    igt_model *m = random_model(t, 122, 4, 24, 5000, 3, NULL);
    if (!m) return;
    size_t size = 0;
    uint8_t *img = model_bytes(t, m, &size);
    igt_free(m);
    if (!img) return;
    rng_t r = rng_seed(123);
    const uint32_t n = (uint32_t)get64(img, V2_OFF_N_NODES);
    const uint32_t internal = (uint32_t)get64(img, V2_OFF_N_INTERNAL);
    const uint32_t n_pairs = (uint32_t)get64(img, V2_OFF_N_PAIRS);
    const uint32_t tesc = (uint32_t)get64(img, V2_OFF_N_TOTAL_ESC);
    const size_t key = section2(img, S2_KEY), cls = section2(img, S2_CLASS),
                 kids = section2(img, S2_KIDS), child = section2(img, S2_CHILD),
                 tot = section2(img, S2_TOTAL), win = section2(img, S2_WINNER),
                 te = section2(img, S2_TOTAL_ESC), dist = section2(img, S2_DIST),
                 pcls = section2(img, S2_PAIR_CLASS), pcnt = section2(img, S2_PAIR_COUNT);
    CHECK(t, n > 40 && internal > 5 && tesc > 1, "model too small for this test (%u nodes, %u internal, %u escapes)",
          n, internal, tesc);
    /* child flags: any flip changes the count of internal nodes */
    for (uint32_t i = 0; i < n + 10 && i < 64 * ((n + 63) / 64); i++)
        try_edit_w(t, img, size, kids + i / 8, 1, img[kids + i / 8] ^ (1u << (i % 8)), OLIF_ERR_CORRUPT, &r,
                   "child flag");
    /* child index */
    for (uint32_t i = 0; i <= internal; i++) {
        size_t off = child + 4 * (size_t)i;
        uint32_t orig = get32(img, off);
        const uint32_t invalid[] = {UINT32_MAX, n + 1, 0x80000000u, 0};
        for (size_t v = 0; v < 4; v++)
            if (invalid[v] != orig) try_edit_w(t, img, size, off, 4, invalid[v], OLIF_ERR_CORRUPT, &r, "child index");
        const uint32_t near[] = {orig + 1, orig - 1, rng_below(&r, n + 1)};
        for (size_t v = 0; v < 3; v++)
            if (near[v] != orig) try_edit_w(t, img, size, off, 4, near[v], OLIF_OK, &r, "child index near miss");
    }
    /* keys: root 0, at most the padding id, siblings ascending */
    try_edit_w(t, img, size, key, 2, 1, OLIF_ERR_CORRUPT, &r, "root key");
    for (uint32_t i = 1; i < n; i++) {
        try_edit_w(t, img, size, key + 2 * (size_t)i, 2, 25, OLIF_ERR_CORRUPT, &r, "key above padding id");
        try_edit_w(t, img, size, key + 2 * (size_t)i, 2, rng_below(&r, 25), OLIF_OK, &r, "key");
    }
    int siblings = 0;
    for (uint32_t rr = 0; rr < internal; rr++) {
        uint32_t lo = get32(img, child + 4 * (size_t)rr), hi = get32(img, child + 4 * (size_t)rr + 4);
        if (hi - lo < 2) continue;
        uint32_t k0 = get32(img, key + 2 * (size_t)lo) & 0xffff;
        try_edit_w(t, img, size, key + 2 * (size_t)lo + 2, 2, k0, OLIF_ERR_CORRUPT, &r, "equal sibling keys");
        siblings++;
    }
    CHECK(t, siblings > 0, "no node with two children");
    /* classes and counts */
    for (uint32_t i = 0; i < n; i++) {
        try_edit_w(t, img, size, cls + 2 * (size_t)i, 2, 24, OLIF_ERR_CORRUPT, &r, "class == vocab");
        try_edit_w(t, img, size, cls + 2 * (size_t)i, 2, rng_below(&r, 24), OLIF_OK, &r, "class");
        try_edit_w(t, img, size, tot + i, 1, 0, OLIF_ERR_CORRUPT, &r, "total 0");
        if (img[tot + i] != 255) try_edit_w(t, img, size, tot + i, 1, 255, OLIF_ERR_CORRUPT, &r, "escape without entry");
        try_edit_w(t, img, size, win + i, 1, 0, OLIF_ERR_CORRUPT, &r, "winner 0");
        if (img[tot + i] < 254 && img[win + i] < 255)
            try_edit_w(t, img, size, win + i, 1, img[tot + i] + 1u, OLIF_ERR_CORRUPT, &r, "winner > total");
        try_edit_w(t, img, size, tot + i, 1, rng_below(&r, 255), OLIF_OK, &r, "total");
    }
    for (uint32_t e = 0; e < tesc; e++) {
        try_edit_w(t, img, size, te + 8 * (size_t)e + 4, 4, 254, OLIF_ERR_CORRUPT, &r, "escape below 255");
        try_edit_w(t, img, size, te + 8 * (size_t)e, 4, n, OLIF_ERR_CORRUPT, &r, "escape node out of range");
        try_edit_w(t, img, size, te + 8 * (size_t)e + 4, 4, get32(img, te + 8 * (size_t)e + 4) + 1, OLIF_OK,
                   &r, "escape value");
    }
    /* stored classes */
    for (uint32_t i = 0; i <= n; i += 1 + i / 16) {
        try_edit_w(t, img, size, dist + 4 * (size_t)i, 4, n_pairs + 1, OLIF_ERR_CORRUPT, &r, "class index");
        try_edit_w(t, img, size, dist + 4 * (size_t)i, 4, get32(img, dist + 4 * (size_t)i) + 1, OLIF_OK, &r,
                   "class index +1");
    }
    for (uint32_t p = 0; p < n_pairs; p += 1 + p / 16) {
        try_edit_w(t, img, size, pcls + 2 * (size_t)p, 2, 24, OLIF_ERR_CORRUPT, &r, "stored class == vocab");
        try_edit_w(t, img, size, pcls + 2 * (size_t)p, 2, rng_below(&r, 24), OLIF_OK, &r, "stored class");
        try_edit_w(t, img, size, pcnt + 4 * (size_t)p, 4, 0, OLIF_ERR_CORRUPT, &r, "stored count 0");
        try_edit_w(t, img, size, pcnt + 4 * (size_t)p, 4, UINT32_MAX, OLIF_ERR_CORRUPT, &r, "stored count huge");
    }
    /* padding: the last byte of the file lies past the last section */
    CHECK(t, img[size - 1] == 0, "no padding at the end of the file");
    try_edit_w(t, img, size, size - 1, 1, 0x5a, OLIF_ERR_CORRUPT, &r, "last padding byte");
    free(img);
}

/* Mutants of a valid image, checksums recomputed so that the structural
 * validation decides: every one is refused with a file error or loads into
 * a model that keeps its guarantees (under the sanitizers: no bad access). */
static unsigned long mutants_of(T *t, uint32_t version, unsigned long *loaded_out) {
    uint32_t *rows = NULL;
    igt_model *m = random_model(t, 141 + version, 4, 24, 700, 3, &rows);
    if (!m) { free(rows); return 0; }
    size_t size = 0;
    uint8_t *img = model_bytes_v(t, m, version, &size);
    if (!img) { igt_free(m); free(rows); return 0; }
    rng_t r = rng_seed(142 + version);
    unsigned long mutants = 0, loaded = 0;
    igt_error err;
#define MUTANT(copy, len, what)                                                                    \
    do {                                                                                           \
        igt_model *x_ = NULL;                                                                      \
        igt_status st_ = igt_load_buffer((copy), (len), 0, &x_, &err);                             \
        mutants++;                                                                                 \
        if (st_ == OLIF_OK) {                                                                       \
            loaded++;                                                                              \
            CHECK(t, exercise(x_, &r, 12) == 0, "%s: model broke its guarantees", (what));         \
            igt_free(x_);                                                                          \
        } else {                                                                                   \
            CHECK(t, x_ == NULL && err.code == (int)st_ && err.message[0] &&                       \
                         (st_ == OLIF_ERR_FOREIGN || st_ == OLIF_ERR_VERSION ||                       \
                          st_ == OLIF_ERR_TRUNCATED || st_ == OLIF_ERR_CORRUPT),                     \
                  "%s: status %d (%s)", (what), (int)st_, err.message);                            \
        }                                                                                          \
    } while (0)
    /* every truncation */
    for (size_t len = 0; len < size; len++) {
        uint8_t *cut = dup_bytes(img, len);
        MUTANT(cut, len, "truncation");
        free(cut);
    }
    /* every byte changed (checksum fields too: re-sealing repairs those) */
    for (size_t pos = 0; pos < size; pos++) {
        uint8_t *copy = dup_bytes(img, size);
        copy[pos] ^= (uint8_t)(1 + rng_below(&r, 255));
        reseal(copy, size);
        MUTANT(copy, size, "byte change");
        free(copy);
    }
    /* header words set to telling values */
    const uint64_t n_nodes = get64(img, version == 1 ? OFF_N_NODES : V2_OFF_N_NODES);
    const uint64_t values[] = {0, 1, 2, 3, 255, 256, 65535, 65536, n_nodes - 1, n_nodes, n_nodes + 1,
                               size, size - 64, size + 64, UINT32_MAX, (uint64_t)UINT32_MAX + 1, UINT64_MAX};
    for (size_t off = 8; off + 8 <= HEADER_SIZE; off += 4)
        for (size_t v = 0; v < sizeof values / sizeof *values; v++)
            for (int wide = 0; wide < 2; wide++) {
                if (wide && off % 8) continue;
                uint8_t *copy = dup_bytes(img, size);
                if (wide) put64(copy, off, values[v]); else put32(copy, off, (uint32_t)values[v]);
                reseal(copy, size);
                MUTANT(copy, size, "header field");
                free(copy);
            }
    /* several random bytes of the payload */
    for (int it = 0; it < 1500; it++) {
        uint8_t *copy = dup_bytes(img, size);
        int edits = 1 + (int)rng_below(&r, 6);
        for (int e = 0; e < edits; e++)
            copy[HEADER_SIZE + rng_below(&r, (uint32_t)(size - HEADER_SIZE))] = (uint8_t)rng_next(&r);
        reseal(copy, size);
        MUTANT(copy, size, "payload damage");
        free(copy);
    }
#undef MUTANT
    free(img);
    free(rows);
    igt_free(m);
    *loaded_out += loaded;
    return mutants;
}

static void test_mutations(T *t) {
    unsigned long loaded = 0, n2 = mutants_of(t, 2, &loaded), n1 = mutants_of(t, 1, &loaded);
    CHECK(t, n2 >= 1000 && n1 >= 1000, "only %lu + %lu mutants", n2, n1);
    CHECK(t, loaded > 0, "no mutant loaded: the payload edits never reached the queries");
    printf("     mutants: %lu of version 2, %lu of version 1, %lu loaded and queried safely\n", n2, n1,
           loaded);
}

/* ---- tests: hardening ------------------------------------------------------------------------ */

/* Entries of the scratch directory other than the names given. */
static int stray_entries(T *t, const char *const *keep, size_t n_keep, char *first, size_t cap) {
    DIR *d = opendir(t->dir);
    if (!d) return -1;
    int stray = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        int known = 0;
        for (size_t i = 0; i < n_keep; i++) known |= strcmp(e->d_name, keep[i]) == 0;
        if (!known) {
            if (!stray && first) snprintf(first, cap, "%s", e->d_name);
            stray++;
        }
    }
    closedir(d);
    return stray;
}

static int dir_is_empty(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n == 0;
}

/* A loaded model never reads its file again: truncating, rewriting or
 * removing the file changes nothing (a shared mapping would SIGBUS or answer
 * from unvalidated bytes). */
static void test_file_changes(T *t) {
    uint32_t *rows = NULL;
    igt_model *m = random_model(t, 151, 4, 30, 1200, 3, &rows);
    igt_model *other = random_model(t, 152, 4, 30, 1500, IGT_TOPK_ALL, NULL);
    if (!m || !other) goto out;
    char path[1024];
    path_in(t, path, sizeof path, "changing.olif");
    igt_error err;
    CHECK_STATUS(t, igt_save(m, path, &err), OLIF_OK, &err, "save");
    igt_model *x = NULL;
    CHECK_STATUS(t, igt_load(path, 0, &x, &err), OLIF_OK, &err, "load");
    if (!x) goto out;
    CHECK(t, truncate(path, 0) == 0, "truncate %s", path);
    CHECK(t, compare_models(m, x, 153, 500, rows, 1200) == 0, "answers changed after truncation");
    size_t osize = 0;
    uint8_t *obytes = model_bytes(t, other, &osize);
    CHECK(t, obytes && write_file(path, obytes, osize), "rewrite %s in place", path);
    CHECK(t, compare_models(m, x, 154, 500, rows, 1200) == 0, "answers changed after the file was rewritten");
    uint8_t junk[4096];
    memset(junk, 0xff, sizeof junk);
    CHECK(t, write_file(path, junk, sizeof junk), "rewrite %s with junk", path);
    CHECK(t, compare_models(m, x, 155, 500, rows, 1200) == 0, "answers changed after junk was written");
    remove(path);
    CHECK(t, compare_models(m, x, 156, 500, rows, 1200) == 0, "answers changed after removal");
    free(obytes);
    igt_free(x);
out:
    igt_free(m);
    igt_free(other);
    free(rows);
}

/* FIFOs, directories and devices are refused before a byte is read, fast,
 * with the path in the message. */
static void test_special_files(T *t) {
    char fifo[1024], link[1024], model[1024];
    path_in(t, fifo, sizeof fifo, "model.fifo");
    path_in(t, link, sizeof link, "link.olif");
    path_in(t, model, sizeof model, "real.olif");
    igt_error err;
    igt_model *x = NULL;
    alarm(60);      /* a hang fails the run instead of stalling it */
    if (mkfifo(fifo, 0600) == 0) {
        CHECK_STATUS(t, igt_load(fifo, 0, &x, &err), OLIF_ERR_IO, &err, "FIFO");
        CHECK(t, strstr(err.message, fifo) && strstr(err.message, "FIFO"), "FIFO message: %s", err.message);
        remove(fifo);
    } else {
        CHECK(t, 0, "mkfifo %s: %s", fifo, strerror(errno));
    }
    CHECK_STATUS(t, igt_load(t->dir, 0, &x, &err), OLIF_ERR_IO, &err, "directory");
    CHECK(t, strstr(err.message, t->dir) && strstr(err.message, "directory"), "directory message: %s",
          err.message);
    struct stat st;
    if (stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode)) {
        CHECK_STATUS(t, igt_load("/dev/null", 0, &x, &err), OLIF_ERR_IO, &err, "character device");
        CHECK(t, strstr(err.message, "/dev/null") && strstr(err.message, "device"), "device message: %s",
              err.message);
    }
    /* a symlink to a model is fine */
    igt_model *m = random_model(t, 161, 3, 10, 100, 0, NULL);
    if (m) {
        CHECK_STATUS(t, igt_save(m, model, &err), OLIF_OK, &err, "save");
        CHECK(t, symlink(model, link) == 0, "symlink");
        CHECK_STATUS(t, igt_load(link, 0, &x, &err), OLIF_OK, &err, "symlink to a model");
        igt_free(x);
        x = NULL;
        remove(link);
        remove(model);
    }
    igt_free(m);
    alarm(0);
}

static int probe_tmpfile(const char *dir) {
#ifdef O_TMPFILE
    int fd = open(dir, O_TMPFILE | O_WRONLY, 0600);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
#endif
    (void)dir;
    return 0;
}

static int same_file_bytes(const char *path, const uint8_t *want, size_t size) {
    size_t got = 0;
    uint8_t *data = read_file(path, &got);
    int same = data && got == size && memcmp(data, want, size) == 0;
    free(data);
    return same;
}

/* igt_save never follows a planted link, leaves no temporary file on error
 * or kill, keeps the old file on failure, and survives concurrent saves. */
static void test_save_safety(T *t) {
    igt_model *a = random_model(t, 171, 4, 30, 600, 0, NULL);
    igt_model *b = random_model(t, 172, 4, 30, 3000, IGT_TOPK_ALL, NULL);
    if (!a || !b) { igt_free(a); igt_free(b); return; }
    size_t sa = 0, sb = 0;
    uint8_t *ia = model_bytes(t, a, &sa), *ib = model_bytes(t, b, &sb);
    char out[1024], planted[1100], victim[1024], link[1024], victim2[1024], first[256];
    path_in(t, out, sizeof out, "out.olif");
    snprintf(planted, sizeof planted, "%s.tmp", out);
    path_in(t, victim, sizeof victim, "victim");
    path_in(t, link, sizeof link, "link.olif");
    path_in(t, victim2, sizeof victim2, "victim2");
    igt_error err;
    /* 1. a symlink planted where the old code wrote its temporary file */
    CHECK(t, write_file(victim, "victim", 6) && symlink(victim, planted) == 0, "plant %s", planted);
    CHECK_STATUS(t, igt_save(a, out, &err), OLIF_OK, &err, "save next to a planted link");
    CHECK(t, same_file_bytes(victim, (const uint8_t *)"victim", 6), "the link's target was overwritten");
    struct stat st;
    CHECK(t, lstat(out, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600,
          "saved file: mode %o", (unsigned)st.st_mode);
    CHECK(t, same_file_bytes(out, ia, sa), "saved bytes differ");
    /* 2. saving over a symlink replaces the link, not its target */
    CHECK(t, write_file(victim2, "victim2", 7) && symlink(victim2, link) == 0, "symlink %s", link);
    CHECK_STATUS(t, igt_save(a, link, &err), OLIF_OK, &err, "save over a symlink");
    CHECK(t, same_file_bytes(victim2, (const uint8_t *)"victim2", 7), "a symlink's target was overwritten");
    CHECK(t, lstat(link, &st) == 0 && S_ISREG(st.st_mode), "the symlink was not replaced by the model");
    remove(link);
    remove(victim2);
    const char *keep[] = {"out.olif", "out.olif.tmp", "victim"};
    CHECK(t, stray_entries(t, keep, 3, first, sizeof first) == 0, "left behind: %s", first);
    /* 3. a write error (file size limit): old file intact, nothing left */
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = {4096, 4096};
        signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &rl);
        igt_error e2;
        igt_status s2 = igt_save(b, out, &e2);
        _exit(s2 == OLIF_ERR_IO && strstr(e2.message, "out.olif") ? 0 : 10 + (int)s2);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(t, WIFEXITED(status) && WEXITSTATUS(status) == 0, "failing save: child status %d", status);
    CHECK(t, same_file_bytes(out, ia, sa), "a failed save damaged the old file");
    CHECK(t, stray_entries(t, keep, 3, first, sizeof first) == 0, "a failed save left %s", first);
    /* 4. killed in the middle of writing (SIGXFSZ ends the process) */
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        struct rlimit rl = {8192, 8192};
        signal(SIGXFSZ, SIG_DFL);
        setrlimit(RLIMIT_FSIZE, &rl);
        igt_save(b, out, NULL);
        _exit(3);
    }
    waitpid(pid, &status, 0);
    CHECK(t, WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ, "the saving child was not killed (%d)", status);
    CHECK(t, same_file_bytes(out, ia, sa), "a killed save damaged the old file");
    int stray = stray_entries(t, keep, 3, first, sizeof first);
    if (probe_tmpfile(t->dir)) CHECK(t, stray == 0, "a killed save left %s (O_TMPFILE available)", first);
    else if (stray) {       /* named temporary files: remove what the kill left */
        char p[1300];
        snprintf(p, sizeof p, "%s/%s", t->dir, first);
        remove(p);
    }
    /* 5. two processes saving to the same path at once */
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        int bad = 0;
        for (int i = 0; i < 25; i++) bad += igt_save(a, out, NULL) != OLIF_OK;
        _exit(bad);
    }
    int bad = 0;
    for (int i = 0; i < 25; i++) bad += igt_save(b, out, &err) != OLIF_OK;
    waitpid(pid, &status, 0);
    CHECK(t, bad == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "concurrent saves failed: %d here, child status %d", bad, status);
    CHECK(t, same_file_bytes(out, ia, sa) || same_file_bytes(out, ib, sb), "concurrent saves mixed files");
    CHECK(t, stray_entries(t, keep, 3, first, sizeof first) == 0, "concurrent saves left %s", first);
    remove(out);
    remove(planted);
    remove(victim);
    free(ia);
    free(ib);
    igt_free(a);
    igt_free(b);
}

/* Every query entry point with bad pointers and extreme counts. */
static void test_query_preconditions(T *t) {
    uint32_t *rows = NULL;
    igt_model *m = random_model(t, 181, 4, 20, 500, 2, &rows);
    if (!m) { free(rows); return; }
    igt_info info;
    igt_get_info(m, &info);
    uint32_t ctx[4] = {1, 2, 3, 4}, toks[8], cls[4], cnt[4];
    igt_answer a, batch[3];
    memset(&a, 0x55, sizeof a);
    igt_predict(NULL, ctx, 4, &a);
    CHECK(t, a.token == IGT_NO_TOKEN && a.depth == 0 && a.total == 0, "NULL model: token %u", a.token);
    memset(&a, 0x55, sizeof a);
    igt_predict(m, NULL, 3, &a);
    CHECK(t, a.token == IGT_NO_TOKEN, "NULL context with n = 3: token %u", a.token);
    igt_predict(m, NULL, 0, &a);
    CHECK(t, a.token < info.vocab_size, "NULL context with n = 0 is the empty context");
    igt_predict(m, ctx, 4, NULL);   /* nothing to write: nothing happens */
    igt_predict_batch(NULL, ctx, 1, batch);
    CHECK(t, batch[0].token == IGT_NO_TOKEN, "batch, NULL model");
    igt_predict_batch(m, NULL, 3, batch);
    CHECK(t, batch[0].token == IGT_NO_TOKEN && batch[2].token == IGT_NO_TOKEN, "batch, NULL rows");
    igt_predict_batch(m, ctx, 1, NULL);
    igt_predict_batch(m, NULL, 0, NULL);
    CHECK(t, igt_draft(NULL, ctx, 4, 5, 0, 0.0, toks, NULL) == 0, "draft, NULL model");
    CHECK(t, igt_draft(m, ctx, 4, 5, 0, 0.0, NULL, NULL) == 0, "draft, NULL tokens");
    CHECK(t, igt_draft(m, NULL, 2, 5, 0, 0.0, toks, NULL) == 0, "draft, NULL context with n = 2");
    CHECK(t, igt_draft(m, NULL, 0, 5, 0, 0.0, toks, NULL) == 5, "draft, empty context");
    CHECK(t, igt_draft(m, ctx, 4, 0, 0, 0.0, NULL, NULL) == 0, "draft, k = 0");
    CHECK(t, igt_draft(m, ctx, 4, 8, 0, NAN, toks, NULL) == 8, "draft, NaN min_share never stops");
    CHECK(t, igt_draft(m, ctx, 4, 8, UINT32_MAX, 0.0, toks, NULL) == 0, "draft, huge min_depth");
    CHECK(t, igt_draft(m, ctx, 4, 8, 0, INFINITY, toks, NULL) == 0, "draft, infinite min_share");
    uint32_t extreme[4] = {UINT32_MAX, UINT32_MAX - 1, info.vocab_size, info.vocab_size + 1};
    igt_predict(m, extreme, 4, &a);
    CHECK(t, a.token == info.default_class && a.depth == 0, "extreme ids match nothing");
    size_t have = igt_node_classes(m, 0, NULL, NULL, 0);
    CHECK(t, have == 2 && igt_node_classes(m, 0, cls, NULL, 4) == 2 &&
             igt_node_classes(m, 0, NULL, cnt, 4) == 2 && cls[0] == info.default_class,
          "node_classes with one output");
    CHECK(t, igt_node_classes(m, (uint32_t)info.n_nodes + 1, cls, cnt, 4) == 0 &&
             igt_node_classes(m, UINT32_MAX, cls, cnt, 4) == 0 && igt_node_classes(NULL, 0, cls, cnt, 4) == 0,
          "node_classes out of range");
    igt_info z;
    memset(&z, 0x55, sizeof z);
    igt_get_info(NULL, &z);
    CHECK(t, z.window == 0 && z.n_nodes == 0 && z.tokenizer_name[0] == 0, "info of NULL is zero");
    igt_get_info(m, NULL);
    igt_config_init(NULL, 10);
    igt_free(m);
    free(rows);
}

static void test_version_api(T *t) {
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", IGT_VERSION_MAJOR, IGT_VERSION_MINOR, IGT_VERSION_PATCH);
    CHECK(t, igt_version() && strcmp(igt_version(), IGT_VERSION_STRING) == 0 &&
             strcmp(IGT_VERSION_STRING, want) == 0,
          "version '%s', header says %s (%s)", igt_version() ? igt_version() : "(null)",
          IGT_VERSION_STRING, want);
    CHECK(t, igt_version_number() == IGT_VERSION_NUMBER &&
             IGT_VERSION_NUMBER == IGT_VERSION_MAJOR * 10000 + IGT_VERSION_MINOR * 100 + IGT_VERSION_PATCH,
          "version number %u", igt_version_number());
}

/* Many threads query one model at once; every answer equals the
 * single-threaded one. */
typedef struct {
    const igt_model *m;
    const uint32_t *ctx;        /* Q contexts of 6 ids */
    const igt_answer *want;     /* predict of each */
    const uint32_t *drafts;     /* Q x 6 */
    const uint32_t *classes;    /* Q x 4 */
    int q, rounds;
    unsigned long bad;
} query_job;

enum { QN = 1500, QCTX = 6, QDRAFT = 6, QCLS = 4 };

static void *query_worker(void *arg) {
    query_job *j = arg;
    for (int round = 0; round < j->rounds; round++)
        for (int i = 0; i < j->q; i++) {
            int q = (i * 7 + round * 131) % j->q;    /* each thread its own order */
            igt_answer a, b[2];
            igt_predict(j->m, j->ctx + q * QCTX, QCTX, &a);
            j->bad += !same_answer(&a, &j->want[q]);
            igt_predict_batch(j->m, j->ctx + q * QCTX + 2, 1, b);
            j->bad += !same_answer(&b[0], &j->want[q]);
            uint32_t toks[QDRAFT], cls[QCLS], cnt[QCLS];
            size_t got = igt_draft(j->m, j->ctx + q * QCTX, QCTX, QDRAFT, 0, 0.0, toks, NULL);
            j->bad += got != QDRAFT || memcmp(toks, j->drafts + q * QDRAFT, sizeof toks) != 0;
            size_t nc = igt_node_classes(j->m, a.node, cls, cnt, QCLS);
            for (size_t k = 0; k < nc && k < QCLS; k++) j->bad += cls[k] != j->classes[q * QCLS + k];
        }
    return NULL;
}

static void test_concurrent_queries(T *t) {
    uint32_t *rows = NULL;
    igt_model *m = random_model(t, 191, 4, 30, 3000, 4, &rows);
    if (!m) { free(rows); return; }
    rng_t r = rng_seed(192);
    uint32_t *ctx = malloc(QN * QCTX * sizeof *ctx), *drafts = malloc(QN * QDRAFT * sizeof *drafts),
             *classes = calloc(QN * QCLS, sizeof *classes);
    igt_answer *want = malloc(QN * sizeof *want);
    for (int q = 0; q < QN; q++) {
        for (int i = 0; i < QCTX; i++) ctx[q * QCTX + i] = query_id(&r, 30);
        if (q & 1) memcpy(ctx + q * QCTX + 2, rows + rng_below(&r, 3000) * 5, 4 * sizeof *ctx);
        igt_predict(m, ctx + q * QCTX, QCTX, &want[q]);
        igt_draft(m, ctx + q * QCTX, QCTX, QDRAFT, 0, 0.0, drafts + q * QDRAFT, NULL);
        uint32_t cnt[QCLS];
        igt_node_classes(m, want[q].node, classes + q * QCLS, cnt, QCLS);
    }
    enum { THREADS = 8 };
    pthread_t tid[THREADS];
    query_job jobs[THREADS];
    int started = 0;
    for (int k = 0; k < THREADS; k++) {
        jobs[k] = (query_job){m, ctx, want, drafts, classes, QN, 3, 0};
        started += pthread_create(&tid[k], NULL, query_worker, &jobs[k]) == 0;
    }
    CHECK(t, started == THREADS, "started %d of %d threads", started, THREADS);
    unsigned long bad = 0;
    for (int k = 0; k < started; k++) {
        pthread_join(tid[k], NULL);
        bad += jobs[k].bad;
    }
    CHECK(t, bad == 0, "%lu answers differ between threads and the single-threaded run", bad);
    free(ctx);
    free(drafts);
    free(classes);
    free(want);
    free(rows);
    igt_free(m);
}

/* ---- tests: building with threads and a memory limit ------------------------------------------- */

typedef struct {
    const char *spill_dir;
    int calls, nonempty, merged, cancel_at_call;
    const char *cancel_phase;
} spill_watch;

/* Checks, at every progress report, that the temporary directory holds no
 * names (the files are unlinked at once); optionally cancels. */
static int watch_spill(void *user, const char *phase, uint64_t done, uint64_t total) {
    spill_watch *w = user;
    (void)done;
    (void)total;
    w->calls++;
    if (!dir_is_empty(w->spill_dir)) w->nonempty++;
    if (!strcmp(phase, "merging")) w->merged++;
    if (w->cancel_phase && !strcmp(phase, w->cancel_phase)) return 1;
    return w->cancel_at_call && w->calls >= w->cancel_at_call;
}

typedef struct {
    const uint32_t *rows;
    size_t n_rows;
    const uint32_t *tokens;
    size_t n_tokens;
    const uint64_t *starts;
    size_t n_docs;
} corpus_t;

static igt_status build_corpus(const corpus_t *c, uint32_t F, uint32_t V, uint32_t top_k,
                               uint32_t threads, uint64_t limit, const char *dir, spill_watch *w,
                               igt_model **out, igt_error *err) {
    igt_config cfg;
    igt_config_init(&cfg, V);
    cfg.window = F;
    cfg.top_k = top_k;
    igt_builder *b = NULL;
    igt_status st = igt_builder_new(&cfg, &b, err);
    if (!st) st = igt_builder_set_threads(b, threads, err);
    if (!st && limit) st = igt_builder_set_memory_limit(b, limit, dir, err);
    for (size_t i = 0; !st && i < c->n_rows; i += 777)
        st = igt_builder_add_instances(b, c->rows + i * (F + 1), c->n_rows - i < 777 ? c->n_rows - i : 777, err);
    if (!st && c->n_tokens) st = igt_builder_add_documents(b, c->tokens, c->n_tokens, c->starts, c->n_docs, err);
    if (!st) st = igt_builder_build(b, out, w ? watch_spill : NULL, w, err);
    igt_builder_free(b);
    return st;
}

static void test_memory_limit(T *t) {
    const uint32_t F = 4, V = 40;
    char dir[1024];
    path_in(t, dir, sizeof dir, "spill");
    CHECK(t, mkdir(dir, 0700) == 0, "mkdir %s", dir);
    rng_t r = rng_seed(201);
    const size_t NR = 6000;
    uint32_t *rows = random_instances(&r, F, V, NR);     /* independent rows: one segment each */
    enum { NT = 24000, ND = 7 };
    uint32_t *tokens = malloc(NT * sizeof *tokens);
    uint64_t starts[ND] = {0, 10, 7010, 7011, 12000, 19000, 19500};  /* one document of 7000 */
    for (size_t i = 0; i < NT; i++) tokens[i] = (i % 97 < 60) ? (uint32_t)(i % 13) : rng_below(&r, V);
    /* the documents as continuing rows (each row continues the previous) */
    uint32_t *drows = malloc(NT * (F + 1) * sizeof *drows);
    for (size_t d = 0, at = 0; d < ND; d++) {
        size_t s = starts[d], e = d + 1 < ND ? starts[d + 1] : NT;
        for (size_t i = s; i < e; i++, at++) {
            for (uint32_t j = 0; j < F; j++) drows[at * (F + 1) + j] = i - s >= F - j ? tokens[i - (F - j)] : V;
            drows[at * (F + 1) + F] = tokens[i];
        }
    }
    const corpus_t corpora[3] = {{rows, NR, NULL, 0, NULL, 0},
                                 {NULL, 0, tokens, NT, starts, ND},
                                 {drows, NT, NULL, 0, NULL, 0}};
    const uint32_t topks[3] = {0, 3, IGT_TOPK_ALL};
    igt_error err;
    for (int c = 0; c < 3; c++) {
        igt_model *ref = NULL;
        CHECK_STATUS(t, build_corpus(&corpora[c], F, V, topks[c], 1, 0, NULL, NULL, &ref, &err), OLIF_OK,
                     &err, "unbounded build");
        if (!ref) continue;
        size_t rs = 0;
        uint8_t *rb = model_bytes(t, ref, &rs);
        const uint64_t limits[] = {IGT_MIN_MEMORY_LIMIT, 150000, 1u << 30};
        const uint32_t threads[] = {1, 2, 3};
        for (int l = 0; l < 3; l++)
            for (int k = 0; k < 3; k++) {
                spill_watch w = {dir, 0, 0, 0, 0, NULL};
                igt_model *m = NULL;
                char what[128];
                snprintf(what, sizeof what, "corpus %d, limit %llu, %u threads", c,
                         (unsigned long long)limits[l], threads[k]);
                CHECK_STATUS(t, build_corpus(&corpora[c], F, V, topks[c], threads[k], limits[l], dir, &w, &m,
                                             &err), OLIF_OK, &err, what);
                if (!m) continue;
                size_t ms = 0;
                uint8_t *mb = model_bytes(t, m, &ms);
                CHECK(t, mb && rb && ms == rs && memcmp(mb, rb, rs) == 0, "%s: model differs from the unbounded one",
                      what);
                CHECK(t, w.nonempty == 0 && dir_is_empty(dir), "%s: temporary names visible", what);
                if (l == 0) CHECK(t, w.merged > 0, "%s: the smallest limit should need merge passes", what);
                free(mb);
                igt_free(m);
            }
        free(rb);
        igt_free(ref);
    }
    /* cancelling in each phase of a spilled build leaves nothing behind */
    const char *phases[] = {"statistics", "sorting", "merging", "building", "writing"};
    for (int p = 0; p < 5; p++) {
        spill_watch w = {dir, 0, 0, 0, 0, phases[p]};
        igt_model *m = (igt_model *)(uintptr_t)1;
        CHECK_STATUS(t, build_corpus(&corpora[1], F, V, 3, 2, IGT_MIN_MEMORY_LIMIT, dir, &w, &m, &err),
                     OLIF_ERR_CANCELLED, &err, phases[p]);
        CHECK(t, m == NULL && dir_is_empty(dir), "cancel at %s left a model or files", phases[p]);
    }
    for (int call = 1; call < 12; call += 3) {
        spill_watch w = {dir, 0, 0, 0, call, NULL};
        igt_model *m = NULL;
        CHECK_STATUS(t, build_corpus(&corpora[0], F, V, 0, 2, IGT_MIN_MEMORY_LIMIT, dir, &w, &m, &err),
                     OLIF_ERR_CANCELLED, &err, "cancel at a report");
        CHECK(t, dir_is_empty(dir), "cancel at report %d left files", call);
    }
    /* argument errors */
    igt_config cfg;
    igt_config_init(&cfg, V);
    igt_builder *b = NULL;
    CHECK_STATUS(t, igt_builder_new(&cfg, &b, &err), OLIF_OK, &err, "builder_new");
    CHECK_STATUS(t, igt_builder_set_memory_limit(b, IGT_MIN_MEMORY_LIMIT - 1, dir, &err), OLIF_ERR_ARG, &err,
                 "limit below the minimum");
    char file[1100];
    snprintf(file, sizeof file, "%s/plain-file", t->dir);
    CHECK(t, write_file(file, "x", 1), "write %s", file);
    CHECK_STATUS(t, igt_builder_set_memory_limit(b, 1 << 20, file, &err), OLIF_ERR_ARG, &err, "tmpdir is a file");
    CHECK(t, strstr(err.message, "plain-file") != NULL, "message names the directory: %s", err.message);
    remove(file);
    CHECK_STATUS(t, igt_builder_set_memory_limit(b, 1 << 20, "/no/such/dir/olifant", &err), OLIF_ERR_IO, &err,
                 "missing tmpdir");
    CHECK_STATUS(t, igt_builder_set_memory_limit(NULL, 1 << 20, dir, &err), OLIF_ERR_ARG, &err, "NULL builder");
    CHECK_STATUS(t, igt_builder_add_instances(b, rows, 1, &err), OLIF_OK, &err, "add");
    CHECK_STATUS(t, igt_builder_set_memory_limit(b, 1 << 20, dir, &err), OLIF_ERR_ARG, &err, "limit after adding");
    CHECK_STATUS(t, igt_builder_set_threads(b, IGT_MAX_THREADS + 1, &err), OLIF_ERR_ARG, &err, "too many threads");
    CHECK_STATUS(t, igt_builder_set_threads(NULL, 1, &err), OLIF_ERR_ARG, &err, "threads, NULL builder");
    igt_builder_free(b);
    /* the temporary directory disappears: the spill fails, the builder says so */
    char gone[1100];
    snprintf(gone, sizeof gone, "%s/gone", t->dir);
    CHECK(t, mkdir(gone, 0700) == 0, "mkdir %s", gone);
    CHECK_STATUS(t, igt_builder_new(&cfg, &b, &err), OLIF_OK, &err, "builder_new");
    CHECK_STATUS(t, igt_builder_set_memory_limit(b, IGT_MIN_MEMORY_LIMIT, gone, &err), OLIF_OK, &err, "limit");
    rmdir(gone);
    igt_status st = OLIF_OK;
    for (size_t i = 0; i < NR && st == OLIF_OK; i += 500) st = igt_builder_add_instances(b, rows + i * 5, 500, &err);
    CHECK_STATUS(t, st, OLIF_ERR_IO, &err, "spill into a removed directory");
    CHECK_ERROR(t, igt_builder_add_instances(b, rows, 1, &err), &err, "add after a failed spill");
    CHECK(t, strstr(err.message, "failed earlier") != NULL, "message: %s", err.message);
    igt_model *m = NULL;
    CHECK_ERROR(t, igt_builder_build(b, &m, NULL, NULL, &err), &err, "build after a failed spill");
    igt_builder_free(b);
    CHECK(t, dir_is_empty(dir), "files left in %s", dir);
    rmdir(dir);
    free(rows);
    free(tokens);
    free(drows);
}

/* The model does not depend on the number of threads. */
static void test_threads_build(T *t) {
    const uint32_t F = 5, V = 60;
    rng_t r = rng_seed(211);
    const size_t N = 8000;
    uint32_t *rows = random_instances(&r, F, V, N);
    const corpus_t c = {rows, N, NULL, 0, NULL, 0};
    igt_error err;
    uint8_t *ref = NULL;
    size_t rs = 0;
    const uint32_t threads[] = {1, 0, 2, 3, 7, IGT_MAX_THREADS};
    for (int k = 0; k < 6; k++) {
        igt_model *m = NULL;
        CHECK_STATUS(t, build_corpus(&c, F, V, 2, threads[k], 0, NULL, NULL, &m, &err), OLIF_OK, &err,
                     "threaded build");
        if (!m) continue;
        size_t ms = 0;
        uint8_t *mb = model_bytes(t, m, &ms);
        if (!ref) {
            ref = mb;
            rs = ms;
        } else {
            CHECK(t, mb && ms == rs && memcmp(mb, ref, rs) == 0, "%u threads: model differs", threads[k]);
            free(mb);
        }
        igt_free(m);
    }
    free(ref);
    free(rows);
}

/* ---- main --------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    void (*fn)(T *);
} test_case;

int main(int argc, char **argv) {
    const test_case tests[] = {
        {"status_strings", test_status_strings},
        {"config_errors", test_config_errors},
        {"builder_errors", test_builder_errors},
        {"predict_training_contexts", test_predict_training_contexts},
        {"top_k", test_top_k},
        {"draft", test_draft},
        {"documents", test_documents},
        {"orders_and_windows", test_orders_and_windows},
        {"file_layout", test_file_layout},
        {"save_load_roundtrip", test_save_load_roundtrip},
        {"load_errors", test_load_errors},
        {"truncation", test_truncation},
        {"version", test_version},
        {"header_fields", test_header_fields},
        {"structure_edits", test_structure_edits},
        {"byte_flips", test_byte_flips},
        {"file_layout_v2", test_file_layout_v2},
        {"id_widths", test_id_widths},
        {"id_width_4", test_id_width_4},
        {"v1_compat", test_v1_compat},
        {"header_fields_v2", test_header_fields_v2},
        {"structure_edits_v2", test_structure_edits_v2},
        {"mutations", test_mutations},
        {"file_changes", test_file_changes},
        {"special_files", test_special_files},
        {"save_safety", test_save_safety},
        {"query_preconditions", test_query_preconditions},
        {"version_api", test_version_api},
        {"concurrent_queries", test_concurrent_queries},
        {"memory_limit", test_memory_limit},
        {"threads_build", test_threads_build},
    };
    char made[] = "/tmp/igtree-test-XXXXXX";
    T t = {NULL, 0, 0, NULL};
    int own_dir = argc < 2;
    if (own_dir) {
        if (!mkdtemp(made)) { perror("mkdtemp"); return 2; }
        t.dir = made;
    } else {
        t.dir = argv[1];
    }
    const char *only = argc > 2 ? argv[2] : NULL;   /* optional: run one test */
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
        fflush(stdout);
    }
    if (own_dir) rmdir(made);
    printf("%lu checks\n", t.checks);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
