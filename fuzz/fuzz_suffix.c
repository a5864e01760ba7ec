/*
 * fuzz_suffix.c — libFuzzer harness for the retrieval file loaders (suffix.h):
 * the suffix index (OLIFSFX) and the static n-gram cache (OLIFNGC).
 *
 * Each input is a candidate file. It is loaded by both loaders, once with
 * checksums and once with SFX_LOAD_SKIP_CHECKSUM, so that mutated files reach
 * the structural validation instead of stopping at the checksum. A structure
 * that loads is queried (match, count, draft, matching statistics, places;
 * lookup, next, draft) with
 * contexts taken from the input bytes and from its own drafts, and every
 * answer is checked against what the loader guarantees. Sanitizers catch
 * out-of-bounds reads; a broken guarantee traps.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *         -Icsrc fuzz/fuzz_suffix.c csrc/suffix.c -o fuzz/out/fuzz_suffix
 *
 * See fuzz/README.md.
 */
#include "suffix.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define REQUIRE(cond) do { if (!(cond)) __builtin_trap(); } while (0)

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
    case 0: return s->vocab;                          /* the separator */
    case 1: return s->vocab + 1 + (b & 31);           /* never seen */
    case 2: return UINT32_MAX - (b & 1);              /* extreme */
    case 3: {                                         /* any id, two bytes */
        uint32_t v = (uint32_t)b | (uint32_t)next_byte(s) << 8;
        return v % s->vocab;
    }
    default: return (uint32_t)(b & 31) % s->vocab;    /* small ids, the common ones */
    }
}

static void query_index(const sfx_index *x, const uint8_t *data, size_t size) {
    sfx_index_info info;
    sfx_index_get_info(x, &info);
    REQUIRE(info.vocab_size >= 1 && info.vocab_size < SFX_MAX_VOCAB);
    REQUIRE(info.separator == info.vocab_size);
    REQUIRE(info.token_bytes == 2 || info.token_bytes == 4);
    REQUIRE(info.n_tokens >= 1 && info.n_tokens + info.n_documents == info.n_text);
    REQUIRE(info.file_size == size && info.memory_mapped == 0);
    REQUIRE(memchr(info.tokenizer_name, 0, sizeof info.tokenizer_name) != NULL);

    id_source src = {data, size, size > 512 ? 512 : 0, info.vocab_size};
    uint32_t ctx[48 + 16], toks[16];
    sfx_answer ans[16];
    for (int q = 0; q < 16; q++) {
        size_t n = next_byte(&src) % 48;
        for (size_t i = 0; i < n; i++) ctx[i] = next_id(&src);
        uint32_t max_match = next_byte(&src) % 20;
        uint64_t count = 0;
        uint32_t m = sfx_index_match(x, ctx, n, max_match, &count);
        REQUIRE(m <= n && (max_match == 0 || m <= max_match));
        REQUIRE(count <= info.n_tokens);
        REQUIRE(sfx_index_count(x, ctx + n - m, m) <= info.n_tokens);

        size_t k = 1 + next_byte(&src) % 16;
        uint32_t min_match = next_byte(&src) % 4;
        size_t got = sfx_index_draft(x, ctx, n, k, max_match, min_match, 1, 0.0, toks, ans);
        REQUIRE(got <= k);
        for (size_t i = 0; i < got; i++) {
            REQUIRE(toks[i] < info.vocab_size && toks[i] == ans[i].token);
            REQUIRE(ans[i].count >= 1 && ans[i].count <= ans[i].total);
            REQUIRE(ans[i].total <= info.n_tokens && ans[i].match >= 1);
            REQUIRE(i == 0 || ans[i].total <= ans[i - 1].total);
            ctx[n + i] = toks[i];
        }
        /* thresholds only shorten a draft */
        uint32_t min_count = next_byte(&src) % 4;
        double min_share = (double)(next_byte(&src) % 5) / 4.0;
        size_t short_k = sfx_index_draft(x, ctx, n, k, max_match, min_match, min_count, min_share,
                                         toks, NULL);
        REQUIRE(short_k <= got);
        /* the drafted text is in distribution: query what it ends with */
        m = sfx_index_match(x, ctx, n + got, 0, &count);
        REQUIRE(m <= n + got && count <= info.n_tokens);

        /* matching statistics of context + draft, and the places they point at */
        sfx_stat st[48 + 16];
        sfx_error err;
        uint32_t max_length = next_byte(&src) % 3 ? 0 : next_byte(&src) % 20;
        REQUIRE(sfx_index_matching_stats(x, ctx, n + got, max_length, st, &err) == OLIF_OK);
        for (size_t i = 0; i < n + got; i++) {
            REQUIRE(i + st[i].length <= n + got);
            REQUIRE(max_length == 0 || st[i].length <= max_length);
            REQUIRE(st[i].lo <= st[i].hi && st[i].hi <= info.n_tokens);
            REQUIRE((st[i].length == 0) == (st[i].lo == st[i].hi));
            REQUIRE(st[i].length == 0 || st[i].position < info.n_text);
            sfx_place pl[4];
            size_t np = 99;
            REQUIRE(sfx_index_places(x, st[i].lo, st[i].hi, 4, pl, &np, &err) == OLIF_OK);
            REQUIRE(np <= 4 && np <= st[i].hi - st[i].lo);
            for (size_t j = 0; j < np; j++)
                REQUIRE(pl[j].document < info.n_documents && pl[j].position < info.n_text &&
                        pl[j].offset <= pl[j].position);
            sfx_place one;
            if (st[i].length && sfx_index_locate(x, st[i].position, &one, &err) == OLIF_OK)
                REQUIRE(one.position == st[i].position && one.document < info.n_documents);
        }
        size_t np = 0;
        REQUIRE(sfx_index_places(x, 1, 0, 4, NULL, &np, &err) == OLIF_ERR_ARG && np == 0);
        REQUIRE(sfx_index_places(x, 0, info.n_tokens + 1, 4, NULL, &np, &err) == OLIF_ERR_ARG);
    }
}

static void query_ngram(const sfx_ngram *g, const uint8_t *data, size_t size) {
    sfx_ngram_info info;
    sfx_ngram_get_info(g, &info);
    REQUIRE(info.vocab_size >= 1 && info.vocab_size < SFX_MAX_VOCAB);
    REQUIRE(info.order >= 1 && info.order <= SFX_MAX_ORDER);
    REQUIRE(info.n_contexts >= 1 && info.n_pairs >= info.n_contexts);
    REQUIRE(info.n_instances >= info.n_pairs);
    REQUIRE(info.file_size == size && info.memory_mapped == 0);

    id_source src = {data, size, size > 512 ? 512 : 0, info.vocab_size};
    uint32_t ctx[16 + 16], toks[16], nt[32], nc[32];
    sfx_ngram_answer a, ans[16];
    for (int q = 0; q < 16; q++) {
        size_t n = next_byte(&src) % 12;
        for (size_t i = 0; i < n; i++) ctx[i] = next_id(&src);
        int found = sfx_ngram_lookup(g, ctx, n, &a);
        size_t nn = sfx_ngram_next(g, ctx, n, nt, nc, 32);
        if (found) {
            REQUIRE(a.token < info.vocab_size && a.count >= 1 && a.count <= a.total);
            REQUIRE(a.n_next >= 1 && nn == a.n_next && a.total <= info.n_instances);
            uint64_t sum = 0;
            for (size_t i = 0; i < nn && i < 32; i++) {
                REQUIRE(nt[i] < info.vocab_size && nc[i] >= 1 && nc[i] <= a.count);
                REQUIRE(i == 0 || nt[i - 1] < nt[i]);
                sum += nc[i];
            }
            REQUIRE(nn > 32 || sum == a.total);
        } else {
            REQUIRE(nn == 0 && a.total == 0);
        }
        size_t k = 1 + next_byte(&src) % 16;
        uint32_t min_samples = next_byte(&src) % 4, min_percent = next_byte(&src) % 101;
        size_t got = sfx_ngram_draft(g, ctx, n, k, min_samples, min_percent, toks, ans);
        REQUIRE(got <= k);
        for (size_t i = 0; i < got; i++) {
            REQUIRE(toks[i] == ans[i].token && toks[i] < info.vocab_size);
            REQUIRE(ans[i].total >= min_samples);
            REQUIRE(100ull * ans[i].count >= (uint64_t)min_percent * ans[i].total);
            ctx[n + i] = toks[i];
        }
        /* the first drafted token is the lookup's answer */
        if (got) REQUIRE(found && toks[0] == a.token);
        sfx_ngram_lookup(g, ctx, n + got, &a);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sfx_error err;
    for (uint32_t flags = 0; flags <= SFX_LOAD_SKIP_CHECKSUM; flags++) {
        sfx_index *x = NULL;
        sfx_status st = sfx_index_load_buffer(data, size, flags, &x, &err);
        if (st == OLIF_OK) {
            REQUIRE(x != NULL);
            query_index(x, data, size);
            sfx_index_free(x);
        } else {
            REQUIRE(x == NULL && err.code == (int)st && st <= OLIF_ERR_CANCELLED);
            REQUIRE(err.message[0] != '\0');
        }
        sfx_ngram *g = NULL;
        st = sfx_ngram_load_buffer(data, size, flags, &g, &err);
        if (st == OLIF_OK) {
            REQUIRE(g != NULL);
            query_ngram(g, data, size);
            sfx_ngram_free(g);
        } else {
            REQUIRE(g == NULL && err.code == (int)st && st <= OLIF_ERR_CANCELLED);
            REQUIRE(err.message[0] != '\0');
        }
    }
    return 0;
}
