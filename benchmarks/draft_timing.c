/*
 * draft_timing.c — microseconds per k-token draft in C, with no Python around it: the IGTree
 * (igtree.h), the suffix index and the static n-gram cache (suffix.h), on the same contexts.
 * Built and run by benchmarks/retrieval_peers.py:
 *
 *   cc -O2 -Icsrc benchmarks/draft_timing.c csrc/igtree.c csrc/suffix.c -lm -o draft_timing
 *   ./draft_timing MODEL.olif INDEX.sfx CACHE.ngc CONTEXTS.u32 L K REPEATS
 *
 * CONTEXTS.u32 holds n contexts of L uint32 ids each (oldest first). For each drafter it
 * prints one line: name, the median and the minimum over REPEATS of the mean microseconds
 * per draft (the minimum is the least disturbed by a loaded machine), the mean tokens
 * drafted. Drafters as the registry builds them: olifant (no thresholds), rest
 * (REST's spans 16 down to 2), ngram-cache (llama.cpp's static 2 samples, 50 %).
 */
#define _POSIX_C_SOURCE 200809L
#include "igtree.h"
#include "suffix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: %s MODEL.olif INDEX.sfx CACHE.ngc CONTEXTS.u32 L K REPEATS\n", argv[0]);
        return 2;
    }
    size_t L = (size_t)atoi(argv[5]), K = (size_t)atoi(argv[6]);
    int repeats = atoi(argv[7]);
    if (L < 1 || K < 1 || K > 64 || repeats < 1 || repeats > 64) return 2;
    FILE *f = fopen(argv[4], "rb");
    if (!f) return 3;
    fseek(f, 0, SEEK_END);
    size_t bytes = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    size_t n = bytes / (4 * L);
    uint32_t *ctx = malloc(n * L * 4 + 4);
    if (!ctx || fread(ctx, 4, n * L, f) != n * L) return 3;
    fclose(f);

    igt_error ie;
    sfx_error se;
    igt_model *m = NULL;
    sfx_index *x = NULL;
    sfx_ngram *g = NULL;
    if (igt_load(argv[1], 0, &m, &ie)) { fprintf(stderr, "%s\n", ie.message); return 4; }
    if (sfx_index_load(argv[2], 0, &x, &se)) { fprintf(stderr, "%s\n", se.message); return 4; }
    if (sfx_ngram_load(argv[3], 0, &g, &se)) { fprintf(stderr, "%s\n", se.message); return 4; }

    uint32_t out[64];
    sfx_answer sa[64];
    sfx_ngram_answer na[64];
    igt_answer ia[64];
    const char *names[3] = {"olifant", "rest", "ngram-cache"};
    for (int d = 0; d < 3; d++) {
        double per[64];
        double drafted = 0;
        for (int r = 0; r < repeats; r++) {
            size_t total = 0;
            double t0 = now();
            for (size_t i = 0; i < n; i++) {
                const uint32_t *c = ctx + i * L;
                if (d == 0) total += igt_draft(m, c, L, K, 0, 0.0, out, ia);
                else if (d == 1) total += sfx_index_draft(x, c, L, K, 16, 2, 1, 0.0, out, sa);
                else total += sfx_ngram_draft(g, c, L, K, 2, 50, out, na);
            }
            per[r] = (now() - t0) / (double)n * 1e6;
            drafted = (double)total / (double)n;
        }
        qsort(per, (size_t)repeats, sizeof *per, cmp_double);
        printf("%s %.3f %.3f %.3f\n", names[d], per[repeats / 2], per[0], drafted);
    }
    igt_free(m);
    sfx_index_free(x);
    sfx_ngram_free(g);
    free(ctx);
    return 0;
}
