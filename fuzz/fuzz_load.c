/*
 * fuzz_load.c — libFuzzer harness for the IGTree model loader (igtree.h).
 *
 * Each input is a candidate model file (format 2, or format 1, which is
 * converted on load). It is loaded with igt_load_buffer, once with checksums
 * and once with IGT_LOAD_SKIP_CHECKSUM, so that mutated files reach the
 * structural validation instead of stopping at the checksum. A model that
 * loads is then queried (predict, predict_batch, draft, node_classes) with
 * contexts taken from the input bytes and from its own drafts, and every
 * answer is checked against what the loader guarantees; it is also written
 * back out (both formats) and must reload into the same model. Sanitizers
 * catch out-of-bounds reads; a broken guarantee traps.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *         -pthread -Icsrc fuzz/fuzz_load.c csrc/igt*.c csrc/olif_file.c -lm -o fuzz/out/fuzz_load
 *
 * See fuzz/README.md.
 */
#include "igtree.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define REQUIRE(cond) do { if (!(cond)) __builtin_trap(); } while (0)

/* Reads ids from the input bytes, cyclically, starting at the payload. */
typedef struct {
    const uint8_t *data;
    size_t size, pos;
    uint32_t vocab;
} id_source;

static uint8_t next_byte(id_source *s) {
    if (s->size == 0) return 0;
    uint8_t b = s->data[s->pos];
    s->pos = s->pos + 1 < s->size ? s->pos + 1 : 0;
    return b;
}

static uint32_t next_id(id_source *s) {
    uint8_t b = next_byte(s);
    switch (b >> 5) {
    case 0: return s->vocab;                          /* padding */
    case 1: return s->vocab + 1 + (b & 31);           /* never seen */
    case 2: return UINT32_MAX - (b & 1);              /* extreme */
    case 3: {                                         /* any id, two bytes */
        uint32_t v = (uint32_t)b | (uint32_t)next_byte(s) << 8;
        return v % s->vocab;
    }
    default: return (uint32_t)(b & 31) % s->vocab;    /* small ids, the common ones */
    }
}

/* What every loaded model guarantees, however damaged its payload. */
static void check_answer(const igt_answer *a, const igt_info *info) {
    REQUIRE(a->token < info->vocab_size);
    REQUIRE(a->depth <= info->window);
    REQUIRE((uint64_t)a->node <= info->n_nodes);      /* n_nodes excludes the root */
    REQUIRE(a->winner_count <= a->total);
    REQUIRE(a->leaf <= 1);
    REQUIRE(a->depth > 0 || a->node == 0);
}

static void check_classes(const igt_model *m, const igt_info *info, uint32_t node) {
    uint32_t classes[8], counts[8];
    size_t n = igt_node_classes(m, node, classes, counts, 8);
    if (info->top_k == 0 || (uint64_t)node > info->n_nodes) REQUIRE(n == 0);
    else if (info->top_k != IGT_TOPK_ALL) REQUIRE(n <= info->top_k);
}

static void query(const igt_model *m, const uint8_t *data, size_t size) {
    igt_info info;
    igt_get_info(m, &info);
    uint32_t version;
    memcpy(&version, data + 8, 4);      /* a loaded file has a full header */
    REQUIRE(info.window >= 1 && info.window <= IGT_MAX_WINDOW);
    REQUIRE(info.vocab_size >= 1 && info.vocab_size < IGT_MAX_VOCAB);
    REQUIRE(info.padding_id == info.vocab_size);
    REQUIRE(info.default_class < info.vocab_size);
    REQUIRE(info.format_version == IGT_FORMAT_VERSION);
    REQUIRE(version == 1 || info.file_size == size);   /* version 1 is converted */
    REQUIRE(info.memory_mapped == 0);
    REQUIRE(memchr(info.tokenizer_name, 0, sizeof info.tokenizer_name) != NULL);

    const uint32_t F = info.window;
    id_source src = {data, size, size > 640 ? 640 : 0, info.vocab_size};
    uint32_t ctx[IGT_MAX_WINDOW + 4 + 16], toks[16];
    igt_answer a, b, ans[16], batch[4];
    uint32_t rows[4 * IGT_MAX_WINDOW];

    for (int q = 0; q < 24; q++) {
        size_t n = next_byte(&src) % (F + 4);
        for (size_t i = 0; i < n; i++) ctx[i] = next_id(&src);

        igt_predict(m, ctx, n, &a);
        check_answer(&a, &info);
        check_classes(m, &info, a.node);

        /* drafting without thresholds always makes k; each step is a predict */
        size_t k = 1 + next_byte(&src) % 16;
        size_t got = igt_draft(m, ctx, n, k, 0, 0.0, toks, ans);
        REQUIRE(got == k);
        for (size_t i = 0; i < got; i++) {
            check_answer(&ans[i], &info);
            REQUIRE(toks[i] == ans[i].token);
            ctx[n + i] = toks[i];
            igt_predict(m, ctx, n + i, &b);
            REQUIRE(b.token == ans[i].token && b.node == ans[i].node && b.depth == ans[i].depth);
        }
        REQUIRE(ans[0].token == a.token && ans[0].node == a.node);

        /* the drafted text is in-distribution: query the window it ends with */
        igt_predict(m, ctx, n + got, &b);
        check_answer(&b, &info);
        check_classes(m, &info, b.node);

        /* thresholds only shorten a draft */
        uint32_t min_depth = next_byte(&src) % (F + 2);
        double min_share = (double)(next_byte(&src) % 5) / 4.0;
        size_t short_k = igt_draft(m, ctx, n, k, min_depth, min_share, toks, NULL);
        REQUIRE(short_k <= k);
        for (size_t i = 0; i < short_k; i++) REQUIRE(toks[i] < info.vocab_size);

        /* a batch agrees with single queries */
        for (uint32_t i = 0; i < 4 * F; i++) rows[i] = next_id(&src);
        igt_predict_batch(m, rows, 4, batch);
        for (uint32_t i = 0; i < 4; i++) {
            igt_predict(m, rows + i * F, F, &a);
            check_answer(&batch[i], &info);
            REQUIRE(a.token == batch[i].token && a.node == batch[i].node &&
                    a.depth == batch[i].depth && a.total == batch[i].total);
        }
        check_classes(m, &info, (uint32_t)(next_byte(&src) * 131u) % (uint32_t)(info.n_nodes + 3));
    }
    check_classes(m, &info, UINT32_MAX);
}

/* Written back out in both formats, the model reloads into the same one. */
static void roundtrip(const igt_model *m, const char *path) {
    igt_info a, b;
    igt_get_info(m, &a);
    for (uint32_t version = 1; version <= 2; version++) {
        igt_model *back = NULL;
        REQUIRE(igt_save_version(m, path, version, NULL) == OLIF_OK);
        REQUIRE(igt_load(path, 0, &back, NULL) == OLIF_OK);
        igt_get_info(back, &b);
        REQUIRE(memcmp(&a, &b, sizeof a) == 0);
        uint32_t q[IGT_MAX_WINDOW] = {0};
        igt_answer x, y;
        for (uint32_t v = 0; v < 4; v++) {
            for (uint32_t i = 0; i < a.window; i++) q[i] = (v * 7 + i) % (a.vocab_size + 1);
            igt_predict(m, q, a.window, &x);
            igt_predict(back, q, a.window, &y);
            REQUIRE(memcmp(&x, &y, sizeof x) == 0);
        }
        igt_free(back);
    }
    remove(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    igt_error err;
    igt_model *m = NULL;

    /* with checksums: a mutated file is refused, never a crash */
    igt_status checked = igt_load_buffer(data, size, 0, &m, &err);
    if (checked == OLIF_OK) {
        igt_free(m);
        m = NULL;
    } else {
        REQUIRE(m == NULL && err.code == (int)checked && err.message[0] != '\0');
    }

    /* without: the structural checks alone must make the model safe */
    igt_status st = igt_load_buffer(data, size, IGT_LOAD_SKIP_CHECKSUM, &m, &err);
    if (checked == OLIF_OK) REQUIRE(st == OLIF_OK);
    if (st != OLIF_OK) {
        REQUIRE(m == NULL && err.code == (int)st && st <= OLIF_ERR_CANCELLED);
        REQUIRE(err.message[0] != '\0');
        return 0;
    }
    query(m, data, size);
    if (data[size / 2] % 16 == 0) {     /* now and then: save and reload */
        char path[64];
        snprintf(path, sizeof path, "/tmp/fuzz_load.%ld.olif", (long)getpid());
        roundtrip(m, path);
    }
    igt_free(m);
    return 0;
}
