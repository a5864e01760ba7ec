/*
 * igt_spill.h — temporary stores, sorted runs and their k-way merge for
 * bounded-memory builds; not part of the API. Format and guarantees in
 * igt_spill.c.
 */
#ifndef OLIFANT_IGT_SPILL_H
#define OLIFANT_IGT_SPILL_H

#include "igt_internal.h"

#define IGT__MAX_RECORD (4 * (IGT_MAX_WINDOW + 1))

/* Checksum over a byte stream that may arrive in pieces of any size. */
typedef struct {
    uint64_t h, word, n;
    uint32_t fill;
} igt__hasher;

void igt__hash_init(igt__hasher *s);
void igt__hash_update(igt__hasher *s, const uint8_t *p, size_t n);
uint64_t igt__hash_final(const igt__hasher *s);

/* One unlinked temporary file in `dir`. Appends are buffered; call
 * igt__store_sync before reading what was appended. */
typedef struct igt__store igt__store;

igt_status igt__store_open(const char *dir, igt__store **out, igt_error *err);
igt_status igt__store_append(igt__store *s, const void *data, size_t n, igt_error *err);
igt_status igt__store_sync(igt__store *s, igt_error *err);
igt_status igt__store_read(const igt__store *s, uint64_t at, void *data, size_t n,
                           igt_error *err);
uint64_t igt__store_size(const igt__store *s);
void igt__store_close(igt__store *s);

/* A finished run, as its writer describes it (what readers check against). */
typedef struct {
    igt__store *store;
    uint64_t offset, count;
    uint32_t rec_size, key_size, block_recs;
    uint64_t sums_checksum;
} igt__run;

typedef struct {
    igt__store *store;
    igt__run run;
    uint64_t *sums;
    size_t n_sums, cap_sums;
    igt__hasher block;
    uint32_t in_block;
    uint8_t prev[IGT__MAX_RECORD];
} igt__run_writer;

igt_status igt__run_begin(igt__run_writer *w, igt__store *s, uint32_t rec_size, uint32_t key_size,
                          igt_error *err);
/* n records of rec_size bytes, in order. */
igt_status igt__run_put(igt__run_writer *w, const uint8_t *recs, size_t n, igt_error *err);
igt_status igt__run_end(igt__run_writer *w, igt__run *out, igt_error *err);
void igt__run_abandon(igt__run_writer *w);

/* Record i of a run, unchecked (for positioning only). */
igt_status igt__run_record(const igt__run *r, uint64_t i, uint8_t *rec, igt_error *err);
igt_status igt__run_lower_bound(const igt__run *r, const uint8_t *key, uint32_t key_len,
                                uint64_t *out, igt_error *err);

/* Records begin..end-1 of a run, each block checked as it is read. */
typedef struct {
    igt__run run;
    uint64_t pos, end, buf_first;
    uint32_t buf_n;
    uint64_t *sums;
    uint8_t *buf;
    const uint8_t *cur;         /* the current record; NULL at the end */
    uint8_t prev[IGT__MAX_RECORD];
} igt__cursor;

igt_status igt__cursor_open(igt__cursor *c, const igt__run *run, uint64_t begin, uint64_t end,
                            igt_error *err);
igt_status igt__cursor_next(igt__cursor *c, igt_error *err);
void igt__cursor_close(igt__cursor *c);

/* Merge records [begin[i], end[i]) of runs (NULL: whole runs) in key order,
 * handing them to sink in batches of at most IGT__MERGE_BATCH. */
#define IGT__MERGE_BATCH 256
typedef igt_status (*igt__merge_sink)(void *ctx, const uint8_t *recs, size_t n, igt_error *err);
igt_status igt__merge(const igt__run *runs, const uint64_t *begin, const uint64_t *end,
                      uint32_t n_runs, igt__merge_sink sink, void *ctx, igt_error *err);

#endif /* OLIFANT_IGT_SPILL_H */
